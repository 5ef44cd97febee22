"""The CUDA backend, checked without a GPU and (tests marked `gpu`) with one.

Without a GPU:
* every example operator's .cu compiles with NVRTC (the pip wheel) for sm_80 and sm_90 with no
  warning at all (ptxas spill and local-memory warnings included); with nvcc too when installed;
* the CUDA element map is derived again from reference.pair_list (which reads the IR, not the
  plan) and every tile of both kernels is expanded back and compared with it element by element;
* launch shapes: grids cover every token, tile and sequence; head groups partition the heads;
  vector widths divide the unit and keep 16-byte loads aligned;
* the printed kernel signatures equal the parameter lists the wrapper binds;
* the generated RoPE kernels themselves run on the host: g++ compiles the .cu with a tiny shim for
  the CUDA built-ins, a loop plays every block and thread, and the results (vector and scalar
  kernels, every example, every input case) are compared with the float64 reference; the error
  word is checked for out-of-range positions and bad sequence lengths;
* the DLPack and __cuda_array_interface__ readers, on NumPy's DLPack export and a fake object.

With a GPU (CuPy importable and a device present): every example through ropegen's checker on
cuda, both kernels, in-place runs, PyTorch tensors (bfloat16 through DLPack), ValueError for a bad
position.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen import ir
from ropegen.backends import cuda as cuda_plan
from ropegen.backends.cuda import nvrtc
from ropegen.ops import reference
from ropegen.backends import cuda as cuda_backend
from ropegen.crosscheck import compare, operand_magnitude
from ropegen.runtime import gpu_call
from ropegen.ops.inputs import CASES, make_inputs
from ropegen.ops.plan import RopePlan
from ropegen.ops.rope.frequency_rows import frequency_rows

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.rope"))
ARCHS = ("sm_80", "sm_90")


def _all_ops():
    return [op for path in EXAMPLES for op in ropegen.compile(path)]


OPS = _all_ops()
ROPE_OPS = [op for op in OPS if op.kind == "rope"]


def _ids(ops):
    return [op.name for op in ops]


def _source(op) -> str:
    return op.sources["cuda"][f"{op.name}.cu"]


# ---------------------------------------------------------------------------------------------
# NVRTC: every example, both architectures, no warnings

def _nvrtc_missing() -> str | None:
    why = nvrtc.available()
    if why and os.environ.get("CI"):
        pytest.fail(f"NVRTC must be available in CI (pip install -e '.[test]'): {why}")
    return why


@lru_cache(maxsize=1)
def _compiled() -> dict:
    """(op, arch) -> Compiled or the exception, compiled in parallel (NVRTC releases the GIL)."""
    jobs = [(op, arch) for op in OPS for arch in ARCHS]

    def one(job):
        op, arch = job
        try:
            return nvrtc.compile_source(_source(op), arch, name=f"{op.name}.cu", strict=True)
        except Exception as e:  # noqa: BLE001 - reported by the test
            return e

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(one, jobs))
    return {(op.name, arch): r for (op, arch), r in zip(jobs, results)}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op", OPS, ids=_ids(OPS))
def test_nvrtc_compiles_without_warnings(op, arch):
    why = _nvrtc_missing()
    if why:
        pytest.skip(f"NVRTC unavailable: {why}")
    r = _compiled()[(op.name, arch)]
    if isinstance(r, Exception):
        pytest.fail(str(r))
    assert r.is_cubin and r.binary
    assert not re.search(r"warning", r.log, re.IGNORECASE), r.log
    cfg = cuda_backend.CudaBackend().config(op.plan)
    for k in cfg.kernels:
        assert k.name.encode() in r.binary, f"kernel {k.name} missing from the cubin"


def test_nvrtc_reports_warnings_as_errors():
    why = _nvrtc_missing()
    if why:
        pytest.skip(f"NVRTC unavailable: {why}")
    src = 'extern "C" __global__ void k(float* x) { int unused; x[0] = 1.0f; }\n'
    with pytest.raises(nvrtc.NvrtcError, match="unused"):
        nvrtc.compile_source(src, "sm_80")
    assert nvrtc.compile_source(src, "sm_80", strict=False).binary
    with pytest.raises(nvrtc.NvrtcError):
        nvrtc.compile_source("this is not C++", "sm_90")
    ptx = nvrtc.compile_source('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }', "compute_90")
    assert b".entry k" in ptx.binary


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (NVRTC covers CI)")
def test_sources_build_with_nvcc(tmp_path):
    """`ropegen compile --target cuda` output is plain CUDA C++ for nvcc, warnings as errors."""

    def one(op):
        f = tmp_path / f"{op.name}.cu"
        f.write_text(_source(op))
        cmd = ["nvcc", "-c", "-std=c++17", "-arch=sm_90", "-Werror", "all-warnings", "-o",
               str(tmp_path / f"{op.name}.o"), str(f)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        return op.name, r.returncode, r.stdout + r.stderr

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        bad = [(n, log) for n, rc, log in pool.map(one, OPS) if rc != 0]
    assert not bad, bad


# ---------------------------------------------------------------------------------------------
# rendering

@pytest.mark.parametrize("op", OPS, ids=_ids(OPS))
def test_sources_are_deterministic_and_self_contained(op):
    backend = cuda_backend.CudaBackend()
    a = backend.sources(op.plan, op.spec.file)
    b = backend.sources(op.plan, op.spec.file)
    assert a == b and list(a) == [f"{op.name}.cu"]
    text = a[f"{op.name}.cu"]
    assert text.startswith("// Generated by ropegen ")
    assert "Spec sha256: " + op.spec.sha256 in text
    includes = re.findall(r"#include\s*<([^>]+)>", text)
    assert set(includes) <= {"cuda_fp16.h", "cuda_bf16.h"}
    assert "fast_math" not in text and "__sinf" not in text and "__cosf" not in text
    if not op.plan.ir.kind == "rope" or not op.plan.trig_fast:
        assert "__sincosf" not in text
    assert "\t" not in text and not re.search(r"[ ]+\n", text)


def test_fast_trig_only_when_asked():
    spec = (ROOT / "examples" / "llama3.rope").read_text().replace(
        "compute   = f32", "compute   = f32\n    trig = fast")
    op = ropegen.compile(spec)["llama3_8b"]
    assert op.plan.trig_fast
    assert "__sincosf" in _source(op)


@pytest.mark.parametrize("op", OPS, ids=_ids(OPS))
def test_printed_signatures_match_the_bound_parameters(op):
    cfg = cuda_backend.CudaBackend().config(op.plan)
    text = _source(op)
    for k in cfg.kernels:
        m = re.search(r'extern "C" __global__ void __launch_bounds__\([^)]*\) ' + k.name + r"\((.*?)\)\n\{",
                      text, re.S)
        assert m, k.name
        printed = [" ".join(x.split()) for x in m.group(1).split(",")]
        assert printed == [f"{p.ctype} {p.name}" for p in k.params]


# ---------------------------------------------------------------------------------------------
# indexing: the CUDA tiles against an element map derived from the IR by the reference

def _reference_map(op) -> dict[int, tuple]:
    """element -> (partner, column, adds partner*sin, stream) from reference.pair_list."""
    p: RopePlan = op.plan
    sign = -1 if p.ir.direction is ir.Direction.BACKWARD else 1
    out = {}
    for a, b, ca, cb, k in reference.pair_list(p.ir, p.unit, reference.full_width_table(p.ir)):
        # y_a = x_a cos - sign x_b sin;  y_b = x_b cos + sign x_a sin
        out[a] = (b, ca, sign < 0, k)
        out[b] = (a, cb, sign > 0, k)
    return out


@pytest.mark.parametrize("op", ROPE_OPS, ids=_ids(ROPE_OPS))
def test_element_map_matches_reference_pairs(op):
    p = op.plan
    emap = cuda_plan.element_map(p)
    ref = _reference_map(op)
    assert len(emap) == p.unit
    for e, x in enumerate(emap):
        if e in ref:
            assert not x.copy and (x.partner, x.col, x.add, x.stream) == ref[e], e
        else:
            assert x.copy and any(a <= e < b for a, b in p.passthrough), e


@pytest.mark.parametrize("kernel", ["vec", "scalar"])
@pytest.mark.parametrize("op", ROPE_OPS, ids=_ids(ROPE_OPS))
def test_tiles_cover_the_unit_exactly_as_the_pair_map(op, kernel):
    p = op.plan
    cfg = cuda_plan.rope_cfg(p)
    k = getattr(cfg, kernel)
    v = k.vector
    emap = cuda_plan.element_map(p)
    assert p.unit % v == 0 and v * p.storage.itemsize <= cuda_plan.VECTOR_BYTES
    assert (v * p.storage.itemsize) & (v * p.storage.itemsize - 1) == 0
    # groups are consecutive and end at the tile count
    assert k.groups[0].begin == 0
    for g0, g1 in zip(k.groups, k.groups[1:]):
        assert g0.end == g1.begin and g0.end > g0.begin
    seen: dict[int, int] = {}
    for i, tile in enumerate(cuda_plan.expand(k.groups)):
        assert len(tile.elems) == len(tile.offsets) * v
        for o in tile.offsets:
            assert o % v == 0 and 0 <= o and o + v <= p.unit
        unit_of = [tile.offsets[e.vec] + e.lane for e in tile.elems]
        for e in tile.elems:
            u = unit_of[e.k]
            assert e.k == e.vec * v + e.lane
            assert u not in seen, f"element {u} in tiles {seen.get(u)} and {i}"
            seen[u] = i
            x = emap[u]
            assert e.copy == x.copy
            if not e.copy:
                assert unit_of[e.partner] == x.partner
                assert (e.pvec, e.plane) == (tile.elems[e.partner].vec, tile.elems[e.partner].lane)
                assert tile.cols[e.slot] == x.col
                assert e.add == x.add and tile.stream == x.stream
        assert list(tile.cols) == sorted(set(tile.cols))
    assert sorted(seen) == list(range(p.unit))
    assert k.n_tiles == len(cuda_plan.expand(k.groups))


def test_vector_width_of_llama3_is_16_bytes():
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"]
    cfg = cuda_plan.rope_cfg(op.plan)
    assert cfg.vec.vector == 8 and cfg.vec.n_tiles == 8          # bf16 x 8 = 16 bytes, 64 pairs / 8
    assert [(g.offsets, g.step) for g in cfg.vec.groups] == [((0, 64), 8)]
    assert cfg.scalar.n_tiles == 64


@pytest.mark.parametrize("op", ROPE_OPS, ids=_ids(ROPE_OPS))
def test_launch_covers_every_token_tile_and_head(op):
    cfg = cuda_plan.rope_cfg(op.plan)
    for k in cfg.kernels:
        for tokens in (0, 1, 2, 7, 64, 4096, 16384, 100003):
            for n_seq in (0, 3, 5000):
                L = cuda_plan.rope_launch(cfg, k, tokens, n_seq)
                threads = L.grid[0] * L.block[0]
                assert L.block == (cfg.block, 1, 1) and cfg.block % 32 == 0 and cfg.block <= 1024
                # a thread per tile of a token, or (a whole-head kernel) per token of each real head
                assert threads >= tokens * k.threads_per_token and threads >= n_seq and L.grid[0] >= 1
                assert threads - max(tokens * k.threads_per_token, n_seq, 1) < cfg.block     # no empty block
                g = L.head_groups
                assert L.grid[1] == g and 1 <= g <= max(1, cfg.total_heads)
                # the kernel's integer split of the global head numbering: a partition
                owned = []
                for y in range(g):
                    lo, hi = (y * cfg.total_heads) // g, ((y + 1) * cfg.total_heads) // g
                    owned += range(lo, hi)
                assert owned == list(range(cfg.total_heads))
        # streams number the head units consecutively
        nxt = 0
        for st in cfg.streams:
            assert st.first == nxt and st.last == st.first + st.heads
            nxt = st.last
        assert nxt == cfg.total_heads


def test_head_groups_only_when_tokens_are_few():
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"]
    cfg = cuda_plan.rope_cfg(op.plan)
    assert cuda_plan.rope_launch(cfg, cfg.vec, 16384).head_groups == 1
    assert cuda_plan.rope_launch(cfg, cfg.vec, 1).head_groups > 1


@pytest.mark.parametrize("op", [o for o in OPS if o.kind == "rmsnorm"], ids=_ids([o for o in OPS if o.kind == "rmsnorm"]))
def test_rmsnorm_launch(op):
    cfg = cuda_plan.rms_cfg(op.plan)
    n = op.plan.norm_size
    for k in cfg.kernels:
        assert n % k.vector == 0 and k.n_vectors * k.vector == n
        assert k.block % 32 == 0 and 32 <= k.block <= 1024 and k.warps == k.block // 32
        assert k.items * k.block >= k.n_vectors                      # the block covers a row
        for rows in (0, 1, 5, 2**31 + 7):
            L = cuda_plan.rms_launch(k, rows)
            assert 1 <= L.grid[0] <= 2**31 - 1 and L.block == (k.block, 1, 1)
    # the broadcast scale index, evaluated as the kernel does, against NumPy broadcasting
    p = op.plan
    padded = (1,) * (len(p.norm_shape) - len(p.scale_shape)) + p.scale_shape
    scale = np.arange(int(np.prod(p.scale_shape))).reshape(p.scale_shape)
    want = np.broadcast_to(scale.reshape(padded), p.norm_shape).reshape(-1)
    for e in range(n):
        if cfg.scale_direct:
            idx = e
        else:
            idx, r = 0, e
            for size, stride in cfg.scale_dims:
                idx += (r % size) * stride
                r //= size
        assert scale.reshape(-1)[idx] == want[e]


def test_vector_kernel_preconditions():
    ok = {"b": 8, "s": 8 * 40, "h": 128, "d": 1}
    assert cuda_plan.rope_vector_ok(8, 2, [(0x1000, ok)])
    assert not cuda_plan.rope_vector_ok(8, 2, [(0x1008, ok)])               # 8-byte aligned only
    assert not cuda_plan.rope_vector_ok(8, 2, [(0x1000, dict(ok, d=2))])    # strided head_dim
    assert not cuda_plan.rope_vector_ok(8, 2, [(0x1000, dict(ok, h=132))])  # head stride breaks alignment
    assert not cuda_plan.rope_vector_ok(1, 2, [(0x1000, ok)])


@pytest.mark.parametrize("op", ROPE_OPS, ids=_ids(ROPE_OPS))
def test_canonical_strides_address_the_reference_view(op):
    """b, s, h, d strides (merged axes split) address exactly reference._canonical's elements."""
    p = op.plan
    for case in CASES:
        arrays = make_inputs(op.ir, case, seed=3)
        for st in p.streams:
            a = arrays[st.src]
            t = p.ir.tensor(st.src)
            view = reference._canonical(t, a)                # [B, S, heads, head_dim] float64
            strides = cuda_plan.canonical_strides(t, tuple(s // a.itemsize for s in a.strides), p.token_layout)
            flat = np.lib.stride_tricks.as_strided(
                a, shape=view.shape, strides=tuple(strides[r] * a.itemsize for r in "bshd"))
            assert np.array_equal(flat.astype(np.float64), view)


def test_bench_shapes_from_the_command_line():
    from ropegen.backends.cuda import bench as cuda_bench
    assert cuda_bench.parse_shapes(None) == cuda_bench.DEFAULT_SHAPES
    assert {s[0] for s in cuda_bench.DEFAULT_SHAPES} == {1, 16, 64, 512, 4096, 16384, 131072}
    assert cuda_bench.parse_shapes(["T=64,dtype=f32"]) == ((64, 32, 8, 128, "f32"),)
    text = cuda_bench.format_cuda([dict(impl="ropegen cuda", op="llama3_8b", dtype="bf16", tokens=4096, ms=0.05,
                                        bytes=84e6, gbps=1680.0, ratio=0.93, device="test")])
    assert "llama3_8b" in text and "0.93" in text


# ---------------------------------------------------------------------------------------------
# the array readers

def test_dlpack_reader_on_numpy_export():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for arr in (a, a.transpose(2, 0, 1), a[:, ::2, 1:]):
        d = cuda_backend.from_dlpack_capsule(arr.__dlpack__(), (arr,))
        assert d.device is None and d.dtype == "f32" and d.shape == arr.shape
        assert d.ptr == arr.ctypes.data
        assert d.strides == tuple(s // 4 for s in arr.strides)
    h = np.zeros((5,), dtype=np.float16)
    assert cuda_backend.from_dlpack_capsule(h.__dlpack__()).dtype == "f16"
    i = np.zeros((2, 2), dtype=np.int64)
    assert cuda_backend.as_array(i).dtype == "i64"


def test_cuda_array_interface_reader():
    class Fake:
        __cuda_array_interface__ = {"data": (0x7000, False), "shape": (4, 6), "typestr": "<f2",
                                    "strides": (24, 2), "version": 3}

    d = cuda_backend.as_array(Fake())
    assert (d.ptr, d.shape, d.strides, d.dtype) == (0x7000, (4, 6), (12, 1), "f16")

    class Contig:
        __cuda_array_interface__ = {"data": (0x8000, False), "shape": (3, 5), "typestr": "<i8",
                                    "strides": None, "version": 3}

    d = cuda_backend.as_array(Contig())
    assert d.strides == (5, 1) and d.dtype == "i64" and d.c_contiguous
    with pytest.raises(TypeError):
        cuda_backend.as_array(object())


def test_validate_binds_symbols_like_numpy():
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"]
    sym: dict = {}
    q = cuda_backend.as_array(np.zeros((5, 32, 128), dtype=op.plan.storage.np_dtype))
    cuda_backend.validate(sym, "q", q, op.plan.storage, op.plan.inputs[0].shape)
    assert sym == {"T": 5}
    k = cuda_backend.as_array(np.zeros((6, 8, 128), dtype=op.plan.storage.np_dtype))
    with pytest.raises(ValueError, match="T = 5"):
        cuda_backend.validate(sym, "k", k, op.plan.storage, op.plan.inputs[1].shape)
    with pytest.raises(ValueError, match="dtype"):
        cuda_backend.validate({}, "q", cuda_backend.as_array(np.zeros((5, 32, 128), np.float32)),
                              op.plan.storage, op.plan.inputs[0].shape)


# ---------------------------------------------------------------------------------------------
# the generated RoPE kernels, run on the host

SHIM = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
struct uint3 { unsigned x, y, z; };
static uint3 blockIdx, blockDim, gridDim;
static thread_local uint3 threadIdx;
static inline int atomicOr(int* p, int v) { int o = *p; *p = o | v; return o; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline double __dsqrt_rn(double a) { return std::sqrt(a); }
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline float __double2float_rn(double a) { return (float)a; }
static inline void sincospif(float x, float* s, float* c) { *s = (float)std::sin(M_PI * (double)x); *c = (float)std::cos(M_PI * (double)x); }
static inline void sincospi(double x, double* s, double* c) { *s = std::sin(M_PI * x); *c = std::cos(M_PI * x); }
static inline void ropegen_host_sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
#define __sincosf ropegen_host_sincosf
struct __half { _Float16 v; };
static inline float __half2float(__half h) { return (float)h.v; }
static inline __half __float2half_rn(float f) { __half h; h.v = (_Float16)f; return h; }
static inline __half __double2half(double d) { __half h; h.v = (_Float16)d; return h; }
struct __nv_bfloat16 { uint16_t x; };
static inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.x << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) { b.x = 0x7fc0; return b; }
    u += 0x7fffu + ((u >> 16) & 1u);
    b.x = (uint16_t)(u >> 16); return b;
}
static inline __nv_bfloat16 __double2bfloat16(double d) { return __float2bfloat16_rn((float)d); }
"""


# RMSNorm blocks cooperate: one std::thread per CUDA thread, barriers for __syncthreads and warps.
SHIM_THREADS = r"""
#include <barrier>
#include <memory>
#include <thread>
#include <vector>
#define __shared__ static
static std::barrier<>* g_block_barrier;
static std::barrier<>** g_warp_barriers;
static inline void __syncthreads() { g_block_barrier->arrive_and_wait(); }
template <typename T>
static inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    static T exchange[1024];
    const unsigned t = threadIdx.x;
    exchange[t] = v;
    g_warp_barriers[t / 32]->arrive_and_wait();
    const T r = exchange[t ^ (unsigned)lane_mask];
    g_warp_barriers[t / 32]->arrive_and_wait();
    return r;
}
"""


def _threaded_launcher(k) -> str:
    args = ", ".join(f"*reinterpret_cast<{p.ctype}*>(a[{i}])" for i, p in enumerate(k.params))
    return f"""
extern "C" void launch_{k.name}(unsigned gx, unsigned gy, unsigned bx, void** a) {{
    gridDim = uint3{{gx, gy, 1}}; blockDim = uint3{{bx, 1, 1}};
    for (unsigned y = 0; y < gy; ++y)
        for (unsigned x = 0; x < gx; ++x) {{
            blockIdx = uint3{{x, y, 0}};
            std::barrier<> block(bx);
            std::vector<std::unique_ptr<std::barrier<>>> warps;
            std::vector<std::barrier<>*> raw;
            for (unsigned w = 0; w < bx / 32; ++w) {{ warps.emplace_back(new std::barrier<>(32)); raw.push_back(warps.back().get()); }}
            g_block_barrier = &block;
            g_warp_barriers = raw.data();
            std::vector<std::thread> threads;
            for (unsigned t = 0; t < bx; ++t)
                threads.emplace_back([=] {{ threadIdx = uint3{{t, 0, 0}}; {k.name}({args}); }});
            for (auto& th : threads) th.join();
        }}
}}
"""


def _launcher(k) -> str:
    args = ", ".join(f"*reinterpret_cast<{p.ctype}*>(a[{i}])" for i, p in enumerate(k.params))
    return f"""
extern "C" void launch_{k.name}(unsigned gx, unsigned gy, unsigned bx, void** a) {{
    gridDim = uint3{{gx, gy, 1}}; blockDim = uint3{{bx, 1, 1}};
    for (unsigned y = 0; y < gy; ++y)
        for (unsigned x = 0; x < gx; ++x)
            for (unsigned t = 0; t < bx; ++t) {{
                blockIdx = uint3{{x, y, 0}}; threadIdx = uint3{{t, 0, 0}};
                {k.name}({args});
            }}
}}
"""


_HOST_DIR = None
_HOST_LIBS: dict = {}


def _host_build(source: str, kernels, tag: str, threaded: bool = False) -> ctypes.CDLL:
    """A generated .cu built for the host with g++ and the shim, plus one launcher per kernel."""
    global _HOST_DIR
    if _HOST_DIR is None:
        import tempfile
        _HOST_DIR = Path(tempfile.mkdtemp(prefix="ropegen-host-cuda-"))
        # removed when the test process ends, whichever test module used the host builds (unlinking
        # a loaded .so is safe); a module fixture would miss other modules that import _host_build
        atexit.register(shutil.rmtree, _HOST_DIR, True)
        (_HOST_DIR / "inc").mkdir()
        for h in ("cuda_fp16.h", "cuda_bf16.h"):
            (_HOST_DIR / "inc" / h).write_text("// host shim: types are in shim.h\n")
        (_HOST_DIR / "shim.h").write_text(SHIM)
        (_HOST_DIR / "shim_threads.h").write_text(SHIM + SHIM_THREADS)
    key = (source, tag)
    if key not in _HOST_LIBS:
        n = len(_HOST_LIBS)
        src = _HOST_DIR / f"{tag}_{n}.cpp"
        lib = _HOST_DIR / f"lib{tag}_{n}.so"
        launcher = _threaded_launcher if threaded else _launcher
        src.write_text(source + "".join(launcher(k) for k in kernels))
        shim = "shim_threads.h" if threaded else "shim.h"
        cmd = ["g++", "-std=c++20" if threaded else "-std=c++17", "-O1", "-ffp-contract=off", "-fPIC", "-shared",
               "-pthread", "-Wno-unknown-pragmas", "-include", str(_HOST_DIR / shim), "-I", str(_HOST_DIR / "inc"),
               "-o", str(lib), str(src)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-4000:]
        _HOST_LIBS[key] = ctypes.CDLL(str(lib))
    return _HOST_LIBS[key]


def _host_library(op):
    cfg = cuda_plan.rope_cfg(op.plan)
    return _host_build(_source(op), cfg.kernels, op.name), cfg


def _host_launch(lib, k, grid, block, values) -> None:
    holders = []
    for prm, v in zip(k.params, values):
        v = int(v)
        holders.append(ctypes.c_uint64(v) if prm.is_pointer else
                       ctypes.c_int32(v) if prm.ctype == "int" else ctypes.c_int64(v))
    argv = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
    getattr(lib, f"launch_{k.name}")(ctypes.c_uint(grid[0]), ctypes.c_uint(grid[1]), ctypes.c_uint(block[0]), argv)


def _run_host(op, arrays: dict[str, np.ndarray], kernel: str | None, inplace: bool = False):
    """Bind host memory exactly as the CUDA wrapper binds device memory, and play the grid."""
    lib, cfg = _host_library(op)
    p = op.plan
    arrs = {n: cuda_backend.as_array(a) for n, a in arrays.items()}
    outs_np, outs = {}, {}
    for st in p.streams:
        if inplace:
            buf = arrays[st.src].copy()
            outs_np[st.out] = buf
            arrs[st.src] = cuda_backend.as_array(buf)
        else:   # (fp8 outputs have their own type)
            buf = np.empty(arrays[st.src].shape, dtype=p.out_dtype.np_dtype if p.out_dtype else arrays[st.src].dtype)
            outs_np[st.out] = buf
        outs[st.out] = cuda_backend.as_array(outs_np[st.out])
    B, S = cuda_backend.tokens_of(p, arrs)
    err = np.zeros(1, dtype=np.int32)
    rows = frequency_rows(p)     # longrope / dynamic_ntk: the call's frequency rows, as the runner makes them
    freq = rows.for_call(lambda n: np.asarray(arrays[n]), {n: a.shape for n, a in arrays.items()}) if rows else None
    if p.sequences:      # the lengths the runner hands the kernels (an indptr's differences)
        lens = gpu_call.sequence_lengths(p, arrays[p.sequences], S)
        arrs[p.sequences] = cuda_backend.as_array(lens)
        seq_ends = np.cumsum(lens.astype(np.int64))
    else:
        seq_ends = np.zeros(1, np.int64)
    k, launch, values = cuda_backend.rope_bind(
        p, cfg, arrs, outs, B, S, err.ctypes.data, seq_ends.ctypes.data,
        kernel=None if kernel is None else getattr(cfg, kernel), freq_ptr=0 if freq is None else freq.ctypes.data)
    if B * S or (p.sequences and arrs[p.sequences].shape[0]):
        _host_launch(lib, k, launch.grid, launch.block, values)
    return k, int(err[0]), outs_np


def _host_ok() -> str | None:
    if shutil.which("g++") is None:
        return "g++ is not installed"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [None, "scalar"], ids=["chosen", "scalar"])
@pytest.mark.parametrize("op", ROPE_OPS, ids=_ids(ROPE_OPS))
def test_generated_kernels_run_on_the_host_and_match_the_reference(op, kernel):
    why = _host_ok()
    if why:
        pytest.skip(why)
    dtype = op.plan.out_dtype or op.plan.storage
    used = set()
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=11 + i)
        ref = reference.evaluate(op.ir, arrays)
        k, err, outs = _run_host(op, arrays, kernel)
        used.add(k.name)
        assert err == 0, (case.label, err)
        magnitude = operand_magnitude(arrays, ref)
        for st in op.plan.streams:
            m_abs, m_rel, ok = compare(outs[st.out], ref[st.out], dtype, magnitude)
            assert ok, (case.label, k.name, st.out, m_abs, m_rel)
            if not st.rotate:
                assert np.array_equal(outs[st.out], arrays[st.src])
        if op.plan.out_dtype:       # an fp8 output is never written over its source
            continue
        # the same call in place gives the same bits
        k2, err2, outs2 = _run_host(op, arrays, kernel, inplace=True)
        assert k2.name == k.name and err2 == 0
        for st in op.plan.streams:
            assert np.array_equal(outs2[st.out].view(np.uint8), outs[st.out].view(np.uint8))
    if kernel is None and cuda_backend.rope_cfg(op.plan).vec.vector > 1:   # (interleaved M-RoPE: no vectors)
        assert op.name + "_vec" in used, "the vector kernel never ran on these inputs"


@pytest.mark.slow
def test_host_run_flags_bad_positions_and_sequences():
    why = _host_ok()
    if why:
        pytest.skip(why)
    prog = ropegen.compile(ROOT / "examples" / "llama3.rope")
    op = prog["llama3_8b_cached"]
    arrays = make_inputs(op.ir, CASES[1], seed=1)
    for bad in (-1, arrays["cos"].shape[0]):
        a = dict(arrays, positions=arrays["positions"].copy())
        a["positions"][2] = bad
        for kernel in ("vec", "scalar"):
            _, err, _ = _run_host(op, a, kernel)
            assert err == cuda_plan.ERR_POSITION
    atb = ropegen.compile(ROOT / "examples" / "atb_rope.rope")["atb_cos_format1"]
    arrays = make_inputs(atb.ir, CASES[1], seed=2)
    for lens in ([3, -1, 5], [1, 1, 1], [9, 0, 0]):
        a = dict(arrays, seqlen=np.array(lens, dtype=arrays["seqlen"].dtype))
        _, err, _ = _run_host(atb, a, None)
        assert err & cuda_plan.ERR_SEQUENCES, lens


# ---------------------------------------------------------------------------------------------
# the whole CUDA wrapper on the host: a stand-in for CuPy whose kernels are the host-built .cu

# The stand-in's device number, one that no GPU has: an operator run both on the stand-in and on a GPU in
# one process (test_layouts runs one on each) keeps the two apart in what the wrapper caches per device
# (kernel functions, error words). With 0, on an H200, a GPU run after a stand-in run of the same operator
# called the host-built kernel with device pointers (test_layouts' workers died of segfaults), and a
# stand-in run after a GPU run could launch the GPU kernel on host pointers.
FAKE_DEVICE = 4099


def _fake_cupy(monkeypatch, launch=True):
    """A `cupy` module over NumPy memory: enough of CuPy's API for the wrapper, with RawModule
    functions that play the grid through the host-built source (launch=False: do nothing). It
    records what a GPU would see: `cp.events` lists ("alloc" | "launch" | "d2h" | "h2d" | "sync" |
    "memset", stream) in order, where stream is the handle current at the time."""
    import sys
    import types

    events: list = []
    kernels: list = []     # the name of each kernel launched

    class Ptr:
        def __init__(self, a):
            self.ptr = a.ctypes.data

    class Dev:
        id = FAKE_DEVICE
        compute_capability = "90"

        def __init__(self, *a):
            pass

    class Stream:
        def __init__(self, ptr=None):
            self.ptr = id(self) if ptr is None else ptr

        def __enter__(self):
            current.append(self)
            return self

        def __exit__(self, *a):
            current.pop()
            return False

        def synchronize(self):
            events.append(("sync", self.ptr))

    null = Stream(0)
    current = [null]

    def now():
        return current[-1].ptr

    class ndarray:
        def __init__(self, a):
            self.a = a

        @property
        def data(self):     # made once: NumPy's ctypes address costs microseconds, CuPy's none
            if self.ptr_ is None:
                self.ptr_ = Ptr(self.a)
            return self.ptr_

        ptr_ = None
        device = Dev()
        dtype = property(lambda self: self.a.dtype)
        shape = property(lambda self: self.a.shape)
        strides = property(lambda self: self.a.strides)
        itemsize = property(lambda self: self.a.itemsize)
        size = property(lambda self: self.a.size)

        def astype(self, dt):
            events.append(("alloc", now()))
            return ndarray(self.a.astype(dt))

        def get(self, stream=None):
            events.append(("d2h", now() if stream is None else stream.ptr))
            return self.a.copy()

        def fill(self, v):
            events.append(("memset", now()))
            self.a.fill(v)

        def __getitem__(self, i):
            return ndarray(self.a[i])

        def __setitem__(self, i, v):
            self.a[i] = v.a if isinstance(v, ndarray) else v

        def _op(f):
            return lambda self, o: ndarray(f(self.a, o.a if isinstance(o, ndarray) else o))
        __sub__, __or__, __ne__ = _op(np.subtract), _op(np.bitwise_or), _op(np.not_equal)

    ndarray.__module__ = "cupy"
    Stream.__module__ = "cupy"

    class Module:
        def __init__(self, code):
            self.code = code

        def get_function(self, name):
            if not launch:
                return lambda grid, block, args: (events.append(("launch", now())), kernels.append(name))
            cfgs = [k for c in _CFG_OF.get(self.code, ()) for k in c.kernels if k.name == name]
            k = cfgs[0]
            threaded = isinstance(_CFG_OF[self.code][0], cuda_plan.RmsCfg)
            lib = _host_build(self.code, [kk for c in _CFG_OF[self.code] for kk in c.kernels], "fake", threaded)

            def run(grid, block, args):
                events.append(("launch", now()))
                kernels.append(name)
                _host_launch(lib, k, grid, block, args)
            return run

    def refuse(dtype):     # as CuPy 14 does (seen on an H200): it has no float8 arrays
        d = np.dtype(dtype)
        if d.itemsize == 1 and d.type.__module__.split(".")[0] == "ml_dtypes":
            raise ValueError(f"Unsupported dtype {d}")

    def new(f):
        def make(*a, **kw):
            events.append(("alloc", now()))
            return ndarray(f(*a, **kw))
        return make

    def allocate(shape, dtype):
        refuse(dtype)
        return aligned_empty(shape, dtype)

    def asarray(a):
        events.append(("h2d", now()))
        refuse(np.asarray(a).dtype)
        return ndarray(np.array(a, copy=True))

    def asnumpy(x, stream=None):
        events.append(("d2h", now() if stream is None else stream.ptr))
        return x.a.copy()

    cp = types.ModuleType("cupy")
    cp.events, cp.kernels = events, kernels
    cp.ndarray = ndarray
    cp.Stream = Stream
    cp.cuda = types.SimpleNamespace(get_current_stream=lambda: current[-1], Device=Dev, Stream=Stream,
                                    ExternalStream=Stream, runtime=types.SimpleNamespace(
                                        getDeviceCount=lambda: 1, getDevice=lambda: FAKE_DEVICE,
                                        deviceSynchronize=lambda: events.append(("sync", None))))
    cp.cuda.Stream.null = null
    cp.asarray = asarray
    cp.empty = new(allocate)
    cp.zeros = new(lambda shape, dtype: np.zeros(shape, dtype=dtype))
    cp.cumsum = new(lambda x: np.cumsum(x.a))
    cp.clip = new(lambda x, lo, hi: np.clip(x.a, lo, hi))
    cp.where = new(lambda c, x, y: np.where(c.a, x, y.a))
    cp.asnumpy = asnumpy
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(cuda_backend._Module, "get", classmethod(lambda cls, source, name: Module(source)))
    return cp


def aligned_empty(shape, dtype) -> np.ndarray:
    """np.empty at a 256-byte boundary, as CUDA's allocators give (NumPy's vary modulo 64)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(n + 256, np.uint8)
    skip = -raw.ctypes.data % 256
    return raw[skip:skip + n].view(dtype).reshape(shape)


_CFG_OF: dict = {}


@pytest.mark.slow
@pytest.mark.parametrize("op", ROPE_OPS, ids=_ids(ROPE_OPS))
def test_wrapper_end_to_end_on_a_host_stand_in_for_cupy(op, monkeypatch):
    why = _host_ok()
    if why:
        pytest.skip(why)
    cp = _fake_cupy(monkeypatch)
    _CFG_OF[_source(op)] = (cuda_backend.CudaBackend().config(op.plan),)
    assert cuda_backend.unavailable() is None
    op = ropegen.compile(op.spec.file)[op.name]          # a fresh Operator: no cached kernels
    from ropegen.crosscheck import check_operator
    rows = check_operator(op, ("cuda",))
    assert rows and all(r.ok for r in rows), rows
    # device-resident inputs (the stand-in's arrays), a strided view, and in place
    p = op.plan
    arrays = make_inputs(op.ir, CASES[2], seed=4)
    ref = reference.evaluate(op.ir, arrays)
    magnitude = operand_magnitude(arrays, ref)
    dev = {n: cp.ndarray(a) for n, a in arrays.items()}
    outs = op.run_all(*[dev[n] for n in op.inputs], backend="cuda")
    for name, out in zip(op.outputs, outs):
        assert isinstance(out, cp.ndarray) and compare(_fp8_bits(out.a, p.out_dtype), ref[name],
                                                       p.out_dtype or p.storage, magnitude)[2]
    if p.out_dtype:     # an fp8 output is never written over its source
        return
    dev = {n: cp.ndarray(np.array(a, copy=True)) for n, a in arrays.items()}
    outs = op.run_all(*[dev[n] for n in op.inputs], backend="cuda", inplace=True)
    for st, out in zip(p.streams, outs):
        assert out is dev[st.src] and compare(out.a, ref[st.out], p.storage, magnitude)[2]
    if isinstance(p.angles, ropegen.ops.plan.TableAnglesPlan) and p.positions.ids:
        bad = dict(arrays)
        ids = p.positions.ids
        bad[ids] = arrays[ids].copy()
        bad[ids].reshape(-1)[0] = arrays[p.angles.cos].shape[0]
        with pytest.raises(ValueError, match="position out of range"):
            op.run(*[bad[n] for n in op.inputs], backend="cuda")
        op.run(*[bad[n] for n in op.inputs], backend="cuda", check=False)      # no read-back, no raise


RMS_OPS = [op for op in OPS if op.kind == "rmsnorm"]


def _fp8_bits(a: np.ndarray, dtype) -> np.ndarray:
    """A CuPy call's output as its declared dtype: fp8 outputs come back as uint8 bits (CuPy has no
    float8 arrays)."""
    return a.view(dtype.np_dtype) if dtype is not None and a.dtype == np.uint8 and dtype.itemsize == 1 else a


@pytest.mark.parametrize("name", ["flashinfer_rope_quantize_fp8", "vllm_rms_quant"])
def test_fp8_outputs_on_a_cupy_without_float8_arrays(name, monkeypatch):
    """CuPy has no float8 arrays (an H200's CuPy 14: "Unsupported dtype float8_e4m3fn", and every fp8
    operator failed there): the outputs live as uint8. A call of host arrays returns them as fp8
    arrays; a call of CuPy arrays returns uint8 arrays holding the same bits."""
    why = _host_ok()
    if why:
        pytest.skip(why)
    cp = _fake_cupy(monkeypatch)
    op = ropegen.compile(ROOT / "examples" / "fp8_outputs.rope")[name]
    _CFG_OF[_source(op)] = (cuda_backend.CudaBackend().config(op.plan),)
    arrays = make_inputs(op.ir, CASES[1], seed=4)
    host = op.run_all(*[arrays[n] for n in op.inputs], backend="cuda")
    dev = op.run_all(*[cp.ndarray(arrays[n]) for n in op.inputs], backend="cuda")
    want = op.run_all(*[arrays[n] for n in op.inputs], backend="numpy")
    fp8 = [np.dtype(ropegen.ir.dtypes.DTYPES[n].np_dtype) for n in ("f8e4m3", "f8e5m2")]
    assert any(h.dtype in fp8 for h in host), [h.dtype for h in host]
    for h, d, w in zip(host, dev, want):
        assert h.dtype == w.dtype
        if h.dtype in fp8:
            assert d.dtype == np.uint8
            assert np.array_equal(h.view(np.uint8), d.a) and np.array_equal(h.view(np.uint8), w.view(np.uint8))


@pytest.mark.slow
@pytest.mark.parametrize("op", RMS_OPS, ids=_ids(RMS_OPS))
def test_rmsnorm_wrapper_end_to_end_on_a_host_stand_in_for_cupy(op, monkeypatch):
    why = _host_ok()
    if why:
        pytest.skip(why)
    cp = _fake_cupy(monkeypatch)
    cfg = cuda_backend.CudaBackend().config(op.plan)
    _CFG_OF[_source(op)] = (cfg,)
    op = ropegen.compile(op.spec.file)[op.name]
    from ropegen.crosscheck import check_operator
    rows = check_operator(op, ("cuda",))
    assert rows and all(r.ok for r in rows), rows
    p = op.plan
    arrays = make_inputs(op.ir, CASES[1], seed=6)
    ref = reference.evaluate(op.ir, arrays)[p.out]
    x = arrays[p.x_name]
    dtype = min((p.x, p.scale, p.y), key=lambda d: d.mantissa_bits)

    def args(xv):   # every input in declaration order, x replaced by the view (the residual by a copy)
        return [cp.ndarray(xv if n == p.x_name else arrays[n].copy() if n == p.residual else arrays[n])
                for n in op.inputs]
    mag = float(np.abs(x.astype(np.float64)).max())
    # rows spaced out (vector kernel, row stride 2N) and a misaligned start (scalar kernel)
    spaced = np.zeros((2 * x.size + 8,), dtype=x.dtype)
    rows_x = x.reshape(-1, p.norm_size)
    view = spaced[:2 * rows_x.size].reshape(-1, 2 * p.norm_size)[:, :p.norm_size]
    view[...] = rows_x
    other = np.zeros((x.size + 8,), dtype=x.dtype)
    shifted = other[1:1 + rows_x.size].reshape(x.shape)
    shifted[...] = x
    for arr in (view.reshape(x.shape) if x.ndim == 2 else None, shifted):
        if arr is None:
            continue
        out = op.run_all(*args(arr), backend="cuda")[0]
        assert compare(_fp8_bits(out.a, p.y), ref, dtype, mag)[2]
    if x.ndim == 2 and x.shape[0] > 1 and p.norm_size > 1:
        with pytest.raises(ValueError, match="contiguous"):
            op.run(*args(np.asfortranarray(x)), backend="cuda")


# Branches of the templates that no example takes: f64 arithmetic, f64 storage, fast trig in both
# angle modes, fp16 storage rounding with exact angles, a merged-head f64 table.
VARIANTS = {
    "compute_f64": ("llama3.rope", "llama3_8b", [("compute   = f32", "compute   = f64")]),
    "trig_fast_exact": ("llama3.rope", "llama3_8b", [("compute   = f32", "compute   = f32\n    trig = fast")]),
    "trig_fast_ggml": ("ggml_rope.rope", "ggml_neox_yarn", [("angle_numerics = ggml\n}",
                                                             "angle_numerics = ggml\n    trig = fast\n}")]),
    "storage_f64": ("ggml_rope.rope", "ggml_neox_yarn_exact", [("f32[tokens=T, heads=8, head_dim=128]",
                                                                "f64[tokens=T, heads=8, head_dim=128]"),
                                                               ("angle_numerics = exact\n}",
                                                                "angle_numerics = exact\n    compute = f64\n}")]),
    "storage_rounding_exact": ("ppl_rope.rope", "ppl_rotary_bypass_key",
                               [("angles     = computed(base = 10000)\n}",
                                 "angles     = computed(base = 10000)\n    compute = storage\n}")]),
    "table_f64_bf16": ("llama3.rope", "llama3_8b_cached", [("f32[P, 64]", "f64[P, 64]")]),
}


def _variant(name):
    path, op_name, edits = VARIANTS[name]
    text = (ROOT / "examples" / path).read_text()
    for old, new in edits:
        assert old in text, (name, old)
        text = text.replace(old, new)
    return ropegen.compile(text, file=f"{name}.rope")[op_name]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_template_variants_compile_and_run_on_the_host(name):
    op = _variant(name)
    why = nvrtc.available()
    if not why:
        for arch in ARCHS:
            nvrtc.compile_source(_source(op), arch, name=f"{name}.cu", strict=True)
    if _host_ok():
        pytest.skip(_host_ok())
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=21 + i)
        ref = reference.evaluate(op.ir, arrays)
        magnitude = operand_magnitude(arrays, ref)
        for kernel in (None, "scalar"):
            _, err, outs = _run_host(op, arrays, kernel)
            assert err == 0
            for st in op.plan.streams:
                assert compare(outs[st.out], ref[st.out], op.plan.storage, magnitude)[2], (case.label, kernel)


# ---------------------------------------------------------------------------------------------
# on a GPU

def _gpu_missing() -> str | None:
    return cuda_backend.unavailable()


gpu = pytest.mark.gpu


@gpu
@pytest.mark.parametrize("op", OPS, ids=_ids(OPS))
def test_gpu_examples_check_against_the_reference(op):
    why = _gpu_missing()
    if why:
        pytest.skip(f"no GPU run: {why}")
    from ropegen.crosscheck import check_operator
    rows = check_operator(op, ("cuda",))
    bad = [r for r in rows if not r.ok]
    assert rows and not bad, bad


@gpu
@pytest.mark.parametrize("op", ROPE_OPS, ids=_ids(ROPE_OPS))
def test_gpu_both_kernels_inplace_and_device_arrays(op):
    why = _gpu_missing()
    if why:
        pytest.skip(f"no GPU run: {why}")
    import cupy as cp
    p = op.plan
    arrays = make_inputs(op.ir, CASES[2], seed=5)
    ref = reference.evaluate(op.ir, arrays)
    want = op.run_all(*[arrays[n] for n in op.inputs], backend="cuda")
    magnitude = operand_magnitude(arrays, ref)
    for name, out in zip(op.outputs, want):
        assert compare(out, ref[name], p.out_dtype or p.storage, magnitude)[2]
    if p.storage.name == "bf16" and not _cupy_has_bf16():
        pytest.skip("this CuPy has no bfloat16 arrays (the PyTorch test covers bf16 on the device)")
    # device arrays, one of them a misaligned view: the scalar kernel
    dev = {n: cp.asarray(a) for n, a in arrays.items()}
    first = p.streams[0].src
    pad = cp.empty((dev[first].size + 1,), dtype=dev[first].dtype)
    pad[1:] = dev[first].reshape(-1)
    dev[first] = pad[1:].reshape(arrays[first].shape)
    outs = op.run_all(*[dev[n] for n in op.inputs], backend="cuda")
    for name, out in zip(op.outputs, outs):
        assert compare(_fp8_bits(cp.asnumpy(out), p.out_dtype), ref[name], p.out_dtype or p.storage, magnitude)[2]
    if p.out_dtype:     # an fp8 output is never written over its source
        return
    # in place
    dev2 = {n: cp.asarray(a) for n, a in arrays.items()}
    outs = op.run_all(*[dev2[n] for n in op.inputs], backend="cuda", inplace=True)
    for st, out in zip(p.streams, outs):
        assert out is dev2[st.src]
        assert compare(cp.asnumpy(out), ref[st.out], p.storage, magnitude)[2]


def _cupy_has_bf16() -> bool:
    import cupy as cp
    try:
        cp.empty(1, dtype=ropegen.ir.dtypes.DTYPES["bf16"].np_dtype)
        return True
    except Exception:  # noqa: BLE001
        return False


@gpu
def test_gpu_torch_tensors_through_dlpack():
    why = _gpu_missing()
    if why:
        pytest.skip(f"no GPU run: {why}")
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"]
    arrays = make_inputs(op.ir, CASES[1], seed=9)
    ref = reference.evaluate(op.ir, arrays)
    q = torch.from_numpy(arrays["q"].astype(np.float32)).cuda().to(torch.bfloat16)
    k = torch.from_numpy(arrays["k"].astype(np.float32)).cuda().to(torch.bfloat16)
    pos = torch.from_numpy(arrays["positions"]).cuda()
    q_rot, k_rot = op.run(q, k, pos, backend="cuda")
    assert isinstance(q_rot, torch.Tensor) and q_rot.dtype == torch.bfloat16 and q_rot.is_cuda
    got = q_rot.float().cpu().numpy()
    assert compare(got, ref["q_rot"], op.plan.storage, 5.0)[2]
    assert compare(k_rot.float().cpu().numpy(), ref["k_rot"], op.plan.storage, 5.0)[2]


@gpu
def test_gpu_bad_position_is_a_value_error():
    why = _gpu_missing()
    if why:
        pytest.skip(f"no GPU run: {why}")
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b_cached"]
    arrays = make_inputs(op.ir, CASES[1], seed=1)
    arrays["positions"] = arrays["positions"].copy()
    arrays["positions"][0] = arrays["cos"].shape[0]
    with pytest.raises(ValueError, match="position out of range"):
        op.run(*[arrays[n] for n in op.inputs], backend="cuda")
