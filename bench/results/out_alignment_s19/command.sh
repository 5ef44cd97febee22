#!/bin/sh
# before: aa151d5 (a worktree at /tmp/s19/pre); after: a1a32c0. Alternated.
for t in before after before after; do
  if [ $t = before ]; then P=/tmp/s19/pre; else P=.; fi
  echo "== $t"; PYTHONPATH=$P python bench/results/out_alignment_s19/prefill_f32.py
done
