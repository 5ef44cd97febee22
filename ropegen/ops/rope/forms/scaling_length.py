"""The scaling forms whose frequencies depend on the length of the sequence a call rotates:
LongRoPE (Phi-3/Phi-4: a short and a long factor set) and Hugging Face's dynamic NTK (a base
recomputed from the length). Their IR records, checks and exact frequency formulas; their rows are
in scaling.py beside the static forms.

The length of a call (or of each packed sequence) is max(position) + 1, as Hugging Face's
`dynamic_rope_update` takes it. A form maps a length to a key (`length_key`): the frequencies are a
function of the key alone, evaluated here in exact arithmetic and rounded once (ropegen/exact.py),
so a run-time row is as correctly rounded as a planned one. ops/rope/frequency_rows.py evaluates and
caches them per call; the planned `inv_freq` of these forms is the row of lengths up to
original_max_positions.
"""
from __future__ import annotations

from dataclasses import dataclass

from ropegen import exact
from ropegen.spec import ast as A


@dataclass(frozen=True)
class LongRopeScaling:
    """inv_c = base^(-2c/d) / ext_c, ext = long_factor when the length exceeds
    original_max_positions, else short_factor; magnitude attention_factor, else
    sqrt(1 + ln(factor) / ln(original_max_positions)) (1 when factor <= 1 or not given)."""

    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_positions: int
    factor: float | None
    attention_factor: float | None


@dataclass(frozen=True)
class DynamicNtkScaling:
    """HF's dynamic NTK: base' = base * (factor * L / L0 - (factor - 1))^(d / (d - 2)) with
    L = max(length, L0), L0 = original_max_positions (HF's max_position_embeddings)."""

    factor: float
    original_max_positions: int


# ---------------------------------------------------------------------------------------------
# LongRoPE

def build_longrope(cx, v: A.Call, nodes: dict, vals: dict, n_pairs: int) -> LongRopeScaling:
    for name in ("short_factor", "long_factor"):
        got = vals[name]
        if len(got) != n_pairs:
            cx.fail("C018", f"{name} has {len(got)} factors; expected {n_pairs}, one per rotated pair "
                    "(rotary_dim / 2)", nodes[name].loc)
    return LongRopeScaling(tuple(vals["short_factor"]), tuple(vals["long_factor"]),
                           int(vals["original_max_positions"]), vals["factor"], vals["attention_factor"])


def longrope_gain(s: LongRopeScaling) -> exact.Real:
    if s.attention_factor is not None:
        return exact.real(s.attention_factor)
    if s.factor is None or s.factor <= 1:
        return exact.real(1)
    return exact.sqrt(1 + exact.log(s.factor) / exact.log(s.original_max_positions))


def longrope_key(s: LongRopeScaling, length: int) -> bool:
    """True: the long factors (HF: `seq_len > original_max_position_embeddings`)."""
    return length > s.original_max_positions


def longrope_at(inv: list, s: LongRopeScaling, dim: int, base: float, long: bool) -> list:
    ext = s.long_factor if long else s.short_factor
    return [f / exact.real(e) for f, e in zip(inv, ext)]


def longrope_frequencies(inv: list, s: LongRopeScaling, dim: int, base: float):
    return longrope_at(inv, s, dim, base, False), longrope_gain(s)


def longrope_describe(s: LongRopeScaling, dim: int, base: float) -> str:
    rule = ("attention_factor" if s.attention_factor is not None else
            "sqrt(1 + ln(factor) / ln(original_max_positions))" if s.factor and s.factor > 1 else "1")
    return (f"longrope: short_factor while max(position) + 1 <= {s.original_max_positions}, long_factor beyond "
            f"(per call; per sequence when packed); magnitude {float(longrope_gain(s))!r} = {rule}")


def longrope_at_length(s: LongRopeScaling, dim: int, base: float, length: int) -> str:
    return f"{'long' if longrope_key(s, length) else 'short'}_factor"


# ---------------------------------------------------------------------------------------------
# dynamic NTK

def build_dynamic(cx, v: A.Call, nodes: dict, vals: dict, n_pairs: int) -> DynamicNtkScaling:
    if n_pairs < 2:
        cx.fail("C029", "dynamic_ntk needs a rotary_dim above 2 (its exponent is d / (d - 2))", v.loc)
    return DynamicNtkScaling(vals["factor"], int(vals["original_max_positions"]))


def dynamic_key(s: DynamicNtkScaling, length: int) -> int:
    """The L of the formula: the length, never below original_max_positions."""
    return max(int(length), s.original_max_positions)


def dynamic_growth(s: DynamicNtkScaling, L: int) -> exact.Real:
    """factor * L / L0 - (factor - 1), exactly: base' = base * growth^(d / (d - 2))."""
    factor = exact.real(s.factor)
    return factor * exact.real(L) / exact.real(s.original_max_positions) - (factor - 1)


def dynamic_at(inv: list, s: DynamicNtkScaling, dim: int, base: float, L: int) -> list:
    """inv_c = base'^(-2c/d) = base^(-2c/d) * growth^(-2c/(d-2)), exactly."""
    g = dynamic_growth(s, L)
    if g == 1:
        return list(inv)
    return [f * exact.power(g, -2 * c, dim - 2) for c, f in enumerate(inv)]


def dynamic_frequencies(inv: list, s: DynamicNtkScaling, dim: int, base: float):
    return dynamic_at(inv, s, dim, base, s.original_max_positions), exact.real(1)


def dynamic_base(s: DynamicNtkScaling, dim: int, base: float, length: int) -> float:
    g = dynamic_growth(s, dynamic_key(s, length))
    return exact.f64(exact.real(base) * exact.power(g, dim, dim - 2))


def dynamic_describe(s: DynamicNtkScaling, dim: int, base: float) -> str:
    L0 = s.original_max_positions
    return (f"dynamic_ntk (factor {s.factor:g}): base' = base * (factor * L / {L0} - (factor - 1))^({dim}/{dim - 2}), "
            f"L = max(max(position) + 1, {L0}) per call (per sequence when packed); base {base:g} up to length {L0}, "
            f"{dynamic_base(s, dim, base, 2 * L0):.17g} at {2 * L0}")


def dynamic_at_length(s: DynamicNtkScaling, dim: int, base: float, length: int) -> str:
    return f"base {dynamic_base(s, dim, base, length):.17g} (L = {dynamic_key(s, length)})"
