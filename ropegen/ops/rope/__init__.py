"""RoPE as one vertical slice: check, forms (one row per scaling/position/angle form), plan, angles,
reference, inputs, workload, failure messages and explain of `rope` operators."""
from __future__ import annotations

from ropegen.ops import OpKind
from ropegen.ops.rope import check, explain, failures, inputs, plan, reference, workload

KIND = OpKind(
    word="rope",
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
    takes_positions=True,
    status_message=failures.status_message,
)
