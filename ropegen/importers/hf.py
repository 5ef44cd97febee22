"""`ropegen import-hf`: a transformers config.json to one spec holding the model's attention RoPE
(operator `rope`: q, k, positions -> q_rot, k_rot) and its RMSNorm (operator `rmsnorm`: x, weight -> y,
following the model's own RMSNorm class: Gemma's (1 + w), the cast before or after the weight).
Models with per-head q/k norms (Qwen3, Gemma 3) also get `qk_norm_rope` (q, k, positions, q_weight,
k_weight -> q_rot, k_rot: the norm fused in front of the same rotation); OLMo 2's, one norm over all
heads of a token, too (weights [heads, head_dim]), beside its `q_norm` / `k_norm` rmsnorm operators.

The contract scripts rely on: q and k are [tokens=T, heads=H, head_dim=D] in the model's dtype,
positions i64[T], the operators keep these names and orders. Both spellings of the scaling are read
(`rope_scaling` with `type`/`rope_type`, and transformers 5's `rope_parameters` with `rope_theta`
inside). A scaling ropegen does not have yet is a ValueError naming it; a config field that changes
the model's RoPE or RMSNorm but is not modelled here comes back as a warning naming the field.

LongRoPE (Phi-3/3.5/4-mini: rope_type "longrope", the old "su", and "yarn" under model_type phi3, which
Phi3Config renames) becomes `longrope(...)`, its original context taken as transformers takes it: the
config's top-level original_max_position_embeddings first. "dynamic" becomes `dynamic_ntk(...)` over
max_position_embeddings; transformers caches the base of the longest length it has seen while
ropegen recomputes it per call, which the import reports as a warning.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float": "f32", "half": "f16"}
SUPPORTED = ("default", "linear", "llama3", "yarn", "longrope", "su", "dynamic")
NOT_YET = {"proportional": "proportional RoPE (Gemma 4)"}
# Phi3Config's own default for the top-level original_max_position_embeddings: transformers uses it over
# the rope parameters' value when a phi3 config leaves the top-level field out
PHI3_ORIGINAL = 4096
# models whose HF attention rotates interleaved pairs (x[2i], x[2i+1]) rather than rotate_half halves
INTERLEAVED = {"glm", "glm4", "chatglm", "gptj", "deepseek_v2", "deepseek_v3", "cohere"}
LAYERNORM = {"gpt_neox", "falcon", "gptj", "phi", "stablelm", "bloom", "gpt2", "mpt"}
GEMMA = {"gemma", "gemma2", "gemma3", "gemma3_text"}
# RMSNorm classes that multiply by the weight in float32 and cast once at the end, `(w * x).to(dtype)`
# (Olmo2RMSNorm, GptOssRMSNorm; Gemma's as well, with 1 + w); the rest are LlamaRMSNorm's
# `w * x.to(dtype)`
AFTER_SCALE = GEMMA | {"gpt_oss", "olmo2", "olmo3"}
# q_norm / k_norm over each head's head_dim (Qwen3RMSNorm / Gemma3RMSNorm(head_dim)) ...
HEAD_QK_NORM = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text"}
# ... and over all heads of a token at once (Olmo2RMSNorm(num_heads * head_dim))
FULL_QK_NORM = {"olmo2", "olmo3"}
# models whose attention has no rotary embedding at all (ALiBi or learned absolute positions)
NO_ROPE = {"bloom": "ALiBi", "mpt": "ALiBi", "gpt2": "learned absolute positions", "opt": "learned absolute positions",
           "gpt_bigcode": "learned absolute positions", "baichuan": "ALiBi (13B)"}


def _num(v) -> str:
    """A spec literal that reads back as the same float."""
    return repr(float(v)) if not float(v).is_integer() else str(int(v)) if abs(v) < 1e15 else repr(float(v))


def _text_config(cfg: dict) -> dict:
    return cfg.get("text_config") or cfg.get("llm_config") or cfg


def _rope_params(cfg: dict) -> dict:
    """The rope parameters as written: transformers 5's rope_parameters, else rope_scaling (a copy)."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and "rope_type" in params and isinstance(params.get("full_attention"), dict):
        params = params["full_attention"]     # transformers 5 per-layer-type parameters: the global layers
    return dict(params or cfg.get("rope_scaling") or {})


def _factor_list(rp: dict, key: str, n_pairs: int, rotary_note: str) -> str:
    """A LongRoPE factor list as a spec list, each entry reading back as the config's float64."""
    vals = rp[key]
    if not isinstance(vals, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
        raise ValueError(f"rope parameter '{key}' must be a list of numbers")
    if len(vals) != n_pairs:
        raise ValueError(f"rope parameter '{key}' has {len(vals)} entries; LongRoPE needs one per rotated pair, "
                         f"rotary_dim / 2 = {n_pairs} ({rotary_note})")
    rows = [", ".join(_num(x) for x in vals[i:i + 6]) for i in range(0, len(vals), 6)]
    return f"{key} = [\n            " + ",\n            ".join(rows) + "]"


def _longrope(cfg: dict, rp: dict, orig, mtype: str, n_pairs: int, rotary_note: str, warnings: list[str]) -> str:
    top, where = cfg.get("original_max_position_embeddings"), "the config's top-level value"
    if top is None and mtype == "phi3":
        top, where = PHI3_ORIGINAL, "Phi3Config's default for the top-level field"
    # transformers' standardize_rope_params: the top-level field (Phi-3 keeps it there) wins
    if top is not None and orig is not None and int(orig) != int(top):
        warnings.append(f"rope parameter 'original_max_position_embeddings' = {orig!r} differs from {where} "
                        f"{top}: transformers uses {top}, and so does this spec")
    orig = top if top is not None else orig if orig is not None else cfg["max_position_embeddings"]
    factor = rp.get("factor")
    if factor is None:       # Phi-3: the ratio of the context lengths (sets the default magnitude)
        factor = cfg["max_position_embeddings"] / orig
    parts = [_factor_list(rp, key, n_pairs, rotary_note) for key in ("short_factor", "long_factor")]
    parts += [f"original_max_positions = {int(orig)}, factor = {_num(factor)}"]
    if rp.get("attention_factor") is not None:
        parts[-1] += f", attention_factor = {_num(rp['attention_factor'])}"
    return "longrope(\n        " + ",\n        ".join(parts) + ")"


def _scaling(cfg: dict, warnings: list[str], mtype: str = "", rotary: int = 0,
             rotary_note: str = "") -> tuple[str, float, dict]:
    """(the spec's scaling argument or "", rope_theta, M-RoPE's {sections, interleaved} or {})."""
    rp = _rope_params(cfg)
    rp.pop("partial_rotary_factor", None)     # transformers 5 keeps it here; _spec reads it
    theta = rp.pop("rope_theta", None) or cfg.get("rope_theta") or cfg.get("rotary_emb_base") or 10000.0
    kind = rp.pop("rope_type", None) or rp.pop("type", None) or "default"
    rp.pop("type", None)
    if kind == "su" or (kind == "yarn" and mtype == "phi3"):    # Phi3Config's renames
        kind = "longrope"
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
    elif kind == "longrope":
        arg = _longrope(cfg, rp, orig, mtype, rotary // 2, rotary_note, warnings)
        known = {"short_factor", "long_factor", "factor", "attention_factor"}
    elif kind == "dynamic":
        # transformers' _compute_dynamic_ntk_parameters divides by max_position_embeddings (it ignores any
        # original_max_position_embeddings)
        mpe = int(cfg["max_position_embeddings"])
        arg, known = f"dynamic_ntk(factor = {_num(rp['factor'])}, original_max_positions = {mpe})", {"factor"}
        warnings.append("rope_type 'dynamic': transformers keeps the base of the longest length it has seen "
                        f"(back to the original only after a call shorter than {mpe}); ropegen recomputes it from "
                        "each call's max(position) + 1, the same while a generation only grows")
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
          dt: str, norm: str = "", over_heads: bool = False) -> list[str]:
    """The lines of one rope operator of the contract (q, k, positions -> q_rot, k_rot); with `norm` (the
    rmsnorm settings after the weight), the fused form (q, k, positions, q_weight, k_weight): weights
    [head_dim] (a norm per head) or, `over_heads`, [heads, head_dim] (one over all heads of a token)."""
    lines = [f"rope {op} {{",
             f"    in q:         {dt}[tokens=T, heads={hq}, head_dim={head_dim}]",
             f"    in k:         {dt}[tokens=T, heads={hk}, head_dim={head_dim}]",
             f"    in positions: i64[{str(len(mrope['sections'])) + ', ' if mrope else ''}T]"]
    if norm:
        qw, kw = (f"{hq}, {head_dim}", f"{hk}, {head_dim}") if over_heads else (head_dim, head_dim)
        lines += [f"    in q_weight:  {dt}[{qw}]", f"    in k_weight:  {dt}[{kw}]",
                  f"    out q_rot = rotate(rmsnorm(q, weight = q_weight, {norm}))",
                  f"    out k_rot = rotate(rmsnorm(k, weight = k_weight, {norm}))"]
    else:
        lines += ["    out q_rot = rotate(q)", "    out k_rot = rotate(k)"]
    lines.append(f"    pairing    = {'gptj' if interleaved else 'neox'}")
    if rotary != head_dim:
        lines.append(f"    rotary_dim = {rotary}")
    if mrope:
        lines.append(f"    positions  = mrope(positions, sections = [{', '.join(map(str, mrope['sections']))}]"
                     + (", interleaved = true)" if mrope["interleaved"] else ")"))
    else:
        lines.append("    positions  = positions")
    return lines + [f"    angles     = {angles}", f"    compute    = {'storage' if dt != 'f32' else 'f32'}", "}"]


def _norm_settings(mtype: str, eps) -> tuple[list[str], str]:
    """(the rmsnorm setting lines, a comment naming the class) of the model's RMSNorm class."""
    lines = [f"epsilon = {_num(eps)}"]
    if mtype in GEMMA:
        return lines + ["weight_offset = 1", "cast = after_scale"], (
            "GemmaRMSNorm: float32 statistics, times (1 + weight) in float32, cast to x's type last")
    if mtype in AFTER_SCALE:
        return lines + ["cast = after_scale"], (
            "(weight * normalized) in float32, cast to x's type last, as its RMSNorm class does")
    return lines, ("LlamaRMSNorm: float32 statistics, the normalized value cast to the input dtype, "
                   "then times weight in the weight's dtype")


def _rmsnorm(op: str, settings: list[str], x: str, w: str, extra: tuple[str, ...] = ()) -> list[str]:
    return ([f"rmsnorm {op} {{", f"    in x:      {x}", f"    in weight: {w}", "    out y"]
            + [f"    {line}" for line in (*extra, *settings)] + ["}"])


def _norms(mtype: str, cfg: dict, shape: dict, angles: str, local: str | None, hidden: int,
           warnings: list[str]) -> list[str]:
    """The rmsnorm operator and the q/k norm operators (fused with the rope where the norm is per head)."""
    eps = cfg.get("rms_norm_eps")
    if eps is None or mtype in LAYERNORM:
        warnings.append(f"model_type '{mtype}' normalizes with LayerNorm: no rmsnorm operator written")
        return []
    settings, about = _norm_settings(mtype, eps)
    dt, hq, hk, d = shape["dt"], shape["hq"], shape["hk"], shape["head_dim"]
    lines = ["", f"# its RMSNorm ({about})"] + _rmsnorm("rmsnorm", settings, f"{dt}[T, {hidden}]", f"{dt}[{hidden}]")
    if mtype in HEAD_QK_NORM:
        norm = ", ".join(settings)
        lines += ["", "# q_norm / k_norm over each head's head_dim, then the rotation (the model stores the",
                  "# normalized head in its dtype between the two)"] + _rope("qk_norm_rope", angles, **shape, norm=norm)
        if local is not None:
            lines += ["", "# the same for the sliding-window layers"]
            lines += _rope("qk_norm_rope_local", local, **shape, norm=norm)
    elif mtype in FULL_QK_NORM:
        norm = ", ".join(settings)
        lines += ["", "# q_norm / k_norm over all heads of a token (num_heads * head_dim: weights [heads, head_dim]),",
                  "# then the rotation"] + _rope("qk_norm_rope", angles, **shape, norm=norm, over_heads=True)
        lines += ["", "# the same norms alone (x: [T, heads, head_dim], over its last two axes)"]
        for op, heads in (("q_norm", hq), ("k_norm", hk)):
            lines += _rmsnorm(op, settings, f"{dt}[T, {heads}, {d}]", f"{dt}[{heads}, {d}]", ("axis = -2",))
    return lines


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
    # transformers 5 keeps partial_rotary_factor in the rope parameters, and reads it there first
    factor = _rope_params(cfg).get("partial_rotary_factor",
                                   cfg.get("partial_rotary_factor", cfg.get("rotary_pct", 1.0)))
    rotary = int(head_dim * float(factor))
    scaling, theta, mrope = _scaling(cfg, warnings, mtype, rotary,
                                     f"head_dim {head_dim} x partial_rotary_factor {factor} = {rotary}")
    angles = f"computed(base = {_num(theta)}{', scaling = ' + scaling if scaling else ''})"
    lines = [f"# {name}: imported by `ropegen import-hf` from its config.json (model_type '{mtype}').",
             f"# transformers' attention RoPE: {'interleaved pairs' if interleaved else 'rotate_half'}"
             + (f", the first {rotary} of {head_dim} dims rotated" if rotary != head_dim else "")
             + (", cos/sin and every product rounded to the activation dtype as HF does" if dt != "f32" else "")
             + "."]
    shape = dict(hq=hq, hk=hk, head_dim=head_dim, rotary=rotary, interleaved=interleaved, mrope=mrope, dt=dt)
    lines += _rope("rope", angles, **shape)
    local = cfg.get("rope_local_base_freq")
    local_angles = None if local is None else f"computed(base = {_num(local)})"
    if local is not None:      # Gemma 3: the sliding-window layers rotate with their own, unscaled base
        lines += ["", "# the sliding-window layers' RoPE (rope_local_base_freq, no scaling)"]
        lines += _rope("rope_local", local_angles, **shape)
    lines += _norms(mtype, cfg, shape, angles, local_angles, hidden, warnings)
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
