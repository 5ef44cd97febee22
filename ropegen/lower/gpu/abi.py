"""The kernel parameter lists of every GPU target's RoPE and RMSNorm kernels (lower/abi.py's model):
one list per kernel drives the printed signature and the argument tuple the runner binds.

The lists are target-neutral; a target passes its own Param subclass (`param`), which adds how its
language spells each parameter's type (backends/cuda/facts.py: `ctype`).
"""
from __future__ import annotations

from ropegen.ir.dtypes import DTYPES, DType
from ropegen.lower.abi import Param
from ropegen.lower.gpu.launch import HeadStream
from ropegen.ops.plan import RmsNormPlan, RopePlan


def _in(param: type[Param], name: str, tensor: str, dtype: DType) -> Param:
    return param(name, ("in", tensor), dtype, const=True)


def _int(param: type[Param], name: str, source: tuple, bits: int = 64) -> Param:
    return param(name, source, bits=bits)


def rope_params(p: RopePlan, streams: tuple[HeadStream, ...], strided: bool,
                param: type[Param] = Param) -> tuple[Param, ...]:
    """The RoPE kernel's parameters: per stream the x/y pointers and their b/s/h (scalar kernel: and d)
    strides, each norm weight and fp8 scale and its stride(s), then what the position and angle forms read,
    then the launch quantities and the error word."""
    tensors = {t.name: t for t in p.inputs}
    ps: list[Param] = []
    roles = ("b", "s", "h", "d") if strided else ("b", "s", "h")
    for s in streams:
        dt = tensors[s.src].dtype
        ps.append(_in(param, s.x, s.src, dt))
        ps.append(param(s.y, ("out", s.out), p.out_dtype or dt))   # fp8 outputs: their own type
        for r in roles:
            ps.append(_int(param, f"{s.x}_s{r}", ("stride", s.src, r)))
        for r in roles:
            ps.append(_int(param, f"{s.y}_s{r}", ("stride", s.out, r)))
    # per-head rmsnorm weights, then fp8 scales (per tensor or per head: indexed by a stride); one
    # tensor serving as both is one parameter. A weight [heads, head_dim] (a norm over all heads)
    # has its element stride (axis 1) as _si and its head stride as _sh
    over = {s.norm.weight for s in p.streams if s.norm and s.norm.over_heads}
    for w in dict.fromkeys([s.norm.weight for s in p.streams if s.norm] + list(p.quant_scales)):
        ps += [_in(param, "t_" + w, w, tensors[w].dtype),
               _int(param, f"t_{w}_si", ("axis_stride", w, 1 if w in over else 0))]
        if w in over:
            ps.append(_int(param, f"t_{w}_sh", ("axis_stride", w, 0)))
    pos = p.positions

    def lead(name: str, n: int, first: int = 0) -> list[tuple]:
        """(b, s) stride sources of a tensor whose axes first..first+n-1 are the token dims, in the
        memory order of the rotated tensors' token dims ([seq, batch] when the plan's token order is "sb")."""
        rank = len(p.ir.tensor(name).axes)
        if n == 1:
            return [("zero",), ("axis_stride", name, first)]
        assert rank >= first + 2
        if p.token_order == "sb":
            return [("axis_stride", name, first + 1), ("axis_stride", name, first)]
        return [("axis_stride", name, first), ("axis_stride", name, first + 1)]

    n_token_dims = 1 if p.token_layout == "t" else 2
    if pos.ids:
        sections = 1 if pos.sections else 0        # M-RoPE positions: [streams, token dims]
        sb, ss = lead(pos.ids, n_token_dims, sections)
        ps += [_in(param, "t_" + pos.ids, pos.ids, tensors[pos.ids].dtype),
               _int(param, f"t_{pos.ids}_sb", sb), _int(param, f"t_{pos.ids}_ss", ss)]
        if sections:
            ps.append(_int(param, f"t_{pos.ids}_sn", ("axis_stride", pos.ids, 0)))
    for v in dict.fromkeys((pos.start, pos.first_seqlen)):
        if isinstance(v, str):
            ps.append(_in(param, "t_" + v, v, tensors[v].dtype))
    if pos.pad:
        ps += [_in(param, "t_" + pos.pad, pos.pad, tensors[pos.pad].dtype),
               _int(param, f"t_{pos.pad}_si", ("axis_stride", pos.pad, 0))]
    if p.sequences:
        ps += [_in(param, "t_" + p.sequences, p.sequences, tensors[p.sequences].dtype),
               _int(param, f"t_{p.sequences}_si", ("axis_stride", p.sequences, 0)),
               _int(param, "n_seq", ("extent", p.sequences, 0)),
               param("seq_ends", ("seq_ends",), DTYPES["i64"], const=True)]
        if pos.offsets:     # in_sequence(start = OFFSETS): each sequence's first position
            ps += [_in(param, "t_" + pos.offsets, pos.offsets, tensors[pos.offsets].dtype),
                   _int(param, f"t_{pos.offsets}_si", ("axis_stride", pos.offsets, 0))]
    a = p.angles
    if a.kind == "table":
        for name in dict.fromkeys((a.cos, a.sin)):      # a fused cos_sin cache is one tensor
            ps.append(_in(param, "t_" + name, name, tensors[name].dtype))
            last = len(p.ir.tensor(name).axes) - 1
            if a.per_token:
                sb, ss = lead(name, n_token_dims)
                ps += [_int(param, f"t_{name}_sb", sb), _int(param, f"t_{name}_ss", ss)]
            else:
                ps.append(_int(param, f"t_{name}_sr", ("axis_stride", name, 0)))
            ps.append(_int(param, f"t_{name}_sc", ("axis_stride", name, last)))
        if not a.per_token:
            ps.append(_int(param, "n_rows", ("extent", a.cos, 0)))
    elif a.freq_factors:
        ps += [_in(param, "t_" + a.freq_factors, a.freq_factors, tensors[a.freq_factors].dtype),
               _int(param, f"t_{a.freq_factors}_si", ("axis_stride", a.freq_factors, 0))]
    if getattr(a, "length_unit", None):   # longrope, dynamic_ntk: the call's frequency rows
        ps.append(param("inv_freq", ("freq",), DTYPES["f64"], const=True))
    ps += [_int(param, "n_tokens", ("launch", "tokens")),
           _int(param, "seq_len", ("launch", "seq_len")),
           _int(param, "head_groups", ("launch", "head_groups"), bits=32),
           param("err", ("err",), DTYPES["i32"])]
    names = [x.name for x in ps]
    if len(set(names)) != len(names):
        raise AssertionError(f"{p.name}: kernel parameter names collide: {names}")
    return tuple(ps)


def rms_row_roles(p: RmsNormPlan) -> tuple[str, ...]:
    """The row-indexed arrays of an RMSNorm kernel, in parameter order: x[, residual], y[, h] (each
    passes its row and group strides as the launch quantities "<role>_row_stride" and
    "<role>_group_stride")."""
    return ("x", "r", "y", "h") if p.residual else ("x", "y")


def rms_params(p: RmsNormPlan, param: type[Param] = Param) -> tuple[Param, ...]:
    """The RMSNorm kernels' parameters: x[, residual], scale, y[, h][, fp8 quant scale], the rows,
    the rows per group and each row-indexed array's row and group strides (x, residual, y, h: each
    may be spaced out, or in groups of evenly spaced rows as a fused-QKV view's heads are, and y or h
    may be in place). Row r is at (r / row_group) * group stride + (r % row_group) * row stride;
    row_group 0: every array's rows evenly spaced (no group term)."""
    x, scale, res, h = p.x_name, p.scale_name, p.residual, p.sum_output
    ps = [_in(param, "t_" + x, x, p.x)]
    if res:
        ps.append(_in(param, "t_" + res, res, p.x))
    ps += [_in(param, "t_" + scale, scale, p.scale), param("t_" + p.out, ("out", p.out), p.y)]
    if h:
        ps.append(param("t_" + h, ("out", h), p.x))
    if p.quant_scale and p.quant_scale not in (x, scale, res):   # f32[1]: entry 0
        ps.append(_in(param, "t_" + p.quant_scale, p.quant_scale, DTYPES["f32"]))
    ps += [_int(param, "n_rows", ("launch", "rows")), _int(param, "row_group", ("launch", "row_group"))]
    for r in rms_row_roles(p):
        ps += [_int(param, f"{r}_{level}_stride", ("launch", f"{r}_{level}_stride")) for level in ("row", "group")]
    return tuple(ps)
