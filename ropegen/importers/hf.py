"""`ropegen import-hf`: a transformers config.json to one spec holding the model's attention RoPE
(operator `rope`: q, k, positions -> q_rot, k_rot) and its RMSNorm (operator `rmsnorm`: x, weight -> y).

The contract scripts rely on: q and k are [tokens=T, heads=H, head_dim=D] in the model's dtype,
positions i64[T], the operators keep these names and orders. Both spellings of the scaling are read
(`rope_scaling` with `type`/`rope_type`, and transformers 5's `rope_parameters` with `rope_theta`
inside). A scaling ropegen does not have yet is a ValueError naming it; a config field that changes
the model's RoPE or RMSNorm but is not modelled here comes back as a warning naming the field.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float": "f32", "half": "f16"}
SUPPORTED = ("default", "linear", "llama3", "yarn")
NOT_YET = {"dynamic": "dynamic NTK", "longrope": "LongRoPE", "su": "LongRoPE",
           "proportional": "proportional RoPE (Gemma 4)"}
# models whose HF attention rotates interleaved pairs (x[2i], x[2i+1]) rather than rotate_half halves
INTERLEAVED = {"glm", "glm4", "chatglm", "gptj", "deepseek_v2", "deepseek_v3", "cohere"}
LAYERNORM = {"gpt_neox", "falcon", "gptj", "phi", "stablelm", "bloom", "gpt2", "mpt"}
GEMMA = {"gemma", "gemma2", "gemma3", "gemma3_text"}
# models whose attention has no rotary embedding at all (ALiBi or learned absolute positions)
NO_ROPE = {"bloom": "ALiBi", "mpt": "ALiBi", "gpt2": "learned absolute positions", "opt": "learned absolute positions",
           "gpt_bigcode": "learned absolute positions", "baichuan": "ALiBi (13B)"}


def _num(v) -> str:
    """A spec literal that reads back as the same float."""
    return repr(float(v)) if not float(v).is_integer() else str(int(v)) if abs(v) < 1e15 else repr(float(v))


def _text_config(cfg: dict) -> dict:
    return cfg.get("text_config") or cfg.get("llm_config") or cfg


def _scaling(cfg: dict, warnings: list[str]) -> tuple[str, float, dict]:
    """(the spec's scaling argument or "", rope_theta, M-RoPE's {sections, interleaved} or {})."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and "rope_type" in params and isinstance(params.get("full_attention"), dict):
        params = params["full_attention"]     # transformers 5 per-layer-type parameters: the global layers
    rp = dict(params or cfg.get("rope_scaling") or {})
    theta = rp.pop("rope_theta", None) or cfg.get("rope_theta") or cfg.get("rotary_emb_base") or 10000.0
    kind = rp.pop("rope_type", None) or rp.pop("type", None) or "default"
    rp.pop("type", None)
    if kind in NOT_YET:
        raise ValueError(f"rope_type '{kind}': {NOT_YET[kind]} is not supported by ropegen yet")
    mrope = {}
    if "mrope_section" in rp or cfg.get("mrope_section"):     # Qwen2/2.5-VL, Qwen3-VL
        mrope = {"sections": [int(x) for x in rp.pop("mrope_section", None) or cfg["mrope_section"]],
                 "interleaved": bool(rp.pop("mrope_interleaved", False))}
        kind = "default" if kind == "mrope" else kind
    if kind not in SUPPORTED:
        raise ValueError(f"unknown rope_type '{kind}'; ropegen reads {', '.join(SUPPORTED)} "
                         f"(and knows {', '.join(sorted(NOT_YET))}, not yet supported)")
    orig = rp.pop("original_max_position_embeddings", None)
    known = set()
    if kind == "default":
        arg = ""
    elif kind == "linear":
        arg, known = f"linear(factor = {_num(rp['factor'])})", {"factor"}
    elif kind == "llama3":
        arg = (f"llama3(factor = {_num(rp['factor'])}, low_freq_factor = {_num(rp['low_freq_factor'])}, "
               f"high_freq_factor = {_num(rp['high_freq_factor'])}, original_max_positions = {int(orig)})")
        known = {"factor", "low_freq_factor", "high_freq_factor"}
    else:
        factor = rp.get("factor")
        mpe = cfg.get("max_position_embeddings")
        if orig is None:
            orig = mpe
        if factor is None:       # transformers (recent): the ratio of the context lengths
            factor = mpe / orig
        parts = [f"factor = {_num(factor)}", f"original_max_positions = {int(orig)}"]
        for key in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor"):
            if rp.get(key) is not None:
                parts.append(f"{key} = {_num(rp[key])}")
        if rp.get("truncate") is not None:
            parts.append(f"truncate = {'true' if rp['truncate'] else 'false'}")
        arg = f"yarn({', '.join(parts)})"
        known = {"factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate"}
    for key in sorted(set(rp) - known):
        warnings.append(f"rope parameter '{key}' = {rp[key]!r} is not modelled by ropegen and was ignored")
    return arg, float(theta), mrope


def _rope(op: str, angles: str, *, hq: int, hk: int, head_dim: int, rotary: int, interleaved: bool, mrope: dict,
          dt: str) -> list[str]:
    """The lines of one rope operator of the contract (q, k, positions -> q_rot, k_rot)."""
    lines = [f"rope {op} {{",
             f"    in q:         {dt}[tokens=T, heads={hq}, head_dim={head_dim}]",
             f"    in k:         {dt}[tokens=T, heads={hk}, head_dim={head_dim}]",
             f"    in positions: i64[{str(len(mrope['sections'])) + ', ' if mrope else ''}T]",
             "    out q_rot = rotate(q)",
             "    out k_rot = rotate(k)",
             f"    pairing    = {'gptj' if interleaved else 'neox'}"]
    if rotary != head_dim:
        lines.append(f"    rotary_dim = {rotary}")
    if mrope:
        lines.append(f"    positions  = mrope(positions, sections = [{', '.join(map(str, mrope['sections']))}]"
                     + (", interleaved = true)" if mrope["interleaved"] else ")"))
    else:
        lines.append("    positions  = positions")
    return lines + [f"    angles     = {angles}", f"    compute    = {'storage' if dt != 'f32' else 'f32'}", "}"]


def spec_from_config(config: dict, name: str) -> tuple[str, list[str]]:
    """(spec text, warnings) for one transformers config; ValueError when it has no RoPE ropegen can say."""
    try:
        return _spec(config, name)
    except KeyError as exc:
        raise ValueError(f"the config has no {exc.args[0]!r}") from None
    except (TypeError, ZeroDivisionError) as exc:
        raise ValueError(f"the config's attention fields are not usable ({exc})") from None


def _spec(config: dict, name: str) -> tuple[str, list[str]]:
    cfg = _text_config(config)
    warnings: list[str] = []
    mtype = str(cfg.get("model_type") or config.get("model_type") or "")
    if mtype in NO_ROPE or cfg.get("alibi"):
        raise ValueError(f"model_type '{mtype}' has no rotary embedding ({NO_ROPE.get(mtype, 'ALiBi')})")
    hq = int(cfg["num_attention_heads"])
    # k heads: num_key_value_heads; Falcon's num_kv_heads (new decoder) or one head under multi_query
    hk = int(cfg.get("num_key_value_heads") or cfg.get("num_kv_heads")
             or (1 if cfg.get("multi_query") and not cfg.get("new_decoder_architecture") else hq))
    hidden = int(cfg["hidden_size"])
    if hq < 1 or hk < 1 or hidden < 1:
        raise ValueError(f"num_attention_heads {hq}, key/value heads {hk} and hidden_size {hidden} must be positive")
    dt = DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or "float32"), "f32")
    if cfg.get("qk_rope_head_dim"):          # DeepSeek MLA: the rope part of q and k, k shared by all heads
        head_dim, hk = int(cfg["qk_rope_head_dim"]), 1
        interleaved = bool(cfg.get("rope_interleave", True))
    else:
        head_dim = int(cfg.get("head_dim") or hidden // hq)
        interleaved = mtype in INTERLEAVED
    factor = cfg.get("partial_rotary_factor", cfg.get("rotary_pct", 1.0))
    rotary = int(head_dim * float(factor))
    scaling, theta, mrope = _scaling(cfg, warnings)
    angles = f"computed(base = {_num(theta)}{', scaling = ' + scaling if scaling else ''})"
    lines = [f"# {name}: imported by `ropegen import-hf` from its config.json (model_type '{mtype}').",
             f"# transformers' attention RoPE: {'interleaved pairs' if interleaved else 'rotate_half'}"
             + (f", the first {rotary} of {head_dim} dims rotated" if rotary != head_dim else "")
             + (", cos/sin and every product rounded to the activation dtype as HF does" if dt != "f32" else "")
             + "."]
    shape = dict(hq=hq, hk=hk, head_dim=head_dim, rotary=rotary, interleaved=interleaved, mrope=mrope, dt=dt)
    lines += _rope("rope", angles, **shape)
    local = cfg.get("rope_local_base_freq")
    if local is not None:      # Gemma 3: the sliding-window layers rotate with their own, unscaled base
        lines += ["", "# the sliding-window layers' RoPE (rope_local_base_freq, no scaling)"]
        lines += _rope("rope_local", f"computed(base = {_num(local)})", **shape)
    eps = cfg.get("rms_norm_eps")
    if eps is None or mtype in LAYERNORM:
        warnings.append(f"model_type '{mtype}' normalizes with LayerNorm: no rmsnorm operator written")
    else:
        if mtype in GEMMA:
            warnings.append("Gemma's RMSNorm scales by (1 + weight) in float32 before the cast: this `rmsnorm` "
                            "multiplies by weight, so pass 1 + weight (the (1 + w) form is issue 12's)")
        lines += ["", "# its RMSNorm (LlamaRMSNorm: float32 statistics, the normalized value cast to the input dtype, "
                  "then times weight)", "rmsnorm rmsnorm {", f"    in x:      {dt}[T, {hidden}]",
                  f"    in weight: {dt}[{hidden}]", "    out y", f"    epsilon = {_num(eps)}", "}"]
    return "\n".join(lines) + "\n", warnings


def import_config(path: str | Path, out_dir: str | Path) -> tuple[Path, list[str]]:
    """Read a config.json, write <out_dir>/<name>.rope; (the path written, warnings)."""
    path = Path(path)
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: a config.json holds a JSON object")
    name = re.sub(r"[^A-Za-z0-9_]+", "_", path.stem if path.stem != "config" else path.parent.name or "model")
    try:
        text, warnings = spec_from_config(config, name)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    from ropegen import compile as compile_spec
    compile_spec(text)    # the importer's own output must compile: a SpecError here is a bug of ours
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}.rope"
    target.write_text(text)
    return target, warnings
