"""`ropegen import-gguf`: tiny GGUF files (metadata and the small rope tensors, no weights, written here with
gguf.GGUFWriter) -> one .rope spec holding the RoPE llama.cpp computes for the model.

* The expected ggml_rope_ext arguments are written out per model below from llama.cpp's rules (the rope type of
  llama_model_rope_type, the hparams defaults, llama_context's YaRN magnitude), not derived from the importer.
* The spec's key lines (heads, pairing, rotary_dim, base, scaling, the freq_factors input, the RMSNorm epsilon).
* The plan against llama.cpp's formulas in float64: theta_scale = base^(-2/n_dims), freq_scale, the YaRN ramp
  and corr dims, the magnitude, and the effective inverse frequency of every pair.
* The kernels (numpy and c) against a float64 transcription of ggml_rope_ext on those arguments
  (positions < 256: ggml's float32 theta recurrence stays within ~1e-4 rad of the exact angle there), and
  the c kernel against ggml itself (ggml-python's CPU ggml_rope_ext) with llama.cpp's float32 arguments.
* MROPE (Qwen2-VL): each pair rotated at its section's stream, against float64 and ggml_rope_multi.
* Every problem is a ValueError naming the key, tensor or architecture.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import ropegen

gguf = pytest.importorskip("gguf", reason="import-gguf reads GGUF files with the gguf package (pip install gguf)")
from ropegen.importers.gguf import import_gguf  # noqa: E402


def write_gguf(path, arch: str, kv: dict, tensors: dict | None = None):
    """A GGUF holding general.architecture, the `<arch>.` keys of `kv` (ints as uint32, floats as float32,
    strings, lists as arrays) and the given float32 tensors."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, v in kv.items():
        key = key if key.startswith("general.") else f"{arch}.{key}"
        if isinstance(v, str):
            w.add_string(key, v)
        elif isinstance(v, list):
            w.add_array(key, v)
        elif isinstance(v, int):
            w.add_uint32(key, v)
        else:
            w.add_float32(key, v)
    for name, a in (tensors or {}).items():
        w.add_tensor(name, np.asarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def llama3_rope_freqs(base, dims, factor, low, high, orig):
    """convert_hf_to_gguf.py's LlamaModel rope_freqs: 1, factor, or 1 / ((1 - smooth) / factor + smooth)."""
    out = []
    for c in range(dims // 2):
        wavelen = 2 * math.pi / base ** (2 * c / dims)
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


def mscale(s, k=1.0):
    return 1.0 if s <= 1 else 0.1 * k * math.log(s) + 1.0


LLAMA = {"context_length": 8192, "embedding_length": 256, "attention.head_count": 4, "attention.head_count_kv": 2,
         "rope.freq_base": 500000.0, "rope.dimension_count": 64, "attention.layer_norm_rms_epsilon": 1e-5}
FREQS = llama3_rope_freqs(500000.0, 64, 8.0, 1.0, 4.0, 8192)
PHI3_SHORT = np.linspace(1.0, 1.5, 16)
PHI3_LONG = np.linspace(1.0, 6.0, 16)

# name: (arch, kv, tensors, expected). expected: mode (0 NORM, 2 NEOX), heads, k heads, rotated row width, n_rot,
# freq_base, freq_scale, ext_factor, llama.cpp's attn_factor (float64), n_ctx_orig, the factor tensors
# (operator -> tensor), the RMSNorm epsilon
MODELS = {
    # Llama 3.1: NORM, rope_freqs from the llama3 scaling, no rope.scaling.* keys
    "llama3": ("llama", LLAMA, {"rope_freqs.weight": FREQS},
               dict(mode=0, hq=4, hk=2, d=64, n_rot=64, base=5e5, fs=1.0, ext=0.0, attn=1.0, n_ctx=8192,
                    ff={"rope": "rope_freqs"}, eps=1e-5)),
    # linear scaling: freq_scale = 1/factor, no YaRN
    "llama_linear": ("llama", {**LLAMA, "rope.scaling.type": "linear", "rope.scaling.factor": 4.0}, {},
                     dict(mode=0, hq=4, hk=2, d=64, n_rot=64, base=5e5, fs=0.25, ext=0.0, attn=1.0, n_ctx=8192,
                          ff={}, eps=1e-5)),
    # no rope.scaling.type: llama.cpp reads "linear", so a factor alone scales
    "llama_factor_only": ("llama", {**LLAMA, "rope.scaling.factor": 2.0}, {},
                          dict(mode=0, hq=4, hk=2, d=64, n_rot=64, base=5e5, fs=0.5, ext=0.0, attn=1.0, n_ctx=8192,
                               ff={}, eps=1e-5)),
    # type none: never scaled, whatever the factor
    "llama_none": ("llama", {**LLAMA, "rope.scaling.type": "none", "rope.scaling.factor": 2.0}, {},
                   dict(mode=0, hq=4, hk=2, d=64, n_rot=64, base=5e5, fs=1.0, ext=0.0, attn=1.0, n_ctx=8192,
                        ff={}, eps=1e-5)),
    # Qwen2 with YaRN: NEOX; ext_factor 1; attn_factor get_mscale(4) / (1 + 0.1 ln 4) (ggml multiplies it back)
    "qwen2_yarn": ("qwen2", {"context_length": 32768, "embedding_length": 512, "attention.head_count": 4,
                             "attention.head_count_kv": 1, "rope.freq_base": 1e6, "rope.scaling.type": "yarn",
                             "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 32768,
                             "attention.layer_norm_rms_epsilon": 1e-6},
                   {}, dict(mode=2, hq=4, hk=1, d=128, n_rot=128, base=1e6, fs=0.25, ext=1.0,
                            attn=mscale(4) / (1 + 0.1 * math.log(4)), n_ctx=32768, ff={}, eps=1e-6)),
    # DeepSeek-V2: NORM, MLA (q_pe per head, one shared k_pe, n_rot wide), YaRN with the log multiplier the
    # converter stores as 0.1 * mscale_all_dim: mscale = mscale_all_dim, so the rotation keeps magnitude 1
    "deepseek2": ("deepseek2", {"context_length": 163840, "embedding_length": 512, "attention.head_count": 8,
                                "attention.head_count_kv": 8, "attention.key_length": 192,
                                "attention.kv_lora_rank": 128, "rope.dimension_count": 64,
                                "rope.scaling.type": "yarn", "rope.scaling.factor": 40.0,
                                "rope.scaling.original_context_length": 4096,
                                "rope.scaling.yarn_log_multiplier": 0.0707,
                                "attention.layer_norm_rms_epsilon": 1e-6},
                  {}, dict(mode=0, hq=8, hk=1, d=64, n_rot=64, base=1e4, fs=1 / 40, ext=1.0,
                           attn=1 / (1 + 0.1 * math.log(40)), n_ctx=4096, ff={}, eps=1e-6)),
    # GLM-DSA: the same MLA shape, but llama_context keeps mscale = 1 for any architecture but deepseek2:
    # attn_factor = get_mscale(f) / get_mscale(f, mscale_all_dim) / (1 + 0.1 ln f)
    "glm_dsa": ("glm-dsa", {"context_length": 202752, "embedding_length": 512, "attention.head_count": 8,
                            "attention.key_length": 576, "attention.kv_lora_rank": 512, "rope.dimension_count": 64,
                            "rope.freq_base": 1e6, "rope.scaling.type": "yarn", "rope.scaling.factor": 8.0,
                            "rope.scaling.original_context_length": 4096,
                            "rope.scaling.yarn_log_multiplier": 0.0707, "attention.layer_norm_rms_epsilon": 1e-5},
                {}, dict(mode=0, hq=8, hk=1, d=64, n_rot=64, base=1e6, fs=1 / 8, ext=1.0,
                         attn=mscale(8) / mscale(8, 0.707) / (1 + 0.1 * math.log(8)), n_ctx=4096, ff={}, eps=1e-5)),
    # phi-2: NEOX, partial rotation (32 of 80), LayerNorm: no rmsnorm operator
    "phi2": ("phi2", {"context_length": 2048, "embedding_length": 320, "attention.head_count": 4,
                      "rope.dimension_count": 32, "attention.layer_norm_epsilon": 1e-5},
             {}, dict(mode=2, hq=4, hk=4, d=80, n_rot=32, base=1e4, fs=1.0, ext=0.0, attn=1.0, n_ctx=2048,
                      ff={}, eps=None)),
    # Phi-3 LongRoPE: NEOX, rope_factors_short / _long as freq_factors, the converter's attn_factor
    "phi3_longrope": ("phi3", {"context_length": 131072, "embedding_length": 128, "attention.head_count": 4,
                               "rope.dimension_count": 32, "rope.scaling.type": "longrope",
                               "rope.scaling.original_context_length": 4096, "rope.scaling.attn_factor": 1.19,
                               "attention.layer_norm_rms_epsilon": 1e-5},
                      {"rope_factors_short.weight": PHI3_SHORT, "rope_factors_long.weight": PHI3_LONG},
                      dict(mode=2, hq=4, hk=4, d=32, n_rot=32, base=1e4, fs=1.0, ext=0.0, attn=1.19, n_ctx=4096,
                           ff={"rope": "rope_factors_short", "rope_long": "rope_factors_long"}, eps=1e-5)),
}
TENSORS = {"rope_freqs": FREQS, "rope_factors_short": PHI3_SHORT, "rope_factors_long": PHI3_LONG}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """name -> (spec text, warnings, compiled program, out dir)."""
    out, got = tmp_path_factory.mktemp("gguf"), {}
    for name, (arch, kv, tensors, _) in MODELS.items():
        spec, warnings = import_gguf(write_gguf(out / f"{name}.gguf", arch, kv, tensors), out / "specs")
        got[name] = (spec.read_text(), warnings, ropegen.compile(spec.read_text()), out / "specs")
    return got


def ops(name, want):
    return ["rope"] if not want["ff"] else list(want["ff"])


@pytest.mark.parametrize("name", MODELS)
def test_spec_lines(imported, name):
    text, warnings, program, out = imported[name]
    want = MODELS[name][3]
    assert f"in q:            f32[tokens=T, heads={want['hq']}, head_dim={want['d']}]" in text
    assert f"in k:            f32[tokens=T, heads={want['hk']}, head_dim={want['d']}]" in text
    assert "in positions:    i32[T]" in text and "angle_numerics = ggml" in text
    assert f"pairing        = {'gptj' if want['mode'] == 0 else 'neox'}" in text
    assert (f"rotary_dim     = {want['n_rot']}" in text) == (want["n_rot"] != want["d"])
    bases = [float(b) for b in re.findall(r"computed\(base = ([-+.e0-9]+)", text)]
    assert bases == [want["base"]] * len(ops(name, want))
    assert ("scaling = ggml_yarn(" in text) == (want["fs"] != 1 or want["ext"] != 0)
    assert ("rmsnorm rmsnorm {" in text) == (want["eps"] is not None)
    if want["eps"] is not None:
        assert np.float32(re.search(r"epsilon = (\S+)", text).group(1)) == np.float32(want["eps"])
    for op, tensor in want["ff"].items():
        assert f"in freq_factors: f32[{want['n_rot'] // 2}]" in text
        np.testing.assert_array_equal(np.load(out / f"{name}.{tensor}.npy"), TENSORS[tensor].astype(np.float32))
        assert any(f"{name}.{tensor}.npy" in w for w in warnings)
    assert sorted(o.name for o in program.operators) == sorted(ops(name, want) + (["rmsnorm"] if want["eps"] else []))


def corr_dims(n_dims, n_ctx, base, beta_fast=32.0, beta_slow=1.0):
    def dim(n_rot):
        return n_dims * math.log(n_ctx / (n_rot * 2 * math.pi)) / (2 * math.log(base))
    return max(0, math.floor(dim(beta_fast))), min(n_dims - 1, math.ceil(dim(beta_slow)))


def llama_cpp_inv_freq(want, ff=None):
    """ggml_rope_ext's inverse frequency of each pair in float64: base^(-2c/n) / ff_c, YaRN-blended."""
    n = want["n_rot"]
    c = np.arange(n // 2)
    inv = want["base"] ** (-2.0 * c / n) / (1.0 if ff is None else ff.astype(np.float64))
    ramp = np.zeros(n // 2)
    if want["ext"]:
        low, high = corr_dims(n, want["n_ctx"], want["base"])
        ramp = (1 - np.clip((c - low) / max(0.001, high - low), 0, 1)) * want["ext"]
    return inv * (want["fs"] * (1 - ramp) + ramp)


def llama_cpp_mscale(want):
    return want["attn"] * ((1 + 0.1 * math.log(1 / want["fs"])) if want["ext"] else 1.0)


@pytest.mark.parametrize("name", MODELS)
def test_plan_matches_llama_cpp(imported, name):
    want = MODELS[name][3]
    for op, tensor in (want["ff"] or {"rope": None}).items():
        a = imported[name][2][op].plan.angles
        n = want["n_rot"]
        assert a.kind == "ggml" and a.freq_factors == ("freq_factors" if tensor else None)
        assert a.theta_scale == pytest.approx(want["base"] ** (-2 / n), rel=1e-7)
        assert a.freq_scale == pytest.approx(want["fs"], rel=1e-7) and a.yarn == bool(want["ext"])
        assert a.mscale == pytest.approx(llama_cpp_mscale(want), rel=2e-6)
        if want["ext"]:
            assert a.corr_dims == corr_dims(n, want["n_ctx"], want["base"])
        ff = None if tensor is None else TENSORS[tensor]
        c = np.arange(n // 2)
        planned = np.float64(a.theta_scale) ** c * (a.freq_scale * np.asarray(a.one_minus_ramp)
                                                    + np.asarray(a.ramp)) / (1.0 if ff is None else ff)
        np.testing.assert_allclose(planned, llama_cpp_inv_freq(want, ff), rtol=2e-5)


def ggml_rope_f64(x, pos, want, ff=None):
    """ggml_rope_ext (forward) in float64: x [T, H, D], NORM pairs (2c, 2c+1) or NEOX (c, c + n/2), the first
    n_rot dims rotated."""
    n = want["n_rot"]
    theta = pos.astype(np.float64)[:, None] * llama_cpp_inv_freq(want, ff)[None, :]
    cos, sin = (f(theta)[:, None, :] * llama_cpp_mscale(want) for f in (np.cos, np.sin))
    c = np.arange(n // 2)
    i0, i1 = (2 * c, 2 * c + 1) if want["mode"] == 0 else (c, c + n // 2)
    x = x.astype(np.float64)
    out = x.copy()
    out[..., i0] = x[..., i0] * cos - x[..., i1] * sin
    out[..., i1] = x[..., i0] * sin + x[..., i1] * cos
    return out


def inputs(want, seed=0):
    rng = np.random.default_rng(seed)
    T = 37
    q = rng.standard_normal((T, want["hq"], want["d"])).astype(np.float32)
    k = rng.standard_normal((T, want["hk"], want["d"])).astype(np.float32)
    return q, k, rng.integers(0, 256, T).astype(np.int32)


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("name", MODELS)
def test_kernels_rotate_as_ggml_rope_ext(imported, name, backend):
    want = MODELS[name][3]
    q, k, pos = inputs(want)
    for op, tensor in (want["ff"] or {"rope": None}).items():
        ff = None if tensor is None else TENSORS[tensor].astype(np.float32)
        args = (q, k, pos) + ((ff,) if ff is not None else ())
        for got, x in zip(imported[name][2][op](*args, backend=backend), (q, k)):
            np.testing.assert_allclose(got, ggml_rope_f64(x, pos, want, ff), rtol=0, atol=2e-4 * np.abs(x).max())


def llama_cpp_f32_args(want):
    """llama.cpp's float32 ggml_rope_ext arguments (llama_context), from the expected values."""
    f32 = np.float32
    return dict(freq_base=float(f32(want["base"])), freq_scale=float(f32(1) / f32(1 / want["fs"])),
                ext_factor=want["ext"], attn_factor=float(f32(want["attn"])), beta_fast=32.0, beta_slow=1.0,
                n_ctx_orig=want["n_ctx"], n_dims=want["n_rot"], mode=want["mode"])


@pytest.mark.parametrize("name", MODELS)
def test_c_kernel_matches_ggml(imported, name):
    try:
        import ggml
    except (ImportError, OSError):
        pytest.skip("ggml-python is not installed (pip install ggml-python): no ggml peer to compare with")
    from ropegen.bench.peers.ggml import GgmlRopeGraph
    want = MODELS[name][3]
    q, k, pos = inputs(want, seed=1)
    for op, tensor in (want["ff"] or {"rope": None}).items():
        ff = None if tensor is None else TENSORS[tensor].astype(np.float32)
        setup = dict(streams=[("q_rot", q), ("k_rot", k)], positions=pos, freq_factors=ff, type="f32",
                     backward=False, note="", **llama_cpp_f32_args(want))
        graph = GgmlRopeGraph(ggml, setup, 1)
        try:
            graph.compute()
            args = (q, k, pos) + ((ff,) if ff is not None else ())
            for got, x, peer in zip(imported[name][2][op](*args, backend="c"), (q, k), graph.outs.values()):
                np.testing.assert_allclose(got, peer, rtol=0, atol=2e-6 * np.abs(x).max())
        finally:
            graph.close()


def test_hybrid_layers_without_attention(tmp_path):
    """Per-layer head counts with 0 for the recurrent layers (granitehybrid): the attention layers' count."""
    kv = {**LLAMA, "attention.head_count_kv": [0, 2, 0, 2], "attention.head_count": [0, 4, 0, 4]}
    spec, _ = import_gguf(write_gguf(tmp_path / "h.gguf", "granitehybrid", kv), tmp_path)
    assert "in k:            f32[tokens=T, heads=2, head_dim=64]" in spec.read_text()


def test_warnings(imported):
    assert any("LayerNorm" in w and "phi2.attention.layer_norm_epsilon" in w for w in imported["phi2"][1])
    assert not [w for w in imported["qwen2_yarn"][1]]


@pytest.mark.parametrize("arch, kv, tensors, words", [
    ("qwen2vl", {**LLAMA, "rope.dimension_sections": [16, 8, 4, 4]}, {}, ["qwen2vl.rope.dimension_sections", "(e)"]),
    ("qwen3vl", LLAMA, {}, ["IMROPE", "qwen3vl"]),
    ("glm4", {**LLAMA, "rope.dimension_sections": [8, 8, 8, 0]}, {}, ["glm4.rope.dimension_sections", "= 32"]),
    ("gpt2", LLAMA, {}, ["gpt2", "no rotary embedding"]),
    ("not-an-arch", LLAMA, {}, ["not-an-arch", "rope type"]),
    ("llama", {**LLAMA, "rope.scaling.type": "ntk"}, {}, ["llama.rope.scaling.type", "ntk"]),
    ("llama", {k: v for k, v in LLAMA.items() if k != "attention.head_count"}, {}, ["llama.attention.head_count"]),
    ("llama", {k: v for k, v in LLAMA.items() if k != "context_length"}, {}, ["llama.context_length"]),
    ("llama", {**LLAMA, "rope.dimension_count": 32}, {}, ["llama.rope.dimension_count", "partial"]),
    ("qwen2", {**LLAMA, "rope.dimension_count": 63}, {}, ["qwen2.rope.dimension_count", "even"]),
    ("llama", {**LLAMA, "attention.head_count_kv": [2, 0, 4]}, {}, ["llama.attention.head_count_kv", "layers"]),
    ("llama", {**LLAMA, "rope.freq_base": "big"}, {}, ["llama.rope.freq_base", "not a number"]),
    ("llama", LLAMA, {"rope_freqs.weight": np.ones(16)}, ["rope_freqs", "32"]),
    ("phi3", {**LLAMA, "rope.scaling.type": "longrope"}, {"rope_factors_long.weight": np.ones(32)},
     ["longrope", "rope_factors_short"]),
])
def test_errors_name_the_key(tmp_path, arch, kv, tensors, words):
    path = write_gguf(tmp_path / "m.gguf", arch, kv, tensors)
    with pytest.raises(ValueError) as err:
        import_gguf(path, tmp_path / "out")
    assert all(w in str(err.value) for w in words), str(err.value)
    assert str(path) in str(err.value) and not (tmp_path / "out").exists()


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGUX" + bytes(64))
    for path in (bad, tmp_path / "missing.gguf"):
        with pytest.raises(ValueError, match=re.escape(path.name) + ".*(not a readable GGUF|no such file)"):
            import_gguf(path, tmp_path / "out")


def test_field_values_without_contents(tmp_path):
    """gguf releases before ReaderField.contents(): the values read from parts/data/types are the same."""
    from ropegen.importers.gguf import _value

    class Old:     # a field as older gguf releases have it
        def __init__(self, f):
            self.parts, self.data, self.types = f.parts, f.data, f.types

    kv = {**LLAMA, "rope.dimension_sections": [8, 12, 12, 0], "rope.scaling.type": "yarn"}
    reader = gguf.GGUFReader(write_gguf(tmp_path / "m.gguf", "llama", kv))
    fields = {k: f for k, f in reader.fields.items() if k.startswith(("general.", "llama."))}
    assert len(fields) == len(kv) + 1
    for key, f in fields.items():
        assert _value(Old(f)) == f.contents(), key


def test_mrope(tmp_path):
    """Qwen2-VL: LLAMA_ROPE_TYPE_MROPE, ggml_rope_multi with sections [t, h, w, 0] -> mrope(positions, ...)
    over positions [3, T]; pair c takes the position of its section's stream (NEOX pairs)."""
    kv = {"context_length": 32768, "embedding_length": 256, "attention.head_count": 4, "attention.head_count_kv": 2,
          "rope.freq_base": 1e6, "rope.dimension_count": 64, "rope.dimension_sections": [8, 10, 14, 0],
          "attention.layer_norm_rms_epsilon": 1e-6}
    spec, _ = import_gguf(write_gguf(tmp_path / "vl.gguf", "qwen2vl", kv), tmp_path)
    text = spec.read_text()
    assert "in positions:    i32[3, T]" in text and "positions      = mrope(positions, sections = [8, 10, 14])" in text
    op = ropegen.compile(text)["rope"]
    want = dict(mode=2, hq=4, hk=2, d=64, n_rot=64, base=1e6, fs=1.0, ext=0.0, attn=1.0, n_ctx=32768)
    q, k, _ = inputs(want)
    pos = np.random.default_rng(2).integers(0, 256, (3, len(q))).astype(np.int32)
    stream = np.repeat([0, 1, 2], [8, 10, 14])
    got = op(q, k, pos, backend="c")
    for g, x in zip(got, (q, k)):    # float64: each pair's angle from its own stream's position
        ref = np.stack([ggml_rope_f64(x, pos[s], want) for s in range(3)])
        expect = x.astype(np.float64).copy()
        for c in range(32):
            expect[..., [c, c + 32]] = ref[stream[c]][..., [c, c + 32]]
        np.testing.assert_allclose(g, expect, rtol=0, atol=2e-4 * np.abs(x).max())
    try:
        import ggml
    except (ImportError, OSError):
        pytest.skip("ggml-python is not installed (pip install ggml-python): no ggml_rope_multi to compare with")
    import ctypes
    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=1 << 24, mem_buffer=None, no_alloc=False))
    try:
        ggml.ggml_cpu_init() if hasattr(ggml, "ggml_cpu_init") else None
        p4 = np.concatenate([pos, np.zeros((1, len(q)), np.int32)]).reshape(-1)    # t, h, w, e rows
        p_t = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_I32, p4.size)
        ctypes.memmove(ggml.ggml_get_data(p_t), p4.ctypes.data, p4.nbytes)
        for g, x in zip(got, (q, k)):
            x_t = ggml.ggml_new_tensor_3d(ctx, ggml.GGML_TYPE_F32, x.shape[2], x.shape[1], x.shape[0])
            ctypes.memmove(ggml.ggml_get_data(x_t), x.ctypes.data, x.nbytes)
            y = ggml.ggml_rope_multi(ctx, x_t, p_t, None, 64, (ctypes.c_int * 4)(8, 10, 14, 0), 8, 32768, 1e6,
                                     1.0, 0.0, 1.0, 32.0, 1.0)
            graph = ggml.ggml_new_graph(ctx)
            ggml.ggml_build_forward_expand(graph, y)
            ggml.ggml_graph_compute_with_ctx(ctx, graph, 1)
            peer = np.ctypeslib.as_array(ctypes.cast(ggml.ggml_get_data(y), ctypes.POINTER(ctypes.c_float)),
                                         shape=x.shape).copy()
            np.testing.assert_allclose(g, peer, rtol=0, atol=2e-6 * np.abs(x).max())
    finally:
        ggml.ggml_free(ctx)
