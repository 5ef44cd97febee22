#!/bin/sh
# usage: sh command.sh OLD_TREE NEW_TREE [ROUNDS] > output.txt: the first op.run calls of a new process
# (first_calls.py), the kernel cached, the two trees' processes alternated; one line per process (the
# tree's folder name, then ms per call), then each tree's min and median of the first and second call
OLD=$1; NEW=$2; N=${3:-20}
HERE=$(cd $(dirname $0) && pwd); cd /tmp
for t in $OLD $NEW; do PYTHONPATH=$t python $HERE/first_calls.py $t/bench/llama3_f16.rope llama3_8b_f16 >/dev/null; done
LINES=$(mktemp)
i=0
while [ $i -lt $N ]; do
  for t in $OLD $NEW; do
    printf "%s " $(basename $t); PYTHONPATH=$t python $HERE/first_calls.py $t/bench/llama3_f16.rope llama3_8b_f16
  done
  i=$((i+1))
done > $LINES
cat $LINES
python3 -c '
import statistics as st, sys
d = {}
for line in sys.stdin:
    w = line.split()
    d.setdefault(w[0], []).append((float(w[1]), float(w[2])))
for k, v in d.items():
    a, b = [x for x, _ in v], [y for _, y in v]
    print(f"{k}: first call min {min(a):.2f} median {st.median(a):.2f} ms; second min {min(b):.2f} median {st.median(b):.2f} ms")
' < $LINES
rm -f $LINES
