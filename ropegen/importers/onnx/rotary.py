"""RotaryEmbedding-23 -> a `rope` spec: X's layout (4-D or 3-D with num_heads), the caches (gathered by
position_ids or one row per token), interleaved -> pairing, rotary_embedding_dim -> rotary_dim."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ropegen.importers.onnx.common import (OPSET, ROTARY_TYPES, Size, TensorType, _fmt_shape, _int_dim, _render,
                                           _unify, _where)

if TYPE_CHECKING:
    import onnx


def spec(node: "onnx.NodeProto", attrs: dict[str, Any], types: list[Optional[TensorType]], name: str) -> str:
    """The spec text of one RotaryEmbedding node, given its attributes and normalised input types."""
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
