"""ONNX Runtime's RMSNorm contrib ops -> `rmsnorm` specs: SimplifiedLayerNormalization (axis, epsilon,
stash_type, as RMSNormalization-23) and com.microsoft SkipSimplifiedLayerNormalization (input + skip
normalized over the last axis, the sum as the spec's second output `h`).

Both ORT kernels (CPU `layer_norm_impl.cc` / `skip_layer_norm.cc`, and CUDA) multiply the normalized value
by the scale in float and round once to the output type, hence `cast = after_scale`; the skip kernel sums
input + skip in float, stores that sum rounded as input_skip_bias_sum and normalizes the unrounded sum,
hence `residual_add = stash`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ropegen.importers.onnx.common import TensorType, _fmt_shape, _where
from ropegen.importers.onnx.rmsnorm import norm_spec

if TYPE_CHECKING:
    import onnx

_ORIGIN = "(ONNX Runtime contrib op)"
# SkipSimplifiedLayerNormalization's default epsilon, 1e-12, as the float32 an attribute would hold
_SKIP_EPSILON = float(np.float32(1e-12))
_UNUSED_OUTPUTS = ("mean", "inv_std_var")


def _after_scale(x: TensorType, scale: TensorType) -> list[tuple[str, str]]:
    # ORT's Y has scale's type (V); an after_scale rmsnorm writes x's type unless `dtype` says otherwise
    return [("cast", "after_scale")] + ([("dtype", scale[0])] if scale[0] != x[0] else [])


def simplified(node: "onnx.NodeProto", attrs: dict[str, Any], types: list[Optional[TensorType]], name: str) -> str:
    """The spec text of one SimplifiedLayerNormalization node (its optional inv_std_var output is not computed)."""
    x, scale = types[:2]
    assert x is not None and scale is not None
    extra = ["# ONNX Runtime multiplies by scale in float and rounds once (cast = after_scale)."]
    if len(node.output) > 1 and node.output[1]:
        extra.append(f"# The node's inv_std_var output ('{node.output[1]}') is not computed.")
    return norm_spec(node, attrs, x, scale, name, _ORIGIN, "SimplifiedLayerNormalization-1", extra=extra,
                     settings_extra=_after_scale(x, scale), f64_stash_for_f64=True)


def skip_simplified(node: "onnx.NodeProto", attrs: dict[str, Any], types: list[Optional[TensorType]],
                    name: str) -> str:
    """The spec text of one SkipSimplifiedLayerNormalization node: rmsnorm with `residual = skip`."""
    x, skip, gamma, bias = types
    assert x is not None and skip is not None and gamma is not None
    where = _where(node)
    if bias is not None:
        raise ValueError(f"{where}: input 'bias' ('{node.input[3]}') is given; ropegen's rmsnorm adds only a "
                         "residual, not a bias: fold the bias into the skip input")
    if len(x[1]) not in (2, 3):
        raise ValueError(f"{where}: input has shape {_fmt_shape(x[1])}; SkipSimplifiedLayerNormalization takes "
                         "3-D [batch, seq, hidden] or 2-D [tokens, hidden]")
    if skip != x:
        raise ValueError(f"{where}: skip is {skip[0]}{_fmt_shape(skip[1])} but input is {x[0]}{_fmt_shape(x[1])}; "
                         "ropegen's residual has the input's type and shape (a broadcast skip is not imported)")
    extra = ["# input + skip summed in float, normalized unrounded (residual_add = stash) and stored rounded as h,",
             "# the node's input_skip_bias_sum; ONNX Runtime multiplies by gamma in float (cast = after_scale)."]
    unused = [f"{label} ('{out}')" for label, out in zip(_UNUSED_OUTPUTS, node.output[1:3]) if out]
    if unused:
        extra.append(f"# The node's {' and '.join(unused)} output{'s are' if len(unused) > 1 else ' is'} "
                     "not computed.")
    return norm_spec(node, attrs, x, gamma, name, _ORIGIN, "com.microsoft SkipSimplifiedLayerNormalization-1",
                     default_eps=_SKIP_EPSILON, extra=extra, residual="skip",
                     settings_extra=[("residual_add", "stash"), *_after_scale(x, gamma)], f64_stash_for_f64=True)
