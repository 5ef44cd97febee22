#!/bin/sh
# Usage: sh command.sh OLD_TREE NEW_TREE ROUNDS  (each tree a checkout of ropegen)
# RMSNorm [4096, 4096], DTYPES (default "bf16 f32"), TH threads (default 1), before (OLD) / after (NEW),
# alternated in one process by rms_place_ab.c (beside this script; CASES=placement or split, see its
# comment), for the default variant and the AVX2 one.
set -e
OLD=$1 NEW=$2 R=${3:-6}
HERE=$(cd "$(dirname "$0")" && pwd)
FLAGS="-std=c11 -O3 -ffp-contract=off -fno-math-errno -fno-fast-math -fopenmp"
W=$(mktemp -d)
for t in OLD NEW; do
  eval tree=\$$t
  (cd "$tree" && PYTHONPATH=. python -m ropegen.cli compile bench/rmsnorm_4096.rope -o "$W/$t" -q >/dev/null)
done
for dt in ${DTYPES:-bf16 f32}; do
  esz=2; [ $dt = f32 ] && esz=4
  f=rmsnorm_4096_$dt
  gcc $FLAGS -I"$W/OLD/rmsnorm_4096/c" -c "$W/OLD/rmsnorm_4096/c/$f.c" -Dropegen_$f=k0 -Dropegen_${f}_words=k0w -o "$W/k0.o"
  gcc $FLAGS -I"$W/NEW/rmsnorm_4096/c" -c "$W/NEW/rmsnorm_4096/c/$f.c" -Dropegen_$f=k1 -Dropegen_${f}_words=k1w -o "$W/k1.o"
  gcc -O2 -std=c11 -fopenmp "$HERE/rms_place_ab.c" "$W/k0.o" "$W/k1.o" -lm -o "$W/ab_$dt"
  for isa in "" avx2; do
    echo "== $dt ROPEGEN_ISA=${isa:-default}"
    ROPEGEN_ISA=$isa ESZ=$esz TH=${TH:-1} "$W/ab_$dt" 4096 "$R"
  done
done
rm -rf "$W"
