"""`ropegen explain`: the resolved plan in words and tables, for a reviewer (each kind's text is in
its slice, ops/<kind>/explain.py)."""
from __future__ import annotations

from ropegen import ops


def explain(plan, lengths: tuple[int, ...] = ()) -> str:
    """`lengths`: call lengths (max position + 1) to show length-dependent frequencies at."""
    return ops.of(plan).explain(plan, tuple(lengths))
