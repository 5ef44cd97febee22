"""Arrays of other libraries, read in place: strided device (and host) arrays as one record, from
CuPy arrays, DLPack capsules, __cuda_array_interface__ objects (PyTorch tensors included) and NumPy
data; and for the CPU backends, NumPy views of PyTorch CPU tensors and other DLPack host arrays, with
the results handed back in the caller's type (host_arguments).

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
        if dev_type in _HOST_DEVICES:   # as a NumPy view first: the targets' uploads read keep[0]
            return as_array(host_view(obj, "an input", "host"))
    if hasattr(obj, "__cuda_array_interface__"):
        return from_cuda_array_interface(obj)
    raise TypeError(f"expected a CUDA array (CuPy, PyTorch, __cuda_array_interface__ or DLPack) or a NumPy "
                    f"array, got {type(obj).__name__}")


# ---------------------------------------------------------------------------------------------
# host arrays of other libraries, for the CPU backends (NumPy, C): NumPy views of their memory

# DLPack device types by name, for messages; CUDA_HOST and ROCM_HOST are pinned host memory
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
                 10: "rocm", 11: "rocm_host", 13: "cuda_managed", 14: "oneapi", 15: "webgpu", 16: "hexagon"}
_HOST_DEVICES = frozenset({KDL_CPU, KDL_CUDA_HOST, 11})


class _Exported:
    """The owner of a NumPy view of DLPack memory: holds the capsule (whose destructor frees the
    export) and the producer while any view of it lives."""

    __slots__ = ("__array_interface__", "keep")

    def __init__(self, a: DeviceArray):
        item = a.itemsize
        self.keep = a.keep
        # an unsigned integer of the element's size: the caller views it as the real type (bfloat16
        # and the fp8 types have no array-interface type string of their own)
        self.__array_interface__ = {"data": (a.ptr, False), "shape": a.shape, "typestr": f"<u{item}",
                                    "strides": tuple(s * item for s in a.strides), "version": 3}


def _where(obj, dev_type: int, dev_id: int) -> str:
    lib = type(obj).__module__.split(".")[0]
    return f"a {lib} {type(obj).__name__} on {_DEVICE_NAMES.get(dev_type, f'device type {dev_type}')}:{dev_id}"


def host_view(obj, name: str, backend: str) -> np.ndarray:
    """A NumPy array over the memory of a host array of another library (a PyTorch CPU tensor, any
    __dlpack__ producer on the CPU), bfloat16 included; a ValueError naming `name` and the device for
    memory the host cannot read in place, and for what is no array at all."""
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        raise ValueError(f"{name}: expected a NumPy array, a PyTorch CPU tensor or a DLPack CPU array, "
                         f"got {type(obj).__name__}")
    try:
        dev_type, dev_id = obj.__dlpack_device__()
    except (ValueError, RuntimeError, TypeError, BufferError) as exc:   # torch's meta device, ...
        where = f"a {type(obj).__module__.split('.')[0]} {type(obj).__name__} on {getattr(obj, 'device', '?')}"
        raise ValueError(f"{name}: {where}, which DLPack cannot describe ({exc}); the {backend} backend reads "
                         f"host memory") from None
    if int(dev_type) not in _HOST_DEVICES:
        raise ValueError(f"{name}: {_where(obj, int(dev_type), int(dev_id))}; the {backend} backend reads host "
                         f"memory: copy it to the CPU first (.cpu()) or run on a GPU backend")
    try:
        if _is_torch(obj) and dev_type == KDL_CPU:     # Tensor.numpy(): the same view, several times faster
            return _torch_view(obj)
        a = from_dlpack_capsule(obj.__dlpack__(), (obj,), "numpy")
    except (BufferError, RuntimeError, TypeError) as exc:   # requires_grad, an unsupported dtype, ...
        raise ValueError(f"{name}: cannot share the memory of {_where(obj, int(dev_type), int(dev_id))} "
                         f"through DLPack: {exc}") from None
    dt = DTYPES[a.dtype].np_dtype
    if 0 in a.shape:    # nothing to share (and its address may be NULL, which NumPy refuses)
        return np.empty(a.shape, dt)
    return np.asarray(_Exported(a)).view(dt)


def _is_torch(obj) -> bool:
    return type(obj).__module__.split(".")[0] == "torch"


# ml_dtypes' types (bfloat16, fp8) by their PyTorch name; torch.from_numpy and Tensor.numpy() know none
_ML_TYPES = {d.torch: d.np_dtype for d in DTYPES.values() if d.np_dtype.kind == "V"}
_ML_TORCH = {d.np_dtype: d.torch for d in DTYPES.values() if d.np_dtype.kind == "V"}


def _torch_view(t) -> np.ndarray:
    """Tensor.numpy() (CPU memory, shared), ml_dtypes' types through an integer view of one size."""
    ml = _ML_TYPES.get(str(t.dtype).removeprefix("torch."))
    if ml is None:
        return t.numpy()
    import torch
    return t.view(torch.int16 if ml.itemsize == 2 else torch.int8).numpy().view(ml)


def as_torch(a: np.ndarray):
    """A PyTorch CPU tensor over a NumPy result's memory (bfloat16 and fp8 through an integer view,
    which torch.from_numpy takes)."""
    import torch
    ml = _ML_TORCH.get(a.dtype)
    if ml is not None:
        return torch.from_numpy(a.view(f"i{a.itemsize}")).view(getattr(torch, ml))
    return torch.from_numpy(a)


class HostArguments:
    """A call's arguments with every non-NumPy host array replaced by a NumPy view of its memory
    (host_view), and the way back: outputs written over a caller's array (in place, out=) are that
    array itself, new outputs PyTorch tensors when any argument was one (NumPy for other producers)."""

    def __init__(self, names, arrays, out, backend: str):
        self.callers: dict[int, object] = {}   # id(view) -> the caller's object
        self.torch = False
        names = list(names) + [f"argument {i + 1}" for i in range(len(names), len(arrays))]
        self.arrays = [self._view(n, a, backend) for n, a in zip(names, arrays)]
        if isinstance(out, (tuple, list)):
            out = type(out)(self._view("out", y, backend) for y in out)
        self.out = self._view("out", out, backend)

    def _view(self, name: str, obj, backend: str):
        if not _foreign(obj):
            return obj      # NumPy arrays, Python scalars: the kernel takes (or refuses) them itself
        view = host_view(obj, name, backend)
        self.callers[id(view)] = obj
        self.torch = self.torch or _is_torch(obj)
        return view

    def returned(self, outputs):
        """The kernel's outputs (a tuple of NumPy arrays) in the caller's types."""
        back = self.callers
        return tuple(back[id(y)] if id(y) in back else as_torch(y) if self.torch and isinstance(y, np.ndarray)
                     else y for y in outputs)


def _foreign(obj) -> bool:
    return hasattr(obj, "__dlpack_device__") and not isinstance(obj, (np.ndarray, np.generic))


def host_arguments(names, arrays, out, backend: str) -> HostArguments | None:
    """HostArguments for a call with any array not from NumPy; None (nothing to do) for the rest."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if any(type(a) is not np.ndarray and _foreign(a) for a in arrays) or any(_foreign(y) for y in outs):
        return HostArguments(names, arrays, out, backend)
    return None
