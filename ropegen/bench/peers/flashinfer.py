"""The FlashInfer device peers of a GPU bench, each in its own layout ([tokens, heads, head_dim], in
place) and as close to ropegen's numerics as its API allows:

- apply_llama31_rope_pos_ids_inplace: integer positions, the operator's theta and llama3 scaling
  parameters; FlashInfer computes its angles itself (float positions times its own frequencies, fast
  sin/cos), so its values differ from ropegen's correctly rounded frequencies and accurate sin/cos:
  the note says so. Only for operators with llama3 scaling (else apply_rope_pos_ids_inplace, theta).
- apply_rope_with_cos_sin_cache_inplace: a float32 cos/sin cache built from the planned frequencies
  (float64 angles, rounded once), gathered by int64 positions: the same angles as ropegen's.
- norm.rmsnorm for RMSNorm (float32 sum of squares, as ropegen).
"""
from __future__ import annotations

from typing import Callable

from ropegen.bench.peers.case import PeerCase, Work, unavailable_row
from ropegen.bench.peers.torch import import_torch
from ropegen.ir.dtypes import DTYPES

POS_IDS = "FlashInfer {} (in-kernel angles)"
CACHE = "FlashInfer apply_rope_with_cos_sin_cache_inplace"
NORM = "FlashInfer norm.rmsnorm"
FAST_TRIG = "its own angles: float32 positions x its frequencies, fast sin/cos (numerics differ from ropegen's)"


def _import():
    try:
        import flashinfer
    except Exception as e:  # noqa: BLE001 - not installed, or no build for this torch/CUDA
        return None, f"FlashInfer is not importable ({type(e).__name__}: {str(e)[:120]})"
    return flashinfer, ""


def _timed(impl: str, case: PeerCase, time: Callable, fn: Callable[[], object], note: str) -> dict:
    try:
        fn()         # JIT build / first call outside the capture; errors become an n/a row
        timing = time(Work(fn, call=fn, library="torch", decode=case.decode))
    except Exception as e:  # noqa: BLE001
        return unavailable_row(impl, case.bytes, f"{type(e).__name__}: {str(e)[:160]}")
    return dict(impl=impl, bytes=case.bytes, note=note, timing=timing)


def rope_rows(fi, torch, case: PeerCase, time: Callable, device: str) -> list[dict]:
    tdt = getattr(torch, DTYPES[case.dtype].torch)
    t, hq, hk, d = case.tokens, case.heads_q, case.heads_k, case.head_dim
    q = torch.randn(t, hq, d, device=device, dtype=tdt)
    k = torch.randn(t, hk, d, device=device, dtype=tdt)
    out = []
    rope = fi.rope
    if case.llama3:
        s = case.llama3
        pos32 = torch.arange(t, device=device, dtype=torch.int32)
        fn = lambda: rope.apply_llama31_rope_pos_ids_inplace(    # noqa: E731
            q, k, pos32, interleave=False, rope_scale=s["factor"], rope_theta=case.theta,
            low_freq_factor=s["low_freq_factor"], high_freq_factor=s["high_freq_factor"],
            old_context_len=s["original_max_positions"])
        out.append(_timed(POS_IDS.format("apply_llama31_rope_pos_ids_inplace"), case, time, fn,
                          f"llama3 scaling from the operator; {FAST_TRIG}"))
    else:
        pos32 = torch.arange(t, device=device, dtype=torch.int32)
        fn = lambda: rope.apply_rope_pos_ids_inplace(q, k, pos32, interleave=False, rope_theta=case.theta)  # noqa: E731
        out.append(_timed(POS_IDS.format("apply_rope_pos_ids_inplace"), case, time, fn, FAST_TRIG))
    # the cache: float64 angles of the planned frequencies at every position, cos columns then sin columns
    inv = torch.tensor(case.inv_freq, dtype=torch.float64, device=device)
    ang = torch.arange(max(t, 1), dtype=torch.float64, device=device)[:, None] * inv[None, :]
    cache = torch.cat((ang.cos(), ang.sin()), dim=-1).float()
    pos64 = torch.arange(t, device=device, dtype=torch.int64)
    q2, k2 = q.view(t, hq * d), k.view(t, hk * d)
    fn = lambda: rope.apply_rope_with_cos_sin_cache_inplace(pos64, q2, k2, d, cache, is_neox=True)  # noqa: E731
    out.append(_timed(CACHE, case, time, fn, "cos/sin cache of the planned frequencies (f32): ropegen's angles"))
    return out


def rmsnorm_rows(fi, torch, case: PeerCase, time: Callable, device: str) -> list[dict]:
    tdt = getattr(torch, DTYPES[case.dtype].torch)
    x = torch.randn(case.tokens, case.width, device=device, dtype=tdt)
    w = torch.randn(case.width, device=device, dtype=tdt)
    fn = lambda: fi.norm.rmsnorm(x, w, eps=case.epsilon)     # noqa: E731
    return [_timed(NORM, case, time, fn, "f32 sum of squares")]


KINDS = {"rope": (rope_rows, (POS_IDS.format("apply_llama31_rope_pos_ids_inplace"), CACHE)),
         "rmsnorm": (rmsnorm_rows, (NORM,))}


def rows(case: PeerCase, time: Callable[[Work], object], device: str) -> list[dict]:
    """FlashInfer's rows for `case`, n/a with the reason when it cannot run here."""
    make, names = KINDS.get(case.kind, (None, (f"FlashInfer {case.kind}",)))
    fi, why = _import()
    torch, why_torch = import_torch(device)
    why = why_torch or why or ("" if make else f"no FlashInfer peer for {case.kind}")
    if why:
        return [unavailable_row(n, case.bytes, why) for n in names]
    return make(fi, torch, case, time, device)
