"""The Hugging Face scaling forms (yarn, ntk; linear and llama3 alongside; longrope and dynamic,
whose frequencies depend on the length) against the numbers transformers' rope_init functions give:
goldens made by tests/data/hf_rope/make_goldens.py, and the live functions when transformers is
installed. Also the diagnostics an HF user meets."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import mpmath
import numpy as np
import pytest

import ropegen
from ropegen.ops.rope import reference
from ropegen.ops.rope.frequency_rows import FrequencyRows
from ropegen.spec.diagnostics import SpecError

GOLDENS = json.loads((Path(__file__).parent / "data" / "hf_rope" / "goldens.json").read_text())
STATIC = sorted(n for n, g in GOLDENS.items() if "rows" not in g)
BY_LENGTH = sorted(n for n, g in GOLDENS.items() if "rows" in g)     # longrope, dynamic: a row per seq_len


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


@pytest.mark.parametrize("name", STATIC)
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


@pytest.mark.parametrize("name", STATIC)
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


# ---------------------------------------------------------------------------------------------
# longrope and dynamic: one row per length L = max(position) + 1

def _length_op(g: dict):
    rp = g["rope_parameters"]
    if rp["rope_type"] == "longrope":
        args = [f"short_factor = [{', '.join(map(repr, rp['short_factor']))}]",
                f"long_factor = [{', '.join(map(repr, rp['long_factor']))}]",
                f"original_max_positions = {rp['original_max_position_embeddings']}", f"factor = {rp['factor']!r}"]
        if "attention_factor" in rp:
            args.append(f"attention_factor = {rp['attention_factor']!r}")
        scaling = f", scaling = longrope({', '.join(args)})"
    else:       # HF's dynamic reads max_position_embeddings as the original length
        scaling = (f", scaling = dynamic_ntk(factor = {rp['factor']!r}, "
                   f"original_max_positions = {g['max_position_embeddings']})")
    return _op(g["rope_theta"], g["dim"], scaling)


F32 = 2.0 ** -24       # the relative error of one correctly rounded float32 operation


def _golden_rtol(g: dict, seq_len: int) -> float:
    """A bound on |transformers' float32 row / the exact row - 1|. longrope: powf (<= 1 ulp, 2 F), the
    multiply by the factor and the reciprocal (F each). dynamic: powf and the reciprocal (3 F), plus the
    error of the float32 new base (tensor seq_len) carried by the exponent 2i/d < 1: growth rounded (F),
    its power's exponent d/(d-2) rounded to float32 (ln(growth) d/(d-2) F), powf (2 F), times base (F).
    The exponents 2i/d are exact in float32 (d a power of two). Measured: at most 1.5e-7."""
    rp, d = g["rope_parameters"], g["dim"]
    if rp["rope_type"] == "longrope":
        return 4 * F32
    s, L0 = rp["factor"], g["max_position_embeddings"]
    growth = s * max(seq_len, L0) / L0 - (s - 1)
    e = d / (d - 2)
    return 3 * F32 + (d - 2) / d * (math.log(growth) * e * F32 + 4 * F32)


def _check_rows(rows: FrequencyRows, g: dict, got_rows: dict) -> None:
    """ropegen's float64 rows (correctly rounded: 1e-16 off the exact) against transformers' rows."""
    for n, want in got_rows.items():
        np.testing.assert_allclose(rows.at(int(n)), want, rtol=_golden_rtol(g, int(n)), atol=0,
                                   err_msg=f"seq_len {n}")


@pytest.mark.parametrize("name", BY_LENGTH)
def test_length_rows_match_transformers(name):
    g = GOLDENS[name]
    op = _length_op(g)
    rows = FrequencyRows(op.plan)
    _check_rows(rows, g, g["rows"])
    # transformers' attention factor is Python float64 arithmetic (two logs, /, +, sqrt: a few ulps)
    assert math.isclose(op.plan.angles.magnitude, g["attention_factor"], rel_tol=2e-15)
    # the planned frequencies are those of lengths up to the original
    L0 = g["rope_parameters"].get("original_max_position_embeddings", g.get("max_position_embeddings"))
    assert np.array_equal(np.array(op.plan.angles.inv_freq), rows.at(L0))


@pytest.mark.parametrize("name", ["longrope", "dynamic_4"])
def test_a_wrong_length_rule_fails_the_goldens(name):
    """The comparison catches a key off by one: longrope's `>=` for HF's `>`, dynamic's L + 1."""
    g = GOLDENS[name]
    rows = FrequencyRows(_length_op(g).plan)
    wrong = ((lambda s, L: L >= s.original_max_positions) if name == "longrope" else
             (lambda s, L: max(int(L), s.original_max_positions) + 1))
    rows.row = dataclasses.replace(rows.row, length_key=wrong)
    with pytest.raises(AssertionError):
        _check_rows(rows, g, g["rows"])


def _exact_row(g: dict, length: int) -> list[float]:
    """The defining formula at 110 digits, independently of ropegen.exact, rounded once to float64
    through its decimal string (Python's float() rounds a decimal string correctly; 110 digits leave no
    double-rounding hazard short of a value within 1e-110 of a float64 midpoint)."""
    mp = mpmath.MPContext()
    mp.dps = 110
    rp, d, base = g["rope_parameters"], g["dim"], mp.mpf(g["rope_theta"])
    if rp["rope_type"] == "longrope":
        L0 = rp["original_max_position_embeddings"]
        ext = rp["long_factor"] if length > L0 else rp["short_factor"]
        vals = [1 / (mp.mpf(e) * mp.power(base, mp.mpf(2 * i) / d)) for i, e in enumerate(ext)]
    else:
        s, L0 = mp.mpf(rp["factor"]), g["max_position_embeddings"]
        new_base = base * (s * max(length, L0) / L0 - (s - 1)) ** (mp.mpf(d) / (d - 2))
        vals = [mp.power(new_base, -mp.mpf(2 * i) / d) for i in range(d // 2)]
    return [float(mp.nstr(v, 110, strip_zeros=False)) for v in vals]


@pytest.mark.parametrize("name", BY_LENGTH)
def test_length_rows_are_correctly_rounded(name):
    g = GOLDENS[name]
    rows = FrequencyRows(_length_op(g).plan)
    for n in [1, 255, 256, 257, 511, 512, 513, 2048, 4097, 100000, 2**31]:
        got = rows.at(n)
        assert got.dtype == np.float64
        assert got.tolist() == _exact_row(g, n), f"length {n}"


@pytest.mark.parametrize("name", BY_LENGTH)
def test_live_transformers_by_length(name):
    pytest.importorskip("torch", reason="transformers' rope functions need torch")
    pytest.importorskip("transformers", reason="transformers is not installed: the goldens stand in for it")
    import sys
    sys.path.insert(0, str(Path(__file__).parent / "data" / "hf_rope"))
    from make_goldens import live_rows
    g = GOLDENS[name]
    rows = FrequencyRows(_length_op(g).plan)
    seq_lens = [1, 256, 257, 512, 513, 2048, 100000]
    args = (g["rope_theta"], g["dim"], g["max_position_embeddings"], g["rope_parameters"], seq_lens)
    # dynamic: the tensor seq_len (float32 new base) and a Python int (float64 new base); longrope: an int
    for as_int in (False, True):
        live, attention = live_rows(*args, as_int=as_int)
        _check_rows(rows, g, dict(zip(seq_lens, live)))
        assert math.isclose(rows.plan.angles.magnitude, attention, rel_tol=2e-15)


@pytest.mark.parametrize("name,row,other", [("longrope", "257", "256"), ("longrope_attention_factor", "257", "256"),
                                            ("dynamic_2", "2048", "512"), ("dynamic_4", "2048", "512")])
def test_c_backend_rotates_with_the_length_row(name, row, other):
    """op.run on C at positions whose max + 1 is the golden row's seq_len (beyond the original length)
    against a float64 rotation with transformers' row: the tolerance is that row's own float32 error
    carried to the largest angle, plus float32 data and arithmetic. The original-length row must miss."""
    g = GOLDENS[name]
    op = _length_op(g)
    L = int(row)
    pos = np.array([0, 1, 3, L // 2, L - 2, L - 1], np.int64)
    q = np.random.default_rng(1).standard_normal((pos.size, 2, g["dim"])).astype(np.float32)
    h = g["dim"] // 2
    x1, x2 = q[..., :h].astype(np.float64), q[..., h:].astype(np.float64)
    m = g["attention_factor"]

    def rotate(inv):
        ang = pos[:, None] * np.asarray(inv)[None, :]
        cos, sin = np.cos(ang)[:, None] * m, np.sin(ang)[:, None] * m
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    angle_err = (L - 1) * max(g["rows"][row]) * _golden_rtol(g, L)
    atol = m * float(np.hypot(x1, x2).max()) * angle_err + 4e-6
    got = op.run(q, pos, backend="c")
    np.testing.assert_allclose(got, rotate(g["rows"][row]), atol=atol, rtol=0)
    assert np.abs(got - rotate(g["rows"][other])).max() > 100 * atol
    # and against ropegen's own row for L: float32 data and arithmetic only
    np.testing.assert_allclose(got, rotate(FrequencyRows(op.plan).at(L)), atol=4e-6, rtol=0)


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
