#!/bin/sh
# usage: sh command_harness.sh OLD_TREE NEW_TREE ROUNDS THREADS > harness_<THREADS>t.txt   (from this folder)
# llama3_8b_f32 (suite_f32.rope) built from both trees as ropegen builds it, linked twice into rope_ab.c
# (abn: k0 = OLD, k1 = NEW; abr: the other way round), T = 4096 / 16384 from memory, in place 16 bytes into
# a line (as NumPy's arrays are) and out of place on a line; each line: one run's min of 3 reps of each
# kernel (ns a token). The summary after the lines: NEW / OLD per row, median over both orders and rounds.
set -e
OLD=$1; NEW=$2; N=${3:-6}; TH=${4:-1}; HERE=$(cd $(dirname $0) && pwd); W=$(mktemp -d)
FLAGS="-std=c11 -O3 -ffp-contract=off -fno-math-errno -fno-fast-math -Wa,-mbranches-within-32B-boundaries -fopenmp"
for side in OLD NEW; do
  eval tree=\$$side
  (cd /tmp && PYTHONPATH="$tree" python -m ropegen.cli compile "$HERE/suite_f32.rope" -o "$W/$side" -q >/dev/null)
done
c() { gcc -c $FLAGS -I"$W/$1/suite_f32/c" -Dropegen_llama3_8b_f32=$2 -Dropegen_llama3_8b_f32_words=$2w "$W/$1/suite_f32/c/llama3_8b_f32.c" -o "$W/$1_$2.o"; }
c OLD k0; c NEW k1; c NEW k0; c OLD k1
gcc -O2 -fopenmp -DNK=2 -DESZ=4 "$HERE/rope_ab.c" "$W/OLD_k0.o" "$W/NEW_k1.o" -lm -o "$W/abn"
gcc -O2 -fopenmp -DNK=2 -DESZ=4 "$HERE/rope_ab.c" "$W/NEW_k0.o" "$W/OLD_k1.o" -lm -o "$W/abr"
for r in $(seq $N); do
  for m in "IP=1 OFF=16" "OFF=0"; do for T in 4096 16384; do
    echo "o $m T=$T $(env TH=$TH $m "$W/abn" $T 3 | sed 's/.*k0 \([0-9.]*\) ns\/tok  k1 \([0-9.]*\).*/old \1 new \2/')"
    echo "r $m T=$T $(env TH=$TH $m "$W/abr" $T 3 | sed 's/.*k0 \([0-9.]*\) ns\/tok  k1 \([0-9.]*\).*/new \1 old \2/')"
  done; done
done > "$W/lines"
cat "$W/lines"
python3 - "$W/lines" <<'PY'
import re, statistics as st, sys
d = {}
for line in open(sys.argv[1]):
    m = re.match(r"\S (.*T=\d+) (old|new) ([\d.]+) (old|new) ([\d.]+)", line)
    a = {m.group(2): float(m.group(3)), m.group(4): float(m.group(5))}
    d.setdefault(m.group(1), []).append(a["new"] / a["old"])
for k, v in d.items():
    print(f"{k}: new / old median {st.median(v):.3f} (min {min(v):.3f}, max {max(v):.3f}, {len(v)} runs)")
PY
rm -rf "$W"
