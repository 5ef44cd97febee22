"""f16 storage in the C backend's AVX2 / AVX-512 variants (F16C conversions of whole runs): the same
bits as the baseline's software conversions and as NumPy, for every example operator with f16 storage,
strided views, in place and partial rotary; and the F16C run helpers against NumPy's float16 casts.
"""
from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest

import ropegen
from ropegen.backends.c import build as cbuild
from ropegen.backends.c.backend import CBackend
from ropegen.ops.inputs import CASES, make_inputs
from ropegen.render import render
from tests.test_c_backend import EXAMPLES

BACKEND = CBackend()

pytestmark = [
    pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable())),
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="F16C is an x86 extension"),
]

F16_OPS = [op for path in EXAMPLES for op in ropegen.compile(path)
           if op.kind == "rope" and op.plan.storage.name == "f16"]
ISAS = ("base", "avx2", "")        # "": the best this CPU runs (AVX-512 where it has it)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _per_isa(monkeypatch, run) -> dict[str, list[np.ndarray]]:
    out = {}
    for isa in ISAS:
        monkeypatch.setenv("ROPEGEN_ISA", isa)
        out[isa] = [np.array(a, copy=True) for a in run()]
    return out


def test_the_f16_examples_exist():
    names = {op.name for op in F16_OPS}
    assert {"onnx_rope_interleaved", "gptj_cache", "vllm_gptj_partial", "atb_coeff4_fp16"} <= names


@pytest.mark.parametrize("op", F16_OPS, ids=[op.name for op in F16_OPS])
def test_every_variant_gives_the_same_bits(op, monkeypatch):
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=300 + i)
        args = [arrays[n] for n in op.inputs]
        got = _per_isa(monkeypatch, lambda: op.run_all(*args, backend="c", threads=2))
        for isa in ISAS[1:]:
            for a, b in zip(got["base"], got[isa]):
                assert _same_bits(a, b), (op.name, case.label, isa)


def _op(name):
    return next(op for op in F16_OPS if op.name == name)


@pytest.mark.parametrize("name", ["onnx_rope_interleaved", "vllm_gptj_partial"])
def test_strided_views(name, monkeypatch):
    """Inputs and outputs that are views with gaps (every other head / token) of larger arrays."""
    op = _op(name)
    arrays = make_inputs(op.ir, CASES[1], seed=11)
    rng = np.random.default_rng(5)
    x_name = op.inputs[0]
    x = arrays[x_name]
    wide = rng.standard_normal((*x.shape[:-1], x.shape[-1] * 2)).astype(x.dtype)
    wide[..., ::2] = x
    arrays[x_name] = wide[..., ::2]
    assert not arrays[x_name].flags.c_contiguous
    args = [arrays[n] for n in op.inputs]
    got = _per_isa(monkeypatch, lambda: op.run_all(*args, backend="c", threads=1))
    want = op.run_all(*[np.ascontiguousarray(a) for a in args], backend="c")
    for isa in ISAS:
        for a, b in zip(want, got[isa]):
            assert _same_bits(a, b), (name, isa)


@pytest.mark.parametrize("name", ["onnx_rope_interleaved", "gptj_cache", "vllm_gptj_partial"])
def test_in_place_and_partial_rotary(name, monkeypatch):
    """In place (out= the input) gives the out-of-place bits in every variant, passthrough included."""
    op = _op(name)
    arrays = make_inputs(op.ir, CASES[2], seed=12)
    args = [arrays[n] for n in op.inputs]
    want = op.run_all(*args, backend="c")
    for isa in ISAS:
        monkeypatch.setenv("ROPEGEN_ISA", isa)
        call = [np.array(a, copy=True) for a in args]
        outs = op.run_all(*call, backend="c", inplace=True)
        for a, b in zip(want, outs):
            assert _same_bits(a, b), (name, isa)
        assert any(np.shares_memory(o, c) for o in outs for c in call), "not in place"


# ---------------------------------------------------------------------------------------------
# the F16C run helpers (templates/c/_dispatch.inc.j2) on many bit patterns

HARNESS = r"""
#include <stdint.h>
{dtypes}
{dispatch}
#if RG_DISPATCH
#define RUNS(ISA) \
    void h_in_##ISA(const uint16_t *s, float *d, int n) {{ rg_f16_in_##ISA(d, s, n); }} \
    void h_out_##ISA(const float *s, uint16_t *d, int n) {{ rg_f16_out_##ISA(d, s, n, 0); }} \
    void h_nt_##ISA(const float *s, uint16_t *d, int n) {{ rg_f16_out_##ISA(d, s, n, 1); _mm_sfence(); }}
RUNS(avx2)
RUNS(avx512)
#endif
int h_isa(void) {{
#if RG_DISPATCH
    return rg_isa();
#else
    return 0;
#endif
}}
"""


@pytest.fixture(scope="module")
def runs():
    src = HARNESS.format(dtypes=render("c/_dtypes.inc.j2"), dispatch=render("c/_dispatch.inc.j2", wide="f16"))
    lib = cbuild.load_library(cbuild.build({"f16c_harness.c": src}, "f16c-harness"))
    best = lib.h_isa()
    if best < 1:
        pytest.skip("this CPU (or build) has no AVX2 + F16C variant")

    def call(fn: str, x: np.ndarray, out_dtype, n: int | None = None) -> np.ndarray:
        x = np.ascontiguousarray(x)
        y = np.zeros(x.shape, dtype=out_dtype)
        getattr(lib, fn)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data),
                         ctypes.c_int(x.size if n is None else n))
        return y

    def into(fn: str, x: np.ndarray, y: np.ndarray) -> None:
        getattr(lib, fn)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data), ctypes.c_int(x.size))

    call.isas = ("avx2", "avx512") if best >= 2 else ("avx2",)
    call.into = into
    return call


ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def _quiet_f16(h: np.ndarray) -> np.ndarray:
    """Signalling f16 NaNs made quiet, as the F16C instructions do (the only difference from NumPy)."""
    snan = ((h & 0x7c00) == 0x7c00) & ((h & 0x3ff) != 0) & ((h & 0x200) == 0)
    return np.where(snan, h | 0x200, h).astype(np.uint16)


def _f32_patterns() -> np.ndarray:
    """f32 bit patterns around every f16 value: exact, ties, one ulp either side of the ties (subnormal,
    overflow and f16-underflow ranges included), and random patterns."""
    wide = ALL16.view(np.float16).astype(np.float32).view(np.uint32)
    finite = wide[(wide & 0x7f800000) != 0x7f800000]
    tie = finite + np.uint32(1 << 12)
    near = np.concatenate([finite, tie, tie - 1, tie + 1, finite - 1])
    # exponents below f16's range (their ties round to 0 or the smallest subnormal) and above it
    small = np.arange(0x33000000 - 64, 0x38800000 + 64, 97, dtype=np.uint32)
    big = np.arange(0x477fe000 - 256, 0x47800000 + 4096, dtype=np.uint32)
    rnd = np.random.default_rng(3).integers(0, 1 << 32, 3_000_000, dtype=np.uint64).astype(np.uint32)
    bits = np.concatenate([near, small, big, rnd])
    bits = np.concatenate([bits, bits ^ np.uint32(0x80000000)])
    return bits.view(np.float32)


def test_widening_every_16_bit_pattern(runs):
    want = _quiet_f16(ALL16).view(np.float16).astype(np.float32)
    for isa in runs.isas:
        for n in (ALL16.size, ALL16.size - 5):     # the vector body and the scalar tail
            got = runs(f"h_in_{isa}", ALL16, np.float32, n)
            assert _same_bits(got[:n], want[:n]), isa


def test_narrowing_many_32_bit_patterns(runs):
    x = _f32_patterns()
    u = x.view(np.uint32)
    quiet = np.isnan(x) & ((u & 0x00400000) == 0)       # signalling: quieted first by the instruction
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.where(quiet, u | 0x00400000, u).view(np.float32).astype(np.float16).view(np.uint16)
    for isa in runs.isas:
        for n in (x.size - 7, x.size):
            got = runs(f"h_out_{isa}", x, np.uint16, n)
            assert _same_bits(got[:n], want[:n]), isa
        # every non-NaN value (and every quiet NaN) exactly as NumPy: only the signalling NaNs differ
        ok = ~quiet
        with np.errstate(invalid="ignore", over="ignore"):
            assert np.array_equal(got[ok], x[ok].astype(np.float16).view(np.uint16))
        assert quiet.sum() > 1000 and not np.array_equal(got[quiet], x[quiet].astype(np.float16).view(np.uint16))


def test_narrowing_with_non_temporal_stores(runs):
    """The streaming form (nt = 1) stores the same bits, at a 16-byte aligned destination and at one
    that is not (those stores fall back to ordinary ones: a non-temporal store there would fault)."""
    x = _f32_patterns()[:200_003]
    for isa in runs.isas:
        want = runs(f"h_out_{isa}", x, np.uint16)
        for skew in (0, 1, 3):
            buf = np.zeros(x.size + 16, dtype=np.uint16)
            at = (-buf.ctypes.data // 2) % 8 + skew          # elements to the first aligned one, + skew
            y = buf[at:at + x.size]
            runs.into(f"h_nt_{isa}", x, y)
            assert _same_bits(y, want), (isa, skew)
