"""Make tests/data/hf_norms/goldens.npz: the outputs of transformers' own norm and rotary classes for
the operators `ropegen import-hf` writes (rmsnorm, qk_norm_rope[_local], q_norm / k_norm), so that
tests/test_import_hf_norms.py can check the imported specs without torch installed.

Each case names a config of tests/data/hf_configs, the edits that keep its arrays small (fewer heads, a
smaller hidden size; head_dim, epsilon, rope and dtype stay the model's), the operator, and its inputs
and outputs in the operator's order. The model side is the model's module itself: the attention's own
q_norm / k_norm (Qwen3Attention, Gemma3Attention), its rotary class and apply_rotary_pos_emb, or the
model's RMSNorm class, with seeded random weights. bf16 arrays are stored as their uint16 bits.

    PYTHONPATH=/tmp/D_live python tests/data/hf_norms/make_goldens.py    # transformers 5.23, torch 2.13

The test module imports `run_case` from here for its live comparison (the same cases, computed now).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
CONFIGS = HERE.parent / "hf_configs"
POSITIONS = [0, 1, 37, 1000]

# case -> (config file, edits, dtype the model runs in, operator, kind)
CASES = {
    "qwen3_qk_norm_rope_bf16": ("qwen3-8b", {"num_attention_heads": 4, "num_key_value_heads": 2}, "bfloat16",
                                "qk_norm_rope", "qk_norm_rope"),
    "gemma3_qk_norm_rope_bf16": ("gemma-3-4b", {"num_attention_heads": 4, "num_key_value_heads": 2}, "bfloat16",
                                 "qk_norm_rope", "qk_norm_rope"),
    "gemma3_qk_norm_rope_local_bf16": ("gemma-3-4b", {"num_attention_heads": 4, "num_key_value_heads": 2},
                                       "bfloat16", "qk_norm_rope_local", "qk_norm_rope"),
    "gemma3_rmsnorm_bf16": ("gemma-3-4b", {"hidden_size": 384}, "bfloat16", "rmsnorm", "rmsnorm"),
    "gemma3_rmsnorm_f32": ("gemma-3-4b", {"hidden_size": 384}, "float32", "rmsnorm", "rmsnorm"),
    "llama_rmsnorm_bf16": ("llama-3.1-8b", {"hidden_size": 512}, "bfloat16", "rmsnorm", "rmsnorm"),
    "gpt_oss_rmsnorm_bf16": ("gpt-oss-20b", {"hidden_size": 384}, "bfloat16", "rmsnorm", "rmsnorm"),
    "olmo2_q_norm_f32": ("olmo-2-1124-7b", {"hidden_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2},
                         "float32", "q_norm", "olmo2_q_norm"),
    "olmo2_k_norm_bf16": ("olmo-2-1124-7b", {"hidden_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2},
                          "bfloat16", "k_norm", "olmo2_k_norm"),
}
# model_type -> modeling module name, and the class prefix
MODULES = {"qwen3": ("qwen3", "Qwen3"), "gemma3_text": ("gemma3", "Gemma3"), "llama": ("llama", "Llama"),
           "gpt_oss": ("gpt_oss", "GptOss"), "olmo2": ("olmo2", "Olmo2")}


def config(case: str) -> dict:
    """The case's config.json (with its edits and dtype), as the importer reads it."""
    file, edits, dtype, _, _ = CASES[case]
    cfg = json.loads((CONFIGS / f"{file}.json").read_text())
    text = cfg.get("text_config", cfg)
    text.update(edits)
    for d in (cfg, text):
        d.pop("dtype", None)
        d["torch_dtype"] = dtype
    return cfg


def to_numpy(t) -> np.ndarray:
    import torch
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16).view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


def run_case(case: str) -> dict[str, np.ndarray]:
    """The case's inputs and outputs by operator argument name, from transformers' classes."""
    import importlib

    import torch
    import transformers
    _, _, dtype, op, kind = CASES[case]
    cfg = config(case)
    cfg = cfg.get("text_config", cfg)
    module, prefix = MODULES[cfg["model_type"]]
    m = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    conf = transformers.CONFIG_MAPPING[cfg["model_type"]](
        **{k: v for k, v in cfg.items() if k not in ("architectures", "quantization_config", "torch_dtype")})
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(sum(map(ord, case)))

    def randn(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=gen) * scale + shift).to(dt)

    with torch.no_grad():
        if kind == "qk_norm_rope":
            attn = getattr(m, f"{prefix}Attention")(conf, layer_idx=0).to(dt)
            hq, hk, d = conf.num_attention_heads, conf.num_key_value_heads, attn.head_dim
            t = len(POSITIONS)
            q, k = randn(1, t, hq, d, scale=2.0), randn(1, t, hk, d, scale=2.0)
            # Qwen3's weights start at 1, Gemma's at 0 (it scales by 1 + w): trained-looking values around those
            for norm in (attn.q_norm, attn.k_norm):
                norm.weight.copy_(randn(d, scale=0.3, shift=0.0 if "Gemma" in prefix else 1.0))
            qn, kn = attn.q_norm(q).transpose(1, 2), attn.k_norm(k).transpose(1, 2)     # [1, H, T, D]
            pos = torch.tensor([POSITIONS])
            emb = getattr(m, f"{prefix}RotaryEmbedding")(config=conf)
            if prefix == "Gemma3":
                cos, sin = emb(qn, pos, "sliding_attention" if op.endswith("_local") else "full_attention")
            else:
                cos, sin = emb(qn, pos)
            q_rot, k_rot = m.apply_rotary_pos_emb(qn, kn, cos, sin)
            return {"q": to_numpy(q[0]), "k": to_numpy(k[0]), "positions": np.array(POSITIONS, np.int64),
                    "q_weight": to_numpy(attn.q_norm.weight), "k_weight": to_numpy(attn.k_norm.weight),
                    "q_rot": to_numpy(q_rot[0].transpose(0, 1)), "k_rot": to_numpy(k_rot[0].transpose(0, 1))}
        if kind == "rmsnorm":
            hidden = conf.hidden_size
            norm = getattr(m, f"{prefix}RMSNorm")(hidden, eps=conf.rms_norm_eps).to(dt)
            norm.weight.copy_(randn(hidden, scale=0.3, shift=0.0 if "Gemma" in prefix else 1.0))
            x = randn(3, hidden, scale=3.0)
            return {"x": to_numpy(x), "weight": to_numpy(norm.weight), "y": to_numpy(norm(x))}
        # OLMo 2: the attention's q_norm / k_norm over all heads of a token, on q_proj's [T, H * D] output
        attn = m.Olmo2Attention(conf, layer_idx=0).to(dt)
        norm = attn.q_norm if op == "q_norm" else attn.k_norm
        heads = conf.num_attention_heads if op == "q_norm" else conf.num_key_value_heads
        d = attn.head_dim
        norm.weight.copy_(randn(heads * d, scale=0.3, shift=1.0))
        x = randn(3, heads * d, scale=3.0)
        return {"x": to_numpy(x.view(3, heads, d)), "weight": to_numpy(norm.weight.view(heads, d)),
                "y": to_numpy(norm(x).view(3, heads, d))}


def main() -> None:
    import torch
    import transformers
    arrays, manifest = {}, {"transformers": transformers.__version__, "torch": torch.__version__, "cases": {}}
    for case in CASES:
        out = run_case(case)
        manifest["cases"][case] = {name: str(a.dtype) for name, a in out.items()}
        for name, a in out.items():
            arrays[f"{case}/{name}"] = a.view(np.uint16) if a.dtype == ml_dtypes.bfloat16 else a
    arrays["manifest"] = np.array(json.dumps(manifest, sort_keys=True))
    np.savez_compressed(HERE / "goldens.npz", **arrays)
    print(f"wrote {HERE / 'goldens.npz'} ({(HERE / 'goldens.npz').stat().st_size} bytes, {len(CASES)} cases)")


if __name__ == "__main__":
    sys.exit(main())
