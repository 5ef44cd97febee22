#!/bin/sh
# usage: sh command.sh OLD NEW [ROUNDS] > output.txt: the first op.run calls of a new process (first_calls.py),
# the kernel cached, OLD's and NEW's processes alternated. OLD and NEW are source trees (run with the tree on
# PYTHONPATH, as a checkout runs) or virtual environments that `pip install`ed a tree (their bin/python).
# One line per process (the folder's name, then ms per call), then each one's min and median of the first
# and second call.
OLD=$1; NEW=$2; N=${3:-20}
HERE=$(cd $(dirname $0) && pwd); SPEC=$HERE/../../llama3_f16.rope; cd /tmp
run() {
  if [ -x "$1/bin/python" ]; then "$1/bin/python" $HERE/first_calls.py $SPEC llama3_8b_f16
  else PYTHONPATH=$1 python $HERE/first_calls.py $SPEC llama3_8b_f16; fi
}
for t in $OLD $NEW; do run $t >/dev/null; done
LINES=$(mktemp)
i=0
while [ $i -lt $N ]; do
  for t in $OLD $NEW; do
    printf "%s " $(basename $t); run $t
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
