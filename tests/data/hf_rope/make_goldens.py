"""Write goldens.json: inverse frequencies and attention factors of Hugging Face's rope_init functions.

The formulas are transcribed from transformers' `modeling_rope_utils.py` (`_compute_default_rope_parameters`,
`_compute_linear_scaling_rope_parameters`, `_compute_llama3_parameters`, `_compute_yarn_parameters`) and
evaluated as transformers evaluates them: the powers and the blend in float32 (torch's default dtype),
the correction range and the attention factor in Python floats. With transformers installed, pass
--live to take the numbers from transformers itself instead (tests/test_hf_scalings.py also compares
live when it can import transformers).

    python tests/data/hf_rope/make_goldens.py [--live]

The length-dependent forms (LENGTH_CASES: longrope, dynamic) get one row per seq_len, each from
ROPE_INIT_FUNCTIONS[rope_type](config, seq_len=...) with seq_len as `dynamic_rope_update` passes it:
longrope a Python int (it calls with original_max_position_embeddings + 1 for the long set, the short
set is the init call's); dynamic a 0-d int64 tensor (torch.max(position_ids) + 1), which makes
transformers compute the new base in float32 (a Python int would compute it in float64). The tensor
is what a model meets, so the goldens record it ("seq_len_as": "tensor"); the live test compares both.

The committed goldens.json was made with --live (transformers 5.23.0, torch 2.13.0+cpu, LlamaRotaryEmbedding
and ROPE_INIT_FUNCTIONS); the transcription agrees with it to 1.8e-7 relative, 2.6e-7 for dynamic (numpy's
float32 powers round differently from torch's).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

f32 = np.float32

# (name, rope_theta, rotary dim, rope parameters as a config.json writes them)
CASES = [
    ("llama2_default", 10000.0, 128, {"rope_type": "default"}),
    ("linear_4", 10000.0, 128, {"rope_type": "linear", "factor": 4.0}),
    ("llama3_1", 500000.0, 128, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    ("qwen2_5_yarn", 1000000.0, 128, {"rope_type": "yarn", "factor": 4.0,
                                      "original_max_position_embeddings": 32768}),
    ("deepseek_v3", 10000.0, 64, {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                                  "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
    ("deepseek_v2_lite", 10000.0, 64, {"rope_type": "yarn", "factor": 40.0,
                                       "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
                                       "mscale": 0.707, "mscale_all_dim": 0.707}),
    ("mscale_pair", 10000.0, 64, {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 2048,
                                  "mscale": 1.0, "mscale_all_dim": 0.0}),
    ("gpt_oss", 150000.0, 64, {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                               "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}),
    ("yarn_attention_factor", 10000.0, 96, {"rope_type": "yarn", "factor": 8.0,
                                            "original_max_position_embeddings": 2048, "attention_factor": 0.9}),
]



def _ramp(i: int, lo: float, hi: float, p: float) -> float:
    # float32 values printed as doubles, as Phi-3's config.json lists its factors: the float64 a spec
    # reads is then the very float32 transformers multiplies by
    return float(f32(lo * (hi / lo) ** ((i / 15) ** p)))


_SHORT = [_ramp(i, 1.0, 2.1, 2.0) for i in range(16)]
_LONG = [_ramp(i, 1.08, 64.0, 1.5) for i in range(16)]

# (name, rope_theta, rotary dim, max_position_embeddings, rope parameters, the seq_lens of the rows)
LENGTH_CASES = [
    ("longrope", 10000.0, 32, 4096, {"rope_type": "longrope", "short_factor": _SHORT, "long_factor": _LONG,
                                     "original_max_position_embeddings": 256, "factor": 16.0},
     [1, 256, 257, 100000]),
    ("longrope_attention_factor", 10000.0, 32, 4096,
     {"rope_type": "longrope", "short_factor": _SHORT, "long_factor": _LONG,
      "original_max_position_embeddings": 256, "factor": 16.0, "attention_factor": 0.8125}, [256, 257]),
    ("dynamic_2", 10000.0, 64, 512, {"rope_type": "dynamic", "factor": 2.0}, [1, 512, 513, 2048, 100000]),
    ("dynamic_4", 10000.0, 64, 512, {"rope_type": "dynamic", "factor": 4.0}, [1, 512, 513, 2048, 100000]),
]


def default(base: float, dim: int) -> np.ndarray:
    return f32(1.0) / (f32(base) ** (np.arange(0, dim, 2, dtype=np.int64).astype(f32) / f32(dim)))


def yarn(base: float, dim: int, rp: dict) -> tuple[np.ndarray, float]:
    factor = rp["factor"]
    attention_factor = rp.get("attention_factor")
    mscale, mscale_all_dim = rp.get("mscale"), rp.get("mscale_all_dim")
    original = rp["original_max_position_embeddings"]

    def get_mscale(scale, k=1):
        return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast, beta_slow = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1

    def corr(rot):
        return (dim * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(base))
    low, high = corr(beta_fast), corr(beta_slow)
    if rp.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=f32) - f32(low)) / f32(high - low), f32(0), f32(1))
    pos_freqs = f32(base) ** (np.arange(0, dim, 2).astype(f32) / f32(dim))
    extrap, interp = f32(1) / pos_freqs, f32(1) / (f32(factor) * pos_freqs)
    ext_factor = f32(1) - ramp
    return interp * (f32(1) - ext_factor) + extrap * ext_factor, attention_factor


def llama3(base: float, dim: int, rp: dict) -> np.ndarray:
    inv = default(base, dim)
    factor, lf, hf, old = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], \
        rp["original_max_position_embeddings"]
    low_wl, high_wl = old / lf, old / hf
    wavelen = f32(2 * math.pi) / inv
    out = np.where(wavelen > f32(low_wl), inv / f32(factor), inv)
    smooth = (f32(old) / wavelen - f32(lf)) / f32(hf - lf)
    smoothed = (f32(1) - smooth) * out / f32(factor) + smooth * out
    mid = ~(wavelen < f32(high_wl)) & ~(wavelen > f32(low_wl))
    return np.where(mid, smoothed, out).astype(f32)


def longrope(base: float, dim: int, rp: dict, seq_len: int) -> tuple[np.ndarray, float]:
    original = rp["original_max_position_embeddings"]
    attention = rp.get("attention_factor")
    if attention is None:
        factor = rp["factor"]
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = np.array(rp["long_factor"] if seq_len > original else rp["short_factor"], f32)
    return f32(1) / (ext * f32(base) ** (np.arange(0, dim, 2).astype(f32) / f32(dim))), attention


def dynamic(base: float, dim: int, rp: dict, seq_len: int, max_pos: int) -> np.ndarray:
    """The tensor seq_len path: factor * seq_len / max_pos - (factor - 1), its power and the new base
    in float32."""
    factor = f32(rp["factor"])
    grown = f32(factor * f32(max(seq_len, max_pos)) / f32(max_pos)) - (factor - f32(1))
    new_base = f32(base) * f32(grown ** f32(dim / (dim - 2)))
    return f32(1) / (new_base ** (np.arange(0, dim, 2).astype(f32) / f32(dim)))


def transcribed_rows(base: float, dim: int, max_pos: int, rp: dict, seq_lens: list) -> tuple[list, float]:
    """Rows by seq_len and the attention factor, transcribed (dynamic: the tensor seq_len path)."""
    if rp["rope_type"] == "longrope":
        rows = [longrope(base, dim, rp, n) for n in seq_lens]
        return [r for r, _ in rows], rows[0][1]
    return [dynamic(base, dim, rp, n, max_pos) for n in seq_lens], 1.0


def live_rows(base: float, dim: int, max_pos: int, rp: dict, seq_lens: list,
              as_int: bool = False) -> tuple[list, float]:
    """transformers' ROPE_INIT_FUNCTIONS[rope_type] at each seq_len: longrope with a Python int,
    dynamic with a 0-d int64 tensor as dynamic_rope_update passes it (as_int: a Python int instead)."""
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    heads = 2
    cfg = LlamaConfig(hidden_size=dim * heads, num_attention_heads=heads, num_key_value_heads=heads, head_dim=dim,
                      rope_theta=base, rope_scaling=dict(rp), max_position_embeddings=max_pos)
    fn = ROPE_INIT_FUNCTIONS[rp["rope_type"]]
    rows, attention = [], None
    for n in seq_lens:
        seq_len = n if as_int or rp["rope_type"] == "longrope" else torch.tensor(n, dtype=torch.int64)
        inv, attention = fn(cfg, None, seq_len=seq_len)
        rows.append(inv.double().numpy())
    return rows, float(attention)


def transcribed(base: float, dim: int, rp: dict) -> tuple[np.ndarray, float]:
    kind = rp["rope_type"]
    if kind == "default":
        return default(base, dim), 1.0
    if kind == "linear":
        return default(base, dim) / f32(rp["factor"]), 1.0
    if kind == "llama3":
        return llama3(base, dim, rp), 1.0
    return yarn(base, dim, rp)


def live(base: float, dim: int, rp: dict) -> tuple[np.ndarray, float]:
    """inv_freq and attention_scaling of transformers' own LlamaRotaryEmbedding for these parameters
    (its rope_init function by rope_type, as every model class with these rope types uses)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    heads = 2
    cfg = LlamaConfig(hidden_size=dim * heads, num_attention_heads=heads, num_key_value_heads=heads, head_dim=dim,
                      rope_theta=base, rope_scaling=None if rp["rope_type"] == "default" else dict(rp),
                      max_position_embeddings=rp.get("original_max_position_embeddings", 4096))
    emb = LlamaRotaryEmbedding(config=cfg)
    return emb.inv_freq.double().numpy(), float(emb.attention_scaling)


def main() -> None:
    fn = live if "--live" in sys.argv else transcribed
    rows_fn = live_rows if "--live" in sys.argv else transcribed_rows
    out = {}
    for name, base, dim, rp in CASES:
        inv, attention = fn(base, dim, rp)
        out[name] = {"rope_theta": base, "dim": dim, "rope_parameters": rp,
                     "inv_freq": [float(v) for v in inv], "attention_factor": attention}
    for name, base, dim, max_pos, rp, seq_lens in LENGTH_CASES:
        rows, attention = rows_fn(base, dim, max_pos, rp, seq_lens)
        out[name] = {"rope_theta": base, "dim": dim, "max_position_embeddings": max_pos, "rope_parameters": rp,
                     "seq_len_as": "int" if rp["rope_type"] == "longrope" else "tensor",
                     "rows": {str(n): [float(v) for v in r] for n, r in zip(seq_lens, rows)},
                     "attention_factor": attention}
    path = Path(__file__).with_name("goldens.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path} ({'transformers' if fn is live else 'transcribed formulas'})")


if __name__ == "__main__":
    main()
