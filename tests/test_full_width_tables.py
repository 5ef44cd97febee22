"""Full-width cos/sin tables mean what HF transformers and GPT-J mean: element e reads column e.

The expected values are HF's own formulas (`q * cos + rotate_half(q) * sin` with `cat(freqs, freqs)`
tables; GPT-J's `rotate_every_two` with `repeat_interleave` tables), written here in NumPy.
"""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen import backends

ROOT = Path(__file__).resolve().parents[1]
RUNNABLE = [b.name for b in backends.BACKENDS if not b.unavailable()]


def _rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def _rotate_every_two(x):
    return np.stack([-x[..., 1::2], x[..., ::2]], axis=-1).reshape(x.shape)


def _inv_freq(base, dim):
    return 1.0 / base ** (np.arange(0, dim, 2) / dim)


@pytest.mark.parametrize("backend", RUNNABLE)
def test_hf_llama_per_token_full_width_tables(backend):
    op = ropegen.compile(ROOT / "examples" / "hf_rope.rope")["hf_llama_per_token"]
    rng = np.random.default_rng(0)
    B, S = 2, 5
    pos = rng.integers(0, 4000, size=(B, S))
    freqs = pos[..., None] * _inv_freq(500000.0, 128)            # [B, S, 64]
    emb = np.concatenate([freqs, freqs], axis=-1)               # [B, S, 128]
    cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
    q = rng.standard_normal((B, 32, S, 128)).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal((B, 8, S, 128)).astype(ml_dtypes.bfloat16)
    q_rot, k_rot = op(q, k, cos, sin, backend=backend)
    c, s = cos[:, None].astype(np.float64), sin[:, None].astype(np.float64)
    for x, got in ((q, q_rot), (k, k_rot)):
        x64 = x.astype(np.float64)
        want = x64 * c + _rotate_half(x64) * s
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2 ** -7, atol=2 ** -7)


@pytest.mark.parametrize("backend", RUNNABLE)
def test_gptj_repeat_interleave_tables_with_partial_rotary(backend):
    op = ropegen.compile(ROOT / "examples" / "hf_rope.rope")["gptj_cache"]
    rng = np.random.default_rng(1)
    B, S, P = 2, 3, 64
    freqs = np.arange(P)[:, None] * _inv_freq(10000.0, 64)      # [P, 32]
    sin = np.repeat(np.sin(freqs), 2, axis=-1).astype(np.float32)   # [P, 64]: s0 s0 s1 s1 ...
    cos = np.repeat(np.cos(freqs), 2, axis=-1).astype(np.float32)
    pos = rng.integers(0, P, size=(B, S))
    q = rng.standard_normal((B, S, 16, 256)).astype(np.float16)
    got = op(q, pos, cos, sin, backend=backend).astype(np.float64)
    x = q.astype(np.float64)
    rot, tail = x[..., :64], x[..., 64:]
    c, s = cos[pos][:, :, None].astype(np.float64), sin[pos][:, :, None].astype(np.float64)
    want = np.concatenate([rot * c + _rotate_every_two(rot) * s, tail], axis=-1)
    np.testing.assert_allclose(got, want, rtol=2 ** -10, atol=2 ** -10)


def test_full_width_plan_reads_column_of_each_element():
    p = ropegen.compile(ROOT / "examples" / "hf_rope.rope")["gptj_cache"].plan
    (blk,) = p.blocks
    cols = {blk.a0 + j * blk.a_step: blk.ca0 + j * blk.ca_step for j in range(blk.count)}
    cols.update({blk.b0 + j * blk.b_step: blk.cb0 + j * blk.cb_step for j in range(blk.count)})
    assert cols == {e: e for e in range(64)}
