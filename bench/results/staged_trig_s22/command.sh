#!/bin/sh
# usage: sh command.sh OLD_TREE NEW_TREE [ROUNDS] > output.txt   (from anywhere)
# llama3 q + k with computed angles, f32 / f16 / bf16 (llama3_dtypes.rope), built from both trees as ropegen
# builds them and linked twice into ../angles_ahead_s21/rope_ab.c (abn: k0 = OLD, k1 = NEW; abr: the other
# way round), one thread, each vector variant (ROPEGEN_ISA): in place in cache (T = 16, each timed call
# right after an untimed one), in place and out of place from memory (T = 4096); in place 16 bytes into a
# line, as NumPy's arrays are. Each line: one run's min of its reps of each kernel (ns a token). The summary:
# NEW / OLD per row, the median over both orders and all rounds.
set -e
OLD=$1; NEW=$2; N=${3:-4}; HERE=$(cd $(dirname $0) && pwd); W=$(mktemp -d)
FLAGS="-std=c11 -O3 -ffp-contract=off -fno-math-errno -fno-fast-math -Wa,-mbranches-within-32B-boundaries -fopenmp"
for side in OLD NEW; do
  eval tree=\$$side
  (cd /tmp && PYTHONPATH="$tree" python -m ropegen.cli compile "$HERE/llama3_dtypes.rope" -o "$W/$side" -q >/dev/null)
done
G=$W/OLD/llama3_dtypes/c
for dt in f32 f16 bf16; do
  esz=2; [ $dt = f32 ] && esz=4
  for pair in "OLD k0" "NEW k1" "NEW k0" "OLD k1"; do
    set -- $pair
    gcc -c $FLAGS -I"$W/$1/llama3_dtypes/c" -Dropegen_llama3_8b_$dt=$2 -Dropegen_llama3_8b_${dt}_words=$2w \
      "$W/$1/llama3_dtypes/c/llama3_8b_$dt.c" -o "$W/${dt}_$1_$2.o"
  done
  gcc -O2 -fopenmp -DNK=2 -DESZ=$esz "$HERE/../angles_ahead_s21/rope_ab.c" "$W/${dt}_OLD_k0.o" "$W/${dt}_NEW_k1.o" -lm -o "$W/abn_$dt"
  gcc -O2 -fopenmp -DNK=2 -DESZ=$esz "$HERE/../angles_ahead_s21/rope_ab.c" "$W/${dt}_NEW_k0.o" "$W/${dt}_OLD_k1.o" -lm -o "$W/abr_$dt"
done
for r in $(seq $N); do
  for dt in f32 f16 bf16; do for isa in avx2 avx512; do
    for m in "HOT=1 IP=1 OFF=16:16:4000" "IP=1 OFF=16:4096:3" "OFF=0:4096:3"; do
      env=${m%%:*}; rest=${m#*:}; T=${rest%%:*}; reps=${rest#*:}
      echo "o $dt $isa $env T=$T $(env ROPEGEN_ISA=$isa $env "$W/abn_$dt" $T $reps | sed 's/.*k0 \([0-9.]*\) ns\/tok  k1 \([0-9.]*\).*/old \1 new \2/')"
      echo "r $dt $isa $env T=$T $(env ROPEGEN_ISA=$isa $env "$W/abr_$dt" $T $reps | sed 's/.*k0 \([0-9.]*\) ns\/tok  k1 \([0-9.]*\).*/new \1 old \2/')"
    done
  done; done
done > "$W/lines"
cat "$W/lines"
python3 - "$W/lines" <<'PY'
import re, statistics as st, sys
d = {}
for line in open(sys.argv[1]):
    m = re.match(r"\S (.*T=\d+) (old|new) ([\d.]+) (old|new) ([\d.]+)", line)
    a = {m.group(2): float(m.group(3)), m.group(4): float(m.group(5))}
    d.setdefault(m.group(1), []).append(a)
print()
for k, v in d.items():
    r = [a["new"] / a["old"] for a in v]
    print(f"{k}: OLD {st.median(a['old'] for a in v):.0f} -> NEW {st.median(a['new'] for a in v):.0f} ns a token (medians);"
          f" NEW / OLD median {st.median(r):.3f} (min {min(r):.3f}, max {max(r):.3f}, {len(r)} runs)")
PY
rm -rf "$W"
