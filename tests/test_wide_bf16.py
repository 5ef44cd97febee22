"""bf16 storage in the C backend's AVX2 / AVX-512 variants (vector conversions of whole runs, and
non-temporal stores straight to a streamed output): the same bits as the baseline's software
conversions for every example operator with bf16 storage, strided views, in place, partial rotary and
streamed; and the run helpers against the scalar definition on many bit patterns.
"""
from __future__ import annotations

import ctypes
import platform

import ml_dtypes
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
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 / AVX-512 are x86 extensions"),
]

BF16_OPS = [op for path in EXAMPLES for op in ropegen.compile(path)
            if op.kind == "rope" and op.plan.storage.name == "bf16" and op.plan.out_dtype is None]
ISAS = ("base", "avx2", "")        # "": the best this CPU runs (AVX-512 where it has it)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _runs(monkeypatch, run, stream=("0", "1")) -> dict[tuple[str, str], list[np.ndarray]]:
    out = {}
    for isa in ISAS:
        for s in stream:
            monkeypatch.setenv("ROPEGEN_ISA", isa)
            monkeypatch.setenv("ROPEGEN_STREAM", s)
            out[isa, s] = [np.array(a, copy=True) for a in run()]
    return out


def test_the_bf16_examples_exist():
    assert len(BF16_OPS) >= 3, [op.name for op in BF16_OPS]


@pytest.mark.parametrize("op", BF16_OPS, ids=[op.name for op in BF16_OPS])
def test_every_variant_and_streaming_give_the_same_bits(op, monkeypatch):
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=700 + i)
        args = [arrays[n] for n in op.inputs]
        got = _runs(monkeypatch, lambda: op.run_all(*args, backend="c", threads=2))
        for key, outs in got.items():
            for a, b in zip(got["base", "0"], outs):
                assert _same_bits(a, b), (op.name, case.label, key)


@pytest.mark.parametrize("op", BF16_OPS[:2], ids=[op.name for op in BF16_OPS[:2]])
def test_strided_outputs_and_in_place(op, monkeypatch):
    """Outputs that are views with gaps (streamed: misaligned rows go through the buffer), and in place."""
    arrays = make_inputs(op.ir, CASES[1], seed=21)
    args = [arrays[n] for n in op.inputs]
    want = op.run_all(*args, backend="c")
    for isa in ISAS:
        for s in ("0", "1"):
            monkeypatch.setenv("ROPEGEN_ISA", isa)
            monkeypatch.setenv("ROPEGEN_STREAM", s)
            outs = []
            for w in want:      # rows one element apart from a wider array's: 2 bytes off any alignment
                big = np.zeros((*w.shape[:-1], w.shape[-1] + 1), dtype=w.dtype)
                outs.append(big[..., 1:])
            got = op.run_all(*args, backend="c", out=tuple(outs))
            for a, b in zip(want, got):
                assert _same_bits(a, np.ascontiguousarray(b)), (op.name, isa, s)
            call = [np.array(a, copy=True) for a in args]
            try:
                got = op.run_all(*call, backend="c", inplace=True)
            except ValueError:          # an operator whose outputs cannot be written over its inputs
                continue
            for a, b in zip(want, got):
                assert _same_bits(a, b), (op.name, isa, s, "in place")


# ---------------------------------------------------------------------------------------------
# the bf16 run helpers (templates/c/_dispatch.inc.j2) on many bit patterns

HARNESS = r"""
#include <stdint.h>
{dtypes}
{dispatch}
#if RG_DISPATCH
#define RUNS(ISA) \
    void h_in_##ISA(const uint16_t *s, float *d, int n) {{ rg_bf16_in_##ISA(d, s, n); }} \
    void h_out_##ISA(const float *s, uint16_t *d, int n) {{ rg_bf16_out_##ISA(d, s, n, 0); }} \
    void h_nt_##ISA(const float *s, uint16_t *d, int n) {{ rg_bf16_out_##ISA(d, s, n, 1); _mm_sfence(); }}
RUNS(avx2)
RUNS(avx512)
#endif
void h_scalar(const float *s, uint16_t *d, int n) {{ for (int i = 0; i < n; ++i) d[i] = rg_f32_to_bf16(s[i]); }}
int h_isa(void) {{
#if RG_DISPATCH
    return rg_isa();
#else
    return 0;
#endif
}}
"""


@pytest.fixture(scope="module")
def lib():
    src = HARNESS.format(dtypes=render("c/_dtypes.inc.j2"), dispatch=render("c/_dispatch.inc.j2", wide="bf16"))
    lib = cbuild.load_library(cbuild.build({"bf16_harness.c": src}, "bf16-harness"))
    if lib.h_isa() < 1:
        pytest.skip("this CPU (or build) has no AVX2 variant")
    lib.isas = ("avx2", "avx512") if lib.h_isa() >= 2 else ("avx2",)
    return lib


def _call(lib, fn: str, x: np.ndarray, y: np.ndarray, n: int | None = None) -> np.ndarray:
    getattr(lib, fn)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data),
                     ctypes.c_int(x.size if n is None else n))
    return y


def _f32_patterns() -> np.ndarray:
    """Around every bf16 value: exact, the ties, one ulp either side of them; plus random patterns,
    every class (zeros, subnormals, infinities, quiet and signalling NaNs) in both signs."""
    hi = np.arange(1 << 15, dtype=np.uint32) << 16
    tie = hi + np.uint32(0x8000)
    rnd = np.random.default_rng(4).integers(0, 1 << 32, 2_000_000, dtype=np.uint64).astype(np.uint32)
    nan = np.array([0x7f800001, 0x7fbfffff, 0x7fc00000, 0x7fffffff, 0x7f808000, 0x7f7fffff], np.uint32)
    bits = np.concatenate([hi, tie, tie - 1, tie + 1, hi + 1, nan, rnd])
    return np.concatenate([bits, bits ^ np.uint32(0x80000000)]).view(np.float32)


def _want_bf16(x: np.ndarray) -> np.ndarray:
    """rg_f32_to_bf16 in NumPy: round to nearest even; every NaN the canonical quiet NaN with its sign."""
    u = x.view(np.uint32).astype(np.uint64)
    near = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    qnan = (((u >> 16) & 0x8000) | 0x7FC0).astype(np.uint16)
    return np.where(np.isnan(x), qnan, near)


def test_the_definition_matches_ml_dtypes_off_nan():
    x = _f32_patterns()
    ok = ~np.isnan(x)
    assert np.array_equal(_want_bf16(x)[ok], x[ok].astype(ml_dtypes.bfloat16).view(np.uint16))


def test_widening_every_16_bit_pattern(lib):
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    want = (h.astype(np.uint32) << 16).view(np.float32)
    for isa in lib.isas:
        for n in (h.size, h.size - 5):     # the vector body and the scalar tail
            got = _call(lib, f"h_in_{isa}", h, np.zeros(h.size, np.float32), n)
            assert _same_bits(got[:n], want[:n]), isa


def test_narrowing_many_32_bit_patterns(lib):
    x = _f32_patterns()
    want = _want_bf16(x)
    assert _same_bits(_call(lib, "h_scalar", x, np.zeros(x.size, np.uint16)), want)
    for isa in lib.isas:
        for n in (x.size - 7, x.size):
            got = _call(lib, f"h_out_{isa}", x, np.zeros(x.size, np.uint16), n)
            assert _same_bits(got[:n], want[:n]), isa


def test_narrowing_with_non_temporal_stores(lib):
    x = _f32_patterns()[:300_001]
    want = _want_bf16(x)
    for isa in lib.isas:
        for skew in (0, 1, 5):
            buf = np.zeros(x.size + 16, dtype=np.uint16)
            at = (-buf.ctypes.data // 2) % 8 + skew
            got = _call(lib, f"h_nt_{isa}", x, buf[at:at + x.size])
            assert _same_bits(got, want), (isa, skew)
