"""The CUDA host path (issue 14 items 1, 2, 7), checked without a GPU on test_cuda_backend.py's
stand-in for CuPy (which records every allocation, launch, copy and sync with its stream) and a
stand-in for PyTorch below; the tests marked `gpu` run the same on a device.

* the default call on device arrays makes no sync, no device-to-host or host-to-device copy and no
  per-call error-word allocation (CUDA-graph capturable); a repeated signature skips the binding;
* errors are sticky per (device, stream): check_errors() raises them later (and clears them),
  check=True raises at once; packed sequence lengths and indptrs are checked on the device with
  the host's verdict;
* the call runs on the caller's stream: an explicit `stream=`, CuPy's current stream, PyTorch's
  current stream for tensors (outputs allocated there too);
* the compiled module is looked up once per operator and device, cached under the device and the
  NVRTC version, and a failed wheel build is reported, not swallowed.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import types
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.backends.cuda import backend as cuda_backend
from ropegen.backends.cuda import nvrtc
from ropegen.ir.dtypes import DTYPES
from ropegen.ops import reference
from ropegen.ops.inputs import CASES, make_inputs
from ropegen.runtime import arrays as rt_arrays
from ropegen.runtime import host

import test_cuda_backend as tcb

ROOT = Path(__file__).resolve().parent.parent
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed (host build of the .cu)")


def _op(spec: str, name: str, launch: bool = True):
    """A fresh operator (no cached kernel) whose source the stand-in can run."""
    op = ropegen.compile(spec if "{" in spec else ROOT / "examples" / spec)[name]
    if launch:
        tcb._CFG_OF[op.sources["cuda"][f"{op.name}.cu"]] = (cuda_backend.CudaBackend().config(op.plan),)
    return op


def _syncs(events) -> list:
    return [e for e in events if e[0] in ("d2h", "h2d", "sync")]


@needs_gxx
def test_default_device_call_neither_syncs_nor_allocates_an_error_word(monkeypatch):
    cp = tcb._fake_cupy(monkeypatch)
    op = _op("llama3.rope", "llama3_8b_cached")
    arrays = make_inputs(op.ir, CASES[1], seed=3)
    ref = reference.evaluate(op.ir, arrays)
    dev = [cp.ndarray(arrays[n]) for n in op.inputs]
    kern = op.kernel("cuda")
    for i in range(3):
        del cp.events[:]
        outs = kern(*dev)
        assert not _syncs(cp.events), cp.events
        allocs = [e for e in cp.events if e[0] == "alloc"]
        # the first call makes the two error words of this stream; later calls only the outputs
        assert len(allocs) == len(op.outputs) + (2 if i == 0 else 0), cp.events
        assert [e[0] for e in cp.events].count("launch") == 1
        for name, out in zip(op.outputs, outs):
            assert tcb.compare(out.a, ref[name], op.plan.storage, 5.0)[2], name


@needs_gxx
def test_errors_are_sticky_until_check_errors(monkeypatch):
    cp = tcb._fake_cupy(monkeypatch)
    op = _op("llama3.rope", "llama3_8b_cached")
    arrays = make_inputs(op.ir, CASES[1], seed=1)
    bad = arrays["positions"].copy()
    bad[2] = arrays["cos"].shape[0]
    good = [cp.ndarray(arrays[n]) for n in op.inputs]
    wrong = [cp.ndarray(bad if n == "positions" else arrays[n]) for n in op.inputs]
    kern = op.kernel("cuda")
    kern(*good)
    kern.check_errors()                       # nothing recorded (a read-back: the caller's sync point)
    del cp.events[:]
    kern(*wrong)                              # no raise, no read-back
    kern(*good)
    assert "d2h" not in [e[0] for e in cp.events]
    with pytest.raises(ValueError, match="position out of range.*check=False since the last check"):
        kern.check_errors()
    kern.check_errors()                       # cleared
    with pytest.raises(ValueError, match="position out of range"):
        kern(*wrong, check=True)              # at once, from this call's own word
    kern.check_errors()                       # which is not the deferred one
    kern(*good, check=True)                   # and was cleared after it raised
    # host inputs: the call syncs to return NumPy anyway, so it checks by default
    with pytest.raises(ValueError, match="position out of range"):
        op.run(*[bad if n == "positions" else arrays[n] for n in op.inputs], backend="cuda")


def test_quick_path_skips_the_binding_and_still_refuses_a_new_signature(monkeypatch):
    cp = tcb._fake_cupy(monkeypatch, launch=False)
    op = _op("llama3.rope", "llama3_8b", launch=False)
    arrays = make_inputs(op.ir, CASES[1], seed=2)
    dev = [cp.ndarray(arrays[n]) for n in op.inputs]
    kern = op.kernel("cuda")
    gone = weakref.ref(kern(*dev)[0])          # the call whose signature the quick path keeps
    assert gone() is None, "the quick path keeps the first call's output alive"
    first = kern(*dev)
    real = host.bind
    monkeypatch.setattr(host, "bind", lambda *a, **k: pytest.fail("the quick path bound the arrays again"))
    again = kern(*dev)
    assert [a.shape for a in again] == [a.shape for a in first] and again[0] is not first[0]
    monkeypatch.setattr(host, "bind", real)
    # the same shape at an address that allows no vectors: another signature, the scalar kernel
    q = arrays["q"]
    spare = np.zeros(q.size + 1, q.dtype)
    shifted = spare[1:].reshape(q.shape)
    shifted[...] = q
    del cp.kernels[:]
    for x in (shifted, q, shifted):
        kern(cp.ndarray(x), *dev[1:])
    assert cp.kernels == [op.name + "_scalar", op.name + "_vec", op.name + "_scalar"], cp.kernels
    with pytest.raises(ValueError):
        kern(cp.ndarray(q[:, :, :64].copy()), *dev[1:])          # another shape: bound again, refused


ATB = """
rope packed {{
    in x: f32[tokens=T, heads=2, head_dim=8]
    in L: {it}[N]
    in cos: f32[R, 4]
    in sin: f32[R, 4]
    out y = rotate(x)
    pairing = neox
    sequences = {seq}
    positions = in_sequence
    angles = table(cos = cos, sin = sin)
}}
"""


@needs_gxx
@pytest.mark.parametrize("it", ["i32", "i64"])
@pytest.mark.parametrize("indptr", [False, True], ids=["lengths", "indptr"])
def test_packed_sequences_are_checked_on_the_device(monkeypatch, it, indptr):
    cp = tcb._fake_cupy(monkeypatch)
    op = _op(ATB.format(it=it, seq="indptr(L)" if indptr else "L"), "packed")
    dt = np.dtype(np.int32 if it == "i32" else np.int64)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 2, 8)).astype(np.float32)
    cos, sin = (rng.uniform(-1, 1, (12, 4)).astype(np.float32) for _ in range(2))
    kern = op.kernel("cuda")

    def seq(lens):
        return np.concatenate([[0], np.cumsum(lens)]) if indptr else np.array(lens)

    good = seq([3, 0, 5, 1]).astype(dt)
    want = op.run(x, good, cos, sin, backend="cuda")          # host values: checked on the host
    del cp.events[:]
    got = kern(cp.ndarray(x), cp.ndarray(good), cp.ndarray(cos), cp.ndarray(sin))[0]
    assert not _syncs(cp.events), cp.events
    assert np.array_equal(got.a, want)
    kern.check_errors()
    wrap = [[2 ** 61] * 8 + [9]]        # lengths whose int64 sum wraps around to the token count
    bads = [[3, -1, 7], [1, 1, 1], [9, 0, 1]] + ([] if indptr or it == "i32" else wrap)
    ptrs = [[1, 3, 9], [0, 5, 3, 9], [0, 4, 8], [0, 4, 10], [0, -1, 9]] if indptr else []
    for values in [seq(b) for b in bads] + [np.array(p) for p in ptrs]:
        values = np.array(values).astype(dt)
        with pytest.raises(ValueError, match="L: the indptr must start at 0" if indptr else "L: sequence lengths"):
            op.run(x, values, cos, sin, backend="cuda")       # on the host
        dev = [cp.ndarray(x), cp.ndarray(values), cp.ndarray(cos), cp.ndarray(sin)]
        kern(*dev)
        with pytest.raises(ValueError, match="L: the indptr must start at 0" if indptr else "L: sequence lengths"):
            kern.check_errors()
        with pytest.raises(ValueError, match="L: the indptr must start at 0" if indptr else "L: sequence lengths"):
            kern(*dev, check=True)                            # read back and checked on the host
        kern.check_errors()


# ---------------------------------------------------------------------------------------------
# streams

def _fake_torch(monkeypatch, cp):
    """A `torch` module over NumPy memory: CUDA tensors exported through a real DLPack capsule,
    streams with handles, torch.empty recording ("torch_alloc", current stream) in cp.events."""
    torch = types.ModuleType("torch")
    current = {}

    class Dtype:
        def __init__(self, name):
            self.name = name

    for d in DTYPES.values():
        if d.torch:
            setattr(torch, d.torch, Dtype(d.name))

    class Device:
        type, index = "cuda", tcb.FAKE_DEVICE

    class Stream:
        def __init__(self, handle=None, device=None):
            self.cuda_stream = id(self) if handle is None else handle

    default = Stream(0)

    class StreamContext:
        def __init__(self, s):
            self.s = s

        def __enter__(self):
            self.prev = current.get(0, default)
            current[0] = self.s

        def __exit__(self, *a):
            current[0] = self.prev

    class Tensor:
        is_cuda, requires_grad = True, False
        device = Device()

        def __init__(self, a, name):
            self.a, self.name = a, name
            self.dtype = getattr(torch, DTYPES[name].torch)
            self.shape = a.shape
            self.exported = []

        def data_ptr(self):
            return self.a.ctypes.data

        def stride(self):
            return tuple(s // self.a.itemsize for s in self.a.strides)

        def __dlpack_device__(self):
            return (rt_arrays.KDL_CUDA, tcb.FAKE_DEVICE)

        def __dlpack__(self, stream=None):
            self.exported.append(stream)
            nd = self.a.ndim
            shape, strides = (ctypes.c_int64 * nd)(*self.shape), (ctypes.c_int64 * nd)(*self.stride())
            code, bits = DTYPES[self.name].dlpack
            m = rt_arrays._DLManagedTensor()
            where = rt_arrays._DLDevice(rt_arrays.KDL_CUDA, tcb.FAKE_DEVICE)
            m.dl_tensor = rt_arrays._DLTensor(self.data_ptr(), where, nd,
                                              rt_arrays._DLDataType(code, bits, 1), shape, strides, 0)
            new = ctypes.pythonapi.PyCapsule_New
            new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
            self._alive = (m, shape, strides)
            return new(ctypes.addressof(m), b"dltensor", None)

    Tensor.__module__ = Stream.__module__ = "torch"

    def empty(shape, dtype, device):
        cp.events.append(("torch_alloc", current.get(0, default).cuda_stream))
        return Tensor(tcb.aligned_empty(shape, DTYPES[dtype.name].np_dtype), dtype.name)

    torch.empty = empty
    torch.Tensor = Tensor
    torch.cuda = types.SimpleNamespace(current_stream=lambda device=None: current.get(0, default), Stream=Stream,
                                       ExternalStream=Stream, stream=StreamContext)
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def _launch_streams(events) -> list:
    return [e[1] for e in events if e[0] == "launch"]


def test_calls_run_on_the_callers_cupy_stream_or_the_given_one(monkeypatch):
    cp = tcb._fake_cupy(monkeypatch, launch=False)
    op = _op("llama3.rope", "llama3_8b", launch=False)
    arrays = make_inputs(op.ir, CASES[1], seed=2)
    dev = [cp.ndarray(arrays[n]) for n in op.inputs]
    kern = op.kernel("cuda")
    side, other = cp.Stream(), cp.Stream()
    for _ in range(2):          # the binding call, then the quick path
        del cp.events[:]
        with side:
            kern(*dev)
        assert {e[1] for e in cp.events} == {side.ptr}, cp.events
        del cp.events[:]
        with side:
            kern(*dev, stream=other)
        assert {e[1] for e in cp.events} == {other.ptr}, cp.events


def test_torch_tensors_run_on_torchs_current_stream_side_stream_race(monkeypatch):
    """Under `torch.cuda.stream(s)` the outputs are allocated on s and the kernel runs on s (it ran
    on CuPy's stream before, racing whatever s had queued to write the inputs)."""
    cp = tcb._fake_cupy(monkeypatch, launch=False)
    torch = _fake_torch(monkeypatch, cp)
    op = _op("llama3.rope", "llama3_8b", launch=False)
    arrays = make_inputs(op.ir, CASES[1], seed=2)
    tensors = [torch.Tensor(arrays[t.name], t.dtype.name) for t in op.ir.inputs]
    kern = op.kernel("cuda")
    s = torch.cuda.Stream()
    for _ in range(2):          # the binding call, then the quick path
        del cp.events[:]
        with torch.cuda.stream(s):
            outs = kern(*tensors)
        assert all(isinstance(o, torch.Tensor) for o in outs)
        assert [e for e in cp.events if e[0] in ("torch_alloc", "launch")] == \
            [("torch_alloc", s.cuda_stream)] * len(op.outputs) + [("launch", s.cuda_stream)], cp.events
    assert tensors[0].exported[-1] == s.cuda_stream       # DLPack was told the consumer's stream
    # an explicit stream: outputs allocated on it too, though torch's current stream is another
    other = torch.cuda.Stream()
    del cp.events[:]
    kern(*tensors, stream=other)
    assert {e[1] for e in cp.events if e[0] in ("torch_alloc", "launch")} == {other.cuda_stream}


def test_rmsnorm_runs_on_torchs_current_stream(monkeypatch):
    cp = tcb._fake_cupy(monkeypatch, launch=False)
    torch = _fake_torch(monkeypatch, cp)
    op = tcb.RMS_OPS[0]
    op = _op(op.spec.file, op.name, launch=False)
    arrays = make_inputs(op.ir, CASES[1], seed=2)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        outs = op.run_all(*[torch.Tensor(arrays[t.name], t.dtype.name) for t in op.ir.inputs], backend="cuda")
    assert all(isinstance(o, torch.Tensor) for o in outs)
    assert {e for e in cp.events if e[0] in ("torch_alloc", "launch")} == {("torch_alloc", s.cuda_stream),
                                                                            ("launch", s.cuda_stream)}, cp.events


# ---------------------------------------------------------------------------------------------
# the compiled module

def test_module_is_looked_up_once_per_operator_and_device(monkeypatch):
    cp = tcb._fake_cupy(monkeypatch, launch=False)
    op = _op("llama3.rope", "llama3_8b", launch=False)
    looked = []
    monkeypatch.setattr(cuda_backend._Module, "get", classmethod(
        lambda cls, source, name: looked.append(name) or types.SimpleNamespace(
            get_function=lambda k: lambda grid, block, args: None)))
    arrays = make_inputs(op.ir, CASES[1], seed=2)
    for _ in range(4):
        op.run(*[cp.ndarray(arrays[n]) for n in op.inputs], backend="cuda")
        op.run(*[arrays[n] for n in op.inputs], backend="cuda")
    assert len(looked) == 1, looked     # (the source was hashed on every call before)


def _module_stand_in(monkeypatch, arch="90"):
    """cupy with a device of `arch` and a RawModule that records its arguments."""
    made = []

    class RawModule:
        def __init__(self, **kw):
            made.append(kw)

        def get_function(self, name):
            return None

    cupy = types.ModuleType("cupy")
    cupy.RawModule = RawModule
    cupy.cuda = types.SimpleNamespace(Device=lambda: types.SimpleNamespace(compute_capability=arch),
                                      nvrtc=types.SimpleNamespace(getVersion=lambda: (12, 4)))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(cuda_backend._Module, "_cache", {})
    return cupy, made


def test_module_cache_key_names_the_device_and_the_nvrtc_version(monkeypatch):
    cupy, _ = _module_stand_in(monkeypatch)
    builds = []
    monkeypatch.setattr(cuda_backend._Module, "_build", classmethod(lambda cls, s, n, arch, key: builds.append(key)))
    monkeypatch.setattr(nvrtc, "available", lambda: None)
    version = [(12, 4)]
    monkeypatch.setattr(nvrtc, "version", lambda: version[0])
    cuda_backend._Module.get("src", "a.cu")
    cuda_backend._Module.get("src", "a.cu")
    assert len(builds) == 1
    version[0] = (12, 8)
    cuda_backend._Module.get("src", "a.cu")
    assert len(builds) == 2, "another NVRTC reused the cached module"
    cupy.cuda.Device = lambda: types.SimpleNamespace(compute_capability="80")
    cuda_backend._Module.get("src", "a.cu")
    assert len(set(builds)) == 3


def test_failed_wheel_build_is_reported_and_the_fallback_keeps_the_numerics(monkeypatch):
    _, made = _module_stand_in(monkeypatch)
    monkeypatch.setattr(nvrtc, "available", lambda: None)
    monkeypatch.setattr(nvrtc, "version", lambda: (12, 4))

    def broken(*a, **k):
        raise nvrtc.NvrtcError("NVRTC could not compile a.cu for sm_90", "error: the log")
    monkeypatch.setattr(nvrtc, "compile_source", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cuda_backend._Module.get('extern "C" __global__ void k(int x) {}', "a.cu")
    assert any("NVRTC could not compile a.cu" in str(w.message) and "CuPy" in str(w.message) for w in caught), caught
    assert made and "--fmad=false" in made[-1]["options"], made

    class Refusing:
        def __init__(self, **kw):
            raise RuntimeError("CuPy's compile failed too")
    sys.modules["cupy"].RawModule = Refusing
    monkeypatch.setattr(cuda_backend._Module, "_cache", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="(?s)neither the NVRTC wheel .*NVRTC could not compile.* nor CuPy"):
            cuda_backend._Module.get('extern "C" __global__ void k(int x) {}', "a.cu")


@pytest.mark.parametrize("spec", sorted(p.name for p in (ROOT / "examples").glob("*.rope")))
def test_the_first_kernel_is_found_behind_its_launch_bounds(spec):
    """_build loads the wheel's cubin by the first kernel's name; it read `__launch_bounds__` as the
    name, so every module fell back to CuPy's compile (seen on an H200)."""
    for op in ropegen.compile(ROOT / "examples" / spec):
        source = op.sources["cuda"][f"{op.name}.cu"]
        names = [k.name for k in cuda_backend.CudaBackend().config(op.plan).kernels]
        assert cuda_backend._first_kernel(source) == names[0], (op.name, names)


def test_the_wheels_cubin_is_loaded_without_the_fallback(monkeypatch):
    """The module is the wheel's cubin, looked up by a symbol that the cubin defines (no warning)."""
    why = nvrtc.available()
    if why:
        pytest.skip(f"NVRTC unavailable: {why}")
    loaded = []

    class RawModule:
        def __init__(self, path=None, **kw):
            assert path is not None, f"CuPy's compile was used: {kw}"
            self.binary = Path(path).read_bytes()

        def get_function(self, name):
            if b"\0" + name.encode() + b"\0" not in self.binary:
                raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name}")
            loaded.append(name)

    _module_stand_in(monkeypatch)
    sys.modules["cupy"].RawModule = RawModule
    monkeypatch.setattr(cuda_backend._Module, "_dir", None)
    for spec, name in (("llama3.rope", "llama3_8b"), ("onnx_rmsnorm.rope", "rms_last_axis")):
        op = ropegen.compile(ROOT / "examples" / spec)[name]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cuda_backend._Module.get(op.sources["cuda"][f"{op.name}.cu"], f"{op.name}.cu")
    assert len(loaded) == 2, loaded


# ---------------------------------------------------------------------------------------------
# on a GPU

gpu = pytest.mark.gpu


def _gpu_torch():
    why = cuda_backend.unavailable()
    if why:
        pytest.skip(f"no GPU run: {why}")
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch


def _to_torch(torch, op, name, a):
    """An input on the GPU as a tensor of its declared dtype (bf16 through float32)."""
    dt = next(t.dtype.name for t in op.ir.inputs if t.name == name)
    t = torch.from_numpy(np.asarray(a, np.float32) if dt == "bf16" else np.ascontiguousarray(a)).cuda()
    return t.to(torch.bfloat16) if dt == "bf16" else t


@gpu
def test_gpu_side_stream_race():
    """The inputs are written on a side stream after a long sleep; the call under that stream must
    wait for them (a kernel on another stream reads the zeros first)."""
    torch = _gpu_torch()
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"]
    arrays = make_inputs(op.ir, CASES[2], seed=7)
    ref = reference.evaluate(op.ir, arrays)
    src = {n: _to_torch(torch, op, n, arrays[n]) for n in op.inputs}
    s = torch.cuda.Stream()
    for _ in range(3):
        dst = {n: torch.zeros_like(v) for n, v in src.items()}
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            torch.cuda._sleep(50_000_000)
            for n in op.inputs:
                dst[n].copy_(src[n])
            outs = op.run_all(*[dst[n] for n in op.inputs], backend="cuda")
        s.synchronize()
        for name, out in zip(op.outputs, outs):
            assert tcb.compare(out.float().cpu().numpy(), ref[name], op.plan.storage, 5.0)[2], name


def _graph_capture_check() -> None:
    """The default call captured in a CUDA graph and replayed (run by the test below in a process of
    its own)."""
    import torch
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b_cached"]
    arrays = make_inputs(op.ir, CASES[2], seed=8)
    ref = reference.evaluate(op.ir, arrays)
    dev = [_to_torch(torch, op, n, arrays[n]) for n in op.inputs]
    kern = op.kernel("cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        kern(*dev)          # warm-up on the capturing stream: the module, its error words, the quick path
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        outs = kern(*dev)
    g.replay()
    torch.cuda.synchronize()
    for name, out in zip(op.outputs, outs):
        assert tcb.compare(out.float().cpu().numpy(), ref[name], op.plan.storage, 5.0)[2], name
    kern.check_errors()


@gpu
def test_gpu_default_call_is_graph_capturable():
    """In a process of its own: a capture that fails can leave the process's CUDA context unusable,
    and every later CUDA test of this pytest worker would then fail as well (the first GPU run, on an
    H200, had a cascade of failures that began about here)."""
    _gpu_torch()
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
            "import test_cuda_host as t; t._graph_capture_check(); print('graph ok')")
    r = subprocess.run([sys.executable, "-c", code, str(ROOT), str(ROOT / "tests")], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "graph ok" in r.stdout, (r.stdout + r.stderr)[-4000:]
