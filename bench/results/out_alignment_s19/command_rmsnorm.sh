#!/bin/sh
# before: 6206ac7 (a worktree at /tmp/s19/pre); after: 904ce80. Alternated.
for t in before after before after; do
  if [ $t = before ]; then P=/tmp/s19/pre; else P=.; fi
  echo "== $t"; PYTHONPATH=$P python bench/results/out_alignment_s19/rmsnorm.py
done
