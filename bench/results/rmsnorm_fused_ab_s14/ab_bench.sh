# The A/B behind 2f53bb6 (the fused RMSNorm row loop), as run: the real bench of RMSNorm [N, 4096]
# bf16 alone (bf16.rope below), alternating the kernel before the commit (old: `git stash` of the
# working tree, run at fa373e3's templates) and after it (new), ROUNDS times, at THREADS threads.
# Prints: variant, shape, min us, GB/s, copy GB/s, fraction of the copy.
# usage: bash ab_bench.sh ROUNDS THREADS   (from a checkout holding the new templates uncommitted)
# bf16.rope:
#   rmsnorm rmsnorm_4096_bf16 {
#       in x:     bf16[N, 4096]
#       in scale: bf16[4096]
#       out y
#   }
cd /work/main
for round in $(seq $1); do
  for v in new old; do
    if [ $v = old ]; then git stash -q; fi
    PYTHONPATH=. python -m ropegen.cli bench /tmp/s14/bf16.rope --backend c --threads $2 --repeats 10 --shape N=4096 --shape N=16384 -q --json /tmp/s14/ab_${v}_$2t_$round.json > /tmp/s14/ab_${v}_$2t_$round.txt 2>&1
    if [ $v = old ]; then git stash pop -q; fi
    grep "^rmsnorm_4096_bf16" /tmp/s14/ab_${v}_$2t_$round.txt | awk -v v=$v '{print v, $3, $10, $14, $15, $20}'
  done
done
