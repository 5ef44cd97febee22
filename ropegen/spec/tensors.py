"""Tensor declarations of an operator (`in NAME: dtype[...]`): names, dtypes, labelled and merged
axes and their size limits, read into ir.Tensor before any operator kind looks at them."""
from __future__ import annotations

from ropegen import ir
from ropegen.ir.dtypes import DTYPES, INPUT_DTYPES
from ropegen.spec import ast as A
from ropegen.spec.diagnostics import did_you_mean, Loc
from ropegen.spec.limits import MAX_FIXED_ELEMENTS, MAX_HEAD_DIM, name_too_long
from ropegen.spec.values import Reader

ROLE_NAMES = tuple(r.value for r in ir.Role)


def reserved_words() -> frozenset[str]:
    """Words no tensor may be named: tensor names become parameters in every target's generated
    source, so each target lists its own (Backend.reserved) and the checker refuses the union."""
    from ropegen import backends   # the registry imports the plan stage; import it when first used
    return backends.reserved_words()


class Declarations(Reader):
    def collect_inputs(self) -> None:
        for o in self.node.outputs:
            self.check_name(o.name, o.loc)
        for inp in self.node.inputs:
            self.check_name(inp.name, inp.loc)
            if inp.name in self.tensors:
                self.err("C003", f"'{inp.name}' is declared twice", inp.loc)
                continue
            t = self.guarded(self.tensor_type, inp)
            if t is not None:
                self.tensors[inp.name] = t
            else:
                self.broken.add(inp.name)

    def check_name(self, name: str, loc: Loc) -> None:
        too_long = name_too_long(name)
        if too_long:
            self.err("C037", too_long, loc, "tensor names become identifiers in generated code: shorten it")
        elif name in reserved_words() or name.startswith("_"):
            self.err("C036", f"'{name}' cannot name a tensor: it is reserved in a generated language", loc,
                     f"rename it, e.g. '{name.lstrip('_')}_t'")

    def tensor_type(self, inp: A.InputNode) -> ir.Tensor:
        ty = inp.type
        if ty.dtype in DTYPES and ty.dtype not in INPUT_DTYPES:
            self.fail("C004", f"'{ty.dtype}' is an output type only: inputs are {', '.join(INPUT_DTYPES)}",
                      ty.dtype_loc, f"write it as an output's type: `dtype = {ty.dtype}` with `quant_scale = S`")
        if ty.dtype not in DTYPES:
            self.fail("C004", f"unknown dtype '{ty.dtype}'", ty.dtype_loc, did_you_mean(ty.dtype, INPUT_DTYPES))
        axes = []
        roles_seen: set[ir.Role] = set()
        elements = 1   # product of the fixed extents so far
        for ax in ty.axes:
            parts = []
            for d in ax.parts:
                role = None
                if d.label is not None:
                    if d.label not in ROLE_NAMES:
                        self.fail("C005", f"unknown dimension label '{d.label}'", d.label_loc or d.loc,
                                  did_you_mean(d.label, ROLE_NAMES))
                    role = ir.Role(d.label)
                    if role in roles_seen:
                        self.fail("C033", f"'{d.label}' labels two dimensions of '{inp.name}'",
                                  d.label_loc or d.loc)
                    roles_seen.add(role)
                if isinstance(d.size, int):
                    elements = self.fixed_extent(inp.name, d, role, elements)
                if len(ax.parts) > 1 and not isinstance(d.size, int) and role not in (ir.Role.BATCH, ir.Role.SEQ, ir.Role.TOKENS):
                    self.fail("C027", "inside a merged axis '( ... )' every size but a token dim must be an integer",
                              d.loc)
                parts.append(ir.Dim(d.size, role))
            if len(ax.parts) > 1 and sum(not isinstance(p.size, int) for p in parts) > 0:
                self.fail("C027", "a merged axis '( ... )' needs integer sizes", ax.loc)
            axes.append(ir.Axis(tuple(parts)))
        self.axis_locs[inp.name] = tuple(ax.loc for ax in ty.axes)
        return ir.Tensor(inp.name, DTYPES[ty.dtype], tuple(axes), inp.loc)

    def fixed_extent(self, tensor: str, d: A.DimNode, role: ir.Role | None, elements: int) -> int:
        """Bound one fixed extent; returns the tensor's fixed element count including it."""
        if d.size == 0:
            self.fail("C029", "a dimension must have a positive size", d.loc)
        if role is ir.Role.HEAD_DIM and d.size > MAX_HEAD_DIM:
            self.fail("C029", f"head_dim {d.size} is above the limit {MAX_HEAD_DIM}", d.loc)
        elements *= d.size
        if elements > MAX_FIXED_ELEMENTS:
            self.fail("C029", f"the fixed dimensions of '{tensor}' hold more than "
                      f"2^{MAX_FIXED_ELEMENTS.bit_length() - 1} elements", d.loc,
                      "generated code counts elements in 64 bits; no machine holds this many")
        return elements
