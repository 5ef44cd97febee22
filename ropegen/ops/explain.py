"""`ropegen explain`: the resolved plan in words and tables, for a reviewer."""
from __future__ import annotations

import math

from ropegen import ir
from ropegen.ops.plan import ExactAngles, GgmlAngles, Plan, RmsNormPlan, RopePlan, TableAnglesPlan


def _shape(t) -> str:
    return f"{t.dtype.name}[{', '.join(map(str, t.shape))}]"


def explain(plan: Plan) -> str:
    return _rms(plan) if isinstance(plan, RmsNormPlan) else _rope(plan)


def _rms(p: RmsNormPlan) -> str:
    x, s = p.inputs
    lines = [
        f"rmsnorm {p.name}",
        f"  inputs     {x.name}: {_shape(x)}, {s.name}: {_shape(s)}",
        f"  output     {p.out}: {p.y.name}, shape of {x.name}",
        f"  normalize  axes {p.axis}..{p.rank - 1} -> rows of {p.norm_size} elements {list(p.norm_shape)}",
        f"  epsilon    {p.epsilon!r}",
        f"  stage one  in {p.stash.name}: x / sqrt(mean(x^2) + epsilon), rounded to {p.x.name}",
        f"  stage two  * {s.name} (broadcast {list(p.scale_shape)} -> {list(p.norm_shape)}), stored as {p.y.name}",
    ]
    return "\n".join(lines)


def _rope(p: RopePlan) -> str:
    op: ir.RopeOp = p.ir
    lines = [f"rope {p.name}"]
    for t in p.inputs:
        lines.append(f"  input      {t.name}: {_shape(t)}")
    for s in p.streams:
        lines.append(f"  output     {s.out} = {'rotate' if s.rotate else 'copy'}({s.src})")
    lines.append(f"  tokens     {'packed [tokens]' if p.token_layout == 't' else '[batch, seq]'}"
                 + (f", sequences from '{p.sequences}'" if p.sequences else ""))
    pos = op.positions
    desc = {
        ir.PositionKind.IDS: f"gathered from '{pos.ids}'",
        ir.PositionKind.TOKEN: "none: tables hold one row per token",
        ir.PositionKind.IN_SEQUENCE: "index of each token inside its sequence",
        ir.PositionKind.ARANGE: f"start ({pos.start}) + s - pad ({pos.pad or 0})[b]",
        ir.PositionKind.GLM2D: f"GLM 2-D: pos0/pos1 from start={pos.start}, pad={pos.pad or 0}, "
                               f"first_seqlen={pos.first_seqlen}",
    }[pos.kind]
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
    a = p.angles
    if isinstance(a, TableAnglesPlan):
        lines.append(f"  angles     cos/sin tables '{a.cos}', '{a.sin}' ({a.dtype.name}, {a.width} wide), rows by "
                     + ("token" if a.per_token else "position"))
    elif isinstance(a, ExactAngles):
        lines.append(f"  angles     exact: theta = p * inv_freq[c]{' / ' + a.freq_factors + '[c]' if a.freq_factors else ''}"
                     f" in float64; magnitude {a.magnitude!r}")
        lines.append("             c   inv_freq                  wavelength")
        for c, f in enumerate(a.inv_freq):
            lines.append(f"             {c:<3} {f!r:<25} {2 * math.pi / f:.6g}")
    elif isinstance(a, GgmlAngles):
        lines.append(f"  angles     ggml float32: theta_scale {a.theta_scale!r}, freq_scale {a.freq_scale!r}, "
                     f"mscale {a.mscale!r}" + (f", freq_factors '{a.freq_factors}'" if a.freq_factors else ""))
        if a.yarn:
            lines.append(f"             YaRN corr dims {a.corr_dims}, ramp: "
                         + ", ".join(f"{r:.4g}" for r in a.ramp))
    lines.append(f"  trig       {'fast intrinsics' if p.trig_fast else 'accurate'}")
    return "\n".join(lines)
