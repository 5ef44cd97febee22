#!/bin/sh
# Session 20 (#13): the store helpers' `how` (61e1faa) and the AVX-512 dealt rounding (5ccb2f5), before
# (OLD: a tree at 7572938, s19's last commit) and after (NEW: a tree at this session's commits), in C
# harnesses that alternate both builds in one process (k0 = OLD, k1 = NEW; each min of the reps).
#   usage: sh command.sh OLD_TREE NEW_TREE > output.txt      (run from this folder)
# RoPE: llama3 q + k (the bench suite's llama3_8b_<dt>), one thread, T = 16 in cache (HOT) or T = 4096
# from memory (after reading 256 MiB), in place (IP) or not, inputs and outputs OFF bytes past a page
# (NumPy puts a large array 16 bytes past one); the in-place rows also time an in-place pass over the same
# bytes (yard). ROPEGEN_ISA picks the variant. The RoPE harness is ../angles_ahead_s21/rope_ab.c (this
# folder's own copy, the same but for the TH thread count it later gained, was merged into it: its lines now
# also print th=1). RMSNorm: [16, 4096] f32 and bf16 in cache.
set -e
OLD=$1; NEW=$2; W=$(mktemp -d)
# both builds as ropegen builds kernels since fca4902: its pinned flags and the assembler's branch padding
FLAGS="-std=c11 -O3 -ffp-contract=off -fno-math-errno -fno-fast-math -Wa,-mbranches-within-32B-boundaries"
for side in OLD NEW; do
  eval tree=\$$side
  (cd "$W" && PYTHONPATH="$tree" python -c "
from ropegen.bench.suites import LLAMA3_SUITE
open('suite_f32.rope','w').write(LLAMA3_SUITE.format(dt='f32'))
open('suite_bf16.rope','w').write(LLAMA3_SUITE.format(dt='bf16'))" &&
   PYTHONPATH="$tree" python -m ropegen.cli compile suite_f32.rope suite_bf16.rope "$tree/bench/llama3_f16.rope" -o "$W/$side" -q >/dev/null)
done
i=0
for side in OLD NEW; do
  for k in suite_bf16/c/llama3_8b_bf16 llama3_f16/c/llama3_8b_f16 suite_f32/c/llama3_8b_f32 suite_f32/c/rmsnorm_4096_f32 suite_bf16/c/rmsnorm_4096_bf16; do
    fn=ropegen_$(basename $k)
    gcc -c $FLAGS -I"$W/$side/$(dirname $k)" -D$fn=k$i -D${fn}_words=k${i}_words "$W/$side/$k.c" -o "$W/$(basename $k)_$i.o"
  done
  i=1
done
gcc -O2 -DNK=2 -DESZ=2 ../angles_ahead_s21/rope_ab.c "$W/llama3_8b_bf16_0.o" "$W/llama3_8b_bf16_1.o" -lm -o "$W/bf16"
gcc -O2 -DNK=2 -DESZ=2 ../angles_ahead_s21/rope_ab.c "$W/llama3_8b_f16_0.o" "$W/llama3_8b_f16_1.o" -lm -o "$W/f16"
gcc -O2 -DNK=2 -DESZ=4 ../angles_ahead_s21/rope_ab.c "$W/llama3_8b_f32_0.o" "$W/llama3_8b_f32_1.o" -lm -o "$W/f32"
gcc -O2 -DESZ=4 rms_ab.c "$W/rmsnorm_4096_f32_0.o" "$W/rmsnorm_4096_f32_1.o" -lm -o "$W/rms_f32"
gcc -O2 -DESZ=2 rms_ab.c "$W/rmsnorm_4096_bf16_0.o" "$W/rmsnorm_4096_bf16_1.o" -lm -o "$W/rms_bf16"
grep -m1 "model name" /proc/cpuinfo
for round in 1 2; do
  for isa in avx512 avx2; do
    for dt in bf16 f16 f32; do
      for m in "IP=1 OFF=16" "IP=1 OFF=0" "OFF=16" "OFF=0"; do
        echo "RoPE $dt $isa $m: $(env ROPEGEN_ISA=$isa HOT=1 $m "$W/$dt" 16 3000)"
      done
      echo "RoPE $dt $isa IP=1 OFF=16: $(env ROPEGEN_ISA=$isa IP=1 OFF=16 "$W/$dt" 4096 6)"
    done
    for dt in f32 bf16; do
      for m in "IP=1 OFF=16" "IP=1 OFF=0" "OFF=16" "OFF=0" "IP=1 OFF=0 FIRST=1" "OFF=0 FIRST=1"; do
        echo "RMSNorm $dt $isa $m: $(env ROPEGEN_ISA=$isa $m "$W/rms_$dt" 16 3000)"
      done
    done
  done
done
rm -rf "$W"
