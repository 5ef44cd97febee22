"""The first eight op.run calls of a new process (ms each): llama3 q + k f16 at T = 1 through the C backend,
whose kernel the build cache already holds. Usage: python first_calls.py SPEC OPERATOR."""
import sys, time
import numpy as np, ropegen
op = ropegen.compile(sys.argv[1])[sys.argv[2]]
q = np.random.randn(1, 32, 128).astype(np.float16); k = np.random.randn(1, 8, 128).astype(np.float16)
p = np.arange(1)
ts=[]
for i in range(8):
    t=time.perf_counter(); op.run(q, k, p, backend="c"); ts.append(1e3*(time.perf_counter()-t))
print(" ".join(f"{x:.3f}" for x in ts))
