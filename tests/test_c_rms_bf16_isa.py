"""RMSNorm's bf16 vector variants (rmsnorm.c.j2): which kernels have the AVX512-BF16 one
(rg_run_avx512bf16), that the instruction it rests on rounds as the carry form does and marks every
input it cannot round so, and that the variant gives the other variants' bits on rows that leave its
fast step: zeros, subnormal normalized values, scales whose products underflow or overflow; the row
sums in registers and the AVX2 variant's dealt step."""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.backends.c import build as cbuild
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.rms_context import DEAL_ROWS, rms_context
from tests.c_harness import run_harness
from tests.test_c_lanes import _cpu_has_avx2
from tests.test_c_rms_vectors import _same

BACKEND = CBackend()
ROOT = Path(__file__).resolve().parents[1]
X86 = platform.machine() in ("x86_64", "AMD64")
pytestmark = [
    pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable())),
    pytest.mark.skipif(not X86, reason="AVX512-BF16 is an x86 extension"),
]


def _cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags and " avx512bw" in flags


def _cpu_has_avx512bw() -> bool:
    try:
        return " avx512bw" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


NEEDS_BF16 = pytest.mark.skipif(not _cpu_has_bf16(), reason="this CPU has no AVX512-BF16: the variant cannot run here")

SPEC = """
rmsnorm b4096 { in x: bf16[N, 4096]  in scale: bf16[4096]  out y }
rmsnorm b300 { in x: bf16[N, 300]  in scale: bf16[300]  out y }
rmsnorm gemma_like { in x: bf16[N, 256]  in scale: bf16[256]  out y  weight_offset = 1.0  cast = after_scale }
rmsnorm f4096 { in x: f32[N, 4096]  in scale: f32[4096]  out y }
"""
OPS = {op.name: op for op in ropegen.compile(SPEC)}

_PROBE_MAIN = r"""
#include <stdio.h>
int main(void)
{
#if RG_DISPATCH
    printf("1 %d %d\n", (int)RG_DISPATCH_BF16, rg_isa());
#else
    printf("0 0 0\n");
#endif
    return 0;
}
"""
_probed: dict[str, tuple[int, int, int]] = {}


def _probe() -> tuple[int, int, int]:
    """(RG_DISPATCH, RG_DISPATCH_BF16, rg_isa()) of b4096 as the C backend builds it here: whether this
    compiler and its flags build the vector variants and the AVX512-BF16 one, and which this CPU runs."""
    if not _probed:
        src = OPS["b4096"].sources["c"]
        exe = cbuild.build({"b4096.h": src["b4096.h"], "probe.c": src["b4096.c"] + _PROBE_MAIN},
                           "b4096_probe", shared=False)
        env = {k: v for k, v in os.environ.items() if k != "ROPEGEN_ISA"}
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, env=env).stdout
        _probed["b4096"] = tuple(int(v) for v in out.split())
    return _probed["b4096"]


def test_only_bf16_rows_have_the_variant():
    for name, has in (("b4096", True), ("b300", True), ("gemma_like", True), ("f4096", False)):
        ctx = rms_context(OPS[name].plan)
        assert ctx["bf16_isa"] is has, name
        src = OPS[name].sources["c"][f"{name}.c"]
        assert ("rg_run_avx512bf16" in src) is has, name
        assert ("case 3: return rg_run_avx512bf16;" in src) is has, name
    # the rounding before the scale is printed only where the plan rounds there (cast before the scale)
    assert OPS["b4096"].sources["c"]["b4096.c"].count("_mm512_cvtne2ps_pbh(") == 2
    assert OPS["gemma_like"].sources["c"]["gemma_like.c"].count("_mm512_cvtne2ps_pbh(") == 1


_EXHAUSTIVE = r"""
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
/* every STEP-th float bit pattern (all exponents, spread mantissas): vcvtne2ps2bf16 against the carry
 * form (round to nearest even at bit 16) for finite normal inputs; for zero and subnormal inputs, a word
 * with a zero exponent (what rg_vrms_bf16 tests for) */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
int main(void)
{
    unsigned long bad = 0, marked = 0, tiny = 0;
    for (uint64_t b = 0; b < (1ull << 32); b += 32 * STEP) {
        uint32_t u[32];
        for (int k = 0; k < 32; ++k) u[k] = (uint32_t)(b + (uint64_t)k * STEP + (k * 2654435761u) % STEP);
        __m512i a = _mm512_loadu_si512(u), c = _mm512_loadu_si512(u + 16);
        __m512i q = (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(c), _mm512_castsi512_ps(a));
        uint16_t o[32];
        _mm512_storeu_si512(o, q);
        for (int k = 0; k < 32; ++k) {
            const uint32_t x = u[k], e = (x >> 23) & 0xff;
            const uint16_t want = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
            if (e == 0xff) continue;
            if (e == 0) { ++tiny; marked += (o[k] & 0x7f80) == 0 || o[k] == want; continue; }
            bad += o[k] != want;
        }
    }
    printf("%lu %lu %lu\n", bad, marked, tiny);
    return 0;
}
"""


@NEEDS_BF16
def test_the_instruction_rounds_as_the_carry_form(tmp_path):
    if not _probe()[1]:
        pytest.skip("this C compiler (or its flags) builds no AVX512-BF16 variant")
    cc = cbuild.compiler()
    (tmp_path / "e.c").write_text(_EXHAUSTIVE)
    exe = tmp_path / "e"
    r = subprocess.run([*cc, "-O2", "-DSTEP=61", str(tmp_path / "e.c"), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    bad, marked, tiny = map(int, subprocess.run([str(exe)], capture_output=True, text=True,
                                                check=True).stdout.split())
    assert tiny > 0 and bad == 0 and marked == tiny


def _hard_rows(n: int, rng) -> np.ndarray:
    """Rows on the fast path that the variant's step cannot all take: ordinary values with exact zeros
    (signed), normal values so small beside the row's others that the normalized value is subnormal,
    bf16 subnormals, and a whole row of zeros."""
    x = rng.standard_normal((40, n)).astype(np.float32)
    x[1, ::7] = 0.0
    x[2, ::5] = -0.0
    x[3] *= 100.0
    x[3, ::3] = 1e-37                   # inv_rms ~ 0.01: normalized ~1e-39, subnormal
    x[4, 1::4] = 3e-39                  # a bf16 subnormal
    x[5] *= 1e4
    x[5, ::2] = -2e-38                  # normalized ~-2e-42: subnormal, rounds to a bf16 zero or subnormal
    x[6, :] = 0.0                       # inv_rms = 1 / sqrt(eps): y all zero
    x[7, :] = 1e17                      # large squares whose sum is still finite: the fast path
    x[8, ::11] = -2.5e-38
    return x


def _scales(n: int, rng) -> list[np.ndarray]:
    """An ordinary scale, one whose products underflow (tiny and subnormal elements, zeros of both
    signs) and one whose products overflow to infinity."""
    ordinary = rng.uniform(0.5, 2.0, n).astype(np.float32)
    tiny = ordinary.copy()
    tiny[::3] = 1e-38
    tiny[1::5] = 4e-40
    tiny[2::7] = 0.0
    tiny[3::7] = -0.0
    huge = ordinary.copy()
    huge[::4] = 3.3e38
    huge[1::6] = -3.0e38
    return [ordinary, tiny, huge]


def _bf16(a: np.ndarray) -> np.ndarray:
    import ml_dtypes
    return a.astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("name", ["b4096", "b300", "gemma_like"])
def test_the_variant_gives_every_variants_bits_on_hard_rows(name, monkeypatch):
    """The best variant here (AVX512-BF16 where the CPU and compiler have it, see the test below), the
    AVX-512 and the AVX2 ones against the baseline."""
    pytest.importorskip("ml_dtypes")
    op = OPS[name]
    n = op.plan.norm_size
    rng = np.random.default_rng(11)
    x = _bf16(_hard_rows(n, rng))
    for s_i, scale in enumerate(_scales(n, rng)):
        scale = _bf16(scale)
        monkeypatch.setenv("ROPEGEN_ISA", "base")
        monkeypatch.setenv("ROPEGEN_STREAM", "0")
        want = np.array(op.run_all(x, scale, backend="c")[0], copy=True)
        for isa in ("avx2", "avx512", ""):
            monkeypatch.setenv("ROPEGEN_ISA", isa)
            for stream in ("0", "1"):
                monkeypatch.setenv("ROPEGEN_STREAM", stream)
                got = np.asarray(op.run_all(x, scale, backend="c", threads=2)[0])
                assert _same(want, got), (name, s_i, isa, stream)
        # the rows above do leave the fast step somewhere and take it elsewhere: y has zero words
        # (the step's mark) and ordinary ones
        bits = want.view(np.uint16) & 0x7F80
        assert (bits == 0).any() and (bits != 0).any(), (name, s_i)


def test_the_best_variant_here_is_the_bf16_one():
    """Where this compiler builds the AVX512-BF16 variant and the CPU has the extension, the default pick
    is that variant (so that the tests above that run the default compare it, and ROPEGEN_ISA=avx512
    the one below it); without the extension, never."""
    dispatch, bf16, isa = _probe()
    if not dispatch or not bf16:
        pytest.skip("this C compiler (or its flags) builds no AVX512-BF16 variant")
    if _cpu_has_bf16():
        assert isa == 3
    else:
        assert isa < 3
    text = OPS["b4096"].sources["c"]["b4096.c"]
    pick = text[text.index("static rg_run_fn rg_pick(void)"):]
    assert pick.index("case 3: return rg_run_avx512bf16;") < pick.index("case 2: return rg_run_avx512;")


def test_the_vector_variants_sum_bf16_rows_in_registers():
    """Every vector variant of a bf16 row sums its blocks in registers: the AVX-512 ones by
    rg_vsum_squares_bf16, AVX2 by rg_vsum_squares_bf16_avx2 (each load's words dealt even / odd into
    the accumulators' lanes by a shift and a mask, put back in order before the tree); the baseline and
    f32 rows keep the portable loops; the tests above and below compare their bits."""
    sums = {"rg_run_avx2": "rg_vsum_squares_bf16_avx2(xr)", "rg_run_avx512": "rg_vsum_squares_bf16(xr)",
            "rg_run_avx512bf16": "rg_vsum_squares_bf16(xr)"}
    for name, vec in (("b4096", True), ("b300", True), ("f4096", False)):
        src = OPS[name].sources["c"][f"{name}.c"]
        for variant in ("rg_run_base", "rg_run_avx2", "rg_run_avx512", "rg_run_avx512bf16"):
            if f"void {variant}(" not in src:
                assert not vec and variant == "rg_run_avx512bf16", name
                continue
            body = src[src.index(f"void {variant}("):]
            body = body[:body.index("\n}\n")]
            want = sums.get(variant) if vec else None
            # (the row's own sum, where the fused loop of the row before has not taken it)
            for call in set(sums.values()):
                assert (call in body) is (call == want), (name, variant, call)
            assert ("rg_sum_squares(xr)" in body) is (want is None), (name, variant)


def test_the_avx2_and_avx512_steps_read_the_scale_dealt_where_the_call_dealt_it():
    """The AVX2 and AVX-512 variants' steps (rg_vrms_bf16_avx2 / _avx512) read the scale dealt from
    rg_w's second half where the host function dealt it: a call of DEAL_ROWS rows or more that runs one
    of them, each dealing in its own groups; otherwise they take the natural-order form. f32 rows keep one
    scale in order."""
    src = OPS["b4096"].sources["c"]["b4096.c"]
    assert "malloc(sizeof(rg_prod) * 2 * RG_N)" in src
    host = src[src.index("const rg_run_fn rg_run = rg_pick();"):]
    assert f"if ((rg_run == rg_run_avx2 || rg_run == rg_run_avx512) && rg_rows >= {DEAL_ROWS}) {{" in host
    assert "if (rg_run == rg_run_avx2) rg_deal_scale_avx2(rg_w);\n        else rg_deal_scale_avx512(rg_w);" in host
    assert (host.index("rg_deal_scale_avx512(rg_w);")
            < host.index("rg_dealt = rg_tame ? RG_SPLIT : rg_run == rg_run_avx2 ? RG_DEALT : RG_NATURAL;")
            < host.index("RG_ROWS(0, rg_rows)"))
    for isa in ("avx2", "avx512"):
        run = src[src.index(f"void rg_run_{isa}("):]
        assert f"rg_vrms_bf16_{isa}(dst + i, xr + i0 + i, w + i0 + i, rg_vinv, how, rg_d);" in run[:run.index("\n}\n")]
    f32 = OPS["f4096"].sources["c"]["f4096.c"]
    assert "malloc(sizeof(rg_prod) * RG_N)" in f32 and "rg_dealt" not in f32


@pytest.mark.skipif(not _cpu_has_avx2(), reason="this CPU has no AVX2: the variant cannot run here")
@pytest.mark.parametrize("rows", [1, DEAL_ROWS - 1, DEAL_ROWS, 3 * DEAL_ROWS + 1])
def test_the_avx2_variant_gives_the_baseline_bits_dealt_or_not(rows, monkeypatch):
    """Calls below DEAL_ROWS rows take the step's natural-order form, the others its dealt form: both
    the baseline's bits (a scale of distinct values, so a scale read in the wrong order shows)."""
    if not _probe()[0]:
        pytest.skip("this C compiler (or its flags, e.g. -march=native) builds no vector variants")
    op = OPS["b4096"]
    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((rows, 4096)) * 3).astype(op.plan.inputs[0].dtype.np_dtype)
    scale = rng.uniform(0.5, 2.0, 4096).astype(x.dtype)
    monkeypatch.setenv("ROPEGEN_ISA", "base")
    want = np.array(op.run(x, scale, backend="c"), copy=True)
    monkeypatch.setenv("ROPEGEN_ISA", "avx2")
    for threads in (1, 2):
        got = np.asarray(op.run(x, scale, backend="c", threads=threads))
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), (rows, threads)


_SUM_HARNESS = r"""
#include "NAME.c"
#include <stdio.h>
/* rg_vsum_squares_bf16 and _avx2 against the portable rg_sum_squares, bit for bit, on rows whose
 * partial sums differ by many orders of magnitude (so that any other order of additions rounds differently) */
int main(void)
{
    static uint16_t x[RG_N];
    uint32_t s = 12345u;
    int differ = 0;
    for (int row = 0; row < 2000; ++row) {
        for (int i = 0; i < RG_N; ++i) {
            s = s * 1664525u + 1013904223u;
            const int e = 127 + (int)((s >> 8) % 40u) - 20 + (i % 64 < 16 ? 12 : 0);
            x[i] = (uint16_t)(((s >> 31) << 15) | ((uint32_t)e << 7) | ((s >> 12) & 0x7fu));
        }
        const float a = rg_sum_squares(x), b = rg_vsum_squares_bf16(x), c = rg_vsum_squares_bf16_avx2(x);
        differ += memcmp(&a, &b, sizeof a) != 0;
        differ += memcmp(&a, &c, sizeof a) != 0;
    }
    printf("%d\n", differ);
    return 0;
}
"""


@pytest.mark.skipif(not _cpu_has_avx512bw(), reason="this CPU has no AVX-512 BW: the register sum cannot run here")
@pytest.mark.parametrize("name", ["b4096", "b300"])
def test_the_register_sum_adds_in_the_portable_order(name, tmp_path):
    """The bf16 row's sums in registers (AVX-512 and AVX2) give the portable loops' float bit for bit
    (its y alone could hide a different order: a last-bit change of the mean square rarely moves a bf16
    result)."""
    if not _probe()[0]:
        pytest.skip("this C compiler (or its flags, e.g. -march=native) builds no vector variants")
    assert run_harness(tmp_path, OPS[name].sources["c"], _SUM_HARNESS.replace("NAME", name)).split() == ["0"]
