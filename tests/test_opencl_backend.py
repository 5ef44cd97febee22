"""The OpenCL backend: every example against the float64 reference and the C backend, pyopencl
arrays (zero copy, views, in place, out=, aliasing, foreign contexts), errors through the error
word, the prelude's conversions bit for bit, the generated host loader on its own, the bench, and
why the backend is unavailable.

Tests that need an OpenCL device skip with the backend's own reason when it has none (on a host
where PoCL cannot build kernels, for one); the rendering and `unavailable()` tests run everywhere.
"""
from __future__ import annotations

import ast
import importlib.util
import math
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.backends.opencl import backend as clb
from ropegen.backends.opencl import facts
from ropegen.crosscheck import _storage_dtype, compare
from ropegen.ops import reference
from ropegen.ops.inputs import CASES, make_inputs
from ropegen.render import render
from ropegen.runtime import gpu_call

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.rope"))
WHY = clb.unavailable()
device = pytest.mark.skipif(WHY is not None, reason=f"OpenCL cannot run here: {WHY}")
C_WHY = CBackend().unavailable()

OPS = [op for path in EXAMPLES for op in ropegen.compile(path)]
OP_IDS = [op.name for op in OPS]


def _op(name):
    return next(o for o in OPS if o.name == name)


def _fp64() -> bool:
    return "cl_khr_fp64" in clb.default_queue().device.extensions


def _magnitude(arrays) -> float:
    return max(float(np.max(np.abs(np.asarray(a, dtype=np.float64)))) if a.size and a.dtype.kind == "f"
               else 0.0 for a in arrays.values())


def _bits(a) -> np.ndarray:
    a = a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a
    return np.ascontiguousarray(a).view(np.uint8)


def _same(xs, ys) -> bool:
    return len(xs) == len(ys) and all(np.array_equal(_bits(x), _bits(y)) for x, y in zip(xs, ys))


def _run_cl(op, args, **kw):
    """op.run_all on OpenCL; a device without cl_khr_fp64 skips an operator that computes in double."""
    try:
        return op.run_all(*args, backend="opencl", **kw)
    except clb.OpenCLError as e:
        if "cl_khr_fp64" in str(e) and not _fp64():
            pytest.skip(str(e))
        raise


@pytest.fixture(scope="module")
def queue():
    """A queue of its own on the default context: results must come back on the caller's queue."""
    import pyopencl as cl
    return cl.CommandQueue(clb.default_queue().context)


def _to_device(queue, arrays):
    import pyopencl.array as cla
    return [cla.to_device(queue, np.asarray(a).copy(order="C")) for a in arrays]   # rank 0 stays rank 0


# ---------------------------------------------------------------------------------------------
# generated sources (no device needed)

@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_sources_are_a_cl_file_and_a_host_loader_free_of_ropegen(op):
    files = op.sources["opencl"]
    assert set(files) == {f"{op.name}.cl", f"{op.name}_host.py"}
    host = files[f"{op.name}_host.py"]
    imported = set()
    for node in ast.walk(ast.parse(host)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"pathlib", "numpy", "pyopencl"}, imported
    kernels = re.findall(r'^    "(\w+)": \((\d+), \($', host, re.M)
    assert kernels, host[:400]
    cl_text = files[f"{op.name}.cl"]
    for name, block in kernels:
        assert re.search(rf"reqd_work_group_size\({block}, 1, 1\)\)\) void {name}\(", cl_text), name
    for bad in ("fast-relaxed-math", "mad-enable", "unsafe-math"):
        assert bad not in host and bad not in " ".join(facts.BUILD_OPTIONS)
    assert "#pragma OPENCL FP_CONTRACT OFF" in cl_text


# ---------------------------------------------------------------------------------------------
# every example operator, every input case: the float64 reference, the C backend, NumPy's bits

@device
@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_example_matches_reference_and_c(op):
    dtype = _storage_dtype(op)
    table = op.kind == "rope" and type(op.plan.angles).__name__ == "TableAnglesPlan"
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=100 + i)
        args = [arrays[n] for n in op.inputs]
        ref = reference.evaluate(op.ir, arrays)
        outs = _run_cl(op, args)
        assert all(isinstance(o, np.ndarray) for o in outs)
        mag = _magnitude(arrays)
        for name, out in zip(op.outputs, outs):
            _, _, ok = compare(out, ref[name], dtype, mag)
            assert ok, f"{op.name} {case.label} {name} vs reference"
        if table:
            # no transcendental function between inputs and outputs: NumPy's (and C's) bits exactly
            assert _same(outs, op.run_all(*args, backend="numpy")), f"{op.name} {case.label}"
        if C_WHY is None:
            c_outs = op.run_all(*args, backend="c")
            for name, a, b in zip(op.outputs, outs, c_outs):
                x, y = a.astype(np.float64), b.astype(np.float64)
                allowed = 2 * (dtype.rtol * np.abs(y) + dtype.atol * max(1.0, mag))
                assert a.dtype == b.dtype and a.shape == b.shape
                assert (np.abs(x - y) <= allowed).all(), f"{op.name} {case.label} {name} vs C"
                if table:
                    assert np.array_equal(_bits(a), _bits(b)), f"{op.name} {case.label} {name} vs C bits"


# ---------------------------------------------------------------------------------------------
# pyopencl arrays

@device
@pytest.mark.parametrize("name", ["llama3_8b_cached", "atb_coeff4_fp16", "onnx_rope_4d", "rms_mixed_types",
                                  "rms_bf16_stash_f64"])
def test_pyopencl_arrays_in_and_out(name, queue):
    import pyopencl.array as cla
    op = _op(name)
    arrays = make_inputs(op.ir, CASES[1], seed=5)
    args = [np.ascontiguousarray(arrays[n]) for n in op.inputs]
    want = _run_cl(op, args)
    dev = _to_device(queue, args)
    got = _run_cl(op, dev)
    for g, w in zip(got, want):
        assert isinstance(g, cla.Array) and g.queue is queue and g.context == queue.context
        assert g.dtype == w.dtype and g.shape == w.shape
    assert _same(got, want)
    assert _same(dev, args), "inputs changed"


@device
def test_bf16_and_f16_arrays_keep_their_dtypes(queue):
    for name, dt in (("llama3_8b_cached", ml_dtypes.bfloat16), ("atb_coeff4_fp16", np.float16)):
        op = _op(name)
        arrays = make_inputs(op.ir, CASES[0], seed=9)
        dev = _to_device(queue, [arrays[n] for n in op.inputs])
        assert dev[0].dtype == np.dtype(dt)
        outs = _run_cl(op, dev)
        assert all(o.dtype == np.dtype(dt) for o in outs)
        assert _same(outs, op.run_all(*[arrays[n] for n in op.inputs], backend="numpy"))


def _spy_kernels(monkeypatch) -> list[str]:
    used: list[str] = []
    real = gpu_call.rope_bind

    def spy(*a, **kw):
        k, launch, values = real(*a, **kw)
        used.append(k.name)
        return k, launch, values
    monkeypatch.setattr(gpu_call, "rope_bind", spy)
    return used


@device
def test_offset_and_strided_views_run_the_scalar_kernel(queue, monkeypatch):
    op = _op("llama3_8b_cached")
    arrays = make_inputs(op.ir, CASES[1], seed=3)
    q, k, pos, cos, sin = (arrays[n] for n in op.inputs)
    rng = np.random.default_rng(3)
    big = rng.standard_normal((q.shape[0] + 1, 40, 129)).astype(q.dtype)
    used = _spy_kernels(monkeypatch)
    views = {
        "token offset": lambda a: a[1:, 3:35, 1:],        # offset, head stride 129: not vector aligned
        "head slice": lambda a: a[:-1, 5:37, :128],       # a sliced head range of a wider tensor
        "every other token": lambda a: a[::2, :32, 1:],  # a non-contiguous token stride
    }
    kd, pd, cd, sd = _to_device(queue, [k, pos, cos, sin])
    dbig = _to_device(queue, [big])[0]
    for label, view in views.items():
        qn = view(big)
        if qn.shape[0] != k.shape[0]:
            kn, kd2 = k[: qn.shape[0]], _to_device(queue, [k[: qn.shape[0]]])[0]
            pn, pd2 = pos[: qn.shape[0]], _to_device(queue, [pos[: qn.shape[0]]])[0]
        else:
            kn, kd2, pn, pd2 = k, kd, pos, pd
        want = op.run_all(qn, kn, pn, cos, sin, backend="numpy")
        used.clear()
        got = _run_cl(op, [view(dbig), kd2, pd2, cd, sd])
        assert used == [op.name + "_scalar"], (label, used)
        assert _same(got, want), label
        assert _same(_run_cl(op, [qn, kn, pn, cos, sin]), want), label   # the same view from NumPy
    assert np.array_equal(_bits(dbig), _bits(big)), "the input buffer changed"
    used.clear()
    _run_cl(op, [_to_device(queue, [q])[0], kd, pd, cd, sd])
    assert used == [op.name + "_vec"], "a dense aligned call should take the vector kernel"


# ---------------------------------------------------------------------------------------------
# in place, out=, aliasing, contexts

@device
@pytest.mark.parametrize("name", ["llama3_8b_cached", "onnx_rope_3d", "ppl_rotary_bypass_key"])
def test_in_place_and_out_with_pyopencl_arrays(name, queue):
    import pyopencl.array as cla
    op = _op(name)
    arrays = make_inputs(op.ir, CASES[1], seed=11)
    args = [np.asarray(arrays[n]).copy(order="C") for n in op.inputs]
    want = _run_cl(op, args)
    outs = tuple(cla.to_device(queue, np.full_like(w, 7)) for w in want)
    got = _run_cl(op, _to_device(queue, args), out=outs)
    assert all(g is o for g, o in zip(got, outs)) and _same(outs, want)
    dev = _to_device(queue, args)
    got = _run_cl(op, dev, inplace=True)
    sources = [dev[op.inputs.index(s.src)] for s in op.plan.streams]
    for g, src, w in zip(got, sources, want):
        assert g is src and _same([src], [w])
    # NumPy arrays in place and as out=: the kernel runs on device copies written back into them
    host = [a.copy() for a in args]
    got = _run_cl(op, host, inplace=True)
    for g, s, w in zip(got, op.plan.streams, want):
        assert g is host[op.inputs.index(s.src)] and _same([g], [w])
    outs = tuple(np.full_like(w, 5) for w in want)
    got = _run_cl(op, args, out=outs)
    assert all(g is o for g, o in zip(got, outs)) and _same(outs, want)
    rev = tuple(np.flip(np.zeros_like(w), 0) for w in want)    # a reversed view takes the results too
    _run_cl(op, args, out=rev)
    assert _same(rev, want)
    ro = tuple(np.zeros_like(w) for w in want)
    ro[0].flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        op.run(*args, backend="opencl", out=ro)


@device
def test_rmsnorm_out_array_and_refusals(queue):
    import pyopencl.array as cla
    op = _op("rms_mixed_types")
    arrays = make_inputs(op.ir, CASES[1], seed=2)
    args = [arrays[n] for n in op.inputs]
    want = op.run(*args, backend="opencl")
    dev = _to_device(queue, args)
    y = cla.to_device(queue, np.full_like(want, 3))
    assert op.run(*dev, backend="opencl", out=y) is y and _same([y], [want])
    y2 = cla.empty(queue, want.shape, want.dtype)
    assert op.run(*dev, backend="opencl", out=(y2,)) is y2 and _same([y2], [want])
    y3 = np.full_like(want, 3)       # a NumPy out= array gets the results written back
    assert op.run(*args, backend="opencl", out=y3) is y3 and _same([y3], [want])
    with pytest.raises(ValueError, match="out y"):
        op.run(*dev, backend="opencl", out=cla.empty(queue, want.shape, np.float64))


@device
def test_rmsnorm_in_place_is_a_clear_value_error(queue):
    # was a TypeError: the GPU RMSNorm runner took no inplace keyword
    op = _op("rms_mixed_types")
    arrays = make_inputs(op.ir, CASES[1], seed=2)
    with pytest.raises(ValueError, match="in place"):       # as the C backend says it
        op.run(*_to_device(queue, [arrays[n] for n in op.inputs]), backend="opencl", inplace=True)


# Short rows (per-head norms): LANES work-items a row, ROWS rows a work-group, each row's sum over
# its own aligned segment. 15 and 9 rows leave the last group partly past the last row.
SHORT_ROWS = """
rmsnorm head_norm { in x: bf16[T, 128] in w: bf16[128] out y epsilon = 1e-6 }
rmsnorm add_norm {
    in x: f16[T, 96] in residual: f16[T, 96] in w: f32[96] out y out h
    residual = residual epsilon = 1e-5
}
"""


def _launch_spy(monkeypatch):
    """(kernel name, groups, group size) of every launch by an operator loaded from now on."""
    seen = []
    wrap = clb._launcher

    def launcher(loader, source):
        launch = wrap(loader, source)

        def spy(mem, k, shape, values):
            seen.append((k.name, shape.grid[0], shape.block[0]))
            return launch(mem, k, shape, values)
        return spy
    monkeypatch.setattr(clb, "_launcher", launcher)
    return seen


@device
@pytest.mark.parametrize("name", ["head_norm", "add_norm"])
@pytest.mark.parametrize("rows", [15, 9])
def test_short_rows_run_several_rows_per_work_group(name, rows, queue, monkeypatch):
    # was one row per work-group of k.block items (the shared body's default): 16 of 128 busy
    op = ropegen.compile(SHORT_ROWS)[name]
    c = clb.OpenCLBackend().config(op.plan)
    text = op.sources["opencl"][f"{name}.cl"]
    for k in (c.vec, c.scalar):
        assert k.rows > 1 and k.lanes * k.rows == k.block, k
        kernel = text[text.index(f" void {k.name}("):]
        assert re.search(rf"const int LANES = {k.lanes};.*\n.*const int ROWS = {k.rows};", kernel), k.name
    seen = _launch_spy(monkeypatch)
    rng = np.random.default_rng(rows)
    dt = op.plan.x.np_dtype
    n = op.plan.norm_size
    # rows 2**-7 .. 2**7 apart: a row summed with a neighbour's lanes would be far off
    scale = np.exp2(np.arange(rows) - 7.0)[:, None]
    x = (rng.standard_normal((rows, n + 1)) * scale).astype(dt)
    args = {"x": x[:, 1:], "w": rng.uniform(0.5, 1.5, n).astype(op.plan.scale.np_dtype)}
    if op.plan.residual:
        args["residual"] = (rng.standard_normal((rows, n)) * scale).astype(dt)
    want = op.run_all(*[args[i] for i in op.inputs], backend="numpy")
    dev = dict(zip(args, _to_device(queue, args.values())))
    # the vector kernel on dense rows; the scalar one on rows one element off alignment
    for label, xv, k in (("aligned", dev["x"], c.vec), ("offset by one", _to_device(queue, [x])[0][:, 1:], c.scalar)):
        seen.clear()
        got = _run_cl(op, [xv if i == "x" else dev[i] for i in op.inputs])
        assert seen == [(k.name, -(-rows // k.rows), k.block)], (label, seen)
        for out, w, o in zip(op.outputs, want, got):
            o = o.get()
            if out == op.plan.sum_output:
                assert _same([o], [w]), (label, out)
            else:   # only the order of the sum of squares differs from NumPy: an ulp or two of y
                np.testing.assert_allclose(o.astype(np.float64), w.astype(np.float64), rtol=2**-6, err_msg=label)

@device
@pytest.mark.parametrize("name", ["rms_mixed_types", "llama3_8b"])
def test_unknown_options_are_a_clear_value_error(queue, name):
    # was a TypeError from the runner's signature (threads= is the C backend's option)
    op = _op(name)
    arrays = make_inputs(op.ir, CASES[0], seed=2)
    with pytest.raises(ValueError, match="takes no option 'threads'"):
        op.run(*[arrays[n] for n in op.inputs], backend="opencl", threads=2)


@device
def test_overlapping_out_and_foreign_contexts_are_refused(queue):
    import pyopencl as cl
    import pyopencl.array as cla
    op = _op("llama3_8b_cached")
    arrays = make_inputs(op.ir, CASES[1], seed=4)
    q, k, pos, cos, sin = (np.ascontiguousarray(arrays[n]) for n in op.inputs)
    T = q.shape[0]
    big = cla.to_device(queue, np.concatenate([q, q[:1]]))
    kd, pd, cd, sd = _to_device(queue, [k, pos, cos, sin])
    before = big.get()
    with pytest.raises(ValueError, match="overlap|alias"):
        op.run(big[:T], kd, pd, cd, sd, backend="opencl", out=(big[1:], cla.empty_like(kd)))
    assert np.array_equal(_bits(big), _bits(before)), "a refused call wrote its output"
    ctx2 = cl.Context(queue.context.devices)   # held: not every runtime's queue keeps its context alive
    other = cl.CommandQueue(ctx2)
    with pytest.raises(ValueError, match="another OpenCL context"):
        op.run(big[:T], kd, pd, cd, _to_device(other, [sin])[0], backend="opencl")
    with pytest.raises(ValueError, match="another OpenCL context"):
        op.run(big[:T], kd, pd, cd, sd, backend="opencl",
               out=(cla.empty(other, q.shape, q.dtype), cla.empty(other, k.shape, k.dtype)))


# ---------------------------------------------------------------------------------------------
# errors through the error word

def _error(fn):
    with pytest.raises(Exception) as info:
        fn()
    return info.value


@device
def test_positions_outside_the_table_raise_what_c_raises(queue):
    op = _op("llama3_8b_cached")
    arrays = make_inputs(op.ir, CASES[1], seed=1)
    rows = arrays["cos"].shape[0]
    for bad in (-1, rows, 2 ** 40):
        a = dict(arrays, positions=arrays["positions"].copy())
        a["positions"][2] = bad
        args = [a[n] for n in op.inputs]
        for given in (args, _to_device(queue, args)):
            e = _error(lambda: op.run(*given, backend="opencl"))
            assert type(e) is ValueError and str(e).startswith(
                f"position out of range: the cos/sin tables have {rows} rows"), e
            if C_WHY is None:
                ce = _error(lambda: op.run(*args, backend="c"))
                assert type(ce) is type(e) and str(ce).startswith(str(e)), (ce, e)
        op.run(*args, backend="opencl", check=False)        # check=False: the error word is not read
    onnx = _op("onnx_rope_4d")
    x = np.ones((2, 4, 3, 8), np.float32)
    cos = np.zeros((10, 4), np.float32)
    for bad in (10, -1):
        with pytest.raises(ValueError, match="out of range"):
            onnx.run(x, cos, cos, np.array([[0, 1, 2], [3, 4, bad]]), backend="opencl")


@device
def test_bad_sequence_lengths_raise_what_c_raises():
    op = _op("atb_coeff2_bf16")
    bf16 = op.plan.storage.np_dtype
    q, k = np.ones((6, 256), bf16), np.ones((6, 64), bf16)
    cos = np.ones((6, 64), bf16)
    for lens in ([2, 3], [7, -1], [6, 1], [-6, 12]):
        args = (q, k, cos, cos, np.array(lens, np.int32))
        e = _error(lambda: op.run(*args, backend="opencl"))
        assert type(e) is ValueError and "seqlen: sequence lengths must be" in str(e), e
        if C_WHY is None:
            ce = _error(lambda: op.run(*args, backend="c"))
            assert type(ce) is type(e) and "sequence lengths" in str(ce)
    args = (q, k, cos, cos, np.array([6, 0], np.int32))
    assert _same(op.run_all(*args, backend="opencl"), op.run_all(*args, backend="numpy"))


@device
def test_the_kernel_flags_a_negative_length_the_host_did_not_see(monkeypatch):
    """The host checks lengths before launching; the kernel's own check (error bit 2) is reached by
    showing the host valid lengths while the device holds a negative one."""
    from ropegen.backends.opencl.memory import ClMemory
    op = ropegen.compile(ROOT / "examples" / "atb_rope.rope")["atb_coeff2_bf16"]   # its own kernel cache
    bf16 = op.plan.storage.np_dtype
    q, k, cos = np.ones((6, 256), bf16), np.ones((6, 64), bf16), np.ones((6, 64), bf16)
    real = ClMemory.to_host

    def to_host(self, a):
        v = real(self, a)
        return np.array([2, 2, 2], np.int32) if v.dtype == np.int32 and v.shape == (3,) else v
    monkeypatch.setattr(ClMemory, "to_host", to_host)
    e = _error(lambda: op.run(q, k, cos, cos, np.array([3, -1, 4], np.int32), backend="opencl"))
    assert type(e) is ValueError and str(e) == "seqlen: sequence lengths must be >= 0 and sum to the 6 packed tokens"
    if C_WHY is None:
        ce = _error(lambda: op.run(q, k, cos, cos, np.array([3, -1, 4], np.int32), backend="c"))
        assert str(ce) == str(e)


# ---------------------------------------------------------------------------------------------
# the prelude's conversions and arithmetic, bit for bit

HARNESS = r"""
{prelude}
#define MAP(NAME, IN, OUT, FN) __kernel void NAME(__global const IN* x, __global OUT* y) {{ \
    const size_t i = get_global_id(0); y[i] = FN(x[i]); }}
MAP(f32_bf16, float, ushort, cvt_f32_bf16)
MAP(f32_f16, float, ushort, cvt_f32_f16)
MAP(bf16_f32, ushort, float, cvt_bf16_f32)
MAP(f16_f32, ushort, float, cvt_f16_f32)
MAP(sqrt32, float, float, sqrt_f32)
__kernel void div32(__global const float* a, __global const float* b, __global float* y) {{
    const size_t i = get_global_id(0); y[i] = div_f32(a[i], b[i]); }}
#ifdef cl_khr_fp64
MAP(f64_bf16, double, ushort, cvt_f64_bf16)
MAP(f64_f16, double, ushort, cvt_f64_f16)
MAP(f64_f32, double, float, cvt_f64_f32)
#endif
"""


@pytest.fixture(scope="module")
def harness():
    import pyopencl as cl
    import pyopencl.array as cla
    q = clb.default_queue()
    prog = cl.Program(q.context, HARNESS.format(prelude=render("opencl/_prelude.cl.j2"))).build(
        options=list(facts.BUILD_OPTIONS))

    def run(kernel, out_dtype, *inputs):
        dev = [cla.to_device(q, np.ascontiguousarray(x)) for x in inputs]
        y = cla.empty(q, inputs[0].shape, out_dtype)
        getattr(prog, kernel)(q, (inputs[0].size,), None, *[d.data for d in dev], y.data)
        return y.get()
    return run


def _f32_patterns() -> np.ndarray:
    """Float32 bit patterns: specials, bf16 / f16 ties and their neighbours, subnormals, random."""
    special = [0, 0x80000000, 1, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000,
               0x7fc00000, 0xffc00001, 0x7f800001, 0x7fbfffff, 0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001,
               0x7f7f8000, 0x7f7f7fff, 0x477fe000, 0x477fefff, 0x477ff000, 0x33000000, 0x33000001, 0x387fc000,
               0x38800000, 0x337fffff, 0x00008000, 0x00018000]
    rng = np.random.default_rng(0)
    rand = rng.integers(0, 2 ** 32, 40000, dtype=np.uint64).astype(np.uint32)
    hi = rng.integers(0, 2 ** 16, 4000, dtype=np.uint64).astype(np.uint32) << 16
    ties_bf16 = hi | 0x8000
    ties_f16 = (rng.integers(0, 2 ** 19, 4000, dtype=np.uint64).astype(np.uint32) << 13) | 0x1000
    near = np.concatenate([ties_bf16 - 1, ties_bf16 + 1, ties_f16 - 1, ties_f16 + 1])
    return np.concatenate([np.array(special, np.uint32), rand, ties_bf16, ties_f16, near]).astype(np.uint32)


def _assert_bits(got_bits, want_bits, want_nan, what):
    got_nan = np.isnan(got_bits)
    assert np.array_equal(got_nan, want_nan), f"{what}: NaN where {np.flatnonzero(got_nan != want_nan)[:5]}"
    gb, wb = got_bits.view(np.uint16 if got_bits.itemsize == 2 else np.uint32), \
        want_bits.view(np.uint16 if want_bits.itemsize == 2 else np.uint32)
    bad = np.flatnonzero((gb != wb) & ~want_nan)
    assert not bad.size, f"{what}: {[(hex(int(gb[i])), hex(int(wb[i]))) for i in bad[:5]]}"


@device
def test_narrowing_f32_matches_ml_dtypes_and_numpy(harness):
    x = _f32_patterns().view(np.float32)
    nan = np.isnan(x)
    got = harness("f32_bf16", np.uint16, x).view(ml_dtypes.bfloat16)
    with np.errstate(invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16)
    _assert_bits(got, want, nan, "f32->bf16")
    assert np.array_equal(got.view(np.uint16)[nan] >> 15, x.view(np.uint32)[nan] >> 31), "NaN sign"
    with np.errstate(over="ignore"):
        want16 = x.astype(np.float16)
    _assert_bits(harness("f32_f16", np.uint16, x).view(np.float16), want16, nan, "f32->f16")


@device
def test_widening_every_16_bit_pattern(harness):
    bits = np.arange(2 ** 16, dtype=np.uint16)
    for kernel, dt in (("bf16_f32", ml_dtypes.bfloat16), ("f16_f32", np.float16)):
        want = bits.view(dt).astype(np.float32)
        _assert_bits(harness(kernel, np.float32, bits), want, np.isnan(want), kernel)


@device
def test_division_and_square_root_are_correctly_rounded(harness):
    rng = np.random.default_rng(1)
    x = _f32_patterns().view(np.float32)
    y = np.roll(x, 7)
    a = np.concatenate([x, rng.standard_normal(20000).astype(np.float32), np.float32([1, 0, 0, 3, -1])])
    b = np.concatenate([y, rng.standard_normal(20000).astype(np.float32), np.float32([3, 0, -0.0, 0, 0])])
    with np.errstate(all="ignore"):
        want_div, want_sqrt = a / b, np.sqrt(np.abs(a))
    _assert_bits(harness("div32", np.float32, a, b), want_div, np.isnan(want_div), "div_f32")
    _assert_bits(harness("sqrt32", np.float32, np.abs(a)), want_sqrt, np.isnan(want_sqrt), "sqrt_f32")


def _round_once(v: float, bits: int, min_sub_exp: int, max_finite: float) -> float:
    """v rounded once, to nearest even, to `bits` significant bits (subnormals down to 2**min_sub_exp)."""
    if not math.isfinite(v) or v == 0:
        return v
    _, e = math.frexp(v)
    q = max(e - bits, min_sub_exp)
    r = round(Fraction(v) / Fraction(2) ** q) * Fraction(2) ** q      # Fraction rounds half to even
    if abs(r) > max_finite:
        return math.copysign(math.inf, v)
    return math.copysign(float(r), v) if r == 0 else float(r)


def _f64_cases(ulp_bits: int) -> np.ndarray:
    """Doubles just off a tie of a `ulp_bits`-bit significand, by less than a float ulp (where a
    rounding through float would land on the tie and round differently), ties, specials, random."""
    rng = np.random.default_rng(2)
    out = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-300, -1e-300, 1e300, 3.4028235677973366e38, 65519.99,
           65520.0, 65504.0, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * (1 + 2 ** -40), 2.0 ** -133, 2.0 ** -134,
           2.0 ** -134 * (1 + 2 ** -40), 2.0 ** -149, 2.0 ** -150, 2.0 ** -150 * (1 + 2 ** -40)]
    for exp in range(-20, 21, 3):
        for m in range(1 << (ulp_bits - 1), (1 << (ulp_bits - 1)) + 40):
            base = m * 2.0 ** (exp - ulp_bits + 1)
            half = 2.0 ** (exp - ulp_bits)
            for tiny in (0.0, 2.0 ** (exp - 30), -(2.0 ** (exp - 30)), 2.0 ** (exp - 50)):
                out += [base + half + tiny, -(base + half + tiny)]
    return np.concatenate([np.array(out), rng.standard_normal(5000) * 10.0 ** rng.integers(-40, 40, 5000)])


@device
def test_narrowing_f64_rounds_once(harness):
    if not _fp64():
        pytest.skip("the OpenCL device has no cl_khr_fp64: no f64 conversions")
    for kernel, dt, bits, sub, top in (("f64_bf16", ml_dtypes.bfloat16, 8, -133, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
                                       ("f64_f16", np.float16, 11, -24, 65504.0),
                                       ("f64_f32", np.float32, 24, -149, float(np.finfo(np.float32).max))):
        x = _f64_cases(bits)
        want = np.array([_round_once(float(v), bits, sub, top) for v in x]).astype(dt)   # exact: representable
        out = np.float32 if dt is np.float32 else np.uint16
        got = harness(kernel, out, x).view(dt)
        _assert_bits(got, want, np.isnan(x), kernel)
        if kernel == "f64_bf16":      # the cases do tell single from double rounding
            with np.errstate(over="ignore"):
                via_float = x.astype(np.float32).astype(ml_dtypes.bfloat16)
            assert (via_float.view(np.uint16) != want.view(np.uint16))[~np.isnan(x)].sum() > 100


# ---------------------------------------------------------------------------------------------
# the generated host loader, on its own

@device
def test_host_loader_runs_the_scalar_kernel_standalone(tmp_path):
    import pyopencl as cl
    r = subprocess.run([sys.executable, "-m", "ropegen", "compile", str(ROOT / "examples" / "llama3.rope"),
                        "--target", "opencl", "-o", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "llama3" / "opencl"
    spec = importlib.util.spec_from_file_location("llama3_8b_host_standalone", folder / "llama3_8b_host.py")
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    comment = (folder / "llama3_8b.cl").read_text()
    per_token = int(re.search(r"llama3_8b_scalar: any strides\. (\d+) threads per token", comment).group(1))
    block = int(re.search(r"Launch: block \((\d+), 1, 1\)", comment).group(1))
    name = "llama3_8b_scalar"
    assert loader.KERNELS[name][0] == block

    queue = clb.default_queue()
    ctx = queue.context
    program = loader.build(ctx)
    op = _op("llama3_8b")
    T = 5
    rng = np.random.default_rng(8)
    q = rng.standard_normal((T, 32, 128)).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal((T, 8, 128)).astype(ml_dtypes.bfloat16)
    pos = np.array([0, 3, 17, 4000, 8191], np.int64)
    mf = cl.mem_flags

    def buf(a):
        return cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(a).view(np.uint8))
    bq, bk, bp = buf(q), buf(k), buf(pos)
    yq, yk = cl.Buffer(ctx, mf.READ_WRITE, q.nbytes), cl.Buffer(ctx, mf.READ_WRITE, k.nbytes)
    err = buf(np.zeros(1, np.int32))
    vals = {"x_q_rot": (bq, 0), "y_q_rot": (yq, 0), "x_k_rot": (bk, 0), "y_k_rot": (yk, 0), "t_positions": (bp, 0),
            "t_positions_sb": T, "t_positions_ss": 1, "n_tokens": T, "seq_len": T, "head_groups": 1, "err": (err, 0)}
    for t, h in (("q", 32), ("k", 8)):
        for side in ("x", "y"):
            vals.update({f"{side}_{t}_rot_sb": T * h * 128, f"{side}_{t}_rot_ss": h * 128,
                         f"{side}_{t}_rot_sh": 128, f"{side}_{t}_rot_sd": 1})
    args = [vals[n] for n, _ in loader.KERNELS[name][1]]
    loader.launch(queue, program, name, (-(-T * per_token // block), 1, 1), args)
    got_q, got_k, word = np.empty_like(q), np.empty_like(k), np.empty(1, np.int32)
    for host, dev in ((got_q, yq), (got_k, yk), (word, err)):
        cl.enqueue_copy(queue, host.view(np.uint8) if host.dtype != np.int32 else host, dev)
    queue.finish()
    assert word[0] == 0
    want = op.run_all(q, k, pos, backend="numpy")
    mag = max(float(np.abs(q.astype(np.float64)).max()), float(np.abs(k.astype(np.float64)).max()))
    for g, w in zip((got_q, got_k), want):
        assert compare(g, w.astype(np.float64), _storage_dtype(op), mag)[2]
    assert _same((got_q, got_k), op.run_all(q, k, pos, backend="opencl"))   # the backend runs the same source


# ---------------------------------------------------------------------------------------------
# bench

@device
def test_bench_rows_have_a_copy_row_and_ratios():
    from ropegen.bench.harness import measure
    from ropegen.bench.suites import SUITES
    results, table = measure(SUITES["llama3"](), "opencl", None, ["T=1,dtype=f32"], 1)
    copies = {r["bytes"]: r for r in results if r["impl"] == "OpenCL buffer copy"}     # one per byte count
    rows = [r for r in results if r["impl"] == "ropegen opencl"]
    assert {r["op"] for r in rows} >= {"llama3_8b_f32", "llama3_8b_cached_f32", "rmsnorm_4096_f32"}
    for r in rows:
        assert r["dtype"] == "f32" and r["tokens"] == 1 and r["ms"] > 0
        assert r["copy_ms"] == copies[r["bytes"]]["ms"]
        assert r["ratio"] == pytest.approx(r["copy_ms"] / r["ms"])
        assert r["gbps"] == pytest.approx(r["bytes"] / (r["ms"] * 1e6))
    assert "OpenCL buffer copy" in table and "llama3_8b_f32" in table


@device
def test_bench_command_line():
    r = subprocess.run([sys.executable, "-m", "ropegen", "bench", "--suite", "llama3", "--backend", "opencl",
                        "--shape", "T=1,dtype=f32", "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "llama3_8b_cached_f32" in r.stdout and "Traceback" not in r.stderr


# ---------------------------------------------------------------------------------------------
# unavailable() and the build's refusals (no device needed)

def test_unavailable_reports_why_without_a_device(monkeypatch):
    pytest.importorskip("pyopencl", reason="pyopencl (the `opencl` extra) is not installed: the probe stops at its import")

    def no_device():
        raise RuntimeError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR\nmore")
    monkeypatch.setattr(clb, "_WHY", None)
    monkeypatch.setattr(clb, "default_queue", no_device)
    why = clb.unavailable()
    assert why.startswith("no OpenCL device (") and "PLATFORM_NOT_FOUND_KHR" in why and "more" not in why
    assert clb.OpenCLBackend().unavailable() == why
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"]     # a fresh kernel cache
    with pytest.raises(RuntimeError, match="backend 'opencl' cannot run here: no OpenCL device"):
        op.run(np.ones((1, 32, 128), ml_dtypes.bfloat16), np.ones((1, 8, 128), ml_dtypes.bfloat16),
               np.zeros(1, np.int64), backend="opencl")
    monkeypatch.setattr(clb, "_WHY", "")
    assert clb.unavailable() is None


class _Fake:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_unavailable_reports_a_failed_build(monkeypatch):
    cl = pytest.importorskip("pyopencl")

    class Program:
        def __init__(self, ctx, src):
            pass

        def build(self, options=None):
            raise RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE\nerror: unknown target CPU 'generic'")
    dev = _Fake(name="Fake CPU", platform=_Fake(version="OpenCL 3.0 PoCL 3.0"))
    monkeypatch.setattr(clb, "_WHY", None)
    monkeypatch.setattr(clb, "default_queue", lambda: _Fake(context=object(), device=dev))
    monkeypatch.setattr(cl, "Program", Program)
    why = clb.unavailable()
    assert why.startswith("the OpenCL device 'Fake CPU' (OpenCL 3.0 PoCL 3.0) cannot build"), why
    assert why.endswith(": error: unknown target CPU 'generic'") and "clBuildProgram" not in why, why


def test_build_refuses_a_device_without_fp64_or_correct_rounding():
    cl = pytest.importorskip("pyopencl")
    built = []
    loader = _Fake(build=lambda ctx, src: built.append(src) or "program")
    plain = _Fake(name="Tiny GPU", extensions="cl_khr_byte_addressable_store", single_fp_config=0)
    with pytest.raises(clb.OpenCLError, match="'Tiny GPU' has neither cl_khr_fp64 nor correctly rounded"):
        clb._build(loader, "float", _Fake(device=plain, context=None))
    assert not built
    rounded = _Fake(name="Tiny GPU", extensions="", single_fp_config=int(cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT))
    assert clb._build(loader, "float", _Fake(device=rounded, context=None)) == "program"

    def fails(ctx, src):
        raise cl.Error("clBuildProgram failed")
    with pytest.raises(clb.OpenCLError, match="computes in double, and the OpenCL device 'Tiny GPU' has no cl_khr_fp64"):
        clb._build(_Fake(build=fails), "double x;", _Fake(device=rounded, context=None))
    with pytest.raises(clb.OpenCLError, match="the OpenCL build failed on 'Tiny GPU'"):
        clb._build(_Fake(build=fails), "float x;", _Fake(device=rounded, context=None))


@device
@pytest.mark.parametrize("compute", ["f64", "f32"])
def test_exact_angles_at_large_positions(compute):
    # was a mismatch for compute f64 (abs 4e-7): theta / (2 pi) rounded once in double loses the
    # turn's low bits at positions past ~1e6; the kernels now recover them with a split constant
    from ropegen.crosscheck import compare
    from ropegen.ops import reference
    op = ropegen.compile(f"""
rope big {{ in x: {compute}[tokens=T, heads=2, head_dim=16] in pos: i64[T]
  out y = rotate(x) pairing = neox positions = pos angles = computed(base = 10000) compute = {compute} }}
""")["big"]
    pos = np.array([0, 1, 1_000_003, 2**31 - 1, 2**40 + 12345, -(2**35)], np.int64)
    x = np.random.default_rng(3).standard_normal((pos.size, 2, 16)).astype(compute.replace("f", "float"))
    want = reference.evaluate(op.ir, {"x": x, "pos": pos})["y"]
    got, = _run_cl(op, [x, pos])
    m_abs, m_rel, ok = compare(got, want, op.plan.storage, 1.0)
    assert ok, (m_abs, m_rel)
