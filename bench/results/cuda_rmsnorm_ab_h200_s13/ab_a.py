"""A/B on the device: the RMSNorm CUDA kernels rendered from .ab/base/templates (HEAD) and from the
working tree's templates (scale loaded before the row loop), and the latter with 2 and 1 vectors per
thread (launch.RMS_VECTORS_PER_THREAD; 4 in both others), alternated in one process, same bench clock
(ropegen.backends.cuda.bench.measure)."""
import statistics, sys, json
from pathlib import Path
import numpy as np
import ropegen, ropegen.render as render
from ropegen.lower.gpu import launch
from ropegen.backends.cuda import bench as cb
from ropegen.ir.dtypes import DTYPES

real = render.templates_dir
base = Path(".ab/base/templates").resolve()
SPEC = Path("bench/rmsnorm_4096.rope").read_text()
VARIANTS = {"base": (base, 4), "hoist": (None, 4), "hoist_vpt2": (None, 2), "hoist_vpt1": (None, 1)}

def ops(variant):
    tdir, vpt = VARIANTS[variant]
    render.templates_dir = (lambda: tdir) if tdir else real
    render.environment.cache_clear()
    launch.RMS_VECTORS_PER_THREAD = vpt
    prog = ropegen.compile(SPEC, file=f"{variant}.rope")
    ks = {op.name: op.kernel("cuda") for op in prog}
    render.templates_dir = real
    render.environment.cache_clear()
    launch.RMS_VECTORS_PER_THREAD = 4
    return ks

def first(r):
    return r[0] if isinstance(r, (tuple, list)) else r

gpu = cb.CupyGpu()
K = {v: ops(v) for v in VARIANTS}
rows = []
rng = np.random.default_rng(0)
for name in ("rmsnorm_4096_bf16", "rmsnorm_4096_f32"):
    dt = DTYPES["bf16" if "bf16" in name else "f32"].np_dtype
    for T in (1, 16, 64, 512, 4096, 16384):
        x = rng.standard_normal((T, 4096)).astype(dt); w = rng.standard_normal(4096).astype(dt)
        inputs = [cb._to_device(x), cb._to_device(w)]
        bits = {v: first(K[v][name](*inputs)).get().view(np.uint16 if dt.itemsize == 2 else np.uint32) for v in K}
        same = all(np.array_equal(bits["base"], bits[v]) for v in K)
        t = {v: [] for v in K}
        order = list(K)
        for rep in range(3):
            for v in (order if rep % 2 == 0 else order[::-1]):
                tm = cb.measure(gpu, cb.prepare(gpu, K[v][name], inputs, False), 20)
                t[v].append((tm.hot_ms * 1e3, tm.cold_ms * 1e3))
        r = dict(op=name, T=T, bits_equal=same)
        for v in K:
            r[f"{v}_hot_us"] = statistics.median(a for a, _ in t[v]); r[f"{v}_cold_us"] = statistics.median(b for _, b in t[v])
        rows.append(r)
        print(f"{name:18s} T={T:5d} bits_equal={same} hot us " + " ".join(f"{v} {r[v+'_hot_us']:.2f}" for v in K)
              + " | cold us " + " ".join(f"{v} {r[v+'_cold_us']:.2f}" for v in K), flush=True)
if len(sys.argv) > 1:
    Path(sys.argv[1]).write_text(json.dumps(dict(command="python3 .ab/ab.py", rows=rows), indent=1))
