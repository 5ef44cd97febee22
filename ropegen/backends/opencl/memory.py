"""OpenCL memory for one call (runtime/gpu_call.py's GpuMemory): uploads of NumPy inputs, pyopencl
arrays adopted without a copy, outputs allocated like the inputs, the error word, reads back.

OpenCL 1.2 hands the host no device addresses, yet the shared calling convention (aliasing, vector
alignment, parameter values) reasons about addresses. Each buffer of a call gets a synthetic base,
a distinct multiple of 2^48 (above any host address, so NumPy and device arrays never seem to
overlap); an array's `ptr` is its buffer's base plus its byte offset, and `resolve` turns a
parameter value back into (buffer, byte offset). Two views of one buffer keep their real overlap.
"""
from __future__ import annotations

import numpy as np

from dataclasses import dataclass

from ropegen.ir.dtypes import DTYPES, DType, from_numpy
from ropegen.runtime import aliasing
from ropegen.runtime.arrays import DeviceArray, as_array

BASE_BITS = 48


@dataclass
class HostBacked(DeviceArray):
    """The device copy of a caller's NumPy array: the kernel reads and writes the copy, the
    convention's aliasing and writeable checks see the NumPy array, and `returned` writes results
    back into it (in place and out= on NumPy arrays, as the C backend takes them)."""

    host: np.ndarray | None = None

    @property
    def extent(self) -> aliasing.Extent:
        h = self.host
        return aliasing.Extent(h.__array_interface__["data"][0], h.shape, h.strides, h.itemsize)

    @property
    def writeable(self) -> bool:
        return bool(self.host.flags.writeable)


class ClMemory:
    """One call's memory on `queue`'s device (a pyopencl CommandQueue)."""

    def __init__(self, queue):
        import pyopencl as cl
        import pyopencl.array as cla
        self.cl, self.cla, self.queue = cl, cla, queue
        self.host = True             # every input came from NumPy: return NumPy arrays
        self.writes_back = True      # NumPy arrays may be outputs (HostBacked)
        self.bases: dict[int, int] = {}          # buffer handle -> synthetic base
        self.buffers: dict[int, object] = {}     # synthetic base -> buffer (None: a zero-size array)

    def _wrap(self, arr, dtype: str, host: np.ndarray | None = None) -> DeviceArray:
        """The DeviceArray of a pyopencl array (a buffer, a byte offset, byte strides); `host`: the
        NumPy array it is a copy of (its shape: a rank-0 array travels as one element)."""
        item = DTYPES[dtype].itemsize
        if arr.offset % item or any(s % item or s < 0 for s in arr.strides):
            raise ValueError("pyopencl arrays need offsets and strides of whole elements, none negative")
        buf = arr.base_data
        key = buf.int_ptr if buf is not None else -len(self.bases) - 1
        if key not in self.bases:
            self.bases[key] = base = (len(self.bases) + 1) << BASE_BITS
            self.buffers[base] = buf
        ptr = self.bases[key] + arr.offset
        strides = tuple(s // item for s in arr.strides)
        if host is not None:
            return HostBacked(ptr, host.shape, strides if host.ndim else (), dtype, 0, (arr,), "pyopencl", host)
        return DeviceArray(ptr, tuple(arr.shape), strides, dtype, 0, (arr,), "pyopencl")

    def resolve(self, ptr: int, itemsize: int = 1) -> tuple[object, int]:
        """(buffer, offset in items of `itemsize` bytes) of a synthetic address; a zero-size array
        has no buffer (None: a NULL kernel argument)."""
        base = ptr >> BASE_BITS << BASE_BITS
        return self.buffers[base], (ptr - base) // itemsize

    def _adopt(self, name: str, obj) -> DeviceArray:
        """A caller's pyopencl array, in place: same context as the call's queue, a ropegen dtype."""
        if obj.context != self.queue.context:
            raise ValueError(f"{name}: the pyopencl array belongs to another OpenCL context than the call's queue")
        dt = from_numpy(obj.dtype)
        if dt is None:
            raise ValueError(f"{name}: unsupported dtype {obj.dtype}")
        self.host = False
        return self._wrap(obj, dt.name)

    def take(self, name: str, obj, rank: int) -> DeviceArray:
        if isinstance(obj, self.cla.Array):
            return self._adopt(name, obj)
        try:
            a = as_array(obj)
        except TypeError:
            raise ValueError(f"{name}: expected a NumPy array or a pyopencl array, got {type(obj).__name__}") from None
        if a.device is not None:
            raise ValueError(f"{name}: the OpenCL backend takes NumPy or pyopencl arrays, not device arrays of "
                             f"{a.library}")
        return self._upload(np.asarray(a.keep[0]), a.dtype)

    def _upload(self, host: np.ndarray, dtype: str, copy: bool = True) -> HostBacked:
        """A device copy of `host` (its values when `copy`, else uninitialised)."""
        raw = host.view(np.uint16) if dtype == "bf16" else host
        if copy:
            dense = raw if raw.flags.c_contiguous else raw.copy(order="C")  # (ascontiguousarray: rank 0 -> 1)
            dev = self.cla.to_device(self.queue, dense.reshape(host.shape or 1))
        else:
            dev = self.cla.empty(self.queue, host.shape or 1, raw.dtype)
        return self._wrap(dev, dtype, host)

    def empty(self, shape: tuple[int, ...], dtype: DType) -> DeviceArray:
        np_dtype = np.uint16 if (self.host and dtype.name == "bf16") else dtype.np_dtype
        return self._wrap(self.cla.empty(self.queue, shape, np_dtype), dtype.name)

    def output(self, obj) -> DeviceArray | None:
        """A caller's out= array (pyopencl, or NumPy written back after the kernel); None for a tuple
        or list of them (the convention asks each) or an array of a dtype ropegen has no row for."""
        if isinstance(obj, np.ndarray):
            dt = from_numpy(obj.dtype)
            return self._upload(obj, dt.name, copy=False) if dt is not None else None
        return self._adopt("out", obj) if isinstance(obj, self.cla.Array) else None

    def returned(self, a: DeviceArray):
        obj = a.keep[-1]
        if isinstance(a, HostBacked):     # a caller's NumPy array (in place, out=): the results go into it
            np.copyto(a.host, self._get(obj, a.dtype).reshape(a.host.shape))
            return a.host
        return obj if not self.host else self._get(obj, a.dtype)

    def _get(self, obj, dtype: str) -> np.ndarray:
        out = obj.get(queue=self.queue)
        return out.view(DTYPES["bf16"].np_dtype) if dtype == "bf16" else out

    def error_word(self) -> DeviceArray:
        return self._wrap(self.cla.zeros(self.queue, 1, np.int32), "i32")

    def to_host(self, a: DeviceArray) -> np.ndarray:
        """The values of a (small) device array: its byte span read back, then viewed with its strides."""
        dt = DTYPES[a.dtype].np_dtype
        if 0 in a.shape:
            return np.empty(a.shape, dt)
        item = DTYPES[a.dtype].itemsize
        buf, off = self.resolve(a.ptr)
        span = (sum((n - 1) * s for n, s in zip(a.shape, a.strides)) + 1) * item
        raw = np.empty(span, np.uint8)
        self.cl.enqueue_copy(self.queue, raw, buf, src_offset=off)
        return np.lib.stride_tricks.as_strided(raw.view(dt), a.shape, tuple(s * item for s in a.strides)).copy()

    read = to_host      # status messages may name input values

    def prefix_sums(self, a: DeviceArray) -> DeviceArray:
        sums = np.cumsum(self.to_host(a).astype(np.int64))
        return self._wrap(self.cla.to_device(self.queue, sums), "i64")
