"""The device peers of a GPU bench, through PyTorch: eager Hugging Face style RoPE (rotate_half with
cos/sin), the same under torch.compile, Liger-Kernel's Triton RoPE and FlashInfer's apply_rope_pos_ids,
each where it can be imported. The target's bench supplies the clock."""
from __future__ import annotations

from typing import Callable

from ropegen.ir.dtypes import DTYPES


def measure(tokens: int, hq: int, hk: int, d: int, dtype: str, base: float,
            time_ms: Callable[[Callable[[], object]], float], device: str) -> list[dict]:
    """One row (impl, ms, bytes[, note]) per peer that runs, Llama-style q [tokens, hq, d] and k
    [tokens, hk, d] on torch device `device`; `time_ms(fn)` times fn on torch's current stream.
    No torch, no rows."""
    rows: list[dict] = []
    try:
        import torch
    except Exception:  # noqa: BLE001 - no torch, no peers
        return rows
    tdt = getattr(torch, DTYPES[dtype].torch)
    q = torch.randn(tokens, hq, d, device=device, dtype=tdt)
    k = torch.randn(tokens, hk, d, device=device, dtype=tdt)
    pos = torch.arange(tokens, device=device)
    inv = 1.0 / (base ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    freqs = pos[:, None].float() * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(tdt)[:, None, :], emb.sin().to(tdt)[:, None, :]
    nbytes = 2 * (q.numel() + k.numel()) * q.element_size()

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def hf(q, k, cos, sin):
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    rows.append(dict(impl="torch eager (HF rotate_half)", ms=time_ms(lambda: hf(q, k, cos, sin)), bytes=nbytes))
    try:
        compiled = torch.compile(hf)
        rows.append(dict(impl="torch.compile (HF rotate_half)", ms=time_ms(lambda: compiled(q, k, cos, sin)),
                         bytes=nbytes))
    except Exception as e:  # noqa: BLE001
        rows.append(dict(impl="torch.compile (HF rotate_half)", ms=float("nan"), bytes=nbytes, note=str(e)[:200]))
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
        q4, k4 = q.transpose(0, 1)[None].contiguous(), k.transpose(0, 1)[None].contiguous()
        c2, s2 = cos[:, 0][None], sin[:, 0][None]
        rows.append(dict(impl="Liger-Kernel rope (Triton)", bytes=nbytes,
                         ms=time_ms(lambda: LigerRopeFunction.apply(q4, k4, c2, s2))))
    except Exception:  # noqa: BLE001 - not installed or unsupported here
        pass
    try:
        import flashinfer
        rows.append(dict(impl="FlashInfer apply_rope_pos_ids", bytes=nbytes,
                         ms=time_ms(lambda: flashinfer.rope.apply_rope_pos_ids(q, k, pos, rope_theta=base))))
    except Exception:  # noqa: BLE001
        pass
    return rows
