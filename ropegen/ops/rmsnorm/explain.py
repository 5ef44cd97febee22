"""`ropegen explain` for an RMSNorm plan."""
from __future__ import annotations

from ropegen.ops.rmsnorm.plan import RmsNormPlan


def _shape(t) -> str:
    return f"{t.dtype.name}[{', '.join(map(str, t.shape))}]"


def explain(p: RmsNormPlan, lengths: tuple[int, ...] = ()) -> str:
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
