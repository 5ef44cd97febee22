# llvm-mca's estimate of the AVX2 fused RMSNorm bf16 loop (step.c: the next row's sum and one step of 16
# values, by the split and by the carry form, as rmsnorm.c.j2 prints them) on CPUs this host is not.
# GCC 12, LLVM 14 (whose alderlake / sapphirerapids models are Skylake's: not listed).
set -e
gcc -O3 -mavx2 -ffp-contract=off -S -o step.s step.c
python3 extract.py step.s          # writes k_split.s, k_carry.s: each function's loop body
for fn in k_split k_carry; do
  for cpu in haswell skylake znver2 znver3; do
    printf '%s %s ' "$fn" "$cpu"
    llvm-mca -mcpu=$cpu -iterations=300 $fn.s | awk '/Total Cycles/ {printf "%.2f cycles / 16 values\n", $3 / 300}'
  done
done
