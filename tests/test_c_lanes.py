"""The vector pair path of the C backend's AVX2 / AVX-512 variants (`lanes`, backends/c/context.py):
which plans take it, and that it gives the baseline's bits for every example that does, streamed or
not, in place, with special values, and with outputs at every alignment its stores branch on
(unaligned: through the store buffer; 16, 32 and 64 bytes: non-temporal stores of each width).
"""
from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.context import rope_context
from ropegen.ops.inputs import CASES, make_inputs
from tests.c_harness import run_harness
from tests.test_c_backend import EXAMPLES

BACKEND = CBackend()
ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable())),
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 / AVX-512 are x86 extensions"),
]

# beside the examples: sections of 16 and 24 pairs (eight lanes in both variants, three position streams),
# bf16 pairs in runs of 48 (AVX2 deals them; AVX-512 pairs them: 32 does not divide 48)
# f16 partial rotary (a passthrough tail) and bf16 interleaved pairs, in float arithmetic, and bf16
# interleaved pairs whose table is written per element (columns 2j, 2j + 1), with a passthrough tail
EXTRA = """
rope mrope_f16_f32 {
    in q:         f16[tokens=T, heads=4, head_dim=128]
    in k:         f16[tokens=T, heads=2, head_dim=128]
    in positions: i64[3, T]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing   = neox
    positions = mrope(positions, sections = [16, 24, 24])
    angles    = computed(base = 1000000)
    compute   = f32
}
rope partial_f16_f32 {
    in x:   f16[tokens=T, heads=3, head_dim=64]
    in pos: i32[T]
    out y = rotate(x)
    pairing    = neox
    rotary_dim = 32
    positions  = pos
    angles     = computed(base = 10000)
    compute    = f32
}
rope neox96_bf16_f32 {
    in x:   bf16[tokens=T, heads=3, head_dim=96]
    in pos: i32[T]
    out y = rotate(x)
    pairing    = neox
    positions  = pos
    angles     = computed(base = 10000)
    compute    = f32
}
rope gptj_table_bf16 {
    in x:   bf16[tokens=T, heads=3, head_dim=96]
    in pos: i64[T]
    in cos: f32[P, 64]
    in sin: f32[P, 64]
    out y = rotate(x)
    pairing    = gptj
    rotary_dim = 64
    positions  = pos
    angles     = table(cos = cos, sin = sin)
}
rope gptj_bf16_f32 {
    in x:   bf16[tokens=T, heads=3, head_dim=64]
    in pos: i32[T]
    out y = rotate(x)
    pairing    = gptj
    positions  = pos
    angles     = computed(base = 10000)
    compute    = f32
}
"""
ROPE_OPS = [op for src in [*EXAMPLES, ROOT / "bench" / "llama3_f16.rope", EXTRA] for op in ropegen.compile(src)
            if op.kind == "rope"]
# normalized streams keep their own float path (test_head_norm_speedpath.py)
LANE_OPS = [op for op in ROPE_OPS if rope_context(op.plan)["lanes"] and not any(s.norm for s in op.plan.streams)]
ISAS = ("base", "avx2", "avx512", "")    # "": the best this CPU runs (AVX-512, with AVX512-BF16 where it has it)
SPECIALS = {
    "f32": [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3e-39, 3.4e38, -3.4e38],
    "f16": [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 6e-8, -3e-5, 65504.0, -65504.0],
    "bf16": [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -5e-39, 3.3e38, -3.3e38],
}
# signalling and quiet NaNs with payloads, both signs
NAN_PAYLOADS = {"f32": [0x7FA00001, 0xFFC12345], "f16": [0x7D01, 0xFE55], "bf16": [0x7F81, 0xFFC5]}


def _cpu_has_avx2() -> bool:
    try:
        return " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _at_offset(shape, dtype, offset: int) -> np.ndarray:
    """A zeroed C-contiguous array whose data starts `offset` bytes past a 64-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.zeros(nbytes + 128, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _copy_at(a: np.ndarray, offset: int) -> np.ndarray:
    """A copy of `a` starting `offset` bytes past a 64-byte boundary where its dtype allows that."""
    a = np.asarray(a)
    if offset % a.dtype.itemsize:
        return np.array(a, copy=True)
    c = _at_offset(a.shape, a.dtype, offset)
    c[...] = a
    return c


def _inputs(op, case, seed: int, special: bool) -> list:
    """The case's inputs; with `special`, infinities, zeros, subnormals, huge values and NaNs with
    payloads written into the first element of some pairs (never both: which operand's NaN a sum of
    two NaNs returns is the compiler's choice in every variant, docs/architecture.md)."""
    arrays = make_inputs(op.ir, case, seed=seed)
    if special:
        rng = np.random.default_rng(seed)
        blk = op.plan.blocks[0]
        for t in op.plan.inputs:
            a = arrays[t.name]
            if t.name not in {s.src for s in op.plan.streams} or not a.flags.c_contiguous:
                continue
            vals = np.concatenate([np.array(SPECIALS[t.dtype.name], dtype=np.float64).astype(a.dtype),
                                   np.array(NAN_PAYLOADS[t.dtype.name], dtype=f"u{a.dtype.itemsize}").view(a.dtype)])
            rows = a.reshape(-1, a.shape[-1])
            at = rng.choice(rows.shape[0], size=min(rows.shape[0], 2 * vals.size), replace=False)
            rows[at, blk.a0 + rng.integers(0, blk.count, at.size)] = np.resize(vals, at.size)
    return [arrays[n] for n in op.inputs]


def test_which_plans_take_the_lanes_path():
    names = {op.name: rope_context(op.plan)["lanes"] for op in ROPE_OPS}
    # half-split pairs with consecutive columns, float arithmetic: sixteen lanes on AVX-512
    for name in ("llama3_8b", "llama3_8b_cached", "llama3_8b_f16", "hf_llama_per_token", "phi3_longrope"):
        assert names[name]["rg_run_avx512"]["w"] == 16, name
        assert names[name]["rg_run_avx2"]["w"] == 8, name
    # sections of 16 and 24 pairs: eight lanes in both variants
    assert names["mrope_f16_f32"]["rg_run_avx512"]["w"] == 8
    # interleaved pairs (2j, 2j + 1): dealt into even / odd lanes and woven back
    for name in ("ggml_normal", "ppl_rotary", "ppl_rotary_2d", "vllm_gptj_partial", "dynamic_ntk_packed"):
        assert names[name]["rg_run_avx512"]["pairs"] == "interleaved", name
    # compute = storage: each product and sum rounded in the lanes (F16C, or bf16's carry form)
    for name, rnd in (("atb_coeff4_fp16", "rg_vgrid_f16_avx512"), ("atb_coeff2_bf16", "rg_vgrid_bf16_avx512"),
                      ("qwen2_vl", "rg_vgrid_bf16_avx2"), ("deepseek_v3_q", "rg_vgrid_bf16_avx512")):
        assert names[name]["rg_run_avx512"]["rnd"] == rnd, name
    assert names["llama3_8b"]["rg_run_avx512"]["rnd"] == ""      # float arithmetic: nothing rounded
    # a table written per element (HF GPT-J's cache): columns 2j, 2j + 1 dealt into lanes as the pairs are
    for name in ("gptj_cache", "gptj_table_bf16"):
        assert names[name]["rg_run_avx512"]["col2"] == "rg_vld2_cols_avx512", name
        assert names[name]["rg_run_avx2"]["pairs"] == "interleaved", name
    assert names["ggml_normal"]["rg_run_avx512"]["col2"] == ""
    # f16 / f32 runs whose vector is under a 64-byte line: registers grouped a step, so that their
    # results, stored one after another, fill whole lines
    assert [len(names["llama3_8b_f16"][v]["group"]) for v in ("rg_run_avx2", "rg_run_avx512")] == [4, 2]
    assert [len(names["phi3_longrope"][v]["group"]) for v in ("rg_run_avx2", "rg_run_avx512")] == [2, 0]
    # bf16 runs dealt: a store holds two registers' values, 32 bytes on AVX2 (two a step), a line on AVX-512
    assert [len(names["llama3_8b"][v]["group"]) for v in ("rg_run_avx2", "rg_run_avx512")] == [2, 0]
    assert names["mrope_f16_f32"]["rg_run_avx512"]["group"] == []    # sections of 16 and 24 pairs: no 32 divides
    # f16 in eight lanes stores at multiples of 16 bytes into a head rg_nt found 16-byte aligned: no test a store
    assert names["llama3_8b_f16"]["rg_run_avx2"]["st"] == "rg_vsta_f16_avx2"
    assert names["llama3_8b_f16"]["rg_run_avx512"]["st"] == "rg_vst_f16_avx512"
    assert names["mrope_f16_f32"]["rg_run_avx512"]["st"] == "rg_vsta_f16_avx2"
    f16 = ropegen.compile(str(ROOT / "bench" / "llama3_f16.rope"))["llama3_8b_f16"]
    f16_src = BACKEND.sources(f16.plan, "llama3_f16.rope")["llama3_8b_f16.c"]
    grouped = f16_src[f16_src.index("void rg_run_avx512("):]
    assert "for (int rg_j = 0; rg_j < 64; rg_j += 32) {" in grouped
    stores = ["rg_vst_f16_avx512(rg_y + 0 + rg_j, ya, rg_how);", "rg_vst_f16_avx512(rg_y + 0 + rg_j + 16, ya1, rg_how);",
              "const __m512 yb = ", "rg_vst_f16_avx512(rg_y + 64 + rg_j, yb, rg_how);",
              "rg_vst_f16_avx512(rg_y + 64 + rg_j + 16, yb1, rg_how);"]
    at = [grouped.index(x) for x in stores]
    assert at == sorted(at)       # a line's two halves stored together, before the b results are computed
    # fp8 outputs and four-pair blocks keep their loops
    for name in ("flashinfer_rope_quantize_fp8", "onnx_rope_4d"):
        assert names[name] == {}, name
    op = ropegen.compile(str(ROOT / "examples" / "llama3.rope"))["llama3_8b"]
    src = BACKEND.sources(op.plan, "llama3.rope")["llama3_8b.c"]
    avx512 = src[src.index("void rg_run_avx512("):]
    # bf16 runs, 32 pairs a step: loaded whole and dealt into even / odd lanes, stored whole
    assert "rg_vldd_bf16_avx512(rg_x + 0 + rg_j, &xa, &xa1)" in avx512
    assert "rg_vstd_bf16_avx512(rg_y + 64 + rg_j, yb, yb1, rg_how)" in avx512
    assert "rg_deal_cols(rg_cos0, rg_cosd0, RG_NCOLS, 16)" in avx512
    # AVX2: 32 pairs a step, the a results' two 32-byte stores one after the other, then the b results'
    avx2 = src[src.index("void rg_run_avx2("):src.index("void rg_run_avx512(")]
    assert "for (int rg_j = 0; rg_j < 64; rg_j += 32) {" in avx2
    stores = ["rg_vstd_bf16_avx2(rg_y + 0 + rg_j, ya, ya1, rg_how);", "rg_vstd_bf16_avx2(rg_y + 0 + rg_j + 16, ya_1, ya1_1, rg_how);",
              "rg_vstd_bf16_avx2(rg_y + 64 + rg_j, yb, yb1, rg_how);", "rg_vstd_bf16_avx2(rg_y + 64 + rg_j + 16, yb_1, yb1_1, rg_how);"]
    at = [avx2.index(x) for x in stores]
    assert at == sorted(at)
    assert "rg_vld_" not in src[src.index("void rg_run_base("):src.index("void rg_run_avx2(")]
    # 48 pairs: dealt by AVX2 (16 a step), paired by AVX-512 (32 do not divide 48)
    forms = names["neox96_bf16_f32"]
    assert forms["rg_run_avx2"]["deal"] and not forms["rg_run_avx512"]["deal"]
    assert forms["rg_run_avx512"]["w"] == 16 and forms["rg_run_avx512"]["paired"]
    # interleaved bf16 pairs lie in the halves of 32-bit lanes already: loaded and stored dealt
    assert names["gptj_bf16_f32"]["rg_run_avx512"]["ld2"] == "rg_vldd_bf16_avx512"
    assert names["gptj_bf16_f32"]["rg_run_avx2"]["st2"] == "rg_vstd_bf16_avx2"


def test_the_lane_examples_cover_every_storage_type():
    assert {op.plan.storage.name for op in LANE_OPS} == {"f32", "f16", "bf16"}
    woven = [op for op in LANE_OPS if rope_context(op.plan)["lanes_interleaved"]]
    assert {op.plan.storage.name for op in woven} == {"f32", "f16", "bf16"}
    assert any(op.plan.passthrough and op.plan.storage.name == "f16" for op in LANE_OPS)
    assert any(len(op.plan.blocks) > 1 for op in LANE_OPS)
    dealt = {op.name for op in LANE_OPS if rope_context(op.plan)["lanes"]["rg_run_avx512"]["deal"]}
    assert "llama3_8b" in dealt and "neox96_bf16_f32" not in dealt


@pytest.mark.parametrize("op", LANE_OPS, ids=[op.name for op in LANE_OPS])
def test_every_variant_streamed_or_not_gives_the_baseline_bits(op, monkeypatch):
    for i, case in enumerate(CASES):
        for special in (False, True):
            args = _inputs(op, case, 900 + i, special)
            want = None
            for isa in ISAS:
                for stream in ("0", "1"):
                    monkeypatch.setenv("ROPEGEN_ISA", isa)
                    monkeypatch.setenv("ROPEGEN_STREAM", stream)
                    got = [np.array(a, copy=True) for a in op.run_all(*args, backend="c", threads=2)]
                    want = want or got
                    for a, b in zip(want, got):
                        assert _same_bits(a, b), (op.name, case.label, special, isa, stream)


LLAMA = [op for op in LANE_OPS if op.name in ("llama3_8b", "llama3_8b_f16", "dynamic_ntk", "hf_llama_per_token",
                                              "ggml_normal", "dynamic_ntk_packed", "gptj_bf16_f32", "neox96_bf16_f32",
                                              "gptj_cache", "gptj_table_bf16")]


@pytest.mark.parametrize("op", LLAMA, ids=[op.name for op in LLAMA])
@pytest.mark.parametrize("offset", [0, 2, 4, 16, 32], ids=lambda o: f"out+{o}B")
def test_outputs_at_every_alignment(op, offset, monkeypatch):
    """Streamed outputs 64-, 32-, 16-byte aligned (non-temporal stores of each width) and off any
    alignment (the store buffer, then a streamed copy), and in place over inputs as far off a line (the
    f32 stores over their source whole, RG_OVER): the baseline's bits."""
    args = _inputs(op, CASES[1], 31, True)
    monkeypatch.setenv("ROPEGEN_ISA", "base")
    monkeypatch.setenv("ROPEGEN_STREAM", "0")
    want = [np.array(a, copy=True) for a in op.run_all(*args, backend="c")]
    if offset % want[0].dtype.itemsize:
        pytest.skip(f"{want[0].dtype} cannot start {offset} bytes off")
    for isa in ISAS:
        for stream in ("0", "1"):
            monkeypatch.setenv("ROPEGEN_ISA", isa)
            monkeypatch.setenv("ROPEGEN_STREAM", stream)
            outs = tuple(_at_offset(w.shape, w.dtype, offset) for w in want)
            op.run_all(*args, backend="c", out=outs)
            for a, b in zip(want, outs):
                assert _same_bits(a, b), (op.name, isa, stream, offset)
            call = [_copy_at(a, offset) for a in args]
            try:
                got = op.run_all(*call, backend="c", inplace=True)
            except ValueError:          # outputs that cannot be written over their inputs
                continue
            for a, b in zip(want, got):
                assert _same_bits(a, np.asarray(b)), (op.name, isa, stream, "in place")


_RNE_HARNESS = r"""
#include "llama3_8b.c"
#include <stdio.h>
/* rg_rne_dealt_<ISA> (bf16 rounded in 16-bit lanes after the weave) against the scalar rg_f32_to_bf16,
 * every value in both the even and the odd lanes: every upper word with the lower words around the
 * rounding point and at the ends, then every STEP-th float bit pattern (NaNs excepted: they take
 * rg_bf16_word_<ISA>). W: the 32-bit lanes of a register. */
#define RG_CAT(a, b) a##b
#define RG_RNE(isa) RG_CAT(rg_rne_dealt_, isa)
static unsigned long bad, seen;
static TARGET void check(const uint32_t *u)
{
    VEC a = LOAD(u), b = LOAD(u + W);
    for (int swap = 0; swap < 2; ++swap) {
        uint16_t w[2 * W];
        STORE(w, RG_RNE(ISA)(CAST(a), CAST(b)));
        for (int k = 0; k < 2 * W; ++k) {
            const uint32_t x = (k & 1) ? u[(W + k / 2 + swap * W) % (2 * W)] : u[(k / 2 + swap * W) % (2 * W)];
            if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) continue;
            ++seen;
            bad += w[k] != rg_f32_to_bf16(rg_bits_f32(x));
        }
        const VEC t = a; a = b; b = t;
    }
}
int main(void)
{
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
    uint32_t u[2 * W];
    int n = 0;
    for (uint32_t hi = 0; hi < 0x10000u; ++hi)
        for (int j = 0; j < 8; ++j) {
            u[n++] = (hi << 16) | lows[j];
            if (n == 2 * W) { check(u); n = 0; }
        }
    for (uint64_t x = 0; x < (1ull << 32); x += 2 * W * STEP) {
        for (int k = 0; k < 2 * W; ++k) u[k] = (uint32_t)(x + (uint64_t)k * STEP + (k * 2654435761u) % STEP);
        check(u);
    }
    printf("%lu %lu\n", bad, seen);
    return 0;
}
"""
_RNE_ISAS = {
    "avx2": ["-DISA=avx2", "-DW=8", "-DTARGET=RG_TARGET_AVX2", "-DVEC=__m256i", "-DCAST=_mm256_castsi256_ps",
             "-DLOAD(p)=_mm256_loadu_si256((const __m256i *)(const void *)(p))",
             "-DSTORE(p,v)=_mm256_storeu_si256((__m256i *)(void *)(p),v)"],
    "avx512": ["-DISA=avx512", "-DW=16", "-DTARGET=RG_TARGET_AVX512", "-DVEC=__m512i", "-DCAST=_mm512_castsi512_ps",
               "-DLOAD(p)=_mm512_loadu_si512((const void *)(p))", "-DSTORE(p,v)=_mm512_storeu_si512((void *)(p),v)"],
}


@pytest.mark.parametrize("isa", sorted(_RNE_ISAS))
def test_the_dealt_rounding_is_the_carry_form(isa, tmp_path):
    """rg_rne_dealt_avx2 / _avx512, the dealt bf16 stores' rounding (after the weave, in 16-bit lanes),
    gives rg_f32_to_bf16's word for every value tried in either lane: every upper word with lower words
    at and around the tie, and a sweep of all float bit patterns (it fails if a tie rounds away from
    even or the even and odd words are woven the wrong way round)."""
    from tests.test_c_rms_bf16_isa import _cpu_has_avx512bw
    if not (_cpu_has_avx512bw() if isa == "avx512" else _cpu_has_avx2()):
        pytest.skip(f"this CPU has no {'AVX-512 BW' if isa == 'avx512' else 'AVX2'}: the helper cannot run here")
    op = ropegen.compile(str(ROOT / "examples" / "llama3.rope"))["llama3_8b"]
    sources = BACKEND.sources(op.plan, "llama3.rope")
    if f"rg_rne_dealt_{isa}" not in sources["llama3_8b.c"]:
        pytest.fail(f"llama3_8b.c has no rg_rne_dealt_{isa}")
    bad, seen = map(int, run_harness(tmp_path, sources, _RNE_HARNESS, "-DSTEP=4099", *_RNE_ISAS[isa]).split())
    assert seen > 2_000_000 and bad == 0
