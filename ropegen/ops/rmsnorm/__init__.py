"""RMSNorm as one vertical slice: check, plan, reference, inputs, workload and explain of `rmsnorm` operators."""
from __future__ import annotations

from ropegen.ops import OpKind
from ropegen.ops.rmsnorm import check, explain, inputs, plan, reference, workload

KIND = OpKind(
    word="rmsnorm",
    settings=check.SETTINGS,
    check=check.check,
    plan=plan.plan,
    constants=plan.constants,
    reference=reference.evaluate,
    tolerance_dtype=reference.tolerance_dtype,
    explain=explain.explain,
    explain_facts=explain.facts,
    symbol_roles=inputs.symbol_roles,
    make_inputs=inputs.make_inputs,
    case_bytes=inputs.case_bytes,
    bench_inputs=workload.bench_inputs,
    output_bytes=workload.output_bytes,
    bytes_moved=workload.bytes_moved,
    dtype_label=workload.dtype_label,
    takes_positions=False,
    status_message=lambda p, code, shapes, read: None,   # its statuses are the generic ones
)
