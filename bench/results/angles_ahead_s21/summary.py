"""Each run's fraction of the copy (ratio) for every row of the bench's table, runs side by side.
Usage: python summary.py FILE... (from this folder: python summary.py old_1t_1.txt main_1t_2.txt ...)"""
import re
import sys

ROW = re.compile(r"^(\S+)\s+.*?(T=\d+),N=\d+\s+(out of place|in place)\s+(\d+)\s+\S+\s+\S+\s+([\d.]+)\s+([\d.]+)\s+\S+\s+"
                 r"[\d.]+\s+[\d.]+\s+([\d.]+)\s+\S+\s+(?:[\d.]+ / [\d.]+ / [\d.]+|-)\s+([\d.]+)")
table = {}
for f in sys.argv[1:]:
    for line in open(f):
        m = ROW.match(line)
        if m:
            op, shape, mode, thr, tmin, tmed, copy, ratio = m.groups()
            table.setdefault((op, shape, mode), {})[f] = (float(tmin), float(ratio))
print("row".ljust(48) + "".join(f.removesuffix(".txt").rjust(18) for f in sys.argv[1:]))
for key, runs in table.items():
    print(" ".join(key).ljust(48) + "".join((f"{runs[f][0]:9.0f} {runs[f][1]:5.2f}" if f in runs else "-").rjust(18)
                                            for f in sys.argv[1:]))
