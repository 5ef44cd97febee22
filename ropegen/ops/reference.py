"""The float64 reference evaluator, written from the operator definitions.

It reads the checked IR, never the plan or a template. Each operator kind's reference is in its
slice (ops/<kind>/reference.py); this module is the entry, dispatching through the ops registry,
and keeps the rope helpers' import path.
"""
from __future__ import annotations

import numpy as np

from ropegen import ir, ops
from ropegen.ops.rope.reference import (INT64_MAX, INT64_MIN, _canonical,  # noqa: F401
                                        _from_canonical, _ggml_cos_sin, by_token, cos_sin_at, full_width_table,
                                        inverse_frequencies, pair_list, position_streams)
from ropegen.ops.rope.reference_frequencies import _corr_dims  # noqa: F401


def evaluate(op: ir.Operator, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs (float64) of `op` for the given inputs (by name)."""
    return ops.of(op).reference(op, arrays)
