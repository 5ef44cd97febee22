"""`ropegen check`: every available backend against the float64 reference, on random inputs."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import backends, reference
from .api import Operator
from .inputs import CASES, make_inputs


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


def _storage_dtype(op: Operator):
    ir_op = op.ir
    if ir_op.kind == "rmsnorm":
        # stage one is rounded back to x's type, so the coarser of x and scale bounds the error
        return min((ir_op.x.dtype, ir_op.scale.dtype), key=lambda d: d.mantissa_bits)
    return ir_op.rotated[0].dtype


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


def check_operator(op: Operator, backend_names: tuple[str, ...] | None = None, seed: int = 0) -> list[Row]:
    rows: list[Row] = []
    dtype = _storage_dtype(op)
    for b in backends.BACKENDS:
        if backend_names is not None and b.name not in backend_names:
            continue
        why = b.unavailable()
        if why:
            rows.append(Row(op.name, b.name, dtype.name, "-", float("nan"), float("nan"), True, f"skipped: {why}"))
            continue
        for i, case in enumerate(CASES):
            try:
                arrays = make_inputs(op.ir, case, seed=seed + i)
                ref = reference.evaluate(op.ir, arrays)
            except (ValueError, IndexError, OverflowError) as exc:
                rows.append(Row(op.name, b.name, dtype.name, case.label, float("inf"), float("inf"), False,
                                f"no valid inputs: {exc}"))
                continue
            try:
                outs = op.run_all(*[arrays[n] for n in op.inputs], backend=b.name)
            except Exception as exc:  # a backend failure is a check failure, reported as a row
                rows.append(Row(op.name, b.name, dtype.name, case.label, float("inf"), float("inf"), False,
                                f"error: {type(exc).__name__}: {exc}"))
                continue
            magnitude = max(float(np.max(np.abs(np.asarray(a, dtype=np.float64)))) if a.size and a.dtype.kind == "f"
                            else 0.0 for a in arrays.values())
            worst = (0.0, 0.0, True)
            for name, out in zip(op.outputs, outs):
                m_abs, m_rel, ok = compare(out, ref[name], dtype, magnitude)
                worst = (max(worst[0], m_abs), max(worst[1], m_rel), worst[2] and ok)
            rows.append(Row(op.name, b.name, dtype.name, case.label, *worst))
    return rows


def format_table(rows: list[Row]) -> str:
    head = ("operator", "backend", "dtype", "case", "max abs err", "max rel err", "ok")
    body = []
    for r in rows:
        if r.note.startswith("skipped"):
            body.append((r.operator, r.backend, r.dtype, r.case, "-", "-", r.note))
            continue
        body.append((r.operator, r.backend, r.dtype, r.case, f"{r.max_abs:.3g}", f"{r.max_rel:.3g}",
                     ("ok" if r.ok else "MISMATCH") + (f" ({r.note})" if r.note else "")))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(head, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in body]
    return "\n".join(lines)
