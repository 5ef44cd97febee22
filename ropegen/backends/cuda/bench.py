"""The CUDA target's bench (found by ropegen.bench.targets through its `device_bench` hook): the CUDA
clock for the shared device bench (ropegen.bench.device), measuring device work, not the host.

How a row is timed (measure()): the work (one launch into preallocated outputs, no checks) is
captured as a CUDA graph of INNER launches on a bench stream (else, when capture fails, issued as a
batch of INNER launches, and the row says so); CUDA events around each graph replay give the hot time
per launch. For the cold time the L2 cache is flushed (a write of twice its size) before every single
launch, events around that one launch; flushes queued ahead keep the GPU busy while Python issues the
launch, so the events see device time. At decode sizes the whole Python call (the default call a user
writes, outputs allocated) is also timed on the host. The yardstick, a device-to-device copy of the
same bytes, is timed the same way, and so are the peers (ropegen.bench.peers: PyTorch eager and
torch.compile, FlashInfer, Liger), each captured through torch.

Needs CuPy and a GPU (PyTorch for the peers); in CI the loop runs on a fake (tests/test_bench_cuda.py).
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import time as host_time
from typing import Callable, Iterable

import numpy as np

from ropegen.bench import device
from ropegen.bench.device import SHAPE_KEYS, Timing, Work, require_memory, shape_bytes  # noqa: F401
from ropegen.bench.peers import case as peer_cases
from ropegen.ir.dtypes import DTYPES

WARMUP = 3          # launches before anything is timed (module load, autotuning, torch.compile)
INNER = 20          # launches per graph (or batch) in the hot time
HEAD_START = 4      # flushes queued before the cold loop, so that the host stays ahead of the GPU
CALLS = 50          # whole Python calls timed on the host at decode sizes
MIN_FLUSH = 64 << 20
IMPL = "ropegen cuda"
COPY_LABEL = "device-to-device copy"
TOKENS = (1, 16, 64, 512, 4096, 16384, 131072)
DEFAULT_SHAPES = tuple((t, 32, 8, 128, dt) for t in TOKENS for dt in ("bf16", "f32"))


def parse_shapes(shapes) -> tuple[tuple, ...]:
    """ropegen.bench.device.parse_shapes with this bench's defaults (DEFAULT_SHAPES) for None."""
    return device.parse_shapes(shapes or DEFAULT_SHAPES)


class CupyGpu:
    """The CUDA calls measure() makes, through CuPy (and torch for torch work), on one bench stream.
    tests/test_bench_cuda.py drives measure() with a fake of this class."""

    def __init__(self):
        import cupy
        self.cupy = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)      # graph capture needs a non-default stream
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        self.l2_bytes = int(props.get("l2CacheSize", 0))
        self.flush_bytes = max(2 * self.l2_bytes, MIN_FLUSH)
        self.flush_buffer = cupy.empty(self.flush_bytes, dtype=cupy.uint8)
        self.flushes = 0
        self.why = ""      # the last capture failure

    @contextlib.contextmanager
    def scope(self):
        """The bench stream as CuPy's and torch's current stream (peers and torch inputs launch there),
        entered after the whole device is idle: inputs made on other streams (uploads, torch's default
        stream, which a non-blocking stream does not wait for) are complete."""
        self.cupy.cuda.Device().synchronize()
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.stream)
            if "torch" in sys.modules:
                import torch
                if torch.cuda.is_available():
                    stack.enter_context(torch.cuda.stream(torch.cuda.ExternalStream(self.stream.ptr)))
            yield

    def event(self):
        return self.cupy.cuda.Event()

    def record(self, event) -> None:
        event.record(self.stream)

    def elapsed_ms(self, start, stop) -> float:
        stop.synchronize()
        return self.cupy.cuda.get_elapsed_time(start, stop)

    def sync(self) -> None:
        self.stream.synchronize()

    def flush(self) -> None:
        """Write twice the L2 size, a different byte each time: every line of the work's data is evicted."""
        self.flushes += 1
        self.cupy.cuda.runtime.memsetAsync(self.flush_buffer.data.ptr, self.flushes & 0xFF, self.flush_bytes,
                                           self.stream.ptr)

    def capture(self, fn: Callable[[], object], n: int, library: str):
        """A replay function of a CUDA graph of n calls of fn, or None (self.why says why)."""
        try:
            if library == "torch":
                import torch
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):      # torch's allocator knows it is capturing
                    for _ in range(n):
                        fn()
                return graph.replay
            return self._capture_cupy(fn, n)
        except Exception as e:  # noqa: BLE001 - any failure: time a batch instead, and say so
            self.why = f"{type(e).__name__}: {str(e)[:120]}"
            return None

    def _capture_cupy(self, fn, n: int):
        err = None
        self.stream.begin_capture()
        try:
            for _ in range(n):
                fn()
        except Exception as e:  # noqa: BLE001 - end the capture before reporting it
            err = e
        try:
            graph = self.stream.end_capture()
        except Exception as e:  # noqa: BLE001
            err = err or e
        if err is not None:
            raise err
        return lambda: graph.launch(self.stream)


def _batch(fn: Callable[[], object], n: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(n):
            fn()
    return run


def measure(gpu, work: Work, repeats: int, inner: int = INNER) -> Timing:
    """Median device milliseconds per launch of `work`, hot and cold, and at decode sizes the host's
    microseconds per whole call (see the module docstring). `gpu` is a CupyGpu (or a fake)."""
    with gpu.scope():
        for _ in range(WARMUP):
            work.launch()
        gpu.sync()
        many = gpu.capture(work.launch, inner, work.library)
        method = f"CUDA graph of {inner} launches"
        if many is None:
            many, method = _batch(work.launch, inner), f"batch of {inner} launches (graph capture failed: {gpu.why})"
        one = gpu.capture(work.launch, 1, work.library) or work.launch
        many()
        gpu.sync()
        hot = _events(gpu, many, repeats, flush=False)
        for _ in range(HEAD_START):
            gpu.flush()
        cold = _events(gpu, one, repeats, flush=True)
        call_us = _host_calls(gpu, work.call) if work.decode and work.call is not None else None
    return Timing(hot_ms=statistics.median(t / inner for t in hot), cold_ms=statistics.median(cold),
                  call_us=call_us, method=f"{method}; cold: L2 flushed ({gpu.flush_bytes >> 20} MiB) before each")


def _events(gpu, run: Callable[[], object], repeats: int, flush: bool) -> list[float]:
    """Milliseconds between events recorded right before and after each of `repeats` runs (after a
    flush each when `flush`); read once all are queued."""
    pairs = []
    for _ in range(max(1, repeats)):
        if flush:
            gpu.flush()
        start, stop = gpu.event(), gpu.event()
        gpu.record(start)
        run()
        gpu.record(stop)
        pairs.append((start, stop))
    gpu.sync()
    return [gpu.elapsed_ms(a, b) for a, b in pairs]


def _host_calls(gpu, call: Callable[[], object], n: int = CALLS) -> float:
    """Microseconds of host time per whole Python call, over n calls issued back to back (a decode
    step's launch cost; the device work overlaps it)."""
    call()
    gpu.sync()
    t0 = host_time.perf_counter()
    for _ in range(n):
        call()
    elapsed = host_time.perf_counter() - t0
    gpu.sync()
    return elapsed * 1e6 / n


def copy_work(gpu, nbytes: int) -> Work:
    """A device-to-device copy moving `nbytes` in total (reads nbytes/2, writes nbytes/2), on the bench
    stream: cudaMemcpyAsync through CuPy."""
    half = max(1, nbytes // 2)
    cp = gpu.cupy
    src, dst = cp.ones(half, dtype=cp.uint8), cp.empty(half, dtype=cp.uint8)
    return Work(lambda: dst.data.copy_from_device_async(src.data, half, gpu.stream), library="cupy")


def prepare(gpu, kernel, inputs: list, decode: bool) -> Work:
    """ropegen's launch into outputs allocated once (out=, check=False: nothing allocated, nothing read
    back, so it can be captured) and the user's whole default call."""
    with gpu.scope():
        outs = kernel(*inputs, check=False, stream=gpu.stream)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return Work(launch=lambda: kernel(*inputs, out=outs, check=False, stream=gpu.stream),
                call=lambda: kernel(*inputs), library="cupy", decode=decode)


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
        bf16 = a.dtype == DTYPES["bf16"].np_dtype
        t = torch.from_numpy(a.astype(np.float32) if bf16 else a).to("cuda")
        return t.to(torch.bfloat16) if bf16 else t
    except Exception:  # noqa: BLE001
        return None


def facts(gpu) -> dict:
    """The device and software facts the JSON document records."""
    cp = gpu.cupy
    rt = cp.cuda.runtime
    dev = cp.cuda.Device()
    props = rt.getDeviceProperties(dev.id)
    name = props["name"]
    out = dict(name=name.decode() if isinstance(name, bytes) else str(name), compute_capability=dev.compute_capability,
               sms=int(props.get("multiProcessorCount", 0)), l2_bytes=gpu.l2_bytes, flush_bytes=gpu.flush_bytes,
               memory_bytes=int(props.get("totalGlobalMem", 0)), driver=rt.driverGetVersion(),
               runtime=rt.runtimeGetVersion(), cupy=cp.__version__)
    with contextlib.suppress(Exception):
        out["nvrtc"] = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
    for module in ("torch", "triton", "flashinfer", "liger_kernel"):
        with contextlib.suppress(Exception):
            out[module] = __import__(module).__version__
    return out


def clock(gpu=None) -> device.DeviceClock:
    """The current CuPy device's clock (imports CuPy: call it only once the host checks passed)."""
    gpu = gpu or CupyGpu()
    free = int(gpu.cupy.cuda.runtime.memGetInfo()[0])      # the flush buffer is already taken
    info = facts(gpu)

    def time_work(fn, repeats: int) -> Timing:
        return measure(gpu, fn if isinstance(fn, Work) else Work(fn), repeats)

    def peer_rows(case) -> list[dict]:
        with gpu.scope():
            return peer_cases.device_rows(case, lambda w: time_work(w, case.repeats), device="cuda")

    return device.DeviceClock(backend="cuda", name=info["name"], free_bytes=free, time=time_work,
                              copy_ms=lambda nbytes, repeats: time_work(copy_work(gpu, nbytes), repeats),
                              to_device=_to_device, impl=IMPL, copy_label=COPY_LABEL,
                              prepare=lambda k, inputs, decode: prepare(gpu, k, inputs, decode),
                              peer_rows=peer_rows, facts=info)


def bench_cuda(ops: Iterable, shapes=None, repeats: int = 100) -> list[dict]:
    """Time every operator that fits a shape on the CUDA device (ropegen.bench.device.run: the rows,
    their keys and the shapes accepted are documented there); the default shapes are T = 1 ... 131072
    for Llama-3-8B q/k (32 + 8 heads of 128) in bf16 and f32."""
    return device.run(ops, parse_shapes(shapes), repeats, clock)


def format_cuda(results: list[dict]) -> str:
    """A plain table of bench_cuda's rows."""
    return device.format_results(results, COPY_LABEL)


def json_document(results: list[dict], command: str) -> dict:
    """What `--json` writes for a CUDA run: the device's facts, the command, the rows (device.document)."""
    return device.document(results, None, [command])


# the hooks ropegen.bench.targets looks for
device_bench = bench_cuda
format_results = format_cuda


def main(argv: list[str] | None = None) -> int:
    """`python -m ropegen.backends.cuda.bench [-o FILE] [--repeats N] [--shape T=...]`: the llama3 suite
    (RoPE with llama3 scaling, its cached form, RMSNorm; bf16 and f32) at the issue's shapes, the table
    on stdout and, with -o, the JSON document (device facts, this command, the rows)."""
    import argparse
    import json
    import shlex
    from pathlib import Path

    from ropegen.backends.cuda.backend import unavailable
    from ropegen.bench.suites import llama3_suite
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m ropegen.backends.cuda.bench", description=main.__doc__)
    ap.add_argument("-o", "--output", default=None, metavar="FILE.json")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--shape", action="append", default=None)
    args = ap.parse_args(argv)
    why = unavailable()
    if why:
        print(f"error: the CUDA backend cannot run here: {why}", file=sys.stderr)
        return 2
    try:
        rows = device.run(llama3_suite(), parse_shapes(args.shape), args.repeats, clock)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_cuda(rows))
    if args.output:
        doc = json_document(rows, shlex.join(["python", "-m", "ropegen.backends.cuda.bench", *argv]))
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
