"""The ggml_rope_ext arguments llama.cpp passes for a GGUF model, worked out from its metadata as llama.cpp
does: `llama_model::load_hparams` (head sizes, n_rot, rope.* keys) and the `llama_context` constructor (the
context's freq_scale, YaRN's ext_factor and attn_factor), in float32 as llama.cpp holds them.

The YaRN magnitude follows llama.cpp since ggml-org/llama.cpp#17945: attn_factor = get_mscale(factor, mscale) /
get_mscale(factor, mscale_all_dim) (or get_mscale(factor) without `rope.scaling.yarn_log_multiplier`, which the
converter stores as 0.1 * mscale_all_dim), divided by ggml's own 1 + 0.1 ln(factor) so that ggml_rope_ext,
which multiplies that back, ends with the Hugging Face magnitude; times `rope.scaling.attn_factor`.
DeepSeek-2 takes mscale = mscale_all_dim (its configs say so), so its rotation keeps magnitude ~1 and the
rest goes into the attention scale.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ropegen import exact
from ropegen.importers.gguf import rope_types

f32 = np.float32
SCALING_TYPES = ("none", "linear", "yarn", "longrope")


@dataclass(frozen=True)
class RopeParams:
    """One ggml_rope_ext call of the model's attention (float32 values as float)."""

    arch: str
    kind: str                  # rope_types.NORM / NEOX
    n_head: int
    n_head_kv: int             # heads of the rotated k (1 for MLA's shared k_pe)
    head_dim: int              # width of the rotated tensor's rows
    n_rot: int
    scaling: str               # rope.scaling.type as llama.cpp reads it
    n_ctx_orig: int
    freq_base: float
    freq_scale: float
    ext_factor: float
    attn_factor: float
    beta_fast: float
    beta_slow: float
    mla: bool = False
    sections: tuple[int, ...] = ()   # MROPE: the t, h, w sections of the pairs
    # (operator name, freq_factors tensor name or None, when llama.cpp uses it)
    variants: tuple[tuple[str, str | None, str], ...] = (("rope", None, ""),)
    notes: tuple[str, ...] = field(default=())


class Meta:
    """The GGUF's key/value pairs under one architecture, read with llama.cpp's defaults; every problem a
    ValueError naming the key."""

    def __init__(self, kv: dict, arch: str) -> None:
        self.kv, self.arch = kv, arch

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def has(self, suffix: str) -> bool:
        return self.key(suffix) in self.kv

    def number(self, suffix: str, default=None, *, integer: bool = False):
        k = self.key(suffix)
        if k not in self.kv:
            if default is None:
                raise ValueError(f"the GGUF has no '{k}'")
            return default
        v = self.kv[k]
        if isinstance(v, list):      # per-layer values (llama.cpp's get_key_or_arr): one value for all layers
            used = [x for x in v if x != 0] or v     # 0: a layer without attention (hybrid models)
            if not used or any(x != used[0] for x in used):
                raise ValueError(f"'{k}' differs between layers ({v[:8]}...): ropegen writes one operator")
            v = used[0]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not float(v).is_integer()):
            raise ValueError(f"'{k}' = {v!r} is not {'an integer' if integer else 'a number'}")
        if not np.isfinite(v):
            raise ValueError(f"'{k}' = {v!r} is not finite")
        return int(v) if integer else float(f32(v))

    def text(self, suffix: str, default: str) -> str:
        v = self.kv.get(self.key(suffix), default)
        if not isinstance(v, str):
            raise ValueError(f"'{self.key(suffix)}' = {v!r} is not a string")
        return v


def _logf(x) -> np.float32:
    return exact.logf(f32(x))


def _get_mscale(scale, mscale) -> np.float32:
    """llama_context's get_mscale in float32."""
    scale, mscale = f32(scale), f32(mscale)
    return f32(1) if scale <= 1 else f32(f32(f32(0.1) * mscale) * _logf(scale)) + f32(1)


def yarn_attn_factor(arch: str, freq_scale: float, log_mul: float) -> float:
    """cparams.yarn_attn_factor for ext_factor != 0, before rope.scaling.attn_factor (llama-context.cpp)."""
    factor = f32(1) / f32(freq_scale)
    if log_mul != 0:
        mscale, all_dims = f32(1), f32(log_mul)
        if arch == "deepseek2" and all_dims != 1:    # [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]
            mscale = all_dims
        attn = f32(_get_mscale(factor, mscale) / _get_mscale(factor, all_dims))
    else:
        attn = _get_mscale(factor, 1)
    # cancel ggml_rope_ext's own 1 + 0.1 ln(1 / freq_scale)
    return float(f32(attn * f32(f32(1) / f32(f32(1) + f32(f32(0.1) * _logf(factor))))))


def _factor_variants(scaling: str, n_rot: int, n_ctx_orig: int, tensors: dict) -> tuple[tuple, list[str]]:
    """llama_model::get_rope_factors: rope_freqs when the model has it; else LongRoPE's long or short
    factors, chosen by the context llama.cpp runs with."""
    notes = []
    for name, t in tensors.items():
        if t.shape != (n_rot // 2,):
            raise ValueError(f"tensor '{name}' has shape {list(t.shape)}; llama.cpp reads n_rot/2 = {n_rot // 2} "
                             "factors")
    if "rope_freqs" in tensors:
        return (("rope", "rope_freqs", "it divides every angle"),), notes
    if scaling == "longrope":
        missing = [t for t in ("rope_factors_short", "rope_factors_long") if t not in tensors]
        if missing:
            raise ValueError(f"rope.scaling.type 'longrope' needs the tensors {', '.join(missing)}")
        return (("rope", "rope_factors_short", f"llama.cpp's choice for contexts up to {n_ctx_orig} per sequence"),
                ("rope_long", "rope_factors_long", "llama.cpp's choice for longer contexts per sequence")), notes
    if tensors:
        notes.append(f"tensors {', '.join(sorted(tensors))} are ignored: llama.cpp reads them for LongRoPE only")
    return (("rope", None, ""),), notes


def _sections(m: Meta, sections, n_rot: int) -> tuple[int, ...]:
    """MROPE's sections as the spec's mrope(...) takes them: t, h, w covering the n_rot/2 pairs. ggml picks
    the stream of pair c by c modulo their sum, and has a fourth (e) section; ropegen's mrope has neither."""
    key = m.key("rope.dimension_sections")
    if not isinstance(sections, list) or not all(isinstance(s, int) and s >= 0 for s in sections):
        raise ValueError(f"'{key}' = {sections!r} is not a list of section sizes")
    s = (sections + [0] * 4)[:4]
    if len(sections) > 4 or s[3] or sum(s) != n_rot // 2:
        raise ValueError(f"'{key}' = {sections}: ropegen's mrope takes three sections (t, h, w) that cover the "
                         f"n_rot/2 = {n_rot // 2} pairs, without ggml's fourth (e)")
    return tuple(s[:3])


def rope_params(kv: dict, tensors: dict) -> RopeParams:
    """The model's ggml_rope_ext arguments from its key/value pairs and its small rope tensors (name without
    `.weight` -> float32 array)."""
    arch = kv.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ValueError("the GGUF has no 'general.architecture'")
    m = Meta(kv, arch)
    sections = kv.get(m.key("rope.dimension_sections"))
    kind = rope_types.rope_type(arch, sections if isinstance(sections, list) else None)
    if kind == rope_types.NONE:
        raise ValueError(f"general.architecture '{arch}' has no rotary embedding (llama.cpp: LLAMA_ROPE_TYPE_NONE)")
    if kind == rope_types.IMROPE:
        # ggml sends the lanes past the h and w sections to a fourth stream (e), transformers to t
        raise ValueError(f"general.architecture '{arch}' rotates with LLAMA_ROPE_TYPE_IMROPE (ggml_rope_multi, "
                         "interleaved sections over four position streams): ropegen's mrope(interleaved = true) "
                         "sends the leftover lanes to t, ggml to its fourth stream")
    n_head = m.number("attention.head_count", integer=True)
    n_embd = m.number("embedding_length", integer=True)
    n_head_kv = m.number("attention.head_count_kv", n_head, integer=True)
    if n_head < 1 or n_head_kv < 1 or n_embd < 1:
        raise ValueError(f"'{m.key('attention.head_count')}' {n_head}, '{m.key('attention.head_count_kv')}' "
                         f"{n_head_kv} and '{m.key('embedding_length')}' {n_embd} must be positive")
    head_k = m.number("attention.key_length", n_embd // n_head, integer=True)
    n_rot = m.number("rope.dimension_count", head_k, integer=True)
    if arch in rope_types.FULL_ROTARY and n_rot != head_k:
        raise ValueError(f"'{m.key('rope.dimension_count')}' = {n_rot} differs from the head size {head_k}: "
                         f"llama.cpp refuses '{arch}' models with partial rotation")
    mla = m.number("attention.kv_lora_rank", 0, integer=True) > 0
    head_dim = n_rot if mla else head_k      # MLA rotates q_pe / k_pe, n_rot wide, k_pe shared by all heads
    if n_rot < 2 or n_rot % 2 or n_rot > head_dim:
        raise ValueError(f"'{m.key('rope.dimension_count')}' = {n_rot} must be even and within the head size "
                         f"{head_dim}")
    mrope = _sections(m, sections, n_rot) if kind == rope_types.MROPE else ()
    scaling = m.text("rope.scaling.type", "linear")     # llama.cpp's default when the key is missing
    if scaling not in SCALING_TYPES:
        raise ValueError(f"'{m.key('rope.scaling.type')}' = '{scaling}' is not one llama.cpp reads "
                         f"({', '.join(SCALING_TYPES)})")
    n_ctx_train = m.number("context_length", integer=True)
    n_ctx_orig = m.number("rope.scaling.original_context_length", 0, integer=True) or n_ctx_train
    factor = m.number("rope.scaling.factor", m.number("rope.scale_linear", 0.0))
    if factor < 0:
        raise ValueError(f"'{m.key('rope.scaling.factor')}' = {factor} must not be negative")
    freq_scale = 1.0 if factor == 0 or scaling == "none" else float(f32(1) / f32(factor))
    # the yarn_* keys: llama.cpp reads them for the architectures whose converters write them
    ext = m.number("rope.scaling.yarn_ext_factor", -1.0)
    ext = ext if ext >= 0 else (1.0 if scaling == "yarn" else 0.0)     # negative: not set
    attn = m.number("rope.scaling.yarn_attn_factor", 1.0)
    notes = []
    log_mul = m.number("rope.scaling.yarn_log_multiplier", 0.0)
    if ext != 0:
        if m.has("rope.scaling.yarn_attn_factor"):
            notes.append(f"'{m.key('rope.scaling.yarn_attn_factor')}' = {attn:g} is replaced by llama.cpp's YaRN "
                         "magnitude rule, as llama_context does")
        attn = yarn_attn_factor(arch, freq_scale, float(f32(f32(log_mul) / f32(0.1))))
    elif log_mul:
        notes.append(f"'{m.key('rope.scaling.yarn_log_multiplier')}' applies to YaRN only: ignored")
    attn = float(f32(f32(attn) * f32(m.number("rope.scaling.attn_factor", 1.0))))
    variants, more = _factor_variants(scaling, n_rot, n_ctx_orig, tensors)
    for key in ("rope.freq_base_swa", "rope.dimension_count_swa", "attention.key_length_swa"):
        if m.has(key):
            notes.append(f"'{m.key(key)}' (the sliding-window layers' RoPE) is not written: the spec holds the "
                         "full-attention layers' RoPE")
    if m.has("rope.scaling.alpha"):
        notes.append(f"'{m.key('rope.scaling.alpha')}' is not modelled by ropegen and was ignored")
    return RopeParams(arch, kind, n_head, 1 if mla else n_head_kv, head_dim, n_rot, scaling, n_ctx_orig,
                      m.number("rope.freq_base", 10000.0), freq_scale, ext, attn,
                      m.number("rope.scaling.yarn_beta_fast", 32.0), m.number("rope.scaling.yarn_beta_slow", 1.0),
                      mla, mrope, variants, tuple(notes + more))
