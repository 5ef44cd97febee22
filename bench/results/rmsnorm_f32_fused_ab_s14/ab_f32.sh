# The A/B behind a5afb6b (the fused row loop for f32 RMSNorm), as run: the real bench of RMSNorm [N, 4096]
# f32 alone (f32.rope: rmsnorm rmsnorm_4096_f32 { in x: f32[N, 4096]  in scale: f32[4096]  out y }), the
# working tree (new) alternated with HEAD's templates (old, 2c5283e, the kernels of 5626e54: `git stash`), ROUNDS
# rounds, the variant forced by ROPEGEN_ISA, at THREADS threads. Prints: ISA/threads, variant, shape,
# min us, GB/s, copy GB/s, fraction of the copy.
# usage: bash ab_f32.sh ROUNDS ISA THREADS
cd /work/main
for round in $(seq $1); do
  for v in new old; do
    if [ $v = old ]; then git stash -q; fi
    ROPEGEN_ISA=$2 PYTHONPATH=. python -m ropegen.cli bench /tmp/s14/f32.rope --backend c --threads $3 --repeats 10 --shape N=4096 --shape N=16384 -q 2>/dev/null | grep "^rmsnorm" | awk -v v=$v -v i=$2 -v t=$3 '{print i"/"t"t", v, $3, $10, $14, $15, $20}'
    if [ $v = old ]; then git stash pop -q; fi
  done
done
