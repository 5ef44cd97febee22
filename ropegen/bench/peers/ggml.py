"""The ggml peer: ggml's CPU rope (ggml_rope_ext, from the optional ggml-python package) on the same
inputs, every rotated input as one node of one ggml graph, where ggml can express the operator."""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ropegen import ir
from ropegen.api import Operator
from ropegen.extras import install_hint
from ropegen.bench.harness import timed_beside
from ropegen.ops.rope import forms

# operator kind -> the ggml op this peer runs it as
GGML_OPS = {"rope": "ggml_rope_ext"}

# ggml_rope_ext's parameters where a scaling form sets none (forms.ScalingForm.llama_cpp)
_GGML_DEFAULTS = dict(freq_scale=1.0, ext_factor=0.0, attn_factor=1.0, beta_fast=32.0, beta_slow=1.0,
                      n_ctx_orig=4096)


def rope_setup(op: Operator, arrays: dict[str, np.ndarray]) -> dict[str, Any] | str:
    """ggml_rope_ext's arguments for a RoPE operator (rotated tensors as [tokens, heads, head_dim], ggml
    ne = {head_dim, heads, tokens}; int32 positions; angle parameters), or the reason it has no ggml form."""
    p, o = op.plan, op.ir
    if op.kind not in GGML_OPS:
        return "the ggml peer measures RoPE only (ggml_rope_ext)"
    if forms.angles_of(o.angles).tables:
        return "ggml_rope_ext computes its angles: a cos/sin table has no ggml form"
    if o.pairing.kind not in (ir.PairKind.NEOX, ir.PairKind.GPTJ):
        return f"pairing {o.pairing.kind.value} has no ggml_rope_ext mode"
    if not forms.position_of(o.positions).takes_ids:
        return f"positions {o.positions.kind.value} have no ggml form (ggml_rope_ext takes position ids)"
    if any(not s.rotate for s in p.streams):
        return "copy outputs have no ggml_rope_ext form"
    if p.storage.name not in ("f32", "f16"):
        return f"ggml_rope_ext has no {p.storage.name} kernel (f32 and f16 only)"
    ids = np.asarray(arrays[o.positions.ids])
    if ids.size and (int(ids.min()) < -(1 << 31) or int(ids.max()) >= (1 << 31)):
        return "positions beyond int32 have no ggml form"
    streams = []
    for s in p.streams:
        t = o.tensor(s.src)
        roles = [d.role for d in t.dims]
        if roles not in ([ir.Role.TOKENS, ir.Role.HEADS, ir.Role.HEAD_DIM],
                         [ir.Role.BATCH, ir.Role.SEQ, ir.Role.HEADS, ir.Role.HEAD_DIM]):
            return f"the layout of {s.src} has no ggml form (ggml_rope_ext rotates [tokens, heads, head_dim])"
        if t.dtype != p.storage:
            return f"{s.src} is {t.dtype.name}, not {p.storage.name}: ggml rotates one type per call"
        heads, dim = int(t.role_dim(ir.Role.HEADS).size), int(t.role_dim(ir.Role.HEAD_DIM).size)
        a = np.ascontiguousarray(arrays[s.src])
        n = a.size // (heads * dim)
        if ids.size != n:
            return f"{o.positions.ids} has {ids.size} positions for {n} tokens of {s.src}"
        streams.append((s.out, a.reshape(n, heads, dim)))
    a = o.angles
    half = p.rotary_dim // 2
    ff = None
    if a.freq_factors is not None:
        ff = np.asarray(arrays[a.freq_factors], dtype=np.float64).reshape(-1)[:half]
    s = a.scaling
    ggml_numerics = p.angles.kind == "ggml"
    given, said = forms.scaling_of(s).llama_cpp(s, ggml_numerics)
    k = dict(_GGML_DEFAULTS, **given)
    how = [said] if said else []
    if ggml_numerics:
        k["attn_factor"] *= a.magnitude
        how.append("the spec's ggml numerics")
    else:
        # exact angles: frequencies beyond base^(-2c/n_dims) become freq_factors (theta / ff), as llama.cpp
        # passes Llama-3 scaling (rope_freqs: 1, factor, or 1 / ((1 - smooth) / factor + smooth))
        from ropegen.exact import f64
        from ropegen.ops.plan import base_inv_freq
        base_inv = np.array([f64(f) for f in base_inv_freq(a.base, p.rotary_dim, half)])
        derived = k["freq_scale"] * base_inv / np.asarray(p.angles.inv_freq, dtype=np.float64)
        if not np.allclose(derived, 1.0, rtol=1e-12, atol=0.0):
            ff = derived if ff is None else derived * ff
            how.append(f"freq_factors from the {forms.scaling_of(s).word} scaling (as llama.cpp's rope_freqs)")
        k["attn_factor"] = p.angles.magnitude
        how.append("ggml's float32 angle numerics (the spec asks exact)")
    if a.freq_factors is not None:
        how.append(f"the spec's freq_factors {a.freq_factors}")
    mode = 2 if o.pairing.kind is ir.PairKind.NEOX else 0
    backward = o.direction is ir.Direction.BACKWARD
    fn = "ggml_rope_ext_back" if backward else "ggml_rope_ext"
    note = (f"{len(streams)} x {fn}({'neox' if mode == 2 else 'normal'}, n_dims={p.rotary_dim}) in one graph, "
            f"{p.storage.name}, int32 positions; " + ", ".join(how))
    return {"streams": streams, "positions": np.ascontiguousarray(ids.reshape(-1), dtype=np.int32),
            "freq_factors": None if ff is None else np.ascontiguousarray(ff, dtype=np.float32),
            "type": p.storage.name, "mode": mode, "n_dims": p.rotary_dim, "n_ctx_orig": int(k["n_ctx_orig"]),
            "freq_base": float(a.base), "freq_scale": float(k["freq_scale"]), "ext_factor": float(k["ext_factor"]),
            "attn_factor": float(k["attn_factor"]), "beta_fast": float(k["beta_fast"]),
            "beta_slow": float(k["beta_slow"]), "backward": backward, "note": note}


class GgmlRopeGraph:
    """Every rotated input through ggml_rope_ext (ggml_rope_ext_back for backward operators), all in one
    ggml graph computed by ggml's CPU backend with `threads` threads. The ggml tensors point at NumPy
    arrays (no copies): compute() writes `outs` (output name -> array shaped [tokens, heads, head_dim])."""

    def __init__(self, ggml: Any, setup: dict[str, Any], threads: int) -> None:
        self._ggml = ggml
        self.note = f"ggml-python {getattr(ggml, '__version__', '?')}: {setup['note']}"
        self.outs: dict[str, np.ndarray] = {}
        self._keep: list[Any] = [setup]
        self._ctx = self._pool = None
        streams = setup["streams"]
        params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * (2 * len(streams) + 4)
                                       + ggml.ggml_graph_overhead() + (1 << 16), mem_buffer=None, no_alloc=True)
        self._ctx = ctx = ggml.ggml_init(params)
        if not ctx:
            raise RuntimeError("ggml_init failed")
        try:
            gtype = {"f32": ggml.GGML_TYPE_F32, "f16": ggml.GGML_TYPE_F16}[setup["type"]]

            def leaf(t: Any, a: np.ndarray) -> Any:
                t.contents.data = a.ctypes.data
                self._keep.append(a)
                return t

            pos = setup["positions"]
            pos_t = leaf(ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_I32, pos.size), pos)
            ff_t = None
            if setup["freq_factors"] is not None:
                ff = setup["freq_factors"]
                ff_t = leaf(ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, ff.size), ff)
            rope = ggml.ggml_rope_ext_back if setup["backward"] else ggml.ggml_rope_ext
            self._graph = ggml.ggml_new_graph(ctx)
            for name, x in streams:
                n, h, d = x.shape
                x_t = leaf(ggml.ggml_new_tensor_3d(ctx, gtype, d, h, n), x)
                y_t = rope(ctx, x_t, pos_t, ff_t, setup["n_dims"], setup["mode"], setup["n_ctx_orig"],
                           setup["freq_base"], setup["freq_scale"], setup["ext_factor"], setup["attn_factor"],
                           setup["beta_fast"], setup["beta_slow"])
                out = np.empty_like(x)
                leaf(y_t, out)
                self.outs[name] = out
                ggml.ggml_build_forward_expand(self._graph, y_t)
            if hasattr(ggml, "ggml_cpu_init"):
                ggml.ggml_cpu_init()
            tp_params = ggml.ggml_threadpool_params_default(threads)
            self._pool = ggml.ggml_threadpool_new(ctypes.byref(tp_params))
            self._plan = ggml.ggml_graph_plan(self._graph, threads, self._pool)
            work = np.zeros(max(int(self._plan.work_size), 64), np.uint8)
            self._keep.append(work)
            self._plan.work_data = work.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
            self._plan_ref = ctypes.byref(self._plan)
        except BaseException:
            self.close()
            raise

    def compute(self) -> None:
        status = self._ggml.ggml_graph_compute(self._graph, self._plan_ref)
        if status != 0:
            raise RuntimeError(f"ggml_graph_compute returned status {status}")

    def close(self) -> None:
        if self._pool:
            self._ggml.ggml_threadpool_free(self._pool)
            self._pool = None
        if self._ctx:
            self._ggml.ggml_free(self._ctx)
            self._ctx = None


def ggml_peer_graph(op: Operator, arrays: dict[str, np.ndarray], threads: int = 1) -> GgmlRopeGraph | str:
    """The operator as a ggml graph of ggml_rope_ext calls (call .close() when done), or a reason why not."""
    try:
        import ggml
    except ImportError:
        return install_hint("ggml")
    except OSError as exc:          # the package is there, its shared library is not loadable
        return f"ggml-python cannot load its library: {exc}"
    setup = rope_setup(op, arrays)
    if isinstance(setup, str):
        return setup
    return GgmlRopeGraph(ggml, setup, threads)


def measure(op: Operator, arrays: dict[str, np.ndarray], nbytes: int, threads: int, repeats: int,
            measured: str, beside=None, flush=None) -> dict[str, Any]:
    """ggml's CPU rope (q and k as two ggml_rope_ext nodes of one graph, `threads` threads): the graph
    compute is timed, not its building; its output is compared once with the measured target's."""
    try:
        graph = ggml_peer_graph(op, arrays, threads)
        if isinstance(graph, str):
            return {"error": graph}
        try:
            graph.compute()
            args = [arrays[n] for n in op.inputs]
            want = op.run_all(*args, backend=measured)
            diff = 0.0
            for got, w in zip(graph.outs.values(), want):
                w = np.asarray(w, dtype=np.float64).reshape(got.shape)
                scale = float(np.max(np.abs(w))) if w.size else 0.0
                if scale:
                    diff = max(diff, float(np.max(np.abs(got.astype(np.float64) - w))) / scale)
            timed = timed_beside(graph.compute, beside, repeats, nbytes, flush)
        finally:
            graph.close()
    except Exception as exc:  # a peer failing is reported, not raised
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    return {**timed, "note": graph.note, "max_rel_diff": diff}

