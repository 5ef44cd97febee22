"""RMSNormalization-23 -> an `rmsnorm` spec: axis, epsilon (the exact float32 attribute value),
stash_type -> stash, and a scale over the normalized dims (ONNX's leading broadcast 1s dropped); `norm_spec`
is the same mapping for ONNX Runtime's SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from ropegen.importers.onnx.common import (_ATTRS, _DEFAULT_EPSILON, _ONNX_TYPE_NAMES, OPSET, RMS_TYPES, STASH_TYPES,
                                           Size, TensorType, _attributes, _fmt_shape, _int_dim, _render, _where,
                                           op_key)

if TYPE_CHECKING:
    import onnx


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


def spec(node: "onnx.NodeProto", attrs: dict[str, Any], types: list[Optional[TensorType]], name: str) -> str:
    """The spec text of one RMSNormalization node, given its attributes and normalised input types."""
    x, scale = types[:2]
    assert x is not None and scale is not None
    return norm_spec(node, attrs, x, scale, name, f"(opset {OPSET})", f"RMSNormalization-{OPSET}")


def norm_spec(node: "onnx.NodeProto", attrs: dict[str, Any], x: TensorType, scale: TensorType, name: str,
              origin: str, version: str, *, default_eps: float = _DEFAULT_EPSILON, extra: Sequence[str] = (),
              residual: Optional[str] = None, settings_extra: Sequence[tuple[str, str]] = (),
              f64_stash_for_f64: bool = False) -> str:
    """An rmsnorm spec over X and scale (both operators' attributes: axis, epsilon, stash_type); `residual`
    names a third input declared between x and scale, `settings_extra` follows the node's own settings,
    `f64_stash_for_f64` runs stage one in f64 for f64 X whatever stash_type says (ONNX Runtime's kernels)."""
    where = _where(node)
    (xdt, xs), (sdt, ss) = x, scale
    for label, dt in (("X", xdt), ("scale", sdt)):
        if dt not in RMS_TYPES:
            raise ValueError(f"{where}: {label} is {dt}; {version} takes {', '.join(RMS_TYPES)}")
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
    eps = attrs.get("epsilon", default_eps)
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{where}: epsilon must be a finite, non-negative number, got {eps!r}")
    shown = {"axis": attrs.get("axis", -1), "epsilon": eps, "stash_type": stash_type}
    comments = [f"# Imported from ONNX {where} {origin}: "
                + ", ".join(f"{k}={shown[k]!r}" for k in _ATTRS[op_key(node)]) + ".", *extra]
    if tuple(declared) != tuple(ss):
        comments.append(f"# The model's scale {_fmt_shape(ss)} is declared {_fmt_shape(declared)} "
                        "(leading 1s dropped): pass it reshaped.")
    decls = [("x", f"{xdt}{_fmt_shape(xs)}")]
    if residual:
        decls.append((residual, f"{xdt}{_fmt_shape(xs)}"))
    decls.append(("scale", f"{sdt}{_fmt_shape(declared)}"))
    stash = "f64" if xdt == "f64" and f64_stash_for_f64 else STASH_TYPES[stash_type]
    settings = [("axis", str(axis)), ("epsilon", repr(eps)), ("stash", stash), *settings_extra]
    if residual:
        settings.insert(0, ("residual", residual))
    return _render("rmsnorm", name, comments, decls, "out y" + ("\n    out h" if residual else ""), settings)


def run_inputs(node: "onnx.NodeProto", present: list[np.ndarray]) -> list[np.ndarray]:
    """The node's arrays as the spec takes them: scale reshaped to its declared shape."""
    axis = _attributes(node).get("axis", -1) % present[0].ndim
    present[1] = present[1].reshape(rms_scale_shape(present[0].shape, present[1].shape, axis))
    return present
