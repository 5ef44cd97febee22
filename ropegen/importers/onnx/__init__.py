"""The ONNX importer: RotaryEmbedding-23 and RMSNormalization-23 nodes, and ONNX Runtime's contrib ops that
GenAI / Olive exports use (com.microsoft RotaryEmbedding, SimplifiedLayerNormalization,
SkipSimplifiedLayerNormalization), as `.rope` specs.

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

* The contrib ops: see ms_rotary.py and ms_norm.py (SimplifiedLayerNormalization is RMSNormalization with
  `cast = after_scale`; SkipSimplifiedLayerNormalization adds `residual = skip`, `residual_add = stash`).
  GroupQueryAttention with do_rotary = 1 is refused (its positions depend on the call's seqlens_k).
* Symbolic dims (dim_param) become spec symbols; import_model(fix=...) pins named ones first.

Every problem the importer can see (an unknown shape, an unsupported attribute, type or opset)
is a ValueError whose message names the node; the CLI prints it as a user error.

The jobs: common.py (opset, type tables, shared checks, spec layout), rotary.py, rmsnorm.py, ms_rotary.py and
ms_norm.py (one node -> spec text each), node.py (spec_for_node, run_node), graph.py (symbolic dims and `fix`,
skipped nodes, GroupQueryAttention), model.py (import_model).
"""
from ropegen.importers.onnx.common import OPSET, SUPPORTED_OPS, OnnxUnavailable, TensorType
from ropegen.importers.onnx.model import import_model
from ropegen.importers.onnx.node import _compiled, run_node, spec_for_node  # noqa: F401 - _compiled: tests
from ropegen.importers.onnx.rmsnorm import rms_scale_shape

__all__ = ["spec_for_node", "import_model", "run_node", "OnnxUnavailable", "SUPPORTED_OPS", "OPSET",
           "TensorType", "rms_scale_shape"]
