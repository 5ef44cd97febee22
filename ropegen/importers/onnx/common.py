"""What the ONNX node importers share: the opset, the type and attribute tables of RotaryEmbedding-23,
RMSNormalization-23 and the ONNX Runtime contrib ops (com.microsoft RotaryEmbedding, SimplifiedLayerNormalization,
SkipSimplifiedLayerNormalization), the checks of attributes, input slots and sizes, and the layout of spec text."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np

from ropegen.spec.sema import reserved_words
from ropegen.ir.dtypes import DTYPES

if TYPE_CHECKING:  # onnx is an optional dependency: imported only when a model is read
    import onnx

Size = Union[int, str]                         # a concrete size, or a symbol (an ONNX dim_param)
TensorType = tuple[str, tuple[Size, ...]]      # (ropegen dtype name, shape)

OPSET = 23
SUPPORTED_OPS = ("RotaryEmbedding", "RMSNormalization")
DEFAULT_DOMAINS = ("", "ai.onnx")
MS_DOMAIN = "com.microsoft"
# ONNX Runtime's contrib ops (what ONNX Runtime GenAI and Olive export), by the key the tables below use:
# com.microsoft RotaryEmbedding shares its op_type with RotaryEmbedding-23, so it has a key of its own.
MS_ROTARY = "com.microsoft.RotaryEmbedding"
CONTRIB_OPS = {(MS_DOMAIN, "RotaryEmbedding"): MS_ROTARY,
               # ORT registers SimplifiedLayerNormalization in the default domain (not in com.microsoft)
               ("", "SimplifiedLayerNormalization"): "SimplifiedLayerNormalization",
               ("ai.onnx", "SimplifiedLayerNormalization"): "SimplifiedLayerNormalization",
               (MS_DOMAIN, "SkipSimplifiedLayerNormalization"): "SkipSimplifiedLayerNormalization"}
IMPORTED_OPS = (*SUPPORTED_OPS, "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization")

# TensorProto.DataType -> ropegen dtype name (only the types these two operators can carry).
ONNX_DTYPES: dict[int, str] = {d.onnx: d.name for d in DTYPES.values() if d.name != "u32"}
_ONNX_TYPE_NAMES = {d.onnx: d.onnx_name for d in DTYPES.values()}
ROTARY_TYPES = ("f32", "f16", "bf16")          # type constraint T of RotaryEmbedding-23
RMS_TYPES = ("f32", "f16", "bf16", "f64")      # type constraints T and V of RMSNormalization-23
STASH_TYPES: dict[int, str] = {1: "f32", 11: "f64"}

# AttributeProto.AttributeType values (kept here so spec_for_node needs no onnx import)
_ATTR_FLOAT, _ATTR_INT = 1, 2
_NORM_ATTRS = {"axis": _ATTR_INT, "epsilon": _ATTR_FLOAT, "stash_type": _ATTR_INT}
_ATTRS: dict[str, dict[str, int]] = {
    "RotaryEmbedding": {"interleaved": _ATTR_INT, "rotary_embedding_dim": _ATTR_INT, "num_heads": _ATTR_INT},
    "RMSNormalization": _NORM_ATTRS,
    MS_ROTARY: {"interleaved": _ATTR_INT, "rotary_embedding_dim": _ATTR_INT, "num_heads": _ATTR_INT,
                "is_packed_batching": _ATTR_INT, "scale": _ATTR_FLOAT},
    "SimplifiedLayerNormalization": _NORM_ATTRS,
    "SkipSimplifiedLayerNormalization": {"epsilon": _ATTR_FLOAT},
}
_INPUTS = {"RotaryEmbedding": ("X", "cos_cache", "sin_cache", "position_ids"),
           "RMSNormalization": ("X", "scale"),
           MS_ROTARY: ("input", "position_ids", "cos_cache", "sin_cache"),
           "SimplifiedLayerNormalization": ("X", "scale"),
           "SkipSimplifiedLayerNormalization": ("input", "skip", "gamma", "bias")}
_REQUIRED = {"RotaryEmbedding": 3, "RMSNormalization": 2, MS_ROTARY: 4, "SimplifiedLayerNormalization": 2,
             "SkipSimplifiedLayerNormalization": 3}
# the version each key's tables describe, for messages
_VERSIONS = {"RotaryEmbedding": f"RotaryEmbedding-{OPSET}", "RMSNormalization": f"RMSNormalization-{OPSET}",
             MS_ROTARY: "com.microsoft RotaryEmbedding-1",
             "SimplifiedLayerNormalization": "SimplifiedLayerNormalization-1",
             "SkipSimplifiedLayerNormalization": "com.microsoft SkipSimplifiedLayerNormalization-1"}
# ONNX's default epsilon, 1e-5, as the float32 an attribute would hold
_DEFAULT_EPSILON = float(np.float32(1e-5))

# Tensor names in generated specs: none of them is in any target's reserved words.
_ROPE_NAMES = ("x", "cos_cache", "sin_cache", "position_ids")
_RMS_NAMES = ("x", "scale", "skip", "h")
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


def op_key(node: "onnx.NodeProto") -> Optional[str]:
    """The key of the tables above for a node the importer reads; None for any other node."""
    if node.domain in DEFAULT_DOMAINS and node.op_type in SUPPORTED_OPS:
        return node.op_type
    return CONTRIB_OPS.get((node.domain, node.op_type))


def _where(node: "onnx.NodeProto") -> str:
    op = node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
    return f"{op} node '{node.name}'" if node.name else f"{op} node"


def _attributes(node: "onnx.NodeProto") -> dict[str, Any]:
    """The node's attributes as Python values, rejecting anything its operator's version lacks."""
    key = op_key(node)
    allowed = _ATTRS[key]
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.name not in allowed:
            raise ValueError(f"{_where(node)}: '{a.name}' is not an attribute of {_VERSIONS[key]} "
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
    key = op_key(node)
    slots = _INPUTS[key]
    if len(names) > len(slots):
        raise ValueError(f"{_where(node)}: {len(names)} inputs; {_VERSIONS[key]} takes at most {len(slots)}")
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
    for i in range(_REQUIRED[key]):
        if aligned[i] is None:
            raise ValueError(f"{_where(node)}: the required input {slots[i]} is missing")
    return aligned


def _fmt_shape(shape: Sequence[Size]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _int_dim(node: "onnx.NodeProto", d: Size, what: str) -> int:
    if not isinstance(d, int):
        raise ValueError(f"{_where(node)}: {what} is '{d}'; it must be a known integer "
                         f"(ropegen specialises kernels on it): pin the model's symbolic dimension with "
                         f"fix={{'NAME': SIZE}} (`--fix NAME=SIZE`)")
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


def _render(kind: str, name: str, comments: list[str], decls: list[tuple[str, str]], out: str,
            settings: list[tuple[str, str]]) -> str:
    """A spec: comments, then `kind name { in decls; out; settings }`, columns aligned."""
    dw = max(len(n) for n, _ in decls) + 1
    sw = max(len(k) for k, _ in settings)
    body = [f"    in {(n + ':').ljust(dw)} {t}" for n, t in decls]
    body.append(f"    {out}")
    body += [f"    {k.ljust(sw)} = {v}" for k, v in settings]
    return "\n".join([*map(_comment, comments), f"{kind} {name} {{", *body, "}", ""])

