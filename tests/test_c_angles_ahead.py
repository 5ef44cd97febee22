"""The C backend's vector variants compute the next token's angles halfway through a token's heads
(`angles_ahead`, backends/c/context.py) in calls from memory, where f32 heads leave the core waiting on
its reads. The same angles as at the token's start, to the bit: these tests run the path (ROPEGEN_STREAM=1
makes a small call take it) against the same call without it, in every vector variant, chunk starts
included, and check which plans take it."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.context import rope_context
from ropegen.ops.inputs import CASES, make_inputs

pytestmark = pytest.mark.skipif(CBackend().unavailable() is not None, reason=str(CBackend().unavailable()))

SPEC = """
rope ahead {{
    in q:         {dt}[tokens=T, heads=6, head_dim=64]
    in k:         {dt}[tokens=T, heads=2, head_dim=64]
    in positions: i64[T]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing   = {pairing}
    positions = positions
    angles    = computed(base = 500000,
                         scaling = llama3(factor = 8, low_freq_factor = 1, high_freq_factor = 4,
                                          original_max_positions = 8192))
}}
"""


def _op(dt: str = "f32", pairing: str = "neox"):
    return ropegen.compile(SPEC.format(dt=dt, pairing=pairing), file="ahead.rope")["ahead"]


def test_which_plans_compute_angles_ahead():
    assert rope_context(_op().plan)["angles_ahead"]
    assert rope_context(_op(pairing="gptj").plan)["angles_ahead"]
    # 16-bit heads keep the core busy converting: ahead measured slower there
    assert not rope_context(_op("bf16").plan)["angles_ahead"]
    assert not rope_context(_op("f16").plan)["angles_ahead"]
    examples = {op.name: op for op in ropegen.compile(Path(__file__).resolve().parents[1] / "examples" / "llama3.rope")}
    assert rope_context(examples["llama3_8b_cached"].plan)["angles_ahead"] is False   # a table: no angles


def test_the_next_tokens_angles_are_computed_once_halfway_through_the_first_stream():
    op = _op()
    src = CBackend().sources(op.plan, "ahead.rope")["ahead.c"]
    base = src[src.index("void rg_run_base("):src.index("void rg_run_avx2(")]
    assert "rg_cosn0" not in base and "rg_ahead_on" not in base
    for name in ("avx2", "avx512"):
        body = src[src.index(f"void rg_run_{name}("):]
        body = body[:body.index("\n}\n")]
        calls = re.findall(r"if \(rg_h == (\d+) && rg_ahead_on && rg_t \+ 1 < rg_t1\) "
                           r"rg_angles\(\(int64_t\)positions\[rg_tm \+ 1\], rg_cosn0, rg_sinn0\);", body)
        assert calls == ["3"], name          # q's six heads: at its fourth, once a token
        assert "if (rg_t == rg_t0 || !rg_ahead_on) {" in body


@pytest.mark.parametrize("isa", ["base", "avx2", "avx512"])
@pytest.mark.parametrize("pairing", ["neox", "gptj"])
def test_angles_ahead_give_the_same_bits(monkeypatch, isa, pairing):
    op = _op(pairing=pairing)
    src = CBackend().sources(op.plan, "ahead.rope")["ahead.c"]
    chunk = int(re.search(r"#define RG_CHUNK (\d+)", src).group(1))
    tokens = 3 * chunk + 5                      # several chunks, each starting afresh, one part-filled
    rng = np.random.default_rng(7)
    q = rng.standard_normal((tokens, 6, 64)).astype(np.float32)
    k = rng.standard_normal((tokens, 2, 64)).astype(np.float32)
    # positions out of order: a token given its neighbour's angles would not pass
    pos = rng.permutation(np.arange(tokens) * 37 + 11).astype(np.int64)
    monkeypatch.setenv("ROPEGEN_ISA", isa)
    monkeypatch.setenv("ROPEGEN_STREAM", "0")
    want = [op.run(q, k, pos, backend="c", threads=1)]
    want.append(op.run(q.copy(), k.copy(), pos, backend="c", threads=1))
    assert all(np.array_equal(a, b) for a, b in zip(*want))
    monkeypatch.setenv("ROPEGEN_STREAM", "1")
    for threads in (1, 2):
        got = op.run(q, k, pos, backend="c", threads=threads)
        for g, w in zip(got, want[0]):
            assert g.tobytes() == w.tobytes(), (isa, threads)
    # and next to the NumPy backend (no ahead path there)
    ref = op.run(q, k, pos, backend="numpy")
    for g, r in zip(got, ref):
        assert np.allclose(g, r, rtol=1e-5, atol=1e-5)


def _examples():
    root = Path(__file__).resolve().parents[1] / "examples"
    return [op for path in sorted(root.glob("*.rope")) for op in ropegen.compile(path)
            if op.kind == "rope" and rope_context(op.plan)["angles_ahead"]]


EXAMPLES = _examples()


def test_examples_that_compute_angles_ahead():
    # exact and ggml angles, per-call frequency rows, a fused norm: every kind the path meets
    assert {"ggml_normal", "ggml_neox_yarn", "phi3_longrope", "dynamic_ntk", "olmo2_qk_norm_rope"} \
        <= {op.name for op in EXAMPLES}


@pytest.mark.parametrize("op", EXAMPLES, ids=lambda op: op.name)
def test_examples_give_the_same_bits_ahead(monkeypatch, op):
    for case in CASES[1:]:
        a = make_inputs(op.ir, case, seed=5)
        args = [a[n] for n in op.inputs]
        for isa in ("avx2", "avx512"):
            monkeypatch.setenv("ROPEGEN_ISA", isa)
            monkeypatch.setenv("ROPEGEN_STREAM", "0")
            want = op.run(*args, backend="c", threads=1)
            monkeypatch.setenv("ROPEGEN_STREAM", "1")
            got = op.run(*args, backend="c", threads=1)
            want, got = (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))
            assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want)), (op.name, case.label, isa)
