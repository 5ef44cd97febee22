"""The RMSNorm family (residual add, weight offset, cast order, output dtype) on the GPU targets.

OpenCL runs for real (PoCL on the CPU): every example of examples/rmsnorm_family.rope, both
kernels, against the float64 reference and the NumPy backend: h bit for bit; a y narrower than
stage one within two units in the last place and nearly all of it bit for bit (only the order of
the sum of squares differs; a wrong cast order or residual form moves far more). In place (y over
x, h over the residual) on pyopencl arrays, spaced and shifted rows included, and on NumPy arrays;
inputs in any declaration order. CUDA: the generated kernels run on the host through
test_cuda_backend.py's emulation (its CuPy stand-in over g++-built sources), the same checks.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.backends.opencl import backend as clb
from ropegen.crosscheck import _storage_dtype, compare
from ropegen.ops import reference
from ropegen.ops.inputs import CASES, make_inputs
from ropegen.runtime import gpu_rms

ROOT = Path(__file__).resolve().parent.parent
FAMILY = list(ropegen.compile(ROOT / "examples" / "rmsnorm_family.rope"))
IDS = [op.name for op in FAMILY]
RESIDUAL = [op for op in FAMILY if op.plan.residual]
IN_PLACE = [op for op in FAMILY if op.plan.y == op.plan.x]
WHY = clb.unavailable()
device = pytest.mark.skipif(WHY is not None, reason=f"OpenCL cannot run here: {WHY}")

# The residual declared first (x and the weight: the first two inputs that are not the residual);
# an f16 x, so the unrounded stash sum differs from h; an offset and the Gemma cast order.
ODD_ORDER = """
rmsnorm odd_order {
    in residual: f16[T, 96]
    in x:        f16[T, 96]
    in weight:   f32[96]
    out y
    out h
    residual      = residual
    residual_add  = stash
    weight_offset = 0.5
    cast          = after_scale
    epsilon       = 1e-5
}
"""


def _ordered(a: np.ndarray) -> np.ndarray:
    """Float bits as integers in the order of the values (sign-magnitude to two's complement)."""
    bits = np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}").astype(np.int64)
    sign = np.int64(1) << (8 * a.dtype.itemsize - 1)
    return np.where(bits & sign, -(bits & (sign - 1)), bits)


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _check(op, arrays: dict[str, np.ndarray], outs, label: str = "") -> None:
    """outs (by output) against the NumPy backend and the float64 reference."""
    outs = [np.asarray(o.get() if hasattr(o, "get") else o) for o in outs]
    want = op.run_all(*[arrays[n] for n in op.inputs], backend="numpy")
    ref = reference.evaluate(op.ir, arrays)
    mag = max(float(np.abs(np.asarray(a, np.float64)).max()) for a in [*arrays.values(), *ref.values()])
    p = op.plan
    for name, got, w in zip(op.outputs, outs, want):
        assert got.dtype == w.dtype and got.shape == w.shape, (label, name)
        assert compare(got, ref[name], _storage_dtype(op), mag)[2], (label, name)
        if name == p.sum_output:          # element by element: no freedom at all
            assert np.array_equal(_bits(got), _bits(w)), (label, name)
            continue
        if p.y.mantissa_bits >= p.stash.mantissa_bits:
            continue      # y as fine as stage one: the reference's tolerance is the test
        # only the sum of squares' order differs from NumPy: inv_rms may move by an ulp of the stash
        # type, the normalized value (rounded to x's type) by one of x's and y, after the scale, by
        # two of its own, rarely (a wrong cast order or offset moves many)
        ulps = np.abs(_ordered(got) - _ordered(w))
        assert ulps.max(initial=0) <= 2 and np.count_nonzero(ulps) <= max(2, ulps.size // 100), \
            (label, name, int(ulps.max(initial=0)), np.count_nonzero(ulps), ulps.size)


def _spy(monkeypatch) -> list[str]:
    """The names of the kernels the GPU runner launches."""
    used: list[str] = []
    real = gpu_rms.rms_launch

    def spy(k, rows):
        used.append(k.name)
        return real(k, rows)
    monkeypatch.setattr(gpu_rms, "rms_launch", spy)
    return used


# ---------------------------------------------------------------------------------------------
# kernel parameters and sources (no device)

@pytest.mark.parametrize("op", FAMILY, ids=IDS)
def test_kernel_parameters_name_each_role(op):
    p = op.plan
    want = ["t_" + p.x_name] + (["t_" + p.residual] if p.residual else []) + ["t_" + p.scale_name, "t_" + p.out]
    want += (["t_" + p.sum_output] if p.residual else []) + ["n_rows", "row_group"]
    want += [f"{r}_{level}_stride" for r in (("x", "r", "y", "h") if p.residual else ("x", "y"))
             for level in ("row", "group")]
    for backend in ("cuda", "opencl"):
        cfg = ropegen.backends.get(backend).config(p)
        for k in cfg.kernels:
            assert [q.name for q in k.params] == want, (backend, k.name)
            out = {q.name: q.source for q in k.params if q.source[0] == "out"}
            assert out == {"t_" + o: ("out", o) for o in p.outputs}


def test_declaration_order_is_not_the_role_order():
    op = ropegen.compile(ODD_ORDER)["odd_order"]
    assert op.inputs == ("residual", "x", "weight") and op.plan.x_name == "x"
    src = op.sources["cuda"]["odd_order.cu"]
    assert "t_x + row * x_row_stride" in src and "t_residual + row * r_row_stride" in src
    assert "__fadd_rn(cvt<prod_t>(scale[scale_index(n)]), 0.5f)" in src   # the offset, in the product type


# ---------------------------------------------------------------------------------------------
# OpenCL (PoCL): both kernels, in place, odd declaration order

def _views(x: np.ndarray):
    """(label, buffer shape, view, kernel): rows spaced 2N apart (the vector kernel: row strides 2N),
    and a start one element off (the scalar kernel); view(buffer) -> the rows shaped as x, for NumPy
    and pyopencl buffers alike."""
    n, rows = x.shape[-1], int(np.prod(x.shape[:-1]))
    shifted = ("shifted", (rows * n + 8,), lambda b: b[1:1 + rows * n].reshape(x.shape), "_scalar")
    if x.ndim != 2:
        return [shifted]
    return [("spaced", (rows, 2 * n), lambda b: b[:, :n], "_vec"), shifted]


def _rowed(p) -> list[str]:
    """The inputs indexed by rows, each the source of an output in place (y over x, h over r)."""
    return [p.x_name] + ([p.residual] if p.residual else [])


@device
@pytest.mark.parametrize("op", FAMILY, ids=IDS)
def test_opencl_both_kernels_match_numpy(op, monkeypatch):
    used = _spy(monkeypatch)
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=40 + i)
        used.clear()
        _check(op, arrays, op.run_all(*[arrays[n] for n in op.inputs], backend="opencl"), case.label)
        vec = clb.OpenCLBackend().config(op.plan).vec.vector > 1
        assert used == [op.name + ("_vec" if vec else "_scalar")], (case.label, used)


@device
@pytest.mark.parametrize("op", FAMILY, ids=IDS)
def test_opencl_in_place_and_views(op, monkeypatch):
    """y written over x and h over the residual (the same thread reads every element before it
    writes it); spaced and shifted pyopencl views of bigger buffers, each in place as well."""
    import pyopencl.array as cla
    queue = clb.default_queue()
    p = op.plan
    arrays = make_inputs(op.ir, CASES[1], seed=7)
    x = arrays[p.x_name]
    used = _spy(monkeypatch)
    for label, shape, view, kernel in _views(x):
        for inplace in ((False, True) if op in IN_PLACE else (False,)):
            dev, bufs = {}, {}
            for n in op.inputs:
                if n in _rowed(p):
                    host = np.zeros(shape, x.dtype)
                    view(host)[...] = arrays[n]
                    bufs[n] = cla.to_device(queue, host)
                    dev[n] = view(bufs[n])
                else:
                    dev[n] = cla.to_device(queue, np.ascontiguousarray(arrays[n]))
            used.clear()
            outs = op.run_all(*[dev[n] for n in op.inputs], backend="opencl", inplace=inplace)
            assert used == [op.name + kernel], (label, used)
            if inplace:
                assert all(o is dev[s] for o, s in zip(outs, _rowed(p))), label
                outs = [view(bufs[s].get()) for s in _rowed(p)]   # the whole buffer, then the view
            _check(op, arrays, outs, f"{label} inplace={inplace}")


@device
@pytest.mark.parametrize("op", IN_PLACE, ids=[o.name for o in IN_PLACE])
def test_opencl_in_place_on_numpy_arrays(op):
    arrays = make_inputs(op.ir, CASES[2], seed=8)
    want = op.run_all(*[arrays[n] for n in op.inputs], backend="opencl")
    host = {n: np.array(a, copy=True) for n, a in arrays.items()}
    outs = op.run_all(*[host[n] for n in op.inputs], backend="opencl", inplace=True)
    for o, s, w in zip(outs, _rowed(op.plan), want):
        assert o is host[s] and np.array_equal(_bits(o), _bits(w))


@device
def test_opencl_inputs_in_declaration_order():
    op = ropegen.compile(ODD_ORDER)["odd_order"]
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=60 + i)
        _check(op, arrays, op.run_all(*[arrays[n] for n in op.inputs], backend="opencl"), case.label)


# ---------------------------------------------------------------------------------------------
# CUDA on the host (test_cuda_backend.py's g++ emulation behind its CuPy stand-in)

@pytest.mark.slow
@pytest.mark.parametrize("op", FAMILY, ids=IDS)
def test_cuda_kernels_on_the_host(op, monkeypatch):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    import test_cuda_backend as tcb
    from ropegen.backends.cuda import backend as cuda_backend
    cp = tcb._fake_cupy(monkeypatch)
    tcb._CFG_OF[op.sources["cuda"][f"{op.name}.cu"]] = (cuda_backend.CudaBackend().config(op.plan),)
    used = _spy(monkeypatch)
    p = op.plan
    arrays = make_inputs(op.ir, CASES[1], seed=9)
    _check(op, arrays, op.run_all(*[arrays[n] for n in op.inputs], backend="cuda"), "dense")
    x = arrays[p.x_name]
    for label, shape, view, kernel in _views(x):
        args = []
        for n in op.inputs:
            a = np.asarray(arrays[n])
            if n in _rowed(p):
                a, rows = np.zeros(shape, x.dtype), a
                a = view(a)
                a[...] = rows
            args.append(cp.ndarray(a))
        used.clear()
        inplace = op in IN_PLACE
        outs = op.run_all(*args, backend="cuda", inplace=inplace)
        assert used == [op.name + kernel], (label, used)
        if inplace:
            assert all(o is args[op.inputs.index(s)] for o, s in zip(outs, _rowed(p))), label
        _check(op, arrays, [o.a for o in outs], f"{label} inplace={inplace}")
