"""`ropegen bench`: per operator and shape, time (min / median), bytes moved, GB/s and the ratio to a
copy of the same bytes measured in the same run, beside the peers. This package's face; the jobs:

  suites.py      the built-in benchmark sets (--suite)
  shapes.py      --shape strings: NAME=VALUE items, checked once
  inputs.py      benchmark-size inputs, memory needed, bytes moved per call
  targets.py     which targets can be measured and how (the registry + each target's bench hooks)
  yardstick.py   which copy a run is set beside (the copy itself is a target hook)
  harness.py     the host timing loop: interleaving, statistics, one record per operator/shape/mode
  peers/         numpy, onnxruntime, ggml (host); torch (device: HF eager / compile, Liger, FlashInfer)
  report.py      the host results as a table

A target that times itself (a GPU) brings its own bench in backends/<t>/bench.py (see targets.py).
"""
from __future__ import annotations

import importlib

# public name -> (module, name there); loaded on first use, so that the CLI's parser can read
# ropegen.bench.targets without importing the harness and the peers
_EXPORTS = {
    "bench": ("harness", "bench"), "measure": ("harness", "measure"),
    "format_results": ("report", "format_results"), "llama3_suite": ("suites", "llama3_suite"),
    "bench_inputs": ("inputs", "bench_inputs"), "bench_bytes": ("inputs", "bench_bytes"),
    "bytes_moved": ("inputs", "bytes_moved"), "parse_shape": ("shapes", "parse_shape"),
    "shape_items": ("shapes", "shape_items"), "onnx_peer_model": ("peers.onnxruntime", "onnx_peer_model"),
    "ggml_peer_graph": ("peers.ggml", "ggml_peer_graph"), "_ggml_rope_setup": ("peers.ggml", "rope_setup"),
}
__all__ = [n for n in _EXPORTS if not n.startswith("_")] + ["symbol_roles"]


def __getattr__(name: str):
    if name == "symbol_roles":      # the symbols a --shape may size
        from ropegen.ops.inputs import symbol_roles
        return symbol_roles
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
