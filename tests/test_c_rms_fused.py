"""RMSNorm's fused row loop (rg_run_*_fused, rmsnorm.c.j2): in the vector variants (f32 rows, and bf16
rows on the fast path), a streamed row's y is computed in the loop that sums the
next row's squares. Which kernels have it, and that it gives the baseline's bits where
rows enter and leave it: rows off the fast path before and after fused ones, chunk boundaries between
threads, rows with a tail past their whole summation blocks, streamed or not, y at each alignment the
choice branches on, and in place."""
from __future__ import annotations

import itertools
import platform

import numpy as np
import pytest

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.rms_context import rms_context
from tests.test_c_lanes import _at_offset
from tests.test_c_rms_bf16_isa import _cpu_has_avx2, _cpu_has_avx512bw
from tests.test_c_rms_vectors import _same

BACKEND = CBackend()
X86 = platform.machine() in ("x86_64", "AMD64")
pytestmark = [
    pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable())),
    pytest.mark.skipif(not X86, reason="AVX-512 is an x86 extension"),
]


# 4096: whole blocks of 1024; 300: one block of 256 and a tail of 44 left to the row loop;
# gemma_like: y rounded after the scale (another step form); f64_stash: no vector row loop
SPEC = """
rmsnorm f4096b { in x: bf16[N, 4096]  in scale: bf16[4096]  out y }
rmsnorm f300b { in x: bf16[N, 300]  in scale: bf16[300]  out y  epsilon = 1e-6 }
rmsnorm gemma_like { in x: bf16[N, 256]  in scale: bf16[256]  out y  weight_offset = 1.0  cast = after_scale }
rmsnorm f4096 { in x: f32[N, 4096]  in scale: f32[4096]  out y }
rmsnorm f300 { in x: f32[N, 300]  in scale: f32[300]  out y }
rmsnorm f64_stash { in x: f32[N, 256]  in scale: f32[256]  out y  stash = f64 }
"""
OPS = {op.name: op for op in ropegen.compile(SPEC)}


def test_which_variants_fuse():
    """f32 rows in both vector variants; bf16 rows in all three (AVX2's since its sum and step are
    dealt: with natural-order ones it was slower fused)."""
    for name, op in OPS.items():
        ctx = rms_context(op.plan)
        want = {"f64_stash": [], "f4096": ["rg_run_avx2", "rg_run_avx512"], "f300": ["rg_run_avx2", "rg_run_avx512"]}.get(
            name, ["rg_run_avx2", "rg_run_avx512", "rg_run_avx512bf16"])
        assert sorted(ctx["rms_fuse"]) == want, name
        src = op.sources["c"][f"{name}.c"]
        for variant in ("rg_run_base", "rg_run_avx2", "rg_run_avx512", "rg_run_avx512bf16"):
            assert (f"{variant}_fused(yr, xr, w, rg_vinv, xn, " in src) is (variant in want), (name, variant)


def _rows(op, rows: int, seed: int) -> np.ndarray:
    """Rows of ordinary values in x's type, with rows off bf16's fast path (an infinity, a NaN, squares
    that overflow) alone, two in a row, first, last and on both sides of the 32-row chunk boundary of
    f4096b, and rows of zeros (on the fast path)."""
    n = op.plan.norm_size
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
    x[0, 5] = np.inf
    x[7, n // 2] = np.nan
    x[8, :] = 1e30
    x[20, :] = 0.0
    x[31, 1] = -np.inf
    x[33, :] = 2e20
    x[rows - 1, n - 1] = np.nan
    return x.astype(op.plan.x.np_dtype)


@pytest.mark.skipif(not _cpu_has_avx2(), reason="this CPU has no AVX2: no fused loop can run here")
@pytest.mark.parametrize("name", ["f4096b", "f300b", "gemma_like", "f4096", "f300"])
def test_fused_rows_give_the_baseline_bits(name, monkeypatch):
    """(the AVX-512 variants where this CPU has AVX-512 BW; AVX2's on every x86 CPU with it)"""
    pytest.importorskip("ml_dtypes")
    op = OPS[name]
    x = _rows(op, 70, 3)
    scale = (np.random.default_rng(4).uniform(0.5, 2.0, op.plan.norm_size)).astype(x.dtype)
    monkeypatch.setenv("ROPEGEN_ISA", "base")
    monkeypatch.setenv("ROPEGEN_STREAM", "0")
    want = np.array(op.run_all(x, scale, backend="c")[0], copy=True)
    isas = ("avx2", "avx512", "") if _cpu_has_avx512bw() else ("avx2",)
    for stream, isa, threads in itertools.product(("1", "0"), isas, (1, 2)):
        monkeypatch.setenv("ROPEGEN_STREAM", stream)
        monkeypatch.setenv("ROPEGEN_ISA", isa)
        # line-aligned, 16-byte aligned (both fused when streamed), neither (the piece buffer when
        # streamed, not fused); rows not streamed are not fused
        for offset in (0, 16, 4):
            out = _at_offset(want.shape, want.dtype, offset)
            op.run_all(x, scale, backend="c", out=(out,), threads=threads)
            assert _same(want, out), (name, stream, isa, threads, offset)
        work = np.array(x, copy=True)
        got = op.run_all(work, scale, backend="c", inplace=True, threads=threads)[0]
        assert _same(want, np.asarray(got)), (name, stream, isa, threads, "in place")
