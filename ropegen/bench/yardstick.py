"""The copy yardstick of the host bench: which copy a run is measured against, and who builds it.

Out-of-place runs are set beside a plain copy of the same bytes (half read, half written, 'memcpy');
in-place runs beside an in-place scale over the same bytes ('scale'), with the same threads, in the same
run: ratio = copy time / kernel time, 1.0 = copy speed. The copy itself is a target's hook
(`copy_yardstick` in backends/<t>/bench.py, found by ropegen.bench.targets), built like that target's
kernels.
"""
from __future__ import annotations

from ropegen.bench import targets

KINDS = {"out_of_place": "memcpy", "in_place": "scale"}


def kind(mode: str) -> str:
    """The yardstick kind for a mode: 'memcpy' out of place, 'scale' in place."""
    return KINDS[mode]


def build(measured: str):
    """The host copy yardstick (an object with runner(kind, nbytes, threads) -> callable)."""
    return targets.copy_yardstick(measured)
