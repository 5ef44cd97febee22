"""The host bench's peers: other implementations of the same operator, timed beside ropegen's kernels.

Each peer module has `measure(op, arrays, nbytes, threads, repeats, measured, beside, flush) -> dict`: the
harness' stats (plus optional 'note' and 'max_rel_diff' against the measured target's output), or
{'error': why} when the peer cannot run or express the operator (a peer failing is a result, never an
exception). `beside` is the measured target's call: the peer times it in the same rounds as itself
(harness.timed_beside), so that the speedup compares two times taken under the same memory bandwidth.
`flush`, when given, runs before each timed call, as before the measured target's (harness.interleaved).
Device peers (torch.py) are called by a target's own device bench instead.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable

import numpy as np

# peer name -> module under ropegen.bench.peers, in table order
HOST_PEERS = {"numpy": "numpy", "onnxruntime": "onnxruntime", "ggml": "ggml"}
DEFAULT = tuple(HOST_PEERS)


def run(names: Iterable[str], op, arrays: dict[str, np.ndarray], nbytes: int, threads: int, repeats: int,
        measured: str, beside: Callable[[], Any] | None = None, flush: Callable[[], Any] | None = None
        ) -> dict[str, dict[str, Any]]:
    """Every requested peer's result, in table order; a peer that is the measured target itself is left out.
    With `beside` (the measured call), each peer's rounds alternate with it (see the module docstring)."""
    names = tuple(names)
    out: dict[str, dict[str, Any]] = {}
    for name, module in HOST_PEERS.items():
        if name in names and name != measured:
            peer = importlib.import_module(f"{__name__}.{module}")
            out[name] = peer.measure(op, arrays, nbytes, threads, repeats, measured, beside, flush)
    return out
