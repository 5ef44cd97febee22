"""The OpenCL target's bench (found by ropegen.bench.targets through its `device_bench` hook): the
shared device bench (ropegen.bench.device) on the default OpenCL queue, timed by the host around
batches of calls ended by finish(), next to an OpenCL buffer copy of the same bytes in the same run.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ropegen.bench import device

COPY_LABEL = "OpenCL buffer copy"


def _user_errors() -> tuple[type[BaseException], ...]:
    from ropegen.backends.opencl.backend import OpenCLError
    return (OpenCLError,)


USER_ERRORS = _user_errors()      # the device cannot build or run an operator: the CLI says so, exit 2


def clock() -> device.DeviceClock:
    """The clock of the default OpenCL device (backend.default_queue: PYOPENCL_CTX, else the first GPU)."""
    import pyopencl as cl
    import pyopencl.array as cla

    from ropegen.backends.opencl.backend import default_queue
    queue = default_queue()
    time_ms = device.host_timer(queue.finish)

    def copy_ms(nbytes: int, repeats: int) -> float:
        half = max(1, nbytes // 2)
        src, dst = (cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, half) for _ in range(2))
        for b in (src, dst):   # touched first: on a CPU device an untouched buffer reads the shared zero page
            cl.enqueue_fill_buffer(queue, b, np.uint8(1), 0, half)
        return time_ms(lambda: cl.enqueue_copy(queue, dst, src, byte_count=half), repeats)

    dev = queue.device
    return device.DeviceClock(backend="opencl", name=f"{dev.name} ({dev.platform.name})",
                              free_bytes=int(dev.global_mem_size), time=time_ms, copy_ms=copy_ms,
                              to_device=lambda a: cla.to_device(queue, np.ascontiguousarray(a)),
                              impl="ropegen opencl", copy_label=COPY_LABEL,
                              call=lambda k, inputs: k(*inputs, check=False))


def device_bench(ops: Iterable, shapes=None, repeats: int = 100) -> list[dict]:
    """Time every RoPE operator that fits a shape on the OpenCL device (ropegen.bench.device.run)."""
    return device.run(ops, shapes, repeats, clock)


def format_results(results: list[dict]) -> str:
    return device.format_results(results, COPY_LABEL)
