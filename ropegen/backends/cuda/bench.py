"""The CUDA target's bench (found by ropegen.bench.targets through its `device_bench` hook): CUDA
events, warm-up, many repeats, the median.

Every row is measured next to a device-to-device copy of the same bytes in the same run (the
yardstick: ratio = copy time / kernel time, 1.0 = copy speed), and next to the device peers that can be
imported here (ropegen.bench.peers.torch: PyTorch eager Hugging Face style RoPE, the same under
torch.compile, Liger-Kernel's Triton RoPE and FlashInfer's apply_rope_pos_ids).

Needs CuPy and a GPU (PyTorch for the peers); nothing here runs in CI.
"""
from __future__ import annotations

import statistics
from typing import Callable, Iterable

import numpy as np

from ropegen.bench.peers import torch as torch_peers
from ropegen.ir.dtypes import DTYPES

WARMUP = 10
INNER = 10
DEFAULT_SHAPES = tuple((t, 32, 8, 128, dt) for t in (1, 64, 4096, 16384) for dt in ("bf16", "f32"))


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


def _row(**kw) -> dict:
    ms, nbytes = kw["ms"], kw["bytes"]
    kw["gbps"] = nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")
    return kw


def _rope_inputs(op, tokens: int, hq: int, hk: int, d: int, dtype: str):
    """Device inputs for a llama-style operator (q, k, positions[, cos, sin]) at the given shape,
    or None when the operator's declared shape is not of that form."""
    p = op.plan
    if p.token_layout != "t" or p.head_dim != d:
        return None
    heads = [t.real_heads for t in p.inputs if t.heads is not None]
    if heads != [hq, hk][:len(heads)] or p.storage.name != dtype:
        return None
    rng = np.random.default_rng(0)
    np_dt = DTYPES[dtype].np_dtype
    arrays = []
    for t in p.inputs:
        if t.heads is not None:
            a = rng.standard_normal((tokens, t.real_heads * d) if t.rank == 2 else (tokens, t.real_heads, d))
            arrays.append(a.astype(np_dt))
        elif p.positions.ids == t.name:
            arrays.append(np.arange(tokens, dtype=t.dtype.np_dtype))
        elif p.angles.kind == "table" and t.name in (p.angles.cos, p.angles.sin):
            rows = max(tokens, 1)
            ang = np.arange(rows)[:, None] * (10000.0 ** (-np.arange(p.angles.width) * 2.0 / d))   # [rows, width]
            f = np.cos if t.name == p.angles.cos else np.sin
            arrays.append(f(ang).astype(t.dtype.np_dtype))
        else:
            return None
    # upload once (bfloat16 as raw bits: the backend reads the bits)
    dev = [_to_device(a) for a in arrays]
    return None if any(d is None for d in dev) else dev


_DEVICE_INPUTS = {"rope": _rope_inputs}


def _to_device(a: np.ndarray):
    """A device array the CUDA backend accepts: CuPy (bfloat16 needs CuPy >= 14 with ml_dtypes),
    else a PyTorch tensor; None when neither can hold it."""
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


SHAPE_KEYS = ("T", "tokens", "HQ", "HK", "D", "dtype")


def parse_shapes(shapes) -> tuple[tuple, ...]:
    """None -> DEFAULT_SHAPES; tuples pass through; CLI strings like "T=4096" (optionally
    ",dtype=f32", ",HQ=32,HK=8,D=128") pick those token counts for both default dtypes unless a dtype
    is given. A malformed item, an unknown key or an impossible size is a ValueError."""
    from ropegen.bench.shapes import shape_items
    if not shapes:
        return DEFAULT_SHAPES
    out: list[tuple] = []
    for sh in shapes:
        if isinstance(sh, tuple):
            out.append(sh)
            continue
        kv = dict(shape_items(sh))
        for key in kv:
            if key not in SHAPE_KEYS:
                raise ValueError(f"shape '{sh}': the CUDA bench takes {', '.join(SHAPE_KEYS)}, not '{key}'")
        ints = {}
        for key, default, lo in (("T", 4096, 0), ("HQ", 32, 1), ("HK", 8, 1), ("D", 128, 2)):
            raw = kv.get(key, kv.get("tokens", default) if key == "T" else default)
            ints[key] = int(raw)   # shape_items checked the syntax
            if ints[key] < lo:
                raise ValueError(f"shape '{sh}': {key}={ints[key]}: it must be at least {lo}")
        if ints["D"] % 2:
            raise ValueError(f"shape '{sh}': D={ints['D']}: head_dim must be even")
        dts = (kv["dtype"],) if "dtype" in kv else ("bf16", "f32")
        out += [(ints["T"], ints["HQ"], ints["HK"], ints["D"], dt) for dt in dts]
    return tuple(out)


def shape_bytes(tokens: int, hq: int, hk: int, d: int, dtype: str) -> tuple[int, int]:
    """(host, device) bytes one shape needs, about, before anything is allocated: on the host the
    float64 draws and their cast (q, k) and float64 cos/sin tables; on the device the inputs and
    outputs, the copy yardstick's two buffers and the peers' tensors (four times what one call moves)."""
    n = tokens * (hq + hk) * d
    host = n * (8 + DTYPES[dtype].itemsize) + 2 * max(tokens, 1) * d * 8
    device = 4 * 2 * n * DTYPES[dtype].itemsize
    return host, device


def require_memory(shapes: Iterable[tuple], device_free: int | None = None) -> None:
    """Raise TooLarge (a ValueError) for a shape that cannot fit in the host memory limit or, when
    `device_free` is given, in half the device's free memory."""
    from ropegen.runtime.memory import TooLarge, format_bytes, limit_hint, memory_limit
    limit = memory_limit()
    for tokens, hq, hk, d, dtype in shapes:
        host, device = shape_bytes(tokens, hq, hk, d, dtype)
        label = f"T={tokens},HQ={hq},HK={hk},D={d},dtype={dtype}"
        if host > limit:
            raise TooLarge(f"shape {label} is too large: it needs about {format_bytes(host)} of host memory, "
                           f"over {format_bytes(limit)} ({limit_hint()})")
        if device_free is not None and device > device_free // 2:
            raise TooLarge(f"shape {label} is too large: it needs about {format_bytes(device)} of device memory, "
                           f"over half the {format_bytes(device_free)} free")


def format_cuda(results: list[dict]) -> str:
    """A plain table of bench_cuda's rows."""
    head = ("impl", "op", "dtype", "T", "med ms", "MB", "GB/s", "vs copy")
    rows = [head] + [(r["impl"], r["op"], r["dtype"], str(r["tokens"]), f"{r['ms']:.4f}", f"{r['bytes'] / 1e6:.1f}",
                      f"{r['gbps']:.1f}", f"{r['ratio']:.2f}") for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    if results:
        lines.append(f"device: {results[0]['device']}; vs copy = same-run device-to-device copy time / time")
    return "\n".join(lines)


def bench_cuda(ops: Iterable, shapes=None, repeats: int = 100) -> list[dict]:
    """Time every RoPE operator that fits a shape (tokens, q heads, k heads, head_dim, dtype);
    `shapes` may also be the CLI's strings ("T=4096", "T=1,dtype=f32") or None for the defaults.

    Returns one dict per measurement: op, impl, tokens, heads_q, heads_k, head_dim, dtype, ms
    (median), bytes (read + written), gbps, copy_ms and ratio (= copy_ms / ms, the fraction of the
    same-run device-to-device copy speed), device (name).
    """
    shapes = parse_shapes(shapes)
    if isinstance(repeats, bool) or int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    require_memory(shapes)          # host sizes first: nothing is allocated yet
    import cupy
    require_memory(shapes, int(cupy.cuda.runtime.memGetInfo()[0]))
    device = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    device = device.decode() if isinstance(device, bytes) else str(device)
    results: list[dict] = []
    ops = list(ops)
    for tokens, hq, hk, d, dtype in shapes:
        shape = dict(tokens=tokens, heads_q=hq, heads_k=hk, head_dim=d, dtype=dtype, device=device)
        nbytes = 2 * tokens * (hq + hk) * d * DTYPES[dtype].itemsize
        copy_ms = _copy_ms(nbytes, repeats)
        results.append(_row(op="-", impl="device-to-device copy", ms=copy_ms, bytes=nbytes, copy_ms=copy_ms,
                            ratio=1.0, **shape))
        base = 10000.0
        for op in ops:
            make = _DEVICE_INPUTS.get(op.kind)   # the CUDA bench times RoPE operators only
            inputs = make(op, tokens, hq, hk, d, dtype) if make else None
            if inputs is None:
                continue
            if op.plan.angles.kind == "exact":
                base = 1.0 / op.plan.angles.inv_freq[1] ** (d / 2.0) if len(op.plan.angles.inv_freq) > 1 else base
            kernel = op.kernel("cuda")
            ms = time_gpu(lambda: kernel(*inputs, check=False), repeats)
            results.append(_row(op=op.name, impl="ropegen cuda", ms=ms, bytes=nbytes, copy_ms=copy_ms,
                                ratio=copy_ms / ms, **shape))
        for r in _peers(tokens, hq, hk, d, dtype, repeats, base):
            ratio = copy_ms / r["ms"] if r["ms"] == r["ms"] else float("nan")
            results.append(_row(op="-", copy_ms=copy_ms, ratio=ratio, **shape, **r))
    return results


# the hooks ropegen.bench.targets looks for
device_bench = bench_cuda
format_results = format_cuda
