"""Writes each kernel's loop body (the first backward jump's range) of step.s to <function>.s."""
import re
import sys

lines = open(sys.argv[1]).read().split("\n")
for fn in ("k_split", "k_carry"):
    start = next(k for k, line in enumerate(lines) if line.startswith(fn + ":"))
    labels = {}
    for k in range(start, len(lines)):
        m = re.match(r"^(\.L\d+):", lines[k])
        if m:
            labels[m.group(1)] = k
        j = re.match(r"\s+j\w+\s+(\.L\d+)", lines[k])
        if j and j.group(1) in labels and labels[j.group(1)] < k:
            body = [x for x in lines[labels[j.group(1)] + 1:k + 1] if x.startswith("\t") and not x.startswith("\t.")]
            open(fn + ".s", "w").write("\n".join(body) + "\n")
            break
