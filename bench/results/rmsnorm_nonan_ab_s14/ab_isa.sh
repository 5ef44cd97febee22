# The A/B behind 5626e54 (RMSNorm bf16 fast rows' pair stores without the NaN compare), as run:
# the real bench of RMSNorm [4096, 4096] bf16 alone (bf16.rope: see ../rmsnorm_fused_ab_s14/ab_bench.sh),
# one thread, one instruction-set variant forced by ROPEGEN_ISA, the working tree (new) alternated
# with HEAD's templates (old, 3a6f13d: `git stash`). Prints: ISA, variant, shape, min us, GB/s,
# copy GB/s, fraction of the copy.
# usage: bash ab_isa.sh ROUNDS ISA
cd /work/main
for round in $(seq $1); do
  for v in new old; do
    if [ $v = old ]; then git stash -q; fi
    ROPEGEN_ISA=$2 PYTHONPATH=. python -m ropegen.cli bench /tmp/s14/bf16.rope --backend c --threads 1 --repeats 10 --shape N=4096 -q 2>/dev/null | grep "^rmsnorm" | awk -v v=$v -v i=$2 '{print i, v, $3, $10, $14, $15, $20}'
    if [ $v = old ]; then git stash pop -q; fi
  done
done
