"""What a device peer and a GPU target's clock exchange: the work to time (Work), the measurement
(Timing), what a peer must compute to match a ropegen operator (PeerCase, from the operator's plan,
so that every peer gets the same frequencies, scaling and epsilon) and the bytes its row is set
beside, the row of a peer that cannot run here, and the list of device peers (torch eager /
torch.compile, FlashInfer, Liger) a target's bench asks for rows. ropegen.bench.device re-exports
Timing and Work."""
from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

import numpy as np

from ropegen.ir.dtypes import DTYPES

DEFAULT_BASE = 10000.0
DECODE_MAX = 64     # token counts up to which the whole Python call is timed too (decode sizes)
DEVICE_PEERS = ("torch", "flashinfer", "liger")     # modules under ropegen.bench.peers, in table order


@dataclasses.dataclass(frozen=True)
class Timing:
    """One measurement: median device milliseconds per launch with the caches hot (hot_ms) and right
    after the L2 cache was flushed (cold_ms, None when not measured); call_us: the host's microseconds
    for one whole Python call (None when not measured); method: how it was timed."""
    hot_ms: float
    cold_ms: float | None = None
    call_us: float | None = None
    method: str = ""

    @property
    def ms(self) -> float:
        """The headline figure: cold when measured (a fresh operand, as in a model), else hot."""
        return self.cold_ms if self.cold_ms is not None else self.hot_ms


def as_timing(t: "Timing | float") -> Timing:
    return t if isinstance(t, Timing) else Timing(hot_ms=float(t))


@dataclasses.dataclass(frozen=True)
class Work:
    """What a clock times: `launch()` issues the device work once (no checks, no allocation, so that
    it can be captured in a graph); `call()` is the whole call a user writes (timed on the host at
    decode sizes), None when there is none to time; `library` says whose allocator the work uses
    (a clock captures torch work through torch). A Work is called like the function it wraps."""
    launch: Callable[[], object]
    call: Callable[[], object] | None = None
    library: str = "cupy"
    decode: bool = False

    def __call__(self):
        return self.launch()


@dataclasses.dataclass(frozen=True)
class PeerCase:
    """One peer measurement's operator facts: kind ('rope' | 'rmsnorm'), the shape (tokens; q/k heads
    and head_dim for RoPE; width for RMSNorm), dtype, repeats; for RoPE the planned inverse frequencies
    (float64, scaling applied: every peer gets the same angles) with theta and the llama3 scaling
    parameters when the operator has them; for RMSNorm epsilon."""
    kind: str
    tokens: int
    dtype: str
    repeats: int
    heads_q: int = 0
    heads_k: int = 0
    head_dim: int = 0
    width: int = 0
    theta: float = DEFAULT_BASE
    planned: bool = False       # the frequencies are the operator's own (not a table operator's defaults)
    inv_freq: tuple[float, ...] = ()
    llama3: dict | None = None
    epsilon: float = 1e-6
    op: str = "-"               # the operator the peers are set beside

    @property
    def decode(self) -> bool:
        return self.tokens <= DECODE_MAX

    @property
    def bytes(self) -> int:
        """The bytes a peer's row is set beside: the operator's (RoPE: q and k read and written;
        RMSNorm: x and the weight read, y written)."""
        return CASE_BYTES[self.kind](self) * DTYPES[self.dtype].itemsize


# per operator kind (a table keyed by the kind word): elements one call moves, and the case of an operator
CASE_BYTES: dict[str, Callable[[PeerCase], int]] = {
    "rope": lambda c: 2 * c.tokens * (c.heads_q + c.heads_k) * c.head_dim,
    "rmsnorm": lambda c: (2 * c.tokens + 1) * c.width,
}


def unavailable_row(impl: str, nbytes: int, why: str) -> dict:
    """A peer that cannot run here: listed, with the reason, never silently left out."""
    return dict(impl=impl, ms=float("nan"), bytes=nbytes, note=f"n/a: {why}")


def rope_case(op, tokens: int, hq: int, hk: int, d: int, dtype: str, repeats: int) -> PeerCase:
    p = op.plan
    case = dict(kind=op.kind, tokens=tokens, dtype=dtype, repeats=repeats, heads_q=hq, heads_k=hk, head_dim=d,
                op=op.name)
    if p.angles.kind == "exact":
        computed = op.ir.angles
        scaling = getattr(computed, "scaling", None)
        llama3 = None
        if getattr(scaling, "low_freq_factor", None) is not None:     # llama3's four parameters
            llama3 = dict(factor=scaling.factor, low_freq_factor=scaling.low_freq_factor,
                          high_freq_factor=scaling.high_freq_factor,
                          original_max_positions=scaling.original_max_positions)
        case.update(inv_freq=tuple(float(f) for f in p.angles.inv_freq), llama3=llama3, planned=True,
                    theta=float(getattr(computed, "base", DEFAULT_BASE)))
    else:   # a table operator: the peers get the default frequencies of `d` (theta DEFAULT_BASE)
        case.update(inv_freq=tuple(DEFAULT_BASE ** (-2.0 * i / d) for i in range(d // 2)))
    return PeerCase(**case)


def norm_case(op, tokens: int, hq: int, hk: int, d: int, dtype: str, repeats: int) -> PeerCase:
    p = op.plan
    return PeerCase(kind=op.kind, tokens=tokens, dtype=dtype, repeats=repeats, epsilon=float(p.epsilon),
                    width=int(np.prod(p.norm_shape)), planned=True, op=op.name)


CASES = {"rope": rope_case, "rmsnorm": norm_case}


def peer_case(op, tokens: int, hq: int, hk: int, d: int, dtype: str, repeats: int) -> PeerCase | None:
    """What the peers must compute to match `op` at this shape (see PeerCase); None for a kind that
    has no device peers."""
    make = CASES.get(op.kind)
    return make(op, tokens, hq, hk, d, dtype, repeats) if make else None


def device_rows(case: PeerCase, time: Callable, device: str) -> list[dict]:
    """Every device peer's rows for `case` (each module's `rows(case, time, device)`), in table order;
    `time(work)` times a ropegen.bench.device.Work on the target's clock, `device` is torch's name of
    the target's device."""
    rows: list[dict] = []
    for name in DEVICE_PEERS:
        rows += importlib.import_module(f"ropegen.bench.peers.{name}").rows(case, time, device)
    return rows
