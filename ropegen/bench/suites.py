"""The built-in benchmark sets (`ropegen bench --suite`)."""
from __future__ import annotations

from typing import Iterable

from ropegen.api import Operator

LLAMA3_SUITE = """
rope llama3_8b_{dt} {{
    in q:         {dt}[tokens=T, heads=32, head_dim=128]
    in k:         {dt}[tokens=T, heads=8, head_dim=128]
    in positions: i64[T]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing   = neox
    positions = positions
    angles    = computed(base = 500000,
                         scaling = llama3(factor = 8, low_freq_factor = 1, high_freq_factor = 4,
                                          original_max_positions = 8192))
    compute   = f32
}}

rope llama3_8b_cached_{dt} {{
    in q:         {dt}[tokens=T, heads=32, head_dim=128]
    in k:         {dt}[tokens=T, heads=8, head_dim=128]
    in positions: i64[T]
    in cos:       f32[P, 64]
    in sin:       f32[P, 64]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing   = neox
    positions = positions
    angles    = table(cos = cos, sin = sin)
}}

rmsnorm rmsnorm_4096_{dt} {{
    in x:     {dt}[N, 4096]
    in scale: {dt}[4096]
    out y
}}
"""


def llama3_suite(dtypes: Iterable[str] = ("f32", "bf16")) -> list[Operator]:
    """The issue's benchmark set: Llama-3-8B RoPE (cached and computed angles) and RMSNorm [4096, 4096]."""
    from ropegen.api import compile as compile_spec
    text = "".join(LLAMA3_SUITE.format(dt=dt) for dt in dtypes)
    return list(compile_spec(text, file="llama3_bench.rope"))


# Qwen3-8B's attention input: q/k RMSNorm per head then RoPE, fused (one read and one write of q and
# k) and as the unfused pair it replaces (ropegen's RMSNorm of q and of k, then ropegen's RoPE).
FUSION_SUITE = """
rope qwen3_qk_norm_rope_{dt} {{
    in q:         {dt}[tokens=T, heads=32, head_dim=128]
    in k:         {dt}[tokens=T, heads=8, head_dim=128]
    in positions: i64[T]
    in q_weight:  {dt}[128]
    in k_weight:  {dt}[128]
    out q_rot = rotate(rmsnorm(q, weight = q_weight, epsilon = 1e-6))
    out k_rot = rotate(rmsnorm(k, weight = k_weight, epsilon = 1e-6))
    pairing   = neox
    positions = positions
    angles    = computed(base = 1000000)
    compute   = f32
}}

rmsnorm unfused_q_norm_{dt} {{
    in x:      {dt}[T, 32, 128]
    in weight: {dt}[128]
    out y
    epsilon = 1e-6
}}

rmsnorm unfused_k_norm_{dt} {{
    in x:      {dt}[T, 8, 128]
    in weight: {dt}[128]
    out y
    epsilon = 1e-6
}}

rope unfused_rope_{dt} {{
    in q:         {dt}[tokens=T, heads=32, head_dim=128]
    in k:         {dt}[tokens=T, heads=8, head_dim=128]
    in positions: i64[T]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing   = neox
    positions = positions
    angles    = computed(base = 1000000)
    compute   = f32
}}
"""


def fusion_suite(dtypes: Iterable[str] = ("f32", "bf16")) -> list[Operator]:
    """Fused q/k RMSNorm + RoPE beside the three operators it replaces (sum their times to compare)."""
    from ropegen.api import compile as compile_spec
    text = "".join(FUSION_SUITE.format(dt=dt) for dt in dtypes)
    return list(compile_spec(text, file="fusion_bench.rope"))


SUITES = {"llama3": llama3_suite, "fusion": fusion_suite}
