"""`ropegen bench`: per operator and shape, time (min / median), bytes moved, GB/s and the ratio to a
plain copy of the same bytes with the same threads, measured in the same run; side by side with the
NumPy backend, onnxruntime's CPU kernels (an optional dependency) where an ONNX node can
express the operator, and ggml's ggml_rope_ext (the optional ggml-python package) where ggml can.
Results are plain dicts, ready for JSON.

The copy yardstick is memcpy of the same bytes (half read, half written) for out-of-place runs and
an in-place scale x *= s over the same bytes for in-place runs, both built like every C kernel.
"""
from __future__ import annotations

import ctypes
import time
from typing import Any, Callable, Iterable

import numpy as np

from ropegen import __version__, ir
from ropegen.backends.c import build as cbuild
from ropegen.api import Operator, Program
from ropegen.ir.dtypes import DTYPES
from ropegen.ops.plan import ExactAngles, GgmlAngles, RmsNormPlan, RopePlan, TableAnglesPlan
from ropegen.backends.c.backend import CHUNK_BYTES
from ropegen.ops.inputs import elements, symbol_roles
from ropegen.runtime.memory import TooLarge, format_bytes, limit_hint, memory_limit
from ropegen.render import render

# sizes for symbols nobody named, by what the symbol stands for (the Llama-3 shapes)
ROLE_DEFAULTS = {"tokens": 4096, "seq": 4096, "batch": 1, "rows": 8192, "sequences": 1, "free": 4096}
DEFAULT_SHAPES = ("positions=prefill", "positions=random")
NUMPY_REPEATS = 3

LLAMA3_SUITE = """
rope llama3_8b_{dt} {{
    in q:         {dt}[tokens=T, heads=32, head_dim=128]
    in k:         {dt}[tokens=T, heads=8, head_dim=128]
    in positions: i64[T]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing   = neox
    positions = positions
    angles    = computed(base = 500000,
                         scaling = llama3(factor = 8, low_freq_factor = 1, high_freq_factor = 4,
                                          original_max_positions = 8192))
    compute   = f32
}}

rope llama3_8b_cached_{dt} {{
    in q:         {dt}[tokens=T, heads=32, head_dim=128]
    in k:         {dt}[tokens=T, heads=8, head_dim=128]
    in positions: i64[T]
    in cos:       f32[P, 64]
    in sin:       f32[P, 64]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing   = neox
    positions = positions
    angles    = table(cos = cos, sin = sin)
}}

rmsnorm rmsnorm_4096_{dt} {{
    in x:     {dt}[N, 4096]
    in scale: {dt}[4096]
    out y
}}
"""


def llama3_suite(dtypes: Iterable[str] = ("f32", "bf16")) -> list[Operator]:
    """The issue's benchmark set: Llama-3-8B RoPE (cached and computed angles) and RMSNorm [4096, 4096]."""
    from ropegen.api import compile as compile_spec
    text = "".join(LLAMA3_SUITE.format(dt=dt) for dt in dtypes)
    return list(compile_spec(text, file="llama3_bench.rope"))


# ---------------------------------------------------------------------------------------------
# shapes and inputs

def shape_items(text: str) -> list[tuple[str, str]]:
    """The NAME=VALUE items of a --shape string ('T=4096,positions=prefill'; commas or spaces), each
    checked: sizes are integers >= 0, positions is prefill or random, dtype a float type. A malformed
    item is a ValueError; which names apply is decided by the bench that reads them."""
    items = [part.strip() for part in str(text).replace(" ", ",").split(",") if part.strip()]
    if not items:
        raise ValueError(f"empty shape '{text}': expected NAME=SIZE items, e.g. T=4096")
    out = []
    for part in items:
        name, eq, value = (x.strip() for x in part.partition("="))
        if not eq or not name or not value:
            raise ValueError(f"bad shape item '{part}': expected NAME=SIZE, e.g. T=4096")
        if name == "positions":
            if value not in ("prefill", "random"):
                raise ValueError(f"positions={value}: expected prefill or random")
        elif name == "dtype":
            floats = sorted(n for n, d in DTYPES.items() if d.is_float)
            if value not in floats:
                raise ValueError(f"dtype={value}: expected one of {', '.join(floats)}")
        else:
            try:
                size = int(value, 10)
            except ValueError:
                raise ValueError(f"bad size '{part}': expected NAME=INTEGER") from None
            if size < 0:
                raise ValueError(f"bad size '{part}': sizes are >= 0")
        out.append((name, value))
    return out


def parse_shape(shape: str | dict | None) -> dict[str, Any]:
    """'T=4096,P=8192,positions=prefill' -> {'label', 'sizes', 'positions'} (positions: prefill | random)."""
    if shape is None:
        return {"label": "default", "sizes": {}, "positions": "random"}
    if isinstance(shape, dict):
        d = dict(shape)
        d.setdefault("sizes", {})
        d.setdefault("positions", "random")
        d.setdefault("label", ",".join(f"{k}={v}" for k, v in d["sizes"].items()) or "default")
        return d
    sizes: dict[str, int] = {}
    positions = "random"
    for k, v in shape_items(shape):
        if k == "positions":
            positions = v
        elif k == "dtype":
            raise ValueError(f"shape '{shape}': dtype= is for --backend cuda; the CPU bench takes the "
                             "dtypes of the spec")
        else:
            sizes[k] = int(v)
    label = str(shape).strip()
    return {"label": label, "sizes": sizes, "positions": positions}


def _resolve(t: ir.Tensor, sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(sizes[a.size] if isinstance(a.size, str) else int(a.size) for a in t.axes)


def _bench_sizes(op: Operator, sizes: dict[str, int] | None) -> dict[str, int]:
    """Every symbol's size: from `sizes`, else its role's default."""
    return {s: int((sizes or {}).get(s, ROLE_DEFAULTS[r])) for s, r in symbol_roles(op.ir).items()}


def bench_bytes(op: Operator, sizes: dict[str, int] | None = None) -> int:
    """About the most memory benchmarking `op` at `sizes` needs, from the declared shapes alone (before
    anything is allocated): four times its inputs and outputs (the arrays, the in-place copies, the
    copy yardstick's buffers and the peers' outputs), plus a float32 temporary per input element
    while the inputs are drawn."""
    o = op.ir
    sz = _bench_sizes(op, sizes)
    inputs = 0
    widest = 0
    for t in o.inputs:
        n = elements(_resolve(t, sz))
        inputs += n * t.dtype.itemsize
        widest = max(widest, n)
    if isinstance(o, ir.RmsNormOp):
        outputs = elements(_resolve(o.x, sz)) * 8
    else:
        outputs = sum(elements(_resolve(o.tensor(r.source), sz)) * o.tensor(r.source).dtype.itemsize
                      for r in o.outputs)
    return 4 * (inputs + outputs) + 4 * widest


def require_memory(op: Operator, shape: dict[str, Any], limit: int) -> None:
    """Raise TooLarge (a ValueError) when benchmarking `op` at `shape` needs more than `limit` bytes."""
    need = bench_bytes(op, shape["sizes"])
    if need > limit:
        raise TooLarge(f"shape '{shape['label']}' is too large for {op.name}: it needs about {format_bytes(need)}, "
                       f"over {format_bytes(limit)} ({limit_hint()})")


def bench_inputs(op: Operator, sizes: dict[str, int] | None = None, positions: str = "random",
                 seed: int = 0) -> dict[str, np.ndarray]:
    """Valid inputs of benchmark size: every symbol sized from `sizes` or its role's default; positions
    0..S-1 per sequence ('prefill') or uniform over the table rows ('random', decode-like)."""
    rng = np.random.default_rng(seed)
    o = op.ir
    sz = _bench_sizes(op, sizes)
    out: dict[str, np.ndarray] = {}
    if isinstance(o, ir.RmsNormOp):
        for t in o.inputs:
            out[t.name] = rng.standard_normal(_resolve(t, sz), dtype=np.float32).astype(t.dtype.np_dtype)
        return out
    first = o.rotated[0]
    if first.role_dim(ir.Role.TOKENS) is not None:
        d = first.role_dim(ir.Role.TOKENS).size
        B, S = 1, (sz[d] if isinstance(d, str) else d)
    else:
        b, s = first.role_dim(ir.Role.BATCH).size, first.role_dim(ir.Role.SEQ).size
        B, S = (sz[b] if isinstance(b, str) else b), (sz[s] if isinstance(s, str) else s)
    rows = None
    if isinstance(o.angles, ir.TableAngles) and o.positions.kind is not ir.PositionKind.TOKEN:
        lead = o.tensor(o.angles.cos).axes[0].size
        rows = sz[lead] if isinstance(lead, str) else int(lead)
    limit = rows if rows is not None else 1 << 20
    pos = o.positions
    if o.sequences:
        t = o.tensor(o.sequences)
        n = _resolve(t, sz)[0]
        lens = np.full(n, S // max(n, 1), dtype=np.int64)
        if n:
            lens[-1] += S - int(lens.sum())
        out[o.sequences] = lens.astype(t.dtype.np_dtype)
    if pos.kind is ir.PositionKind.IDS:
        t = o.tensor(pos.ids)
        if positions == "prefill":
            ids = np.tile(np.arange(S, dtype=np.int64) % max(limit, 1), (B, 1))
        else:
            ids = rng.integers(0, max(limit, 1), (B, S))
        out[pos.ids] = ids.reshape(_resolve(t, sz)).astype(t.dtype.np_dtype)
    elif pos.kind in (ir.PositionKind.ARANGE, ir.PositionKind.GLM2D):
        start = 0 if positions == "prefill" or rows is not None else int(rng.integers(0, 1 << 16))
        if isinstance(pos.start, str):
            out[pos.start] = np.array(start, dtype=o.tensor(pos.start).dtype.np_dtype)
        if pos.pad:
            out[pos.pad] = np.zeros(B, dtype=o.tensor(pos.pad).dtype.np_dtype)
        if isinstance(pos.first_seqlen, str):
            out[pos.first_seqlen] = np.array(S, dtype=o.tensor(pos.first_seqlen).dtype.np_dtype)
    for t in o.inputs:
        if t.name in out:
            continue
        shape = _resolve(t, sz)
        if isinstance(o.angles, ir.ComputedAngles) and t.name == o.angles.freq_factors:
            out[t.name] = rng.uniform(1.0, 4.0, shape).astype(t.dtype.np_dtype)
        elif isinstance(o.angles, ir.TableAngles) and t.name in (o.angles.cos, o.angles.sin):
            out[t.name] = rng.uniform(-1.0, 1.0, shape).astype(t.dtype.np_dtype)
        else:
            out[t.name] = rng.standard_normal(shape, dtype=np.float32).astype(t.dtype.np_dtype)
    return out


def bytes_moved(op: Operator, arrays: dict[str, np.ndarray]) -> int:
    """Bytes read and written by one call: every input once (cos/sin tables: the rows it gathers) and
    every output once."""
    p = op.plan
    if isinstance(p, RmsNormPlan):
        x = arrays[p.inputs[0].name]
        return x.nbytes + arrays[p.inputs[1].name].nbytes + x.size * p.y.itemsize
    total = 0
    tables = ()
    if isinstance(p.angles, TableAnglesPlan):
        tables = (p.angles.cos, p.angles.sin)
    ntok = arrays[p.streams[0].src].size // (next(t for t in p.inputs if t.name == p.streams[0].src).heads * p.unit)
    for name, a in arrays.items():
        if name in tables and not p.angles.per_token:
            total += min(a.nbytes, ntok * p.n_streams * a.shape[-1] * a.itemsize)
        else:
            total += a.nbytes
    for s in p.streams:
        total += arrays[s.src].nbytes
    return total


# ---------------------------------------------------------------------------------------------
# the yardstick

class Yardstick:
    """memcpy and in-place scale, built with the same compiler, flags and OpenMP as the kernels."""

    def __init__(self) -> None:
        header = f"// Generated by ropegen {__version__}: benchmark yardsticks (no spec).\n"
        src = render("c/yardstick.c.j2", header=header, flags=" ".join(cbuild.PINNED_FLAGS),
                     chunk_bytes=CHUNK_BYTES)
        lib = cbuild.load_library(cbuild.build({"yardstick.c": src}, "yardstick"))
        self.copy = lib.ropegen_yardstick_copy
        self.copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
        self.scale = lib.ropegen_yardstick_scale
        self.scale.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int]
        self._buffers: dict[tuple[str, int], tuple[np.ndarray, ...]] = {}

    def runner(self, kind: str, nbytes: int, threads: int) -> Callable[[], None]:
        """A call that moves `nbytes` (read + written) the yardstick way: 'memcpy' or 'scale'."""
        half = max(4, (nbytes // 2) // 64 * 64)
        if kind == "memcpy":
            src = np.ones(half, np.uint8)
            dst = np.zeros(half, np.uint8)
            keep = (src, dst)
            a, b = src.ctypes.data, dst.ctypes.data
            self._buffers[(kind, nbytes)] = keep
            return lambda: self.copy(a, b, half, threads)
        x = np.ones(half // 4, np.float32)
        self._buffers[(kind, nbytes)] = (x,)
        ptr = x.ctypes.data
        return lambda: self.scale(ptr, x.size, 1.0, threads)


def _interleaved(fns: list[Callable[[], Any]], repeats: int) -> list[list[float]]:
    """Run each function once to warm up, then `repeats` rounds of all of them; times per function."""
    for f in fns:
        f()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return times


def _stats(ts: list[float], nbytes: int) -> dict[str, float]:
    tmin = min(ts)
    return {"time_min_s": tmin, "time_median_s": float(np.median(ts)), "gbps": nbytes / tmin / 1e9}


# ---------------------------------------------------------------------------------------------
# peers

def _numpy_peer(op: Operator, args: list[np.ndarray], nbytes: int, repeats: int) -> dict[str, Any]:
    try:
        ts = _interleaved([lambda: op.run(*args, backend="numpy")], max(1, min(repeats, NUMPY_REPEATS)))[0]
    except Exception as exc:  # a peer failing is reported, not raised
        return {"error": f"{type(exc).__name__}: {exc}"}
    return _stats(ts, nbytes)


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


def onnx_peer_model(op: Operator, arrays: dict[str, np.ndarray]):
    """(ModelProto, feeds, output arrays) running the operator as ONNX opset-23 nodes, or a reason why not."""
    try:
        import onnx
        from onnx import helper
    except ImportError:
        return "onnx is not installed"
    from onnx.helper import np_dtype_to_tensor_dtype
    o, p = op.ir, op.plan
    nodes, inputs, outputs, feeds, outs = [], [], [], {}, {}

    def tensor_info(name: str, a: np.ndarray):
        return helper.make_tensor_value_info(name, np_dtype_to_tensor_dtype(a.dtype), list(a.shape))

    if isinstance(p, RmsNormPlan):
        x, s = (arrays[t.name] for t in p.inputs)
        y = np.empty(x.shape, dtype=p.y.np_dtype)
        stash = 1 if p.stash.name == "f32" else 11
        nodes.append(helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=p.axis,
                                      epsilon=p.epsilon, stash_type=stash))
        feeds = {"x": x, "scale": s}
        outs = {"y": y}
    else:
        if o.pairing.kind not in (ir.PairKind.NEOX, ir.PairKind.GPTJ):
            return f"pairing {o.pairing.kind.value} has no ONNX RotaryEmbedding form"
        if o.direction is ir.Direction.BACKWARD:
            return "ONNX RotaryEmbedding rotates forward only"
        if o.positions.kind not in (ir.PositionKind.IDS, ir.PositionKind.TOKEN):
            return f"positions {o.positions.kind.value} have no ONNX form"
        if any(not s.rotate for s in p.streams):
            return "copy outputs have no ONNX RotaryEmbedding form"
        half = p.rotary_dim // 2
        if isinstance(p.angles, TableAnglesPlan):
            cos = np.ascontiguousarray(arrays[p.angles.cos][..., :half])
            sin = np.ascontiguousarray(arrays[p.angles.sin][..., :half])
        else:   # computed in the kernel: onnxruntime gets the equivalent float32 cache instead
            from ropegen.ops.reference import _ggml_cos_sin, inverse_frequencies
            ids = arrays[o.positions.ids]
            rows = int(ids.max()) + 1 if ids.size else 1
            prow = np.arange(rows)
            if isinstance(p.angles, GgmlAngles):
                if p.angles.freq_factors:
                    return "freq_factors have no ONNX form"
                c, s_ = _ggml_cos_sin(o, prow, half, None)
            else:
                assert isinstance(p.angles, ExactAngles)
                if p.angles.freq_factors:
                    return "freq_factors have no ONNX form"
                inv, mag = inverse_frequencies(o, half)
                th = prow[:, None] * inv
                c, s_ = np.cos(th) * mag, np.sin(th) * mag
            cos, sin = c, s_
        x0 = arrays[p.streams[0].src]
        cos = cos.astype(x0.dtype)
        sin = sin.astype(x0.dtype)
        feeds["cos_cache"], feeds["sin_cache"] = cos, sin
        pos_name = ""
        if o.positions.kind is ir.PositionKind.IDS:
            ids = arrays[o.positions.ids].astype(np.int64)
            lay = _onnx_rope_layout(o, p.streams[0].src)
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
    for n, a in feeds.items():
        inputs.append(tensor_info(n, a))
    for n, a in outs.items():
        outputs.append(tensor_info(n, a))
    model = helper.make_model(helper.make_graph(nodes, op.name, inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 11
    onnx.checker.check_model(model)
    return model, feeds, outs


def _onnxruntime_peer(op: Operator, arrays: dict[str, np.ndarray], nbytes: int, threads: int,
                      repeats: int) -> dict[str, Any]:
    try:
        import onnxruntime as ort
    except ImportError:
        return {"error": "onnxruntime is not installed (pip install onnxruntime)"}
    try:
        built = onnx_peer_model(op, arrays)
        if isinstance(built, str):
            return {"error": built}
        model, feeds, outs = built
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        io = sess.io_binding()
        for n, a in feeds.items():
            io.bind_cpu_input(n, np.ascontiguousarray(a))
        for n, a in outs.items():
            io.bind_output(n, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        ts = _interleaved([lambda: sess.run_with_iobinding(io)], repeats)[0]
    except Exception as exc:  # onnxruntime lacking a kernel (e.g. bf16) is a result, not a crash
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    return _stats(ts, nbytes)


def _ggml_rope_setup(op: Operator, arrays: dict[str, np.ndarray]) -> dict[str, Any] | str:
    """ggml_rope_ext's arguments for a RoPE operator (rotated tensors as [tokens, heads, head_dim], ggml
    ne = {head_dim, heads, tokens}; int32 positions; angle parameters), or the reason it has no ggml form."""
    p, o = op.plan, op.ir
    if not isinstance(p, RopePlan):
        return "the ggml peer measures RoPE only (ggml_rope_ext)"
    if isinstance(p.angles, TableAnglesPlan):
        return "ggml_rope_ext computes its angles: a cos/sin table has no ggml form"
    if o.pairing.kind not in (ir.PairKind.NEOX, ir.PairKind.GPTJ):
        return f"pairing {o.pairing.kind.value} has no ggml_rope_ext mode"
    if o.positions.kind is not ir.PositionKind.IDS:
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
    n_ctx_orig = s.original_max_positions if isinstance(s, ir.Llama3Scaling) else 4096
    fs, ext, attn, beta_fast, beta_slow = 1.0, 0.0, 1.0, 32.0, 1.0
    how = []
    if isinstance(p.angles, GgmlAngles):
        if isinstance(s, ir.GgmlYarnScaling):
            fs, ext, attn = s.freq_scale, s.ext_factor, s.attn_factor
            beta_fast, beta_slow, n_ctx_orig = s.beta_fast, s.beta_slow, s.n_ctx_orig
            how.append("YaRN parameters of the spec")
        attn *= a.magnitude
        how.append("the spec's ggml numerics")
    else:
        # exact angles: frequencies beyond base^(-2c/n_dims) become freq_factors (theta / ff), as llama.cpp
        # passes Llama-3 scaling (rope_freqs: 1, factor, or 1 / ((1 - smooth) / factor + smooth))
        assert isinstance(p.angles, ExactAngles)
        from ropegen.exact import f64
        from ropegen.ops.plan import base_inv_freq
        if isinstance(s, ir.LinearScaling):     # llama.cpp: freq_scale = 1 / factor
            fs = 1.0 / s.factor
            how.append(f"freq_scale = 1/{s.factor:g}")
        base_inv = np.array([f64(f) for f in base_inv_freq(a.base, p.rotary_dim, half)])
        derived = fs * base_inv / np.asarray(p.angles.inv_freq, dtype=np.float64)
        if not np.allclose(derived, 1.0, rtol=1e-12, atol=0.0):
            ff = derived if ff is None else derived * ff
            kind = {ir.LinearScaling: "linear", ir.Llama3Scaling: "llama3",
                    ir.GgmlYarnScaling: "ggml_yarn"}.get(type(s), type(s).__name__)
            how.append(f"freq_factors from the {kind} scaling (as llama.cpp's rope_freqs)")
        attn = p.angles.magnitude
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
            "type": p.storage.name, "mode": mode, "n_dims": p.rotary_dim, "n_ctx_orig": int(n_ctx_orig),
            "freq_base": float(a.base), "freq_scale": float(fs), "ext_factor": float(ext),
            "attn_factor": float(attn), "beta_fast": float(beta_fast), "beta_slow": float(beta_slow),
            "backward": backward, "note": note}


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
    except (ImportError, OSError):
        return "ggml-python is not installed (pip install ggml-python)"
    setup = _ggml_rope_setup(op, arrays)
    if isinstance(setup, str):
        return setup
    return GgmlRopeGraph(ggml, setup, threads)


def _ggml_peer(op: Operator, arrays: dict[str, np.ndarray], nbytes: int, threads: int,
               repeats: int) -> dict[str, Any]:
    """ggml's CPU rope (q and k as two ggml_rope_ext nodes of one graph, `threads` threads): the graph
    compute is timed, not its building; its output is compared once with ropegen's."""
    try:
        graph = ggml_peer_graph(op, arrays, threads)
        if isinstance(graph, str):
            return {"error": graph}
        try:
            graph.compute()
            args = [arrays[n] for n in op.inputs]
            try:
                want = op.run_all(*args, backend="c")
            except Exception:   # no C compiler: the NumPy backend
                want = op.run_all(*args, backend="numpy")
            diff = 0.0
            for got, w in zip(graph.outs.values(), want):
                w = np.asarray(w, dtype=np.float64).reshape(got.shape)
                scale = float(np.max(np.abs(w))) if w.size else 0.0
                if scale:
                    diff = max(diff, float(np.max(np.abs(got.astype(np.float64) - w))) / scale)
            ts = _interleaved([graph.compute], repeats)[0]
        finally:
            graph.close()
    except Exception as exc:  # a peer failing is reported, not raised
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    return {**_stats(ts, nbytes), "note": graph.note, "max_rel_diff": diff}


# ---------------------------------------------------------------------------------------------

def bench(program_or_ops: Program | Iterable[Operator], backend: str = "c", threads: int | None = None,
          shapes: Iterable[str | dict] | None = None, repeats: int = 20,
          peers: Iterable[str] = ("numpy", "onnxruntime", "ggml"), inplace: bool | None = None) -> list[dict[str, Any]]:
    """Measure every operator at every shape; one dict per operator, shape and mode.

    backend: "c" (default) or "numpy". threads: C / onnxruntime / ggml threads (default: the cores
    available). shapes: strings like "T=4096,P=8192,positions=prefill" (default: the Llama-3
    prefill-like and decode-like shapes, T=4096). inplace: rope in place only (True), out of place
    only (False) or both (None).
    """
    ops = list(program_or_ops)
    if backend not in ("c", "numpy"):
        raise ValueError(f"bench measures the c or numpy backend, not '{backend}'")
    if threads is None:
        threads = cbuild.default_threads()
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if isinstance(repeats, bool) or int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    repeats = int(repeats)
    parsed = [parse_shape(s) for s in (shapes or DEFAULT_SHAPES)]
    peers = tuple(peers)
    known = {sym for op in ops for sym in symbol_roles(op.ir)}
    for shape in parsed:
        unknown = set(shape["sizes"]) - known
        if unknown:
            raise ValueError(f"shape '{shape['label']}' sizes {', '.join(sorted(unknown))}, which no operator "
                             f"has; symbols: {', '.join(sorted(known)) or 'none'}")
    limit = memory_limit()
    for op in ops:      # every size is checked before anything is allocated or built
        for shape in parsed:
            require_memory(op, shape, limit)
    from ropegen.backends.c.backend import CBackend
    why = CBackend().unavailable()
    if why:   # the copy yardstick is C whatever the backend measured
        raise cbuild.CompilerError(f"bench needs a working C compiler (for {'the kernels and ' if backend == 'c' else ''}"
                                   f"the copy yardstick): {why}")
    yard = Yardstick()
    results: list[dict[str, Any]] = []
    for op in ops:
        for shape in parsed:
            arrays = bench_inputs(op, shape["sizes"], shape["positions"])
            args = [arrays[n] for n in op.inputs]
            nbytes = bytes_moved(op, arrays)
            sizes = {s: int(v) for s, v in _symbol_sizes(op, arrays).items()}
            modes = ["out_of_place"]
            if op.kind == "rope" and backend == "c":
                modes = {None: ["out_of_place", "in_place"], True: ["in_place"], False: ["out_of_place"]}[inplace]
            for mode in modes:
                rec: dict[str, Any] = {
                    "operator": op.name, "kind": op.kind, "spec": op.spec.file, "backend": backend,
                    "threads": threads if backend == "c" else 1, "shape": shape["label"], "sizes": sizes,
                    "positions": shape["positions"] if op.kind == "rope" else None, "mode": mode,
                    "dtype": _dtype_label(op), "bytes": nbytes, "repeats": repeats,
                }
                run = _runner(op, args, backend, threads, mode)
                ykind = "scale" if mode == "in_place" else "memcpy"
                ystick = yard.runner(ykind, nbytes, threads)
                t_op, t_y = _interleaved([run, ystick], repeats)
                rec.update(_stats(t_op, nbytes))
                rec["yardstick"] = {"kind": ykind, **_stats(t_y, nbytes)}
                rec["ratio_to_copy"] = min(t_y) / min(t_op)
                rec["peers"] = {}
                if mode == "out_of_place":
                    if "numpy" in peers and backend != "numpy":
                        rec["peers"]["numpy"] = _numpy_peer(op, args, nbytes, repeats)
                    if "onnxruntime" in peers:
                        rec["peers"]["onnxruntime"] = _onnxruntime_peer(op, arrays, nbytes, threads, repeats)
                    if "ggml" in peers:
                        rec["peers"]["ggml"] = _ggml_peer(op, arrays, nbytes, threads, repeats)
                    for peer in rec["peers"].values():
                        if "time_min_s" in peer:
                            peer["speedup"] = peer["time_min_s"] / rec["time_min_s"]
                results.append(rec)
    return results


def _symbol_sizes(op: Operator, arrays: dict[str, np.ndarray]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in op.ir.inputs:
        for a, n in zip(t.axes, arrays[t.name].shape):
            if isinstance(a.size, str):
                out.setdefault(a.size, n)
    return out


def _dtype_label(op: Operator) -> str:
    p = op.plan
    if isinstance(p, RmsNormPlan):
        return p.x.name if p.x == p.y else f"{p.x.name}->{p.y.name}"
    angles = "cache" if isinstance(p.angles, TableAnglesPlan) else "computed"
    return f"{p.storage.name} ({angles})"


def _runner(op: Operator, args: list[np.ndarray], backend: str, threads: int, mode: str) -> Callable[[], Any]:
    if backend == "numpy":
        return lambda: op.run(*args, backend="numpy")
    kern = op.kernel("c")
    if mode == "in_place":
        work = [np.array(a, copy=True) for a in args]
        bound = kern.bind(*work, threads=threads, inplace=True)
    else:
        if isinstance(op.plan, RopePlan):
            out = tuple(np.zeros_like(args[op.inputs.index(s.src)]) for s in op.plan.streams)
        else:
            out = np.zeros(args[0].shape, dtype=op.plan.y.np_dtype)
        bound = kern.bind(*args, threads=threads, out=out)
    func, values = kern.func, bound.values
    keep = bound   # the arrays stay alive with the closure

    def run() -> None:
        status = func(*values)
        if status:
            kern.raise_status(status, keep.given)
    return run


def _fmt_peer(rec: dict[str, Any], name: str) -> str:
    peer = rec["peers"].get(name)
    if peer is None:
        return "-"
    if "error" in peer:
        return "n/a"
    return f"{peer['gbps']:.1f} ({peer['speedup']:.1f}x)"


def format_results(results: list[dict[str, Any]]) -> str:
    """A table: one line per operator, shape and mode; peers as GB/s (how many times slower)."""
    head = ("operator", "dtype", "shape", "mode", "thr", "min ms", "med ms", "MB", "GB/s", "copy GB/s",
            "ratio", "numpy", "onnxruntime", "ggml")
    rows = []
    for r in results:
        rows.append((r["operator"], r["dtype"], r["shape"], r["mode"].replace("_", " "), str(r["threads"]),
                     f"{r['time_min_s'] * 1e3:.2f}", f"{r['time_median_s'] * 1e3:.2f}",
                     f"{r['bytes'] / 1e6:.1f}", f"{r['gbps']:.1f}",
                     f"{r['yardstick']['gbps']:.1f} {'cp' if r['yardstick']['kind'] == 'memcpy' else 'sc'}",
                     f"{r['ratio_to_copy']:.2f}", _fmt_peer(r, "numpy"), _fmt_peer(r, "onnxruntime"),
                     _fmt_peer(r, "ggml")))
    widths = [max(len(x) for x in col) for col in zip(head, *rows)] if rows else [len(h) for h in head]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    notes = sorted({f"{name}: {peer['error']}" for r in results for name, peer in r["peers"].items()
                    if "error" in peer})
    if notes:
        lines.append("")
        lines.append("peer notes (n/a):")
        lines += [f"  {n}" for n in notes]
    setups = sorted({f"{name}: {peer['note']}" for r in results for name, peer in r["peers"].items()
                     if "note" in peer})
    if setups:
        lines.append("")
        lines.append("peer setup:")
        lines += [f"  {n}" for n in setups]
    lines.append("")
    lines.append("GB/s = bytes read + written / min time; copy = memcpy (out of place) or in-place scale (sc) of the "
                 "same bytes with the same threads; ratio = copy time / kernel time; peers: GB/s (speedup of "
                 "ropegen over them).")
    return "\n".join(lines)


__all__ = ["bench", "format_results", "llama3_suite", "bench_inputs", "bench_bytes", "bytes_moved", "parse_shape",
           "ggml_peer_graph"]
