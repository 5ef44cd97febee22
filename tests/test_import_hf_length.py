"""`ropegen import-hf` for the length-dependent scalings: LongRoPE (Phi-3.5-mini, Phi-4-mini with
partial_rotary_factor 0.75; rope_type "longrope", the old "su", Phi3Config's "yarn") and Hugging Face's
"dynamic" NTK (Llama-2 with rope_scaling {"type": "dynamic", "factor": 2.0}).

* Structure: shapes, rotary_dim, the scaling record with the config's numbers read back exactly.
* Numbers: the imported spec (float32 and the model's bf16/f16) against a float64 transcription of
  transformers' path: `_compute_longrope_parameters` / `_compute_dynamic_ntk_parameters`, the
  `dynamic_rope_update` choice (seq_len = max(position_ids) + 1, one choice for the whole call), the
  rotary embedding's cos/sin * attention_scaling and apply_rotary_pos_emb with the unrotated tail.
  A call whose positions all stay within original_max_position_embeddings, one that goes beyond it
  (every token of it takes the long set / the grown base, the early positions included), and the
  boundary max(position) + 1 = L0 against L0 + 1. Bounds as in test_import_hf.py.
* Live: transformers' own Phi3RotaryEmbedding / LlamaRotaryEmbedding (skipped without torch).
"""
from __future__ import annotations

import copy
import functools
import math
import re

import ml_dtypes
import numpy as np
import pytest
from test_import_hf import force_f32, hf_rotate, load, spec_from_config

import ropegen
from ropegen import ir

DYNAMIC = {"rope_scaling": {"type": "dynamic", "factor": 2.0}}
# name -> (config file, edit, q heads, k heads, head_dim, rotary_dim, dtype, L0), written from the models' cards
CASES = {
    "phi-3.5-mini-instruct": ("phi-3.5-mini-instruct", None, 32, 32, 96, 96, "bf16", 4096),
    "phi-4-mini-instruct": ("phi-4-mini-instruct", None, 24, 8, 128, 96, "bf16", 4096),
    "llama-2-7b-dynamic": ("llama-2-7b", DYNAMIC, 32, 32, 128, 128, "f16", 4096),
}


def config(name: str) -> dict:
    file, edit, *_ = CASES[name]
    cfg = load(file)
    cfg.update(copy.deepcopy(edit or {}))
    return cfg


@functools.lru_cache(maxsize=None)
def imported(name: str, f32: bool = False):
    cfg = config(name)
    text, warns = spec_from_config(force_f32(cfg) if f32 else cfg, "x")
    return ropegen.compile(text)["rope"], text, tuple(warns)


def hf_inv_freq(cfg: dict, seq_len: int) -> tuple[np.ndarray, float]:
    """transformers' inv_freq and attention_scaling for a call whose max(position_ids) + 1 is seq_len, in
    float64. Phi-3's original_max_position_embeddings is the top-level field (standardize_rope_params gives it
    priority); the long set is `long_inv_freq` when seq_len > original, else `original_inv_freq` (short)."""
    rp = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters"))
    kind = rp.get("rope_type", rp.get("type"))
    base = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    dim = int(head_dim * cfg.get("partial_rotary_factor", 1.0))
    shape = np.arange(0, dim, 2, dtype=np.float64) / dim
    if kind == "dynamic":
        mpe = cfg["max_position_embeddings"]
        L, factor = max(seq_len, mpe), rp["factor"]
        base = base * ((factor * L / mpe) - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / base ** shape, 1.0
    assert kind in ("longrope", "su"), kind
    original = cfg.get("original_max_position_embeddings", rp.get("original_max_position_embeddings"))
    factor = rp.get("factor") or cfg["max_position_embeddings"] / original
    attention = rp.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = np.array(rp["long_factor" if seq_len > original else "short_factor"], np.float64)
    return 1.0 / (ext * base ** shape), attention


def calls(L0: int) -> dict:
    return {"within": np.array([0, 1, 100, L0 - 1], np.int64),          # max + 1 = L0: short set / base
            "beyond": np.array([0, 1, 100, L0 - 1, L0, 4 * L0 + 3], np.int64),
            "just_beyond": np.array([3, 0, L0], np.int64)}               # max + 1 = L0 + 1, unsorted


# ---------------------------------------------------------------------------------------------
# structure
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_rope_operator_has_the_models_shapes(name):
    _, _, hq, hk, d, r, dt, _ = CASES[name]
    op, text, _ = imported(name)
    q, k, p = op.ir.inputs
    assert [t.name for t in (q, k, p)] == ["q", "k", "positions"] and op.outputs == ("q_rot", "k_rot"), text
    assert [x.size for x in q.dims][1:] == [hq, d] and [x.size for x in k.dims][1:] == [hk, d], text
    assert q.dtype.name == dt and k.dtype.name == dt and p.dtype.name == "i64", text
    assert op.ir.rotary_dim == r and op.ir.pairing.kind is ir.PairKind.NEOX, text


@pytest.mark.parametrize("name", ["phi-3.5-mini-instruct", "phi-4-mini-instruct"])
def test_longrope_record_holds_the_configs_numbers(name):
    cfg = config(name)
    s = imported(name)[0].ir.angles.scaling
    assert type(s).__name__ == "LongRopeScaling"
    # every factor reads back as the config's float64, bit for bit
    assert s.short_factor == tuple(float(x) for x in cfg["rope_scaling"]["short_factor"])
    assert s.long_factor == tuple(float(x) for x in cfg["rope_scaling"]["long_factor"])
    assert len(s.short_factor) == CASES[name][5] // 2
    # 131072 / 4096: the config has no factor, transformers takes the ratio of the context lengths
    assert s.original_max_positions == 4096 and s.factor == 32.0 and s.attention_factor is None
    assert math.isclose(imported(name)[0].plan.angles.magnitude, math.sqrt(1 + math.log(32) / math.log(4096)),
                        rel_tol=1e-15)
    assert imported(name)[2] == ()


def test_dynamic_record_divides_by_max_position_embeddings():
    op, text, warns = imported("llama-2-7b-dynamic")
    s = op.ir.angles.scaling
    assert type(s).__name__ == "DynamicNtkScaling" and s.factor == 2.0 and s.original_max_positions == 4096, text
    assert any(re.search(r"longest.*recomputes", w) for w in warns), warns


def test_dynamic_ignores_original_max_position_embeddings_as_transformers_does():
    cfg = config("llama-2-7b-dynamic")
    cfg["max_position_embeddings"] = 8192
    cfg["rope_scaling"]["original_max_position_embeddings"] = 4096
    s = ropegen.compile(spec_from_config(cfg, "x")[0])["rope"].ir.angles.scaling
    assert s.original_max_positions == 8192


# ---------------------------------------------------------------------------------------------
# variants of the config
# ---------------------------------------------------------------------------------------------

def _scaling_of(cfg):
    text, warns = spec_from_config(cfg, "x")
    return ropegen.compile(text)["rope"].ir.angles.scaling, warns


@pytest.mark.parametrize("alias", ["su", "longrope"])
@pytest.mark.parametrize("key", ["type", "rope_type"])
def test_su_and_longrope_spellings(alias, key):
    cfg = config("phi-3.5-mini-instruct")
    rp = cfg["rope_scaling"]
    del rp["type"]
    rp[key] = alias
    assert _scaling_of(cfg)[0] == imported("phi-3.5-mini-instruct")[0].ir.angles.scaling


def test_phi3_yarn_is_longrope_as_phi3config_renames_it():
    cfg = config("phi-3.5-mini-instruct")
    cfg["rope_scaling"]["type"] = "yarn"
    assert type(_scaling_of(cfg)[0]).__name__ == "LongRopeScaling"


def test_transformers5_rope_parameters_and_explicit_factors():
    """rope_parameters with original_max_position_embeddings inside (no top-level field, not phi3), an
    explicit factor and attention_factor passed through, partial_rotary_factor inside rope_parameters."""
    cfg = config("phi-4-mini-instruct")
    rp = cfg.pop("rope_scaling")
    rp.update(rope_type=rp.pop("type"), rope_theta=cfg.pop("rope_theta"), original_max_position_embeddings=2048,
              factor=3.3, attention_factor=1.25, partial_rotary_factor=cfg.pop("partial_rotary_factor"))
    cfg.update(rope_parameters=rp, model_type="llama")
    del cfg["original_max_position_embeddings"]
    text, warns = spec_from_config(cfg, "x")
    op = ropegen.compile(text)["rope"]
    s = op.ir.angles.scaling
    assert (s.original_max_positions, s.factor, s.attention_factor) == (2048, 3.3, 1.25), text
    assert op.ir.rotary_dim == 96 and op.plan.angles.magnitude == 1.25 and warns == [], (text, warns)


def test_a_ratio_factor_reads_back_exactly():
    cfg = config("phi-3.5-mini-instruct")
    cfg["original_max_position_embeddings"] = 3000
    assert _scaling_of(cfg)[0].factor == 131072 / 3000


def test_the_top_level_original_wins_with_a_warning():
    cfg = config("phi-3.5-mini-instruct")
    cfg["rope_scaling"]["original_max_position_embeddings"] = 8192
    s, warns = _scaling_of(cfg)
    assert s.original_max_positions == 4096
    assert any("8192" in w and "4096" in w for w in warns), warns


def test_a_llama_longrope_without_top_level_original_takes_the_rope_parameters():
    cfg = load("llama-2-7b")
    cfg["rope_scaling"] = {"rope_type": "longrope", "long_factor": [2.0] * 64, "short_factor": [1.0] * 64,
                           "original_max_position_embeddings": 2048}
    s, warns = _scaling_of(cfg)
    assert (s.original_max_positions, s.factor) == (2048, 2.0) and warns == []


@pytest.mark.parametrize("partial,entries", [(None, 48), (0.75, 47), (0.75, 64)])
def test_a_factor_list_of_the_wrong_length_is_named(partial, entries):
    """Phi-4-mini without its partial_rotary_factor rotates 128 dims: its 48 factors are not 64."""
    cfg = config("phi-4-mini-instruct")
    if partial is None:
        del cfg["partial_rotary_factor"]
    cfg["rope_scaling"]["long_factor"] = [1.5] * entries
    want = 64 if partial is None else 48
    with pytest.raises(ValueError, match=rf"(short|long)_factor.*{entries if partial else 48} entries.*= {want}"):
        spec_from_config(cfg, "x")


def test_a_factor_list_of_non_numbers_is_refused():
    cfg = config("phi-3.5-mini-instruct")
    cfg["rope_scaling"]["short_factor"][3] = "1.0"
    with pytest.raises(ValueError, match="short_factor"):
        spec_from_config(cfg, "x")


# ---------------------------------------------------------------------------------------------
# numbers
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_planned_frequencies_are_the_short_set(name):
    inv, attention = hf_inv_freq(config(name), CASES[name][7])
    op = imported(name, f32=True)[0]
    np.testing.assert_allclose(np.array(op.plan.angles.inv_freq), inv, rtol=1e-12, atol=0)
    assert math.isclose(op.plan.angles.magnitude, attention, rel_tol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("call", ["within", "beyond", "just_beyond"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rotation_matches_transformers(name, call, backend):
    _, _, hq, hk, d, _, _, L0 = CASES[name]
    cfg = config(name)
    pos = calls(L0)[call]
    inv, attention = hf_inv_freq(cfg, int(pos.max()) + 1)
    other, _ = hf_inv_freq(cfg, L0 if call != "within" else 4 * L0)      # the set this call must NOT use
    assert np.abs(pos.max() * (other - inv)).max() > 1e-2      # radians: far above the test's bound
    op = imported(name, f32=True)[0]
    rng = np.random.default_rng(len(name) + len(call))
    q = rng.standard_normal((pos.size, hq, d)).astype(np.float32)
    k = rng.standard_normal((pos.size, hk, d)).astype(np.float32)
    for x, got in zip((q, k), op.run(q, k, pos, backend=backend)):
        assert got.dtype == np.float32 and got.shape == x.shape
        got = got.astype(np.float64)
        np.testing.assert_allclose(got, hf_rotate(x, pos, inv, attention, "neox"),
                                   atol=5e-6 * float(np.abs(x).max()), rtol=0)
        if call == "beyond":   # positions 1 and 100 of a long call: the long set, not what they get alone
            wrong = hf_rotate(x, pos, other, attention, "neox")[1:3]
            assert np.abs(got[1:3] - wrong).max() > 1e-3 * float(np.abs(x).max())


@pytest.mark.parametrize("name", sorted(CASES))
def test_half_precision_spec_stays_within_storage_ulps(name):
    _, _, hq, hk, d, _, dt, L0 = CASES[name]
    np_dt, ulp = {"bf16": (ml_dtypes.bfloat16, 2.0 ** -7), "f16": (np.float16, 2.0 ** -10)}[dt]
    op = imported(name)[0]
    rng = np.random.default_rng(1)
    for pos in calls(L0).values():
        inv, attention = hf_inv_freq(config(name), int(pos.max()) + 1)
        q = rng.standard_normal((pos.size, hq, d)).astype(np_dt)
        k = rng.standard_normal((pos.size, hk, d)).astype(np_dt)
        for backend in ("numpy", "c"):
            for x, got in zip((q, k), op.run(q, k, pos, backend=backend)):
                x = x.astype(np.float64)
                np.testing.assert_allclose(got.astype(np.float64), hf_rotate(x, pos, inv, attention, "neox"),
                                           atol=4 * ulp * float(np.abs(x).max()), rtol=0)


# ---------------------------------------------------------------------------------------------
# live: transformers itself
# ---------------------------------------------------------------------------------------------

LIVE = {"phi3": ("phi3", "Phi3RotaryEmbedding"), "llama": ("llama", "LlamaRotaryEmbedding")}


def _live_rotary(cfg: dict):
    import importlib

    import transformers
    module, cls = LIVE[cfg["model_type"]]
    m = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    conf = transformers.CONFIG_MAPPING[cfg["model_type"]](**{k: v for k, v in cfg.items() if k != "architectures"})
    return getattr(m, cls)(config=conf), m.apply_rotary_pos_emb


def _live_run(torch, emb, apply, q, k, pos):
    qt, kt = (torch.from_numpy(x).transpose(0, 1)[None] for x in (q, k))      # [1, H, T, D]
    cos, sin = emb(qt, torch.from_numpy(pos)[None])
    return [w[0].transpose(0, 1).double().numpy() for w in apply(qt, kt, cos, sin)]


@pytest.mark.parametrize("call", ["within", "beyond"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_live_transformers(name, call):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    _, _, hq, hk, d, _, _, L0 = CASES[name]
    cfg = config(name)
    # transformers forms angles in float32: the bound grows with the position (as in test_import_hf.py);
    # 2 L0 + 7 stays a call beyond L0 while keeping that bound small
    pos = np.array([0, 1, 7, 100, 1000] + ([L0 - 1] if call == "within" else [L0, 2 * L0 + 7]), np.int64)
    emb, apply = _live_rotary(cfg)            # a fresh module: no length cached from an earlier call
    rng = np.random.default_rng(5)
    q = rng.standard_normal((pos.size, hq, d)).astype(np.float32)
    k = rng.standard_normal((pos.size, hk, d)).astype(np.float32)
    want = _live_run(torch, emb, apply, q, k, pos)
    got = imported(name, f32=True)[0].run(q, k, pos, backend="numpy")
    for g, w, x in zip(got, want, (q, k)):
        np.testing.assert_allclose(g.astype(np.float64), w, atol=(5e-6 + 2e-7 * pos.max()) * float(np.abs(x).max()),
                                   rtol=0)


def test_live_dynamic_cache_is_what_the_warning_says():
    """transformers keeps the base of the longest call seen: after a call of length 3 L0, a call of length
    1.5 L0 still rotates with the 3 L0 base, where ropegen recomputes it (the import warns about this)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    _, _, hq, hk, d, _, _, L0 = CASES["llama-2-7b-dynamic"]
    emb, apply = _live_rotary(config("llama-2-7b-dynamic"))
    rng = np.random.default_rng(6)
    long = np.array([0, 3 * L0 - 1], np.int64)
    q = rng.standard_normal((2, hq, d)).astype(np.float32)
    k = rng.standard_normal((2, hk, d)).astype(np.float32)
    _live_run(torch, emb, apply, q, k, long)
    pos = np.array([0, 1, 7, 100, 1000, 3 * L0 // 2 - 1], np.int64)
    q = rng.standard_normal((pos.size, hq, d)).astype(np.float32)
    k = rng.standard_normal((pos.size, hk, d)).astype(np.float32)
    hf_q = _live_run(torch, emb, apply, q, k, pos)[0]
    op = imported("llama-2-7b-dynamic", f32=True)[0]
    ours = op.run(q, k, pos, backend="numpy")[0].astype(np.float64)
    # ropegen with the 3 L0 length in the same call: two more tokens (zeros) at the long call's positions
    pad = [np.concatenate([x, np.zeros((2,) + x.shape[1:], np.float32)]) for x in (q, k)]
    cached = op.run(*pad, np.concatenate([pos, long]), backend="numpy")[0][: pos.size].astype(np.float64)
    bound = (5e-6 + 2e-7 * 3 * L0) * float(np.abs(q).max())
    np.testing.assert_allclose(hf_q, cached, atol=bound, rtol=0)
    assert np.abs(hf_q - ours).max() > 10 * bound
