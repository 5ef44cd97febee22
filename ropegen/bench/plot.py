"""`ropegen bench --plot FILE.png`: GB/s against the token count T for ropegen, its peers and the copy
yardstick, one panel per operator and mode, so a user sees at a glance where each stands (matplotlib,
from the `bench` extra)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from ropegen.bench.harness import DECODE_TOKENS


# ropegen and the copy keep their colors; the peers take the rest in name order, the same in every panel
FIXED = {"ropegen": "tab:red", "copy": "grey"}
PALETTE = ("tab:green", "tab:blue", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


class MissingPlotter(RuntimeError):
    """matplotlib is not installed (the message says which extra brings it)."""


def _tokens(rec: dict[str, Any]) -> int | None:
    """The record's token count: its T (or N for RMSNorm rows), None when the shape names neither."""
    sizes = rec.get("sizes") or {}
    for key in ("T", "N"):
        if key in sizes:
            return int(sizes[key])
    return None


def series(results: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, list[tuple[int, float]]]]:
    """(operator, mode) -> line name -> [(T, GB/s)] sorted by T: 'ropegen', each peer that ran, 'copy'."""
    out: dict[tuple[str, str], dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        t = _tokens(r)
        if t is None:
            continue
        lines = out[(r["operator"], r["mode"])]
        lines["ropegen"].append((t, r["gbps"]))
        lines["copy"].append((t, r["yardstick"]["gbps"]))
        for name, peer in r.get("peers", {}).items():
            if "gbps" in peer:
                lines[name].append((t, peer["gbps"]))
    return {k: {name: sorted(pts) for name, pts in v.items()} for k, v in out.items()}


def plot(results: list[dict[str, Any]], path: str) -> int:
    """Draw the results into `path` (PNG, SVG, PDF: by its suffix); returns the number of panels."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingPlotter("--plot needs matplotlib: pip install 'ropegen[bench]'") from None
    panels = series(results)
    peers = sorted({name for lines in panels.values() for name in lines} - set(FIXED))
    colors = {**{name: PALETTE[i % len(PALETTE)] for i, name in enumerate(peers)}, **FIXED}
    if not panels:
        raise ValueError("--plot needs results at several token counts: give --shape T=... (and N=... for RMSNorm)")
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, ((op, mode), lines) in zip(axes.flat, sorted(panels.items())):
        for name, pts in sorted(lines.items()):
            xs, ys = zip(*pts)
            style = dict(linestyle="--") if name == "copy" else {}
            ax.plot(xs, ys, marker="o", label=name, color=colors[name], **style)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{op} ({mode.replace('_', ' ')})", fontsize=9)
        # decode sizes are timed hot (data cached), larger ones cold (from memory): say where it changes
        ax.set_xlabel(f"tokens (hot up to {DECODE_TOKENS}, cold above)")
        ax.set_ylabel("GB/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return len(panels)
