"""The OpenCL target's bench (found by ropegen.bench.targets through its `device_bench` hook): the
shared device bench (ropegen.bench.device) on the default OpenCL queue, next to an OpenCL buffer
copy of the same bytes in the same run.

The clock is the host's: batches of INNER calls, then finish(), so a row is what a caller waits for
(on a CPU device such as PoCL the device is the host anyway). Peers: none on OpenCL.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Iterable

import numpy as np

from ropegen.bench import device

WARMUP = 5
INNER = 10
IMPL = "ropegen opencl"
COPY_LABEL = "OpenCL buffer copy"


def _time(queue) -> Callable[[Callable[[], object], int], float]:
    def time_ms(fn: Callable[[], object], repeats: int) -> float:
        """Median milliseconds per fn(): `repeats` batches of INNER calls after WARMUP, each batch ended by finish()."""
        for _ in range(WARMUP):
            fn()
        queue.finish()
        times = []
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            for _ in range(INNER):
                fn()
            queue.finish()
            times.append((time.perf_counter() - t0) * 1e3 / INNER)
        return statistics.median(times)
    return time_ms


def clock() -> device.DeviceClock:
    """The clock of the default OpenCL device (backend.default_queue: PYOPENCL_CTX, else the first GPU)."""
    import pyopencl as cl
    import pyopencl.array as cla

    from ropegen.backends.opencl.backend import default_queue
    queue = default_queue()
    time_ms = _time(queue)

    def copy_ms(nbytes: int, repeats: int) -> float:
        half = max(1, nbytes // 2)
        src, dst = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, half), cl.Buffer(queue.context,
                                                                                      cl.mem_flags.READ_WRITE, half)
        return time_ms(lambda: cl.enqueue_copy(queue, dst, src, byte_count=half), repeats)

    dev = queue.device
    return device.DeviceClock(backend="opencl", name=f"{dev.name} ({dev.platform.name})",
                              free_bytes=int(dev.global_mem_size), time=time_ms, copy_ms=copy_ms,
                              to_device=lambda a: cla.to_device(queue, np.ascontiguousarray(a)),
                              impl=IMPL, copy_label=COPY_LABEL, call=lambda k, inputs: k(*inputs, check=False))


def bench_opencl(ops: Iterable, shapes=None, repeats: int = 100) -> list[dict]:
    """Time every RoPE operator that fits a shape on the OpenCL device (ropegen.bench.device.run)."""
    return device.run(ops, shapes, repeats, clock)


def format_opencl(results: list[dict]) -> str:
    return device.format_results(results, COPY_LABEL)


# the hooks ropegen.bench.targets looks for
device_bench = bench_opencl
format_results = format_opencl
