"""The C backend fetches the next token's cos / sin table rows while a token is rotated, where a
positions input picks the rows (they can lie anywhere in the table). A prefetch is a hint: what these
tests check is which plans print it and that it reads the next token's position only inside the
chunk (the sanitizer run of every example in test_c_backend.py fails on a read past the positions)."""
from __future__ import annotations

from pathlib import Path

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.context import rope_context

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
