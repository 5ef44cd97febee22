"""The host bench's results as a table: one line per operator, shape and mode; peers as GB/s (speedup)."""
from __future__ import annotations

from typing import Any

from ropegen.bench.peers import HOST_PEERS


def _fmt_peer(rec: dict[str, Any], name: str) -> str:
    peer = rec["peers"].get(name)
    if peer is None:
        return "-"
    if "error" in peer:
        return "n/a"
    return f"{peer['gbps']:.1f} ({peer['speedup']:.1f}x)"


# the table's short names of the yardstick copies
_TAGS = {"memcpy": "cp", "stream": "nt", "stream_ahead": "pf", "scale": "sc"}


def _used(y: dict[str, Any]) -> str:
    """The copy a row was set beside (results from before the non-temporal copy name only the kind)."""
    return y.get("used", y["kind"])


def _fmt_copies(y: dict[str, Any]) -> str:
    """memcpy's and the non-temporal copies' GB/s side by side (cp / nt / pf), where the row timed them
    (results from before the copy that fetches ahead have cp / nt)."""
    copies = y.get("copies", {})
    if "memcpy" not in copies or "stream" not in copies:
        return "-"
    names = [name for name in ("memcpy", "stream", "stream_ahead") if name in copies]
    return " / ".join(f"{copies[name]['gbps']:.1f}" for name in names)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def _fmt_bound(r: dict[str, Any]) -> str:
    """The bound call's min time in us (decode rows: the row's own time is the whole op.run call)."""
    bound = r.get("bound")
    return _us(bound["time_min_s"]) if bound else "-"


def format_results(results: list[dict[str, Any]]) -> str:
    """A table: one line per operator, shape and mode; peers as GB/s (how many times slower)."""
    head = ("operator", "dtype", "shape", "mode", "thr", "call", "cache", "min us", "med us", "bound us", "MB", "GB/s",
            "copy GB/s", "cp / nt / pf GB/s", "ratio") + tuple(HOST_PEERS)
    rows = []
    for r in results:
        rows.append((r["operator"], r["dtype"], r["shape"], r["mode"].replace("_", " "), str(r["threads"]),
                     r.get("call", "bound"), r.get("cache", "-"), _us(r["time_min_s"]), _us(r["time_median_s"]),
                     _fmt_bound(r),
                     f"{r['bytes'] / 1e6:.1f}", f"{r['gbps']:.1f}",
                     f"{r['yardstick']['gbps']:.1f} {_TAGS.get(_used(r['yardstick']), '?')}",
                     _fmt_copies(r['yardstick']), f"{r['ratio_to_copy']:.2f}") + tuple(_fmt_peer(r, name) for name in HOST_PEERS))
    widths = [max(len(x) for x in col) for col in zip(head, *rows)] if rows else [len(h) for h in head]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    notes = sorted({f"{name}: {peer['error']}" for r in results for name, peer in r["peers"].items()
                    if "error" in peer})
    if notes:
        lines.append("")
        lines.append("peer notes (n/a):")
        lines += [f"  {n}" for n in notes]
    setups = sorted({f"{name}: {peer['note']}" for r in results for name, peer in r["peers"].items()
                     if "note" in peer})
    if setups:
        lines.append("")
        lines.append("peer setup:")
        lines += [f"  {n}" for n in setups]
    lines.append("")
    lines.append("call: whole = the user's op.run with NumPy arrays, timed as a whole (decode sizes, where the "
                 "Python call is what a user feels; onnxruntime: its whole session.run), the bound call "
                 "(op.bind) beside it; bound = the pre-bound kernel call (ggml: a pre-built graph compute, "
                 "always).")
    lines.append("cache: cold = every timed call (kernel, copies, peers) right after a read of a buffer twice the "
                 "last-level cache, so each starts from memory (prefill sizes); hot = right after an untimed call "
                 "of itself (decode sizes, whose data a served model finds cached).")
    lines.append("GB/s = bytes read + written / min time; copy = the fastest of memcpy (cp), a non-temporal copy "
                 "(nt) and a non-temporal copy fetching its source ahead into the L2 (pf) out of place, all timed in "
                 "the run (cp / nt / pf), or an in-place scale (sc), of the same bytes with the same threads; "
                 "ratio = copy time / kernel time; peers: GB/s (speedup of ropegen over them, each peer timed in "
                 "rounds alternating with ropegen's call).")
    return "\n".join(lines)

