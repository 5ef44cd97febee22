for i in 1 2; do
for v in old new; do
  d=$NEW; [ $v = old ] && d=$OLD
  for th in 1 2; do
    echo "$v th=$th $(cd $d && PYTHONPATH=. python -m ropegen.cli bench bench/rmsnorm_4096.rope --backend c --threads $th --repeats 10 --shape N=4096 --shape N=16384 -q 2>/dev/null | grep bf16 | awk '{print $3, $(NF-4)}' | tr '\n' ' ')"
  done
done
done
