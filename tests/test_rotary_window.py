"""`rotary = [start, stop]` rotates a window of each head (DeepSeek MLA's rope part at the end of a
192-wide q head) exactly as rotating that slice on its own, copying the rest; and packed QKV: the q and
k head ranges of one fused tensor rotated in place through views, v untouched."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen import backends
from ropegen.spec.diagnostics import SpecError

RUNNABLE = [b.name for b in backends.BACKENDS if b.unavailable() is None]
IN_PLACE = [b for b in RUNNABLE if "inplace" in backends.get(b).run_options]

SPECS = """
rope win {{ in q: f32[tokens=T, heads=3, head_dim={hd}] in pos: i64[T]
  out q_rot = rotate(q) pairing = {pairing} rotary = [{lo}, {hi}] positions = pos angles = computed(base = 10000) }}
rope part {{ in q: f32[tokens=T, heads=3, head_dim={w}] in pos: i64[T]
  out q_rot = rotate(q) pairing = {pairing} positions = pos angles = computed(base = 10000) }}
"""


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("pairing,hd,lo,hi", [("gptj", 192, 128, 192), ("neox", 32, 8, 24), ("neox", 16, 0, 8)])
def test_window_is_the_slice_rotated(backend, pairing, hd, lo, hi):
    prog = ropegen.compile(SPECS.format(pairing=pairing, hd=hd, lo=lo, hi=hi, w=hi - lo))
    rng = np.random.default_rng(2)
    pos = np.array([0, 5, 4096, 77], np.int64)
    q = rng.standard_normal((pos.size, 3, hd)).astype(np.float32)
    got = prog["win"].run(q, pos, backend=backend)
    part = prog["part"].run(np.ascontiguousarray(q[..., lo:hi]), pos, backend=backend)
    assert np.array_equal(got[..., lo:hi], part)
    assert np.array_equal(got[..., :lo], q[..., :lo]) and np.array_equal(got[..., hi:], q[..., hi:])


@pytest.mark.parametrize("backend", IN_PLACE)
def test_packed_qkv_in_place_through_views(backend):
    op = ropegen.compile("examples/llama3.rope")["llama3_8b"]     # q [T, 32, 128], k [T, 8, 128]
    T = 6
    qkv = np.random.default_rng(0).standard_normal((T, 48, 128)).astype(ml_dtypes.bfloat16)
    pos = np.arange(T, dtype=np.int64) * 1000
    want_q, want_k = op.run(np.ascontiguousarray(qkv[:, :32]), np.ascontiguousarray(qkv[:, 32:40]), pos,
                            backend=backend)
    buf = qkv.copy()
    if backend == "cuda":     # in place needs device arrays there: CuPy views of one fused buffer
        cp = pytest.importorskip("cupy")
        try:
            dev = cp.asarray(buf)
        except Exception as e:  # noqa: BLE001 - a CuPy without bfloat16 arrays
            pytest.skip(f"this CuPy cannot hold bfloat16 arrays: {e}")
        q_rot, k_rot = op.run(dev[:, :32], dev[:, 32:40], cp.asarray(pos), backend=backend, inplace=True)
        assert cp.shares_memory(q_rot, dev) and cp.shares_memory(k_rot, dev)
        buf = dev.get()
    else:
        q_rot, k_rot = op.run(buf[:, :32], buf[:, 32:40], pos, backend=backend, inplace=True)
        assert np.shares_memory(q_rot, buf) and np.shares_memory(k_rot, buf)
    assert np.array_equal(buf[:, :32].view(np.uint16), want_q.view(np.uint16))
    assert np.array_equal(buf[:, 32:40].view(np.uint16), want_k.view(np.uint16))
    assert np.array_equal(buf[:, 40:].view(np.uint16), qkv[:, 40:].view(np.uint16))     # v untouched


@pytest.mark.parametrize("setting,code,msg", [
    ("rotary = [128, 193]", "C014", "even-length window inside head_dim 192"),
    ("rotary = [128, 200]", "C014", "inside head_dim 192"),
    ("rotary = 64", "C008", "[start, stop]"),
    ("rotary = [0, 64] rotary_dim = 64", "C010", "either rotary_dim or rotary"),
])
def test_window_rules(setting, code, msg):
    with pytest.raises(SpecError) as e:
        ropegen.compile(f"""
rope r {{ in q: f32[tokens=T, heads=2, head_dim=192] in pos: i64[T]
  out q_rot = rotate(q) pairing = gptj {setting} positions = pos angles = computed(base = 10000) }}""")
    assert code in str(e.value) and msg in str(e.value), str(e.value)
