"""`ropegen check`: every available backend against the float64 reference, on random inputs."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropegen import backends, ops
from ropegen.ops import reference
from ropegen.api import Operator
from ropegen.ops.inputs import CASES, case_bytes, make_inputs
from ropegen.runtime.memory import format_bytes, memory_limit

RAN, SKIPPED, NOT_RUN = "ran", "skipped", "not run"


@dataclass(frozen=True)
class Row:
    operator: str
    backend: str
    dtype: str
    case: str
    max_abs: float
    max_rel: float
    ok: bool
    note: str = ""
    # RAN: compared (ok or a mismatch); SKIPPED: the backend cannot run here (note says why);
    # NOT_RUN: nothing was compared because the case cannot be tested here (too large for memory)
    status: str = RAN


def _storage_dtype(op: Operator):
    """The dtype whose tolerance bounds the operator's error (its kind decides)."""
    return ops.of(op.ir).tolerance_dtype(op.ir)


def compare(out: np.ndarray, ref: np.ndarray, dtype, magnitude: float) -> tuple[float, float, bool]:
    """Max abs / rel error and whether every element is within the dtype's tolerance.

    The absolute part scales with the operands' magnitude: a rotation's output can cancel to near
    zero while its rounding error stays at the size of its inputs.
    """
    got = np.asarray(out).astype(np.float64)
    if got.shape != ref.shape:
        return float("inf"), float("inf"), False
    diff = np.abs(got - ref)
    allowed = dtype.rtol * np.abs(ref) + dtype.atol * max(1.0, magnitude)
    finite = np.isfinite(got).all()
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float((diff / np.maximum(np.abs(ref), dtype.atol)).max()) if diff.size else 0.0
    return max_abs, max_rel, bool(finite and (diff <= allowed).all())


def check_operator(op: Operator, backend_names: tuple[str, ...] | None = None, seed: int = 0,
                   limit: int | None = None) -> list[Row]:
    """One row per backend and case. A backend that cannot run here gives one SKIPPED row; a case whose
    arrays would need more than `limit` bytes (default: memory_limit()) gives one NOT_RUN row
    (backend '-') instead of allocating them."""
    rows: list[Row] = []
    dtype = _storage_dtype(op)
    wanted = [b for b in backends.BACKENDS if backend_names is None or b.name in backend_names]
    runnable = []
    for b in wanted:
        why = b.unavailable()
        if why:
            rows.append(Row(op.name, b.name, dtype.name, "-", float("nan"), float("nan"), True, f"skipped: {why}",
                            SKIPPED))
        else:
            runnable.append(b)
    if not runnable:
        return rows
    if limit is None:
        limit = memory_limit()
    names = ", ".join(b.name for b in runnable)
    cases = []
    for i, case in enumerate(CASES):
        need = case_bytes(op.ir, case)
        if need > limit:
            rows.append(Row(op.name, names, dtype.name, case.label, float("nan"), float("nan"), False,
                            f"not run: too large to test here: needs about {format_bytes(need)}, "
                            f"limit {format_bytes(limit)}", NOT_RUN))
        else:
            cases.append((i, case))
    for b in runnable:
        for i, case in cases:
            try:
                arrays = make_inputs(op.ir, case, seed=seed + i)
                ref = reference.evaluate(op.ir, arrays)
            except MemoryError:
                rows.append(Row(op.name, b.name, dtype.name, case.label, float("nan"), float("nan"), False,
                                "not run: out of memory building the inputs and the reference", NOT_RUN))
                continue
            except (ValueError, IndexError, OverflowError) as exc:
                rows.append(Row(op.name, b.name, dtype.name, case.label, float("inf"), float("inf"), False,
                                f"no valid inputs: {exc}"))
                continue
            try:
                outs = op.run_all(*[arrays[n] for n in op.inputs], backend=b.name)
            except MemoryError:
                rows.append(Row(op.name, b.name, dtype.name, case.label, float("nan"), float("nan"), False,
                                "not run: out of memory running the backend", NOT_RUN))
                continue
            except Exception as exc:  # a backend failure is a check failure, reported as a row
                rows.append(Row(op.name, b.name, dtype.name, case.label, float("inf"), float("inf"), False,
                                f"error: {type(exc).__name__}: {exc}"))
                continue
            # the operands' size: the float inputs', and the reference outputs' (a fused rmsnorm's
            # normalized heads, which the rotation reads, can be larger than any input)
            magnitude = max((float(np.max(np.abs(np.asarray(a, dtype=np.float64)))) if a.size and a.dtype.kind == "f"
                             else 0.0 for a in [*arrays.values(), *ref.values()]), default=0.0)
            worst = (0.0, 0.0, True)
            for name, out in zip(op.outputs, outs):
                m_abs, m_rel, ok = compare(out, ref[name], dtype, magnitude)
                worst = (max(worst[0], m_abs), max(worst[1], m_rel), worst[2] and ok)
            rows.append(Row(op.name, b.name, dtype.name, case.label, *worst))
    return rows


def prebuild(operators: list[Operator], backend_names: tuple[str, ...]) -> None:
    """Build the kernels of many operators up front, in parallel where a backend can (the C backend
    runs one compiler per core), so that check_operator finds them cached. Failures are not reported
    here: check_operator reports each as that operator's row."""
    for b in backends.BACKENDS:
        if b.name in backend_names and hasattr(b, "prebuild") and not b.unavailable():
            jobs = []
            for op in operators:
                try:
                    jobs.append((op.plan, op.sources[b.name]))
                except Exception:  # noqa: BLE001 - a render failure is check_operator's row to report
                    continue
            b.prebuild(jobs)


NOTE_WIDTH = 100


def _short(note: str) -> str:
    """A note's first line, cut to NOTE_WIDTH characters (the full text goes under the table)."""
    first = note.strip().splitlines()[0] if note.strip() else ""
    return first if len(first) <= NOTE_WIDTH and first == note.strip() else first[:NOTE_WIDTH - 3].rstrip() + "..."


def format_table(rows: list[Row]) -> str:
    """The rows as a table; notes longer than a line are shortened there and listed in full below it."""
    head = ("operator", "backend", "dtype", "case", "max abs err", "max rel err", "ok")
    body = []
    details: list[str] = []
    for r in rows:
        note = _short(r.note) if r.note else ""
        if note != r.note.strip() and r.note.strip() not in details:
            details.append(r.note.strip())
        if r.status != RAN:
            body.append((r.operator, r.backend, r.dtype, r.case, "-", "-", note))
        else:
            body.append((r.operator, r.backend, r.dtype, r.case, f"{r.max_abs:.3g}", f"{r.max_rel:.3g}",
                         ("ok" if r.ok else "MISMATCH") + (f" ({note})" if note else "")))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(head, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in body]
    if details:
        lines.append("")
        lines.append("notes in full:")
        for d in details:
            lines += ["  " + line for line in d.splitlines()]
    return "\n".join(lines)
