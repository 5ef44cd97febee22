# the f32 operators of the llama3 suite alone (f32.rope: llama3 q + k computed and cached, RMSNorm 4096),
# two threads, run again after the table's two-thread f32 row at T = 4096 came out at 0.85 (issue13_s17_final_2t)
ropegen bench bench/results/issue13_s17_f32_2t_rerun/f32.rope --backend c --threads 2 --repeats 10 \
    --shape T=4096,N=4096 --shape T=16384,N=16384 -q > bench/results/issue13_s17_f32_2t_rerun/output.txt
