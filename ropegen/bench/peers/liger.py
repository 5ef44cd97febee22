"""The Liger-Kernel device peers of a GPU bench (Triton), in their native layout and ropegen's numerics:

- LigerRopeFunction: q and k as Hugging Face hands them over, [batch, heads, seq, head_dim] views of
  [batch, seq, heads, head_dim] memory (Liger transposes back, so nothing is copied), rotated in
  place; cos/sin [1, seq, head_dim] in float32 from the planned frequencies (float64 angles rounded
  once: ropegen's angles), computed outside the timed call as a model caches them.
- LigerRMSNormFunction for RMSNorm with casting_mode "gemma" (all arithmetic in float32, one rounding:
  ropegen's numerics; Liger's "llama" mode rounds x * rstd before the weight).
"""
from __future__ import annotations

from typing import Callable

from ropegen.bench.peers.case import PeerCase, Work, unavailable_row
from ropegen.bench.peers.torch import import_torch
from ropegen.ir.dtypes import DTYPES

ROPE = "Liger-Kernel LigerRopeFunction (Triton)"
NORM = "Liger-Kernel LigerRMSNormFunction (Triton)"


def _timed(impl: str, case: PeerCase, time: Callable, fn: Callable[[], object], note: str) -> dict:
    try:
        fn()         # Triton compiles on the first call: outside the capture
        timing = time(Work(fn, call=fn, library="torch", decode=case.decode))
    except Exception as e:  # noqa: BLE001 - an unsupported shape or dtype is an n/a row
        return unavailable_row(impl, case.bytes, f"{type(e).__name__}: {str(e)[:160]}")
    return dict(impl=impl, bytes=case.bytes, note=note, timing=timing)


def rope_rows(torch, case: PeerCase, time: Callable, device: str) -> list[dict]:
    from liger_kernel.ops.rope import LigerRopeFunction
    tdt = getattr(torch, DTYPES[case.dtype].torch)
    t, d = case.tokens, case.head_dim
    q = torch.randn(1, t, case.heads_q, d, device=device, dtype=tdt).transpose(1, 2)   # HF's view
    k = torch.randn(1, t, case.heads_k, d, device=device, dtype=tdt).transpose(1, 2)
    inv = torch.tensor(case.inv_freq, dtype=torch.float64, device=device)
    ang = torch.arange(t, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)[None]
    cos, sin = ang.cos().float(), ang.sin().float()
    return [_timed(ROPE, case, time, lambda: LigerRopeFunction.apply(q, k, cos, sin),
                   "in place on HF's [B, H, S, D] view of [B, S, H, D]; f32 cos/sin table of the planned "
                   "frequencies (not timed: a model caches it)")]


def rmsnorm_rows(torch, case: PeerCase, time: Callable, device: str) -> list[dict]:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    tdt = getattr(torch, DTYPES[case.dtype].torch)
    x = torch.randn(case.tokens, case.width, device=device, dtype=tdt)
    w = torch.randn(case.width, device=device, dtype=tdt)
    return [_timed(NORM, case, time, lambda: LigerRMSNormFunction.apply(x, w, case.epsilon, 0.0, "gemma"),
                   "casting_mode gemma: f32 throughout, one rounding")]


KINDS = {"rope": (rope_rows, ROPE), "rmsnorm": (rmsnorm_rows, NORM)}


def rows(case: PeerCase, time: Callable[[Work], object], device: str) -> list[dict]:
    """Liger's row for `case`, n/a with the reason when it cannot run here."""
    make, name = KINDS.get(case.kind, (None, f"Liger-Kernel {case.kind}"))
    torch, why = import_torch(device)
    if not why:
        try:
            import liger_kernel  # noqa: F401
        except Exception as e:  # noqa: BLE001 - not installed (or no Triton): listed as n/a
            why = f"Liger-Kernel is not importable ({type(e).__name__}: {str(e)[:120]})"
    why = why or ("" if make else f"no Liger-Kernel peer for {case.kind}")
    if why:
        return [unavailable_row(name, case.bytes, why)]
    try:
        return make(torch, case, time, device)
    except Exception as e:  # noqa: BLE001 - e.g. an older Liger without this op
        return [unavailable_row(name, case.bytes, f"{type(e).__name__}: {str(e)[:160]}")]
