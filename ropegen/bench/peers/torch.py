"""The PyTorch device peers of a GPU bench: Hugging Face style RoPE (rotate_half) and Llama RMSNorm,
eager and under torch.compile, with ropegen's numerics (the operator's planned frequencies, llama3
scaling included; angles and arithmetic in float32, rounded once to the storage type).

Hugging Face computes cos/sin from integer positions in the forward pass, as ropegen's computed-angle
kernels do, so that is part of the timed call; Hugging Face's own code then rotates in the input
dtype, which the notes say.
"""
from __future__ import annotations

from typing import Callable

from ropegen.bench.peers.case import PeerCase, Work, unavailable_row
from ropegen.ir.dtypes import DTYPES

EAGER = "torch eager (HF {})"
COMPILED = "torch.compile (HF {})"
NAMES = {"rope": "rotate_half", "rmsnorm": "LlamaRMSNorm"}
NOTES = {"rope": "angles from int positions and the planned llama3 frequencies in f32, rotation in f32 "
                 "(HF rotates in the input dtype)",
         "rmsnorm": "f32 sum of squares and product, one rounding (HF multiplies the weight in the input dtype)"}


def import_torch(device: str):
    """torch, or the reason it cannot run the peers on `device`."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure: the peers are n/a
        return None, f"PyTorch is not importable ({type(e).__name__})"
    if device != "cpu" and not getattr(torch, device).is_available():
        return None, f"PyTorch has no {device} device here"
    return torch, ""


def rope_fn(torch, case: PeerCase, device: str):
    """(fn, args): HF rotary embedding from positions + apply_rotary_pos_emb, ropegen's numerics."""
    tdt = getattr(torch, DTYPES[case.dtype].torch)
    q = torch.randn(case.tokens, case.heads_q, case.head_dim, device=device, dtype=tdt)
    k = torch.randn(case.tokens, case.heads_k, case.head_dim, device=device, dtype=tdt)
    pos = torch.arange(case.tokens, device=device)
    inv = torch.tensor(case.inv_freq, dtype=torch.float64, device=device).float()

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def hf(q, k, pos):
        freqs = pos[:, None].float() * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        qf, kf = q.float(), k.float()
        return (qf * cos + rotate_half(qf) * sin).to(q.dtype), (kf * cos + rotate_half(kf) * sin).to(k.dtype)
    return hf, (q, k, pos)


def rmsnorm_fn(torch, case: PeerCase, device: str):
    """(fn, args): Llama RMSNorm over the last axis, ropegen's numerics."""
    tdt = getattr(torch, DTYPES[case.dtype].torch)
    x = torch.randn(case.tokens, case.width, device=device, dtype=tdt)
    w = torch.randn(case.width, device=device, dtype=tdt)
    eps = case.epsilon

    def hf(x, w):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return (h * w.float()).to(x.dtype)
    return hf, (x, w)


FUNCTIONS = {"rope": rope_fn, "rmsnorm": rmsnorm_fn}


def rows(case: PeerCase, time: Callable[[Work], object], device: str) -> list[dict]:
    """The eager and compiled rows for `case` (n/a with the reason when torch or the kind is missing);
    `time(work)` is the target's clock."""
    make = FUNCTIONS.get(case.kind)
    name = NAMES.get(case.kind, case.kind)
    torch, why = import_torch(device)
    if torch is None or make is None:
        why = why or f"no PyTorch peer for {case.kind}"
        return [unavailable_row(EAGER.format(name), case.bytes, why),
                unavailable_row(COMPILED.format(name), case.bytes, why)]
    fn, args = make(torch, case, device)
    out = [dict(impl=EAGER.format(name), bytes=case.bytes, note=NOTES[case.kind],
                timing=time(Work(lambda: fn(*args), call=lambda: fn(*args), library="torch", decode=case.decode)))]
    try:
        compiled = torch.compile(fn)
        compiled(*args)      # compiles now, not inside a graph capture
        out.append(dict(impl=COMPILED.format(name), bytes=case.bytes, note=NOTES[case.kind],
                        timing=time(Work(lambda: compiled(*args), call=lambda: compiled(*args), library="torch",
                                         decode=case.decode))))
    except Exception as e:  # noqa: BLE001 - e.g. no C compiler for Inductor: listed, with the reason
        out.append(unavailable_row(COMPILED.format(name), case.bytes, f"{type(e).__name__}: {str(e)[:160]}"))
    return out
