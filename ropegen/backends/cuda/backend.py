"""The CUDA backend: one .cu file per operator (templates/cuda), run through CuPy.

All numeric and launch decisions come from ropegen.backends.cuda.plan; the runtime glue below the class
(device arrays from CuPy / __cuda_array_interface__ / DLPack, the vector-or-scalar choice, the
error word) imports CuPy only when an operator is loaded.
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

from ropegen import ir
from ropegen.runtime import aliasing
from ropegen.backends.cuda import plan as cuda_plan
from ropegen.backends.cuda import nvrtc
from ropegen.ir.dtypes import DTYPES, DType, from_numpy
from ropegen.ops.plan import Plan, RmsNormPlan, RopePlan, TableAnglesPlan
from ropegen.backends.c.abi import C_KEYWORDS
from ropegen.backends.base import Backend, Kernel, bind_shape


class CudaBackend(Backend):
    name = "cuda"
    folder = "cuda"
    comment = "//"
    reserved = C_KEYWORDS | frozenset({"half"})   # CUDA C++: C's words and the half type

    def config(self, plan: Plan):
        return cuda_plan.rope_cfg(plan) if isinstance(plan, RopePlan) else cuda_plan.rms_cfg(plan)

    def sources(self, plan: Plan, spec_file: str) -> dict[str, str]:
        return {f"{plan.name}.cu": self.render_file(plan, "cu", spec_file, c=self.config(plan))}

    def unavailable(self) -> str | None:
        return unavailable()

    def load(self, plan: Plan, sources: dict[str, str]) -> Kernel:
        return load(plan, self.config(plan), sources[f"{plan.name}.cu"])


# =============================================================================================
# Runtime: everything below runs only with CuPy and a device (tests marked `gpu`), except the
# array adapters, which the CPU tests exercise with NumPy's DLPack export and fake interfaces.

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
        return self.strides == _c_strides(self.shape) or 0 in self.shape

    @property
    def extent(self) -> aliasing.Extent:
        return aliasing.Extent(self.ptr, self.shape, tuple(s * self.itemsize for s in self.strides), self.itemsize)


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
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
    strides = tuple(int(t.strides[i]) for i in range(t.ndim)) if t.strides else _c_strides(shape)
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
        strides = _c_strides(shape)
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


def validate(sym: dict, name: str, a: DeviceArray, dtype: DType, dims: tuple) -> None:
    """dtype and shape of one input, binding symbolic dims on first sight (as the NumPy backend)."""
    if a.dtype != dtype.name:
        raise ValueError(f"{name}: expected dtype {dtype.np_dtype.name}, got {DTYPES[a.dtype].np_dtype.name}")
    bind_shape(sym, name, tuple(a.shape), dims)


def unavailable() -> str | None:
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - any import failure means: cannot run here
        return f"CuPy is not importable ({type(e).__name__}: {e}); pip install cupy-cuda12x"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        return f"no usable CUDA device ({type(e).__name__}: {e})"
    if n < 1:
        return "no CUDA device"
    return None


class _Module:
    """The compiled .cu for the current device: NVRTC from the pip wheel (the compiler CI checks)
    to a cubin for the device's exact architecture, else CuPy's own NVRTC."""

    _cache: dict = {}
    _dir: str | None = None

    @classmethod
    def get(cls, source: str, name: str):
        import cupy
        arch = cupy.cuda.Device().compute_capability
        key = (hashlib.sha256(source.encode()).hexdigest(), arch)
        if key not in cls._cache:
            cls._cache[key] = cls._build(source, name, arch)
        return cls._cache[key]

    @classmethod
    def _build(cls, source: str, name: str, arch: str):
        import cupy
        if nvrtc.available() is None:
            try:
                compiled = nvrtc.compile_source(source, f"sm_{arch}", name=name, strict=False)
                if cls._dir is None:
                    cls._dir = tempfile.mkdtemp(prefix="ropegen-cubin-")
                    # Kept while the process lives: CuPy may load a module's cubin again from its path.
                    atexit.register(shutil.rmtree, cls._dir, ignore_errors=True)
                path = os.path.join(cls._dir, f"{name}.{arch}.{hashlib.sha256(source.encode()).hexdigest()[:16]}.cubin")
                with open(path, "wb") as f:
                    f.write(compiled.binary)
                module = cupy.RawModule(path=path)
                module.get_function(_first_kernel(source))   # loads now: fall back below if it cannot
                return module
            except Exception:  # noqa: BLE001 - e.g. a driver older than the wheel's cubin: let CuPy compile
                pass
        return cupy.RawModule(code=source, options=("--std=c++17",))


def _first_kernel(source: str) -> str:
    return source.split('extern "C" __global__ void', 1)[1].split("(", 1)[0].split()[-1]


def _torch_dtype(name: str):
    import torch
    return getattr(torch, DTYPES[name].torch)


class _Call:
    """One call: device copies of host inputs, allocation of outputs, the launch stream."""

    def __init__(self, stream=None):
        import cupy
        self.cupy = cupy
        self.stream = stream if stream is not None else cupy.cuda.get_current_stream()
        self.handle = int(self.stream.ptr)
        self.host = True           # no input lived on the device: return NumPy arrays
        self.like: DeviceArray | None = None

    def take(self, obj) -> DeviceArray:
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
        return DeviceArray(int(dev.data.ptr), a.shape, _c_strides(a.shape), a.dtype, int(dev.device.id), (dev,), "cupy")

    def empty(self, shape: tuple[int, ...], dtype: str):
        """(object to return, DeviceArray) for a new C-contiguous output."""
        if not self.host and self.like is not None and self.like.library == "torch":
            import torch
            src = next(k for k in self.like.keep if type(k).__module__.split(".")[0] == "torch")
            t = torch.empty(shape, dtype=_torch_dtype(dtype), device=src.device)
            return t, DeviceArray(int(t.data_ptr()), shape, _c_strides(shape), dtype, src.device.index, (t,), "torch")
        np_dtype = np.uint16 if (self.host and dtype == "bf16") else DTYPES[dtype].np_dtype
        with self.stream:
            arr = self.cupy.empty(shape, dtype=np_dtype)
        return arr, DeviceArray(int(arr.data.ptr), shape, _c_strides(shape), dtype, int(arr.device.id), (arr,), "cupy")

    def result(self, obj, dtype: str):
        if not self.host:
            return obj
        out = self.cupy.asnumpy(obj, stream=self.stream)
        return out.view(DTYPES["bf16"].np_dtype) if dtype == "bf16" else out

    def cupy_view(self, a: DeviceArray):
        """A CuPy view of integer device memory (sequence lengths), for cumsum."""
        cp = self.cupy
        for k in a.keep:
            if isinstance(k, cp.ndarray) and int(k.data.ptr) == a.ptr:
                return k
        itemsize = a.itemsize
        extent = (sum((n - 1) * s for n, s in zip(a.shape, a.strides)) + 1) * itemsize if 0 not in a.shape else 0
        mem = cp.cuda.UnownedMemory(a.ptr, max(extent, 1), a.keep)
        return cp.ndarray(a.shape, dtype=DTYPES[a.dtype].np_dtype, memptr=cp.cuda.MemoryPointer(mem, 0),
                          strides=tuple(s * itemsize for s in a.strides))


def _arg(ctype: str, value: int):
    if ctype.endswith("*"):
        return np.uint64(value)
    return np.int32(value) if ctype == "int" else np.int64(value)


def load(plan: Plan, cfg, source: str) -> Kernel:
    name = f"{plan.name}.cu"
    if isinstance(plan, RopePlan):
        return _RopeRunner(plan, cfg, source, name)
    return _RmsRunner(plan, cfg, source, name)


def rope_bind(p: RopePlan, cfg: cuda_plan.RopeCfg, arrs: dict[str, DeviceArray], outs: dict[str, DeviceArray],
              B: int, S: int, err_ptr: int, seq_ends_ptr: int, kernel: cuda_plan.RopeKernelCfg | None = None):
    """The kernel (vector when every rotated tensor allows it, else scalar; or `kernel`), its
    launch shape and its argument values (ints, in parameter order) for one call. Pure Python:
    the CPU tests bind host memory through it and run the generated source on the host."""
    canon = {}
    for st in p.streams:
        t = p.ir.tensor(st.src)
        canon[st.src] = cuda_plan.canonical_strides(t, arrs[st.src].strides, p.token_layout)
        canon[st.out] = cuda_plan.canonical_strides(t, outs[st.out].strides, p.token_layout)
    rotated = [(arrs[s.src].ptr, canon[s.src]) for s in p.streams] + \
              [(outs[s.out].ptr, canon[s.out]) for s in p.streams]
    k = kernel or (cfg.vec if cuda_plan.rope_vector_ok(cfg.vec.vector, p.storage.itemsize, rotated) else cfg.scalar)
    n_seq = arrs[p.sequences].shape[0] if p.sequences else 0
    launch = cuda_plan.rope_launch(cfg, k, B * S, n_seq)
    values = {"tokens": B * S, "seq_len": S, "head_groups": launch.head_groups}
    args: list[int] = []
    for prm in k.params:
        src = prm.source
        kind = src[0]
        if kind == "in":
            v = arrs[src[1]].ptr
        elif kind == "out":
            v = outs[src[1]].ptr
        elif kind == "stride":
            v = canon[src[1]][src[2]]
        elif kind == "axis_stride":
            v = arrs[src[1]].strides[src[2]]
        elif kind == "extent":
            v = arrs[src[1]].shape[src[2]]
        elif kind == "zero":
            v = 0
        elif kind == "launch":
            v = values[src[1]]
        elif kind == "err":
            v = err_ptr
        elif kind == "seq_ends":
            v = seq_ends_ptr
        else:
            raise AssertionError(f"unknown parameter source {src}")
        args.append(int(v))
    return k, launch, args


def positions_fit(start: int, S: int, pads: tuple[int, ...], first: int | None = None) -> bool:
    """Every formula of arange / glm2d positions fits in int64 for tokens s in [0, S) and the given
    pads (each formula is linear in s and pad: the extremes decide); the kernel's long long
    arithmetic then never wraps."""
    lo, hi = -(1 << 63), (1 << 63) - 1
    offsets = (start, start + S - 1)
    values = list(offsets)
    for pd in pads:
        for off in offsets:
            values.append(off - pd)
            if first is not None:
                prompt = first - pd
                values += [first - 1, prompt, prompt - 2, off - prompt, off - prompt + 2]
    return all(lo <= v <= hi for v in values)


def _check_position_arith(p: RopePlan, arrs: dict[str, DeviceArray], call, B: int, S: int) -> None:
    """ValueError when arange / glm2d position arithmetic would overflow (always checked: a few
    scalars and the [batch] pads, read back to the host)."""
    pos = p.positions
    if pos.kind not in (ir.PositionKind.ARANGE, ir.PositionKind.GLM2D) or not B * S:
        return

    def scalar(v) -> int | None:
        if v is None or isinstance(v, int):
            return v
        return int(call.cupy_view(arrs[v]).get().reshape(()))

    pads: tuple[int, ...] = (0,)
    if pos.pad:
        host = call.cupy_view(arrs[pos.pad]).get().astype(np.int64)
        pads = (int(host.min()), int(host.max()))
    start, first = scalar(pos.start), scalar(pos.first_seqlen)
    if not positions_fit(start, S, pads, first):
        raise ValueError(f"position arithmetic overflows int64 ({pos.kind.value} positions: start {start}, "
                         f"{S} tokens{', first_seqlen ' + str(first) if first is not None else ''}, pads in "
                         f"[{min(pads)}, {max(pads)}])")


def tokens_of(p: RopePlan, arrs: dict[str, DeviceArray]) -> tuple[int, int]:
    """(B, S) of a call: packed tokens are one batch row of T."""
    first = p.ir.tensor(p.streams[0].src)
    roles = {ax.parts[0].role: i for i, ax in enumerate(first.axes) if len(ax.parts) == 1}
    shape0 = arrs[first.name].shape
    if p.token_layout == "t":
        return 1, shape0[roles[ir.Role.TOKENS]]
    return shape0[roles[ir.Role.BATCH]], shape0[roles[ir.Role.SEQ]]


class _RopeRunner:
    def __init__(self, plan: RopePlan, cfg: cuda_plan.RopeCfg, source: str, name: str):
        self.p, self.cfg, self.source, self.name = plan, cfg, source, name

    def __call__(self, *arrays, check: bool = True, inplace: bool = False, stream=None):
        p, cfg = self.p, self.cfg
        call = _Call(stream)
        sym: dict = {}
        arrs: dict[str, DeviceArray] = {}
        if inplace and any(isinstance(a, np.ndarray) for a in arrays):
            raise ValueError("inplace=True needs device arrays (NumPy inputs are copied to the device)")
        for t, obj in zip(p.inputs, arrays):
            a = call.take(obj)
            validate(sym, t.name, a, t.dtype, t.shape)
            arrs[t.name] = a
        B, S = tokens_of(p, arrs)
        outs: dict[str, tuple] = {}
        for st in p.streams:
            src = arrs[st.src]
            if inplace:
                outs[st.out] = (arrays[[t.name for t in p.inputs].index(st.src)], src)
            else:
                outs[st.out] = call.empty(src.shape, src.dtype)
        if inplace:   # freshly allocated outputs cannot overlap anything
            aliasing.check({n: a.extent for n, a in arrs.items()}, {o: d.extent for o, (_, d) in outs.items()},
                           {s.out: s.src for s in p.streams})
        cp = call.cupy
        with call.stream:
            err = cp.zeros(1, dtype=np.int32)
            seq_ends = None
            if p.sequences:
                lens = call.cupy_view(arrs[p.sequences]).astype(np.int64)
                # checked on the host before any launch: the kernel derives every index from these,
                # and a wrapped-around int64 sum must not pass for the token count
                host_lens = lens.get()
                if bool(((host_lens < 0) | (host_lens > S)).any()) or int(host_lens.sum()) != S:
                    raise ValueError(f"{p.sequences}: sequence lengths must be in [0, {S}] and sum to the "
                                     f"{S} packed tokens")
                seq_ends = cp.cumsum(lens)
            _check_position_arith(p, arrs, call, B, S)
        seq_ptr = int(seq_ends.data.ptr) if seq_ends is not None and seq_ends.size else int(err.data.ptr)
        k, launch, args = rope_bind(p, cfg, arrs, {o: d for o, (_, d) in outs.items()}, B, S,
                                    int(err.data.ptr), seq_ptr)
        n_seq = arrs[p.sequences].shape[0] if p.sequences else 0
        if B * S or n_seq:
            kernel = _Module.get(self.source, self.name).get_function(k.name)
            with call.stream:
                kernel(launch.grid, launch.block, tuple(_arg(prm.ctype, v) for prm, v in zip(k.params, args)))
        if check:
            code = int(err.get(stream=call.stream)[0])
            if code & cuda_plan.ERR_SEQUENCES:
                raise ValueError(f"{p.sequences}: sequence lengths must be >= 0 and sum to the {S} packed tokens")
            if code & cuda_plan.ERR_POSITION:
                rows = arrs[p.angles.cos].shape[0] if isinstance(p.angles, TableAnglesPlan) else 0
                raise ValueError(f"position out of range: the cos/sin tables have {rows} rows")
        # keep every input alive until the launch is queued; results as NumPy when inputs were
        return tuple(call.result(outs[s.out][0], arrs[s.src].dtype) if not inplace else outs[s.out][0]
                     for s in p.streams)


class _RmsRunner:
    def __init__(self, plan: RmsNormPlan, cfg: cuda_plan.RmsCfg, source: str, name: str):
        self.p, self.cfg, self.source, self.name = plan, cfg, source, name

    def __call__(self, x, scale, *, check: bool = True, stream=None):
        p, cfg = self.p, self.cfg
        call = _Call(stream)
        sym: dict = {}
        xa, sa = call.take(x), call.take(scale)
        validate(sym, p.inputs[0].name, xa, p.x, p.inputs[0].shape)
        validate(sym, p.inputs[1].name, sa, p.scale, p.inputs[1].shape)
        if not sa.c_contiguous:
            raise ValueError(f"{p.inputs[1].name}: the scale must be C-contiguous")
        inner = len(p.norm_shape)
        if xa.strides[len(xa.shape) - inner:] != _c_strides(xa.shape[len(xa.shape) - inner:]) and p.norm_size > 1:
            raise ValueError(f"{p.inputs[0].name}: the normalized axes must be C-contiguous")
        outer_shape = xa.shape[:len(xa.shape) - inner]
        outer_strides = xa.strides[:len(xa.shape) - inner]
        rows = int(np.prod(outer_shape)) if outer_shape else 1
        # outer axes must collapse to one row stride
        row_stride = p.norm_size
        kept = [(n, s) for n, s in zip(outer_shape, outer_strides) if n != 1]
        if kept:
            row_stride = kept[-1][1]
            acc = row_stride
            for n, s in reversed(kept):
                if s != acc:
                    raise ValueError(f"{p.inputs[0].name}: rows must be evenly spaced (make it contiguous)")
                acc *= n
        out_obj, ya = call.empty(xa.shape, p.y.name)
        k = cfg.vec if cuda_plan.rms_vector_ok(cfg.vec, [(xa.ptr, xa.itemsize), (ya.ptr, ya.itemsize)],
                                               [row_stride, p.norm_size]) else cfg.scalar
        values = {"rows": rows, "x_row_stride": row_stride, "y_row_stride": p.norm_size}
        ptrs = {p.inputs[0].name: xa.ptr, p.inputs[1].name: sa.ptr}
        args = []
        for prm in k.params:
            kind = prm.source[0]
            v = ptrs[prm.source[1]] if kind == "in" else ya.ptr if kind == "out" else values[prm.source[1]]
            args.append(_arg(prm.ctype, v))
        if rows:
            launch = cuda_plan.rms_launch(k, rows)
            kernel = _Module.get(self.source, self.name).get_function(k.name)
            with call.stream:
                kernel(launch.grid, launch.block, tuple(args))
        return (call.result(out_obj, p.y.name),)
