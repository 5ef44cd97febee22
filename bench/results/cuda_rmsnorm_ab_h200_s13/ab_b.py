"""A/B on the device: RMSNorm CUDA kernels of HEAD (.ab/base/templates and HEAD's rms_kernel: 4
vectors per thread, scale loaded per row after the sum) against the working tree (scale loaded once
before the row loop, 16 elements per thread), alternated in one process on the bench clock
(ropegen.backends.cuda.bench.measure); vector kernels (aligned) and scalar ones (x misaligned by
one element); registers per thread of each kernel (CuPy NVRTC, the backend's options)."""
import json, re, statistics, sys
from pathlib import Path
import numpy as np
import cupy as cp
import ropegen, ropegen.render as render
from ropegen.lower.gpu import launch
from ropegen.backends.cuda import bench as cb
from ropegen.backends.cuda.nvrtc import BASE_OPTIONS
from ropegen.ir.dtypes import DTYPES

real, new_rule = render.templates_dir, launch.rms_kernel
base = Path(".ab/base/templates").resolve()
SPEC = Path("bench/rmsnorm_4096.rope").read_text()

def old_rule(p, name, v, params):     # HEAD's rms_kernel
    nv = p.norm_size // v
    if nv <= 32 * 4:
        lanes = min(32, launch._pow2_at_least(nv)); rows = launch.RMS_ROWS_BLOCK // lanes
    else:
        lanes = min(launch.RMS_MAX_BLOCK, 32 * -(-nv // (32 * 4))); rows = 1
    block = lanes * rows
    items = -(-nv // lanes)
    cached = p.stash.itemsize if p.residual else p.x.itemsize
    budget = min(255, launch.SM_REGISTERS // block) // launch.RMS_CACHE_SHARE * 4
    cache = items <= launch.RMS_MAX_CACHED and items * v * cached <= min(launch.RMS_MAX_CACHED * launch.VECTOR_BYTES, budget)
    return launch.RmsKernel(name, v, block, items, cache, params, nv, block // 32, lanes, rows)

LOOP = "for (int l = 0; l < V; ++l) yv.v[l] = finish(xv[it].v[l], inv_rms, l, wk[it].v);"
PACKED = """for (int l = 0; l < V; l += 2) {
                    const __nv_bfloat162 nz = __floats2bfloat162_rn(__fmul_rn(cvt<float>(xv[it].v[l]), inv_rms), __fmul_rn(cvt<float>(xv[it].v[l + 1]), inv_rms));
                    const __nv_bfloat162 y2 = __floats2bfloat162_rn(__fmul_rn(__low2float(nz), cvt<float>(wk[it].v[l])), __fmul_rn(__high2float(nz), cvt<float>(wk[it].v[l + 1])));
                    yv.v[l] = __low2bfloat16(y2);
                    yv.v[l + 1] = __high2bfloat16(y2);
                }"""

def packed(src):     # the bf16 vector kernel's y pass with paired f32 -> bf16 conversions (cvt.rn.bf16x2.f32)
    assert src.count(LOOP) == 1, src.count(LOOP)
    return src.replace(LOOP, PACKED)

def ops(variant):
    render.templates_dir = (lambda: base) if variant == "base" else real
    launch.rms_kernel = old_rule if variant == "base" else new_rule
    render.environment.cache_clear()
    prog = ropegen.compile(SPEC, file=f"{variant}.rope")
    if variant == "pack":
        for op in prog:
            if "bf16" in op.name:
                op.sources._cache["cuda"] = {k: packed(v) for k, v in op.sources["cuda"].items()}
    ks = {op.name: (op.kernel("cuda"), list(op.sources["cuda"].values())[0]) for op in prog}
    render.templates_dir, launch.rms_kernel = real, new_rule
    render.environment.cache_clear()
    return ks

def first(r):
    return r[0] if isinstance(r, (tuple, list)) else r

gpu = cb.CupyGpu()
K = {v: ops(v) for v in ("base", "new", "pack")}
regs = {}
for v in K:
    for name, (_, src) in K[v].items():
        mod = cp.RawModule(code=src, options=BASE_OPTIONS)
        for kname in re.findall(r"__launch_bounds__\((\d+)\) (\w+)\(", src):
            f = mod.get_function(kname[1])
            regs[f"{v}/{kname[1]}"] = dict(block=int(kname[0]), regs=f.num_regs, local_bytes=f.local_size_bytes)
for k, r in regs.items():
    print(k, r, flush=True)
rows = []
rng = np.random.default_rng(0)
for name in ("rmsnorm_4096_bf16", "rmsnorm_4096_f32"):
    dt = DTYPES["bf16" if "bf16" in name else "f32"].np_dtype
    for T, shift in [(t, 0) for t in (1, 16, 64, 512, 4096, 16384)] + [(t, 1) for t in (1, 64, 4096)]:
        xh = rng.standard_normal(T * 4096 + 1).astype(dt); w = rng.standard_normal(4096).astype(dt)
        xd = cb._to_device(xh)[shift:shift + T * 4096].reshape(T, 4096)
        inputs = [xd, cb._to_device(w)]
        outs = {v: first(K[v][name][0](*inputs)).get().astype(np.float64) for v in K}
        diff = float(np.max(np.abs(outs["base"] - outs["new"])))
        pack_same = bool(np.array_equal(outs["pack"], outs["new"]))
        t = {v: [] for v in K}
        for rep in range(4):
            for v in (list(K) if rep % 2 == 0 else list(K)[::-1]):
                tm = cb.measure(gpu, cb.prepare(gpu, K[v][name][0], inputs, False), 20)
                t[v].append((tm.hot_ms * 1e3, tm.cold_ms * 1e3))
        r = dict(op=name, T=T, kernel="scalar" if shift else "vec", max_abs_diff=diff, pack_bits_equal_new=pack_same)
        for v in K:
            r[f"{v}_hot_us"] = statistics.median(a for a, _ in t[v]); r[f"{v}_cold_us"] = statistics.median(b for _, b in t[v])
        rows.append(r)
        print(f"{name:18s} {r['kernel']:6s} T={T:5d} max|base-new|={diff:.3g} hot us base {r['base_hot_us']:.2f} "
              f"new {r['new_hot_us']:.2f} pack {r['pack_hot_us']:.2f} (bits {pack_same}) | cold us base {r['base_cold_us']:.2f} "
              f"new {r['new_cold_us']:.2f} pack {r['pack_cold_us']:.2f}", flush=True)
if len(sys.argv) > 1:
    Path(sys.argv[1]).write_text(json.dumps(dict(command="python3 .ab/ab3.py OUT.json", registers=regs, rows=rows), indent=1))
