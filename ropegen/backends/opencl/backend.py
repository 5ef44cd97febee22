"""The OpenCL backend: per operator one .cl file and its host loader (templates/opencl), built for the
call's context and run through pyopencl.

The Backend class is a backends/gpu.GpuBackend (lower/gpu decides what the templates print,
facts.py how OpenCL C spells it). Loading an operator runs its generated host loader, so the
options and argument order a user of the loader gets are the ones every call here uses; memory.py
turns arrays into buffers. pyopencl is imported only when an operator runs.
"""
from __future__ import annotations

import os
import types

from ropegen.backends.gpu import GpuBackend
from ropegen.backends.opencl import facts
from ropegen.backends.opencl.memory import ClMemory
from ropegen.render import provenance, render
from ropegen.runtime import gpu_call

KERNEL = "the OpenCL kernel"    # how status messages name it


class OpenCLError(RuntimeError):
    """The device cannot build or run an operator as its numerics require (a user-facing error)."""


def default_queue():
    """The queue of the device the calls use when no pyopencl array names one: the context that
    PYOPENCL_CTX selects, else the first GPU of any platform, else the first device."""
    global _QUEUE, _CONTEXT
    if _QUEUE is None:
        import pyopencl as cl
        if os.environ.get("PYOPENCL_CTX"):
            ctx = cl.create_some_context(interactive=False)
        else:
            devices = [d for p in cl.get_platforms() for d in p.get_devices()]
            gpus = [d for d in devices if d.type & cl.device_type.GPU]
            ctx = cl.Context([(gpus or devices)[0]])
        _CONTEXT, _QUEUE = ctx, cl.CommandQueue(ctx)   # the context is kept: not every runtime's queue retains it
    return _QUEUE


_QUEUE = _CONTEXT = None


def unavailable() -> str | None:
    """None when the default OpenCL device builds and runs a kernel, else why not (asked once)."""
    global _WHY
    if _WHY is None:
        _WHY = _probe() or ""
    return _WHY or None


_WHY: str | None = None


def _probe() -> str | None:
    try:
        import pyopencl as cl
        queue = default_queue()
    except Exception as e:  # noqa: BLE001 - any failure means: cannot run here
        return f"no OpenCL device ({type(e).__name__}: {str(e).splitlines()[0]}); pip install 'ropegen[opencl]'"
    try:   # pip's PoCL 3.0 (LLVM 14), e.g., builds nothing on CPUs newer than its LLVM
        cl.Program(queue.context, "__kernel void probe(__global int* x) { x[0] = 1; }").build()
    except Exception as e:  # noqa: BLE001
        why = [ln.strip() for ln in str(e).splitlines() if "error:" in ln] or str(e).splitlines()[:1]
        return f"the OpenCL device '{queue.device.name}' ({queue.device.platform.version}) cannot build: {why[0]}"
    return None


def _memory(queue) -> ClMemory:
    return ClMemory(queue if queue is not None else default_queue())


def _queue_of(objs):
    """The queue of the first pyopencl array among `objs` (None when there is none)."""
    for a in objs:
        for x in a if isinstance(a, (tuple, list)) else (a,):
            if type(x).__module__.startswith("pyopencl"):
                return x.queue
    return None


class OpenCLBackend(GpuBackend):
    name = "opencl"
    folder = "opencl"
    comment = "//"
    reserved = facts.RESERVED
    facts = facts
    memory = staticmethod(_memory)
    suffix = "cl"
    kernel_word = KERNEL

    def sources(self, plan, spec_file: str) -> dict[str, str]:
        files = super().sources(plan, spec_file)
        header = provenance("#", spec_file, plan.spec_sha256, plan.name)   # a Python file: its own comments
        files[f"{plan.name}_host.py"] = render(f"{self.folder}/host.py.j2", p=plan, header=header,
                                               c=self.config(plan), lang=facts)
        return files

    def unavailable(self) -> str | None:
        return unavailable()

    def load(self, plan, sources: dict[str, str]):
        loader = types.ModuleType(f"ropegen_opencl_{plan.name}")
        exec(compile(sources[f"{plan.name}_host.py"], f"<ropegen opencl {plan.name}_host.py>", "exec"),
             loader.__dict__)
        run = gpu_call.runner(plan, self.config(plan), self.memory, _launcher(loader, sources[f"{plan.name}.cl"]),
                              KERNEL)

        def call(*arrays, stream=None, out=None, **options):
            if stream is None:
                stream = _queue_of(arrays + ((out,) if out is not None else ()))
            return run(*arrays, stream=stream, out=out, **options)
        return call


def _launcher(loader, source: str):
    """launch(memory, kernel record, Launch, values) of one operator: its program built once per
    context, its kernel objects kept, pointers passed as (buffer, element offset)."""
    programs: dict[int, object] = {}
    kernels: dict[tuple[int, str], object] = {}

    def launch(mem: ClMemory, k, shape, values: list) -> None:
        import pyopencl as cl
        queue, block = mem.queue, shape.block[0]
        ctx = queue.context.int_ptr
        if (ctx, k.name) not in kernels:     # built and checked once: a kernel's work-group size is fixed
            if block > queue.device.max_work_group_size:
                raise OpenCLError(f"{k.name} needs work-groups of {block} work-items; the OpenCL device "
                                  f"'{queue.device.name}' allows {queue.device.max_work_group_size}")
            if ctx not in programs:
                programs[ctx] = _build(loader, source, queue)
            kernels[ctx, k.name] = cl.Kernel(programs[ctx], k.name)
        args = [mem.resolve(v, prm.dtype.itemsize) if prm.is_pointer else v for prm, v in zip(k.params, values)]
        kernels[ctx, k.name](queue, (shape.grid[0] * block, shape.grid[1], shape.grid[2]), (block, 1, 1),
                             *loader.arguments(k.name, args))
    return launch


def _build(loader, source: str, queue):
    """The program on queue's context; an OpenCLError when the device cannot meet the numerics."""
    import pyopencl as cl
    dev = queue.device
    fp64 = "cl_khr_fp64" in dev.extensions
    if not fp64 and not dev.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
        raise OpenCLError(f"the OpenCL device '{dev.name}' has neither cl_khr_fp64 nor correctly rounded float "
                          f"division and square root, which ropegen's numerics require")
    try:
        return loader.build(queue.context, source)
    except cl.Error as e:
        if not fp64 and "double" in source:
            raise OpenCLError(f"this operator computes in double, and the OpenCL device '{dev.name}' has no "
                              f"cl_khr_fp64") from None
        raise OpenCLError(f"the OpenCL build failed on '{dev.name}':\n{e}") from None
