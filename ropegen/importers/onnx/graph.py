"""What import_model decides about a model's graph as a whole: its symbolic dimensions and pinning them
(`fix`), shapes onnx's inference cannot see through ONNX Runtime's contrib ops (`ort_inferred`), the nodes it
skips and their one-line summary, and GroupQueryAttention's fused rotary, which is refused with what a spec
would need."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterable, Mapping, Optional

from ropegen.importers.onnx.common import MS_DOMAIN, _where

if TYPE_CHECKING:
    import onnx

GQA = "GroupQueryAttention"


def _value_infos(model: "onnx.ModelProto") -> Iterable["onnx.ValueInfoProto"]:
    g = model.graph
    return [vi for vi in (*g.input, *g.value_info, *g.output) if vi.type.HasField("tensor_type")]


def symbolic_dims(model: "onnx.ModelProto") -> list[str]:
    """The model's named symbolic dimensions (dim_param), in order of first appearance."""
    seen: dict[str, None] = {}
    for vi in _value_infos(model):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param:
                seen.setdefault(d.dim_param)
    return list(seen)


def pin_dims(onnx_mod, model: "onnx.ModelProto", fix: Mapping[str, int], label: str) -> "onnx.ModelProto":
    """A copy of the model with the named symbolic dimensions set to the given sizes (before shape
    inference, so they propagate); a name the model lacks or a size that is not positive is a ValueError."""
    names = symbolic_dims(model)
    unknown = [k for k in fix if k not in names]
    if unknown:
        raise ValueError(f"{label}: cannot fix {', '.join(repr(k) for k in unknown)}: the model's symbolic "
                         f"dimensions are {', '.join(repr(n) for n in names) if names else '(none)'}")
    for k, v in fix.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{label}: fix {k}={v!r}: a size must be a positive integer")
    pinned = onnx_mod.ModelProto()
    pinned.CopyFrom(model)
    for vi in _value_infos(pinned):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in fix:
                d.dim_value = int(fix[d.dim_param])      # clears dim_param (one field of a oneof)
    return pinned


def ort_inferred(model: "onnx.ModelProto") -> Optional["onnx.ModelProto"]:
    """The model after ONNX Runtime's symbolic shape inference, which knows the com.microsoft ops that
    onnx's inference skips (so a contrib node's outputs get shapes); None without onnxruntime or if it fails."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except Exception:  # noqa: BLE001 - onnxruntime is optional (and its import can fail in several ways)
        return None
    # when its inference is incomplete it saves the model as sym_shape_infer_temp.onnx in the working
    # directory before raising: run it in a scratch directory, so an import never litters the caller's
    import os
    import tempfile
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="ropegen-ort-") as scratch:
        os.chdir(scratch)
        try:
            return SymbolicShapeInference.infer_shapes(model, auto_merge=True)
        except Exception:  # noqa: BLE001 - its failures are plain Exceptions; the importer then names what is unknown
            return None
        finally:
            os.chdir(here)


def skip_summary(skipped: Counter) -> str:
    """One line: 'skipped 212 nodes: MatMul x96, Add x40, ...' (most frequent first)."""
    total = sum(skipped.values())
    parts = ", ".join(f"{op} x{n}" for op, n in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"skipped {total} node{'s' if total != 1 else ''}: {parts}"


def gqa_rotary_error(node: "onnx.NodeProto") -> Optional[str]:
    """Why a GroupQueryAttention node with do_rotary = 1 cannot be imported; None for one without it.

    ONNX Runtime rotates q and k at positions it derives per call (contrib_ops/cpu/bert/
    group_query_attention.cc): s on the first prompt, seqlens_k[b] + 1 - sequence_length + s after
    it, and position_ids (when given) read by those same two rules. Which rule applies depends on
    the call's values, and no position form of a spec reads seqlens_k or total_sequence_length.
    """
    if node.domain != MS_DOMAIN or node.op_type != GQA:
        return None
    do_rotary = next((int(a.i) for a in node.attribute if a.name == "do_rotary"), 0)
    if not do_rotary:
        return None
    return (f"{_where(node)}: do_rotary = 1 rotates q and k inside attention at positions ONNX Runtime derives "
            "on each call (s on the first prompt, seqlens_k[b] + 1 - sequence_length + s after it); no .rope "
            "position form reads seqlens_k and total_sequence_length, so the rotary part cannot be said exactly: "
            "export the model with RoPE as separate RotaryEmbedding nodes")
