"""Rope's angle forms (`angles = table(...)` or `computed(...)`) and angle numerics
(`angle_numerics = exact | ggml`), one row each."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ropegen import ir
from ropegen.ops.rope import angles as plan_angles
from ropegen.ops.rope.forms.position import position_of
from ropegen.ops.rope.forms.scaling import SCALINGS, check_scaling, scaling_of
from ropegen.ops.rope.tables import check_table_angles


@dataclass(frozen=True)
class AngleForm:
    word: str
    ir_type: type
    synopsis: str
    args: tuple[str, ...]
    required: tuple[str, ...]
    positional: tuple[str, ...]
    # (checker, call, argument nodes, first rotated, pairing, rotary_dim, position form row, head_dim) -> IR
    check: Callable[..., ir.Angles]
    tables: bool             # cos/sin come from input tables (per element), not from frequencies
    plan: Callable           # planner: (op, columns per stream) -> plan_angles.AnglesPlan
    reference: str           # its cos/sin in ops/rope/reference.py
    value_ranges: Callable[[ir.Angles], dict[str, tuple[float, float]]]   # inputs it reads: test value range


def _computed(cx, v, args, first, pairing, rotary_dim, position, head_dim) -> ir.ComputedAngles:
    base = cx.number(args["base"], "base", positive=True)
    if base == 1:
        cx.fail("C029", "base must not be 1 (every frequency would be 1)", args["base"].loc)
    n_pairs = rotary_dim // 4 if pairing.kind is ir.PairKind.GLM2D else rotary_dim // 2
    scaling = check_scaling(cx, args["scaling"], n_pairs) if "scaling" in args else SCALINGS[0].ir_type()
    ff = None
    if "freq_factors" in args:
        t = cx.ref(args["freq_factors"], "freq_factors")
        n = rotary_dim // 2
        if not t.dtype.is_float or [a.size for a in t.axes] != [n]:
            cx.fail("C018", f"freq_factors '{t.name}' must be a float tensor [{n}] (rotary_dim/2)", t.loc)
        if pairing.kind is ir.PairKind.GLM2D:
            cx.fail("C030", "freq_factors are not defined for glm2d pairing", args["freq_factors"].loc)
        ff = t.name
    magnitude = cx.number(args["magnitude"], "magnitude", positive=True) if "magnitude" in args else 1.0
    if position.per_token:
        cx.fail("C030", "computed angles need positions", v.loc,
                "add `positions = POS` (an integer input), arange(...), in_sequence or glm2d(...)")
    if scaling_of(scaling).length_key is not None and position.length_unit is None:
        cx.fail("C030", f"scaling {args['scaling'].name} needs the length of the call: positions from an input, "
                "arange(...), in_sequence or mrope(...)", args["scaling"].loc)
    return ir.ComputedAngles(base, scaling, ff, magnitude)


ANGLES: tuple[AngleForm, ...] = (
    AngleForm("table", ir.TableAngles, "table(cos=, sin=) or table(cos_sin=)", args=("cos", "sin", "cos_sin"),
              required=(),
              positional=("cos", "sin"), check=check_table_angles, tables=True,
              plan=lambda op, n_cols: plan_angles.plan_table(op, n_cols, position_of(op.positions).per_token),
              reference="table_cos_sin", value_ranges=lambda a: {a.cos: (-1.0, 1.0), a.sin: (-1.0, 1.0)}),
    AngleForm("computed", ir.ComputedAngles, "computed(base=, ...)",
              args=("base", "scaling", "freq_factors", "magnitude"), required=("base",), positional=(),
              check=_computed, tables=False,
              plan=lambda op, n_cols: plan_angles.plan_computed(op, n_cols, numerics_of(op.numerics),
                                                                scaling_of(op.angles.scaling)),
              reference="computed_cos_sin",
              value_ranges=lambda a: {a.freq_factors: (1.0, 4.0)} if a.freq_factors else {}),
)
ANGLE_WORDS = tuple(f.word for f in ANGLES)
_ANGLE_BY_WORD = {f.word: f for f in ANGLES}
_ANGLE_BY_TYPE = {f.ir_type: f for f in ANGLES}


def angles_of(a: ir.Angles) -> AngleForm:
    return _ANGLE_BY_TYPE[type(a)]


def angle_named(word: str) -> AngleForm | None:
    return _ANGLE_BY_WORD.get(word)



# =============================================================================================
# angle numerics: `angle_numerics = exact | ggml`, how computed angles are evaluated

@dataclass(frozen=True)
class NumericsForm:
    kind: ir.AngleNumerics
    check: Callable[..., None] | None   # (checker, angle form row, angles IR): what it cannot evaluate
    plan: Callable       # planner: (computed angles, columns, dims, scaling row) -> planned angles
    reference: str       # its cos/sin of one position stream in ops/rope/reference.py


def _ggml_check(cx, form: AngleForm, angles: ir.Angles) -> None:
    if form.tables:
        cx.fail("C030", "angle_numerics = ggml needs computed angles", cx.settings["angle_numerics"].loc,
                "with `angles = table(...)` the angles come from the tables")
    if scaling_of(angles.scaling).ggml is None:
        cx.fail("C030", "angle_numerics = ggml takes scaling none or ggml_yarn(...)",
                cx.settings["angle_numerics"].loc,
                "ggml expresses linear scaling as ggml_yarn(freq_scale = 1/factor, ...)")


NUMERICS: tuple[NumericsForm, ...] = (
    NumericsForm(ir.AngleNumerics.EXACT, check=None, plan=plan_angles.plan_exact, reference="exact_cos_sin"),
    NumericsForm(ir.AngleNumerics.GGML, check=_ggml_check, plan=plan_angles.plan_ggml,
                 reference="_ggml_cos_sin"),
)
_NUMERICS_BY_KIND = {f.kind: f for f in NUMERICS}


def numerics_of(kind: ir.AngleNumerics) -> NumericsForm:
    return _NUMERICS_BY_KIND[kind]
