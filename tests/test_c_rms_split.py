"""The AVX2 and AVX-512 variants' dealt RMSNorm steps rounding by Veltkamp's split
(rg_vsplit_bf16_avx2 / _avx512, RG_SPLIT in rmsnorm.c.j2): that the split is the carry form wherever
the step lets it round, that it is not outside (so the guards matter) and that a value outside raises
the denormal flag the row loop tests; and that the call gives the baseline's bits and leaves MXCSR as
it found it under every rounding mode and flush setting, where the split must stand aside. The rows it
cannot round (done again by the carry form), in-place calls and huge scales are in
tests/test_c_rms_bf16_isa.py and test_c_rms_vectors.py."""
from __future__ import annotations

import platform

import pytest

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.rms_context import DEAL_ROWS, split_scale_log2
from tests.c_harness import run_harness
from tests.test_c_lanes import _cpu_has_avx2
from tests.test_c_rms_bf16_isa import _probe

BACKEND = CBackend()
pytestmark = [
    pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable())),
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 and MXCSR are x86's"),
    pytest.mark.skipif(not _cpu_has_avx2(), reason="this CPU has no AVX2: the variant cannot run here"),
]

SPEC = "rmsnorm b4096 { in x: bf16[N, 4096]  in scale: bf16[4096]  out y }"

_SPLIT_HARNESS = r"""
#include "b4096.c"
#include <stdio.h>
/* rg_vsplit_bf16_avx2 and (where the CPU has AVX-512) _avx512 against the carry form
 * (rg_grid_bf16_fast): every upper word with the lower words at and around the tie, then every STEP-th
 * float bit pattern. Counted: inputs it must round (exponent field 1..237, zeros) and those of them it
 * rounds otherwise; subnormals it rounds otherwise, and vectors of subnormals that did not raise the
 * denormal flag; larger finite floats it rounds otherwise. */
static unsigned long seen, bad, sub_differ, sub_quiet, big_differ;
static RG_TARGET_AVX2 void split8(uint32_t *r, const uint32_t *u)
{
    _mm256_storeu_ps((float *)(void *)r, rg_vsplit_bf16_avx2(_mm256_loadu_ps((const float *)(const void *)u)));
}
static RG_TARGET_AVX512 void split16(uint32_t *r, const uint32_t *u)
{
    _mm512_storeu_ps((void *)r, rg_vsplit_bf16_avx512(_mm512_loadu_ps((const void *)u)));
}
static int wide;        /* 1: the AVX-512 helper, on 16 values */
static void check(const uint32_t *u)
{
    const int n = wide ? 16 : 8;
    int sub = 0;
    for (int k = 0; k < n; ++k) sub |= ((u[k] >> 23) & 0xff) == 0 && (u[k] & 0x7fffffffu) != 0;
    _mm_setcsr(_mm_getcsr() & ~(unsigned int)_MM_EXCEPT_MASK);
    uint32_t r[16];
    if (wide) split16(r, u); else split8(r, u);
    sub_quiet += sub && !(_mm_getcsr() & _MM_EXCEPT_DENORM);
    for (int k = 0; k < n; ++k) {
        const uint32_t e = (u[k] >> 23) & 0xff;
        const uint32_t want = rg_f32_bits(rg_grid_bf16_fast(rg_bits_f32(u[k])));
        if (e == 0xff) continue;
        if ((e >= 1 && e <= 237) || (u[k] & 0x7fffffffu) == 0) { ++seen; bad += r[k] != want; }
        else if (e == 0) sub_differ += r[k] != want;
        else big_differ += r[k] != want;
    }
}
int main(void)
{
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
    __builtin_cpu_init();
    const int helpers = __builtin_cpu_supports("avx512f") ? 2 : 1;
    for (wide = 0; wide < helpers; ++wide) {
        for (uint32_t hi = 0; hi < 0x10000u; hi += 2) {
            uint32_t u[16];
            for (int j = 0; j < 16; ++j) u[j] = ((hi + (uint32_t)(j >> 3)) << 16) | lows[j & 7];
            check(u);
            if (!wide) check(u + 8);
        }
        for (uint64_t x = 0; x < (1ull << 32); x += 16 * STEP) {
            uint32_t u[16];
            for (int k = 0; k < 16; ++k) u[k] = (uint32_t)(x + (uint64_t)k * STEP + (k * 2654435761u) % STEP);
            check(u);
            if (!wide) check(u + 8);
        }
    }
    printf("%d %lu %lu %lu %lu %lu\n", helpers, seen, bad, sub_differ, sub_quiet, big_differ);
    return 0;
}
"""


def _run(tmp_path, harness: str, *defines: str) -> list[int]:
    """The harness built beside b4096's sources and run: the numbers it prints."""
    if not _probe()[0]:
        pytest.skip("this C compiler (or its flags, e.g. -march=native) builds no vector variants")
    sources = ropegen.compile(SPEC)["b4096"].sources["c"]
    if "rg_vsplit_bf16_avx2" not in sources["b4096.c"]:
        pytest.fail("b4096.c has no rg_vsplit_bf16_avx2")
    return [int(v) for v in run_harness(tmp_path, sources, harness, *defines).split()]


def test_the_split_is_the_carry_form_where_it_may_round(tmp_path):
    """Zeros of both signs and every float of exponent field 1..237 tried (ties included) round as the
    carry form rounds; subnormals and larger floats do not all (so the denormal flag and the scale bound
    are needed), and every vector holding a subnormal raises the denormal flag."""
    helpers, seen, bad, sub_differ, sub_quiet, big_differ = _run(tmp_path, _SPLIT_HARNESS, "-DSTEP=4099")
    assert seen > 1_000_000 * helpers and bad == 0
    assert sub_differ > 0 and big_differ > 0
    assert sub_quiet == 0


def test_the_scale_bound_keeps_products_below_the_splits_limit():
    """2^k >= 1.01 sqrt(n) for the k taken, and the smallest such: the bound on a normalized value."""
    for n in (1, 2, 3, 64, 300, 4096, 4097, 1 << 20, 10**7):
        k = 111 - split_scale_log2(n)
        assert 4 ** k >= 1.0201 * n and (k == 0 or 4 ** (k - 1) < 1.0201 * n), n


_MXCSR_HARNESS = r"""
#include "b4096.c"
#include <stdio.h>
/* b4096 under each MXCSR setting: the baseline and the AVX2 and AVX-512 variants (the best below where the
 * CPU has no AVX-512), streamed and not, on rows of which
 * some hold normalized values that are subnormal; counted: words where the two differ, and calls after
 * which the mode differs or a flag set before is clear (a call may raise flags, as any float code does) */
static int kept(unsigned int before)
{
    const unsigned int after = _mm_getcsr();
    return (after & ~(unsigned int)_MM_EXCEPT_MASK) == (before & ~(unsigned int)_MM_EXCEPT_MASK)
        && (after & before) == before;
}
int main(void)
{
    enum { R = ROWS };
    static uint16_t x[R * 4096], s[4096], y0[R * 4096], y1[R * 4096];
    uint32_t g = 7u;
    for (int i = 0; i < R * 4096; ++i) {
        g = g * 1664525u + 1013904223u;
        x[i] = (uint16_t)(0x3e00u + (g >> 22) + ((g >> 21) & 1u) * 0x8000u);
        if (i / 4096 % 3 == 1 && i % 5 == 0) x[i] = (uint16_t)(0x0080u + (g >> 25));   /* ~1e-38 */
    }
    for (int i = 0; i < 4096; ++i) s[i] = (uint16_t)(0x3f80u + (i % 97));
    static const unsigned int modes[] = {
        0x1f80u,                    /* the default: round to nearest, every exception masked */
        0x1f84u,                    /* ... with the divide-by-zero flag set by the caller (no call raises it) */
        0x7f80u,                    /* round toward zero */
        0x3f80u,                    /* round down */
        0x9f80u,                    /* flush to zero */
        0x1fc0u,                    /* denormals are zero */
    };
    unsigned long differ = 0, changed = 0;
    const char *streams[] = {"0", "1"}, *isas[] = {"avx2", "avx512"};
    for (unsigned m = 0; m < sizeof modes / sizeof modes[0]; ++m)
        for (int st = 0; st < 2; ++st) {
            setenv("ROPEGEN_STREAM", streams[st], 1);
            setenv("ROPEGEN_ISA", "base", 1);
            _mm_setcsr(modes[m]);
            ropegen_b4096(x, s, y0, R, 1);
            changed += !kept(modes[m]);
            for (int v = 0; v < 2; ++v) {
                setenv("ROPEGEN_ISA", isas[v], 1);
                _mm_setcsr(modes[m]);
                ropegen_b4096(x, s, y1, R, 1);
                changed += !kept(modes[m]);
                _mm_setcsr(0x1f80u);
                for (int i = 0; i < R * 4096; ++i) differ += y0[i] != y1[i];
            }
        }
    printf("%lu %lu\n", differ, changed);
    return 0;
}
"""


def test_every_rounding_mode_gives_the_baseline_bits_and_mxcsr_back(tmp_path):
    """Under round toward zero or down, flush to zero or denormals are zero the split would not round as
    the carry form does: the AVX2 variant then takes the carry form, the baseline's bits. In every
    setting the call leaves the mode as it was and keeps the flags the caller had (the split's row loop
    clears them while it runs)."""
    differ, changed = _run(tmp_path, _MXCSR_HARNESS, f"-DROWS={3 * DEAL_ROWS}")
    assert (differ, changed) == (0, 0)
