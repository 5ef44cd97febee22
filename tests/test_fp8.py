"""fp8 outputs (`dtype = f8e4m3 | f8e5m2` with `quant_scale`): the diagnostics, the host's refusals,
and the NumPy backend's quantization at the edges of the fp8 grids (ties, saturation, infinities,
NaN, subnormals), where at position 0 the rotation is the identity and the stored value is fp8(q * S)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.spec.diagnostics import SpecError

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def _rope(dtype: str = "f8e4m3", scale_shape: str = "1", extra: str = "", src: str = "f32") -> str:
    return f"""
rope r {{
    in q: {src}[tokens=T, heads=4, head_dim=16]
    in positions: i64[T]
    in s: f32[{scale_shape}]
    out q_rot = rotate(q)
    pairing = neox
    positions = positions
    angles = computed(base = 10000)
    dtype = {dtype}
    quant_scale = s
    {extra}
}}"""


@pytest.mark.parametrize("text,code,hint", [
    ("rope r { in q: f8e4m3[tokens=T, heads=1, head_dim=4] in p: i64[T] out y = rotate(q) pairing = neox "
     "positions = p angles = computed(base = 10000) }", "C004", "output type only"),
    (_rope().replace("    quant_scale = s\n", "").replace("in s: f32[1]", ""), "C007", "quant_scale"),
    (_rope("bf16").replace("    quant_scale = s\n", "").replace("in s: f32[1]", ""), "C030", "fp8 output type"),
    (_rope(scale_shape="3"), "C018", "f32[1 or 4]"),
    (_rope(extra="").replace("quant_scale = s", "quant_scale = [s, s]"), "C018", "2 inputs for 1 outputs"),
    ("rmsnorm n { in x: f32[T, 8] in w: f32[8] in s: f32[1] out y quant_scale = s }", "C030", "fp8 output"),
])
def test_diagnostics(text, code, hint):
    with pytest.raises(SpecError) as e:
        ropegen.compile(text)
    msg = str(e.value)
    assert code in msg and hint in msg, msg


def test_an_fp8_output_is_never_written_over_its_source():
    op = ropegen.compile(_rope())["r"]
    q = np.ones((2, 4, 16), np.float32)
    with pytest.raises(ValueError, match="dtype differs"):
        op.run(q, np.zeros(2, np.int64), np.ones(1, np.float32), backend="c", inplace=True)


def _edge_values(t) -> np.ndarray:
    """Values at and around the interesting points of an fp8 grid, as float32."""
    fi = ml_dtypes.finfo(t)
    top = float(fi.max)
    ulp_top = top - float(np.nextafter(np.array(top, t), np.array(0, t)).astype(np.float64))
    tiny = float(fi.smallest_subnormal)
    vals = [0.0, -0.0, tiny, tiny / 2, tiny * 1.5, tiny * 2.5, -tiny / 2, float(fi.smallest_normal),
            top, top + ulp_top / 2, top + ulp_top / 2 - 1, top * 4, np.inf, -np.inf, np.nan, -top * 4,
            1.0 + 2 ** -(fi.nmant + 1), 1.0 + 3 * 2 ** -(fi.nmant + 1), -(1.0 + 2 ** -(fi.nmant + 1))]
    return np.array(vals, np.float32)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")    # inf * sin(0) in the rotation
@pytest.mark.parametrize("name,t", [("f8e4m3", E4M3), ("f8e5m2", E5M2)])
def test_numpy_quantizes_to_the_nearest_even_and_saturates(name, t):
    op = ropegen.compile(_rope(name))["r"]
    vals = _edge_values(t)
    # the edge values in the first half of each head, their partners 0: y_a = x_a * 1 - 0 * 0 = x_a
    # exactly (the second half, 0 * 1 + x_a * 0, is NaN for an infinite x_a, and not compared)
    q = np.zeros((4, 4, 16), np.float32)
    q[..., :8] = np.resize(vals, (4, 4, 8))
    out = op.run(q, np.zeros(4, np.int64), np.ones(1, np.float32), backend="numpy")
    assert out.dtype == np.dtype(t)
    top = float(ml_dtypes.finfo(t).max)
    want = np.clip(q.astype(np.float64), -top, top).astype(t)      # ml_dtypes rounds to nearest even
    out, want, q = out[..., :8], want[..., :8], q[..., :8]
    got, exp = out.view(np.uint8), want.view(np.uint8)
    nan = np.isnan(want.astype(np.float32))
    assert (np.isnan(out.astype(np.float32)) == nan).all()
    np.testing.assert_array_equal(got[~nan], exp[~nan])
    # the edges really are what they claim: infinities saturate, a tie at the top stays at the top
    assert float(out.reshape(-1)[list(q.reshape(-1)).index(np.inf)]) == top


def test_per_head_scales_multiply_each_head():
    op = ropegen.compile(_rope(scale_shape="4"))["r"]
    q = np.full((1, 4, 16), 0.5, np.float32)
    s = np.array([1.0, 2.0, 4.0, 1000.0], np.float32)
    out = op.run(q, np.zeros(1, np.int64), s, backend="numpy").astype(np.float32)
    np.testing.assert_array_equal(out[0, :, 0], [0.5, 1.0, 2.0, 448.0])
