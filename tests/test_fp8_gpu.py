"""fp8 outputs on the GPU targets: the OpenCL kernels (run on any OpenCL device, PoCL on a CPU) store
the NumPy backend's bits for every fp8 operator (ops/quant.py's contract), edge values included (ties,
the max finite boundary, infinities, NaN, fp8 and float32 subnormals, signed zeros), from float32 and
float64 products; the rendered conversion's constants are checked against ml_dtypes' grid everywhere,
and the CUDA sources spell the same conversion.
"""
from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.backends.opencl import backend as clb
from ropegen.ir.dtypes import DTYPES
from ropegen.lower.gpu.fp8 import conversion

ROOT = Path(__file__).resolve().parent.parent
WHY = clb.unavailable()
device = pytest.mark.skipif(WHY is not None, reason=f"OpenCL cannot run here: {WHY}")
FP8 = ropegen.compile(ROOT / "examples" / "fp8_outputs.rope")

# position 0: cos = 1 and sin = 0, so every rotated value is its input exactly and with S = 1 the
# stored value is fp8(q) (a partner's inf or NaN makes the element NaN: inf * 0)
EDGE = """
rope edge_{t}_{c} {{
    in q:         f32[tokens=T, heads=2, head_dim=8]
    in positions: i64[T]
    in s:         f32[1]
    out q_rot = rotate(q)
    pairing   = gptj
    positions = positions
    angles    = computed(base = 10000)
    compute   = {c}
    dtype     = {t}
    quant_scale = s
}}
"""


def _edge_op(fp8: str, compute: str):
    return ropegen.compile(EDGE.format(t=fp8, c=compute))[f"edge_{fp8}_{compute}"]


def _grid(name: str) -> np.ndarray:
    """Every finite value of the fp8 type, ascending, as float64."""
    v = np.arange(256, dtype=np.uint8).view(DTYPES[name].np_dtype).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


def edge_values(name: str) -> np.ndarray:
    """float32 values at every rounding decision of the type: its grid, the midpoints (ties) and one
    float32 ulp either side of them, the max finite boundary, subnormals, infinities, NaN, zeros."""
    g = _grid(name)
    mids = (g[:-1] + g[1:]) / 2
    mx = DTYPES[name].max_finite
    last_ulp = mx - g[-2]
    base = np.concatenate([g, mids, [mx + last_ulp / 2, mx + last_ulp, 1e30, 2.0 ** -30, 1e-45, 1e-40]]).astype(np.float32)
    near = np.concatenate([np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(-np.inf))])
    special = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], dtype=np.float32)
    return np.concatenate([base, near, -base, -near, special])


def _same_bits(got: np.ndarray, want: np.ndarray, name: str) -> None:
    """Bit for bit, except that any NaN encoding equals any other (the contract keeps NaN, not its code)."""
    g = np.ascontiguousarray(got)
    g = g.view(f"u{g.itemsize}")
    w = np.ascontiguousarray(want).view(g.dtype)
    nan_g = np.isnan(np.asarray(got).astype(np.float32))
    nan_w = np.isnan(np.asarray(want).astype(np.float32))
    assert np.array_equal(nan_g, nan_w), name
    bad = (g != w) & ~nan_g.reshape(g.shape)
    assert not bad.any(), f"{name}: {int(bad.sum())} of {g.size} differ, first at {np.argwhere(bad)[0]}"


@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("src", ["f32", "f64"])
def test_conversion_constants_describe_the_ml_dtypes_grid(name, src):
    """The printed constants: max finite and min normal bit patterns, the max code, the rebias."""
    q = conversion(src, DTYPES[name])
    dt = np.float32 if src == "f32" else np.float64
    ut = np.uint32 if src == "f32" else np.uint64
    mx = DTYPES[name].max_finite
    assert int(q.max_bits, 16) == int(np.array(mx, dt).view(ut))
    assert np.array(int(q.max_code, 16), np.uint8).view(DTYPES[name].np_dtype).astype(np.float64) == mx
    tiny = 2.0 ** DTYPES[name].min_exponent
    assert int(q.normal_bits, 16) == int(np.array(tiny, dt).view(ut))
    assert np.isnan(np.array(int(q.nan_code, 16), np.uint8).view(DTYPES[name].np_dtype).astype(np.float32))
    # the NaN code is the one ml_dtypes (and the C and NumPy kernels) write: e5m2's is 0x7e, not 0x7f
    assert int(q.nan_code, 16) == int(np.array([np.nan], dt).astype(DTYPES[name].np_dtype).view(np.uint8)[0])


def _run_both(op, *arrays):
    want = op.run_all(*arrays, backend="numpy")
    got = op.run_all(*arrays, backend="opencl")
    return got, want


@device
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # NumPy's inf * 0 (NaN on purpose)
@pytest.mark.parametrize("compute", ["f32", "f64"])
@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
def test_edge_values_store_fp8_of_the_input_at_position_zero(name, compute):
    if compute == "f64" and "cl_khr_fp64" not in clb.default_queue().device.extensions:
        pytest.skip("the OpenCL device has no cl_khr_fp64")
    op = _edge_op(name, compute)
    v = edge_values(name)
    n = -(-v.size // 8)
    flat = np.ones(n * 16, np.float32)     # gptj pairs (2j, 2j + 1): the value, then its partner 1.0
    flat[0:2 * v.size:2] = v
    q = flat.reshape(n, 2, 8)
    pos = np.zeros(n, np.int64)
    s = np.ones(1, np.float32)
    (got,), (want,) = _run_both(op, q, pos, s)
    _same_bits(got, want, f"{op.name} vs numpy")
    # at position 0 with S = 1 the value is q itself: ml_dtypes' rounding of the clipped value
    mx = DTYPES[name].max_finite
    direct = np.clip(q.astype(np.float64 if compute == "f64" else np.float32), -mx, mx).astype(DTYPES[name].np_dtype)
    even = (np.arange(q.size) % 2 == 0).reshape(q.shape)
    finite = np.isfinite(q) & (q != 0) & even
    assert np.array_equal(got.view(np.uint8)[finite], direct.view(np.uint8)[finite])


@device
@pytest.mark.parametrize("scale", [1.0, 0.37, 2.0 ** -9, 3.0e4])
@pytest.mark.parametrize("op", list(FP8), ids=[o.name for o in FP8])
def test_every_fp8_example_matches_numpy_bit_for_bit(op, scale):
    """Random inputs, scales that land in the normal range, the subnormals and saturation; per-head
    scales differ per head (each head must read its own)."""
    rng = np.random.default_rng(7)
    T = 13
    arrays = []
    for t in op.ir.inputs:
        shape = tuple(T if not isinstance(a.size, int) else a.size for a in t.axes)
        if t.name == "positions":
            arrays.append(rng.integers(0, 4096, size=shape).astype(t.dtype.np_dtype))
        elif t.dtype.name == "f32" and t.name in (op.plan.quant_scales if op.kind == "rope" else (op.plan.quant_scale,)):
            arrays.append((scale * (1 + np.arange(shape[0]))).astype(np.float32))
        else:
            arrays.append((rng.standard_normal(shape) * 3).astype(t.dtype.np_dtype))
    got, want = _run_both(op, *arrays)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        _same_bits(g, w, op.name)


@device
def test_strided_input_runs_the_scalar_kernel_with_the_same_bits():
    op = next(o for o in FP8 if o.name == "flashinfer_rope_quantize_fp8")
    rng = np.random.default_rng(3)
    T = 9
    q = (rng.standard_normal((T, 8, 128)) * 40).astype(ml_dtypes.bfloat16)[:, :, ::2]   # head_dim stride 2
    k = (rng.standard_normal((T, 2, 64)) * 40).astype(ml_dtypes.bfloat16)
    pos = rng.integers(0, 1000, size=T)
    arrays = (q, k, pos, np.array([0.5], np.float32), np.array([2.0, 0.25], np.float32))
    got, want = _run_both(op, *arrays)
    for g, w in zip(got, want):
        _same_bits(g, w, "strided")


@pytest.mark.parametrize("op", list(FP8), ids=[o.name for o in FP8])
def test_cuda_and_opencl_spell_one_conversion(op):
    """Both GPU sources carry the bit conversion (no cuda_fp8.h intrinsic) and store through it."""
    for backend, suffix in (("cuda", ".cu"), ("opencl", ".cl")):
        src = next(t for f, t in op.sources[backend].items() if f.endswith(suffix))
        name = op.plan.out_dtype.name if op.kind == "rope" else op.plan.y.name
        assert f"_{name}(" in src and "__nv_fp8" not in src and "cuda_fp8" not in src
        assert len(re.findall(rf"cvt_f(?:32|64)_{name}\(", src)) >= 2    # defined, then called
