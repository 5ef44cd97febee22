#!/bin/sh
# usage: sh command_installed.sh OLD_VENV NEW_VENV [ROUNDS] > output_installed.txt: as command.sh, for two
# virtual environments that `pip install` (not editable) made of the two trees: the first op.run calls
# of a new process, the kernel cached, the two venvs' processes alternated; then min and median
OLD=$1; NEW=$2; N=${3:-20}
HERE=$(cd $(dirname $0) && pwd); SPEC=$HERE/../../llama3_f16.rope; cd /tmp
for v in $OLD $NEW; do $v/bin/python $HERE/first_calls.py $SPEC llama3_8b_f16 >/dev/null; done
LINES=$(mktemp)
i=0
while [ $i -lt $N ]; do
  for v in $OLD $NEW; do
    printf "%s " $(basename $v); $v/bin/python $HERE/first_calls.py $SPEC llama3_8b_f16
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
