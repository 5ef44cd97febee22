"""`ropegen explain` for a rope plan: the resolved pair map, positions and angles in words."""
from __future__ import annotations

import math

import numpy as np

from ropegen import ir
from ropegen.ops.explain import number, record, tensor
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


# ---------------------------------------------------------------------------------------------
# the same facts as data (`ropegen explain --json`)

def facts(p: RopePlan, lengths: tuple[int, ...] = ()) -> dict:
    op: ir.RopeOp = p.ir
    pairs = [{"a": b.a0 + j * b.a_step, "b": b.b0 + j * b.b_step, "ca": b.ca0 + j * b.ca_step,
              "cb": b.cb0 + j * b.cb_step, "stream": b.stream} for b in p.blocks for j in range(b.count)]
    out = {
        "name": p.name,
        "inputs": [tensor(t) for t in p.inputs],
        "outputs": [{"name": o.name, "source": o.source, "rotate": o.rotate, "norm": record(o.norm)}
                    for o in op.outputs],
        "tokens": {"layout": "packed" if p.token_layout == "t" else "batch_seq", "sequences": p.sequences,
                   "sequences_indptr": op.sequences_indptr},
        "positions": {**record(op.positions), "dtype": p.position_dtype.name if p.position_dtype else None,
                      "description": forms.position_of(op.positions).explain(op.positions)},
        "pairing": record(op.pairing),
        "unit": p.unit, "head_dim": p.head_dim, "rotary_dim": p.rotary_dim, "rotary_start": op.rotary_start,
        "passthrough": [list(r) for r in p.passthrough],
        "pair_blocks": [record(b) for b in p.blocks],
        "pairs": pairs,
        "dtypes": {"storage": p.storage.name, "compute": p.compute.name,
                   "compute_storage_rounding": p.compute_storage_rounding,
                   "output": p.out_dtype.name if p.out_dtype else None},
        "quant_scales": dict(zip((s.out for s in p.streams), p.quant_scales)) if p.out_dtype else None,
        "direction": "backward" if p.sin_sign < 0 else "forward",
        "angles": _ANGLE_FACTS[p.angles.kind](p.angles),
        "scaling": None,
        "at_lengths": [],
        "trig": "fast" if p.trig_fast else "accurate",
    }
    if isinstance(op.angles, ir.ComputedAngles):
        s = op.angles.scaling
        dim = op.rotary_dim // 2 if op.pairing.kind is ir.PairKind.GLM2D else op.rotary_dim
        form = forms.scaling_of(s)
        out["scaling"] = {"form": form.word, "base": record(op.angles.base), "parameters": record(s),
                          "description": form.describe(s, dim, op.angles.base)}
        out["at_lengths"] = _length_facts(p, lengths)
    return out


def _length_facts(p: RopePlan, lengths: tuple[int, ...]) -> list[dict]:
    rows = frequency_rows(p) if lengths else None
    if rows is None:
        return [{"length": n, "depends_on_length": False, "note": None, "inv_freq": None} for n in lengths]
    a, row = p.ir.angles, forms.scaling_of(p.ir.angles.scaling)
    return [{"length": n, "depends_on_length": True,
             "note": row.length_note(a.scaling, p.ir.rotary_dim, a.base, n),
             "inv_freq": [number(float(v)) for v in rows.at(n)]} for n in lengths]


def _f32(x: float) -> dict:
    """A ggml constant: a float32 value (held as a Python float)."""
    return number(np.float32(x) if float(np.float32(x)) == x else x)


def _table_facts(a: TableAnglesPlan) -> dict:
    return {"form": "table", "cos": a.cos, "sin": a.sin, "dtype": a.dtype.name, "width": a.width,
            "sin_column": a.sin_column, "rows": "token" if a.per_token else "position"}


def _exact_facts(a: ExactAngles) -> dict:
    return {"form": "exact", "magnitude": number(a.magnitude), "freq_factors": a.freq_factors,
            "length_unit": a.length_unit, "inv_freq": [number(f) for f in a.inv_freq]}


def _ggml_facts(a: GgmlAngles) -> dict:
    return {"form": "ggml", "theta_scale": _f32(a.theta_scale), "freq_scale": _f32(a.freq_scale),
            "mscale": _f32(a.mscale), "freq_factors": a.freq_factors, "yarn": a.yarn,
            "corr_dims": [_f32(c) for c in a.corr_dims], "ramp": [_f32(r) for r in a.ramp],
            "one_minus_ramp": [_f32(r) for r in a.one_minus_ramp]}


_ANGLE_FACTS = {"table": _table_facts, "exact": _exact_facts, "ggml": _ggml_facts}
