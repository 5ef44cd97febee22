"""The host bench's timing loop: every operator at every shape and mode, interleaved with its copy
yardstick and timed min / median, with the peers beside it. Results are plain dicts, ready for JSON.
`measure` is the entry of `ropegen bench`: a target that times itself gets its own bench instead.

Which target is measured and how it is called is found through the registry (ropegen.bench.targets);
the peers are ropegen.bench.peers; formatting is ropegen.bench.report.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable

import numpy as np

from ropegen import backends
from ropegen.api import Operator, Program
from ropegen.bench import peers as peer_registry
from ropegen.bench import targets, yardstick
from ropegen.bench.flush import Flush, flush_bytes
from ropegen.bench.inplace import over_copies
from ropegen.bench.inputs import (bench_inputs, bytes_moved, dtype_label, positions_label, require_memory,
                                  symbol_sizes)
from ropegen.bench.shapes import DEFAULT_SHAPES, parse_shape
from ropegen.ops.inputs import symbol_roles
from ropegen.runtime.memory import memory_limit


def default_threads() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def interleaved(fns: list[Callable[[], Any]], repeats: int, flush: Callable[[], Any] | None = None
                ) -> list[list[float]]:
    """Run each function once to warm up, then `repeats` rounds of all of them; times per function.

    Every timed call comes right after an untimed `flush()` (cold: each starts from memory, see
    ropegen.bench.flush) or, without one, right after an untimed call of the same function (hot: its
    data as warm as its own last call left it, never as the function before it left the caches). A
    function with a `reset` (an in-place call, ropegen.bench.inplace) has it called, untimed, before
    the flush (cold) or after the untimed call (hot): each timed call starts from the same inputs."""
    for f in fns:
        f()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, f in enumerate(fns):
            reset = getattr(f, "reset", None)
            if flush is not None:
                if reset is not None:
                    reset()
                flush()
            else:
                f()
                if reset is not None:
                    reset()
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return times


def timed_beside(fn: Callable[[], Any], beside: Callable[[], Any] | None, repeats: int, nbytes: int,
                 flush: Callable[[], Any] | None = None) -> dict[str, float]:
    """A peer's stats, its rounds alternating with `beside` (the measured target's call) when given:
    then `beside_min_s` is the target's best time in those same rounds. On a host whose memory
    bandwidth drifts within seconds, a peer timed minutes after the target would be set beside
    another machine. `flush`: as in interleaved."""
    ts = interleaved([fn] + ([beside] if beside is not None else []), repeats, flush)
    out = stats(ts[0], nbytes)
    if beside is not None:
        out["beside_min_s"] = min(ts[1])
    return out


# At most this many tokens (rows) a call is decode-sized: there the Python call itself is most of the
# time, so the bench times the whole call as a user makes it (op.run with NumPy arrays; onnxruntime's
# session.run), with the bound kernel (op.bind) beside it.
DECODE_TOKENS = 64


def is_decode(op: Operator, arrays: dict[str, np.ndarray]) -> bool:
    """Whether a call is decode-sized: its sizes other than table rows multiply to <= DECODE_TOKENS."""
    roles = symbol_roles(op.ir)
    n = 1
    for sym, size in symbol_sizes(op, arrays).items():
        if roles.get(sym) != "rows":
            n *= int(size)
    return n <= DECODE_TOKENS


def whole_call(op: Operator, args: list[np.ndarray], threads: int, mode: str, backend: str) -> Callable[[], Any]:
    """The call a user makes: op.run on NumPy arrays, outputs allocated (in place: over copies)."""
    if mode == "in_place":
        return over_copies(op, args, lambda work: lambda: op.run(*work, backend=backend, threads=threads, inplace=True))
    return lambda: op.run(*args, backend=backend, threads=threads)


def stats(ts: list[float], nbytes: int) -> dict[str, float]:
    tmin = min(ts)
    return {"time_min_s": tmin, "time_median_s": float(np.median(ts)), "gbps": nbytes / tmin / 1e9}


def host_targets() -> tuple[str, ...]:
    """The targets the host bench measures: every built one that does not time itself."""
    device = targets.device_targets()
    return tuple(n for n in targets.names() if n not in device)


def _caller(backend: str):
    """(runner(op, args, threads, mode), modes(op, inplace), threaded) for a host target."""
    h = targets.hooks(backend)
    if h is not None and hasattr(h, "kernel_runner"):
        return h.kernel_runner, h.modes, True

    def run_op(op: Operator, args: list[np.ndarray], threads: int, mode: str) -> Callable[[], Any]:
        return lambda: op.run(*args, backend=backend)
    return run_op, (lambda op, inplace: ["out_of_place"]), False


def bench(program_or_ops: Program | Iterable[Operator], backend: str | None = None, threads: int | None = None,
          shapes: Iterable[str | dict] | None = None, repeats: int = 20,
          peers: Iterable[str] = peer_registry.DEFAULT, inplace: bool | None = None) -> list[dict[str, Any]]:
    """Measure every operator at every shape; one dict per operator, shape and mode.

    backend: a host target (default: ropegen.bench.targets.default(), the C backend). threads: kernel /
    onnxruntime / ggml threads (default: the cores available). shapes: strings like
    "T=4096,P=8192,positions=prefill" (default: the Llama-3 prefill-like and decode-like shapes, T=4096).
    inplace: in place only (True, where the kernel can write over its inputs), out of place only (False) or
    both (None).
    """
    ops = list(program_or_ops)
    if backend is None:
        backend = targets.default()
    hosts = host_targets()
    if backend not in hosts:
        raise ValueError(f"bench measures the {' or '.join(hosts)} backend, not '{backend}'")
    if threads is None:
        threads = default_threads()
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if isinstance(repeats, bool) or int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    repeats = int(repeats)
    parsed = [parse_shape(s) for s in (shapes or DEFAULT_SHAPES)]
    peers = tuple(peers)
    known = {sym for op in ops for sym in symbol_roles(op.ir)}
    for shape in parsed:
        unknown = set(shape["sizes"]) - known
        if unknown:
            raise ValueError(f"shape '{shape['label']}' sizes {', '.join(sorted(unknown))}, which no operator "
                             f"has; symbols: {', '.join(sorted(known)) or 'none'}")
    limit = memory_limit()
    reserve = flush_bytes()     # the cold rows' cache-flush buffer, made on the first of them
    for op in ops:      # every size is checked before anything is allocated or built
        for shape in parsed:
            require_memory(op, shape, limit, reserve)
    yard = yardstick.build(backend)
    flush: Flush | None = None
    runner, modes_of, threaded = _caller(backend)
    results: list[dict[str, Any]] = []
    for op in ops:
        for shape in parsed:
            arrays = bench_inputs(op, shape["sizes"], shape["positions"])
            args = [arrays[n] for n in op.inputs]
            nbytes = bytes_moved(op, arrays)
            sizes = {s: int(v) for s, v in symbol_sizes(op, arrays).items()}
            # decode sizes: hot (a served model's small calls find their data cached), and on a threaded
            # target the whole call timed with the bound one beside it; the rest cold
            decode = is_decode(op, arrays)
            for mode in modes_of(op, inplace):
                rec: dict[str, Any] = {
                    "operator": op.name, "kind": op.kind, "spec": op.spec.file, "backend": backend,
                    "threads": threads if threaded else 1, "shape": shape["label"], "sizes": sizes,
                    "positions": positions_label(op, shape["positions"]), "mode": mode,
                    "dtype": dtype_label(op), "bytes": nbytes, "repeats": repeats,
                }
                run = runner(op, args, threads, mode)
                bound = None
                if threaded and decode:
                    run, bound = whole_call(op, args, threads, mode, backend), run
                rec["call"] = "whole" if bound is not None else "bound"
                cold = not decode
                if cold and flush is None:
                    flush = Flush(reserve, threads, getattr(yard, "read", None))
                rec["cache"] = "cold" if cold else "hot"
                if cold:
                    rec["flush_bytes"] = flush.nbytes
                before = flush if cold else None
                copies = yardstick.runners(yard, mode, nbytes, threads)
                timed = interleaved([run, *copies.values()] + ([bound] if bound is not None else []), repeats,
                                    before)
                t_op, t_copies = timed[0], timed[1:1 + len(copies)]
                rec.update(stats(t_op, nbytes))
                if bound is not None:
                    rec["bound"] = stats(timed[-1], nbytes)
                rec["yardstick"] = yardstick.pick(mode, {name: stats(t, nbytes) for name, t in zip(copies, t_copies)})
                rec["ratio_to_copy"] = rec["yardstick"]["time_min_s"] / rec["time_min_s"]
                rec["peers"] = {}
                if mode == "out_of_place":
                    rec["peers"] = peer_registry.run(peers, op, arrays, nbytes, threads, repeats, backend, run,
                                                     before)
                    for peer in rec["peers"].values():      # against ropegen's time in the peer's own rounds
                        if "time_min_s" in peer:
                            peer["speedup"] = peer["time_min_s"] / peer.get("beside_min_s", rec["time_min_s"])
                results.append(rec)
    return results


def measure(ops: list[Operator], backend: str | None, threads: int | None, shapes, repeats: int
            ) -> tuple[list[dict[str, Any]], str]:
    """(results, table) of `ropegen bench`: a target that times itself runs its own bench, any other
    target the host bench. A target that cannot run here is a ValueError."""
    from ropegen.bench.report import format_results
    backend = backend or targets.default()
    h = targets.hooks(backend)
    if h is not None and hasattr(h, "device_bench"):
        why = backends.get(backend).unavailable()
        if why:
            raise ValueError(f"backend '{backend}' cannot run here: {why}")
        results = h.device_bench(ops, shapes=shapes, repeats=repeats)
        return results, h.format_results(results)
    results = bench(ops, backend=backend, threads=threads, shapes=shapes, repeats=repeats)
    return results, format_results(results)
