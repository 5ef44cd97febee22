"""The C backend fetches the next token's cos / sin table rows while a token is rotated, where a
positions input picks the rows (they can lie anywhere in the table), and the next token's heads (every
kernel: the hardware prefetchers stop at each 4 KiB page). A prefetch is a hint: what these tests
check is which plans print it and that it reads the next token's position only inside the chunk, and
points at a later token's heads only inside the call's tokens and the sequence (the sanitizer run of
every example in test_c_backend.py fails on a read past the positions)."""
from __future__ import annotations

import re
from pathlib import Path

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.context import rope_context
from ropegen.backends.c.ctxbase import far_tokens

ROOT = Path(__file__).resolve().parents[1]
OPS = {op.name: op for path in sorted((ROOT / "examples").glob("*.rope")) for op in ropegen.compile(path)
       if op.kind == "rope"}


def test_which_plans_prefetch_the_next_rows():
    flags = {name: rope_context(op.plan).get("table_prefetch", False) for name, op in OPS.items()}
    for name in ("llama3_8b_cached", "vllm_cos_sin_cache", "onnx_rope_4d", "gptj_cache"):
        assert flags[name], name
    # per-token tables, positions counted in a sequence, and computed angles: rows in order or none
    for name in ("hf_llama_per_token", "atb_cos_format1", "onnx_rope_no_position_ids", "llama3_8b"):
        assert not flags[name], name


def test_the_prefetch_reads_the_next_position_only_inside_the_chunk():
    op = OPS["vllm_cos_sin_cache"]
    src = CBackend().sources(op.plan, op.spec.file)[f"{op.name}.c"]
    base = src[src.index("void rg_run_base("):src.index("void rg_run_avx2(")]
    guard = base.index("if (rg_t + 1 < rg_t1) {")
    assert "[rg_tm + 1]" in base[guard:guard + 200] and "rg_prefetch_row(" in base[guard:guard + 400]


def _variants(src: str) -> list[str]:
    names = ("void rg_run_base(", "void rg_run_avx2(", "void rg_run_avx512(")
    at = [src.index(n) for n in names if n in src]
    return [src[a:b] for a, b in zip(at, at[1:] + [len(src)])]


# the call's tokens, B * S (T when packed), not the chunk's: the thread that takes a chunk mostly takes
# the next one too, and a chunk's last tokens would otherwise fetch nothing ahead
_NTOK = "const int64_t rg_ntok = rg_B * rg_S;"


def test_every_kernel_fetches_the_next_tokens_heads_inside_the_call_and_sequence():
    for name, op in OPS.items():
        src = CBackend().sources(op.plan, op.spec.file)[f"{op.name}.c"]
        # packed tokens: the next token of the call; batch and sequence: of the call and the sequence
        guard = ("const int rg_ahead = rg_t + 1 < rg_ntok;" if op.plan.token_layout == "t"
                 else "const int rg_ahead = rg_t + 1 < rg_ntok && rg_s + 1 < rg_S;")
        for body in _variants(src):
            heads = len(re.findall(r"/\* \w+ = (?:rotate|copy)\(", body))     # one head loop a stream
            assert _NTOK in body and guard in body and heads, name
            # each stream's head loop: this head of the next token (its token step), the head's bytes
            assert body.count("if (rg_ahead) rg_prefetch(rg_xt + rg_h * ") == heads, name
            assert body.count(" * sizeof rg_xt[0]);") >= heads, name


def test_vector_kernels_fetch_the_token_far_on_into_the_l2_inside_the_call_and_sequence():
    for name, op in OPS.items():
        src = CBackend().sources(op.plan, op.spec.file)[f"{op.name}.c"]
        far = re.search(r"#define RG_FAR (\d+)", src)
        per_token = sum(t.real_heads * op.plan.head_dim * t.dtype.itemsize
                        for t in op.plan.inputs if t.name in {s.src for s in op.plan.streams})
        assert far and int(far.group(1)) == far_tokens(per_token), name
        guard = ("const int rg_far = rg_t + RG_FAR < rg_ntok;" if op.plan.token_layout == "t"
                 else "const int rg_far = rg_t + RG_FAR < rg_ntok && rg_s + RG_FAR < rg_S;")
        for body in _variants(src):
            heads = len(re.findall(r"/\* \w+ = (?:rotate|copy)\(", body))
            fetches = len(re.findall(r"if \(rg_far\) rg_prefetch_l2\(rg_xt \+ rg_h \* \w+ \+ RG_FAR \* \w+, ", body))
            if "void rg_run_base(" in body:     # the baseline (every target without the vector variants): none
                assert "rg_far" not in body, name
            else:
                assert guard in body and fetches == heads, name


def test_the_far_token_is_about_48_kib_of_input_on():
    assert far_tokens(10 * 1024) == 5        # llama3 q + k f16: 32 + 8 heads of 128
    assert far_tokens(20 * 1024) == 3        # and f32
    assert far_tokens(64 * 1024) == 2        # never the next token only (it is fetched into the L1)
    assert far_tokens(64) == 16 and far_tokens(0) == 16


def test_rmsnorm_fetches_the_next_row_inside_the_chunk():
    op = next(o for o in ropegen.compile(ROOT / "examples" / "onnx_rmsnorm.rope") if o.kind == "rmsnorm")
    src = CBackend().sources(op.plan, op.spec.file)[f"{op.name}.c"]
    base, *vector = _variants(src)
    guard = base.index("if (r + 1 < r1) {")
    assert "rg_prefetch(xr + RG_N + i0, (size_t)n * sizeof xr[0]);" in base[guard:guard + 200]
    # the vector variants ask for it line by line as their loop goes (test_c_rms_vectors.py)
    for body in vector:
        assert "const float *xn = r + 1 < r1 ? xr + RG_N : NULL;" in body
        assert "if (xn) rg_prefetch_l2(xn + i0 + i, " in body
