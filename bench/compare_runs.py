"""Compare interleaved `ropegen bench --json` runs of two trees: min time per row over the runs of each
side, median ratio to the copy yardstick, and the geometric mean of new/old ratio-to-copy.

    python bench/compare_runs.py --old old1.json old2.json --new new1.json new2.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics


def _rows(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    rows = data["results"] if isinstance(data, dict) else data
    return {(r["operator"], str(r.get("positions")), r["mode"]): r for r in rows}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", nargs="+", required=True)
    ap.add_argument("--new", nargs="+", required=True)
    a = ap.parse_args(argv)
    old, new = [_rows(p) for p in a.old], [_rows(p) for p in a.new]
    keys = [k for k in old[0] if k in new[0]]
    # rows timed hot (each call after the one before it: files before issue13_s10) and cold (after the
    # cache flush) are not comparable where the data fits the last-level cache
    mixed = sorted({k[0] for k in keys for side in (old, new) for run in side
                    if run[k].get("cache", "hot") != old[0][k].get("cache", "hot")})
    if mixed:
        raise SystemExit(f"compare_runs: rows timed hot beside rows timed cold ({', '.join(mixed)}); "
                         f"compare runs of one kind (JSON 'cache'; none = hot)")
    print(f"{'operator':24s} {'positions':9s} {'mode':13s} {'old ms':>7s} {'new ms':>7s} "
          f"{'old ratio':>9s} {'new ratio':>9s}  new/old")
    logs = []
    for k in keys:
        om = min(o[k]["time_min_s"] for o in old) * 1e3
        nm = min(n[k]["time_min_s"] for n in new) * 1e3
        orat = statistics.median(o[k]["ratio_to_copy"] for o in old)
        nrat = statistics.median(n[k]["ratio_to_copy"] for n in new)
        logs.append(math.log(nrat / orat))
        print(f"{k[0]:24s} {k[1][:9]:9s} {k[2]:13s} {om:7.2f} {nm:7.2f} {orat:9.2f} {nrat:9.2f}  x{nrat / orat:.2f}")
    print(f"geomean new/old ratio to copy: x{math.exp(sum(logs) / len(logs)):.3f} "
          f"(min x{math.exp(min(logs)):.2f}, max x{math.exp(max(logs)):.2f}) over {len(keys)} rows; "
          f"bytes moved identical: {all(old[0][k]['bytes'] == new[0][k]['bytes'] for k in keys)}")


if __name__ == "__main__":
    main()
