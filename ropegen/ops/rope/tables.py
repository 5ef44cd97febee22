"""The shape rules of cos/sin tables (`angles = table(cos=, sin=)`): dtypes, rows by token or by
position, and the widths each pairing can read (HF, ATB and GLM conventions)."""
from __future__ import annotations

from ropegen import ir
from ropegen.spec.diagnostics import Loc
from ropegen.spec.limits import MAX_TABLE_WIDTH


def check_table_angles(cx, v, args, first, pairing, rotary_dim, position, head_dim) -> ir.TableAngles:
    """The `table` angle form (its row in forms/angle.py): two different inputs of a valid table shape,
    or one fused cache `cos_sin = C` ([ROWS, 2W]: cos in columns 0..W-1, sin in W..2W-1, as vLLM's and
    FlashInfer's cos_sin_cache). `position` is the row of the operator's position form."""
    if "cos_sin" in args:
        if "cos" in args or "sin" in args:
            cx.fail("C010", "give either cos_sin or cos and sin", v.loc)
        return _fused(cx, v, cx.ref(args["cos_sin"], "cos_sin"), first, pairing, rotary_dim, position, head_dim)
    for key in ("cos", "sin"):
        if key not in args:
            cx.fail("C011", f"table needs the argument '{key}'", v.loc, "table(cos = COS, sin = SIN) or "
                    "table(cos_sin = CACHE)")
    cos = cx.ref(args["cos"], "cos")
    sin = cx.ref(args["sin"], "sin")
    if cos.name == sin.name:
        cx.fail("C018", "cos and sin must be two different inputs", args["sin"].loc,
                "one tensor holding both is table(cos_sin = ...)")
    check_tables(cx, cos, sin, first, pairing, rotary_dim, position.per_token, head_dim, v.loc)
    return ir.TableAngles(cos.name, sin.name)


def _fused(cx, v, t: ir.Tensor, first, pairing, rotary_dim, position, head_dim) -> ir.TableAngles:
    full = t.axes[-1].size if t.axes else None
    if position.per_token:
        cx.fail("C018", f"a cos_sin cache is indexed by position; '{t.name}' needs `positions = ...`", v.loc)
    if len(t.axes) != 2 or not isinstance(full, int) or full % 2:
        cx.fail("C018", f"cos_sin cache '{t.name}' must be [ROWS, 2W] (cos in the first W columns, sin in the "
                "last W)", t.loc)
    check_tables(cx, t, t, first, pairing, rotary_dim, False, head_dim, v.loc, width=full // 2)
    return ir.TableAngles(t.name, t.name, sin_column=full // 2)


def check_tables(cx, cos: ir.Tensor, sin: ir.Tensor, first: ir.Tensor, pairing: ir.Pairing,
                 rotary_dim: int, per_token: bool, head_dim: int, loc: Loc, width: int | None = None) -> None:
    """`per_token`: the operator has no positions, so the tables hold one row per token. `width`: the
    columns cos and sin each have when it is not the last dimension (a fused cos_sin cache)."""
    for t in (cos, sin):
        if not t.dtype.is_float:
            cx.fail("C019", f"table '{t.name}' must have a float dtype", t.loc)
    if [a.size for a in cos.axes] != [a.size for a in sin.axes] or cos.dtype != sin.dtype:
        cx.fail("C018", f"'{cos.name}' and '{sin.name}' must have the same shape and dtype", sin.loc)
    if not cos.axes:
        cx.fail("C018", f"table '{cos.name}' needs at least one dimension", cos.loc)
    width = cos.axes[-1].size if width is None else width
    if not isinstance(width, int):
        cx.fail("C018", f"the last dimension of '{cos.name}' (its width) must be an integer", cos.loc)
    lead = [a.size for a in cos.axes[:-1]]
    tokens = [d.size for d in first.token_dims]
    if per_token:
        if lead != tokens:
            cx.fail("C018", f"without positions, '{cos.name}' holds one row per token: expected "
                    f"[{', '.join(map(str, tokens + [width]))}]", cos.loc,
                    "or give `positions = ...` to gather rows")
    elif len(lead) != 1:
        cx.fail("C018", f"'{cos.name}' is indexed by position: expected [ROWS, {width}]", cos.loc)
    if width > MAX_TABLE_WIDTH:
        cx.fail("C029", f"table width {width} is above the limit {MAX_TABLE_WIDTH}",
                cx.axis_loc(cos.name, len(cos.axes) - 1))
    if pairing.kind is ir.PairKind.BLOCK:
        c = pairing.coeff
        if head_dim % width:
            cx.fail("C018", f"table width {width} must divide head_dim {head_dim}", cos.loc)
        if c is None or c < 2 or c % 2 or width % c:
            cx.fail("C020", f"block coeff {c} must be even and divide the table width {width}",
                    cx.settings["pairing"].value.loc, "ATB allows 2, 4, W/2 and W")
    elif pairing.kind is ir.PairKind.GLM2D:
        if width != rotary_dim // 4:
            cx.fail("C018", f"table '{cos.name}' is {width} wide; glm2d needs rotary_dim/4 = "
                    f"{rotary_dim // 4} columns", cos.loc,
                    "each half rotates rotary_dim/4 pairs with its own position stream")
    elif width not in (rotary_dim // 2, rotary_dim):
        # the width says how columns map to elements; any other width has no single reading
        # (reading its first rotary_dim/2 columns would be silently wrong for a full-width table)
        cx.fail("C018", f"table '{cos.name}' is {width} wide; {pairing.kind.value} reads "
                f"{rotary_dim // 2} or {rotary_dim} columns", cos.loc,
                f"rotary_dim/2 = {rotary_dim // 2} (pair j reads column j) or rotary_dim = {rotary_dim} "
                "(element e reads column e, as HF's cat / repeat_interleave caches)")
