"""com.microsoft RotaryEmbedding (ONNX Runtime's contrib op, what GenAI / Olive exports use) -> a `rope` spec.

It differs from RotaryEmbedding-23: the inputs are (input, position_ids, cos_cache, sin_cache), all four
required; position_ids is [batch, seq] (gathered rows) or one element, the position of every batch's first
token (`positions = arange(start = position_ids)`, declared rank 0); the caches are always 2-D
[max_sequence_length, rotary_dim / 2]; without rotary_embedding_dim the head size is twice the cache width.
The rules below are those of ORT's CPU kernel (contrib_ops/cpu/bert/rotary_embedding*.{h,cc}).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

from ropegen.importers.onnx.common import (ROTARY_TYPES, TensorType, _fmt_shape, _int_dim, _render, _unify,
                                           _where)

if TYPE_CHECKING:
    import onnx

_VERSION = "com.microsoft RotaryEmbedding-1"


def _check_attrs(node: "onnx.NodeProto", attrs: dict[str, Any]) -> tuple[int, int, int]:
    where = _where(node)
    interleaved = attrs.get("interleaved", 0)
    rot_attr = attrs.get("rotary_embedding_dim", 0)
    num_heads = attrs.get("num_heads", 0)
    if interleaved not in (0, 1):
        raise ValueError(f"{where}: interleaved must be 0 or 1, not {interleaved}")
    if rot_attr < 0 or num_heads < 0:
        raise ValueError(f"{where}: rotary_embedding_dim and num_heads must not be negative")
    if rot_attr and not num_heads:
        raise ValueError(f"{where}: rotary_embedding_dim needs the num_heads attribute (as ONNX Runtime requires)")
    if attrs.get("is_packed_batching", 0) != 0:
        raise ValueError(f"{where}: attribute is_packed_batching = {attrs['is_packed_batching']} (ragged batches) "
                         "is not supported: a spec would need each sequence's length, which the node does not "
                         "take; export with is_packed_batching = 0")
    scale = attrs.get("scale", 1.0)
    if scale != 1.0:
        raise ValueError(f"{where}: attribute scale = {scale!r} is not supported: ONNX Runtime applies it only "
                         "when it regenerates the caches, which a spec cannot say; only scale = 1 is imported")
    return interleaved, rot_attr, num_heads


def _head(node: "onnx.NodeProto", xs: tuple, width: int, rot_attr: int, num_heads: int) -> tuple[int, int]:
    """(heads, head_size) of X as ORT reads it, refused where its strides would not follow X's shape."""
    where = _where(node)
    if len(xs) == 4:
        heads = _int_dim(node, xs[1], "num_heads (dimension 1 of 4-D input)")
        head = _int_dim(node, xs[3], "head_size (dimension 3 of 4-D input)")
        if num_heads and num_heads != heads:
            raise ValueError(f"{where}: num_heads = {num_heads} but 4-D input {_fmt_shape(xs)} has {heads} heads")
        if not rot_attr and 2 * width != head:
            raise ValueError(f"{where}: without rotary_embedding_dim ONNX Runtime takes the head size from the "
                             f"caches ({width} wide -> {2 * width}), but the input's heads are {head}")
        return heads, head
    if len(xs) != 3:
        raise ValueError(f"{where}: input has rank {len(xs)} {_fmt_shape(xs)}; {_VERSION} takes 3-D "
                         "[batch, seq, hidden] or 4-D [batch, num_heads, seq, head_size]")
    hidden = _int_dim(node, xs[2], "hidden_size (dimension 2 of 3-D input)")
    if rot_attr:
        if hidden % num_heads:
            raise ValueError(f"{where}: hidden_size {hidden} is not a multiple of num_heads {num_heads}")
        return num_heads, hidden // num_heads
    head = 2 * width                       # ORT: head_size = 2 * cache width without rotary_embedding_dim
    if hidden % head or (num_heads and num_heads * head != hidden):
        raise ValueError(f"{where}: hidden_size {hidden} is not num_heads ({num_heads or '?'}) x the head size "
                         f"{head} that the {width}-wide caches imply")
    return hidden // head, head


def spec(node: "onnx.NodeProto", attrs: dict[str, Any], types: list[Optional[TensorType]], name: str) -> str:
    """The spec text of one com.microsoft RotaryEmbedding node, given its attributes and input types."""
    x, pos, cos, sin = types
    assert x is not None and pos is not None and cos is not None and sin is not None
    where = _where(node)
    interleaved, rot_attr, num_heads = _check_attrs(node, attrs)
    dt, xs = x
    if dt not in ROTARY_TYPES:
        raise ValueError(f"{where}: input is {dt}; {_VERSION} takes {', '.join(ROTARY_TYPES)}")
    for label, t in (("cos_cache", cos), ("sin_cache", sin)):
        if t[0] != dt:
            raise ValueError(f"{where}: {label} is {t[0]} but the input is {dt}; they share the type T")
    if cos[1] != sin[1] or len(cos[1]) != 2:
        raise ValueError(f"{where}: cos_cache {_fmt_shape(cos[1])} and sin_cache {_fmt_shape(sin[1])} must both "
                         "be 2-D [max_sequence_length, rotary_dim/2]")
    rows = cos[1][0]
    width = _int_dim(node, cos[1][1], "the cache width (last dimension of cos_cache)")
    heads, head = _head(node, xs, width, rot_attr, num_heads)
    if head % 2:
        raise ValueError(f"{where}: head_size {head} is odd; rotation needs pairs")
    rotary_dim = rot_attr or head
    if rotary_dim % 2 or rotary_dim > head:
        raise ValueError(f"{where}: rotary_embedding_dim {rot_attr} must be even and at most head_size {head}")
    if width != rotary_dim // 2:
        raise ValueError(f"{where}: the caches are {width} wide; rotating {rotary_dim} of each head takes caches "
                         f"exactly {rotary_dim // 2} wide (ONNX Runtime reads each row as rotary_dim/2 wide)")
    batch, seq = (xs[0], xs[2]) if len(xs) == 4 else (xs[0], xs[1])
    if pos[0] != "i64":
        raise ValueError(f"{where}: position_ids is {pos[0]}; {_VERSION} takes int64")
    ps = pos[1]
    lines = [f"# Imported from ONNX {where} (ONNX Runtime contrib op): interleaved={interleaved}, "
             f"rotary_embedding_dim={rot_attr}, num_heads={num_heads}."]
    if len(ps) == 2:
        batch = _unify(node, "the batch size", batch, ps[0])
        seq = _unify(node, "the sequence length", seq, ps[1])
        pos_decl, positions = f"i64[{batch}, {seq}]", "position_ids"
    elif len(ps) <= 1 and all(d == 1 for d in ps):
        pos_decl, positions = "i64[]", "arange(start = position_ids)"
        lines.append("# position_ids holds one element, the position of each batch's first token"
                     + (": pass it reshaped to rank 0." if ps else "."))
    else:
        raise ValueError(f"{where}: position_ids has shape {_fmt_shape(ps)}; {_VERSION} takes [batch, seq] or "
                         "one element (the first position)")
    if len(xs) == 4:
        x_decl = f"[batch={batch}, heads={heads}, seq={seq}, head_dim={head}]"
    else:
        x_decl = f"[batch={batch}, seq={seq}, (heads={heads}, head_dim={head})]"
    cache = f"{dt}[{rows}, {width}]"
    decls = [("x", f"{dt}{x_decl}"), ("position_ids", pos_decl), ("cos_cache", cache), ("sin_cache", cache)]
    settings = [("pairing", "gptj" if interleaved else "neox")]
    if rotary_dim != head:
        settings.append(("rotary_dim", str(rotary_dim)))
    settings += [("positions", positions), ("angles", "table(cos = cos_cache, sin = sin_cache)")]
    return _render("rope", name, lines, decls, "out y = rotate(x)", settings)


def run_inputs(node: "onnx.NodeProto", present: list) -> list:
    """The node's arrays as the spec takes them: a one-element position_ids as a rank-0 array."""
    if present[1].ndim < 2 and math.prod(present[1].shape) == 1:
        present[1] = present[1].reshape(())
    return present
