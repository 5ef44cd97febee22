"""`ropegen check`: every available backend against the float64 reference, on random inputs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ropegen import backends, ops
from ropegen.ops import reference
from ropegen.api import Operator
from ropegen.ops.inputs import CASES, case_bytes, make_inputs
from ropegen.runtime.memory import format_bytes, limit_hint, memory_limit

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


def operand_magnitude(arrays: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> float:
    """The operands' size for compare(): the largest float input or reference output (a fused
    rmsnorm's normalized heads, which the rotation reads, can be larger than any input)."""
    return max((float(np.max(np.abs(np.asarray(a, dtype=np.float64)))) if a.size and a.dtype.kind == "f"
                else 0.0 for a in [*arrays.values(), *ref.values()]), default=0.0)


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
                   limit: int | None = None, on_backend: Callable[[str], None] | None = None) -> list[Row]:
    """One row per backend and case. A backend that cannot run here gives one SKIPPED row; a case whose
    arrays would need more than `limit` bytes (default: memory_limit()) gives a NOT_RUN row per backend
    instead of allocating them. `on_backend(name)` is called as each runnable backend starts (progress)."""
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
    too_large = {}
    for case in CASES:
        need = case_bytes(op.ir, case)
        if need > limit:
            too_large[case.label] = (f"not run: too large to test here: needs about {format_bytes(need)}, "
                                     f"limit {format_bytes(limit)}")
    for b in runnable:
        if on_backend is not None:
            on_backend(b.name)
        for i, case in enumerate(CASES):
            if case.label in too_large:
                rows.append(Row(op.name, b.name, dtype.name, case.label, float("nan"), float("nan"), False,
                                too_large[case.label], NOT_RUN))
                continue
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
            magnitude = operand_magnitude(arrays, ref)
            worst = (0.0, 0.0, True)
            for name, out in zip(op.outputs, outs):
                m_abs, m_rel, ok = compare(out, ref[name], dtype, magnitude)
                worst = (_larger(worst[0], m_abs), _larger(worst[1], m_rel), worst[2] and ok)
            rows.append(Row(op.name, b.name, dtype.name, case.label, *worst))
    return rows


def _larger(a: float, b: float) -> float:
    """max that keeps a NaN (Python's max drops one that comes second: NaN compares false)."""
    return a if a != a or b < a else b


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


class BackendUnavailable(ValueError):
    """A backend named for the check that cannot run here: an error, not a skip."""

    def __init__(self, backend: str, why: str):
        super().__init__(f"backend '{backend}' cannot run here: {why}")
        self.backend, self.why = backend, why


def select_backends(asked: str | None) -> tuple[tuple[str, ...], dict[str, str]]:
    """(backends to run, skipped backend -> why) for `--backend asked`: the named ones, each able to run
    (ValueError for an unknown name, BackendUnavailable for one that cannot run), else every backend
    that can run here."""
    if not asked:
        why = {b.name: b.unavailable() for b in backends.BACKENDS}
        return tuple(n for n, w in why.items() if not w), {n: w for n, w in why.items() if w}
    wanted = tuple(dict.fromkeys(b.strip() for b in asked.split(",")))
    for b in wanted:
        if b not in backends.names():
            raise ValueError(f"unknown backend '{b}'; backends: {', '.join(backends.names())}")
    for b in wanted:
        why = backends.get(b).unavailable()
        if why:
            raise BackendUnavailable(b, why)
    return wanted, {}


# ---------------------------------------------------------------------------------------------
# the report: a table that fits WIDTH columns, and the same facts as one JSON document

WIDTH = 100
SCHEMA_VERSION = 1
# column caps: with two spaces between columns the table stays within WIDTH (the full values are in --json)
_CAPS = (("operator", 29), ("backend", 7), ("dtype", 6), ("case", 10), ("max abs err", 11), ("max rel err", 11),
         ("result", 14))
_STATUS = {RAN: "passed", SKIPPED: "skipped", NOT_RUN: "not_run"}


def _fit(text: str, width: int) -> str:
    """`text` in at most `width` characters: the middle elided, so that both ends stay readable."""
    if len(text) <= width:
        return text
    keep = width - 3
    return text[:(keep + 1) // 2] + "..." + text[len(text) - keep // 2:]


def _wrap(text: str, indent: str, pad: str | None = None) -> list[str]:
    """`text` wrapped to WIDTH columns, its first line after `indent`, the others after `pad` (default:
    aligned under the first); long words broken, nothing dropped."""
    import textwrap
    out: list[str] = []
    pad = " " * len(indent) if pad is None else pad
    for line in text.splitlines() or [""]:
        out += textwrap.wrap(line, WIDTH, initial_indent=pad if out else indent, subsequent_indent=pad,
                             break_on_hyphens=False) or [(pad if out else indent).rstrip()]
    return out


def _number(x: float) -> str:
    return f"{x:.3g}"


def format_table(rows: list[Row]) -> str:
    """The rows as a table of at most WIDTH columns; each note is a reference [n] there, in full below."""
    notes: list[str] = []

    def ref(note: str) -> str:
        note = note.strip()
        if not note:
            return ""
        if note not in notes:
            notes.append(note)
        return f" [{notes.index(note) + 1}]"

    body = []
    for r in rows:
        if r.status != RAN:
            result, errs = ("not run" if r.status == NOT_RUN else "skipped"), ("-", "-")
        else:
            result, errs = ("ok" if r.ok else "MISMATCH"), (_number(r.max_abs), _number(r.max_rel))
        body.append((r.operator, r.backend, r.dtype, r.case, *errs, result + ref(r.note)))
    heads = tuple(h for h, _ in _CAPS)
    body = [tuple(_fit(v, cap) for v, (_, cap) in zip(row, _CAPS)) for row in body]
    widths = [max(len(v) for v in col) for col in zip(heads, *body)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(heads, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in body]
    if notes:
        lines += ["", "notes:"]
        for i, note in enumerate(notes, 1):
            lines += _wrap(note, f"  [{i}] ")
    return "\n".join(lines)


@dataclass
class Report:
    """Everything one `ropegen check` found: rows per checked operator, and the backends skipped."""

    backends: tuple[str, ...]                       # the backends run
    skipped: dict[str, str]                         # backend -> why it cannot run here
    checked: list[tuple[str, Operator, list[Row]]]  # (spec file, operator, its rows)
    seed: int = 0
    limit: int = 0

    @property
    def rows(self) -> list[Row]:
        return [r for _, _, rows in self.checked for r in rows]

    def counts(self) -> dict[str, int]:
        ran = [r for r in self.rows if r.status == RAN]
        return {"passed": sum(r.ok for r in ran), "failed": sum(not r.ok for r in ran),
                "not_run": sum(r.status == NOT_RUN for r in self.rows)}

    def exit_code(self) -> int:
        """1 on any mismatch (it outranks cases not run); 2 when a case could not run or nothing ran."""
        n = self.counts()
        return 1 if n["failed"] else 2 if n["not_run"] or not n["passed"] else 0

    def errors(self) -> list[str]:
        """Why the check is incomplete, for stderr."""
        n = self.counts()
        if n["not_run"]:
            names = ", ".join(dict.fromkeys(r.operator for r in self.rows if r.status == NOT_RUN))
            return [f"{n['not_run']} case(s) not run ({names}): the spec's fixed sizes are too large to test in "
                    f"{format_bytes(self.limit)} ({limit_hint()})"]
        if not n["passed"] and not n["failed"]:
            return ["nothing was checked: " + ("no backend can run here" if not self.backends
                                               else "the specs have no operators")]
        return []

    def text(self) -> str:
        """The table, the skipped backends and the summary line, each line within WIDTH columns."""
        rows, n = self.rows, self.counts()
        parts = [format_table(rows)] if rows else []
        if self.skipped:
            parts.append("\n".join(["skipped backends (cannot run here):"]
                                   + [ln for b, why in self.skipped.items() for ln in _wrap(f"{b}: {why}", "  ", "      ")]))
        summary = f"{n['passed']} passed, {n['failed']} failed" + (f", {n['not_run']} not run" if n["not_run"] else "")
        if self.skipped:
            summary += f"; skipped backends: {', '.join(self.skipped)}"
        parts.append("\n".join(_wrap(summary, "")))
        return "\n\n".join(parts)

    def document(self, exit_code: int) -> dict:
        """The report as JSON-ready data (docs: the `ropegen check --json` schema, version SCHEMA_VERSION)."""
        from ropegen import __version__
        return {"schema_version": SCHEMA_VERSION, "command": "check", "ropegen_version": __version__,
                "seed": self.seed, "memory_limit_bytes": self.limit, "backends": list(self.backends),
                "skipped_backends": [{"backend": b, "reason": why} for b, why in self.skipped.items()],
                "operators": [self._operator(spec, op, rows) for spec, op, rows in self.checked],
                "summary": {**self.counts(), "exit_code": exit_code}}

    def _operator(self, spec: str, op: Operator, rows: list[Row]) -> dict:
        dtype = _storage_dtype(op)
        by_backend: dict[str, list[Row]] = {}
        for r in rows:
            by_backend.setdefault(r.backend, []).append(r)
        results = [_backend_result(b, by_backend[b]) for b in by_backend]
        results += [{"backend": b, "status": "skipped", "reason": why, "cases_run": 0, "cases_total": 0,
                     "max_abs_error": None, "max_rel_error": None, "cases": []}
                    for b, why in self.skipped.items() if b not in by_backend]
        return {"spec": spec, "operator": op.name, "kind": op.ir.kind,
                "tolerance": {"dtype": dtype.name, "rtol": dtype.rtol, "atol": dtype.atol,
                              "rule": "|out - ref| <= rtol * |ref| + atol * max(1, magnitude)"},
                "backends": results}


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


def _case(r: Row) -> dict:
    status = _STATUS[r.status] if r.status != RAN or r.ok else "failed"
    note = r.note.strip() or None
    if status == "failed" and note is None and not np.isfinite(r.max_abs):
        note = "the error is not finite: the output has NaN or infinite values, or the wrong shape"
    return {"case": r.case, "status": status, "max_abs_error": _finite(r.max_abs),
            "max_rel_error": _finite(r.max_rel), "note": note}


def _backend_result(backend: str, rows: list[Row]) -> dict:
    """One operator on one backend: failed if any case failed, else not_run if any case could not
    run, else passed (skipped: the backend cannot run here)."""
    cases = [_case(r) for r in rows]
    statuses = [c["status"] for c in cases]
    status = next((s for s in ("skipped", "failed", "not_run") if s in statuses), "passed")
    reason = next((c["note"] for c in cases if c["status"] == status and c["note"]), None)
    if status == "failed" and reason is None:
        reason = "the error exceeds the tolerance"
    ran = [r for r in rows if r.status == RAN]
    errs = [(r.max_abs, r.max_rel) for r in ran]
    return {"backend": backend, "status": status, "reason": reason, "cases_run": len(ran),
            "cases_total": sum(r.status != SKIPPED for r in rows),
            "max_abs_error": _worst([e[0] for e in errs]), "max_rel_error": _worst([e[1] for e in errs]),
            "cases": cases}


def _worst(errors: list[float]) -> float | None:
    """The largest error; None when none was measured or one is not finite (NaN does not order)."""
    return max(errors) if errors and all(np.isfinite(errors)) else None
