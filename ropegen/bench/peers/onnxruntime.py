"""The onnxruntime peer: the operator as ONNX opset-23 nodes (RotaryEmbedding, RMSNormalization) run by
onnxruntime's CPU kernels (an optional dependency), where an ONNX node can express the operator."""
from __future__ import annotations

from typing import Any

import numpy as np

from ropegen import ir
from ropegen.api import Operator
from ropegen.extras import install_hint
from ropegen.bench.harness import is_decode, timed_beside
from ropegen.ops.rope import forms


def _onnx_rope_layout(o: ir.RopeOp, name: str) -> tuple[str, int] | None:
    """How a rotated tensor is shown to ONNX: ('3d', num_heads) or ('4d', 0), or None."""
    t = o.tensor(name)
    roles = [d.role for d in t.dims]
    heads = int(t.role_dim(ir.Role.HEADS).size)
    if roles == [ir.Role.TOKENS, ir.Role.HEADS, ir.Role.HEAD_DIM]:
        return ("3d", heads)
    if roles == [ir.Role.BATCH, ir.Role.SEQ, ir.Role.HEADS, ir.Role.HEAD_DIM]:
        return ("3d", heads)
    if roles == [ir.Role.BATCH, ir.Role.HEADS, ir.Role.SEQ, ir.Role.HEAD_DIM]:
        return ("4d", 0)
    return None


def _rmsnorm_nodes(helper, op: Operator, arrays: dict[str, np.ndarray]):
    """(nodes, feeds, outs) of one RMSNormalization node."""
    p = op.plan
    x, s = (arrays[t.name] for t in p.inputs)
    y = np.empty(x.shape, dtype=p.y.np_dtype)
    stash = 1 if p.stash.name == "f32" else 11
    nodes = [helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=p.axis, epsilon=p.epsilon,
                              stash_type=stash)]
    return nodes, {"x": x, "scale": s}, {"y": y}


def _rope_nodes(helper, op: Operator, arrays: dict[str, np.ndarray]):
    """(nodes, feeds, outs) of one RotaryEmbedding node per rotated input, or why there is no ONNX form."""
    o, p = op.ir, op.plan
    nodes, feeds, outs = [], {}, {}
    if o.pairing.kind not in (ir.PairKind.NEOX, ir.PairKind.GPTJ):
        return f"pairing {o.pairing.kind.value} has no ONNX RotaryEmbedding form"
    if o.direction is ir.Direction.BACKWARD:
        return "ONNX RotaryEmbedding rotates forward only"
    position = forms.position_of(o.positions)
    if not (position.takes_ids or position.per_token):
        return f"positions {o.positions.kind.value} have no ONNX form"
    if any(not s.rotate for s in p.streams):
        return "copy outputs have no ONNX RotaryEmbedding form"
    half = p.rotary_dim // 2
    if forms.angles_of(o.angles).tables:
        cos = np.ascontiguousarray(arrays[p.angles.cos][..., :half])
        sin = np.ascontiguousarray(arrays[p.angles.sin][..., p.angles.sin_column:p.angles.sin_column + half])
    else:   # computed in the kernel: onnxruntime gets the equivalent float32 cache instead
        from ropegen.ops.reference import cos_sin_at
        if p.angles.freq_factors:
            return "freq_factors have no ONNX form"
        ids = arrays[o.positions.ids]
        rows = int(ids.max()) + 1 if ids.size else 1
        cos, sin = cos_sin_at(o, np.arange(rows), half)
    x0 = arrays[p.streams[0].src]
    cos = cos.astype(x0.dtype)
    sin = sin.astype(x0.dtype)
    feeds["cos_cache"], feeds["sin_cache"] = cos, sin
    pos_name = ""
    if position.takes_ids:
        ids = arrays[o.positions.ids].astype(np.int64)
        batch = 1 if p.token_layout == "t" else ids.shape[0]
        feeds["position_ids"] = ids.reshape(batch, -1)
        pos_name = "position_ids"
    for s in p.streams:
        lay = _onnx_rope_layout(o, s.src)
        if lay is None:
            return f"the layout of {s.src} has no ONNX form"
        a = arrays[s.src]
        if lay[0] == "3d":
            batch = 1 if p.token_layout == "t" else a.shape[0]
            a = a.reshape(batch, -1, lay[1] * p.head_dim)
        attrs = {"interleaved": int(o.pairing.kind is ir.PairKind.GPTJ)}
        if lay[0] == "3d":
            attrs["num_heads"] = lay[1]
        if p.rotary_dim != p.head_dim:
            attrs["rotary_embedding_dim"] = p.rotary_dim
        nodes.append(helper.make_node("RotaryEmbedding", [f"x_{s.src}", "cos_cache", "sin_cache", pos_name],
                                      [f"y_{s.out}"], **attrs))
        feeds[f"x_{s.src}"] = a
        outs[f"y_{s.out}"] = np.empty(a.shape, a.dtype)
    return nodes, feeds, outs


_NODES = {"rope": _rope_nodes, "rmsnorm": _rmsnorm_nodes}


def onnx_peer_model(op: Operator, arrays: dict[str, np.ndarray]):
    """(ModelProto, feeds, output arrays) running the operator as ONNX opset-23 nodes, or a reason why not."""
    try:
        import onnx
        from onnx import helper
    except ImportError:
        return install_hint("onnx")
    from onnx.helper import np_dtype_to_tensor_dtype

    def tensor_info(name: str, a: np.ndarray):
        return helper.make_tensor_value_info(name, np_dtype_to_tensor_dtype(a.dtype), list(a.shape))

    built = _NODES[op.kind](helper, op, arrays)
    if isinstance(built, str):
        return built
    nodes, feeds, outs = built
    inputs = [tensor_info(n, a) for n, a in feeds.items()]
    outputs = [tensor_info(n, a) for n, a in outs.items()]
    model = helper.make_model(helper.make_graph(nodes, op.name, inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 11
    onnx.checker.check_model(model)
    return model, feeds, outs


def measure(op: Operator, arrays: dict[str, np.ndarray], nbytes: int, threads: int, repeats: int,
            measured: str, beside=None, flush=None) -> dict[str, Any]:
    try:
        import onnxruntime as ort
    except ImportError:
        return {"error": install_hint("onnxruntime")}
    try:
        built = onnx_peer_model(op, arrays)
        if isinstance(built, str):
            return {"error": built}
        model, feeds, outs = built
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        # no spin-waiting after a run: its rounds alternate with ropegen's call (harness.timed_beside),
        # and on a small host its spinning pool threads took the cores from ropegen's next call
        # (RMSNorm 4096 x 16384, two threads: 7.1 ms in ropegen's own rounds, 9.7-14 ms between them)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        if is_decode(op, arrays):   # the whole call, as ropegen's op.run is timed there: NumPy in, out
            dense = {n: np.ascontiguousarray(a) for n, a in feeds.items()}
            return {**timed_beside(lambda: sess.run(None, dense), beside, repeats, nbytes, flush), "call": "whole"}
        io = sess.io_binding()
        for n, a in feeds.items():
            io.bind_cpu_input(n, np.ascontiguousarray(a))
        for n, a in outs.items():
            io.bind_output(n, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        return timed_beside(lambda: sess.run_with_iobinding(io), beside, repeats, nbytes, flush)
    except Exception as exc:  # onnxruntime lacking a kernel (e.g. bf16) is a result, not a crash
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}

