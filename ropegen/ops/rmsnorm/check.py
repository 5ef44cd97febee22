"""Syntax -> IR for `rmsnorm`: x and scale (and a residual), its outputs and its settings."""
from __future__ import annotations

from ropegen import ir
from ropegen.ir.dtypes import DTYPES, FLOAT_NAMES
from ropegen.ops import quant
from ropegen.spec import ast as A
from ropegen.spec.values import Bad

SETTINGS = ("axis", "epsilon", "stash", "residual", "residual_add", "weight_offset", "cast", "dtype", "quant_scale")
CASTS = ("before_scale", "after_scale")
RESIDUAL_ADDS = ("storage", "stash")


def check(cx) -> ir.RmsNormOp:
    """`cx` is the generic checker (spec.sema.OperatorChecker) with the inputs already read."""
    node = cx.node
    if cx.broken:
        raise Bad   # reported at the declaration
    r = cx.setting("residual")
    residual = cx.ref(r.value, "residual").name if r is not None else None
    q = cx.setting("quant_scale")
    qname = cx.ref(q.value, "quant_scale").name if q is not None and isinstance(q.value, A.Word) else None
    want = 2 + bool(residual) + bool(qname)
    if len(node.inputs) != want or len(cx.tensors) != want:
        cx.fail("C034", "rmsnorm takes x, then scale" + (", and the residual input" if residual else "")
                + (", and the quant_scale input" if qname else "") + f": {want} inputs", node.name_loc)
    plain = [t for t in cx.tensors.values() if t.name not in (residual, qname)]
    x, scale = plain
    cx.used.update(cx.tensors)
    n_out = 2 if residual else 1
    if len(node.outputs) != n_out or any(o.value is not None for o in node.outputs):
        bad = next((o for o in node.outputs if o.value is not None), None)
        loc = bad.value.loc if bad is not None else (node.outputs[n_out].loc if len(node.outputs) > n_out
                                                     else node.name_loc)
        cx.fail("C025", "rmsnorm has one output, `out Y`" + (", and with a residual a second, `out H` "
                "(x + residual)" if residual else ""), loc)
    names = [o.name for o in node.outputs]
    for o in node.outputs:
        if o.name in cx.tensors or names.count(o.name) > 1:
            cx.fail("C003", f"'{o.name}' is declared twice", o.loc)
    for t in cx.tensors.values():
        if t.dtype.name not in FLOAT_NAMES:
            cx.fail("C023", f"'{t.name}' must be a float type", t.loc)
        if any(len(a.parts) > 1 or a.parts[0].role is not None for a in t.axes):
            cx.fail("C023", "rmsnorm tensors take plain dimensions, not labels", t.loc)
    if residual:
        rt = cx.tensors[residual]
        if rt.dtype != x.dtype or [a.size for a in rt.axes] != [a.size for a in x.axes]:
            cx.fail("C022", f"residual '{rt.name}' must have x's dtype and shape ({x.dtype.name}"
                    f"[{', '.join(str(a.size) for a in x.axes)}])", rt.loc)
    rank = len(x.axes)
    if rank == 0:
        cx.fail("C021", f"'{x.name}' needs at least one dimension", x.loc)
    s = cx.setting("axis")
    axis = -1 if s is None else int(cx.number(s.value, "axis", integer=True))
    if not -rank <= axis < rank:
        cx.fail("C021", f"axis {axis} is out of range for rank {rank}", s.value.loc,
                f"use {-rank}..{rank - 1}")
    axis %= rank
    normalized = [a.size for a in x.axes[axis:]]
    sshape = [a.size for a in scale.axes]
    if len(sshape) > len(normalized) or any(
            sd != 1 and sd != nd for sd, nd in zip(sshape[::-1], normalized[::-1])):
        cx.fail("C022", f"scale shape [{', '.join(map(str, sshape))}] does not broadcast to the "
                f"normalized shape [{', '.join(map(str, normalized))}]", scale.loc)
    for nd in normalized:
        if not isinstance(nd, int):
            cx.fail("C027", f"normalized dimension '{nd}' must be an integer", x.loc)
    e = cx.setting("epsilon")
    eps = 1e-5 if e is None else cx.number(e.value, "epsilon", nonneg=True)
    st = cx.setting("stash")
    stash = DTYPES["f32"]
    if st is not None:
        name = cx.word(st.value, "stash", ("f32", "f64"))
        stash = DTYPES[name]
    ra = cx.setting("residual_add")
    if ra is not None and not residual:
        cx.fail("C030", "residual_add needs `residual = INPUT`", ra.loc)
    residual_add = "storage" if ra is None else cx.word(ra.value, "residual_add", RESIDUAL_ADDS)
    wo = cx.setting("weight_offset")
    offset = 0.0 if wo is None else float(cx.number(wo.value, "weight_offset"))
    c = cx.setting("cast")
    cast = "before_scale" if c is None else cx.word(c.value, "cast", CASTS)
    y_dtype = quant.check_dtype(cx, None)
    scales = quant.check_scales(cx, y_dtype, [(names[0], (1,))])
    return ir.RmsNormOp(node.name, tuple(cx.tensors.values()), names[0], axis, eps, stash, node.loc,
                        residual=residual, sum_output=names[1] if residual else None,
                        residual_add=residual_add, weight_offset=offset, cast=cast, y_dtype=y_dtype,
                        quant_scale=scales[0] if scales else None)
