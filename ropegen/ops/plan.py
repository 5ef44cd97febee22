"""Stage 4: every numeric decision, made once in Python: pair maps, frequency tables, constants.

Backends render a plan; they never recompute anything here. Each operator kind plans in its slice
(ops/rope/plan.py + angles.py, ops/rmsnorm/plan.py); this module is the stage entry, dispatching
through the ops registry, and keeps the plan types' import path.
"""
from __future__ import annotations

from typing import Union

import numpy as np

from ropegen import ir, ops
from ropegen.ops.common import TensorPlan, check_finite, tensor_plan  # noqa: F401
from ropegen.ops.rmsnorm.plan import RmsNormPlan
from ropegen.ops.rope.angles import (AnglesPlan, ExactAngles, GgmlAngles, TableAnglesPlan,  # noqa: F401
                                     _ggml_mscale, base_inv_freq, ggml_corr_dims, ggml_ramp,
                                     ggml_theta_scale)
from ropegen.ops.rope.forms.scaling import _llama3_frequencies
from ropegen.ops.rope.plan import (PairBlock, RopePlan, StreamPlan, block_blocks,  # noqa: F401
                                   full_width_blocks, gptj_blocks, neox_blocks)

Plan = Union[RopePlan, RmsNormPlan]


def plan_spec(spec: ir.Spec) -> tuple[Plan, ...]:
    return tuple(plan_operator(op, spec.sha256) for op in spec.operators)


def plan_operator(op: ir.Operator, sha: str) -> Plan:
    """The plan of one checked operator; a constant that overflows its type is a spec error (C029)."""
    kind = ops.of(op)
    with np.errstate(all="ignore"):   # overflow is reported as a diagnostic, not a warning
        plan = kind.plan(op, sha)
        check_finite(plan, kind.constants(plan))
    return plan


def llama3_inv_freq(inv, s: ir.Llama3Scaling):
    """Llama-3.1 wavelength bands in exact arithmetic (the llama3 row of ops/rope/forms/scaling.py)."""
    return _llama3_frequencies(inv, s, 0, 0.0)[0]
