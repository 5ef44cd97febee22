"""The forms of rope's settings, one row each: scaling forms, position forms and angle forms.

A row says how the spec writes the form (its word and arguments with defaults), validates it (the
checks and diagnostics, same codes everywhere), builds its IR, and names what later stages do with
it: for a scaling its planned frequencies (exact arithmetic, ropegen/exact.py) and ggml parameters,
for every form the name of its formula in the float64 reference (ops/rope/reference.py) and, for
positions, of what it draws in ops/rope/inputs.py. The checker, the planner, the reference and the
input maker find a form by its row. A new scaling form is its IR record and its row here plus its
reference formula; a new position form also needs its ir.PositionKind member and, if it has inputs
of its own, a draw function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from ropegen import exact, ir
from ropegen.ops.rope import angles as plan_angles
from ropegen.ops.rope.tables import check_table_angles
from ropegen.spec import ast as A
from ropegen.spec.diagnostics import did_you_mean


# =============================================================================================
# scaling forms: `angles = computed(..., scaling = FORM(...))`

# the IR records of the scaling forms (the IR names them ir.NoScaling, ir.LinearScaling, ...)

@dataclass(frozen=True)
class NoScaling:
    pass


@dataclass(frozen=True)
class LinearScaling:
    factor: float


@dataclass(frozen=True)
class Llama3Scaling:
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_positions: int


@dataclass(frozen=True)
class GgmlYarnScaling:
    """ggml_rope_ext's parameters beyond freq_base (YaRN in ggml's own form)."""

    freq_scale: float
    ext_factor: float
    attn_factor: float
    beta_fast: float
    beta_slow: float
    n_ctx_orig: int


@dataclass(frozen=True)
class Arg:
    name: str
    default: float | None = None    # None: the argument is required
    integer: bool = False
    positive: bool = True           # else: must not be negative


@dataclass(frozen=True)
class ScalingForm:
    word: str
    ir_type: type
    args: tuple[Arg, ...]
    # (checker, call node, argument nodes, argument values) -> IR; validates across arguments
    build: Callable[..., "Scaling"]
    # planner, exact: (base inverse frequencies, scaling, dims, base) -> (frequencies, magnitude gain)
    frequencies: Callable[..., tuple[list, exact.Real]]
    # planner, angle_numerics = ggml: (scaling, dims, base) -> (freq_scale, ext_factor, attn_factor,
    # corr dims); None: ggml's numerics cannot express the form (C030)
    ggml: Callable[..., tuple] | None
    reference: str                  # its frequency formula in ops/rope/reference.py
    ggml_reference: str | None      # its ggml parameters in ops/rope/reference.py


def _llama3(cx, v: A.Call, nodes: dict, vals: dict) -> Llama3Scaling:
    if vals["high_freq_factor"] < vals["low_freq_factor"]:
        cx.fail("C029", "high_freq_factor must be at least low_freq_factor", v.loc)
    return Llama3Scaling(vals["factor"], vals["low_freq_factor"], vals["high_freq_factor"],
                            int(vals["original_max_positions"]))


def _llama3_frequencies(inv: list, s: Llama3Scaling, dim: int, base: float):
    """Llama-3.1 wavelength bands (HF `_compute_llama3_parameters`), in exact arithmetic."""
    factor, lo_f, hi_f = exact.real(s.factor), exact.real(s.low_freq_factor), exact.real(s.high_freq_factor)
    old = exact.real(s.original_max_positions)
    lo_wl, hi_wl = old / lo_f, old / hi_f
    out = []
    for f in inv:
        w = 2 * exact.pi() / f
        if w < hi_wl:
            out.append(f)
        elif w > lo_wl:
            out.append(f / factor)
        else:
            sigma = 0 if hi_f == lo_f else (old / w - lo_f) / (hi_f - lo_f)
            out.append((1 - sigma) * f / factor + sigma * f)
    return out, exact.real(1)


def _yarn(cx, v: A.Call, nodes: dict, vals: dict) -> GgmlYarnScaling:
    fs = vals["freq_scale"]
    if fs > 1:
        # legal (it compresses the context), but almost always the YaRN factor written by mistake
        cx.warn("C038", f"freq_scale {nodes['freq_scale'].text} is above 1: ggml's freq_scale is "
                "1/factor, so this shortens wavelengths", nodes["freq_scale"].loc,
                f"for a {fs:g}x context extension write freq_scale = {1 / fs:.6g}")
    return GgmlYarnScaling(vals["freq_scale"], vals["ext_factor"], vals["attn_factor"],
                              vals["beta_fast"], vals["beta_slow"], int(vals["n_ctx_orig"]))


def _yarn_frequencies(inv: list, s: GgmlYarnScaling, dim: int, base: float):
    """ggml's YaRN blend as real arithmetic: inv * (fs (1 - ramp) + ramp), and its magnitude factor."""
    low, high = plan_angles.ggml_corr_dims(dim, s.n_ctx_orig, base, s.beta_fast, s.beta_slow)
    low_r, span = exact.real(low), max(exact.real("0.001"), exact.real(high) - exact.real(low))
    fs, ext = exact.real(s.freq_scale), exact.real(s.ext_factor)
    out = []
    for c, f in enumerate(inv):
        ramp = (1 - min(exact.real(1), max(exact.real(0), (c - low_r) / span))) * ext
        out.append(f * (fs * (1 - ramp) + ramp))
    gain = exact.real(s.attn_factor)
    if s.ext_factor != 0:
        gain *= 1 + exact.real("0.1") * exact.log(1 / fs)
    return out, gain


def _yarn_ggml(s: GgmlYarnScaling, dim: int, base: float) -> tuple:
    corr = plan_angles.ggml_corr_dims(dim, s.n_ctx_orig, base, s.beta_fast, s.beta_slow)
    return s.freq_scale, s.ext_factor, s.attn_factor, corr


SCALINGS: tuple[ScalingForm, ...] = (
    ScalingForm("none", NoScaling, (), build=lambda cx, v, nodes, vals: NoScaling(),
                frequencies=lambda inv, s, dim, base: (inv, exact.real(1)),
                ggml=lambda s, dim, base: (1.0, 0.0, 1.0, (0.0, 0.0)),
                reference="unscaled", ggml_reference="ggml_unscaled"),
    ScalingForm("linear", LinearScaling, (Arg("factor"),),
                build=lambda cx, v, nodes, vals: LinearScaling(vals["factor"]),
                frequencies=lambda inv, s, dim, base: ([f / exact.real(s.factor) for f in inv], exact.real(1)),
                ggml=None, reference="linear_scaled", ggml_reference=None),
    ScalingForm("llama3", Llama3Scaling,
                (Arg("factor"), Arg("low_freq_factor"), Arg("high_freq_factor"),
                 Arg("original_max_positions", integer=True)),
                build=_llama3, frequencies=_llama3_frequencies, ggml=None,
                reference="llama3_scaled", ggml_reference=None),
    # llama.cpp's default ext_factor is -1, "1 for YaRN models, else 0": writing ggml_yarn means YaRN.
    ScalingForm("ggml_yarn", GgmlYarnScaling,
                (Arg("freq_scale"), Arg("ext_factor", 1.0, positive=False), Arg("attn_factor", 1.0),
                 Arg("beta_fast", 32.0), Arg("beta_slow", 1.0), Arg("n_ctx_orig", integer=True)),
                build=_yarn, frequencies=_yarn_frequencies, ggml=_yarn_ggml,
                reference="yarn_scaled", ggml_reference="ggml_yarn"),
)
Scaling = Union[tuple(f.ir_type for f in SCALINGS)]
IR_NAMES = frozenset([f.ir_type.__name__ for f in SCALINGS] + ["Scaling"])   # what `ir.` re-exports
_SCALING_BY_WORD = {f.word: f for f in SCALINGS}
_SCALING_BY_TYPE = {f.ir_type: f for f in SCALINGS}


def scaling_of(s: Scaling) -> ScalingForm:
    return _SCALING_BY_TYPE[type(s)]


def check_scaling(cx, v: A.Value) -> Scaling:
    form = _SCALING_BY_WORD.get(getattr(v, "name", None))
    if isinstance(v, A.Word) and form is not None and not form.args:
        return form.build(cx, v, {}, {})     # a form without arguments may be written bare
    if not isinstance(v, (A.Word, A.Call)):
        cx.fail("C008", "scaling must be a word or a call such as linear(factor = 2)", v.loc)
    if not isinstance(v, A.Call) or form is None:
        cx.fail("C009", f"unknown scaling '{v.name}'", v.loc, did_you_mean(v.name, _SCALING_BY_WORD))
    names = tuple(a.name for a in form.args)
    nodes = cx.call_args(v, names, tuple(a.name for a in form.args if a.default is None))
    vals = {}
    for a in form.args:
        if a.name not in nodes:
            vals[a.name] = a.default
            continue
        vals[a.name] = cx.number(nodes[a.name], a.name, integer=a.integer, positive=a.positive,
                                 nonneg=not a.positive)
    return form.build(cx, v, nodes, vals)


# =============================================================================================
# position forms: `positions = ...`

@dataclass(frozen=True)
class PositionForm:
    kind: ir.PositionKind
    word: str | None         # the spec word; None: no word of its own (no setting, or an input's name)
    bare: bool               # may be written as a bare word (else only as a call)
    synopsis: str | None     # how the hints list it
    args: tuple[str, ...]
    required: tuple[str, ...]
    # (checker, row, value, first rotated tensor, sequences input) -> IR
    check: Callable[..., ir.Positions] | None
    per_token: bool          # no positions: table rows are tokens, and nothing to compute angles from
    reference: str           # its position streams in ops/rope/reference.py
    inputs: str | None       # what it draws in ops/rope/inputs.py
    explain: Callable[[ir.Positions], str]


def batch_vector(cx, v: A.Value, first: ir.Tensor, what: str) -> str:
    t = cx.ref(v, what)
    b = first.role_dim(ir.Role.BATCH)
    if b is None:
        cx.fail("C016", f"{what} needs rotated tensors with a 'batch' dimension", v.loc)
    if t.dtype.is_float or len(t.axes) != 1 or t.axes[0].size != b.size:
        cx.fail("C016", f"{what} '{t.name}' must be an integer tensor [{b.size}]", t.loc)
    return t.name


def _ids(cx, row, v: A.Word, first: ir.Tensor, sequences: str | None) -> ir.Positions:
    t = cx.ref(v, "positions")
    if t.dtype.name not in ("i32", "i64"):
        cx.fail("C017", f"positions '{t.name}' must be i32 or i64, not {t.dtype.name}", t.loc)
    want = [d.size for d in first.token_dims]
    got = [a.size for a in t.axes]
    if got != want:
        cx.fail("C016", f"positions '{t.name}' has shape [{', '.join(map(str, got))}]; "
                f"expected the token dims [{', '.join(map(str, want))}]", t.loc)
    return ir.Positions(row.kind, ids=t.name)


def _in_sequence(cx, row, v, first: ir.Tensor, sequences: str | None) -> ir.Positions:
    if isinstance(v, A.Call) and v.args:
        a = v.args[0]
        what = f"'{a.name}'" if a.name else "a positional argument"
        cx.fail("C010", f"in_sequence takes no arguments, not {what}", a.loc,
                "write `positions = in_sequence` with `sequences = SEQLEN`; positions from an offset "
                "are arange(start = ...)")
    if sequences is None:
        cx.fail("C030", "positions = in_sequence needs `sequences = SEQLEN`", v.loc)
    return ir.Positions(row.kind)


def _start_pad(cx, args: dict, first: ir.Tensor) -> tuple[ir.Scalar, str | None]:
    start = cx.scalar(args["start"], "start") if "start" in args else 0
    pad = batch_vector(cx, args["pad"], first, "pad") if "pad" in args else None
    return start, pad


def _arange(cx, row, v: A.Call, first: ir.Tensor, sequences: str | None) -> ir.Positions:
    start, pad = _start_pad(cx, cx.call_args(v, row.args, row.required), first)
    if pad is not None and first.role_dim(ir.Role.SEQ) is None:
        cx.fail("C016", "arange(pad=...) needs [batch, seq] token dims", v.loc)
    return ir.Positions(row.kind, start=start, pad=pad)


def _glm2d(cx, row, v: A.Call, first: ir.Tensor, sequences: str | None) -> ir.Positions:
    if [d.role for d in first.token_dims] != [ir.Role.BATCH, ir.Role.SEQ]:
        cx.fail("C016", "glm2d positions need rotated tensors laid out [batch, seq, ...]", v.loc)
    args = cx.call_args(v, row.args, row.required)
    start, pad = _start_pad(cx, args, first)
    first_seqlen = cx.scalar(args["first_seqlen"], "first_seqlen")
    return ir.Positions(row.kind, start=start, pad=pad, first_seqlen=first_seqlen, streams=2)


P = ir.PositionKind
POSITIONS: tuple[PositionForm, ...] = (
    PositionForm(P.TOKEN, None, bare=False, synopsis=None, args=(), required=(), check=None, per_token=True,
                 reference="token_positions", inputs=None,
                 explain=lambda pos: "none: tables hold one row per token"),
    PositionForm(P.IDS, None, bare=True, synopsis="an integer input", args=(), required=(), check=_ids,
                 per_token=False, reference="id_positions", inputs="draw_ids",
                 explain=lambda pos: f"gathered from '{pos.ids}'"),
    PositionForm(P.IN_SEQUENCE, "in_sequence", bare=True, synopsis="in_sequence", args=(), required=(),
                 check=_in_sequence, per_token=False, reference="in_sequence_positions", inputs=None,
                 explain=lambda pos: "index of each token inside its sequence"),
    PositionForm(P.ARANGE, "arange", bare=False, synopsis="arange(start=, pad=)", args=("start", "pad"),
                 required=(), check=_arange, per_token=False, reference="arange_positions", inputs="draw_arange",
                 explain=lambda pos: f"start ({pos.start}) + s - pad ({pos.pad or 0})[b]"),
    PositionForm(P.GLM2D, "glm2d", bare=False, synopsis="glm2d(start=, pad=, first_seqlen=)",
                 args=("start", "pad", "first_seqlen"), required=("first_seqlen",), check=_glm2d,
                 per_token=False, reference="glm2d_positions", inputs="draw_glm2d",
                 explain=lambda pos: f"GLM 2-D: pos0/pos1 from start={pos.start}, pad={pos.pad or 0}, "
                                     f"first_seqlen={pos.first_seqlen}"),
)
_POSITION_BY_KIND = {f.kind: f for f in POSITIONS}
POSITION_WORDS = tuple(f.word for f in POSITIONS if f.word)
POSITION_SYNOPSIS = ", ".join(f.synopsis for f in POSITIONS if f.synopsis)
ABSENT_POSITIONS = next(f for f in POSITIONS if f.check is None)   # the form when `positions` is not set


def position_of(pos: ir.Positions) -> PositionForm:
    return _POSITION_BY_KIND[pos.kind]


def position_written(v: A.Word | A.Call) -> PositionForm | None:
    """The form a positions value is written in; None when no form is written so."""
    named = [f for f in POSITIONS if f.word == v.name and (f.bare or isinstance(v, A.Call))]
    if not named and isinstance(v, A.Word):   # any other word names the input holding the positions
        named = [f for f in POSITIONS if f.word is None and f.bare]
    return named[0] if named else None


# =============================================================================================
# angle forms: `angles = table(...)` or `angles = computed(...)`

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
    scaling = check_scaling(cx, args["scaling"]) if "scaling" in args else SCALINGS[0].ir_type()
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
    return ir.ComputedAngles(base, scaling, ff, magnitude)


ANGLES: tuple[AngleForm, ...] = (
    AngleForm("table", ir.TableAngles, "table(cos=, sin=)", args=("cos", "sin"), required=("cos", "sin"),
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
