"""The device bench shared by the GPU targets: shapes, memory checks, inputs, the measuring loop and
the table. A target's bench.py supplies only a DeviceClock (its clock, copy yardstick, upload, device
name and free memory, peers) and calls run() / format_results() from its `device_bench` /
`format_results` hooks.

Every row is measured next to a device copy of the same bytes in the same run (the yardstick: ratio =
copy time / kernel time, 1.0 = copy speed) and next to whatever peers the target's clock offers. A
clock may time one way (a float: milliseconds) or report a Timing: device time with the caches hot
and after an L2 flush (cold), and the host time of a whole Python call; each becomes its own column
and ratio. Operators of other kinds than RoPE (RMSNorm) are timed from their slice's bench workload
with T rows; each byte count gets its own copy row.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable

import numpy as np

from ropegen.bench.peers.case import (DECODE_MAX, DEFAULT_BASE, Timing, Work, as_timing,  # noqa: F401 - re-exported
                                      peer_case)
from ropegen.ir.dtypes import DTYPES

DEFAULT_SHAPES = tuple((t, 32, 8, 128, dt) for t in (1, 64, 4096, 16384) for dt in ("bf16", "f32"))
SHAPE_KEYS = ("T", "tokens", "HQ", "HK", "D", "dtype")


def _no_peers(tokens: int, hq: int, hk: int, d: int, dtype: str, repeats: int, base: float) -> list[dict]:
    return []


def _plain_call(kernel, inputs):
    return kernel(*inputs)


@dataclasses.dataclass(frozen=True)
class DeviceClock:
    """What one target brings to the device bench.

    backend: the registry name whose kernels are timed (op.kernel(backend)); name: the device's name;
    free_bytes: its free memory (None: unknown, not checked); time(fn, repeats): median milliseconds per
    fn() on the device; copy_ms(nbytes, repeats): median milliseconds of a device copy moving nbytes in
    total (reads nbytes/2, writes nbytes/2); to_device(array): the NumPy array uploaded as an array the
    target's kernels take, None when it cannot hold it; impl / copy_label: the table's names for
    ropegen's rows and the copy rows; peers(tokens, hq, hk, d, dtype, repeats, base): rows (impl, ms,
    bytes[, note]) of the target's peers at that shape; call(kernel, inputs): one call, no checks.
    """
    backend: str
    name: str
    free_bytes: int | None
    time: Callable[[Callable[[], object], int], float]
    copy_ms: Callable[[int, int], float]
    to_device: Callable[[np.ndarray], object]
    impl: str
    copy_label: str = "device copy"
    peers: Callable[..., list[dict]] = _no_peers
    call: Callable[[object, list], object] = _plain_call
    prepare: Callable[..., Work] | None = None
    peer_rows: Callable[[Any], list[dict]] | None = None
    facts: dict = dataclasses.field(default_factory=dict)

    def work(self, kernel, inputs, decode: bool) -> Work:
        if self.prepare is not None:
            return self.prepare(kernel, inputs, decode)
        return Work(lambda: self.call(kernel, inputs), decode=decode)


class Results(list):
    """run()'s rows (a list), carrying the device's facts (`facts`, the clock's) for the JSON document."""
    facts: dict = {}


def host_timer(sync: Callable[[], object], warmup: int = 5, inner: int = 10
               ) -> Callable[[Callable[[], object], int], float]:
    """A DeviceClock.time for a target without device timers: the host's clock around batches of
    `inner` calls, each batch ended by sync() (so a row is what a caller waits for), median ms per call."""
    import statistics
    import time

    def time_ms(fn: Callable[[], object], repeats: int) -> float:
        for _ in range(warmup):
            fn()
        sync()
        times = []
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            sync()
            times.append((time.perf_counter() - t0) * 1e3 / inner)
        return statistics.median(times)
    return time_ms


def parse_shapes(shapes) -> tuple[tuple, ...]:
    """None -> DEFAULT_SHAPES; tuples pass through; CLI strings like "T=4096" (optionally
    ",dtype=f32", ",HQ=32,HK=8,D=128") pick those token counts for both default dtypes unless a dtype
    is given. A malformed item, an unknown key or an impossible size is a ValueError."""
    from ropegen.bench.shapes import shape_items
    if not shapes:
        return DEFAULT_SHAPES
    out: list[tuple] = []
    for sh in shapes:
        if isinstance(sh, tuple):
            out.append(sh)
            continue
        kv = dict(shape_items(sh))
        for key in kv:
            if key not in SHAPE_KEYS:
                raise ValueError(f"shape '{sh}': the device bench takes {', '.join(SHAPE_KEYS)}, not '{key}'")
        ints = {}
        for key, default, lo in (("T", 4096, 0), ("HQ", 32, 1), ("HK", 8, 1), ("D", 128, 2)):
            raw = kv.get(key, kv.get("tokens", default) if key == "T" else default)
            ints[key] = int(raw)   # shape_items checked the syntax
            if ints[key] < lo:
                raise ValueError(f"shape '{sh}': {key}={ints[key]}: it must be at least {lo}")
        if ints["D"] % 2:
            raise ValueError(f"shape '{sh}': D={ints['D']}: head_dim must be even")
        dts = (kv["dtype"],) if "dtype" in kv else ("bf16", "f32")
        out += [(ints["T"], ints["HQ"], ints["HK"], ints["D"], dt) for dt in dts]
    return tuple(out)


def shape_bytes(tokens: int, hq: int, hk: int, d: int, dtype: str) -> tuple[int, int]:
    """(host, device) bytes one shape needs, about, before anything is allocated: on the host the
    float64 draws and their cast (q, k) and float64 cos/sin tables; on the device the inputs and
    outputs, the copy yardstick's two buffers and the peers' tensors (four times what one call moves)."""
    n = tokens * (hq + hk) * d
    host = n * (8 + DTYPES[dtype].itemsize) + 2 * max(tokens, 1) * d * 8
    device = 4 * 2 * n * DTYPES[dtype].itemsize
    return host, device


def require_memory(shapes: Iterable[tuple], device_free: int | None = None) -> None:
    """Raise TooLarge (a ValueError) for a shape that cannot fit in the host memory limit or, when
    `device_free` is given, in half the device's free memory."""
    from ropegen.runtime.memory import TooLarge, format_bytes, limit_hint, memory_limit
    limit = memory_limit()
    for tokens, hq, hk, d, dtype in shapes:
        host, device = shape_bytes(tokens, hq, hk, d, dtype)
        label = f"T={tokens},HQ={hq},HK={hk},D={d},dtype={dtype}"
        if host > limit:
            raise TooLarge(f"shape {label} is too large: it needs about {format_bytes(host)} of host memory, "
                           f"over {format_bytes(limit)} ({limit_hint()})")
        if device_free is not None and device > device_free // 2:
            raise TooLarge(f"shape {label} is too large: it needs about {format_bytes(device)} of device memory, "
                           f"over half the {format_bytes(device_free)} free")


def row(**kw) -> dict:
    """A result row: the given fields plus gbps (bytes / ms); a Timing under `timing` becomes ms (its
    headline), ms_hot, ms_cold, call_us and method, and with `copy` (the yardstick's Timing) the ratios:
    ratio (headline), ratio_hot and ratio_cold (copy time / time, each against the copy timed the same
    way)."""
    timing, copy = kw.pop("timing", None), kw.pop("copy", None)
    if timing is not None:
        kw.update(ms=timing.ms, ms_hot=timing.hot_ms, method=timing.method)
        for key, value in (("ms_cold", timing.cold_ms), ("call_us", timing.call_us)):
            if value is not None:
                kw[key] = value
        if copy is not None:
            kw["copy_ms"] = copy.ms
            kw["ratio"] = _ratio(copy.ms, timing.ms)
            kw["ratio_hot"] = _ratio(copy.hot_ms, timing.hot_ms)
            if timing.cold_ms is not None and copy.cold_ms is not None:
                kw["ratio_cold"] = _ratio(copy.cold_ms, timing.cold_ms)
    ms, nbytes = kw["ms"], kw["bytes"]
    kw["gbps"] = nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")
    return kw


def _ratio(copy_ms: float, ms: float) -> float:
    return copy_ms / ms if ms == ms and ms > 0 else float("nan")


def rope_inputs(op, tokens: int, hq: int, hk: int, d: int, dtype: str) -> list[np.ndarray] | None:
    """Host inputs for a llama-style operator (q, k, positions[, cos, sin]) at the given shape,
    or None when the operator's declared shape is not of that form."""
    p = op.plan
    if p.token_layout != "t" or p.head_dim != d:
        return None
    heads = [t.real_heads for t in p.inputs if t.heads is not None]
    if heads != [hq, hk][:len(heads)] or p.storage.name != dtype:
        return None
    rng = np.random.default_rng(0)
    np_dt = DTYPES[dtype].np_dtype
    arrays = []
    for t in p.inputs:
        if t.heads is not None:
            a = rng.standard_normal((tokens, t.real_heads * d) if t.rank == 2 else (tokens, t.real_heads, d))
            arrays.append(a.astype(np_dt))
        elif p.positions.ids == t.name and not p.positions.sections:
            arrays.append(np.arange(tokens, dtype=t.dtype.np_dtype))
        elif p.angles.kind == "table" and t.name in (p.angles.cos, p.angles.sin):
            rows = max(tokens, 1)
            ang = np.arange(rows)[:, None] * (10000.0 ** (-np.arange(p.angles.width) * 2.0 / d))   # [rows, width]
            if p.angles.fused:    # one cos_sin cache: cos columns, then sin columns
                arrays.append(np.concatenate([np.cos(ang), np.sin(ang)], -1).astype(t.dtype.np_dtype))
            else:
                f = np.cos if t.name == p.angles.cos else np.sin
                arrays.append(f(ang).astype(t.dtype.np_dtype))
        else:
            return None
    return arrays


def workload_inputs(op, tokens: int, dtype: str) -> list[np.ndarray] | None:
    """Host inputs of another kind's operator (RMSNorm) with its one symbolic row axis at `tokens`, from
    the slice's bench workload; None when its first input is not of `dtype` or has no single symbol."""
    from ropegen.bench.inputs import bench_inputs
    first = op.ir.inputs[0]
    symbols = {d.size for a in first.axes for d in a.parts if isinstance(d.size, str)}
    if first.dtype.name != dtype or len(symbols) != 1:
        return None
    arrays = bench_inputs(op, {symbols.pop(): tokens})
    return [arrays[t.name] for t in op.ir.inputs]


# per operator kind (a lookup by the kind word): RoPE's inputs match the shape's heads and head_dim;
# any other kind is drawn from its slice's bench workload with T rows, and its rows name no heads
INPUTS = {"rope": rope_inputs}
HEADED = {"rope": True}


def kind_inputs(op, tokens: int, hq: int, hk: int, d: int, dtype: str) -> list[np.ndarray] | None:
    make = INPUTS.get(op.kind)
    return make(op, tokens, hq, hk, d, dtype) if make else workload_inputs(op, tokens, dtype)


def _no_heads(kind: str) -> dict:
    return {} if HEADED.get(kind) else dict(heads_q=None, heads_k=None, head_dim=None)


def device_inputs(op, clock: DeviceClock, tokens: int, hq: int, hk: int, d: int, dtype: str
                  ) -> tuple[list, int] | None:
    """The operator's inputs at this shape, uploaded once, and the bytes one call reads and writes
    (RoPE: q and k once each way, the convention of every RoPE row and peer; another kind: its
    workload's count); None when it does not fit the shape or the target cannot hold one of them
    (e.g. bfloat16 without a bfloat16 array type)."""
    arrays = kind_inputs(op, tokens, hq, hk, d, dtype)
    if arrays is None:
        return None
    if HEADED.get(op.kind):
        nbytes = 2 * tokens * (hq + hk) * d * DTYPES[dtype].itemsize
    else:
        from ropegen.bench.inputs import bytes_moved
        nbytes = bytes_moved(op, {t.name: a for t, a in zip(op.ir.inputs, arrays)})
    dev = [clock.to_device(a) for a in arrays]
    return None if any(x is None for x in dev) else (dev, nbytes)


def check_repeats(repeats) -> int:
    if isinstance(repeats, bool) or not isinstance(repeats, (int, float)) or int(repeats) != repeats \
            or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    return int(repeats)


def run(ops: Iterable, shapes, repeats: int, clock: DeviceClock | Callable[[], DeviceClock]) -> list[dict]:
    """Time every operator that fits a shape (tokens, q heads, k heads, head_dim, dtype): RoPE
    operators of that layout, other kinds with T rows; `shapes` may also be the CLI's strings
    ("T=4096", "T=1,dtype=f32") or None for the defaults. `clock` may be a zero-argument factory: it
    is then called only after the shapes, the repeats and the host memory are checked, so that a user
    error touches no device.

    Returns one dict per measurement: op, impl, tokens, heads_q, heads_k, head_dim, dtype, ms
    (median), bytes (read + written), gbps, copy_ms and ratio (= copy_ms / ms, the fraction of the
    same-run device copy speed), device (name); a clock that reports Timings adds ms_hot, ms_cold,
    call_us, method, ratio_hot, ratio_cold (see row); peers' rows may add a note ("n/a: why" for a
    peer that cannot run here).
    """
    shapes = parse_shapes(shapes)
    repeats = check_repeats(repeats)
    require_memory(shapes)          # host sizes first: nothing is allocated yet
    if not isinstance(clock, DeviceClock):
        clock = clock()
    if clock.free_bytes is not None:
        require_memory(shapes, clock.free_bytes)
    results: list[dict] = []
    ops = list(ops)
    for tokens, hq, hk, d, dtype in shapes:
        shape = dict(tokens=tokens, heads_q=hq, heads_k=hk, head_dim=d, dtype=dtype, device=clock.name)
        copies: dict[int, Timing] = {}

        def copy_of(nbytes: int) -> Timing:
            if nbytes not in copies:     # the yardstick of each byte count, measured once, listed first
                copies[nbytes] = as_timing(clock.copy_ms(nbytes, repeats))
                results.append(row(op="-", impl=clock.copy_label, timing=copies[nbytes], copy=copies[nbytes],
                                   bytes=nbytes, **shape))
            return copies[nbytes]

        rope_bytes = 2 * tokens * (hq + hk) * d * DTYPES[dtype].itemsize
        copy_of(rope_bytes)
        base = DEFAULT_BASE     # the legacy peers' rope_theta: the last timed operator's, when it has one
        cases: dict = {}   # per kind, the first operator's (an exact-angle one for RoPE)
        for op in ops:
            uploaded = device_inputs(op, clock, tokens, hq, hk, d, dtype)
            if uploaded is None:
                continue
            inputs, nbytes = uploaded
            angles = getattr(op.plan, "angles", None)
            inv = angles.inv_freq if angles is not None and angles.kind == "exact" else ()
            if len(inv) > 1:
                base = 1.0 / inv[1] ** (d / 2.0)      # inv_freq[1] = base ** (-2 / d)
            if op.kind not in cases or not cases[op.kind].planned:   # what the peers must match
                case = peer_case(op, tokens, hq, hk, d, dtype, repeats)
                if case is not None:
                    cases[op.kind] = case
            copy = copy_of(nbytes)
            work = clock.work(op.kernel(clock.backend), inputs, tokens <= DECODE_MAX)
            timing = as_timing(clock.time(work, repeats))
            extra = _no_heads(op.kind)
            results.append(row(op=op.name, impl=clock.impl, timing=timing, copy=copy, bytes=nbytes,
                               **{**shape, **extra}))
            uploaded = inputs = work = None     # device memory back before the next operator's and the peers'
        if clock.peer_rows is None:
            peer_rows = [(r, rope_bytes, "rope", "-") for r in clock.peers(tokens, hq, hk, d, dtype, repeats, base)]
        else:
            peer_rows = [(r, case.bytes, case.kind, case.op) for case in cases.values() for r in clock.peer_rows(case)]
        for r, nbytes, kind, beside in peer_rows:
            r = dict(r)
            timing = as_timing(r.pop("timing", r.pop("ms", float("nan"))))
            results.append(row(op=beside, timing=timing, copy=copy_of(nbytes), **{**shape, **_no_heads(kind), **r}))
    out = Results(results)
    out.facts = dict(clock.facts)
    return out


def _ms(x) -> str:
    return "n/a" if x is None or x != x else f"{x:.4f}"


def _fmt(x, spec: str) -> str:
    return "-" if x is None or x != x else format(x, spec)


def format_results(results: list[dict], copy_label: str = "device copy") -> str:
    """A plain table of run()'s rows; `copy_label` names the yardstick in the footnote. Hot/cold and
    Python-call columns appear when a row has them; peers' notes are listed under the table."""
    timed = any("ms_cold" in r for r in results)
    head = ("impl", "op", "dtype", "T", "med ms", "MB", "GB/s", "vs copy")
    if timed:
        head = ("impl", "op", "dtype", "T", "cold ms", "hot ms", "call us", "MB", "GB/s", "vs copy", "hot vs copy")
    rows = [head]
    notes: dict[str, list[str]] = {}    # note -> the impls it is about
    for r in results:
        cells = [r["impl"], r["op"], r["dtype"], str(r["tokens"]), _ms(r["ms"])]
        if timed:
            cells += [_ms(r.get("ms_hot")), _fmt(r.get("call_us"), ".1f")]
        cells += [f"{r['bytes'] / 1e6:.1f}", _fmt(r["gbps"], ".1f"), _fmt(r["ratio"], ".2f")]
        if timed:
            cells.append(_fmt(r.get("ratio_hot"), ".2f"))
        rows.append(tuple(cells))
        if r.get("note") and r["impl"] not in notes.setdefault(r["note"], []):
            notes[r["note"]].append(r["impl"])
    widths = [max(len(x[i]) for x in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in rows]
    if results:
        lines.append(f"device: {results[0]['device']}; vs copy = same-run {copy_label} time / time")
        methods = sorted({r["method"] for r in results if r.get("method")})
        if methods:
            lines.append("timed by: " + "; ".join(methods))
    lines += [f"note: {', '.join(impls)}: {note}" for note, impls in notes.items()]
    return "\n".join(lines)


def document(results: list[dict], facts: dict[str, Any] | None, commands: list[str]) -> dict:
    """The JSON document of a device run (bench/results/<target>.json): the device's facts (name,
    driver and runtime versions, ...; None: those run() attached to `results`), the commands that made
    it and the rows, NaN written as null so that the file is strict JSON."""
    facts = getattr(results, "facts", {}) if facts is None else facts
    def clean(v):
        return None if isinstance(v, float) and math.isnan(v) else v
    return {"device": dict(facts), "commands": list(commands),
            "rows": [{k: clean(v) for k, v in r.items()} for r in results]}
