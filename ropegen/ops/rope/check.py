"""Syntax -> IR for `rope`: outputs, rotated tensors, pairing, rotary_dim, sequences, and the
settings whose forms are rows of forms/ (positions, angles and their scaling)."""
from __future__ import annotations

from ropegen import ir
from ropegen.ir.dtypes import QUANT_NAMES
from ropegen.ops import quant
from ropegen.ops.rope import forms
from ropegen.ops.rope.head_norm import check_norm
from ropegen.spec import ast as A
from ropegen.spec.diagnostics import did_you_mean
from ropegen.spec.tensors import ROLE_NAMES

SETTINGS = ("pairing", "rotary_dim", "rotary", "positions", "angles", "sequences", "direction",
            "compute", "angle_numerics", "trig", "dtype", "quant_scale")
PAIR_WORDS = ("neox", "gptj", "block", "glm2d")


def check(cx) -> ir.RopeOp:
    """`cx` is the generic checker (spec.sema.OperatorChecker) with the inputs already read."""
    node = cx.node
    outputs = _outputs(cx)
    rotated = [cx.tensors[o.source] for o in outputs]
    first = rotated[0]
    for t in rotated:
        _check_rotated(cx, t)
    for t in rotated[1:]:
        if t.dtype != first.dtype:
            cx.fail("C031", f"'{t.name}' is {t.dtype.name} but '{first.name}' is {first.dtype.name}",
                    t.loc, "rotated tensors share one storage type")
        if [d.size for d in t.token_dims] != [d.size for d in first.token_dims] or \
                [d.role for d in t.token_dims] != [d.role for d in first.token_dims]:
            cx.fail("C015", f"'{t.name}' has other token dimensions than '{first.name}'", t.loc,
                    "rotated tensors must agree on batch/seq/tokens")
        if t.role_dim(ir.Role.HEAD_DIM).size != first.role_dim(ir.Role.HEAD_DIM).size:
            cx.fail("C028", f"'{t.name}' has another head_dim than '{first.name}'", t.loc)
    head_dim = first.role_dim(ir.Role.HEAD_DIM).size
    assert isinstance(head_dim, int)

    pairing = _pairing(cx)
    rotary_dim, rotary_start = _rotary_dim(cx, head_dim, pairing)
    sequences, indptr = _sequences(cx, first)
    positions = _positions(cx, first, sequences)
    angles = _angles(cx, first, pairing, rotary_dim, positions, head_dim)
    direction = ir.Direction(cx.choice("direction", ("forward", "backward"), "forward"))
    compute = ir.Compute(cx.choice("compute", ("f32", "f64", "storage"), "f32"))
    numerics = ir.AngleNumerics(cx.choice("angle_numerics", ("exact", "ggml"), "exact"))
    trig = ir.Trig(cx.choice("trig", ("accurate", "fast"), "accurate"))
    form = forms.angles_of(angles)
    numerics_form = forms.numerics_of(numerics)
    if numerics_form.check is not None:
        numerics_form.check(cx, form, angles)
    if (pairing.kind is ir.PairKind.GLM2D) != (positions.kind is ir.PositionKind.GLM2D):
        where = cx.settings["positions"].loc if "positions" in cx.settings else cx.settings["pairing"].loc
        cx.fail("C030", "glm2d pairing and glm2d positions go together: the two halves rotate with the "
                "two position streams", where,
                "use `pairing = glm2d(...)` with `positions = glm2d(...)`")
    if positions.offsets and not indptr:     # (with an indptr [N + 1] the count is checked per call)
        off, seq = cx.tensors[positions.offsets], cx.tensors[sequences]
        if off.axes[0].size != seq.axes[0].size:
            cx.fail("C016", f"in_sequence start '{off.name}' must have one entry per sequence: "
                    f"[{seq.axes[0].size}], as '{seq.name}'", off.loc)
    if positions.kind is ir.PositionKind.MROPE:
        where = cx.settings["positions"].loc
        if pairing.kind not in (ir.PairKind.NEOX, ir.PairKind.GPTJ):
            cx.fail("C030", f"mrope positions split the pairs of neox or gptj pairing, not {pairing.kind.value}", where)
        if sum(positions.sections) != rotary_dim // 2:
            cx.fail("C018", f"mrope sections {list(positions.sections)} sum to {sum(positions.sections)}; "
                    f"the rotation has rotary_dim/2 = {rotary_dim // 2} pairs", where)
    if pairing.kind is ir.PairKind.BLOCK and not form.tables:
        cx.fail("C030", "block pairing reads cos/sin per element and needs `angles = table(...)`",
                cx.settings["pairing"].loc)
    out_dtype = quant.check_dtype(cx, None)
    if out_dtype is not None and not out_dtype.quantized:
        cx.fail("C030", f"rope's dtype setting names an fp8 output type ({', '.join(QUANT_NAMES)}); otherwise "
                "each output has its source's type", cx.settings["dtype"].loc)
    scales = quant.check_scales(cx, out_dtype, [(o.name, (1, cx.tensors[o.source].role_dim(ir.Role.HEADS).size))
                                                for o in outputs])
    return ir.RopeOp(node.name, tuple(cx.tensors.values()), outputs, pairing, rotary_dim,
                     positions, angles, sequences, direction, compute, numerics, trig, node.loc, rotary_start,
                     indptr, out_dtype, scales)


def _outputs(cx) -> tuple[ir.RopeOutput, ...]:
    outs = []
    names: set[str] = set()
    for o in cx.node.outputs:
        if o.name in names or o.name in cx.tensors:
            cx.fail("C003", f"'{o.name}' is declared twice", o.loc)
        names.add(o.name)
        v = o.value
        if not (isinstance(v, A.Call) and v.name in ("rotate", "copy") and len(v.args) == 1
                and v.args[0].name is None):
            cx.fail("C025", f"output '{o.name}' must be `rotate(INPUT)` or `copy(INPUT)`",
                    (v.loc if v is not None else o.loc),
                    f"e.g. `out {o.name} = rotate(x)` or `rotate(rmsnorm(x, weight = w))`")
        inner, norm = v.args[0].value, None
        if isinstance(inner, A.Call) and inner.name == "rmsnorm":
            if v.name != "rotate":
                cx.fail("C025", "rmsnorm(...) is fused into rotate(...) only", inner.loc,
                        "a normalized copy is an rmsnorm operator")
            src, norm = check_norm(cx, inner)
        else:
            src = cx.ref(inner, "the rotated tensor")
        outs.append(ir.RopeOutput(o.name, src.name, v.name == "rotate", norm))
    if not outs:
        cx.fail("C025", f"rope '{cx.node.name}' declares no output", cx.node.name_loc,
                "add e.g. `out y = rotate(x)`")
    return tuple(outs)


def _check_rotated(cx, t: ir.Tensor) -> None:
    if not t.dtype.is_float:
        cx.fail("C031", f"'{t.name}' must have a float dtype to be rotated", t.loc)
    for role in (ir.Role.HEADS, ir.Role.HEAD_DIM):
        d = t.role_dim(role)
        if d is None:
            cx.fail("C013", f"'{t.name}' needs a dimension labelled '{role.value}'", t.loc,
                    "label its axes, e.g. [tokens=T, heads=32, head_dim=128]")
        if not isinstance(d.size, int):
            cx.fail("C027", f"'{role.value}' of '{t.name}' must be an integer, not '{d.size}'", t.loc)
    roles = {d.role for d in t.token_dims}
    if not roles:
        cx.fail("C013", f"'{t.name}' needs token dimensions: 'tokens', or 'batch' and 'seq'", t.loc)
    if ir.Role.TOKENS in roles and roles != {ir.Role.TOKENS}:
        cx.fail("C013", f"'{t.name}' mixes 'tokens' with 'batch'/'seq'", t.loc,
                "use tokens for packed layouts, batch and seq otherwise")
    if roles == {ir.Role.BATCH}:
        cx.fail("C013", f"'{t.name}' has 'batch' but no 'seq' dimension", t.loc)
    if roles == {ir.Role.SEQ}:
        cx.fail("C013", f"'{t.name}' has 'seq' but no 'batch' dimension", t.loc,
                "label a single token axis 'tokens'")
    unlabelled = [d for d in t.dims if d.role is None]
    if unlabelled:
        cx.fail("C013", f"every dimension of rotated '{t.name}' needs a label", t.loc,
                "labels: " + ", ".join(ROLE_NAMES))
    merged = [a for a in t.axes if len(a.parts) > 1]
    for a in merged:
        if [p.role for p in a.parts] != [ir.Role.HEADS, ir.Role.HEAD_DIM]:
            cx.fail("C013", f"'{t.name}': only (heads=H, head_dim=D) may be merged into one axis", t.loc)
    if t.dims[-1].role is not ir.Role.HEAD_DIM:
        cx.fail("C013", f"'{t.name}': head_dim must be the innermost (last) dimension", t.loc)


def _pairing(cx) -> ir.Pairing:
    s = cx.require("pairing")
    v = s.value
    if isinstance(v, A.Word) and v.name == "block":
        cx.fail("C011", "'block' needs the argument 'coeff'", v.loc, "e.g. block(coeff = 4)")
    if isinstance(v, A.Word) and v.name == "glm2d":
        return ir.Pairing(ir.PairKind.GLM2D, inner=ir.PairKind.GPTJ)
    if isinstance(v, A.Word):
        name = cx.word(v, "pairing", PAIR_WORDS)
        return ir.Pairing(ir.PairKind(name))
    if isinstance(v, A.Call) and v.name in ("neox", "gptj"):
        cx.fail("C008", f"'{v.name}' takes no arguments here", v.loc, f"write `pairing = {v.name}`")
    if isinstance(v, A.Call) and v.name == "block":
        args = cx.call_args(v, ("coeff",), ("coeff",), ("coeff",))
        coeff = cx.number(args["coeff"], "coeff", integer=True, positive=True)
        return ir.Pairing(ir.PairKind.BLOCK, coeff=int(coeff))
    if isinstance(v, A.Call) and v.name == "glm2d":
        args = cx.call_args(v, ("inner",), (), ("inner",))
        inner = ir.PairKind(cx.word(args["inner"], "inner pairing", ("neox", "gptj"))) \
            if "inner" in args else ir.PairKind.GPTJ
        return ir.Pairing(ir.PairKind.GLM2D, inner=inner)
    if not isinstance(v, (A.Call, A.Word)):
        cx.fail("C008", "pairing must be a word or a call such as block(coeff = 4)", v.loc,
                "neox, gptj, block(coeff=N), glm2d(inner=gptj)")
    name = v.name
    cx.fail("C009", f"unknown pairing '{name}'", v.loc,
            did_you_mean(name, PAIR_WORDS) or "neox, gptj, block(coeff=N), glm2d(inner=gptj)")


def _rotary_dim(cx, head_dim: int, pairing: ir.Pairing) -> tuple[int, int]:
    """(rotated dims, first rotated element): `rotary_dim = R` rotates [0, R), `rotary = [lo, hi]`
    rotates [lo, hi) (DeepSeek MLA's rope part at the end of its q head); the rest is copied."""
    if head_dim % 2:
        cx.fail("C014", f"head_dim {head_dim} is odd; rotation needs pairs", cx.node.name_loc)
    window = cx.setting("rotary")
    if window is not None:
        return _rotary_window(cx, window, head_dim, pairing)
    s = cx.setting("rotary_dim")
    if s is None:
        return head_dim, 0
    r = int(cx.number(s.value, "rotary_dim", integer=True, positive=True))
    step = 4 if pairing.kind is ir.PairKind.GLM2D else 2
    if r % step or r > head_dim:
        cx.fail("C014", f"rotary_dim {r} must be a multiple of {step} and at most head_dim {head_dim}",
                s.value.loc)
    if pairing.kind is ir.PairKind.BLOCK and r != head_dim:
        cx.fail("C030", "block pairing rotates whole heads; drop rotary_dim", s.loc,
                "partial rotation with ATB tables is done by splitting the tensor")
    return r, 0


def _rotary_window(cx, s, head_dim: int, pairing: ir.Pairing) -> tuple[int, int]:
    if cx.setting("rotary_dim") is not None:
        cx.fail("C010", "give either rotary_dim or rotary = [start, stop]", s.loc)
    v = s.value
    if not isinstance(v, A.ListValue) or len(v.items) != 2:
        cx.fail("C008", "rotary must be a list [start, stop] of the rotated elements", v.loc, "rotary = [128, 192]")
    lo, hi = (int(cx.number(x, "rotary", integer=True)) for x in v.items)
    if not 0 <= lo < hi <= head_dim or (hi - lo) % 2:
        cx.fail("C014", f"rotary [{lo}, {hi}] must be an even-length window inside head_dim {head_dim}", v.loc)
    if pairing.kind not in (ir.PairKind.NEOX, ir.PairKind.GPTJ):
        cx.fail("C030", f"a rotary window needs neox or gptj pairing, not {pairing.kind.value}", s.loc)
    return hi - lo, lo


def _sequences(cx, first: ir.Tensor) -> tuple[str | None, bool]:
    """(the sequences input, whether it is an indptr): `sequences = LENS` ([N] lengths, ATB's seqlen)
    or `sequences = indptr(I)` ([N + 1] offsets from 0 to the token count, FlashInfer's indptr)."""
    s = cx.setting("sequences")
    if s is None:
        return None, False
    v, indptr = s.value, False
    if isinstance(v, A.Call) and v.name == "indptr":
        if len(v.args) != 1 or v.args[0].name is not None:
            cx.fail("C010", "indptr takes the one input that holds the offsets", v.loc, "sequences = indptr(I)")
        v, indptr = v.args[0].value, True
    t = cx.ref(v, "sequences")
    if t.dtype.is_float or len(t.axes) != 1:
        cx.fail("C032", f"sequences '{t.name}' must be a 1-D integer tensor [batch]", t.loc)
    if [d.role for d in first.token_dims] != [ir.Role.TOKENS]:
        cx.fail("C032", "sequences = ... describes packed tokens; the rotated tensors need a 'tokens' dim",
                s.loc)
    return t.name, indptr


def _positions(cx, first: ir.Tensor, sequences: str | None) -> ir.Positions:
    s = cx.setting("positions")
    if s is None:
        return ir.Positions(forms.ABSENT_POSITIONS.kind)
    v = s.value
    if not isinstance(v, (A.Word, A.Call)):
        cx.fail("C008", "positions must name an integer input or be a form such as arange(...)", v.loc,
                forms.POSITION_SYNOPSIS)
    form = forms.position_written(v)
    if form is None:
        cx.fail("C009", f"unknown positions form '{v.name}'", v.loc,
                did_you_mean(v.name, forms.POSITION_WORDS) or forms.POSITION_SYNOPSIS)
    return form.check(cx, form, v, first, sequences)


def _angles(cx, first: ir.Tensor, pairing: ir.Pairing, rotary_dim: int, positions: ir.Positions,
            head_dim: int) -> ir.Angles:
    v = cx.require("angles").value
    if not isinstance(v, (A.Word, A.Call)):
        cx.fail("C008", "angles must be table(...) or computed(...)", v.loc)
    form = forms.angle_named(v.name)
    if not isinstance(v, A.Call) or form is None:
        cx.fail("C009", f"unknown angle source '{v.name}'", v.loc,
                did_you_mean(v.name, forms.ANGLE_WORDS) or " or ".join(f.synopsis for f in forms.ANGLES))
    args = cx.call_args(v, form.args, form.required, form.positional)
    return form.check(cx, v, args, first, pairing, rotary_dim, forms.position_of(positions), head_dim)
