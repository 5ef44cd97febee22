"""`ropegen explain` for a rope plan: the resolved pair map, positions and angles in words."""
from __future__ import annotations

import math

from ropegen import ir
from ropegen.ops.rope import forms
from ropegen.ops.rope.angles import ExactAngles, GgmlAngles, TableAnglesPlan
from ropegen.ops.rope.frequency_rows import frequency_rows
from ropegen.ops.rope.head_norm import norm_words
from ropegen.ops.rope.plan import RopePlan


def _shape(t) -> str:
    return f"{t.dtype.name}[{', '.join(map(str, t.shape))}]"


def explain(p: RopePlan, lengths: tuple[int, ...] = ()) -> str:
    op: ir.RopeOp = p.ir
    lines = [f"rope {p.name}"]
    for t in p.inputs:
        lines.append(f"  input      {t.name}: {_shape(t)}")
    for o in op.outputs:
        lines.append(f"  output     {o.name} = {'rotate' if o.rotate else 'copy'}({o.source}){norm_words(o.norm)}")
    lines.append(f"  tokens     {'packed [tokens]' if p.token_layout == 't' else '[batch, seq]'}"
                 + (f", sequences from '{p.sequences}'" if p.sequences else ""))
    desc = forms.position_of(op.positions).explain(op.positions)
    lines.append(f"  positions  {desc}")
    lines.append(f"  pairing    {op.pairing.kind.value}"
                 + (f" (coeff {op.pairing.coeff})" if op.pairing.coeff else "")
                 + (f" (inner {op.pairing.inner.value})" if op.pairing.inner else ""))
    lines.append(f"  unit       {p.unit} elements rotated as one head ({p.head_dim // p.unit} per head of {p.head_dim}),"
                 f" rotary dims {p.rotary_dim}")
    if p.passthrough:
        lines.append(f"  pass       elements {', '.join(f'[{a}, {b})' for a, b in p.passthrough)} of each unit are copied")
    lines.append("  pair map   (a, b) elements, (ca, cb) cos/sin columns, stream = position stream")
    for blk in p.blocks:
        shown = []
        for j in range(min(blk.count, 4)):
            shown.append(f"({blk.a0 + j * blk.a_step},{blk.b0 + j * blk.b_step})"
                         f"@({blk.ca0 + j * blk.ca_step},{blk.cb0 + j * blk.cb_step})")
        more = f" ... {blk.count} pairs" if blk.count > 4 else ""
        lines.append(f"             stream {blk.stream}: {' '.join(shown)}{more}")
    lines.append(f"  arithmetic {p.compute.name}" + (" (each product and sum rounded to storage)"
                                                      if p.compute_storage_rounding else "")
                 + f", storage {p.storage.name}")
    lines.append(f"  direction  {'backward (sin negated)' if p.sin_sign < 0 else 'forward'}")
    if p.out_dtype is not None:
        lines.append(f"  quantize   outputs {p.out_dtype.name}: value in {p.compute.name} * "
                     + ", ".join(f"{s.out}: {q}" for s, q in zip(p.streams, p.quant_scales))
                     + f", rounded to nearest even, saturated to +-{p.out_dtype.max_finite:g}")
    lines += _ANGLES[p.angles.kind](p.angles)
    if isinstance(op.angles, ir.ComputedAngles):
        dim = op.rotary_dim // 2 if op.pairing.kind is ir.PairKind.GLM2D else op.rotary_dim
        said = forms.scaling_of(op.angles.scaling).describe(op.angles.scaling, dim, op.angles.base)
        if said:
            lines.append(f"  scaling    {said}")
        lines += _at_lengths(p, lengths)
    lines.append(f"  trig       {'fast intrinsics' if p.trig_fast else 'accurate'}")
    return "\n".join(lines)


def _at_lengths(p: RopePlan, lengths: tuple[int, ...]) -> list[str]:
    """What applies at each asked length: the form's words and the frequency row the kernels read."""
    rows = frequency_rows(p)
    if not lengths:
        return []
    if rows is None:
        return ["  lengths    the frequencies do not depend on the length"]
    a = p.ir.angles
    row = forms.scaling_of(a.scaling)
    out = []
    for n in lengths:
        f = rows.at(n)
        shown = ", ".join(repr(float(v)) for v in f[:3])
        out.append(f"  at length  {n}: {row.length_note(a.scaling, p.ir.rotary_dim, a.base, n)}; "
                   f"inv_freq {shown}, ..., {float(f[-1])!r}")
    return out


def _table(a: TableAnglesPlan) -> list[str]:
    return [f"  angles     cos/sin tables '{a.cos}', '{a.sin}' ({a.dtype.name}, {a.width} wide), rows by "
            + ("token" if a.per_token else "position")]


def _exact(a: ExactAngles) -> list[str]:
    lines = [f"  angles     exact: theta = p * inv_freq[c]{' / ' + a.freq_factors + '[c]' if a.freq_factors else ''}"
             f" in float64; magnitude {a.magnitude!r}",
             "             c   inv_freq                  wavelength"]
    for c, f in enumerate(a.inv_freq):
        lines.append(f"             {c:<3} {f!r:<25} {2 * math.pi / f:.6g}")
    return lines


def _ggml(a: GgmlAngles) -> list[str]:
    lines = [f"  angles     ggml float32: theta_scale {a.theta_scale!r}, freq_scale {a.freq_scale!r}, "
             f"mscale {a.mscale!r}" + (f", freq_factors '{a.freq_factors}'" if a.freq_factors else "")]
    if a.yarn:
        lines.append(f"             YaRN corr dims {a.corr_dims}, ramp: "
                     + ", ".join(f"{r:.4g}" for r in a.ramp))
    return lines


# each planned angle record, described
_ANGLES = {"table": _table, "exact": _exact, "ggml": _ggml}
