#!/bin/sh
# usage: sh angles.sh OLD_TREE NEW_TREE [ROUNDS] > angles.txt
# rg_angles of llama3_8b_bf16 (llama3_dtypes.rope: 64 columns, exact angles with the llama3 scaling) from
# both trees, the file built whole for the baseline (x86-64), AVX2 and AVX-512 as each variant's code is,
# alternated ROUNDS times; min and median of the runs' best, ns a call.
set -e
OLD=$1; NEW=$2; N=${3:-8}; HERE=$(cd $(dirname $0) && pwd); W=$(mktemp -d)
FLAGS="-std=c11 -O3 -ffp-contract=off -fno-math-errno -fno-fast-math"
for side in OLD NEW; do
  eval tree=\$$side
  (cd /tmp && PYTHONPATH="$tree" python -m ropegen.cli compile "$HERE/llama3_dtypes.rope" -o "$W/$side" -q >/dev/null)
  f="$W/$side/llama3_dtypes/c/llama3_8b_bf16.c"
  n=$(grep -n '^/\* the arguments of one call' "$f" | cut -d: -f1)
  { echo '#define _POSIX_C_SOURCE 200809L'; head -n $((n - 1)) "$f"; cat "$HERE/angles_bench.c"; } > "$W/$side.c"
  gcc $FLAGS -I"$W/$side/llama3_dtypes/c" "$W/$side.c" -lm -o "$W/${side}_base"
  gcc $FLAGS -mavx2 -mf16c -I"$W/$side/llama3_dtypes/c" "$W/$side.c" -lm -o "$W/${side}_avx2"
  gcc $FLAGS -mavx2 -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mprefer-vector-width=512 -I"$W/$side/llama3_dtypes/c" "$W/$side.c" -lm -o "$W/${side}_avx512"
done
for r in $(seq $N); do for v in base avx2 avx512; do for side in OLD NEW; do
  echo "$v $side $("$W/${side}_$v")"
done; done; done > "$W/lines"
cat "$W/lines"
python3 - "$W/lines" <<'PY'
import statistics as st, sys
d = {}
for line in open(sys.argv[1]):
    v, side, ns = line.split()
    d.setdefault((v, side), []).append(float(ns))
print()
for v in ("base", "avx2", "avx512"):
    o, n = d[(v, "OLD")], d[(v, "NEW")]
    print(f"{v}: OLD min {min(o):.1f} median {st.median(o):.1f} -> NEW min {min(n):.1f} median {st.median(n):.1f} ns a call")
PY
rm -rf "$W"
