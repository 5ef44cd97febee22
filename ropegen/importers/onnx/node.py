"""One ONNX node: its spec text (`spec_for_node`, dispatched on its op key to the node's spec writer) and a
run on arrays through any backend, the spec specialised on the arrays' shapes and dtypes (`run_node`)."""
from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from ropegen.importers.onnx import ms_norm, ms_rotary, rmsnorm, rotary
from ropegen.importers.onnx.common import (_INPUTS, MS_DOMAIN, MS_ROTARY, SUPPORTED_OPS, TensorType, _attributes,
                                           _check_sizes, _norm_types, _slots, _where, op_key)
from ropegen.ir.dtypes import from_numpy

if TYPE_CHECKING:
    import onnx

    from ropegen.api import Operator

# op key (common.op_key) -> the spec writer, the operator name run_node compiles under, and how run_node
# hands the node's arrays to the spec (None: as they are)
_SPECS = {"RotaryEmbedding": rotary.spec, "RMSNormalization": rmsnorm.spec, MS_ROTARY: ms_rotary.spec,
          "SimplifiedLayerNormalization": ms_norm.simplified,
          "SkipSimplifiedLayerNormalization": ms_norm.skip_simplified}
_RUN_NAMES = {"RotaryEmbedding": "onnx_rotary_embedding", "RMSNormalization": "onnx_rms_normalization",
              MS_ROTARY: "ort_rotary_embedding", "SimplifiedLayerNormalization": "ort_simplified_layer_norm",
              "SkipSimplifiedLayerNormalization": "ort_skip_simplified_layer_norm"}
_RUN_INPUTS = {"RotaryEmbedding": None, "RMSNormalization": rmsnorm.run_inputs, MS_ROTARY: ms_rotary.run_inputs,
               "SimplifiedLayerNormalization": rmsnorm.run_inputs, "SkipSimplifiedLayerNormalization": None}


def _key(node: "onnx.NodeProto") -> str:
    key = op_key(node)
    if key is None:
        raise ValueError(f"{_where(node)} (domain '{node.domain or 'ai.onnx'}'): ropegen imports only "
                         f"{' and '.join(SUPPORTED_OPS)} of the default ONNX domain and {MS_DOMAIN} "
                         "RotaryEmbedding, SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization")
    return key


def spec_for_node(node: "onnx.NodeProto", input_types: Sequence[Optional[TensorType]], name: str) -> str:
    """The .rope text of one RotaryEmbedding-23, RMSNormalization-23 or ONNX Runtime contrib node
    (com.microsoft RotaryEmbedding, SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization).

    `input_types` gives (ropegen dtype name, shape) per input: aligned with node.input (entries for
    absent "" inputs may be None), or one per present input. Shapes hold integers, or symbol
    names for dimensions the language allows to stay symbolic (batch, seq, cache rows, RMSNorm's
    leading dims). `name` names the operator. Raises ValueError on anything not importable.
    """
    key = _key(node)
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        raise ValueError(f"operator name '{name}' is not an identifier")
    types = _norm_types(_slots(node, input_types, "input types"))
    _check_sizes(node, types)
    attrs = _attributes(node)
    return _SPECS[key](node, attrs, types, name)


@functools.lru_cache(maxsize=256)
def _compiled(text: str) -> "Operator":
    from ropegen.api import compile as compile_spec
    return compile_spec(text, file="<onnx node>").operators[0]


def run_node(node: "onnx.NodeProto", inputs: Sequence[Optional[np.ndarray]],
             backend: str = "numpy") -> list[np.ndarray]:
    """Run one node that spec_for_node reads on arrays with a ropegen backend.

    `inputs` holds one array per present input of the node, in order (or is aligned with
    node.input, None where the name is ""). The spec is specialised on the arrays' shapes and
    dtypes; compiled operators are cached by spec text. Returns the spec's outputs: [Y], or for
    SkipSimplifiedLayerNormalization [output, input_skip_bias_sum].
    """
    key = _key(node)
    arrays = _slots(node, inputs, "arrays")
    types: list[Optional[TensorType]] = []
    for slot, a in zip(_INPUTS[key], arrays):
        if a is None:
            types.append(None)
            continue
        if not isinstance(a, np.ndarray):
            raise ValueError(f"{_where(node)}: input {slot} must be a numpy array, got {type(a).__name__}")
        dt = from_numpy(a.dtype)
        if dt is None:
            raise ValueError(f"{_where(node)}: input {slot} has dtype {a.dtype}, which ropegen does not support")
        types.append((dt.name, tuple(int(d) for d in a.shape)))
    text = spec_for_node(node, types, _RUN_NAMES[key])
    op = _compiled(text)
    present = [a for a in arrays if a is not None]
    prepare = _RUN_INPUTS[key]
    if prepare is not None:
        present = prepare(node, present)
    return list(op.run_all(*present, backend=backend))
