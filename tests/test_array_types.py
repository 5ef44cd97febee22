"""Any host array type on the CPU backends (issue 15): NumPy arrays, PyTorch CPU tensors and any
DLPack CPU producer are read in place (zero-copy: writes through the caller's memory), bf16 included;
results come back in the caller's type (PyTorch in, PyTorch out; another producer in, NumPy out);
out= and inplace= mean the same on the NumPy and C backends; inputs may be given by name.

The PyTorch tests skip without torch (CI has none); the DLPack tests use NumPy's own __dlpack__ and
small producer classes, so the same paths are exercised everywhere.
"""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen import backends
from ropegen.runtime import arrays as ra

CPU = [b for b in ("numpy", "c") if backends.get(b).unavailable() is None]

SPEC = """
rope r {{ in q: {dt}[tokens=T, heads=2, head_dim=8] in k: {dt}[tokens=T, heads=1, head_dim=8] in pos: i64[T]
  out q_rot = rotate(q) out k_rot = rotate(k) pairing = neox positions = pos angles = computed(base = 10000) }}
rmsnorm n {{ in x: {dt}[T, 16] in residual: {dt}[T, 16] in w: {dt}[16] out y out h
  residual = residual residual_add = storage epsilon = 1e-6 }}
"""
NP = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
_PROGRAMS: dict = {}


def _op(dt: str, name: str = "r"):
    if dt not in _PROGRAMS:
        _PROGRAMS[dt] = ropegen.compile(SPEC.format(dt=dt))
    return _PROGRAMS[dt][name]


def _inputs(op, dt: str, tokens: int = 3, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for t in op.ir.inputs:
        shape = tuple(tokens if isinstance(a.size, str) else a.size for a in t.axes)
        if t.dtype.name == "i64":
            out.append(np.arange(5, 5 + tokens, dtype=np.int64))
        else:
            out.append(rng.standard_normal(shape).astype(NP[dt]))
    return out


def _bits(a) -> np.ndarray:
    a = np.asarray(a) if isinstance(a, np.ndarray) else _torch_numpy(a)
    return a.view(f"u{a.itemsize}")


def _torch_numpy(t) -> np.ndarray:
    import torch
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _same(got, want) -> bool:
    return len(got) == len(want) and all(np.array_equal(_bits(g), _bits(w)) for g, w in zip(got, want))


# ---------------------------------------------------------------------------------------------
# DLPack producers without torch

class Producer:
    """A DLPack CPU producer over a NumPy array (NumPy's own export); `bf16` relabels a uint16
    array's capsule as bfloat16, which NumPy cannot export itself."""

    def __init__(self, a: np.ndarray, bf16: bool = False, device: tuple = (1, 0)):
        self.a, self.bf16, self.device = a, bf16, device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        cap = self.a.__dlpack__()
        if self.bf16:
            m = ra._DLManagedTensor.from_address(ra._capsule_pointer(cap, b"dltensor"))
            m.dl_tensor.dtype.code = 4
        return cap


def _produce(a: np.ndarray) -> Producer:
    if a.dtype == NP["bf16"]:
        return Producer(a.view(np.uint16), bf16=True)
    return Producer(a)


def _memory(p: Producer) -> np.ndarray:
    return p.a.view(NP["bf16"]) if p.bf16 else p.a


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_host_view_shares_the_producers_memory(dt):
    a = _inputs(_op(dt), dt)[0][:, ::-1]      # strided, negative strides included
    v = ra.host_view(_produce(np.ascontiguousarray(a)), "q", "c")
    assert v.dtype == NP[dt] and v.shape == a.shape
    p = _produce(a.copy())
    v = ra.host_view(p, "q", "c")
    v[0, 0, 0] = 7
    assert _memory(p)[0, 0, 0] == 7 and v.ctypes.data == p.a.ctypes.data
    assert _bits(ra.host_view(_produce(a), "q", "c")).tobytes() == _bits(a).tobytes()


def test_as_array_of_a_host_producer_is_a_numpy_view():
    # was the raw capsule in keep[0]: the GPU targets' uploads (np.asarray(keep[0])) failed on it
    a = np.arange(6, dtype=np.uint16).reshape(2, 3)
    d = ra.as_array(Producer(a, bf16=True))
    assert d.dtype == "bf16" and d.device is None and isinstance(d.keep[0], np.ndarray)
    assert d.keep[0].ctypes.data == a.ctypes.data == d.ptr


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_dlpack_producers_run_in_place_and_return_numpy(backend, dt):
    op = _op(dt)
    args = _inputs(op, dt)
    want = op.run_all(*args, backend=backend)
    got = op.run_all(*map(_produce, args), backend=backend)
    assert all(type(g) is np.ndarray for g in got) and _same(got, want)
    # in place: the producers' own memory holds the results and they are handed back
    ps = [_produce(a.copy()) for a in args]
    got = op.run_all(*ps, backend=backend, inplace=True)
    assert got[0] is ps[0] and got[1] is ps[1]
    assert _same([_memory(ps[0]), _memory(ps[1])], want)
    # out=: written through
    outs = (_produce(np.zeros_like(args[0])), _produce(np.zeros_like(args[1])))
    got = op.run_all(*args, backend=backend, out=outs)
    assert got[0] is outs[0] and _same([_memory(o) for o in outs], want)


@pytest.mark.parametrize("backend", CPU)
def test_device_and_unsupported_arrays_are_clear_errors(backend):
    op = _op("f32")
    q, k, pos = _inputs(op, "f32")
    with pytest.raises(ValueError, match=rf"^k: a .*Producer on cuda:1; the {backend} backend reads host memory"):
        op.run(q, Producer(k, device=(2, 1)), pos, backend=backend)
    with pytest.raises(ValueError, match="^out: a .* on rocm:0"):
        op.run(q, k, pos, backend=backend, out=(np.empty_like(q), Producer(np.empty_like(k), device=(10, 0))))
    with pytest.raises(ValueError, match="^q: cannot share the memory .* DLPack"):
        op.run(Producer(q.astype(np.complex64)), k, pos, backend=backend)


# ---------------------------------------------------------------------------------------------
# out=, inplace=, threads= alike on the NumPy and C backends

def _both(fn) -> list[str]:
    """The message of each CPU backend's ValueError for the same call."""
    msgs = []
    for b in CPU:
        with pytest.raises(ValueError) as exc:
            fn(b)
        msgs.append(str(exc.value))
    return msgs


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("name", ["r", "n"])
def test_numpy_backend_takes_out_inplace_threads_like_c(dt, name):
    op = _op(dt, name)
    args = _inputs(op, dt)
    for b in CPU:
        want = op.run_all(*args, backend=b)
        assert _same(op.run_all(*args, backend=b, threads=2), want)
        outs = tuple(np.full_like(w, 3) for w in want)
        got = op.run_all(*args, backend=b, out=outs)
        assert all(g is o for g, o in zip(got, outs)) and _same(outs, want)
        copies = [a.copy() for a in args]
        got = op.run_all(*copies, backend=b, inplace=True)
        srcs = copies[:2] if name == "r" else [copies[0], copies[1]]     # q, k / x (y), residual (h)
        assert all(g is s for g, s in zip(got, srcs)) and _same(got, want)


def test_numpy_and_c_refuse_the_same_options_alike():
    if len(CPU) < 2:
        pytest.skip("no C compiler")
    op = _op("f32")
    q, k, pos = _inputs(op, "f32")
    qk = np.zeros((3, 3, 8), np.float32)    # q and k as one array: out= overlapping
    cases = [dict(threads=0), dict(threads=1.5), dict(out=(np.empty_like(q), np.empty_like(k)), inplace=True),
             dict(out=(np.empty_like(q), np.empty(k.shape, np.float64))), dict(out=(qk[:, :2], qk[:, 1:]))]
    for opts in cases:
        msgs = _both(lambda b: op.run(q, k, pos, backend=b, **opts))
        assert len(set(msgs)) == 1, (opts, msgs)
    ro = q.copy()
    ro.flags.writeable = False
    msgs = _both(lambda b: op.run(ro, k, pos, backend=b, inplace=True))
    assert len(set(msgs)) == 1 and "read-only" in msgs[0]
    assert "inplace" in backends.get("numpy").run_options and "out" in backends.get("numpy").run_options


# ---------------------------------------------------------------------------------------------
# inputs by name

@pytest.mark.parametrize("backend", CPU)
def test_inputs_by_name(backend):
    op = _op("f32")
    q, k, pos = _inputs(op, "f32")
    want = op.run_all(q, k, pos, backend=backend)
    assert _same(op(k=k, pos=pos, q=q, backend=backend), want)
    assert _same(op.run(q, pos=pos, k=k, backend=backend), want)
    assert _same(op.bind(q, k, pos=pos, backend=backend)(), want)
    with pytest.raises(ValueError, match=r"unknown argument 'qq'.*did you mean 'q'\?"):
        op.run(qq=q, k=k, pos=pos, backend=backend)
    with pytest.raises(ValueError, match=r"unknown argument 'thread'.*did you mean 'threads'\?"):
        op.run(q, k, pos, backend=backend, thread=2)
    with pytest.raises(ValueError, match=r"missing input 'pos'"):
        op.run(q, k=k, backend=backend)
    with pytest.raises(ValueError, match=r"missing inputs 'k', 'pos'"):
        op.bind(q=q, backend=backend)
    with pytest.raises(ValueError, match=r"input 'k' given twice: as argument 2 and by name"):
        op.run(q, k, k=k, pos=pos, backend=backend)
    with pytest.raises(ValueError, match=r"unknown argument 'check'"):
        op.bind(q, k, pos, backend=backend, check=False)


# ---------------------------------------------------------------------------------------------
# PyTorch CPU tensors

def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed (CI has none)")


def _tensor(a: np.ndarray):
    torch = _torch()
    if a.dtype == NP["bf16"]:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_torch_tensors_in_torch_tensors_out(backend, dt):
    torch = _torch()
    op = _op(dt)
    args = _inputs(op, dt)
    want = op.run_all(*args, backend=backend)
    ts = [_tensor(a) for a in args]
    got = op.run_all(*ts, backend=backend)
    assert all(isinstance(g, torch.Tensor) and g.dtype == ts[0].dtype for g in got) and _same(got, want)
    # in place: the caller's tensors, written through (same storage)
    ptrs = [t.data_ptr() for t in ts[:2]]
    got = op.run_all(*ts, backend=backend, inplace=True)
    assert got[0] is ts[0] and got[1] is ts[1] and [g.data_ptr() for g in got] == ptrs and _same(got, want)
    # out=, and a mixed call (NumPy positions): still PyTorch out
    outs = (torch.zeros_like(ts[0]), torch.zeros_like(ts[1]))
    got = op.run_all(_tensor(args[0]), _tensor(args[1]), args[2], backend=backend, out=outs)
    assert got[0] is outs[0] and got[1] is outs[1] and _same(outs, want)
    # a transposed-then-restored (non-contiguous) view reads the same values
    qt = _tensor(np.ascontiguousarray(args[0].transpose(1, 0, 2))).transpose(0, 1)
    assert _same(op.run_all(qt, _tensor(args[1]), _tensor(args[2]), backend=backend), want)


@pytest.mark.parametrize("backend", CPU)
def test_torch_rmsnorm_in_place_over_x_and_residual(backend):
    op = _op("bf16", "n")
    args = _inputs(op, "bf16")
    want = op.run_all(*args, backend=backend)
    ts = [_tensor(a) for a in args]
    got = op.run_all(x=ts[0], residual=ts[1], w=ts[2], backend=backend, inplace=True)
    assert got[0] is ts[0] and got[1] is ts[1] and _same(got, want)


@pytest.mark.parametrize("backend", CPU)
def test_torch_errors_name_the_input_and_device(backend):
    torch = _torch()
    op = _op("f32")
    q, k, pos = (_tensor(a) for a in _inputs(op, "f32"))
    with pytest.raises(ValueError, match=rf"^q: a torch Tensor on meta.*the {backend} backend reads host memory"):
        op.run(q.to("meta"), k, pos, backend=backend)
    with pytest.raises(ValueError, match="^k: cannot share .*detach"):
        op.run(q, k.clone().requires_grad_(True), pos, backend=backend)
    with pytest.raises(ValueError, match="^pos: expected dtype int64, got float32"):
        op.run(q, k, pos.float(), backend=backend)
    assert torch is not None


@pytest.mark.parametrize("backend", CPU)
def test_torch_bind(backend):
    torch = _torch()
    op = _op("bf16")
    args = _inputs(op, "bf16")
    want = op.run_all(*args, backend=backend)
    ts = [_tensor(a) for a in args]
    bound = op.bind(*ts, backend=backend)
    got = bound()
    assert isinstance(got[0], torch.Tensor) and _same(got, want)
    again = [_tensor(a) for a in _inputs(op, "bf16", seed=1)]
    assert _same(bound(*again), op.run_all(*again, backend=backend))
    assert all(type(g) is np.ndarray for g in bound(*args))     # NumPy in, NumPy out
    ts2 = [_tensor(a) for a in args]
    inplace = op.bind(*ts2, backend=backend, inplace=True)
    got = inplace()
    assert got[0] is ts2[0] and _same(got, want)


def test_torch_fp8_outputs_come_back_as_torch_fp8():
    torch = _torch()
    prog = ropegen.compile("""rope f { in q: f32[tokens=T, heads=1, head_dim=8] in pos: i64[T] in s: f32[1]
      out q_rot = rotate(q) dtype = f8e4m3 quant_scale = s pairing = neox positions = pos
      angles = computed(base = 10000) }""")
    op = prog["f"]
    q = np.random.default_rng(0).standard_normal((2, 1, 8)).astype(np.float32)
    pos, scale = np.arange(2), np.array([2.0], np.float32)
    for b in CPU:
        want = op.run(q, pos, scale, backend=b)
        got = op.run(torch.from_numpy(q), torch.from_numpy(pos), torch.from_numpy(scale), backend=b)
        assert got.dtype == torch.float8_e4m3fn and np.array_equal(got.view(torch.uint8).numpy(), want.view(np.uint8))


def test_pointer_of_a_view_is_the_tensors():
    torch = _torch()
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]
    v = ra.host_view(t, "x", "c")
    assert v.ctypes.data == t.data_ptr() and v.strides == (16, 4)
    ctypes.memset(v.ctypes.data, 0, 4)
    assert t[0, 0].item() == 0.0


@pytest.mark.skipif(backends.get("opencl").unavailable() is not None, reason="no OpenCL device")
@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_opencl_uploads_dlpack_host_producers(dt):
    # was np.asarray(capsule) in the upload (as_array kept the raw capsule first): a TypeError
    op = _op(dt)
    args = _inputs(op, dt)
    want = op.run_all(*args, backend="opencl")
    assert _same(op.run_all(*map(_produce, args), backend="opencl"), want)
    ps = [_produce(a.copy()) for a in args]
    op.run_all(*ps, backend="opencl", inplace=True)       # written back through the producer's memory
    assert _same([_memory(ps[0]), _memory(ps[1])], want)


@pytest.mark.parametrize("word", ["out", "inplace", "threads", "stream", "check", "backend"])
def test_a_call_keyword_cannot_name_a_tensor(word):
    """Inputs may be passed by name, so a tensor named like a keyword of the call would be ambiguous:
    the spec checker refuses it (C036) instead of letting the keyword shadow the option."""
    from ropegen.spec.diagnostics import SpecError
    spec = f"""rope r {{
    in {word}: f32[tokens=T, heads=2, head_dim=8]
    in positions: i64[T]
    out y = rotate({word})
    pairing = neox
    positions = positions
    angles = computed(base = 10000)
}}
"""
    with pytest.raises(SpecError) as err:
        ropegen.compile(spec)
    assert [d.code for d in err.value.diagnostics] == ["C036"]
