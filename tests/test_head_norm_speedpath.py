"""The C backend's fast path of `rotate(rmsnorm(x, weight = W))` (issue #13) gives the baseline's bits.

The AVX2 / AVX-512 variants normalize f16 / bf16 heads in float (values on x's grid, no storage round
trip), take every head's inverse root first with vector sums, round without the NaN select where no NaN
can arise, and convert rotated bf16 runs with one NaN check per run. Here every variant, streamed or
not, is compared bit for bit with the baseline (portable C, unchanged) on the qk-norm examples and on
specs for the corners: NaN, infinite, huge, subnormal and zero heads; NaN, infinite and huge weights;
partial rotary; weight offsets; both cast orders; OLMo 2's all-heads weight; a head_dim with a tail;
epsilon 0 (an all-zero head's inverse root is infinite). The helpers themselves are checked against
the scalar definitions on many bit patterns.
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

BACKEND = CBackend()

pytestmark = [
    pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable())),
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 / AVX-512 are x86 extensions"),
]

ISAS = ("base", "avx2", "")        # "": the best this CPU runs (AVX-512 where it has it)

# the corners the examples do not reach, each a small operator
CORNERS = """
rope olmo2_bf16 {
    in q: bf16[tokens=T, heads=4, head_dim=64]
    in positions: i64[T]
    in q_weight: bf16[4, 64]
    out q_rot = rotate(rmsnorm(q, weight = q_weight, epsilon = 1e-6))
    pairing = neox
    positions = positions
    angles = computed(base = 10000)
}
rope gemma_bf16_partial {
    in q: bf16[tokens=T, heads=3, head_dim=128]
    in k: bf16[tokens=T, heads=2, head_dim=128]
    in positions: i64[T]
    in q_weight: f32[128]
    in k_weight: bf16[128]
    out q_rot = rotate(rmsnorm(q, weight = q_weight, epsilon = 1e-6, weight_offset = 1, cast = after_scale))
    out k_rot = rotate(rmsnorm(k, weight = k_weight, epsilon = 1e-6, weight_offset = 1))
    pairing = neox
    rotary_dim = 64
    positions = positions
    angles = computed(base = 10000, scaling = yarn(factor = 4, original_max_positions = 64))
}
rope tail_bf16_gptj {
    in q: bf16[tokens=T, heads=3, head_dim=72]
    in positions: i64[T]
    in q_weight: bf16[72]
    out q_rot = rotate(rmsnorm(q, weight = q_weight, epsilon = 0))
    pairing = gptj
    positions = positions
    angles = computed(base = 10000)
}
rope f16_neox {
    in q: f16[tokens=T, heads=4, head_dim=64]
    in k: f16[tokens=T, heads=2, head_dim=64]
    in positions: i64[T]
    in q_weight: f16[64]
    in k_weight: f16[64]
    out q_rot = rotate(rmsnorm(q, weight = q_weight, epsilon = 1e-5))
    out k_rot = rotate(rmsnorm(k, weight = k_weight, epsilon = 1e-5, cast = after_scale))
    pairing = neox
    positions = positions
    angles = computed(base = 10000)
}
rope f32_qwen3 {
    in q: f32[tokens=T, heads=4, head_dim=128]
    in k: f32[tokens=T, heads=2, head_dim=128]
    in positions: i64[T]
    in q_weight: f32[128]
    in k_weight: f32[128]
    out q_rot = rotate(rmsnorm(q, weight = q_weight, epsilon = 1e-6))
    out k_rot = rotate(rmsnorm(k, weight = k_weight, epsilon = 1e-6))
    pairing = neox
    positions = positions
    angles = computed(base = 1000000)
}
rope many_heads_bf16 {
    in q: bf16[tokens=T, heads=72, head_dim=128]
    in k: bf16[tokens=T, heads=8, head_dim=128]
    in positions: i64[T]
    in q_weight: bf16[128]
    in k_weight: bf16[128]
    out q_rot = rotate(rmsnorm(q, weight = q_weight, epsilon = 1e-6))
    out k_rot = rotate(rmsnorm(k, weight = k_weight, epsilon = 1e-6))
    pairing = neox
    positions = positions
    angles = computed(base = 1000000)
}
rope plain_bf16 {
    in q: bf16[tokens=T, heads=4, head_dim=96]
    in positions: i64[T]
    out q_rot = rotate(q)
    pairing = neox
    positions = positions
    angles = computed(base = 10000)
}
"""


def _compile_corners(tmp_path_factory):
    path = tmp_path_factory.mktemp("speedpath") / "corners.rope"
    path.write_text(CORNERS)
    return list(ropegen.compile(str(path)))


@pytest.fixture(scope="module")
def all_ops(tmp_path_factory):
    ops = list(ropegen.compile("examples/qk_norm_rope.rope"))
    ops += [op for op in ropegen.compile("examples/fp8_outputs.rope") if op.name == "qk_norm_rope_fp8"]
    return {op.name: op for op in ops + _compile_corners(tmp_path_factory)}


OP_NAMES = ("qwen3_qk_norm_rope", "gemma3_qk_norm_rope", "packed_qkv_qk_norm_rope", "olmo2_qk_norm_rope",
            "qk_norm_rope_fp8", "olmo2_bf16", "gemma_bf16_partial", "tail_bf16_gptj", "f16_neox", "f32_qwen3",
            "plain_bf16", "many_heads_bf16")


def _same_bits(a: np.ndarray, b: np.ndarray, nan_inputs: bool = False) -> bool:
    """Bit for bit; with NaN among the inputs, a NaN may differ in sign and payload (below)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    ua, ub = a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")
    bits = ua == ub
    if nan_inputs:
        both = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
        # bf16 stores every NaN as the canonical one: only its sign is the operand's
        bits |= both & ((ua ^ ub) == 0x8000) if a.dtype == ml_dtypes.bfloat16 else both
    return bool(bits.all())


def _specials(dtype) -> list[float]:
    fin = ml_dtypes.finfo(dtype)
    return [np.nan, -np.nan, np.inf, -np.inf, float(fin.max), -float(fin.max), float(fin.smallest_subnormal),
            -float(fin.smallest_subnormal), 0.0, -0.0]


def _heads_with_specials(x: np.ndarray, rng) -> np.ndarray:
    """x with special values in some heads (one kind per head, so clean heads stay beside them), one
    all-zero head and one head of huge values."""
    x = np.array(x, copy=True)
    flat = x.reshape(-1, x.shape[-1])       # one row per (token, head)
    rows = rng.permutation(flat.shape[0])
    for row, v in zip(rows, _specials(x.dtype)):
        flat[row, rng.integers(0, flat.shape[1])] = v
    if len(rows) > 13:
        flat[rows[10]] = 0
        flat[rows[11]] = ml_dtypes.finfo(x.dtype).max / 4
        # NaNs with payloads: the largest (quiet) and the smallest (signalling), both signs
        width = 8 * x.itemsize
        top = (1 << (width - 1)) - 1
        small = (1 << (width - 1)) | (top & ~((1 << ml_dtypes.finfo(x.dtype).nmant) - 1)) | 1
        flat.view(f"u{x.itemsize}")[rows[12], :2] = [top, small]
        flat.view(f"u{x.itemsize}")[rows[13], 0] = top
    return x


def _scenarios(op, arrays, rng):
    """(label, arrays): clean; special heads; weights with NaN, infinity, a huge value, zeros. An
    operation on two NaNs returns the one the compiler made its first operand (x86), so with NaN among
    the inputs the variants (before this path too) agree on where outputs are NaN, not on its sign or
    payload: NAN_INPUTS names those scenarios; every other one is compared bit for bit."""
    yield "clean", arrays
    heads = {s.src for s in op.plan.streams}
    weights = {s.norm.weight for s in op.plan.streams if s.norm}
    special = dict(arrays)
    for name in heads:
        special[name] = _heads_with_specials(arrays[name], rng)
    yield "special heads", special
    for label, v in (("NaN weight", np.nan), ("inf weight", np.inf), ("huge weight", "max"), ("zero weight", 0.0)):
        if not weights:
            return
        changed = dict(arrays)
        for name in weights:
            w = np.array(arrays[name], copy=True)
            flat = w.reshape(-1)
            at = rng.integers(0, flat.size)
            flat[at] = ml_dtypes.finfo(w.dtype).max if v == "max" else v
            if label == "NaN weight":       # the largest payload: a rounding without the NaN select makes it -0
                flat.view(f"u{w.itemsize}")[at] = (1 << (8 * w.itemsize - 1)) - 1
            if v == 0.0:
                flat[:] = 0
            changed[name] = w
        yield label, changed


NAN_INPUTS = ("special heads", "NaN weight")


def _runs(monkeypatch, op, args):
    out = {}
    for isa in ISAS:
        for stream in ("0", "1"):
            monkeypatch.setenv("ROPEGEN_ISA", isa)
            monkeypatch.setenv("ROPEGEN_STREAM", stream)
            out[isa, stream] = [np.array(a, copy=True) for a in op.run_all(*args, backend="c", threads=2)]
    return out


@pytest.mark.parametrize("name", OP_NAMES)
def test_every_variant_gives_the_baselines_bits(all_ops, name, monkeypatch):
    op = all_ops[name]
    rng = np.random.default_rng(1313)
    for i, case in enumerate(CASES[1:]):
        arrays = make_inputs(op.ir, case, seed=1300 + i)
        for label, inputs in _scenarios(op, arrays, rng):
            args = [inputs[n] for n in op.inputs]
            got = _runs(monkeypatch, op, args)
            want = got["base", "0"]
            for key, outs in got.items():
                for k, (a, b) in enumerate(zip(want, outs)):
                    assert _same_bits(a, b, label in NAN_INPUTS), (name, case.label, label, key, k)


def test_the_scenarios_reach_every_path(all_ops, monkeypatch):
    """The specials really produce NaN and infinity in outputs (else the NaN fallbacks went untested)."""
    op = all_ops["gemma_bf16_partial"]
    arrays = make_inputs(op.ir, CASES[2], seed=5)
    seen = set()
    for label, inputs in _scenarios(op, arrays, np.random.default_rng(7)):
        for out in op.run_all(*[inputs[n] for n in op.inputs], backend="c"):
            f = np.asarray(out).astype(np.float32)
            seen |= {(label, "nan")} if np.isnan(f).any() else set()
            seen |= {(label, "inf")} if np.isinf(f).any() else set()
    assert {("special heads", "nan"), ("NaN weight", "nan"), ("inf weight", "inf"), ("huge weight", "inf")} <= seen, seen


def _source(op) -> str:
    return next(v for k, v in op.sources["c"].items() if k.endswith(".c"))


def test_the_vector_variants_take_the_float_path(all_ops):
    """Where it applies, the fast path is what the AVX2 / AVX-512 variants run, not the baseline."""
    def body(src: str, variant: str) -> str:
        start = src.index(f"void {variant}(const struct rg_args")
        return src[start:src.index("\n}\n", start)]

    for name, grid in (("gemma_bf16_partial", True), ("olmo2_bf16", True), ("f16_neox", True),
                       ("f32_qwen3", False), ("qwen3_qk_norm_rope", True)):
        src = _source(all_ops[name])
        for variant in ("rg_run_avx2", "rg_run_avx512"):
            b = body(src, variant)
            assert ("_f(rg_xf, " in b) == grid, (name, variant)
            if name != "olmo2_bf16":
                assert "_inv_f(" in b, (name, variant)
        base = body(src, "rg_run_base")
        assert "_inv_f(" not in base and "_f(rg_xf" not in base, name
    fp8 = _source(all_ops["qk_norm_rope_fp8"])
    assert "_f(rg_xf" not in fp8


def test_each_head_is_converted_to_float_once_where_the_token_fits(all_ops):
    """The vector variants keep a token's heads in float between the inverse roots and the rotation
    (rg_hf) when they fit 32 KiB, so each head is converted once; a larger stream converts twice."""
    def body(src: str, variant: str) -> str:
        start = src.index(f"void {variant}(const struct rg_args")
        return src[start:src.index("\n}\n", start)]

    for name, conversions in (("qwen3_qk_norm_rope", 2), ("many_heads_bf16", 3), ("f16_neox", 2)):
        src = _source(all_ops[name])
        for isa in ("avx2", "avx512"):
            b = body(src, f"rg_run_{isa}")
            wide = "f16" if name == "f16_neox" else "bf16"
            assert b.count(f"rg_{wide}_in_{isa}(") == conversions, (name, isa)
            kept = ["float rg_hf[4][64]", "float rg_hf[2][64]"] if name == "f16_neox" else ["float rg_hf[8][128]"]
            assert all(k in b for k in kept) and "float rg_hf[72]" not in b, name
        assert "rg_hf" not in body(src, "rg_run_base"), name


HARNESS = """
#if RG_DISPATCH
#define FAST(ISA) \\
    void h_fast_##ISA(const float *s, uint16_t *d, int n) { rg_bf16_out_fast_##ISA(d, s, n, 0); } \\
    void h_fast_nt_##ISA(const float *s, uint16_t *d, int n) { rg_bf16_out_fast_##ISA(d, s, n, 1); _mm_sfence(); }
FAST(avx2)
FAST(avx512)
void h_grid(const float *s, float *d, int n) { for (int i = 0; i < n; ++i) d[i] = rg_grid_bf16(s[i]); }
void h_grid_fast(const float *s, float *d, int n) { for (int i = 0; i < n; ++i) d[i] = rg_grid_bf16_fast(s[i]); }
int h_isa(void) { return rg_isa(); }
#else
int h_isa(void) { return 0; }
#endif
"""


@pytest.fixture(scope="module")
def helpers(all_ops):
    """The bf16 helpers of a rendered kernel (its source plus a few exported wrappers)."""
    op = all_ops["gemma_bf16_partial"]
    sources = dict(op.sources["c"])
    c_name = next(k for k in sources if k.endswith(".c"))
    sources[c_name] += HARNESS
    lib = cbuild.load_library(cbuild.build(sources, "speedpath-harness"))
    if lib.h_isa() < 1:
        pytest.skip("this CPU (or build) has no AVX2 variant")
    lib.isas = ("avx2", "avx512") if lib.h_isa() >= 2 else ("avx2",)
    return lib


def _call(lib, fn: str, x: np.ndarray, y: np.ndarray, n: int | None = None) -> np.ndarray:
    getattr(lib, fn)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data),
                     ctypes.c_int(x.size if n is None else n))
    return y


def _f32_patterns() -> np.ndarray:
    """Around every bf16 value (exact, the ties, one ulp either side), random patterns, every class."""
    hi = np.arange(1 << 15, dtype=np.uint32) << 16
    tie = hi + np.uint32(0x8000)
    rnd = np.random.default_rng(13).integers(0, 1 << 32, 400_000, dtype=np.uint64).astype(np.uint32)
    nan = np.array([0x7f800001, 0x7fbfffff, 0x7fc00000, 0x7fffffff, 0x7f808000, 0x7f7fffff], np.uint32)
    bits = np.concatenate([hi, tie, tie - 1, tie + 1, hi + 1, nan, rnd])
    return np.concatenate([bits, bits ^ np.uint32(0x80000000)]).view(np.float32)


def _want_bf16(x: np.ndarray) -> np.ndarray:
    """rg_f32_to_bf16: round to nearest even; every NaN the canonical quiet NaN with its sign."""
    u = x.view(np.uint32).astype(np.uint64)
    near = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    qnan = (((u >> 16) & 0x8000) | 0x7FC0).astype(np.uint16)
    return np.where(np.isnan(x), qnan, near)


def test_the_grid_roundings_are_the_bf16_round_trip(helpers):
    x = _f32_patterns()
    want = (_want_bf16(x).astype(np.uint32) << 16).view(np.float32)
    got = _call(helpers, "h_grid", x, np.empty_like(x))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    finite = x[~np.isnan(x)]
    got = _call(helpers, "h_grid_fast", finite, np.empty_like(finite))
    assert np.array_equal(got.view(np.uint32), (_want_bf16(finite).astype(np.uint32) << 16))
    # rounded through ml_dtypes too, off NaN (whose bits ml_dtypes leaves to the platform)
    assert np.array_equal(got.view(np.uint32),
                          finite.astype(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("nt", ["h_fast_", "h_fast_nt_"])
def test_fast_runs_out_match_the_scalar_conversion(helpers, nt):
    x = _f32_patterns()
    for isa in helpers.isas:
        got = _call(helpers, nt + isa, x, np.empty(x.size, np.uint16))
        assert np.array_equal(got, _want_bf16(x)), isa


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 31, 32, 33, 64, 72, 96, 127, 128])
def test_fast_runs_with_one_nan_anywhere(helpers, n):
    """A NaN in the first or last vector, or only in the tail, sends the whole run to the NaN-aware
    conversion; every length, at offsets that leave the output unaligned."""
    rng = np.random.default_rng(n)
    base = rng.standard_normal(n + 1).astype(np.float32)
    for at in sorted({0, n // 2, max(0, n - 1)}) if n else [None]:
        x = base.copy()
        if at is not None:
            x.view(np.uint32)[1 + at] = 0xff800001 if at % 2 else 0x7fffffff    # rounded as a number: -0, inf
        for isa in helpers.isas:
            for fn in ("h_fast_", "h_fast_nt_"):
                out = np.zeros(n + 9, np.uint16)
                _call(helpers, fn + isa, x[1:], out[1:], n)
                assert np.array_equal(out[1:n + 1], _want_bf16(x[1:])), (isa, fn, at)
                assert out[0] == 0 and not out[n + 1:].any(), (isa, fn, at)
