"""RMSNorm as one vertical slice: check, plan, reference, inputs and explain of `rmsnorm` operators."""
from __future__ import annotations

from ropegen.ops import OpKind
from ropegen.ops.rmsnorm import check, explain, inputs, plan, reference

KIND = OpKind(
    word="rmsnorm",
    settings=check.SETTINGS,
    check=check.check,
    plan=plan.plan,
    constants=plan.constants,
    reference=reference.evaluate,
    tolerance_dtype=reference.tolerance_dtype,
    explain=explain.explain,
    symbol_roles=inputs.symbol_roles,
    make_inputs=inputs.make_inputs,
    case_bytes=inputs.case_bytes,
)
