"""The device bench shared by the GPU targets: shapes, memory checks, inputs, the measuring loop and
the table. A target's bench.py supplies only a DeviceClock (its clock, copy yardstick, upload, device
name and free memory, peers) and calls run() / format_results() from its `device_bench` /
`format_results` hooks.

Every row is measured next to a device copy of the same bytes in the same run (the yardstick: ratio =
copy time / kernel time, 1.0 = copy speed) and next to whatever peers the target's clock offers.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

import numpy as np

from ropegen.ir.dtypes import DTYPES

DEFAULT_SHAPES = tuple((t, 32, 8, 128, dt) for t in (1, 64, 4096, 16384) for dt in ("bf16", "f32"))
SHAPE_KEYS = ("T", "tokens", "HQ", "HK", "D", "dtype")
DEFAULT_BASE = 10000.0


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
    """A result row: the given fields plus gbps (bytes / ms)."""
    ms, nbytes = kw["ms"], kw["bytes"]
    kw["gbps"] = nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")
    return kw


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


# the device bench times RoPE operators only (a lookup by kind word, no dispatch on the op class)
INPUTS = {"rope": rope_inputs}


def device_inputs(op, clock: DeviceClock, tokens: int, hq: int, hk: int, d: int, dtype: str) -> list | None:
    """The operator's inputs at this shape, uploaded once; None when it does not fit the shape or the
    target cannot hold one of them (e.g. bfloat16 without a bfloat16 array type)."""
    make = INPUTS.get(op.kind)
    arrays = make(op, tokens, hq, hk, d, dtype) if make else None
    if arrays is None:
        return None
    dev = [clock.to_device(a) for a in arrays]
    return None if any(x is None for x in dev) else dev


def check_repeats(repeats) -> int:
    if isinstance(repeats, bool) or not isinstance(repeats, (int, float)) or int(repeats) != repeats \
            or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    return int(repeats)


def run(ops: Iterable, shapes, repeats: int, clock: DeviceClock | Callable[[], DeviceClock]) -> list[dict]:
    """Time every RoPE operator that fits a shape (tokens, q heads, k heads, head_dim, dtype);
    `shapes` may also be the CLI's strings ("T=4096", "T=1,dtype=f32") or None for the defaults.
    `clock` may be a zero-argument factory: it is then called only after the shapes, the repeats and
    the host memory are checked, so that a user error touches no device.

    Returns one dict per measurement: op, impl, tokens, heads_q, heads_k, head_dim, dtype, ms
    (median), bytes (read + written), gbps, copy_ms and ratio (= copy_ms / ms, the fraction of the
    same-run device copy speed), device (name); peers' rows may add a note.
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
        nbytes = 2 * tokens * (hq + hk) * d * DTYPES[dtype].itemsize
        copy_ms = clock.copy_ms(nbytes, repeats)
        results.append(row(op="-", impl=clock.copy_label, ms=copy_ms, bytes=nbytes, copy_ms=copy_ms,
                           ratio=1.0, **shape))
        base = DEFAULT_BASE     # the peers' rope_theta: the last timed operator's, when it has one
        for op in ops:
            inputs = device_inputs(op, clock, tokens, hq, hk, d, dtype)
            if inputs is None:
                continue
            inv = op.plan.angles.inv_freq if op.plan.angles.kind == "exact" else ()
            if len(inv) > 1:
                base = 1.0 / inv[1] ** (d / 2.0)      # inv_freq[1] = base ** (-2 / d)
            kernel = op.kernel(clock.backend)
            ms = clock.time(lambda: clock.call(kernel, inputs), repeats)
            results.append(row(op=op.name, impl=clock.impl, ms=ms, bytes=nbytes, copy_ms=copy_ms,
                               ratio=copy_ms / ms, **shape))
        for r in clock.peers(tokens, hq, hk, d, dtype, repeats, base):
            ratio = copy_ms / r["ms"] if r["ms"] == r["ms"] else float("nan")
            results.append(row(op="-", copy_ms=copy_ms, ratio=ratio, **shape, **r))
    return results


def format_results(results: list[dict], copy_label: str = "device copy") -> str:
    """A plain table of run()'s rows; `copy_label` names the yardstick in the footnote."""
    head = ("impl", "op", "dtype", "T", "med ms", "MB", "GB/s", "vs copy")
    rows = [head] + [(r["impl"], r["op"], r["dtype"], str(r["tokens"]), f"{r['ms']:.4f}", f"{r['bytes'] / 1e6:.1f}",
                      f"{r['gbps']:.1f}", f"{r['ratio']:.2f}") for r in results]
    widths = [max(len(x[i]) for x in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in rows]
    if results:
        lines.append(f"device: {results[0]['device']}; vs copy = same-run {copy_label} time / time")
    return "\n".join(lines)
