"""Per-head RMSNorm on fused-QKV views, and the RMSNorm runner's quick path (runtime/gpu_rms.py).

* row_layout (pure Python): `q = qkv[:, :H * D].view(T, H, D)` has rows (t, h) at t * outer + h * D,
  no one row stride: the kernels get groups of H rows (row_group) and each array its row and group
  strides; evenly spaced arrays keep row_group 0 (no division in the kernel); layouts no one
  grouping serves are refused naming the array;
* the generated CUDA (on the host: test_cuda_backend.py's g++ emulation behind its CuPy stand-in)
  and OpenCL (PoCL) kernels on fused-QKV views of bf16 and f32 heads, with a residual (itself a view
  or contiguous), out of place and in place, the vector and the scalar kernel: the same bits as the
  same kernel on contiguous copies, and nothing outside the views written;
* a repeated signature of device arrays skips the binding (the same bits, new outputs, the first
  call's outputs not kept alive), not in place; a new alignment or layout is bound again.
"""
from __future__ import annotations

import shutil
import weakref

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.backends.opencl import backend as clb
from ropegen.runtime import gpu_rms, host
from ropegen.runtime.arrays import DeviceArray

import test_cuda_backend as tcb

H, KV, D, T = 4, 2, 128, 3          # q heads, k/v heads, head_dim, tokens: 12 rows, a part-empty last block
WIDTH = H + 2 * KV                  # heads of one token's fused qkv row
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed (host build of the .cu)")
WHY_CL = clb.unavailable()
needs_cl = pytest.mark.skipif(WHY_CL is not None, reason=f"OpenCL cannot run here: {WHY_CL}")

SPECS = """
rmsnorm q_norm_bf16 {
    in q:      bf16[T, 4, 128]
    in weight: bf16[128]
    out q_normed
    epsilon = 1e-6
}
rmsnorm q_norm_f32 {
    in q:      f32[T, 4, 128]
    in weight: f32[128]
    out q_normed
    epsilon = 1e-6
}
rmsnorm q_add_bf16 {
    in q:        bf16[T, 4, 128]
    in residual: bf16[T, 4, 128]
    in weight:   bf16[128]
    out y
    out h
    residual     = residual
    residual_add = storage
    epsilon      = 1e-6
}
rmsnorm q_add_f32 {
    in q:        f32[T, 4, 128]
    in residual: f32[T, 4, 128]
    in weight:   f32[128]
    out y
    out h
    residual     = residual
    residual_add = stash
    epsilon      = 1e-6
}
rmsnorm q_norm_bshd {
    in q:      bf16[B, S, 4, 128]
    in weight: bf16[128]
    out q_normed
    epsilon = 1e-6
}
"""
OPS = ropegen.compile(SPECS)
NAMES = ["q_norm_bf16", "q_norm_f32", "q_add_bf16", "q_add_f32"]


def _np_dtype(op):
    return ml_dtypes.bfloat16 if op.plan.x.name == "bf16" else np.float32


def _values(op, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: (rng.standard_normal((T, H, D) if t.name != op.plan.scale_name else (D,)) * 2).astype(
        _np_dtype(op)) for t in op.ir.inputs}


# ---------------------------------------------------------------------------------------------
# row_layout: pure Python

def _dev(shape, strides, dtype="bf16", ptr=1 << 20) -> DeviceArray:
    return DeviceArray(ptr, tuple(shape), tuple(strides), dtype, 0)


def test_fused_qkv_view_rows_fall_in_groups_of_heads():
    p = OPS["q_norm_bf16"].plan
    x = _dev((T, H, D), (WIDTH * D, D, 1))                   # qkv[:, :H*D].view(T, H, D)
    y = _dev((T, H, D), (H * D, D, 1))                       # a new contiguous output
    lay = gpu_rms.row_layout(p, [("q", x), ("out q_normed", y)])
    assert (lay.rows, lay.group, lay.strides) == (T * H, H, ((D, WIDTH * D), (D, H * D)))
    assert lay.launch(p) == {"rows": T * H, "row_group": H, "x_row_stride": D, "x_group_stride": WIDTH * D,
                             "y_row_stride": D, "y_group_stride": H * D}
    # every row r lands where the view has it: (r // H) * group stride + (r % H) * row stride
    rows = np.arange(T * H)
    view = np.arange(T * WIDTH * D).reshape(T, WIDTH, D)[:, :H]
    assert np.array_equal((rows // lay.group) * WIDTH * D + (rows % lay.group) * D, view[:, :, 0].ravel())


def test_evenly_spaced_rows_keep_no_groups():
    p = OPS["q_norm_bf16"].plan
    for x in (_dev((T, H, D), (H * D, D, 1)), _dev((T, H, D), (2 * H * D, 2 * D, 1)),    # dense, spaced
              _dev((1, H, D), (WIDTH * D, D, 1))):     # one token of a fused view: its heads evenly spaced
        lay = gpu_rms.row_layout(p, [("q", x), ("out q_normed", _dev(x.shape, (H * D, D, 1)))])
        assert lay.group == 0 and lay.strides[0] == (x.strides[1], 0), x.strides


def test_batch_and_sequence_axes_collapse_into_the_groups():
    p = OPS["q_norm_bshd"].plan
    x = _dev((2, T, H, D), (T * WIDTH * D, WIDTH * D, D, 1))     # qkv[B, S, (H+2KV)*D] split
    lay = gpu_rms.row_layout(p, [("q", x), ("out q_normed", _dev(x.shape, (T * H * D, H * D, D, 1)))])
    assert (lay.rows, lay.group, lay.strides) == (2 * T * H, H, ((D, WIDTH * D), (D, H * D)))


def test_layouts_no_grouping_serves_are_refused_naming_the_array():
    p = OPS["q_norm_bshd"].plan
    dense = ("out q_normed", _dev((2, T, H, D), (T * H * D, H * D, D, 1)))
    twice = _dev((2, T, H, D), (5 * 6 * D, 6 * D, D, 1))      # big[:, :T, :H] of big [2, 5, 6, D]
    with pytest.raises(ValueError, match=r"^q: rows must be evenly spaced, or in evenly spaced groups"):
        gpu_rms.row_layout(p, [("q", twice), dense])
    by_head = _dev((2, T, H, D), (T * WIDTH * D, WIDTH * D, D, 1))    # groups of H rows
    by_token = _dev((2, T, H, D), (5 * H * D, H * D, D, 1))           # groups of T * H rows
    with pytest.raises(ValueError, match=r"^out q_normed: its rows fall in groups of 12, q's in groups of 4"):
        gpu_rms.row_layout(p, [("q", by_head), ("out q_normed", by_token)])
    with pytest.raises(ValueError, match="the normalized axes must be C-contiguous"):
        gpu_rms.row_layout(p, [("q", _dev((2, T, H, D), (T * H * D, H * D, 1, H))), dense])


def test_launch_values_name_every_kernel_parameter():
    for name in NAMES:
        op = OPS[name]
        cfg = ropegen.backends.get("cuda").config(op.plan)
        x = _dev((T, H, D), (WIDTH * D, D, 1))
        rowed = [(n, x) for n in ["q"] + (["residual"] if op.plan.residual else []) + list(op.outputs)]
        values = gpu_rms.row_layout(op.plan, rowed).launch(op.plan)
        launch = {prm.source[1] for k in cfg.kernels for prm in k.params if prm.source[0] == "launch"}
        assert launch == set(values), name


# ---------------------------------------------------------------------------------------------
# the kernels on fused views: CUDA on the host (CuPy stand-in), OpenCL on PoCL

class _Fake:
    """Device buffers of the CuPy stand-in; `kernels()` the names launched since the last call."""
    backend = "cuda"

    def __init__(self, cp):
        self.cp = cp

    def buffer(self, values: np.ndarray):
        buf = tcb.aligned_empty(values.shape, values.dtype)
        buf[...] = values
        return self.cp.ndarray(buf)

    def grid(self, buf, shift: int, heads: int):
        return self.cp.ndarray(buf.a[shift:shift + T * heads * D].reshape(T, heads, D))

    def heads(self, grid, start: int):
        return self.cp.ndarray(grid.a[:, start:start + H])

    def host(self, a) -> np.ndarray:
        return a.a.copy()

    def kernels(self) -> list[str]:
        got = list(self.cp.kernels)
        del self.cp.kernels[:]
        return got


class _Cl:
    """pyopencl buffers on PoCL; `kernels()` the names the runner launched since the last call."""
    backend = "opencl"

    def __init__(self, monkeypatch):
        import pyopencl.array as cla
        self.cla, self.queue, self.used = cla, clb.default_queue(), []
        real = gpu_rms.rms_launch

        def spy(k, rows):
            self.used.append(k.name)
            return real(k, rows)
        monkeypatch.setattr(gpu_rms, "rms_launch", spy)

    def buffer(self, values: np.ndarray):
        return self.cla.to_device(self.queue, np.ascontiguousarray(values))

    def grid(self, buf, shift: int, heads: int):
        return buf[shift:shift + T * heads * D].reshape(T, heads, D)

    def heads(self, grid, start: int):
        return grid[:, start:start + H]

    def host(self, a) -> np.ndarray:
        return a.get()

    def kernels(self) -> list[str]:
        got = list(self.used)
        del self.used[:]
        return got


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _placed(dev, values: np.ndarray, shift: int, start: int, fused: bool):
    """(buffer, view, where(buffer values, heads)): `values` [T, H, D] as heads start..start+H of a
    fused [T, WIDTH, D] buffer, or as a contiguous [T, H, D] one (start 0), `shift` elements into a
    1-D buffer (1: no vector kernel); other elements hold a pattern that must stay. where() puts
    heads [T, H, D] into a host copy of the buffer, where the view has them."""
    width = WIDTH if fused else H
    pattern = (np.arange(T * width * D + 8) % 7).astype(values.dtype)

    def where(buf_values: np.ndarray, heads: np.ndarray) -> np.ndarray:
        out = buf_values.copy()
        out[shift:shift + T * width * D].reshape(T, width, D)[:, start:start + H] = heads
        return out
    buf = dev.buffer(where(pattern, values))
    return buf, dev.heads(dev.grid(buf, shift, width), start), where


def _run_views(op, dev, seed: int) -> None:
    """Every variant on fused views against the same kernel on contiguous copies, bit for bit; in
    place, nothing of the fused buffers but the views is written, out of place nothing at all."""
    p = op.plan
    values = _values(op, seed)
    rowed = [p.x_name] + ([p.residual] if p.residual else [])
    starts = {p.x_name: 0, p.residual: H - 1}      # the residual: heads 3..6 of its own fused buffer
    layouts = [{n: True for n in rowed}]
    if p.residual:                                 # x a view, the residual contiguous
        layouts.append({p.x_name: True, p.residual: False})
    for shift, kernel in ((0, "_vec"), (1, "_scalar")):
        copies = [_placed(dev, values[n], shift, 0, False)[1] if n in rowed else dev.buffer(values[n])
                  for n in op.inputs]
        dev.kernels()
        want = [dev.host(o) for o in op.run_all(*copies, backend=dev.backend)]
        assert dev.kernels() == [op.name + kernel]
        for fused in layouts:
            for inplace in (False, True):
                label = (kernel, fused, inplace)
                placed = {n: _placed(dev, values[n], shift, starts[n] if fused[n] else 0, fused[n]) for n in rowed}
                before = {n: dev.host(buf) for n, (buf, _, _) in placed.items()}
                args = [placed[n][1] if n in rowed else dev.buffer(values[n]) for n in op.inputs]
                outs = op.run_all(*args, backend=dev.backend, inplace=inplace)
                assert dev.kernels() == [op.name + kernel], label
                if inplace:       # y over x, h over the residual
                    assert all(o is placed[n][1] for o, n in zip(outs, rowed)), label
                else:
                    for o, w in zip(outs, want):
                        assert np.array_equal(_bits(dev.host(o)), _bits(w)), label
                for i, (n, (buf, _, where)) in enumerate(placed.items()):
                    expect = where(before[n], want[i]) if inplace else before[n]
                    assert np.array_equal(_bits(dev.host(buf)), _bits(expect)), (label, n)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_cuda_fused_views_match_contiguous_copies_bit_for_bit(name, monkeypatch):
    cp = tcb._fake_cupy(monkeypatch)
    op = ropegen.compile(SPECS)[name]
    tcb._CFG_OF[op.sources["cuda"][f"{op.name}.cu"]] = (ropegen.backends.get("cuda").config(op.plan),)
    _run_views(op, _Fake(cp), seed=NAMES.index(name))


@needs_cl
@pytest.mark.parametrize("name", NAMES)
def test_opencl_fused_views_match_contiguous_copies_bit_for_bit(name, monkeypatch):
    _run_views(OPS[name], _Cl(monkeypatch), seed=10 + NAMES.index(name))


# ---------------------------------------------------------------------------------------------
# the quick path (CuPy stand-in)

@needs_gxx
def test_repeated_signature_skips_the_binding_with_the_same_bits(monkeypatch):
    cp = tcb._fake_cupy(monkeypatch)
    op = ropegen.compile(SPECS)["q_add_bf16"]        # a fresh operator: no kernel learnt yet
    tcb._CFG_OF[op.sources["cuda"][f"{op.name}.cu"]] = (ropegen.backends.get("cuda").config(op.plan),)
    dev, values = _Fake(cp), _values(op, seed=5)
    kern = op.kernel("cuda")
    binds = []
    real = host.bind

    def counted(*a, **k):
        binds.append(k.get("inplace", False))
        return real(*a, **k)
    monkeypatch.setattr(host, "bind", counted)

    def args(shift: int) -> list:     # x a fused-QKV view, the residual contiguous
        return [_placed(dev, values["q"], shift, 0, True)[1], dev.buffer(values["residual"]),
                dev.buffer(values["weight"])]
    aligned, shifted = args(0), args(1)
    first = kern(*aligned)
    want = [dev.host(o) for o in first]
    gone = weakref.ref(first[0])
    del first
    assert gone() is None, "the quick path keeps the first call's output alive"
    assert len(binds) == 1 and dev.kernels() == [op.name + "_vec"]
    for check in (None, True, False):      # (the RMSNorm kernels report nothing: check changes nothing)
        again = kern(*aligned, check=check)
        assert [np.array_equal(_bits(dev.host(o)), _bits(w)) for o, w in zip(again, want)] == [True, True]
    assert len(binds) == 1, "the quick path bound the arrays again"
    # another alignment: another signature (the scalar kernel), bound once, then quick; then back
    for x in (shifted, shifted, aligned):
        kern(*x)
    assert len(binds) == 2 and dev.kernels() == [op.name + k for k in ("_vec",) * 3 + ("_scalar", "_scalar", "_vec")]
    # in place and out= are bound every time (their aliasing is checked per call)
    for _ in range(2):
        kern(*args(0), inplace=True)
    kern(*aligned, out=[dev.buffer(np.zeros((T, H, D), _np_dtype(op))) for _ in range(2)])
    assert binds[2:] == [True, True, False]


@needs_gxx
def test_batch_and_sequence_view_runs_and_two_groupings_are_refused(monkeypatch):
    """q of a [B, S, (H + 2 KV) * D] projection as [B, S, H, D]: the batch and sequence axes form the
    groups; the same bits as a contiguous copy. A view with rows in groups at two levels is refused."""
    cp = tcb._fake_cupy(monkeypatch)
    op = ropegen.compile(SPECS)["q_norm_bshd"]
    tcb._CFG_OF[op.sources["cuda"][f"{op.name}.cu"]] = (ropegen.backends.get("cuda").config(op.plan),)
    rng = np.random.default_rng(8)
    q = rng.standard_normal((2, T, H, D)).astype(ml_dtypes.bfloat16)
    weight = cp.ndarray(rng.standard_normal(D).astype(ml_dtypes.bfloat16))
    want = op.run(cp.ndarray(q.copy()), weight, backend="cuda").a
    fused = tcb.aligned_empty((2, T, WIDTH, D), q.dtype)
    fused[:, :, :H] = q
    got = op.run(cp.ndarray(fused[:, :, :H]), weight, backend="cuda").a
    assert cp.kernels == [op.name + "_vec"] * 2 and np.array_equal(_bits(got), _bits(want))
    big = tcb.aligned_empty((2, T + 2, WIDTH, D), q.dtype)
    with pytest.raises(ValueError, match=r"^q: rows must be evenly spaced, or in evenly spaced groups"):
        op.run(cp.ndarray(big[:, :T, :H]), weight, backend="cuda")
