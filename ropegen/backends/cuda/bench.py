"""The CUDA target's bench (found by ropegen.bench.targets through its `device_bench` hook): the CUDA
clock for the shared device bench (ropegen.bench.device): CUDA events, warm-up, many repeats, the
median; a device-to-device copy as the yardstick; upload through CuPy (else PyTorch).

The peers are the device peers that can be imported here (ropegen.bench.peers.torch: PyTorch eager
Hugging Face style RoPE, the same under torch.compile, Liger-Kernel's Triton RoPE and FlashInfer's
apply_rope_pos_ids), timed with the same clock on torch's stream.

Needs CuPy and a GPU (PyTorch for the peers); nothing here runs in CI.
"""
from __future__ import annotations

import statistics
from typing import Callable, Iterable

import numpy as np

from ropegen.bench import device
from ropegen.bench.device import DEFAULT_SHAPES, SHAPE_KEYS, parse_shapes, require_memory, shape_bytes  # noqa: F401
from ropegen.bench.peers import torch as torch_peers
from ropegen.ir.dtypes import DTYPES

WARMUP = 10
INNER = 10
IMPL = "ropegen cuda"
COPY_LABEL = "device-to-device copy"


def time_gpu(fn: Callable[[], object], repeats: int, warmup: int = WARMUP, inner: int = INNER) -> float:
    """Median milliseconds per fn() on the current CuPy stream: CUDA events around batches of
    `inner` calls (so that Python's launch overhead overlaps the GPU work, as in a real model),
    `repeats` batches after `warmup` calls."""
    import cupy
    stream = cupy.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    times = []
    for _ in range(max(1, repeats)):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        for _ in range(inner):
            fn()
        stop.record(stream)
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / inner)
    return statistics.median(times)


def _copy_ms(nbytes: int, repeats: int) -> float:
    """A device-to-device copy moving `nbytes` in total (reads nbytes/2, writes nbytes/2)."""
    import cupy
    half = max(1, nbytes // 2)
    src = cupy.empty(half, dtype=cupy.uint8)
    dst = cupy.empty(half, dtype=cupy.uint8)
    return time_gpu(lambda: dst.data.copy_from_device_async(src.data, half), repeats)


def _to_device(a: np.ndarray):
    """A device array the CUDA backend accepts: CuPy (bfloat16 needs CuPy >= 14 with ml_dtypes),
    else a PyTorch tensor; None when neither can hold it (bfloat16 goes up as its value, the backend
    reads the bits)."""
    import cupy
    try:
        return cupy.asarray(a)
    except Exception:  # noqa: BLE001 - e.g. bfloat16 on an older CuPy
        pass
    try:
        import torch
        t = torch.from_numpy(a.astype(np.float32) if a.dtype == DTYPES["bf16"].np_dtype else a).to("cuda")
        return t.to(torch.bfloat16) if a.dtype == DTYPES["bf16"].np_dtype else t
    except Exception:  # noqa: BLE001
        return None


def _peers(tokens: int, hq: int, hk: int, d: int, dtype: str, repeats: int, base: float) -> list[dict]:
    """The torch-based device peers, timed with this bench's clock on torch's current stream."""
    def torch_ms(fn) -> float:
        import cupy
        import torch
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            return time_gpu(fn, repeats)
    return torch_peers.measure(tokens, hq, hk, d, dtype, base, torch_ms, device="cuda")


def _unchecked(kernel, inputs):
    return kernel(*inputs, check=False)     # the inputs were built to fit: time the launch, not the checks


def clock() -> device.DeviceClock:
    """The current CuPy device's clock (imports CuPy: call it only once the host checks passed)."""
    import cupy
    free = int(cupy.cuda.runtime.memGetInfo()[0])
    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return device.DeviceClock(backend="cuda", name=name, free_bytes=free, time=time_gpu, copy_ms=_copy_ms,
                              to_device=_to_device, impl=IMPL, copy_label=COPY_LABEL, peers=_peers,
                              call=_unchecked)


def bench_cuda(ops: Iterable, shapes=None, repeats: int = 100) -> list[dict]:
    """Time every RoPE operator that fits a shape on the CUDA device (ropegen.bench.device.run: the
    rows, their keys and the shapes accepted are documented there)."""
    return device.run(ops, shapes, repeats, clock)


def format_cuda(results: list[dict]) -> str:
    """A plain table of bench_cuda's rows."""
    return device.format_results(results, COPY_LABEL)


# the hooks ropegen.bench.targets looks for
device_bench = bench_cuda
format_results = format_cuda
