# RMSNorm rows, the AVX2 variant, one thread: the tree before the split (ae1355d, a git worktree) and after
# it (1a69a12), run one after the other on the same host (after first, then before)
for tree in "$AFTER" "$BEFORE"; do
  (cd "$tree" && ROPEGEN_ISA=avx2 PYTHONPATH=. python -m ropegen.cli bench bench/rmsnorm_4096.rope --backend c \
     --threads 1 --repeats 10 --shape N=4096 --shape N=16384 -q --json out.json)
done
