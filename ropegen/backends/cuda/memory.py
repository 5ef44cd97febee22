"""CUDA memory for one call through CuPy (runtime/gpu_call.py's GpuMemory): the stream, uploads of
host inputs, allocation of outputs (CuPy or PyTorch, like the inputs), the error word, reads back
to the host, results back as NumPy when every input came from the host.

CuPy is imported only when a call is made; nothing here decides a kernel or a launch shape.
"""
from __future__ import annotations

import numpy as np

from ropegen.ir.dtypes import DTYPES, DType
from ropegen.runtime.arrays import DeviceArray, as_array, c_strides


def _torch_dtype(name: str):
    import torch
    return getattr(torch, DTYPES[name].torch)


class DeviceMemory:
    """One call's memory on the current device: device copies of host inputs, allocation of
    outputs, the launch stream. It has no `read`: the CUDA messages name no input values."""

    def __init__(self, stream=None):
        import cupy
        self.cupy = cupy
        self.stream = stream if stream is not None else cupy.cuda.get_current_stream()
        self.handle = int(self.stream.ptr)
        self.host = True           # no input lived on the device: return NumPy arrays
        self.like: DeviceArray | None = None

    def take(self, name: str, obj, rank: int) -> DeviceArray:
        a = as_array(obj, self.handle)
        if a.device is None:
            return self.upload(a)
        here = self.cupy.cuda.Device().id
        if a.device not in (-1, here):
            raise ValueError(f"an input lives on device {a.device}, but the current CUDA device is {here}")
        self.host = False
        if self.like is None or (self.like.library != "torch" and a.library == "torch"):
            self.like = a
        return a

    def upload(self, a: DeviceArray) -> DeviceArray:
        host = a.keep[0] if isinstance(a.keep[0], np.ndarray) else np.from_dlpack(a.keep[-1])
        host = np.ascontiguousarray(host)
        raw = host.view(np.uint16) if a.dtype == "bf16" else host
        with self.stream:
            dev = self.cupy.asarray(raw)
        return DeviceArray(int(dev.data.ptr), a.shape, c_strides(a.shape), a.dtype, int(dev.device.id), (dev,), "cupy")

    def empty(self, shape: tuple[int, ...], dtype: DType) -> DeviceArray:
        """A new C-contiguous output; the allocated object is the array's last `keep`."""
        name = dtype.name
        if not self.host and self.like is not None and self.like.library == "torch":
            import torch
            src = next(k for k in self.like.keep if type(k).__module__.split(".")[0] == "torch")
            t = torch.empty(shape, dtype=_torch_dtype(name), device=src.device)
            return DeviceArray(int(t.data_ptr()), shape, c_strides(shape), name, src.device.index, (t,), "torch")
        np_dtype = np.uint16 if (self.host and name == "bf16") else dtype.np_dtype
        with self.stream:
            arr = self.cupy.empty(shape, dtype=np_dtype)
        return DeviceArray(int(arr.data.ptr), shape, c_strides(shape), name, int(arr.device.id), (arr,), "cupy")

    def output(self, obj) -> DeviceArray | None:
        """A caller's out= array on the device (None for anything else: host arrays cannot be
        written by the kernel)."""
        if isinstance(obj, (np.ndarray, tuple, list)) or obj is None:
            return None
        a = as_array(obj, self.handle)
        if a.device is None:
            return None
        self.host = False
        return a

    def returned(self, a: DeviceArray):
        """The caller's object (in place: every adapter keeps it last), or a NumPy copy when every
        input came from the host (in place is refused then)."""
        obj = a.keep[-1]
        if not self.host:
            return obj
        out = self.cupy.asnumpy(obj, stream=self.stream)
        return out.view(DTYPES["bf16"].np_dtype) if a.dtype == "bf16" else out

    def error_word(self) -> DeviceArray:
        with self.stream:
            w = self.cupy.zeros(1, dtype=np.int32)
        return DeviceArray(int(w.data.ptr), (1,), (1,), "i32", int(w.device.id), (w,), "cupy")

    def to_host(self, a: DeviceArray) -> np.ndarray:
        return self.cupy_view(a).get(stream=self.stream)

    def prefix_sums(self, a: DeviceArray) -> DeviceArray:
        with self.stream:
            s = self.cupy.cumsum(self.cupy_view(a).astype(np.int64))
        return DeviceArray(int(s.data.ptr), tuple(s.shape), c_strides(tuple(s.shape)), "i64", int(s.device.id),
                           (s,), "cupy")

    def cupy_view(self, a: DeviceArray):
        """A CuPy view of integer device memory (sequence lengths, pads, the error word)."""
        cp = self.cupy
        for k in a.keep:
            if type(k).__module__.split(".")[0] == "cupy" and int(k.data.ptr) == a.ptr:
                return k
        itemsize = a.itemsize
        extent = (sum((n - 1) * s for n, s in zip(a.shape, a.strides)) + 1) * itemsize if 0 not in a.shape else 0
        mem = cp.cuda.UnownedMemory(a.ptr, max(extent, 1), a.keep)
        return cp.ndarray(a.shape, dtype=DTYPES[a.dtype].np_dtype, memptr=cp.cuda.MemoryPointer(mem, 0),
                          strides=tuple(s * itemsize for s in a.strides))
