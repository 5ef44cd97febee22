"""The operator registry: one OpKind record per operator kind, each naming its vertical slice.

Every stage that depends on what an operator means (checker, planner, float64 reference, test
inputs, explain, the bench's workload, status messages) finds the kind's code here, by the `.kind`
word that the syntax node, the IR operator and the plan all carry, instead of testing types. A new
operator kind is a new ops/<kind>/ package and one entry in KINDS.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class OpKind:
    word: str                        # the spec keyword; also `.kind` of its IR operator and plan
    settings: tuple[str, ...]        # the setting keys it accepts
    check: Callable[[Any], Any]      # (spec.sema.OperatorChecker) -> IR operator; reads its settings
    plan: Callable[[Any, str], Any]  # (IR operator, spec sha256) -> plan
    constants: Callable[[Any], list[float]]   # plan -> planned floats that must be finite (C029)
    reference: Callable[[Any, dict], dict]    # (IR operator, arrays) -> float64 outputs by name
    tolerance_dtype: Callable[[Any], Any]     # IR operator -> the DType whose tolerance bounds its error
    explain: Callable[[Any], str]    # plan -> `ropegen explain` text
    explain_facts: Callable[[Any, tuple], dict]   # (plan, lengths) -> `ropegen explain --json` facts
    symbol_roles: Callable[[Any, dict], None]   # (IR operator, roles) -> adds kind-specific symbol roles
    make_inputs: Callable[..., dict]          # (op, case, rng, sizes, roles) -> arrays
    case_bytes: Callable[[Any, Any, Callable], int]   # (op, case, count(tensor)) -> bytes needed
    # the operator as a benchmark workload (ops/<kind>/workload.py), read by ropegen.bench
    bench_inputs: Callable[..., dict]         # (op, sizes, positions 'prefill'|'random', rng) -> arrays
    output_bytes: Callable[[Any, dict], int]  # (op, symbol sizes) -> bytes its outputs take
    bytes_moved: Callable[[Any, dict], int]   # (plan, arrays) -> bytes one call reads and writes
    dtype_label: Callable[[Any], str]         # plan -> the dtype column of a bench result
    takes_positions: bool                     # a bench result has a positions column (prefill | random)
    # (plan, status code, input shapes, read(name) | None) -> the message its kind gives the code; None:
    # lower/status.py's generic one
    status_message: Callable[..., str | None]


def _kinds() -> tuple[OpKind, ...]:
    from ropegen.ops.rmsnorm import KIND as RMSNORM
    from ropegen.ops.rope import KIND as ROPE
    return (ROPE, RMSNORM)


KINDS: tuple[OpKind, ...] = _kinds()
_BY_WORD = {k.word: k for k in KINDS}


def words() -> tuple[str, ...]:
    """The operator keywords, in registry order."""
    return tuple(_BY_WORD)


def get(word: str) -> OpKind:
    """The kind named by a spec keyword; KeyError when there is none."""
    return _BY_WORD[word]


def of(x) -> OpKind:
    """The kind of anything carrying a `.kind` word: a syntax node, an IR operator, a plan."""
    return _BY_WORD[x.kind]
