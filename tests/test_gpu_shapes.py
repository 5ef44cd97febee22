"""GPU launch shapes chosen from the work (lower/gpu/launch.py, pure Python), and the RMSNorm
kernels with several short rows per block run on the host.

* RoPE: head-parallel at decode sizes (one head unit per thread at T <= 64, a block on every SM of an
  H100 from T = 64), token-parallel at prefill sizes, no more head groups than keep TARGET_THREADS
  busy; blocks of fewer than 256 threads; the register budget of __launch_bounds__;
* RMSNorm over short rows (per-head [T*32, 128]): several rows per block, no lane of a warp without
  a vector, the launch a block per that many rows; the generated CUDA run on the host (g++ emulation
  and CuPy stand-in of test_cuda_backend.py) on a row count that leaves the last block part empty,
  both kernels, in place, the weight aligned to its vectors or not, against NumPy.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.backends import cuda as cuda_backend
from ropegen.lower.gpu import launch as gpu_launch
from ropegen.ops.inputs import make_inputs

ROOT = Path(__file__).resolve().parent.parent
H100_SMS = 132


def _cfg(op):
    return cuda_backend.CudaBackend().config(op.plan)


def _llama3():
    return _cfg(ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"])


@pytest.mark.parametrize("tokens", [1, 16, 64, 512, 4096])
def test_rope_grid_follows_the_work(tokens):
    cfg = _llama3()
    k = cfg.vec
    assert cfg.total_heads == 40 and k.n_tiles == 8
    L = gpu_launch.rope_launch(cfg, k, tokens)
    g = L.head_groups
    assert L.grid[1] == g and L.block == (cfg.block, 1, 1)
    threads = L.grid[0] * cfg.block
    assert threads >= tokens * k.n_tiles and threads - tokens * k.n_tiles < cfg.block
    heads_per_thread = -(-cfg.total_heads // g)
    blocks = L.grid[0] * L.grid[1]
    if tokens <= 64:      # decode: head-parallel, one head unit per thread
        assert g == cfg.total_heads and heads_per_thread == 1
    if tokens >= 64:      # every SM of an H100 has a block
        assert blocks >= H100_SMS, blocks
    if tokens >= 512:     # enough threads in flight, and no more head groups than that needs
        assert tokens * k.n_tiles * g >= gpu_launch.TARGET_THREADS
        assert tokens * k.n_tiles * (g - 1) < gpu_launch.TARGET_THREADS
    if tokens == 4096:    # prefill: token-parallel, each thread runs several heads
        assert g <= 4 and heads_per_thread >= 10
    assert cfg.block < 256 and cfg.block % 32 == 0


def test_rope_grid_at_prefill_sizes_is_token_parallel():
    cfg = _llama3()
    assert gpu_launch.rope_launch(cfg, cfg.vec, 16384).head_groups == 1
    assert gpu_launch.rope_launch(cfg, cfg.scalar, 131072).head_groups == 1


def test_whole_head_kernels_split_at_real_heads():
    cfg = _cfg(ropegen.compile(ROOT / "examples" / "qk_norm_rope.rope")["qwen3_qk_norm_rope"])
    assert cfg.vec.whole_head
    assert gpu_launch.rope_launch(cfg, cfg.vec, 1).head_groups == cfg.real_heads
    assert gpu_launch.rope_launch(cfg, cfg.vec, 1 << 17).head_groups == 1


def test_rope_register_budget_of_the_block():
    """__launch_bounds__(block, min_blocks) leaves 64 registers a thread (128 for whole-head kernels),
    the budget the tiles were sized for."""
    cfg = _llama3()
    assert gpu_launch.SM_REGISTERS // (cfg.block * cfg.min_blocks) == gpu_launch.ROPE_REGISTERS
    whole = _cfg(ropegen.compile(ROOT / "examples" / "qk_norm_rope.rope")["qwen3_qk_norm_rope"])
    assert gpu_launch.SM_REGISTERS // (whole.block * whole.min_blocks) == gpu_launch.ROPE_REGISTERS_WHOLE_HEAD


# ---------------------------------------------------------------------------------------------
# RMSNorm: short rows share a block

HEADS = """
rmsnorm head_norm_bf16 {
    in q:      bf16[T, 5, 128]
    in weight: bf16[128]
    out q_normed
    epsilon = 1e-6
}
rmsnorm head_norm_f32 {
    in q:      f32[T, 3, 128]
    in weight: f32[128]
    out q_normed
    epsilon = 1e-6
}
"""


@pytest.mark.parametrize("name, vector, lanes", [("head_norm_bf16", 8, 16), ("head_norm_f32", 4, 32)])
def test_short_rows_share_a_block_and_fill_its_warps(name, vector, lanes):
    op = ropegen.compile(HEADS)[name]
    vec = _cfg(op).vec
    assert vec.vector == vector and vec.n_vectors == 128 // vector
    assert vec.lanes == lanes and vec.lanes <= vec.n_vectors       # no lane without a vector
    assert vec.rows > 1 and vec.block == vec.rows * vec.lanes and vec.block % 32 == 0
    rows = 4096 * 32
    assert gpu_launch.rms_launch(vec, rows).grid == (-(-rows // vec.rows), 1, 1)


def test_long_rows_keep_a_block_each():
    op = ropegen.compile(ROOT / "examples" / "rmsnorm_family.rope")["vllm_fused_add_rmsnorm"]
    vec = _cfg(op).vec
    assert vec.rows == 1 and vec.lanes == vec.block and vec.block * vec.items >= vec.n_vectors
    assert gpu_launch.rms_launch(vec, 5).grid == (5, 1, 1)


ROWS_4096 = """
rmsnorm rows_bf16 { in x: bf16[N, 4096] in scale: bf16[4096] out y }
rmsnorm rows_f32 { in x: f32[N, 4096] in scale: f32[4096] out y }
"""


@pytest.mark.parametrize("dtype, block, items, preload", [("bf16", 256, 2, False), ("f32", 256, 4, True)])
def test_long_rows_per_thread_shares_and_scale_preload(dtype, block, items, preload):
    """Rows of 4096 (launch.py's shares, measured on an H200): bf16 vectors (8 elements) 2 a thread,
    f32 (4) 4 a thread, the scalar kernels 4 elements a thread; the scale loaded before the row loop
    where a thread's x vectors come to RMS_PRELOAD_BYTES (f32), per row after the sum otherwise."""
    op = ropegen.compile(ROWS_4096)[f"rows_{dtype}"]
    cfg = _cfg(op)
    assert (cfg.vec.block, cfg.vec.items, cfg.vec.cache, cfg.vec.preload) == (block, items, True, preload)
    assert (cfg.scalar.block, cfg.scalar.items, cfg.scalar.preload) == (1024, 4, False)
    assert ("wk[" in op.sources["cuda"][f"{op.name}.cu"]) is preload


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_scale_preload_keeps_every_bit(dtype, monkeypatch):
    """The vector kernel with the scale loaded before the row loop and without it (RMS_PRELOAD_BYTES
    forced either way) store the same bits, with the scale aligned to its vectors or not, and equal
    NumPy; run on the host (g++ emulation, CuPy stand-in of test_cuda_backend.py)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    import test_cuda_backend as tcb
    import test_rmsnorm_family_gpu as fam
    cp = tcb._fake_cupy(monkeypatch)
    used = fam._spy(monkeypatch)
    rng = np.random.default_rng(7)
    dt = ropegen.ir.dtypes.DTYPES[dtype].np_dtype
    x = rng.standard_normal((5, 4096)).astype(dt)
    scale = rng.standard_normal(4096).astype(dt)
    bits = {}
    for preload, limit in ((True, 1), (False, 1 << 30)):
        monkeypatch.setattr(gpu_launch, "RMS_PRELOAD_BYTES", limit)
        op = ropegen.compile(ROWS_4096)[f"rows_{dtype}"]
        cfg = _cfg(op)
        assert cfg.vec.preload is preload
        tcb._CFG_OF[op.sources["cuda"][f"{op.name}.cu"]] = (cfg,)
        for w_offset in (0, 1):      # one element off: the scale's vectors read element by element
            w = np.zeros(scale.size + 8, dt)[w_offset:w_offset + scale.size]
            w[...] = scale
            used.clear()
            out = op.run(cp.ndarray(x), cp.ndarray(w), backend="cuda")
            assert used == [op.name + "_vec"], used
            fam._check(op, {"x": x, "scale": scale}, [out.a], f"preload={preload} scale+{w_offset}")
            bits[preload, w_offset] = np.asarray(out.a).view(f"u{dt.itemsize}").copy()
    for w_offset in (0, 1):
        assert np.array_equal(bits[True, w_offset], bits[False, w_offset]), w_offset


@pytest.mark.slow
@pytest.mark.parametrize("name", ["head_norm_bf16", "head_norm_f32"])
def test_short_rows_on_the_host(name, monkeypatch):
    """3 tokens x 5 (or 3) heads: 15 (9) rows, so the last block of 8 (4) rows is part empty; the
    vector and the scalar kernel, out of place and in place, equal NumPy."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    import test_cuda_backend as tcb
    import test_rmsnorm_family_gpu as fam
    op = ropegen.compile(HEADS)[name]
    cp = tcb._fake_cupy(monkeypatch)
    tcb._CFG_OF[op.sources["cuda"][f"{op.name}.cu"]] = (_cfg(op),)
    used = fam._spy(monkeypatch)
    arrays = make_inputs(op.ir, next(c for c in fam.CASES if c.label == "odd 7x3"), seed=3)
    q = arrays["q"][:3]
    arrays = dict(arrays, q=q)
    # one element off: x not a whole vector (the scalar kernel), the weight not (its vectors read
    # element by element in the vector kernel)
    for kernel, offset, w_offset in (("_vec", 0, 0), ("_vec", 0, 1), ("_scalar", 1, 0)):
        for inplace in (False, True):
            used.clear()
            buf = np.zeros(q.size + 8, q.dtype)
            x = buf[offset:offset + q.size].reshape(q.shape)
            x[...] = q
            w = np.zeros(arrays["weight"].size + 8, arrays["weight"].dtype)[w_offset:w_offset + arrays["weight"].size]
            w[...] = arrays["weight"]
            xa = cp.ndarray(x)
            outs = op.run_all(xa, cp.ndarray(w), backend="cuda", inplace=inplace)
            assert used == [op.name + kernel], used
            fam._check(op, arrays, [o.a for o in outs], f"{kernel} weight+{w_offset} inplace={inplace}")
            if inplace:
                assert outs[0] is xa
