# RMSNorm rows, the AVX2 variant, one thread: the tree before the split (ae1355d, a git worktree) and after
# it (1a69a12), run one after the other on the same host (after first, then before)
for tree in "$AFTER" "$BEFORE"; do
  (cd "$tree" && ROPEGEN_ISA=avx2 PYTHONPATH=. python -m ropegen.cli bench bench/rmsnorm_4096.rope --backend c \
     --threads 1 --repeats 10 --shape N=4096 --shape N=16384 -q --json out.json)
done

# rows_8_16_64_{old,new}_{avx2_1,avx2_2,avx512}: calls of 8, 16 and 64 rows (in cache; the bench times the whole
# Python call), old = ae1355d, new = f533fb3, each pair one after the other
for isa in avx2 avx512; do
  (cd "$TREE" && ROPEGEN_ISA=$isa PYTHONPATH=. python -m ropegen.cli bench bench/rmsnorm_4096.rope --backend c \
     --threads 1 --repeats 20 --shape N=8 --shape N=16 --shape N=64 -q --json out.json)
done

# two_threads_{after_f533fb3,before_ae1355d}: the first command with --threads 2, after first, then before
