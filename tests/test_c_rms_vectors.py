"""The vector row loop of the C backend's RMSNorm (`rms_vec`, backends/c/context.py): which plans take
it, and that every variant, streamed or not, with y at every alignment its stores branch on and in
place, gives the baseline's bits, for rows of ordinary values and for rows and scales that leave the
fast path (NaN, infinity, overflowing squares, zeros, subnormals)."""
from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.context import rms_context
from tests.test_c_lanes import _at_offset

BACKEND = CBackend()
ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable())),
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 / AVX-512 are x86 extensions"),
]

# rows of 4096 (whole vectors) and of 300 (a scalar tail after the vector loop), both storage types
EXTRA = """
rmsnorm vec_f32_4096 { in x: f32[N, 4096]  in scale: f32[4096]  out y }
rmsnorm vec_bf16_4096 { in x: bf16[N, 4096]  in scale: bf16[4096]  out y }
rmsnorm vec_bf16_300 { in x: bf16[N, 300]  in scale: bf16[300]  out y }
rmsnorm vec_f32_300 { in x: f32[N, 300]  in scale: f32[300]  out y  epsilon = 1e-6 }
"""
ALL = [op for src in [*sorted((ROOT / "examples").glob("*.rope")), EXTRA]
       for op in ropegen.compile(src) if op.kind == "rmsnorm"]
VEC = [op for op in ALL if rms_context(op.plan)["rms_vec"]]
ISAS = ("base", "avx2", "avx512", "")    # "": the best this CPU runs (AVX512-BF16 where it has it)


def test_which_plans_take_the_vector_row_loop():
    ctx = {op.name: rms_context(op.plan) for op in ALL}
    # f32 rows: in every row path; bf16: in the fast path only (rounded by the carry form before the
    # scale, or not rounded there when the cast is after it)
    for name in ("rms_last_axis", "olmo2_q_norm", "vec_f32_300"):
        assert ctx[name]["rms_vec_exact"]["rg_run_avx512"]["w"] == 16 and not ctx[name]["rms_vec_fast"], name
    for name, grid in (("llama_rmsnorm_bf16_out", "rg_vgrid_bf16_avx2"), ("gemma_rmsnorm", "rg_vsame_avx2")):
        assert ctx[name]["rms_vec_fast"]["rg_run_avx2"]["grid"] == grid and not ctx[name]["rms_vec_exact"], name
        # the fast path has no NaN: its pair stores skip the NaN compare (test_c_rms_bf16_isa's hard rows
        # hold every variant to the baseline where the products overflow to infinity)
        assert ctx[name]["rms_vec_fast"]["rg_run_avx2"]["stp"] == "rg_vstp_nonan_bf16_avx2", name
    assert ctx["vec_f32_300"]["rms_vec_exact"]["rg_run_avx512"]["stp"] == "rg_vstp_f32_avx512"
    # f16, a residual, fp8 y, an f64 stash and mixed types keep the piece buffer
    for name in ("rms_mixed_types", "vllm_fused_add_rmsnorm", "vllm_rms_quant", "rms_bf16_stash_f64",
                 "flashinfer_fused_add_rmsnorm"):
        assert ctx[name]["rms_vec"] == {}, name
    src = BACKEND.sources(VEC[0].plan, "x.rope")[f"{VEC[0].name}.c"]
    base = src[src.index("void rg_run_base("):]
    assert "rg_vinv" not in base[:base.index("\n}\n")]


def _inputs(op, seed: int, scale_special: bool) -> list[np.ndarray]:
    """x of ordinary values with six special rows (a NaN, an infinity, squares that overflow, zeros,
    subnormals, a NaN with a payload); with `scale_special` an infinite scale element (no fast path)."""
    p = op.plan
    rng = np.random.default_rng(seed)
    x_t = next(t for t in p.inputs if t.name == p.x_name)
    rows = 37
    shape = tuple(rows if isinstance(d, str) else d for d in x_t.shape)
    dt = x_t.dtype.np_dtype
    x = (rng.standard_normal(shape) * 3).astype(dt)
    n = int(np.prod(p.norm_shape))
    flat = x.reshape(-1, n)
    if flat.shape[0] >= 6:
        flat[0, n // 3] = np.nan
        flat[1, n // 2] = np.inf
        flat[2, :] = np.float32(3e38).astype(dt) if dt != np.float16 else 6e4
        flat[3, :] = 0
        flat[4, :] = np.float32(1e-39).astype(dt)
        flat[5, 1] = np.array([0x7FA00001 if x.dtype.itemsize == 4 else 0x7F81],
                              dtype=f"u{x.dtype.itemsize}").view(dt)[0]
    s_t = next(t for t in p.inputs if t.name == p.scale_name)
    scale = rng.uniform(0.5, 2.0, p.scale_shape).astype(s_t.dtype.np_dtype)
    if scale_special:
        scale.reshape(-1)[scale.size // 2] = np.inf
    arrays = {p.x_name: x, p.scale_name: scale}
    return [arrays[name] for name in op.inputs]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """The same bits, except the sign and payload of NaNs (where both have one): which operand's NaN a
    product of two NaNs returns is the compiler's choice in every variant (docs/architecture.md)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    na, nb = np.isnan(a.astype(np.float32)), np.isnan(b.astype(np.float32))
    keep = ~na
    return bool(np.array_equal(na, nb) and np.array_equal(a[keep].view(f"u{a.dtype.itemsize}"),
                                                          b[keep].view(f"u{b.dtype.itemsize}")))


@pytest.mark.parametrize("op", VEC, ids=[op.name for op in VEC])
@pytest.mark.parametrize("scale_special", [False, True], ids=["fast", "exact"])
def test_every_variant_gives_the_baseline_bits(op, scale_special, monkeypatch):
    args = _inputs(op, 5, scale_special)
    monkeypatch.setenv("ROPEGEN_ISA", "base")
    monkeypatch.setenv("ROPEGEN_STREAM", "0")
    want = np.array(op.run_all(*args, backend="c")[0], copy=True)
    for isa in ISAS:
        monkeypatch.setenv("ROPEGEN_ISA", isa)
        for stream in ("0", "1"):
            monkeypatch.setenv("ROPEGEN_STREAM", stream)
            for offset in (0, 4, 16, 32):
                out = _at_offset(want.shape, want.dtype, offset)
                op.run_all(*args, backend="c", out=(out,), threads=2)
                assert _same(want, out), (op.name, isa, stream, offset)
            if want.dtype == args[0].dtype:
                work = [np.array(a, copy=True) for a in args]
                got = op.run_all(*work, backend="c", inplace=True, threads=2)[0]
                assert _same(want, np.asarray(got)), (op.name, isa, stream, "in place")


def test_the_row_sum_tree_stays_in_registers_under_gnu_c():
    """The pairwise tree over a row's partial sums: under GCC / Clang on vector values (halves taken in
    registers), since storing a level and loading halves of it back defeats store forwarding (a row of
    128 bf16: 62 -> 52 ns); the same levels in the same order, so the same bits (the transcription tests
    above compare every variant); other compilers keep the loops over the array."""
    for op in ALL:
        src = next(v for k, v in op.sources["c"].items() if k.endswith(".c"))
        body = src[src.index("rg_sum_rest("):]
        body = body[:body.index("\n}\n")]
        gnu, other = body.split("#if defined(__GNUC__) && !defined(ROPEGEN_LOOP_TREE)")[1].split("#else")
        widths = rms_context(op.plan)["fold_widths"]
        for w in widths[:-1]:
            assert f"vector_size({w} * sizeof(rg_stash))" in gnu, (op.name, w)
            assert f"total[l] += total[l + {w}]" in other, (op.name, w)
        for w, prev in zip(widths[1:-1], widths):       # each level halves the one before, in registers
            assert f"memcpy(&rg_lo{w}, &rg_t{prev}, " in gnu, (op.name, w)
        assert gnu.count("total") == 2, op.name             # only the first level reads the array
        assert f"return rg_t{widths[-2]}[0] + rg_t{widths[-2]}[1];" in gnu, op.name


def _rms_bits(op, flags: tuple[str, ...], arrays) -> np.ndarray:
    """y of a plain RMSNorm (x, scale -> y) built with `flags`, on every row of `arrays`."""
    import ctypes
    from ropegen.backends.c import build as cbuild
    src = op.sources["c"]
    lib = ctypes.CDLL(str(cbuild.build(src, op.name, extra_flags=flags)))
    x, scale, tokens = arrays
    y = np.zeros_like(x)
    fn = getattr(lib, "ropegen_" + op.name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    assert fn(x.ctypes.data, scale.ctypes.data, y.ctypes.data, tokens, 1) == 0
    return y.view(f"u{y.dtype.itemsize}")


@pytest.mark.parametrize("name", ["qwen3_q_norm", "rms_bf16_stash_f64", "vec_f32_300", "vec_bf16_4096"])
def test_the_loop_tree_gives_the_vector_trees_bits(name, monkeypatch):
    """The other compilers' loops (forced by ROPEGEN_LOOP_TREE) and GCC's vector tree add the same
    sums in the same order: the same bits, in every variant (64 sums, and 32 with an f64 stash)."""
    op = next(o for o in ALL if o.name == name)
    p = op.plan
    rng = np.random.default_rng(5)
    # rows: 37 of the leading symbol times the fixed dimensions between it and the normalized axis
    rows = 37 * int(np.prod([a.size for a in op.ir.x.axes[1:p.axis]], dtype=np.int64))
    x = rng.standard_normal((rows, p.norm_size)) * rng.uniform(0.01, 100, (rows, 1))
    arrays = (x.astype(p.x.np_dtype), rng.uniform(0.5, 2, p.norm_size).astype(p.scale.np_dtype), 37)
    for isa in ISAS:
        monkeypatch.setenv("ROPEGEN_ISA", isa)
        assert np.array_equal(_rms_bits(op, (), arrays), _rms_bits(op, ("-DROPEGEN_LOOP_TREE",), arrays)), (name, isa)


def test_the_vector_loop_fetches_the_next_row_line_by_line():
    """A vector variant asks for the next row's line(s) into the L2 at each step of its loop (spread
    over the row's compute: RMSNorm [4096, 4096] from memory f32 7.1 -> 6.7 ms, bf16 5.3-5.9 -> 4.4-4.8
    ms); the baseline, which has no vector loop, keeps asking for the next row's piece at once."""
    for op in VEC:
        src = op.sources["c"][f"{op.name}.c"]
        base = src[src.index("void rg_run_base("):]
        base = base[:base.index("\n}\n")]
        assert "rg_prefetch(xr + RG_N + i0" in base and "rg_prefetch_l2" not in base, op.name
        for isa in ("avx2", "avx512"):
            body = src[src.index(f"void rg_run_{isa}("):]
            body = body[:body.index("\n}\n")]
            assert "rg_prefetch(xr + RG_N + i0" not in body, (op.name, isa)
            loop = body[body.index("for (; i + "):]
            step = int(loop[loop.index("<= n; i += ") + 11:].split(")")[0])
            assert loop.index(f"if (xn) rg_prefetch_l2(xn + i0 + i, {step} * sizeof xn[0]);") < loop.index("}"), (op.name, isa)
            # a bf16 row off the fast path has no vector loop: it asks for the next row's piece at once
            exact = rms_context(op.plan)["rms_vec_exact"]
            assert ("if (xn) rg_prefetch(xn + i0, (size_t)n * sizeof xn[0]);" in body) is (not exact), (op.name, isa)
    dispatch = VEC[0].sources["c"][f"{VEC[0].name}.c"]
    fn = dispatch[dispatch.index("static inline void rg_prefetch_l2("):]
    assert "__builtin_prefetch((const char *)p + b, 0, 1)" in fn[:fn.index("\n}\n")]
