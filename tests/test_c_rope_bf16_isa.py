"""RoPE's AVX512-BF16 variant (rg_run_avx512bf16): bf16 pairs stored dealt from sixteen lanes (neox runs
dealt, interleaved pairs) are rounded by vcvtne2ps2bf16 and woven back by one permutation
(rg_vstd_bf16_avx512bf16, _dispatch.inc.j2); a pair holding a subnormal or a NaN, which the instruction
flushes or keeps the payload of, takes the carry form. What these tests check: which kernels have the
variant, that the store gives the carry form's bits for every float it meets, and that the kernel gives
the baseline's bits on inputs whose products underflow, overflow, or are NaN, zero or subnormal."""
from __future__ import annotations

import os
import platform
import subprocess

import numpy as np
import pytest

import ropegen
from ropegen.backends.c import build as cbuild
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.context import rope_context
from tests.test_c_rms_bf16_isa import _cpu_has_bf16

BACKEND = CBackend()
X86 = platform.machine() in ("x86_64", "AMD64")
pytestmark = [
    pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable())),
    pytest.mark.skipif(not X86, reason="AVX512-BF16 is an x86 extension"),
]
NEEDS_BF16 = pytest.mark.skipif(not _cpu_has_bf16(), reason="this CPU has no AVX512-BF16: the variant cannot run here")

SPEC = """
rope cached_bf16 {
    in q:         bf16[tokens=T, heads=4, head_dim=128]
    in k:         bf16[tokens=T, heads=2, head_dim=128]
    in positions: i64[T]
    in cos:       f32[P, 64]
    in sin:       f32[P, 64]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing   = neox
    positions = positions
    angles    = table(cos = cos, sin = sin)
}
rope gptj_bf16 {
    in x:         bf16[tokens=T, heads=3, head_dim=64]
    in positions: i64[T]
    out y = rotate(x)
    pairing   = gptj
    positions = positions
    angles    = computed(base = 10000)
}
rope neox96_bf16 {
    in x:         bf16[tokens=T, heads=3, head_dim=96]
    in positions: i64[T]
    out y = rotate(x)
    pairing   = neox
    positions = positions
    angles    = computed(base = 10000)
}
rope cached_f16 {
    in q:         f16[tokens=T, heads=4, head_dim=128]
    in positions: i64[T]
    in cos:       f32[P, 64]
    in sin:       f32[P, 64]
    out q_rot = rotate(q)
    pairing   = neox
    positions = positions
    angles    = table(cos = cos, sin = sin)
}
"""
OPS = {op.name: op for op in ropegen.compile(SPEC)}


def test_which_kernels_have_the_variant():
    # bf16 pairs stored dealt (neox runs of 32, interleaved pairs): yes; runs of 48 pairs (not dealt)
    # and other storage types: no
    for name, has in (("cached_bf16", True), ("gptj_bf16", True), ("neox96_bf16", False), ("cached_f16", False)):
        ctx = rope_context(OPS[name].plan)
        assert ctx["bf16_isa"] is has, name
        src = OPS[name].sources["c"][f"{name}.c"]
        assert ("case 3: return rg_run_avx512bf16;" in src) is has, name
        if not has:
            assert "rg_run_avx512bf16" not in src, name
            continue
        variant = src[src.index("void rg_run_avx512bf16("):]
        variant = variant[:variant.index("\n}\n")]
        plain = src[src.index("void rg_run_avx512("):]
        plain = plain[:plain.index("\n}\n")]
        # the variant is the AVX-512 one with each store rounded by the instruction
        assert "rg_vstd_bf16_avx512bf16(" in variant and "rg_vstd_bf16_avx512(" not in variant, name
        assert "rg_vstd_bf16_avx512bf16(" not in plain, name
        assert variant.replace("rg_vstd_bf16_avx512bf16(", "rg_vstd_bf16_avx512(") \
            == plain.replace("void rg_run_avx512(", "void rg_run_avx512bf16(").replace(
                "RG_TARGET_AVX512 ", "RG_TARGET_AVX512BF16 "), name


_STORE_MAIN = r"""
#include <stdio.h>
#if RG_DISPATCH_BF16
/* every STEP-th float bit pattern (all exponents, spread mantissas), 32 at a time as one store's even and
 * odd lanes: the variant's store against the AVX-512 one (the carry form), and both AVX-512 stores and the
 * AVX2 one against the scalar rounding; counts the stores that took the instruction (no subnormal or NaN
 * among their 32 values) and those that did not */
static RG_TARGET_AVX512BF16 void rg_check(unsigned long *bad, unsigned long *fast, unsigned long *slow)
{
    for (uint64_t b = 0; b < (1ull << 32); b += 32 * STEP) {
        uint32_t u[32];
        for (int k = 0; k < 32; ++k) u[k] = (uint32_t)(b + (uint64_t)k * STEP + (k * 2654435761u) % STEP);
        const __m512 even = _mm512_castsi512_ps(_mm512_loadu_si512(u));
        const __m512 odd = _mm512_castsi512_ps(_mm512_loadu_si512(u + 16));
        uint16_t got[32], want[32], avx2[32];
        rg_vstd_bf16_avx512bf16(got, even, odd, 0);
        rg_vstd_bf16_avx512(want, even, odd, 0);
        /* and the AVX2 variant's store, eight pairs at a time: words 0-15 from lanes 0-7, 16-31 from 8-15 */
        rg_vstd_bf16_avx2(avx2, _mm512_castps512_ps256(even), _mm512_castps512_ps256(odd), 0);
        rg_vstd_bf16_avx2(avx2 + 16, _mm512_extractf32x8_ps(even, 1), _mm512_extractf32x8_ps(odd, 1), 0);
        int flagged = 0;
        for (int k = 0; k < 32; ++k) {
            const uint32_t e = (u[k] >> 23) & 0xff, m = u[k] & 0x7fffff;
            flagged |= (e == 0 && m) || (e == 0xff && m);
            /* word 2i holds even lane i (u[i]), word 2i + 1 odd lane i (u[16 + i]) */
            const uint32_t v = u[k % 2 ? 16 + k / 2 : k / 2];
            *bad += got[k] != want[k] || avx2[k] != want[k] || want[k] != rg_f32_to_bf16(rg_bits_f32(v));
        }
        *fast += !flagged;
        *slow += flagged;
    }
}
#endif
int main(void)
{
    unsigned long bad = 0, fast = 0, slow = 0;
#if RG_DISPATCH_BF16
    rg_check(&bad, &fast, &slow);
#endif
    printf("%lu %lu %lu\n", bad, fast, slow);
    return 0;
}
"""


@NEEDS_BF16
@pytest.mark.parametrize("step", [61, 4093])
def test_the_store_gives_the_carry_forms_bits_for_every_float(step):
    """Every exponent, both signs, zeros, subnormals, infinities, quiet and signalling NaNs: in stores
    that take the instruction and in stores that fall back to the carry form; the AVX-512 and AVX2
    variants' dealt stores give the scalar rounding's bits too."""
    op = OPS["cached_bf16"]
    src = op.sources["c"]
    exe = cbuild.build({"cached_bf16.h": src["cached_bf16.h"],
                        "probe.c": src["cached_bf16.c"] + _STORE_MAIN.replace("STEP", str(step))},
                       f"rope_bf16_store_{step}", shared=False)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=600).stdout
    bad, fast, slow = map(int, out.split())
    if fast + slow == 0:
        pytest.skip("this C compiler (or its flags) builds no AVX512-BF16 variant")
    assert bad == 0 and fast > 0 and slow > 0, (bad, fast, slow)


def _bf16(a: np.ndarray) -> np.ndarray:
    import ml_dtypes
    return np.asarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16)


def _hard_inputs(op, rng) -> list[np.ndarray]:
    """q, k with ordinary values, zeros of both signs, subnormals, huge values, infinities and NaNs with
    payloads; cos / sin tables with rows whose products underflow (tiny entries: subnormal results from
    normal inputs), overflow, or are NaN."""
    T, P = 40, 64
    arrays = []
    for t in op.plan.inputs:
        if t.name == "positions":
            arrays.append(rng.integers(0, P, T).astype(np.int64))
        elif t.name in ("cos", "sin"):
            ang = rng.uniform(-3, 3, (P, 64))
            tab = (np.cos(ang) if t.name == "cos" else np.sin(ang)).astype(np.float32)
            tab[1:9] *= np.float32(1e-30)           # x * tab: below 2^-126 for |x| under ~1e-8
            tab[9, ::3] = np.float32(3e-39)         # subnormal entries
            tab[10, ::5] = np.float32(0.0)
            tab[11, ::7] = np.float32(-0.0)
            tab[12, ::4] = np.float32(3.0e38)       # products overflow to infinity
            tab[13, 2] = np.float32(np.nan)
            tab[14, ::2] = np.float32(np.inf)
            arrays.append(tab)
        else:
            shape = (T,) + tuple(a.size for a in op.ir.tensor(t.name).axes[1:])
            x = rng.standard_normal(shape).astype(np.float32)
            flat = x.reshape(T, -1)
            flat[2] *= np.float32(1e-10)            # with the tiny table rows: subnormal products
            flat[3, ::7] = 0.0
            flat[4, ::5] = -0.0
            flat[5, ::3] = 3e-39                    # bf16 subnormals
            flat[6, 1::4] = -5e-40
            flat[7, ::6] = 3.3e38
            flat[8, :] = 0.0                        # a token of zeros: every store has a zero
            flat[9, ::9] = np.inf
            bits = _bf16(x).view(np.uint16)
            bits.reshape(T, -1)[10, ::11] = 0x7F81   # a signalling NaN with a payload
            bits.reshape(T, -1)[11, 3::13] = 0xFFC5  # a quiet one, negative
            arrays.append(bits.view(_bf16(x).dtype))
    return arrays


@pytest.mark.parametrize("name", ["cached_bf16", "gptj_bf16", "neox96_bf16"])
def test_every_variant_gives_the_baselines_bits_on_hard_inputs(name, monkeypatch):
    """The best variant here (AVX512-BF16 where the CPU and the compiler have it), the AVX-512 and the
    AVX2 ones, streamed or not, against the baseline."""
    pytest.importorskip("ml_dtypes")
    op = OPS[name]
    for seed in (1, 2):
        args = _hard_inputs(op, np.random.default_rng(seed))
        if name != "cached_bf16":       # computed angles: positions large enough for every column to turn
            args[-1] = args[-1] * 997
        monkeypatch.setenv("ROPEGEN_ISA", "base")
        monkeypatch.setenv("ROPEGEN_STREAM", "0")
        want = [np.array(a, copy=True) for a in op.run_all(*args, backend="c")]
        for isa in ("avx2", "avx512", ""):
            monkeypatch.setenv("ROPEGEN_ISA", isa)
            for stream in ("0", "1"):
                monkeypatch.setenv("ROPEGEN_STREAM", stream)
                got = op.run_all(*args, backend="c", threads=2)
                for a, b in zip(want, got):
                    assert np.array_equal(a.view(np.uint16), np.asarray(b).view(np.uint16)), (name, seed, isa, stream)
        # the outputs hold what the instruction cannot round as the carry form: subnormals and NaNs,
        # beside ordinary values
        words = np.concatenate([w.view(np.uint16).ravel() for w in want])
        exp, man = words & 0x7F80, words & 0x7F
        assert ((exp == 0) & (man != 0)).any() or name != "cached_bf16", name
        assert ((exp == 0x7F80) & (man != 0)).any() and ((exp != 0) & (exp != 0x7F80)).any(), name


def test_the_best_variant_here_is_the_bf16_one():
    """So that the default runs above compare the AVX512-BF16 variant where it can run."""
    if not _cpu_has_bf16():
        pytest.skip("this CPU has no AVX512-BF16: the variant cannot run here")
    src = OPS["cached_bf16"].sources["c"]
    probe = r"""
#include <stdio.h>
int main(void)
{
#if RG_DISPATCH && RG_DISPATCH_BF16
    printf("%d\n", rg_isa());
#else
    printf("-1\n");
#endif
    return 0;
}
"""
    exe = cbuild.build({"cached_bf16.h": src["cached_bf16.h"], "probe.c": src["cached_bf16.c"] + probe},
                       "rope_bf16_probe", shared=False)
    env = {k: v for k, v in os.environ.items() if k != "ROPEGEN_ISA"}
    isa = int(subprocess.run([str(exe)], capture_output=True, text=True, check=True, env=env).stdout)
    if isa < 0:
        pytest.skip("this C compiler (or its flags) builds no AVX512-BF16 variant")
    assert isa == 3
