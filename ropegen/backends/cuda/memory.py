"""CUDA memory for one call through CuPy (runtime/gpu_call.py's GpuMemory): the caller's stream,
uploads of host inputs, allocation of outputs (CuPy or PyTorch, like the inputs) on that stream,
the error words, reads back to the host, the packed sequences' prefix sums on the device, results
back as NumPy when every input came from the host, and the quick path's array signatures.

The stream: an explicit `stream=` (a CuPy or PyTorch stream, or a raw cudaStream_t), else PyTorch's
current stream of the first PyTorch tensor among the arrays, else CuPy's current stream. Every
allocation and launch of the call is on it, so a caller under `torch.cuda.stream(s)` gets outputs
that belong to `s` and a kernel that runs after `s`'s earlier work (issue 14: the kernel used to run
on CuPy's stream while PyTorch allocated the outputs on its own).

CuPy and PyTorch are imported only when a call is made; nothing here decides a kernel or a launch
shape.
"""
from __future__ import annotations

import sys

import numpy as np

from ropegen.ir.dtypes import DTYPES, DType
from ropegen.runtime.arrays import DeviceArray, as_array, c_strides

_EXTERNAL: dict[tuple, object] = {}   # (cupy, cudaStream_t) -> CuPy's wrapper of it (which holds no resource)
ALIGN = 63                           # a signature keeps addresses modulo 64: every vector width divides it
_LIBRARIES: dict[type, str] = {}     # an array type -> its library's top module ("cupy", "torch", ...)


def _torch_dtype(name: str):
    import torch
    return getattr(torch, DTYPES[name].torch)


def _library(obj) -> str:
    t = type(obj)
    lib = _LIBRARIES.get(t)
    if lib is None:
        lib = _LIBRARIES[t] = t.__module__.split(".")[0]
    return lib


def cupy_dtype(name: str, host: bool) -> np.dtype:
    """The dtype CuPy allocates for an array of ropegen dtype `name`: its NumPy dtype, except for the
    ml_dtypes types, which live as the unsigned integer of their width where CuPy cannot hold them.
    That is on a call of host arrays (bf16 and fp8: returned() views the copy back on the host), and
    fp8 on every call: CuPy has no float8 arrays (CuPy 14 raises "Unsupported dtype float8_e4m3fn"),
    so the fp8 outputs of a call on CuPy arrays are uint8 arrays holding the fp8 bits."""
    d = DTYPES[name].np_dtype
    if d.type.__module__.split(".")[0] == "ml_dtypes" and (host or d.itemsize == 1):
        return np.dtype(f"u{d.itemsize}")
    return d


def caller_stream(arrays, out=None):
    """The stream a call without `stream=` runs on: PyTorch's current stream on the device of the
    first PyTorch CUDA tensor among the arrays (and out=), else None (CuPy's current stream)."""
    for a in (*arrays, *(out if isinstance(out, (tuple, list)) else (out,))):
        if _library(a) == "torch" and getattr(a, "is_cuda", False):
            return sys.modules["torch"].cuda.current_stream(a.device)
    return None


def cupy_stream(cupy, stream):
    """(CuPy stream object, raw handle) of `stream`: None (CuPy's current), a CuPy stream, a
    PyTorch stream (`cuda_stream`) or an int handle."""
    if stream is None:
        s = cupy.cuda.get_current_stream()
        return s, int(s.ptr)
    if _library(stream) == "cupy":
        return stream, int(stream.ptr)
    handle = int(stream.cuda_stream) if hasattr(stream, "cuda_stream") else int(stream)
    s = _EXTERNAL.get((cupy, handle))
    if s is None:
        s = _EXTERNAL[(cupy, handle)] = cupy.cuda.Stream.null if handle == 0 else cupy.cuda.ExternalStream(handle)
    return s, handle


class DeviceMemory:
    """One call's memory on the current device and the call's stream: device copies of host inputs,
    allocation of outputs, the launch stream. It has no `read`: the CUDA messages name no input
    values."""

    caller_stream = staticmethod(caller_stream)

    def __init__(self, stream=None):
        import cupy
        self.cupy = cupy
        self.stream, self.handle = cupy_stream(cupy, stream)
        self.current = stream is None     # CuPy's current stream: no `with` needed to use it
        self.device = int(cupy.cuda.runtime.getDevice())
        self.stream_key = (self.device, self.handle)   # one set of error words per (device, stream)
        self.host = True           # no input lived on the device: return NumPy arrays
        self.like: DeviceArray | None = None

    def take(self, name: str, obj, rank: int) -> DeviceArray:
        a = as_array(obj, self.handle)
        if a.device is None:
            return self.upload(a)
        if a.device not in (-1, self.device):
            raise ValueError(f"an input lives on device {a.device}, but the current CUDA device is {self.device}")
        self.host = False
        if self.like is None or (self.like.library != "torch" and a.library == "torch"):
            self.like = a
        return a

    def upload(self, a: DeviceArray) -> DeviceArray:
        host = a.keep[0] if isinstance(a.keep[0], np.ndarray) else np.from_dlpack(a.keep[-1])
        host = np.ascontiguousarray(host)
        raw = host.view(cupy_dtype(a.dtype, True))
        with self.stream:
            dev = self.cupy.asarray(raw)
        # the host copy rides first: host_copy() reads it without a device read-back
        return DeviceArray(int(dev.data.ptr), a.shape, c_strides(a.shape), a.dtype, int(dev.device.id),
                           (host, dev), "cupy")

    def host_copy(self, a: DeviceArray) -> np.ndarray | None:
        """The values of an input that came from the host (no read-back), else None."""
        return a.keep[0] if a.keep and isinstance(a.keep[0], np.ndarray) and len(a.keep) > 1 else None

    def empty(self, shape: tuple[int, ...], dtype: DType) -> DeviceArray:
        """A new C-contiguous output on the call's stream; the allocated object is the array's last `keep`."""
        name = dtype.name
        if not self.host and self.like is not None and self.like.library == "torch":
            src = next(k for k in self.like.keep if _library(k) == "torch")
            t = self.torch_empty(shape, _torch_dtype(name), src.device)
            return DeviceArray(int(t.data_ptr()), shape, c_strides(shape), name, src.device.index, (t,), "torch")
        with self.stream:
            arr = self.cupy.empty(shape, dtype=cupy_dtype(name, self.host))
        return DeviceArray(int(arr.data.ptr), shape, c_strides(shape), name, int(arr.device.id), (arr,), "cupy")

    def torch_empty(self, shape, dtype, device):
        """torch.empty on the call's stream: PyTorch's caching allocator ties a block to the stream it
        was allocated on, and reuses it once freed there, so it must be the stream the kernel writes on."""
        import torch
        if int(torch.cuda.current_stream(device).cuda_stream) == self.handle:
            return torch.empty(shape, dtype=dtype, device=device)
        with torch.cuda.stream(torch.cuda.ExternalStream(self.handle, device=device)):
            return torch.empty(shape, dtype=dtype, device=device)

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
        want = DTYPES[a.dtype].np_dtype
        return out if out.dtype == want else out.view(want)

    def error_word(self) -> DeviceArray:
        with self.stream:
            w = self.cupy.zeros(1, dtype=np.int32)
        return DeviceArray(int(w.data.ptr), (1,), (1,), "i32", int(w.device.id), (w,), "cupy")

    def zero(self, a: DeviceArray) -> None:
        """Clear an error word, in stream order."""
        with self.stream:
            self.cupy_view(a).fill(0)

    def to_host(self, a: DeviceArray) -> np.ndarray:
        """The values on the host: a host input's own copy, else a read-back (a sync of the stream)."""
        copy = self.host_copy(a)
        return copy if copy is not None else self.cupy_view(a).get(stream=self.stream)

    def prefix_sums(self, a: DeviceArray) -> DeviceArray:
        with self.stream:
            s = self.cupy.cumsum(self.cupy_view(a).astype(np.int64))
        return self._wrap(s, "i64")

    def device_sequences(self, a: DeviceArray, indptr: bool, S: int) -> tuple[DeviceArray, DeviceArray]:
        """(lengths, int64 inclusive prefix sums) of the packed sequences, made on the device without
        a read-back, such that the kernels' own test (each length >= 0, the last sum equals S) fails
        exactly when the host's would: the sums add lengths clipped to [0, S + 1], so none wraps (the
        caller keeps n * (S + 1) within int64), and an indptr that does not start at 0 and end at S
        gets a first length of -1."""
        cp = self.cupy
        with self.stream:
            v = self.cupy_view(a)
            if indptr:
                wide = v.astype(np.int64)
                lens = wide[1:] - wide[:-1]
                if lens.shape[0]:
                    bad = (wide[0] != 0) | (wide[-1] != S)
                    lens[:1] = cp.where(bad, -1, lens[:1])
                v = lens.astype(v.dtype)
                wide = lens
            else:
                wide = v.astype(np.int64)
            ends = cp.cumsum(cp.clip(wide, 0, S + 1))
        return self._wrap(v, a.dtype), self._wrap(ends, "i64")

    def _wrap(self, arr, dtype: str) -> DeviceArray:
        shape = tuple(arr.shape)
        return DeviceArray(int(arr.data.ptr), shape, c_strides(shape), dtype, int(arr.device.id), (arr,), "cupy")

    def cupy_view(self, a: DeviceArray):
        """A CuPy view of integer device memory (sequence lengths, pads, the error word)."""
        cp = self.cupy
        for k in a.keep:
            if _library(k) == "cupy" and int(k.data.ptr) == a.ptr:
                return k
        itemsize = a.itemsize
        extent = (sum((n - 1) * s for n, s in zip(a.shape, a.strides)) + 1) * itemsize if 0 not in a.shape else 0
        mem = cp.cuda.UnownedMemory(a.ptr, max(extent, 1), a.keep)
        return cp.ndarray(a.shape, dtype=DTYPES[a.dtype].np_dtype, memptr=cp.cuda.MemoryPointer(mem, 0),
                          strides=tuple(s * itemsize for s in a.strides))

    # -- the quick path (runtime/gpu_call.py): a repeated signature skips the binding

    @staticmethod
    def signature(arrays) -> tuple[tuple, list[int], object] | None:
        """(signature, addresses, caller's stream) of device arrays: per array its dtype, shape,
        strides, device and address modulo 64 (which decides the vector kernel), and caller_stream's
        answer; None when any is not a CuPy array or a PyTorch CUDA tensor."""
        sig, ptrs, torch_tensor = [], [], None
        for a in arrays:
            lib = _LIBRARIES.get(type(a)) or _library(a)
            if lib == "cupy":
                p = a.data.ptr
                sig.append((a.dtype, a.shape, a.strides, a.device.id, p & ALIGN))
            elif lib == "torch" and a.is_cuda and not a.requires_grad:   # (DLPack refuses those: bind them)
                p = a.data_ptr()
                sig.append((a.dtype, a.shape, a.stride(), a.device.index, p & ALIGN))
                torch_tensor = torch_tensor if torch_tensor is not None else a
            else:
                return None
            ptrs.append(p)
        stream = None if torch_tensor is None else sys.modules["torch"].cuda.current_stream(torch_tensor.device)
        return tuple(sig), ptrs, stream

    @staticmethod
    def specs(outputs: list[DeviceArray]) -> list[tuple]:
        """What allocate() needs to make arrays like `outputs` (not the arrays: they are not kept alive)."""
        return [(o.library, o.keep[-1].shape, o.keep[-1].dtype, getattr(o.keep[-1], "device", None)) for o in outputs]

    def allocate(self, specs: list[tuple]) -> tuple[list, list[int]]:
        """New arrays of `specs` on this call's stream, and their addresses."""
        out, ptrs = [], []
        for library, shape, dtype, device in specs:
            if library == "torch":
                t = self.torch_empty(shape, dtype, device)
                out.append(t)
                ptrs.append(t.data_ptr())
                continue
            if self.current:
                a = self.cupy.empty(shape, dtype=dtype)
            else:
                with self.stream:
                    a = self.cupy.empty(shape, dtype=dtype)
            out.append(a)
            ptrs.append(a.data.ptr)
        return out, ptrs
