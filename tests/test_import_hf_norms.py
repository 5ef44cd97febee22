"""`ropegen import-hf`'s norm operators against the model's own PyTorch classes.

* Structure: `rmsnorm` (x, weight -> y) follows the model's RMSNorm class (Gemma's (1 + w) with the cast
  after the weight; OLMo 2's and gpt-oss's `(w * x).to(dtype)`; Llama's `w * x.to(dtype)` in the model
  dtype); Qwen3 and Gemma 3 get `qk_norm_rope` (q, k, positions, q_weight, k_weight -> q_rot, k_rot) with the
  `rope` operator's rotation (Gemma 3 also `qk_norm_rope_local` with `rope_local`'s); OLMo 2 gets per-token
  `q_norm` / `k_norm` over all heads and a warning instead of a fused operator.
* Numbers, backends numpy and c, against transformers' classes: the committed goldens
  (tests/data/hf_norms/goldens.npz, made by make_goldens.py beside it with transformers 5.23 / torch
  2.13: the attention's own q_norm / k_norm, its rotary class and apply_rotary_pos_emb, the RMSNorm
  classes), and the same cases live when torch and transformers import.
  Bounds: f32 outputs within 1e-5 of max|y| (float32 statistics both sides; sums in another order).
  bf16 outputs within 2 bf16 ulps of max|y| (2 * 2^-7 * max|y|): HF rounds cos/sin to bf16 from float32
  angles (pos * inv_freq rounded to float32) while the spec rounds them from exact angles, so a cos/sin
  rounding may differ by one ulp; the norm's own rounding steps are the same as the model's. The RMSNorm
  cases hold to 1 ulp of the element. And at most 1% of the bf16 elements may differ: the goldens
  match bit for bit but for 2-3 of Gemma 3's local-layer elements (the cos/sin rounding above), while the
  wrong cast order moves about a quarter of them by one ulp, which the ulp bounds alone would let pass.
"""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen import ir
from ropegen.importers.hf import spec_from_config

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "hf_configs"
GOLDENS = DATA / "hf_norms" / "goldens.npz"


def _load_maker():
    spec = importlib.util.spec_from_file_location("hf_norms_make_goldens", DATA / "hf_norms" / "make_goldens.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MAKER = _load_maker()


def load(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def imported(cfg: dict):
    text, warns = spec_from_config(cfg, "m")
    return ropegen.compile(text), text, warns


# ---------------------------------------------------------------------------------------------
# structure
# ---------------------------------------------------------------------------------------------

# model -> (operator names, rmsnorm (weight_offset, cast), q/k norm form), written from each model's
# modeling file, not from the importer
MODELS = {
    "qwen3-8b":        (["qk_norm_rope", "rmsnorm", "rope"], (0.0, "before_scale"), "head"),
    "gemma-3-4b":      (["qk_norm_rope", "qk_norm_rope_local", "rmsnorm", "rope", "rope_local"],
                        (1.0, "after_scale"), "head"),
    "gemma-2-9b":      (["rmsnorm", "rope"], (1.0, "after_scale"), None),
    "olmo-2-1124-7b":  (["k_norm", "q_norm", "qk_norm_rope", "rmsnorm", "rope"], (0.0, "after_scale"), "all_heads"),
    "gpt-oss-20b":     (["rmsnorm", "rope"], (0.0, "after_scale"), None),
    "llama-3.1-8b":    (["rmsnorm", "rope"], (0.0, "before_scale"), None),
    "mistral-7b-v0.3": (["rmsnorm", "rope"], (0.0, "before_scale"), None),
    "deepseek-v3":     (["rmsnorm", "rope"], (0.0, "before_scale"), None),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_operators_and_rmsnorm_class(name):
    names, (offset, cast), _ = MODELS[name]
    cfg = load(name)
    prog, text, _ = imported(cfg)
    assert sorted(op.name for op in prog) == names, text
    norm = prog["rmsnorm"]
    assert norm.inputs == ("x", "weight") and norm.outputs == ("y",), text
    assert (norm.ir.weight_offset, norm.ir.cast) == (offset, cast), text
    assert norm.ir.epsilon == cfg.get("text_config", cfg)["rms_norm_eps"], text
    x, w = norm.ir.x, norm.ir.scale
    # the model's dtype for x, the weight and y (Llama: bf16 weight * x.to(bf16) is bf16)
    assert x.dtype == w.dtype == norm.ir.y, text


def test_llama_bf16_rmsnorm_gives_bf16():
    norm = imported(load("llama-3.1-8b"))[0]["rmsnorm"].ir
    assert (norm.x.dtype.name, norm.scale.dtype.name, norm.y.name) == ("bf16", "bf16", "bf16")


@pytest.mark.parametrize("name,rope_op,fused", [("qwen3-8b", "rope", "qk_norm_rope"),
                                                 ("gemma-3-4b", "rope", "qk_norm_rope"),
                                                 ("gemma-3-4b", "rope_local", "qk_norm_rope_local")])
def test_qk_norm_rope_is_the_rope_with_the_models_head_norm(name, rope_op, fused):
    cfg = load(name)
    text_cfg = cfg.get("text_config", cfg)
    prog, text, _ = imported(cfg)
    rope, op = prog[rope_op].ir, prog[fused]
    assert op.inputs == ("q", "k", "positions", "q_weight", "k_weight"), text
    assert op.outputs == ("q_rot", "k_rot"), text
    q, k, _, qw, kw = op.ir.inputs
    R = ir.Role
    for t, ref in ((q, rope.inputs[0]), (k, rope.inputs[1])):
        assert [d.role for d in t.dims] == [R.TOKENS, R.HEADS, R.HEAD_DIM], text
        assert [d.size for d in t.dims] == [d.size for d in ref.dims] and t.dtype == ref.dtype, text
    head_dim = q.dims[-1].size
    assert head_dim == text_cfg["head_dim"]
    for wt in (qw, kw):
        assert [d.size for d in wt.dims] == [head_dim] and wt.dtype == q.dtype, text
    gemma = text_cfg["model_type"].startswith("gemma")
    for out, src, weight in zip(op.ir.outputs, ("q", "k"), ("q_weight", "k_weight")):
        assert out.source == src and out.rotate and out.norm is not None, text
        assert out.norm == ir.HeadNorm(weight, text_cfg["rms_norm_eps"], 1.0 if gemma else 0.0,
                                       "after_scale" if gemma else "before_scale"), text
    # the rotation is the rope operator's
    for field in ("pairing", "rotary_dim", "positions", "angles", "compute", "numerics", "trig", "direction"):
        assert getattr(op.ir, field) == getattr(rope, field), field


def test_olmo2_norms_over_all_heads_alone_and_fused():
    cfg = load("olmo-2-1124-7b")
    prog, text, warns = imported(cfg)
    fused = prog["qk_norm_rope"]
    assert fused.inputs == ("q", "k", "positions", "q_weight", "k_weight"), text
    for out, weight, heads in zip(fused.ir.outputs, ("q_weight", "k_weight"), (32, 32)):
        assert out.norm == ir.HeadNorm(weight, cfg["rms_norm_eps"], 0.0, "after_scale", over_heads=True), text
        assert [a.size for a in fused.ir.tensor(weight).dims] == [heads, 128]
    for field in ("pairing", "rotary_dim", "positions", "angles", "compute"):
        assert getattr(fused.ir, field) == getattr(prog["rope"].ir, field), field
    assert warns == [], warns
    hq, hk, d = 32, 32, 128
    for name, heads in (("q_norm", hq), ("k_norm", hk)):
        op = prog[name]
        assert op.inputs == ("x", "weight") and op.outputs == ("y",), text
        assert [a.size for a in op.ir.x.dims][1:] == [heads, d] and isinstance(op.ir.x.dims[0].size, str)
        assert [a.size for a in op.ir.scale.dims] == [heads, d]
        assert op.ir.axis == 1 and op.ir.cast == "after_scale" and op.ir.epsilon == cfg["rms_norm_eps"]


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_olmo2_fused_norm_is_the_models_q_norm(backend):
    """At position 0 the rotation is the identity: q_rot is Olmo2Attention's q_norm output (golden)."""
    gold = GOLD["olmo2_q_norm_f32"]
    prog = imported(MAKER.config("olmo2_q_norm_f32"))[0]
    op = prog["qk_norm_rope"]
    T, H, D = gold["x"].shape
    hk = op.ir.tensor("k").role_dim(ir.Role.HEADS).size
    k = np.ones((T, hk, D), np.float32)
    q_rot = op.run(gold["x"], k, np.zeros(T, np.int64), gold["weight"], np.ones((hk, D), np.float32),
                   backend=backend)[0]
    np.testing.assert_allclose(q_rot, gold["y"], rtol=0, atol=1e-5 * float(np.abs(gold["y"]).max()))


@pytest.mark.parametrize("name", ["gemma-2-9b", "gemma-3-4b"])
def test_gemma_rmsnorm_is_modelled_not_warned_about(name):
    _, _, warns = imported(load(name))
    assert not any(re.search(r"1\s*\+\s*w", w) for w in warns), warns


@pytest.mark.parametrize("name", ["qwen3-8b", "gemma-2-9b", "llama-3.1-8b"])
def test_fully_modelled_norms_give_no_warnings(name):
    assert imported(load(name))[2] == []


# ---------------------------------------------------------------------------------------------
# numbers: the model's classes (goldens, and live)
# ---------------------------------------------------------------------------------------------

def _goldens() -> dict[str, dict[str, np.ndarray]]:
    data = np.load(GOLDENS)
    manifest = json.loads(str(data["manifest"]))
    out = {}
    for case, dtypes in manifest["cases"].items():
        out[case] = {n: data[f"{case}/{n}"].view(ml_dtypes.bfloat16) if dt == "bfloat16" else data[f"{case}/{n}"]
                     for n, dt in dtypes.items()}
    return out


GOLD = _goldens()


def test_goldens_cover_every_case():
    assert sorted(GOLD) == sorted(MAKER.CASES)
    assert GOLDENS.stat().st_size < 200_000


def compare(case: str, arrays: dict[str, np.ndarray], backend: str) -> None:
    op = imported(MAKER.config(case))[0][MAKER.CASES[case][3]]
    got = op.run(*(arrays[n] for n in op.inputs), backend=backend)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(op.outputs)
    for name, g in zip(op.outputs, got):
        want = arrays[name]
        assert g.dtype == want.dtype and g.shape == want.shape, (name, g.dtype, want.dtype, g.shape, want.shape)
        g64, w64 = g.astype(np.float64), want.astype(np.float64)
        scale = float(np.abs(w64).max())
        if want.dtype == np.float32:
            bound = 1e-5 * scale
        elif MAKER.CASES[case][4] == "qk_norm_rope":
            bound = 2 * 2.0 ** -7 * scale
        else:       # a norm alone: the same rounding steps as the class, at most one ulp of the element apart
            bound = 2.0 ** -7 * np.abs(w64) + 1e-30
        err, differ = np.abs(g64 - w64), int((g64 != w64).sum())
        assert np.all(err <= bound), (case, name, backend, float(err.max()), differ, g.size)
        # bf16: the other cast order is also within an ulp, but moves about a quarter of the elements
        assert want.dtype == np.float32 or differ <= 0.01 * g.size, (case, name, backend, differ, g.size)


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("case", sorted(MAKER.CASES))
def test_matches_the_models_classes_goldens(case, backend):
    compare(case, GOLD[case], backend)


@pytest.mark.parametrize("case", sorted(MAKER.CASES))
def test_matches_the_models_classes_live(case):
    pytest.importorskip("torch", reason="live comparison needs torch")
    pytest.importorskip("transformers", reason="live comparison needs transformers")
    live = MAKER.run_case(case)
    for backend in ("numpy", "c"):
        compare(case, live, backend)
