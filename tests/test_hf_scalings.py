"""The Hugging Face scaling forms (yarn, ntk; linear and llama3 alongside) against the numbers
transformers' rope_init functions give: goldens made by tests/data/hf_rope/make_goldens.py, and the
live functions when transformers is installed. Also the diagnostics an HF user meets."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.ops.rope import reference
from ropegen.spec.diagnostics import SpecError

GOLDENS = json.loads((Path(__file__).parent / "data" / "hf_rope" / "goldens.json").read_text())


def _scaling(rp: dict) -> str:
    kind = rp["rope_type"]
    if kind == "default":
        return ""
    if kind == "linear":
        return f", scaling = linear(factor = {rp['factor']})"
    if kind == "llama3":
        return (f", scaling = llama3(factor = {rp['factor']}, low_freq_factor = {rp['low_freq_factor']}, "
                f"high_freq_factor = {rp['high_freq_factor']}, "
                f"original_max_positions = {rp['original_max_position_embeddings']})")
    args = [f"factor = {rp['factor']}", f"original_max_positions = {rp['original_max_position_embeddings']}"]
    for key in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor"):
        if key in rp:
            args.append(f"{key} = {rp[key]}")
    if "truncate" in rp:
        args.append(f"truncate = {'true' if rp['truncate'] else 'false'}")
    return f", scaling = yarn({', '.join(args)})"


def _op(base: float, dim: int, scaling: str):
    return ropegen.compile(f"""
rope r {{ in q: f32[tokens=T, heads=2, head_dim={dim}] in pos: i64[T]
  out q_rot = rotate(q) pairing = neox positions = pos angles = computed(base = {base}{scaling}) }}
""")["r"]


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_planned_frequencies_match_transformers(name):
    g = GOLDENS[name]
    op = _op(g["rope_theta"], g["dim"], _scaling(g["rope_parameters"]))
    planned = np.array(op.plan.angles.inv_freq)
    want = np.array(g["inv_freq"])
    # transformers works in float32: its powers and blend are a few float32 ulps off the exact values
    np.testing.assert_allclose(planned, want, rtol=4e-6, atol=0)
    assert math.isclose(op.plan.angles.magnitude, g["attention_factor"], rel_tol=1e-12)
    # the float64 reference, written from the same definitions independently of the planner
    inv, m = reference.inverse_frequencies(op.ir, g["dim"] // 2)
    np.testing.assert_allclose(planned, inv, rtol=1e-13, atol=0)
    assert math.isclose(m, op.plan.angles.magnitude, rel_tol=1e-13)


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_live_transformers(name):
    pytest.importorskip("torch", reason="transformers' rope functions need torch")
    pytest.importorskip("transformers", reason="transformers is not installed: the goldens stand in for it")
    import sys
    sys.path.insert(0, str(Path(__file__).parent / "data" / "hf_rope"))
    from make_goldens import live
    g = GOLDENS[name]
    inv, attention = live(g["rope_theta"], g["dim"], g["rope_parameters"])
    op = _op(g["rope_theta"], g["dim"], _scaling(g["rope_parameters"]))
    np.testing.assert_allclose(op.plan.angles.inv_freq, inv, rtol=4e-6, atol=0)
    assert math.isclose(op.plan.angles.magnitude, attention, rel_tol=1e-6)


def test_yarn_rotates_like_its_definition_on_every_backend():
    g = GOLDENS["deepseek_v3"]
    op = _op(g["rope_theta"], g["dim"], _scaling(g["rope_parameters"]))
    rng = np.random.default_rng(0)
    pos = np.array([0, 1, 4095, 4096, 100_000, 163_839], np.int64)   # inside and beyond original_max_positions
    q = rng.standard_normal((pos.size, 2, g["dim"])).astype(np.float32)
    # the definition in float64 (transformers' own float32 frequencies drift by pos * 1e-7 rad: at
    # position 163839 that is 0.01 rad, its error, not a bound for ours)
    inv, m = reference.inverse_frequencies(op.ir, g["dim"] // 2)
    np.testing.assert_allclose(inv, g["inv_freq"], rtol=4e-6)
    assert math.isclose(m, g["attention_factor"], rel_tol=1e-12)
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang) * m, np.sin(ang) * m
    h = g["dim"] // 2
    x1, x2 = q[..., :h].astype(np.float64), q[..., h:].astype(np.float64)
    want = np.concatenate([x1 * cos[:, None] - x2 * sin[:, None], x2 * cos[:, None] + x1 * sin[:, None]], -1)
    for b in ("numpy", "c"):
        got = op.run(q, pos, backend=b)
        np.testing.assert_allclose(got, want, atol=4e-6, rtol=0)      # float32 data and arithmetic


@pytest.mark.parametrize("a", [4.0, 1000.0])
@pytest.mark.parametrize("word", ["factor", "alpha"])
def test_ntk_is_a_new_base(a, word):
    d = 128
    op = _op(10000.0, d, f", scaling = ntk({word} = {a})")
    new_base = 10000.0 * a ** (d / (d - 2))
    want = np.array([new_base ** (-2.0 * i / d) for i in range(d // 2)])
    np.testing.assert_allclose(op.plan.angles.inv_freq, want, rtol=1e-13)
    assert op.plan.angles.magnitude == 1.0


@pytest.mark.parametrize("text,code,hint", [
    ("scaling = dynamic(factor = 2)", "C009", "dynamic_ntk(factor = ..., original_max_positions = ...)"),
    ("scaling = su(factor = 2)", "C009", "longrope(short_factor = [...]"),
    ("scaling = default(factor = 2)", "C009", "leave `scaling` out"),
    ("scaling = longrope(factor = 2)", "C011", "short_factor"),
    ("scaling = dynamic_ntk(factor = 2)", "C011", "original_max_positions"),
    ("scaling = yarn(factor = 4)", "C011", "original_max_positions"),
    ("scaling = yarn(factor = 4, original_max_positions = 4096, truncate = 1)", "C008", "true, false"),
    ("scaling = yarn(factor = 4, original_max_positions = 4096, beta_fast = 1, beta_slow = 32)", "C029",
     "beta_fast must be above beta_slow"),
    ("scaling = ntk(factor = 2, alpha = 3)", "C011", "one of factor or alpha"),
    ("scaling = ntk()", "C011", "one of factor or alpha"),
])
def test_hf_users_get_the_right_word(text, code, hint):
    with pytest.raises(SpecError) as e:
        ropegen.compile(f"""
rope r {{ in q: f32[tokens=T, heads=2, head_dim=64] in pos: i64[T]
  out q_rot = rotate(q) pairing = neox positions = pos angles = computed(base = 10000, {text}) }}
""")
    msg = str(e.value)
    assert code in msg and hint in msg, msg


def test_explain_shows_the_resolved_scaling():
    from ropegen.ops.explain import explain
    g = GOLDENS["gpt_oss"]
    text = explain(_op(g["rope_theta"], g["dim"], _scaling(g["rope_parameters"])).plan)
    assert "yarn (HF): factor 32" in text and "fractional range" in text and "0.1 ln(factor) + 1" in text
    text = explain(_op(10000.0, 128, ", scaling = ntk(alpha = 1000)").plan)
    said = float(text.split("base 10000 becomes ")[1].split()[0])
    assert math.isclose(said, 10000.0 * 1000 ** (128 / 126), rel_tol=1e-14)
