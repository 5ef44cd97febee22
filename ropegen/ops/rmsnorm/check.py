"""Syntax -> IR for `rmsnorm`: its two inputs, one output and the settings axis, epsilon, stash."""
from __future__ import annotations

from ropegen import ir
from ropegen.ir.dtypes import DTYPES, FLOAT_NAMES
from ropegen.spec.values import Bad

SETTINGS = ("axis", "epsilon", "stash")


def check(cx) -> ir.RmsNormOp:
    """`cx` is the generic checker (spec.sema.OperatorChecker) with the inputs already read."""
    node = cx.node
    if cx.broken:
        raise Bad   # reported at the declaration
    if len(node.inputs) != 2 or len(cx.tensors) != 2:
        cx.fail("C034", "rmsnorm takes exactly two inputs: x, then scale", node.name_loc)
    x, scale = cx.tensors.values()
    cx.used.update((x.name, scale.name))
    if len(node.outputs) != 1 or node.outputs[0].value is not None:
        loc = node.outputs[1].loc if len(node.outputs) > 1 else \
            (node.outputs[0].value.loc if node.outputs else node.name_loc)
        cx.fail("C025", "rmsnorm has exactly one output, declared as `out NAME`", loc)
    out = node.outputs[0].name
    if out in cx.tensors:
        cx.fail("C003", f"'{out}' is declared twice", node.outputs[0].loc)
    for t in (x, scale):
        if t.dtype.name not in FLOAT_NAMES:
            cx.fail("C023", f"'{t.name}' must be a float type", t.loc)
        if any(len(a.parts) > 1 or a.parts[0].role is not None for a in t.axes):
            cx.fail("C023", "rmsnorm tensors take plain dimensions, not labels", t.loc)
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
    return ir.RmsNormOp(node.name, (x, scale), out, axis, eps, stash, node.loc)
