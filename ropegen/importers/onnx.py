"""The ONNX importer: RotaryEmbedding-23 and RMSNormalization-23 nodes as `.rope` specs.

ONNX describes these two operators by attributes plus the shapes and types of their inputs; a
`.rope` spec spells both out. This module turns one node, given concrete input types, into the
text of a spec (`spec_for_node`), writes one spec per such node of a model (`import_model`, behind
`ropegen import-onnx`), and runs a node on arrays through any backend by specialising a spec on
the arrays' shapes and dtypes (`run_node`).

How ONNX maps onto the language:

* RotaryEmbedding: 4-D X [B, H, S, D] -> `x: T[batch=B, heads=H, seq=S, head_dim=D]`; 3-D X
  [B, S, H*D] with num_heads = H -> `x: T[batch=B, seq=S, (heads=H, head_dim=D)]`;
  interleaved 0/1 -> `pairing = neox` / `gptj`; rotary_embedding_dim (0 = the whole head) ->
  `rotary_dim`; position_ids [B, S] gather rows of cos/sin caches [P, W]
  (`positions = position_ids`); without position_ids the caches are [B, S, W], one row per token.
* RMSNormalization: axis, epsilon (printed as the exact float32 attribute value), stash_type
  (1 -> `stash = f32`, 11 -> `stash = f64`); X and scale may differ in type, Y takes scale's.

Every problem the importer can see (an unknown shape, an unsupported attribute, type or opset)
is a ValueError whose message names the node; the CLI prints it as a user error.
"""
from __future__ import annotations

import functools
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np

from ropegen.spec.sema import reserved_words
from ropegen.ir.dtypes import DTYPES, from_numpy

if TYPE_CHECKING:  # onnx is an optional dependency: imported only when a model is read
    import onnx

    from ropegen.api import Operator

__all__ = ["spec_for_node", "import_model", "run_node", "OnnxUnavailable", "SUPPORTED_OPS", "OPSET"]

Size = Union[int, str]                         # a concrete size, or a symbol (an ONNX dim_param)
TensorType = tuple[str, tuple[Size, ...]]      # (ropegen dtype name, shape)

OPSET = 23
SUPPORTED_OPS = ("RotaryEmbedding", "RMSNormalization")
DEFAULT_DOMAINS = ("", "ai.onnx")

# TensorProto.DataType -> ropegen dtype name (only the types these two operators can carry).
ONNX_DTYPES: dict[int, str] = {d.onnx: d.name for d in DTYPES.values() if d.name != "u32"}
_ONNX_TYPE_NAMES = {d.onnx: d.onnx_name for d in DTYPES.values()}
ROTARY_TYPES = ("f32", "f16", "bf16")          # type constraint T of RotaryEmbedding-23
RMS_TYPES = ("f32", "f16", "bf16", "f64")      # type constraints T and V of RMSNormalization-23
STASH_TYPES: dict[int, str] = {1: "f32", 11: "f64"}

# AttributeProto.AttributeType values (kept here so spec_for_node needs no onnx import)
_ATTR_FLOAT, _ATTR_INT = 1, 2
_ATTRS: dict[str, dict[str, int]] = {
    "RotaryEmbedding": {"interleaved": _ATTR_INT, "rotary_embedding_dim": _ATTR_INT, "num_heads": _ATTR_INT},
    "RMSNormalization": {"axis": _ATTR_INT, "epsilon": _ATTR_FLOAT, "stash_type": _ATTR_INT},
}
_INPUTS = {"RotaryEmbedding": ("X", "cos_cache", "sin_cache", "position_ids"),
           "RMSNormalization": ("X", "scale")}
_REQUIRED = {"RotaryEmbedding": 3, "RMSNormalization": 2}
# ONNX's default epsilon, 1e-5, as the float32 an attribute would hold
_DEFAULT_EPSILON = float(np.float32(1e-5))

# Tensor names in generated specs: none of them is in any target's reserved words.
_ROPE_NAMES = ("x", "cos_cache", "sin_cache", "position_ids")
_RMS_NAMES = ("x", "scale")
_OUT = "y"


class OnnxUnavailable(ImportError, ValueError):
    """The onnx package is missing (a ValueError too, so the CLI reports it as a user error)."""


def _require_onnx():
    try:
        import onnx
        import onnx.shape_inference  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise OnnxUnavailable("reading ONNX models needs the onnx package: pip install 'onnx>=1.18'") from exc
    return onnx


# ---------------------------------------------------------------------------------------------
# One node -> spec text
# ---------------------------------------------------------------------------------------------

def _where(node: "onnx.NodeProto") -> str:
    return f"{node.op_type} node '{node.name}'" if node.name else f"{node.op_type} node"


def _attributes(node: "onnx.NodeProto") -> dict[str, Any]:
    """The node's attributes as Python values, rejecting anything RotaryEmbedding/RMSNormalization-23 lacks."""
    allowed = _ATTRS[node.op_type]
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.name not in allowed:
            raise ValueError(f"{_where(node)}: '{a.name}' is not an attribute of {node.op_type}-{OPSET} "
                             f"(it has: {', '.join(allowed)})")
        if a.ref_attr_name:
            raise ValueError(f"{_where(node)}: attribute '{a.name}' refers to the function attribute "
                             f"'{a.ref_attr_name}'; only literal attribute values can be imported")
        want = allowed[a.name]
        if a.type != want:
            raise ValueError(f"{_where(node)}: attribute '{a.name}' must be "
                             f"{'an INT' if want == _ATTR_INT else 'a FLOAT'}")
        out[a.name] = int(a.i) if want == _ATTR_INT else float(a.f)
    return out


def _slots(node: "onnx.NodeProto", items: Sequence[Any], what: str) -> list[Any]:
    """Items aligned with the operator's input slots (None where an optional input is absent).

    `items` is either aligned with node.input (entries for "" names are ignored; trailing absent
    slots may be given as None) or holds one item per present (non-empty) input name, in order --
    the layout of ONNX backend-test data sets.
    """
    names = list(node.input)
    slots = _INPUTS[node.op_type]
    if len(names) > len(slots):
        raise ValueError(f"{_where(node)}: {len(names)} inputs; {node.op_type}-{OPSET} takes at most {len(slots)}")
    present = [i for i, n in enumerate(names) if n]
    items = list(items)
    if len(items) == len(slots) > len(names) and all(it is None for it in items[len(names):]):
        items = items[:len(names)]       # aligned with the operator's slots, absent trailing inputs None
    if len(items) == len(names):
        aligned = [items[i] if names[i] else None for i in range(len(names))]
    elif len(items) == len(present):
        aligned = [None] * len(names)
        for i, item in zip(present, items):
            aligned[i] = item
    else:
        raise ValueError(f"{_where(node)}: got {len(items)} {what} for inputs {names} "
                         f"({len(present)} present)")
    aligned += [None] * (len(slots) - len(aligned))
    for i in range(len(slots)):
        if i < len(names) and names[i] and aligned[i] is None:
            raise ValueError(f"{_where(node)}: no {what[:-1]} given for input '{names[i]}' ({slots[i]})")
    for i in range(_REQUIRED[node.op_type]):
        if aligned[i] is None:
            raise ValueError(f"{_where(node)}: the required input {slots[i]} is missing")
    return aligned


def _fmt_shape(shape: Sequence[Size]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _int_dim(node: "onnx.NodeProto", d: Size, what: str) -> int:
    if not isinstance(d, int):
        raise ValueError(f"{_where(node)}: {what} is '{d}'; it must be a known integer "
                         f"(ropegen specialises kernels on it)")
    return d


def _unify(node: "onnx.NodeProto", what: str, *sizes: Size) -> Size:
    """One size for a dimension several inputs share: known integers must agree and win over symbols."""
    ints = {s for s in sizes if isinstance(s, int)}
    if len(ints) > 1:
        raise ValueError(f"{_where(node)}: the inputs disagree on {what}: {sorted(ints)}")
    return ints.pop() if ints else sizes[0]


def _check_sizes(node: "onnx.NodeProto", types: Sequence[Optional[TensorType]]) -> None:
    for t in types:
        if t is None:
            continue
        for d in t[1]:
            if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer, str)):
                raise ValueError(f"{_where(node)}: dimension {d!r} is neither an integer nor a symbol")
            if isinstance(d, (int, np.integer)) and d <= 0:
                raise ValueError(f"{_where(node)}: an input has shape {_fmt_shape(t[1])}; "
                                 "ropegen kernels need every dimension positive")
            if isinstance(d, str) and (not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", d) or d in reserved_words()):
                raise ValueError(f"{_where(node)}: symbolic dimension '{d}' cannot name a spec symbol")


def _norm_types(types: Sequence[Optional[TensorType]]) -> list[Optional[TensorType]]:
    out: list[Optional[TensorType]] = []
    for t in types:
        if t is None:
            out.append(None)
        else:
            dt, shape = t
            out.append((str(dt), tuple(int(d) if isinstance(d, (int, np.integer)) else d for d in shape)))
    return out


def _comment(text: str) -> str:
    return re.sub(r"[\r\n]+", " ", text)


def spec_for_node(node: "onnx.NodeProto", input_types: Sequence[Optional[TensorType]], name: str) -> str:
    """The .rope text of one RotaryEmbedding-23 or RMSNormalization-23 node.

    `input_types` gives (ropegen dtype name, shape) per input: aligned with node.input (entries for
    absent "" inputs may be None), or one per present input. Shapes hold integers, or symbol
    names for dimensions the language allows to stay symbolic (batch, seq, cache rows, RMSNorm's
    leading dims). `name` names the operator. Raises ValueError on anything not importable.
    """
    if node.domain not in DEFAULT_DOMAINS or node.op_type not in SUPPORTED_OPS:
        raise ValueError(f"{_where(node)} (domain '{node.domain or 'ai.onnx'}'): ropegen imports only "
                         f"{' and '.join(SUPPORTED_OPS)} of the default ONNX domain")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        raise ValueError(f"operator name '{name}' is not an identifier")
    types = _norm_types(_slots(node, input_types, "input types"))
    _check_sizes(node, types)
    attrs = _attributes(node)
    if node.op_type == "RotaryEmbedding":
        return _rotary_spec(node, attrs, types, name)
    return _rms_spec(node, attrs, types, name)


def _rotary_spec(node: "onnx.NodeProto", attrs: dict[str, Any], types: list[Optional[TensorType]],
                 name: str) -> str:
    x, cos, sin, pos = types
    assert x is not None and cos is not None and sin is not None
    interleaved = attrs.get("interleaved", 0)
    rot_attr = attrs.get("rotary_embedding_dim", 0)
    num_heads = attrs.get("num_heads", 0)
    where = _where(node)
    if interleaved not in (0, 1):
        raise ValueError(f"{where}: interleaved must be 0 or 1, not {interleaved}")
    if rot_attr < 0:
        raise ValueError(f"{where}: rotary_embedding_dim must not be negative, got {rot_attr}")
    if num_heads < 0:
        raise ValueError(f"{where}: num_heads must not be negative, got {num_heads}")

    dt, xs = x
    if dt not in ROTARY_TYPES:
        raise ValueError(f"{where}: X is {dt}; RotaryEmbedding-{OPSET} takes {', '.join(ROTARY_TYPES)}")
    for label, t in (("cos_cache", cos), ("sin_cache", sin)):
        if t[0] != dt:
            raise ValueError(f"{where}: {label} is {t[0]} but X is {dt}; they share the type T")
    if len(xs) == 4:
        batch, heads, seq, head_dim = xs
        heads = _int_dim(node, heads, "num_heads (dimension 1 of 4-D X)")
        head_dim = _int_dim(node, head_dim, "head_size (dimension 3 of 4-D X)")
        if num_heads and num_heads != heads:
            raise ValueError(f"{where}: num_heads = {num_heads} but 4-D X {_fmt_shape(xs)} has {heads} heads")
    elif len(xs) == 3:
        batch, seq, hidden = xs
        hidden = _int_dim(node, hidden, "hidden_size (dimension 2 of 3-D X)")
        if not num_heads:
            raise ValueError(f"{where}: 3-D X {_fmt_shape(xs)} needs the num_heads attribute")
        if hidden % num_heads:
            raise ValueError(f"{where}: hidden_size {hidden} is not a multiple of num_heads {num_heads}")
        heads, head_dim = num_heads, hidden // num_heads
    else:
        raise ValueError(f"{where}: X has rank {len(xs)} {_fmt_shape(xs)}; RotaryEmbedding takes "
                         "4-D [batch, heads, seq, head_size] or 3-D [batch, seq, hidden]")
    if head_dim % 2:
        raise ValueError(f"{where}: head_size {head_dim} is odd; rotation needs pairs")
    rotary_dim = rot_attr or head_dim
    if rotary_dim % 2 or rotary_dim > head_dim:
        raise ValueError(f"{where}: rotary_embedding_dim {rot_attr} must be even and at most head_size {head_dim}")
    half = rotary_dim // 2

    if cos[1] != sin[1]:
        raise ValueError(f"{where}: cos_cache {_fmt_shape(cos[1])} and sin_cache {_fmt_shape(sin[1])} "
                         "must have the same shape")
    cs = cos[1]
    lines = [f"# Imported from ONNX {where} (opset {OPSET}): interleaved={interleaved}, "
             f"rotary_embedding_dim={rot_attr}, num_heads={num_heads}."]
    if pos is not None:
        if pos[0] != "i64":
            raise ValueError(f"{where}: position_ids is {pos[0]}; RotaryEmbedding-{OPSET} takes int64 (type M)")
        if len(pos[1]) != 2:
            raise ValueError(f"{where}: position_ids has shape {_fmt_shape(pos[1])}; expected [batch, seq]")
        batch = _unify(node, "the batch size", batch, pos[1][0])
        seq = _unify(node, "the sequence length", seq, pos[1][1])
        if len(cs) != 2:
            raise ValueError(f"{where}: with position_ids the caches are 2-D [max_position_id_plus_1, "
                             f"rotary_dim/2]; got {_fmt_shape(cs)}")
        rows = cs[0]
        width = _int_dim(node, cs[1], "the cache width (last dimension of cos_cache)")
        cache_shape: tuple[Size, ...] = (rows, width)
    else:
        if len(cs) != 3:
            raise ValueError(f"{where}: without position_ids the caches are 3-D [batch, seq, rotary_dim/2]; "
                             f"got {_fmt_shape(cs)}")
        batch = _unify(node, "the batch size", batch, cs[0])
        seq = _unify(node, "the sequence length", seq, cs[1])
        width = _int_dim(node, cs[2], "the cache width (last dimension of cos_cache)")
        cache_shape = (batch, seq, width)
        lines.append("# No position_ids: the caches hold one row per token.")
    if width != half:
        raise ValueError(f"{where}: the caches are {width} wide; rotating {rotary_dim} of each head takes "
                         f"caches exactly {half} wide (rotary_dim/2, as RotaryEmbedding-{OPSET} requires)")
    if len(xs) == 4:
        x_decl = f"[batch={batch}, heads={heads}, seq={seq}, head_dim={head_dim}]"
    else:
        x_decl = f"[batch={batch}, seq={seq}, (heads={heads}, head_dim={head_dim})]"
    cache_decl = _fmt_shape(cache_shape)
    decls = [("x", f"{dt}{x_decl}"), ("cos_cache", f"{dt}{cache_decl}"), ("sin_cache", f"{dt}{cache_decl}")]
    if pos is not None:
        decls.append(("position_ids", f"i64[{batch}, {seq}]"))
    settings = [("pairing", "gptj" if interleaved else "neox")]
    if rotary_dim != head_dim:
        settings.append(("rotary_dim", str(rotary_dim)))
    if pos is not None:
        settings.append(("positions", "position_ids"))
    settings.append(("angles", "table(cos = cos_cache, sin = sin_cache)"))
    return _render("rope", name, lines, decls, "out y = rotate(x)", settings)


def _render(kind: str, name: str, comments: list[str], decls: list[tuple[str, str]], out: str,
            settings: list[tuple[str, str]]) -> str:
    dw = max(len(n) for n, _ in decls) + 1
    sw = max(len(k) for k, _ in settings)
    body = [f"    in {(n + ':').ljust(dw)} {t}" for n, t in decls]
    body.append(f"    {out}")
    body += [f"    {k.ljust(sw)} = {v}" for k, v in settings]
    return "\n".join([*map(_comment, comments), f"{kind} {name} {{", *body, "}", ""])


def rms_scale_shape(x_shape: Sequence[Size], scale_shape: Sequence[Size], axis: int) -> tuple[Size, ...]:
    """The scale shape a spec declares: ONNX's scale shape with leading 1s beyond the normalized rank dropped.

    ONNX lets scale broadcast unidirectionally to all of X; ropegen's rmsnorm takes a scale over the
    normalized dims only, so [1, 1, D] for a last-axis norm is declared (and passed) as [D].
    """
    nrank = len(x_shape) - axis
    s = tuple(scale_shape)
    while len(s) > nrank and s[0] == 1:
        s = s[1:]
    return s


def _rms_spec(node: "onnx.NodeProto", attrs: dict[str, Any], types: list[Optional[TensorType]],
              name: str) -> str:
    x, scale = types[:2]
    assert x is not None and scale is not None
    where = _where(node)
    (xdt, xs), (sdt, ss) = x, scale
    for label, dt in (("X", xdt), ("scale", sdt)):
        if dt not in RMS_TYPES:
            raise ValueError(f"{where}: {label} is {dt}; RMSNormalization-{OPSET} takes {', '.join(RMS_TYPES)}")
    rank = len(xs)
    if rank == 0:
        raise ValueError(f"{where}: X is a scalar; it needs at least one dimension")
    axis = attrs.get("axis", -1)
    if not -rank <= axis < rank:
        raise ValueError(f"{where}: axis {axis} is out of range for X of rank {rank} (use {-rank}..{rank - 1})")
    first = axis % rank
    normalized = [_int_dim(node, d, f"normalized dimension {i} of X") for i, d in enumerate(xs) if i >= first]
    declared = rms_scale_shape(xs, ss, first)
    if len(declared) > len(normalized):
        raise ValueError(f"{where}: scale {_fmt_shape(ss)} varies over dimensions of X {_fmt_shape(xs)} "
                         f"before axis {axis}; ropegen's rmsnorm takes a scale over the normalized dims "
                         f"{_fmt_shape(normalized)}")
    for sd, nd in zip(declared[::-1], normalized[::-1]):
        if sd != 1 and sd != nd:
            raise ValueError(f"{where}: scale {_fmt_shape(ss)} does not broadcast to the normalized shape "
                             f"{_fmt_shape(normalized)}")
    stash_type = attrs.get("stash_type", 1)
    if stash_type not in STASH_TYPES:
        known = ", ".join(f"{k} ({_ONNX_TYPE_NAMES[k]})" for k in STASH_TYPES)
        raise ValueError(f"{where}: stash_type {stash_type} is not supported; ropegen supports {known}")
    eps = attrs.get("epsilon", _DEFAULT_EPSILON)
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{where}: epsilon must be a finite, non-negative number, got {eps!r}")
    comments = [f"# Imported from ONNX {where} (opset {OPSET}): axis={attrs.get('axis', -1)}, "
                f"epsilon={eps!r}, stash_type={stash_type}."]
    if tuple(declared) != tuple(ss):
        comments.append(f"# The model's scale {_fmt_shape(ss)} is declared {_fmt_shape(declared)} "
                        "(leading 1s dropped): pass it reshaped.")
    decls = [("x", f"{xdt}{_fmt_shape(xs)}"), ("scale", f"{sdt}{_fmt_shape(declared)}")]
    settings = [("axis", str(axis)), ("epsilon", repr(eps)), ("stash", STASH_TYPES[stash_type])]
    return _render("rmsnorm", name, comments, decls, "out y", settings)


# ---------------------------------------------------------------------------------------------
# Running one node on arrays
# ---------------------------------------------------------------------------------------------

_RUN_NAMES = {"RotaryEmbedding": "onnx_rotary_embedding", "RMSNormalization": "onnx_rms_normalization"}


@functools.lru_cache(maxsize=256)
def _compiled(text: str) -> "Operator":
    from ropegen.api import compile as compile_spec
    return compile_spec(text, file="<onnx node>").operators[0]


def run_node(node: "onnx.NodeProto", inputs: Sequence[Optional[np.ndarray]],
             backend: str = "numpy") -> list[np.ndarray]:
    """Run one RotaryEmbedding-23 / RMSNormalization-23 node on arrays with a ropegen backend.

    `inputs` holds one array per present input of the node, in order (or is aligned with
    node.input, None where the name is ""). The spec is specialised on the arrays' shapes and
    dtypes; compiled operators are cached by spec text. Returns [Y].
    """
    arrays = _slots(node, inputs, "arrays")
    types: list[Optional[TensorType]] = []
    for slot, a in zip(_INPUTS.get(node.op_type, ()), arrays):
        if a is None:
            types.append(None)
            continue
        if not isinstance(a, np.ndarray):
            raise ValueError(f"{_where(node)}: input {slot} must be a numpy array, got {type(a).__name__}")
        dt = from_numpy(a.dtype)
        if dt is None:
            raise ValueError(f"{_where(node)}: input {slot} has dtype {a.dtype}, which ropegen does not support")
        types.append((dt.name, tuple(int(d) for d in a.shape)))
    text = spec_for_node(node, types, _RUN_NAMES[node.op_type])
    op = _compiled(text)
    present = [a for a in arrays if a is not None]
    if node.op_type == "RMSNormalization":
        axis = _attributes(node).get("axis", -1) % present[0].ndim
        present[1] = present[1].reshape(rms_scale_shape(present[0].shape, present[1].shape, axis))
    return list(op.run_all(*present, backend=backend))


# ---------------------------------------------------------------------------------------------
# A whole model -> one spec file per node
# ---------------------------------------------------------------------------------------------

def _sanitize(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    s = re.sub(r"_+", "_", s)
    if not s:
        return ""
    if not s[0].isalpha():
        s = "op_" + s
    if s in reserved_words():
        s += "_op"
    return s


def _value_types(model: "onnx.ModelProto") -> dict[str, tuple[int, Optional[list]]]:
    """Name -> (elem_type, dims or None) from graph inputs, value_info, outputs and initializers."""
    g = model.graph
    out: dict[str, tuple[int, Optional[list]]] = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims: Optional[list] = None
        if tt.HasField("shape"):
            dims = []
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
        prev = out.get(vi.name)
        if prev is None or (prev[1] is None and dims is not None):
            out[vi.name] = (tt.elem_type, dims)
    for init in g.initializer:
        out[init.name] = (init.data_type, [int(d) for d in init.dims])
    for init in g.sparse_initializer:
        out[init.values.name] = (init.values.data_type, [int(d) for d in init.dims])
    return out


def _default_opset(model: "onnx.ModelProto") -> Optional[int]:
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return int(imp.version)
    return None


def _check_opset(onnx_mod, node: "onnx.NodeProto", opset: Optional[int]) -> None:
    if opset is None:
        raise ValueError(f"{_where(node)}: the model imports no default-domain opset")
    if opset < OPSET:
        raise ValueError(f"{_where(node)}: the model imports opset {opset}; {node.op_type} exists from opset "
                         f"{OPSET} on")
    try:
        since = onnx_mod.defs.get_schema(node.op_type, max_inclusive_version=opset, domain="").since_version
    except Exception:  # noqa: BLE001 - onnx raises SchemaError, a private type
        since = None
    if since != OPSET:
        raise ValueError(f"{_where(node)}: opset {opset} resolves {node.op_type} to version {since}; "
                         f"ropegen imports version {OPSET}")


def _node_types(node: "onnx.NodeProto", known: dict, allow_symbolic: bool) -> list[Optional[TensorType]]:
    types: list[Optional[TensorType]] = []
    for slot, tensor in zip(_INPUTS[node.op_type], node.input):
        if not tensor:
            types.append(None)
            continue
        info = known.get(tensor)
        if info is None:
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has no known type or shape; "
                             "give the model full shape information (onnx.shape_inference could not infer it)")
        elem, dims = info
        if elem not in ONNX_DTYPES:
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has element type "
                             f"{_type_name(elem)}, which ropegen does not support")
        if dims is None:
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has an unknown shape (not even its rank); "
                             "give the model static input shapes")
        unknown = [i for i, d in enumerate(dims) if d is None]
        symbolic = [i for i, d in enumerate(dims) if isinstance(d, str)]
        shape_txt = _fmt_shape(["?" if d is None else d for d in dims])
        if unknown or (symbolic and not allow_symbolic):
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has shape {shape_txt} with "
                             f"{'unknown' if unknown else 'symbolic'} dimensions; ropegen specialises kernels "
                             "on concrete shapes: fix the model's input dims (e.g. python -m "
                             "onnxruntime.tools.make_dynamic_shape_fixed)"
                             + ("" if unknown else " or import with allow_symbolic=True"))
        if symbolic:
            dims = [_symbol(d) if isinstance(d, str) else d for d in dims]
        types.append((ONNX_DTYPES[elem], tuple(dims)))
    return types


def _symbol(dim_param: str) -> str:
    s = _sanitize(dim_param)
    if not s or s in reserved_words() or s in (*_ROPE_NAMES, *_RMS_NAMES, _OUT):
        s = f"dim_{s}" if s else "dim"
    return s


def _type_name(elem: int) -> str:
    try:
        import onnx
        return onnx.TensorProto.DataType.Name(elem).lower()
    except Exception:  # noqa: BLE001
        return str(elem)


def import_model(model_path: Union[str, os.PathLike, "onnx.ModelProto"], out_dir: Union[str, os.PathLike],
                 *, allow_symbolic: bool = False) -> list[Path]:
    """Write one .rope spec per RotaryEmbedding / RMSNormalization node (opset 23) of a model.

    Shapes and types come from the model after onnx shape inference (graph inputs, value_info,
    outputs, initializers). Every node is checked first; if any cannot be imported, a ValueError
    lists all problems and nothing is written. With allow_symbolic=True, named symbolic dims
    (dim_param) become spec symbols where the language allows them (batch, seq, cache rows,
    RMSNorm's leading dims). Returns the written paths, in graph order.
    """
    onnx = _require_onnx()
    from ropegen.api import compile as compile_spec
    from ropegen.spec.diagnostics import SpecError

    if isinstance(model_path, onnx.ModelProto):
        model, label = model_path, "<model>"
    else:
        label = os.fspath(model_path)
        try:
            model = onnx.load(label, load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - protobuf raises several types
            raise ValueError(f"{label}: cannot read an ONNX model: {exc}") from None
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - fall back to the shapes the model declares
        inferred = model
    known = _value_types(inferred)
    opset = _default_opset(model)

    nodes = [(i, n) for i, n in enumerate(model.graph.node)
             if n.op_type in SUPPORTED_OPS and n.domain in DEFAULT_DOMAINS]
    if not nodes:
        raise ValueError(f"{label}: no {' or '.join(SUPPORTED_OPS)} node (default domain, opset {OPSET}) "
                         "in the main graph")
    out = Path(out_dir)
    errors: list[str] = []
    specs: list[tuple[Path, str]] = []
    used: set[str] = set()
    for index, node in nodes:
        base = _sanitize(node.name) or f"{_sanitize(node.op_type)}_{index}"
        name, k = base, 2
        while name.lower() in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name.lower())
        path = out / f"{name}.rope"
        try:
            _check_opset(onnx, node, opset)
            text = spec_for_node(node, _node_types(node, known, allow_symbolic), name)
            try:
                compile_spec(text, file=str(path))
            except SpecError as exc:
                raise ValueError(f"{_where(node)}: the generated spec does not check (a ropegen bug):\n{exc}") \
                    from None
        except ValueError as exc:
            errors.append(str(exc))
            continue
        specs.append((path, text))
    if errors:
        raise ValueError(f"{label}: " + ("\n".join(errors) if len(errors) == 1 else
                                         f"{len(errors)} nodes cannot be imported:\n" + "\n".join(errors)))
    out.mkdir(parents=True, exist_ok=True)
    for path, text in specs:
        path.write_text(text, encoding="utf-8")
    return [p for p, _ in specs]
