"""The copy yardstick of the host bench: which copies a run is measured against, and which one it is
set beside.

Out-of-place runs are set beside a copy of the same bytes (half read, half written; kind 'memcpy'): the
fastest of memcpy, a non-temporal copy ('stream') and a non-temporal copy that fetches its source into
the L2 ahead ('stream_ahead'), all timed interleaved with the kernel in the same run, since plain memcpy
in 256 KiB chunks never uses streaming stores and runs well below the machine's copy speed, and a copy
that does not fetch ahead keeps fewer reads in flight than the kernels' row loops do. In-place runs are
set beside an in-place scale over the same bytes ('scale'). Same threads; ratio = yardstick time /
kernel time, 1.0 = copy speed. The copies themselves are a target's hook
(`copy_yardstick` in backends/<t>/bench.py, found by ropegen.bench.targets), built like that target's
kernels.
"""
from __future__ import annotations

from typing import Any, Callable

from ropegen.bench import targets

KINDS = {"out_of_place": "memcpy", "in_place": "scale"}


def kind(mode: str) -> str:
    """The yardstick kind for a mode: 'memcpy' (a copy) out of place, 'scale' in place."""
    return KINDS[mode]


def build(measured: str):
    """The host copy yardstick (an object with runner(kind, nbytes, threads) -> callable, and
    optionally runners(kind, nbytes, threads) -> {name: callable}, every copy it has of that kind)."""
    return targets.copy_yardstick(measured)


def runners(yard, mode: str, nbytes: int, threads: int) -> dict[str, Callable[[], Any]]:
    """Every copy to time for a mode, by name ('memcpy', 'stream' and 'stream_ahead' out of place where
    the target has them; 'scale' in place). The calls own their buffers: keep them as long as they are
    called."""
    k = kind(mode)
    if hasattr(yard, "runners"):
        return dict(yard.runners(k, nbytes, threads))
    return {k: yard.runner(k, nbytes, threads)}


def pick(mode: str, copies: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The yardstick record of a run from the stats of each copy ({name: {time_min_s, time_median_s,
    gbps}}): the fastest copy by min time ('used'), its stats, and every copy's under 'copies'."""
    used = min(copies, key=lambda name: copies[name]["time_min_s"])
    return {"kind": kind(mode), "used": used, **copies[used], "copies": copies}
