"""Strided device (and host) arrays as one record, read from CuPy arrays, DLPack capsules,
__cuda_array_interface__ objects (PyTorch tensors included) and NumPy data.

No GPU library is imported here: any GPU target's runner builds its DeviceArrays with these
adapters, and the CPU tests exercise them with NumPy's DLPack export and fake interfaces.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ropegen.ir.dtypes import DTYPES, from_numpy
from ropegen.runtime import aliasing

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_DL_TYPES = {d.dlpack: d.name for d in DTYPES.values()}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass
class DeviceArray:
    """A strided view of memory: address, shape, element strides, ropegen dtype name.

    `keep` holds whatever must stay alive while a kernel reads the memory (the caller's object, a
    DLPack capsule, an uploaded copy); `device` is None for host (NumPy) memory.
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    device: int | None
    keep: tuple = ()
    library: str = "cupy"        # how outputs like it are allocated: cupy, torch or numpy

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def c_contiguous(self) -> bool:
        return self.strides == c_strides(self.shape) or 0 in self.shape

    @property
    def extent(self) -> aliasing.Extent:
        return aliasing.Extent(self.ptr, self.shape, tuple(s * self.itemsize for s in self.strides), self.itemsize)


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of `shape`."""
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def from_dlpack_capsule(capsule, keep: tuple = (), library: str = "cupy") -> DeviceArray:
    """Read an (unversioned) DLPack capsule without taking ownership: the capsule's own destructor
    still calls the deleter once nothing references it, so `keep` must hold it while in use."""
    addr = _capsule_pointer(capsule, b"dltensor")
    m = _DLManagedTensor.from_address(addr)
    t = m.dl_tensor
    if t.dtype.lanes != 1 or (t.dtype.code, t.dtype.bits) not in _DL_TYPES:
        raise TypeError(f"unsupported DLPack dtype (code {t.dtype.code}, bits {t.dtype.bits}, lanes {t.dtype.lanes})")
    dtype = _DL_TYPES[(t.dtype.code, t.dtype.bits)]
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    strides = tuple(int(t.strides[i]) for i in range(t.ndim)) if t.strides else c_strides(shape)
    ptr = (t.data or 0) + int(t.byte_offset)
    dev = t.device.device_type
    if dev in (KDL_CUDA, KDL_CUDA_MANAGED):
        device = int(t.device.device_id)
    elif dev in (KDL_CPU, KDL_CUDA_HOST):
        device = None
    else:
        raise TypeError(f"DLPack device type {dev} is neither CPU nor CUDA")
    return DeviceArray(ptr, shape, strides, dtype, device, (capsule,) + tuple(keep), library)


def from_cuda_array_interface(obj) -> DeviceArray:
    d = obj.__cuda_array_interface__
    dt = from_numpy(np.dtype(d["typestr"]))
    if dt is None:
        raise TypeError(f"unsupported __cuda_array_interface__ typestr {d['typestr']!r}")
    shape = tuple(int(n) for n in d["shape"])
    if d.get("strides") is None:
        strides = c_strides(shape)
    else:
        if any(s % dt.itemsize for s in d["strides"]):
            raise ValueError("strides that are not whole elements are not supported")
        strides = tuple(int(s) // dt.itemsize for s in d["strides"])
    return DeviceArray(int(d["data"][0]), shape, strides, dt.name, -1, (obj,), "cupy")


def _library(obj) -> str:
    mod = type(obj).__module__.split(".")[0]
    return "torch" if mod == "torch" else "cupy"


def as_array(obj, stream_handle: int | None = None) -> DeviceArray:
    """A DeviceArray for a CuPy array, a __dlpack__ / __cuda_array_interface__ object (PyTorch
    tensors included, bfloat16 too) or host data (NumPy arrays, Python and NumPy scalars)."""
    if isinstance(obj, (np.ndarray, np.generic, int, float, bool)):
        a = np.asarray(obj)
        dt = from_numpy(a.dtype)
        if dt is None:
            raise TypeError(f"unsupported dtype {a.dtype}")
        return DeviceArray(a.ctypes.data, a.shape, tuple(s // a.itemsize for s in a.strides) if a.ndim else (),
                           dt.name, None, (a,), "numpy")
    mod = type(obj).__module__.split(".")[0]
    if mod == "cupy":
        dt = from_numpy(obj.dtype)
        if dt is None:
            raise TypeError(f"unsupported dtype {obj.dtype}")
        return DeviceArray(int(obj.data.ptr), tuple(obj.shape), tuple(s // obj.itemsize for s in obj.strides),
                           dt.name, int(obj.device.id), (obj,), "cupy")
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        dev_type, _ = obj.__dlpack_device__()
        if dev_type in (KDL_CUDA, KDL_CUDA_MANAGED):
            # DLPack's stream argument: the consumer's stream (1 = the legacy default stream)
            cap = obj.__dlpack__(stream=stream_handle or 1)
            return from_dlpack_capsule(cap, (obj,), _library(obj))
        if dev_type == KDL_CPU:
            return from_dlpack_capsule(obj.__dlpack__(), (obj,), "numpy")
    if hasattr(obj, "__cuda_array_interface__"):
        return from_cuda_array_interface(obj)
    raise TypeError(f"expected a CUDA array (CuPy, PyTorch, __cuda_array_interface__ or DLPack) or a NumPy "
                    f"array, got {type(obj).__name__}")
