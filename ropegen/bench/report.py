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


def format_results(results: list[dict[str, Any]]) -> str:
    """A table: one line per operator, shape and mode; peers as GB/s (how many times slower)."""
    head = ("operator", "dtype", "shape", "mode", "thr", "min ms", "med ms", "MB", "GB/s", "copy GB/s",
            "ratio") + tuple(HOST_PEERS)
    rows = []
    for r in results:
        rows.append((r["operator"], r["dtype"], r["shape"], r["mode"].replace("_", " "), str(r["threads"]),
                     f"{r['time_min_s'] * 1e3:.2f}", f"{r['time_median_s'] * 1e3:.2f}",
                     f"{r['bytes'] / 1e6:.1f}", f"{r['gbps']:.1f}",
                     f"{r['yardstick']['gbps']:.1f} {'cp' if r['yardstick']['kind'] == 'memcpy' else 'sc'}",
                     f"{r['ratio_to_copy']:.2f}") + tuple(_fmt_peer(r, name) for name in HOST_PEERS))
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
    lines.append("GB/s = bytes read + written / min time; copy = memcpy (out of place) or in-place scale (sc) of the "
                 "same bytes with the same threads; ratio = copy time / kernel time; peers: GB/s (speedup of "
                 "ropegen over them).")
    return "\n".join(lines)

