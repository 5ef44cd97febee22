"""`ropegen import-hf`: real transformers config.json files (tests/data/hf_configs) -> one .rope spec.

* Structure: the `rope` operator takes (q, k, positions) and gives (q_rot, k_rot) with the model's head
  counts, rotated head_dim, rotary_dim, pairing and dtype; `rmsnorm` is there iff the model uses RMSNorm,
  with its rms_norm_eps (its class's (1 + w) and cast order, and the q/k norm operators:
  tests/test_import_hf_norms.py). The expected shapes are written out per model below, not derived by the test.
* Numbers: the spec, imported with the config's dtype set to float32, rotates q and k (numpy and C
  backends) like a float64 transcription of transformers' own path for that model class: its rope init
  formulas (default, linear, llama3, yarn), cos/sin = cat(freqs, freqs) * attention_factor, and the
  class's apply function (rotate_half, GLM's repeat_interleave, DeepSeek-V3's
  apply_rotary_pos_emb_interleave, DeepSeek-V2's complex multiply, gpt-oss's chunked halves), partial
  rotary passing the tail through. Positions inside and beyond original_max_position_embeddings.
  Bound: float32 data and float32 kernel arithmetic against float64, atol = 5e-6 * max|x| per element
  (a float32 rotation is a few ulps, ~1e-7 relative; the angles themselves are planned exactly).
* bf16 / f16 specs compute in the storage type (compute = storage) and stay within a few storage ulps.
* Errors and warnings of the contract, the command line, and a live comparison with transformers itself
  (skipped unless torch and transformers import).

Over 400 lines because it keeps the importer's corpus checks, the float64 transcription of transformers'
rope code they compare against, and the live comparison in one place, as test_onnx.py does for ONNX.
"""
from __future__ import annotations

import copy
import functools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen import ir

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
ROOT = Path(__file__).resolve().parent.parent


def load(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def spec_from_config(config: dict, name: str):
    from ropegen.importers.hf import spec_from_config as f
    return f(config, name)


# Per model, written from the model's architecture (not computed from the importer's logic):
# (q heads, k heads, rotated head_dim, rotary_dim, dtype, hidden, rms_norm_eps or None for LayerNorm,
#  how transformers applies the rotation)
MODELS = {
    "llama-2-7b":                  (32, 32, 128, 128, "f16", 4096, 1e-5, "neox"),
    "llama-3.1-8b":                (32, 8, 128, 128, "bf16", 4096, 1e-5, "neox"),
    "llama-3.1-8b-transformers5":  (32, 8, 128, 128, "bf16", 4096, 1e-5, "neox"),
    "llama-3.2-1b":                (32, 8, 64, 64, "bf16", 2048, 1e-5, "neox"),
    "mistral-7b-v0.3":             (32, 8, 128, 128, "bf16", 4096, 1e-5, "neox"),
    "qwen2.5-7b-instruct":         (28, 4, 128, 128, "bf16", 3584, 1e-6, "neox"),
    "qwen2.5-7b-instruct-yarn":    (28, 4, 128, 128, "bf16", 3584, 1e-6, "neox"),
    "qwen3-8b":                    (32, 8, 128, 128, "bf16", 4096, 1e-6, "neox"),
    # MLA: the rotated part of q is qk_rope_head_dim per head; k_pe is ONE head shared by all heads
    # (HF: k_rot.view(batch, 1, seq, qk_rope_head_dim), expanded after the rotation)
    "deepseek-v3":                 (128, 1, 64, 64, "bf16", 7168, 1e-6, "deepseek_v3"),
    "deepseek-v2-lite":            (16, 1, 64, 64, "bf16", 2048, 1e-6, "deepseek_v2"),
    "gpt-oss-20b":                 (64, 8, 64, 64, "bf16", 2880, 1e-5, "gpt_oss"),
    "gemma-2-9b":                  (16, 8, 256, 256, "f32", 3584, 1e-6, "neox"),
    "gemma-3-4b":                  (8, 4, 256, 256, "bf16", 2560, 1e-6, "neox"),
    "glm-4-9b":                    (32, 2, 128, 64, "bf16", 4096, 1.5625e-7, "glm"),
    "pythia-1b":                   (8, 8, 256, 64, "f16", 2048, None, "neox"),
    # Falcon-7B: multi_query -> one k head (FalconAttention: num_kv_heads = 1 unless new_decoder_architecture)
    "falcon-7b":                   (71, 1, 64, 64, "bf16", 4544, None, "neox"),
    "olmo-2-1124-7b":              (32, 32, 128, 128, "f32", 4096, 1e-6, "neox"),
}
GEMMA = ("gemma-2-9b", "gemma-3-4b")
PAIRING = {"neox": ir.PairKind.NEOX, "gpt_oss": ir.PairKind.NEOX, "glm": ir.PairKind.GPTJ,
           "deepseek_v3": ir.PairKind.GPTJ, "deepseek_v2": ir.PairKind.GPTJ}


def force_f32(config: dict) -> dict:
    """The same config with its dtype fields set to float32 (the model run in float32)."""
    cfg = copy.deepcopy(config)
    found = False
    for d in (cfg, cfg.get("text_config")):
        for key in ("torch_dtype", "dtype"):
            if isinstance(d, dict) and key in d:
                d[key], found = "float32", True
    if not found:
        cfg["torch_dtype"] = "float32"
    return cfg


@functools.lru_cache(maxsize=None)
def imported(name: str, f32: bool = False):
    cfg = load(name)
    text, warns = spec_from_config(force_f32(cfg) if f32 else cfg, name.replace("-", "_").replace(".", "_"))
    return ropegen.compile(text), text, tuple(warns)


# ---------------------------------------------------------------------------------------------
# transformers' rope parameters, transcribed (modeling_rope_utils.py) and evaluated in float64
# ---------------------------------------------------------------------------------------------

def hf_params(config: dict) -> tuple[float, int, dict, int]:
    """(rope_theta, rotary dim, rope parameters with rope_type, original context) as transformers resolves
    them: text_config for multimodal models, rope_parameters (v5) or rope_scaling + rope_theta (v4; the
    legacy key `type`), GPT-NeoX's rotary_emb_base / rotary_pct, DeepSeek's qk_rope_head_dim."""
    c = config.get("text_config", config)
    if "rope_parameters" in c:
        rp = dict(c["rope_parameters"])
        base = rp.pop("rope_theta")
    else:
        rp = dict(c.get("rope_scaling") or {})
        base = c.get("rope_theta", c.get("rotary_emb_base", 10000.0))
    rp["rope_type"] = rp.get("rope_type", rp.pop("type", "default"))
    head_dim = c.get("qk_rope_head_dim") or c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    partial = c.get("partial_rotary_factor", c.get("rotary_pct", 1.0))
    original = rp.get("original_max_position_embeddings", c.get("max_position_embeddings", 2048))
    return float(base), int(head_dim * partial), rp, int(original)


def hf_inv_freq(base: float, dim: int, rp: dict, max_positions: int) -> tuple[np.ndarray, float]:
    """inv_freq and attention_factor of `_compute_<rope_type>_parameters`, in float64."""
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    kind = rp["rope_type"]
    if kind == "default":
        return inv, 1.0
    if kind == "linear":
        return inv / rp["factor"], 1.0
    if kind == "llama3":
        factor, lf, hf, old = (rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"],
                               rp["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        out = np.where(wavelen > old / lf, inv / factor, inv)
        smooth = (old / wavelen - lf) / (hf - lf)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wavelen < old / hf) & ~(wavelen > old / lf)
        return np.where(medium, smoothed, out), 1.0
    assert kind == "yarn", kind
    # current transformers: the explicit factor wins (4.5x briefly used max_position / original instead)
    factor = rp["factor"]
    original = rp.get("original_max_position_embeddings", max_positions)

    def get_mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
    attention = rp.get("attention_factor")
    if attention is None:
        if rp.get("mscale") and rp.get("mscale_all_dim"):
            attention = get_mscale(factor, rp["mscale"]) / get_mscale(factor, rp["mscale_all_dim"])
        else:
            attention = get_mscale(factor)

    def corr(rot):
        return dim * math.log(original / (rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = corr(rp.get("beta_fast") or 32), corr(rp.get("beta_slow") or 1)
    if rp.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrap = 1 - ramp
    return inv / factor * (1 - extrap) + inv * extrap, float(attention)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def hf_rotate(x: np.ndarray, pos: np.ndarray, inv: np.ndarray, attention: float, style: str) -> np.ndarray:
    """x [T, H, D] rotated as the model class's apply function does, in float64."""
    x = x.astype(np.float64)
    freqs = pos.astype(np.float64)[:, None] * inv[None, :]                # [T, r/2]
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = (np.cos(emb) * attention)[:, None, :], (np.sin(emb) * attention)[:, None, :]
    r = inv.size * 2
    if style == "neox":            # apply_rotary_pos_emb (Llama, Qwen, Mistral, Gemma, GPT-NeoX, Falcon)
        xr, xp = x[..., :r], x[..., r:]
        return np.concatenate([xr * cos + rotate_half(xr) * sin, xp], -1)
    if style == "gpt_oss":         # _apply_rotary_emb: chunk(2), half-width cos/sin
        c, s = cos[..., : r // 2], sin[..., : r // 2]
        a, b = x[..., : r // 2], x[..., r // 2:]
        return np.concatenate([a * c - b * s, b * c + a * s], -1)
    if style == "glm":             # GLM: cos[..., :r/2].repeat_interleave(2), rotate_half on (0::2, 1::2)
        c = np.repeat(cos[..., : r // 2], 2, -1)
        s = np.repeat(sin[..., : r // 2], 2, -1)
        xr, xp = x[..., :r], x[..., r:]
        rh = np.stack([-xr[..., 1::2], xr[..., 0::2]], -1).reshape(xr.shape)
        return np.concatenate([xr * c + rh * s, xp], -1)
    if style == "deepseek_v3":     # apply_rotary_pos_emb_interleave: de-interleave, then rotate_half
        t, h, d = x.shape
        xd = x.reshape(t, h, d // 2, 2).transpose(0, 1, 3, 2).reshape(t, h, d)
        return xd * cos + rotate_half(xd) * sin
    if style == "deepseek_v2":     # view_as_complex(x.reshape(..., -1, 2)) * freqs_cis, in place
        z = (x[..., 0::2] + 1j * x[..., 1::2]) * (np.exp(1j * freqs) * attention)[:, None, :]
        return np.stack([z.real, z.imag], -1).reshape(x.shape)
    raise AssertionError(style)


def deepseek_v3_order(d: int) -> np.ndarray:
    """DeepSeek-V3's output order: element j of the HF output is element order[j] of an in-place gptj
    rotation (evens, then odds). q and k share it, so q . k and attention are unchanged."""
    return np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])


def positions_for(original: int) -> np.ndarray:
    return np.array([0, 1, 100, original - 1, original, 4 * original + 3], np.int64)


def rope_op(prog):
    return prog["rope"]


# ---------------------------------------------------------------------------------------------
# structure
# ---------------------------------------------------------------------------------------------

def _dims(t: ir.Tensor):
    return {d.role: d.size for d in t.dims if d.role is not None}, [d.role for d in t.dims]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_rope_operator_has_the_models_shapes(name):
    hq, hk, d, r, dt, _, _, style = MODELS[name]
    prog, text, _ = imported(name)
    op = rope_op(prog)
    assert op.kind == "rope"
    assert op.inputs == ("q", "k", "positions"), text
    assert op.outputs == ("q_rot", "k_rot"), text
    q, k, p = op.ir.inputs
    R = ir.Role
    for t, heads in ((q, hq), (k, hk)):
        sizes, order = _dims(t)
        assert order == [R.TOKENS, R.HEADS, R.HEAD_DIM], (t.name, text)
        assert sizes[R.HEADS] == heads, (t.name, text)
        assert sizes[R.HEAD_DIM] == d, (t.name, text)
        assert isinstance(sizes[R.TOKENS], str), (t.name, text)     # a symbol, bound at run time
        assert t.dtype.name == dt, (t.name, text)
    assert _dims(q)[0][R.TOKENS] == _dims(k)[0][R.TOKENS]
    assert p.dtype.name == "i64" and [x.size for x in p.dims] == [_dims(q)[0][R.TOKENS]], text
    assert op.ir.rotary_dim == r, text
    assert op.ir.pairing.kind is PAIRING[style], text
    assert op.ir.positions.kind is ir.PositionKind.IDS and op.ir.positions.ids == "positions"
    assert isinstance(op.ir.angles, ir.ComputedAngles), text
    # bf16/f16: HF casts cos/sin to the activation dtype and rounds every product; f32 computes in f32
    assert op.ir.compute is (ir.Compute.F32 if dt == "f32" else ir.Compute.STORAGE), text


@pytest.mark.parametrize("name", sorted(MODELS))
def test_rmsnorm_operator_iff_the_model_uses_rmsnorm(name):
    *_, dt, hidden, eps, _ = MODELS[name]
    prog, text, _ = imported(name)
    names = [op.name for op in prog]
    if eps is None:
        assert names == ["rope"], text
        return
    # Gemma 3 adds its sliding-window layers' rope_local; Qwen3 and Gemma 3 their fused q/k norm + rope
    extra = {"gemma-3-4b": ["qk_norm_rope", "qk_norm_rope_local", "rope_local"], "qwen3-8b": ["qk_norm_rope"],
             "olmo-2-1124-7b": ["k_norm", "q_norm", "qk_norm_rope"]}
    assert sorted(names) == sorted(["rmsnorm", "rope"] + extra.get(name, [])), text
    op = prog["rmsnorm"]
    assert op.kind == "rmsnorm"
    assert op.inputs == ("x", "weight") and op.outputs == ("y",), text
    x, w = op.ir.inputs
    assert x.dtype.name == dt and w.dtype.name == dt, text
    assert x.dims[-1].size == hidden and isinstance(x.dims[0].size, str) and len(x.dims) == 2, text
    assert [d.size for d in w.dims] == [hidden], text
    assert op.ir.axis == 1
    assert op.ir.epsilon == eps, text


# ---------------------------------------------------------------------------------------------
# numbers: float32 specs against transformers' path in float64
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MODELS))
def test_planned_frequencies_are_transformers(name):
    cfg = load(name)
    base, dim, rp, original = hf_params(cfg)
    inv, attention = hf_inv_freq(base, dim, rp, original)
    op = rope_op(imported(name, f32=True)[0])
    np.testing.assert_allclose(np.array(op.plan.angles.inv_freq), inv, rtol=1e-12, atol=0)
    assert math.isclose(op.plan.angles.magnitude, attention, rel_tol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_rotation_matches_transformers(name, backend):
    hq, hk, d, _, _, _, _, style = MODELS[name]
    cfg = load(name)
    base, dim, rp, original = hf_params(cfg)
    inv, attention = hf_inv_freq(base, dim, rp, original)
    op = rope_op(imported(name, f32=True)[0])
    pos = positions_for(original)
    rng = np.random.default_rng(len(name))
    q = rng.standard_normal((pos.size, hq, d)).astype(np.float32)
    k = rng.standard_normal((pos.size, hk, d)).astype(np.float32)
    q_rot, k_rot = op.run(q, k, pos, backend=backend)
    for x, got in ((q, q_rot), (k, k_rot)):
        assert got.dtype == np.float32 and got.shape == x.shape
        got = got.astype(np.float64)
        if style == "deepseek_v3":
            got = got[..., deepseek_v3_order(d)]
        want = hf_rotate(x, pos, inv, attention, style)
        np.testing.assert_allclose(got, want, atol=5e-6 * float(np.abs(x).max()), rtol=0)
    if style == "deepseek_v3":      # the reordering is attention-neutral: scores match HF's as they are
        got_s = np.einsum("thd,tgd->thg", q_rot.astype(np.float64), k_rot.astype(np.float64))
        want_s = np.einsum("thd,tgd->thg", hf_rotate(q, pos, inv, attention, style),
                           hf_rotate(k, pos, inv, attention, style))
        np.testing.assert_allclose(got_s, want_s, atol=1e-4 * float(np.abs(want_s).max()), rtol=0)


@pytest.mark.parametrize("name", sorted(n for n, m in MODELS.items() if m[4] != "f32"))
def test_half_precision_spec_stays_within_storage_ulps(name):
    """The model's own dtype, compute = storage: every product rounded like HF's bf16/f16 path. Against
    float64 with cos/sin rounded to the storage type first: each element within 4 ulps of max|x|."""
    hq, hk, d, _, dt, _, _, style = MODELS[name]
    base, dim, rp, original = hf_params(load(name))
    inv, attention = hf_inv_freq(base, dim, rp, original)
    op = rope_op(imported(name)[0])
    np_dt = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}[dt]
    ulp = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10}[dt]
    pos = positions_for(original)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((pos.size, hq, d)).astype(np_dt)
    k = rng.standard_normal((pos.size, hk, d)).astype(np_dt)
    for backend in ("numpy", "c"):
        q_rot, k_rot = op.run(q, k, pos, backend=backend)
        for x, got in ((q, q_rot), (k, k_rot)):
            assert got.dtype == np_dt
            got = got.astype(np.float64)
            if style == "deepseek_v3":
                got = got[..., deepseek_v3_order(d)]
            want = hf_rotate(x.astype(np.float64), pos, inv, attention, style)
            np.testing.assert_allclose(got, want, atol=4 * ulp * float(np.abs(x.astype(np.float64)).max()), rtol=0)


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("name", sorted(n for n, m in MODELS.items() if m[6] is not None))
def test_rmsnorm_matches_transformers(name, backend):
    """LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * weight; Gemma's norm multiplies by (1 + weight), which
    the spec models (weight_offset = 1)."""
    *_, hidden, eps, _ = MODELS[name]
    op = imported(name, f32=True)[0]["rmsnorm"]
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, hidden)).astype(np.float32)
    w = rng.standard_normal(hidden).astype(np.float32)
    xd = x.astype(np.float64)
    normed = xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + eps)
    want = normed * (1.0 + w.astype(np.float64) if name in GEMMA else w)
    got = op.run(x, w, backend=backend)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-6, atol=2e-6 * float(np.abs(want).max()))


# ---------------------------------------------------------------------------------------------
# errors and warnings
# ---------------------------------------------------------------------------------------------

def test_unknown_rope_type_lists_the_supported_ones():
    cfg = load("llama-3.1-8b")
    cfg["rope_scaling"] = dict(cfg["rope_scaling"], rope_type="su_scaled")
    with pytest.raises(ValueError) as e:
        spec_from_config(cfg, "x")
    msg = str(e.value)
    assert "su_scaled" in msg
    for word in ("default", "linear", "llama3", "yarn", "longrope", "dynamic"):
        assert word in msg, msg


# LongRoPE and dynamic NTK configs import: tests/test_import_hf_length.py
@pytest.mark.parametrize("name,edit,pattern", [
    ("llama-2-7b", {"rope_scaling": {"rope_type": "proportional", "factor": 2.0}}, r"proportional"),
])
def test_unsupported_features_are_named(name, edit, pattern):
    cfg = load(name)
    cfg.update(edit or {})
    with pytest.raises(ValueError, match=re.compile(pattern, re.I)):
        spec_from_config(cfg, "x")


@pytest.mark.parametrize("name,edit,sections,interleaved", [
    ("qwen2.5-vl-7b-instruct", None, [16, 24, 24], False),
    # M-RoPE under a rope_type it shares with plain RoPE (transformers maps mrope -> default)
    ("qwen2.5-7b-instruct", {"rope_scaling": {"rope_type": "default", "mrope_section": [16, 24, 24]}},
     [16, 24, 24], False),
    # Qwen3-VL: interleaved sections
    ("qwen2.5-7b-instruct", {"rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20],
                                              "mrope_interleaved": True}}, [24, 20, 20], True),
])
def test_mrope_configs_import_as_mrope_positions(name, edit, sections, interleaved):
    cfg = load(name)
    cfg.update(edit or {})
    text, _ = spec_from_config(cfg, "x")
    rope = ropegen.compile(text)["rope"]
    assert rope.ir.positions.kind is ir.PositionKind.MROPE
    assert list(rope.ir.positions.sections) == sections and rope.ir.positions.interleaved is interleaved
    assert [a.size for a in rope.ir.tensor("positions").axes] == [3, "T"]


def test_gemma3_local_layers_get_their_own_rope():
    prog, _, _ = imported("gemma-3-4b")
    cfg = load("gemma-3-4b")["text_config"]
    local, glob = prog["rope_local"].ir, prog["rope"].ir
    assert local.angles.base == cfg["rope_local_base_freq"] and type(local.angles.scaling).__name__ == "NoScaling"
    assert glob.angles.base == cfg["rope_theta"] and type(glob.angles.scaling).__name__ == "LinearScaling"
    assert [t.name for t in local.inputs] == ["q", "k", "positions"]


@pytest.mark.parametrize("name", GEMMA)
def test_gemma_rmsnorm_scales_by_one_plus_weight(name):
    op = imported(name)[0]["rmsnorm"].ir
    assert (op.weight_offset, op.cast) == (1.0, "after_scale")


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3.1-8b", "mistral-7b-v0.3", "qwen3-8b"])
def test_fully_modelled_configs_give_no_warnings(name):
    assert imported(name)[2] == ()


@pytest.mark.parametrize("field", ["hidden_size", "num_attention_heads"])
def test_a_missing_field_is_named(field):
    cfg = load("qwen2.5-7b-instruct")          # no head_dim: hidden_size / num_attention_heads is needed
    del cfg[field]
    # a KeyError is the API's answer (import_config turns it into the command line's one-line error)
    with pytest.raises((KeyError, ValueError), match=field):
        spec_from_config(cfg, "x")


@pytest.mark.parametrize("edit", [{"alibi": True}, {"model_type": "bloom", "architectures": ["BloomForCausalLM"]}])
def test_a_model_without_rope_is_refused(edit):
    """Falcon-RW (alibi = true) and BLOOM position attention with ALiBi, not RoPE: writing a `rope` for
    them would be silently wrong."""
    cfg = load("falcon-7b")
    cfg.update(edit)
    with pytest.raises(ValueError, match=re.compile(r"alibi|bloom|rope", re.I)):
        spec_from_config(cfg, "x")


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------

def ropegen_cli(*args):
    return subprocess.run([sys.executable, "-m", "ropegen", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_cli_writes_one_spec_that_checks(tmp_path):
    out = tmp_path / "out"
    r = ropegen_cli("import-hf", str(CONFIGS / "llama-3.1-8b.json"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    specs = sorted(out.glob("*.rope"))
    assert len(specs) == 1, list(out.iterdir())
    prog = ropegen.compile(specs[0])
    assert sorted(op.name for op in prog) == ["rmsnorm", "rope"]
    r = ropegen_cli("check", str(specs[0]), "--backend", "numpy")
    assert r.returncode == 0, r.stdout + r.stderr


def _one_line_error(r):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_cli_bad_path_bad_json_unsupported(tmp_path):
    line = _one_line_error(ropegen_cli("import-hf", str(tmp_path / "missing.json"), "-o", str(tmp_path / "o")))
    assert "missing.json" in line
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "llama", ')
    assert "bad.json" in _one_line_error(ropegen_cli("import-hf", str(bad), "-o", str(tmp_path / "o")))
    cfg = load("qwen3-8b")
    del cfg["hidden_size"]
    nohidden = tmp_path / "nohidden.json"
    nohidden.write_text(json.dumps(cfg))
    assert "hidden_size" in _one_line_error(ropegen_cli("import-hf", str(nohidden), "-o", str(tmp_path / "o")))
    arr = tmp_path / "array.json"
    arr.write_text("[1, 2]")
    _one_line_error(ropegen_cli("import-hf", str(arr), "-o", str(tmp_path / "o")))
    cfg = load("llama-2-7b")
    cfg["rope_scaling"] = {"rope_type": "proportional", "factor": 2.0}
    unsupported = tmp_path / "proportional.json"
    unsupported.write_text(json.dumps(cfg))
    line = _one_line_error(ropegen_cli("import-hf", str(unsupported), "-o", str(tmp_path / "o")))
    assert "proportional" in line, line
    assert not list(tmp_path.glob("o/*.rope"))


# ---------------------------------------------------------------------------------------------
# live: transformers itself (torch and transformers installed)
# ---------------------------------------------------------------------------------------------

LIVE = {  # model_type -> (modeling module, rotary class, apply function, style)
    "llama": ("llama", "LlamaRotaryEmbedding", "apply_rotary_pos_emb", "neox"),
    "mistral": ("mistral", "MistralRotaryEmbedding", "apply_rotary_pos_emb", "neox"),
    "qwen2": ("qwen2", "Qwen2RotaryEmbedding", "apply_rotary_pos_emb", "neox"),
    "qwen3": ("qwen3", "Qwen3RotaryEmbedding", "apply_rotary_pos_emb", "neox"),
    "olmo2": ("olmo2", "Olmo2RotaryEmbedding", "apply_rotary_pos_emb", "neox"),
    "gemma2": ("gemma2", "Gemma2RotaryEmbedding", "apply_rotary_pos_emb", "neox"),
    "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding", "apply_rotary_pos_emb", "neox"),
    "gpt_neox": ("gpt_neox", "GPTNeoXRotaryEmbedding", "apply_rotary_pos_emb", "neox"),
    "falcon": ("falcon", "FalconRotaryEmbedding", "apply_rotary_pos_emb", "neox"),
    "gpt_oss": ("gpt_oss", "GptOssRotaryEmbedding", "apply_rotary_pos_emb", "gpt_oss"),
    "glm": ("glm", "GlmRotaryEmbedding", "apply_rotary_pos_emb", "glm"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3RotaryEmbedding", "apply_rotary_pos_emb_interleave", "deepseek_v3"),
    "deepseek_v2": ("deepseek_v2", "DeepseekV2RotaryEmbedding", "apply_rotary_emb", "deepseek_v2"),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_live_transformers(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import importlib
    cfg = load(name)
    cfg = cfg.get("text_config", cfg)
    module, rotary, apply, style = LIVE[cfg["model_type"]]
    m = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    conf_cls = transformers.CONFIG_MAPPING[cfg["model_type"]]
    conf = conf_cls(**{k: v for k, v in cfg.items() if k not in ("architectures", "quantization_config")})
    emb = getattr(m, rotary)(config=conf)
    hq, hk, d, *_ = MODELS[name]
    # transformers forms angles in float32 (pos * inv_freq rounded): its error grows ~1e-7 rad per
    # position unit, so the live comparison stays at small positions with a bound that grows with them
    pos = np.array([0, 1, 7, 100, 1000], np.int64)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((pos.size, hq, d)).astype(np.float32)
    k = rng.standard_normal((pos.size, hk, d)).astype(np.float32)
    qt = torch.from_numpy(q).transpose(0, 1)[None]            # [1, H, T, D]
    kt = torch.from_numpy(k).transpose(0, 1)[None]
    pt = torch.from_numpy(pos)[None]
    # Gemma 3: the global layers' table (the spec's `rope`; `rope_local` has the sliding layers')
    rot = emb(qt, pt, "full_attention") if cfg["model_type"] == "gemma3_text" else emb(qt, pt)
    rot = rot if isinstance(rot, tuple) else (rot,)            # DeepSeek-V2: one complex freqs_cis
    want_q, want_k = getattr(m, apply)(qt, kt, *rot)
    op = rope_op(imported(name, f32=True)[0])
    got_q, got_k = op.run(q, k, pos, backend="numpy")
    for got, want, x in ((got_q, want_q, q), (got_k, want_k, k)):
        want = want[0].transpose(0, 1).double().numpy()
        got = got.astype(np.float64)
        if style == "deepseek_v3":
            got = got[..., deepseek_v3_order(d)]
        np.testing.assert_allclose(got, want, atol=(5e-6 + 2e-7 * pos.max()) * float(np.abs(x).max()), rtol=0)
