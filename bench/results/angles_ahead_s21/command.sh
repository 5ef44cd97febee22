#!/bin/sh
# usage: sh command.sh OLD_TREE NEW_TREE   (from this folder): `ropegen bench` of the llama3 suite's f32
# operators (suite_f32.rope: computed angles, a table, RMSNorm) at T = 4096 / 16384, one and two threads,
# from each tree in turn (OLD, NEW, NEW, OLD at each thread count), each writing <tree>_<threads>t_<round>.txt
OLD=$1; NEW=$2; HERE=$(cd $(dirname $0) && pwd)
for th in 1 2; do
  r=0
  for t in $OLD $NEW $NEW $OLD; do
    r=$((r+1))
    (cd /tmp && PYTHONPATH=$t python -m ropegen.cli bench $HERE/suite_f32.rope --backend c --threads $th --repeats 10 \
      --shape T=4096,N=4096 --shape T=16384,N=16384 -q > $HERE/$(basename $t)_${th}t_$r.txt)
  done
done
