"""Rope's scaling forms, one row each: `angles = computed(..., scaling = FORM(...))`.

A row says how the spec writes the form (its word and arguments with defaults), validates it, builds
its IR record (defined here; `ropegen.ir` re-exports them), and names what later stages do with it:
its planned frequencies (exact arithmetic, ropegen/exact.py), its ggml numerics, its formulas in the
float64 reference (ops/rope/reference.py) and how the ggml peer hands it to ggml_rope_ext.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from ropegen import exact
from ropegen.ops.rope import angles as plan_angles
from ropegen.ops.rope.forms import scaling_length as by_length
from ropegen.ops.rope.forms.scaling_length import DynamicNtkScaling, LongRopeScaling  # noqa: F401 (IR records)
from ropegen.spec import ast as A
from ropegen.spec.diagnostics import did_you_mean

# the IR records of the scaling forms (the IR names them ir.NoScaling, ir.LinearScaling, ...)

@dataclass(frozen=True)
class NoScaling:
    pass


@dataclass(frozen=True)
class LinearScaling:
    factor: float


@dataclass(frozen=True)
class Llama3Scaling:
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_positions: int


@dataclass(frozen=True)
class GgmlYarnScaling:
    """ggml_rope_ext's parameters beyond freq_base (YaRN in ggml's own form)."""

    freq_scale: float
    ext_factor: float
    attn_factor: float
    beta_fast: float
    beta_slow: float
    n_ctx_orig: int


@dataclass(frozen=True)
class YarnScaling:
    """YaRN in the Hugging Face / vLLM form (DeepSeek's mscale pair and gpt-oss's truncate included);
    None: the argument was not given (the magnitude rule depends on which ones are)."""

    factor: float
    original_max_positions: int
    beta_fast: float
    beta_slow: float
    mscale: float | None
    mscale_all_dim: float | None
    attention_factor: float | None
    truncate: bool


@dataclass(frozen=True)
class NtkScaling:
    """Static NTK-aware scaling: the base becomes base * a^(d / (d - 2)), a = factor or alpha."""

    a: float
    word: str              # how the spec named it: factor or alpha


@dataclass(frozen=True)
class Arg:
    name: str
    default: float | None = None    # None: the argument is required (unless optional)
    integer: bool = False
    positive: bool = True           # else: must not be negative
    optional: bool = False          # may be left out: its value is then None
    boolean: bool = False           # true | false
    vector: bool = False            # a list of numbers, [1.0, 1.02, ...]


@dataclass(frozen=True)
class ScalingForm:
    word: str
    ir_type: type
    args: tuple[Arg, ...]
    # (checker, call node, argument nodes, argument values, rotated pairs) -> IR; validates across arguments
    build: Callable[..., "Scaling"]
    # planner, exact: (base inverse frequencies, scaling, dims, base) -> (frequencies, magnitude gain)
    frequencies: Callable[..., tuple[list, exact.Real]]
    # planner, angle_numerics = ggml: (scaling, dims, base) -> (freq_scale, ext_factor, attn_factor,
    # corr dims); None: ggml's numerics cannot express the form (C030)
    ggml: Callable[..., tuple] | None
    reference: str                  # its frequency formula in ops/rope/reference.py
    ggml_reference: str | None      # its ggml parameters in ops/rope/reference.py
    # the ggml peer (bench/peers/ggml.py): (scaling, the spec asks ggml numerics) -> the ggml_rope_ext
    # parameters llama.cpp sets for the form, and the note saying so (None: nothing to say); the
    # frequencies these leave unexpressed become freq_factors, as llama.cpp's rope_freqs
    llama_cpp: Callable[..., tuple[dict, str | None]] = lambda s, ggml: ({}, None)
    # explain: (scaling, dims, base) -> what the form resolved to beyond the frequencies (None: nothing)
    describe: Callable[..., str | None] = lambda s, dim, base: None
    # frequencies that depend on the call's length L = max(position) + 1 (scaling_length.py); None:
    # they do not. length_key: (scaling, L) -> the key the frequencies are a function of;
    # at_length: (base inverse frequencies, scaling, dims, base, key) -> frequencies (exact);
    # length_note: (scaling, dims, base, L) -> what applies at length L, for explain
    length_key: Callable[..., object] | None = None
    at_length: Callable[..., list] | None = None
    length_note: Callable[..., str] | None = None


def _llama3(cx, v: A.Call, nodes: dict, vals: dict, n_pairs: int) -> Llama3Scaling:
    if vals["high_freq_factor"] < vals["low_freq_factor"]:
        cx.fail("C029", "high_freq_factor must be at least low_freq_factor", v.loc)
    return Llama3Scaling(vals["factor"], vals["low_freq_factor"], vals["high_freq_factor"],
                            int(vals["original_max_positions"]))


def _llama3_frequencies(inv: list, s: Llama3Scaling, dim: int, base: float):
    """Llama-3.1 wavelength bands (HF `_compute_llama3_parameters`), in exact arithmetic."""
    factor, lo_f, hi_f = exact.real(s.factor), exact.real(s.low_freq_factor), exact.real(s.high_freq_factor)
    old = exact.real(s.original_max_positions)
    lo_wl, hi_wl = old / lo_f, old / hi_f
    out = []
    for f in inv:
        w = 2 * exact.pi() / f
        if w < hi_wl:
            out.append(f)
        elif w > lo_wl:
            out.append(f / factor)
        else:
            sigma = 0 if hi_f == lo_f else (old / w - lo_f) / (hi_f - lo_f)
            out.append((1 - sigma) * f / factor + sigma * f)
    return out, exact.real(1)


def _hf_yarn(cx, v: A.Call, nodes: dict, vals: dict, n_pairs: int) -> YarnScaling:
    if vals["beta_slow"] >= vals["beta_fast"]:
        cx.fail("C029", "beta_fast must be above beta_slow (rotations at the high- and low-frequency ends)", v.loc)
    return YarnScaling(vals["factor"], int(vals["original_max_positions"]), vals["beta_fast"], vals["beta_slow"],
                       vals["mscale"], vals["mscale_all_dim"], vals["attention_factor"], vals["truncate"])


def _mscale(s, k) -> exact.Real:
    """HF's get_mscale: 1 for s <= 1, else 0.1 k ln(s) + 1."""
    s = exact.real(s)
    return exact.real(1) if s <= 1 else exact.real("0.1") * exact.real(k) * exact.log(s) + 1


def hf_yarn_range(s: YarnScaling, dim: int, base: float) -> tuple[exact.Real, exact.Real]:
    """HF's find_correction_range: the pair indices where the ramp starts and ends."""
    import mpmath

    def corr(rot) -> exact.Real:
        return exact.real(dim) * exact.log(exact.real(s.original_max_positions) / (exact.real(rot) * 2 * exact.pi())) \
            / (2 * exact.log(base))
    low, high = corr(s.beta_fast), corr(s.beta_slow)
    if s.truncate:
        low, high = exact.real(mpmath.floor(low)), exact.real(mpmath.ceil(high))
    low, high = max(low, exact.real(0)), min(high, exact.real(dim - 1))
    if low == high:
        high += exact.real("0.001")
    return low, high


def _hf_yarn_frequencies(inv: list, s: YarnScaling, dim: int, base: float):
    """HF `_compute_yarn_parameters` in exact arithmetic: inv/factor where the ramp is 1 (long
    wavelengths), inv where it is 0, linear between; magnitude attention_factor, else the mscale rule."""
    low, high = hf_yarn_range(s, dim, base)
    factor = exact.real(s.factor)
    out = []
    for i, f in enumerate(inv):
        ramp = min(exact.real(1), max(exact.real(0), (i - low) / (high - low)))
        out.append(f / factor * ramp + f * (1 - ramp))
    if s.attention_factor is not None:
        gain = exact.real(s.attention_factor)
    elif s.mscale and s.mscale_all_dim:
        gain = _mscale(s.factor, s.mscale) / _mscale(s.factor, s.mscale_all_dim)
    else:
        gain = _mscale(s.factor, 1)
    return out, gain


def _hf_yarn_describe(s: YarnScaling, dim: int, base: float) -> str:
    low, high = hf_yarn_range(s, dim, base)
    _, gain = _hf_yarn_frequencies([], s, dim, base)
    rule = ("attention_factor" if s.attention_factor is not None else
            "get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)" if s.mscale and s.mscale_all_dim
            else "get_mscale(factor) = 0.1 ln(factor) + 1")
    return (f"yarn (HF): factor {s.factor:g}, pairs below {float(low):.6g} keep inv_freq, above {float(high):.6g} "
            f"take inv_freq / {s.factor:g}, linear between ({'truncated' if s.truncate else 'fractional'} "
            f"range); magnitude {float(gain)!r} = {rule}")


def _ntk(cx, v: A.Call, nodes: dict, vals: dict, n_pairs: int) -> NtkScaling:
    given = [k for k in ("factor", "alpha") if vals[k] is not None]
    if len(given) != 1:
        cx.fail("C011", "ntk takes one of factor or alpha", v.loc, "ntk(factor = 4) or ntk(alpha = 1000)")
    return NtkScaling(vals[given[0]], given[0])


def _ntk_frequencies(inv: list, s: NtkScaling, dim: int, base: float):
    """base' = base * a^(d/(d-2)), so inv_i = base'^(-2i/d) = inv_i * a^(-2i/(d-2)), exactly."""
    if dim <= 2:
        return list(inv), exact.real(1)
    return [f * exact.power(s.a, -2 * i, dim - 2) for i, f in enumerate(inv)], exact.real(1)


def _yarn(cx, v: A.Call, nodes: dict, vals: dict, n_pairs: int) -> GgmlYarnScaling:
    fs = vals["freq_scale"]
    if fs > 1:
        # legal (it compresses the context), but almost always the YaRN factor written by mistake
        cx.warn("C038", f"freq_scale {nodes['freq_scale'].text} is above 1: ggml's freq_scale is "
                "1/factor, so this shortens wavelengths", nodes["freq_scale"].loc,
                f"for a {fs:g}x context extension write freq_scale = {1 / fs:.6g}")
    return GgmlYarnScaling(vals["freq_scale"], vals["ext_factor"], vals["attn_factor"],
                              vals["beta_fast"], vals["beta_slow"], int(vals["n_ctx_orig"]))


def _yarn_frequencies(inv: list, s: GgmlYarnScaling, dim: int, base: float):
    """ggml's YaRN blend as real arithmetic: inv * (fs (1 - ramp) + ramp), and its magnitude factor."""
    low, high = plan_angles.ggml_corr_dims(dim, s.n_ctx_orig, base, s.beta_fast, s.beta_slow)
    low_r, span = exact.real(low), max(exact.real("0.001"), exact.real(high) - exact.real(low))
    fs, ext = exact.real(s.freq_scale), exact.real(s.ext_factor)
    out = []
    for c, f in enumerate(inv):
        ramp = (1 - min(exact.real(1), max(exact.real(0), (c - low_r) / span))) * ext
        out.append(f * (fs * (1 - ramp) + ramp))
    gain = exact.real(s.attn_factor)
    if s.ext_factor != 0:
        gain *= 1 + exact.real("0.1") * exact.log(1 / fs)
    return out, gain


def _yarn_llama_cpp(s: GgmlYarnScaling, ggml: bool) -> tuple[dict, str | None]:
    if not ggml:    # exact YaRN frequencies reach ggml as freq_factors
        return {}, None
    return (dict(freq_scale=s.freq_scale, ext_factor=s.ext_factor, attn_factor=s.attn_factor,
                 beta_fast=s.beta_fast, beta_slow=s.beta_slow, n_ctx_orig=s.n_ctx_orig),
            "YaRN parameters of the spec")


def _yarn_ggml(s: GgmlYarnScaling, dim: int, base: float) -> tuple:
    corr = plan_angles.ggml_corr_dims(dim, s.n_ctx_orig, base, s.beta_fast, s.beta_slow)
    return s.freq_scale, s.ext_factor, s.attn_factor, corr


SCALINGS: tuple[ScalingForm, ...] = (
    ScalingForm("none", NoScaling, (), build=lambda cx, v, nodes, vals, n: NoScaling(),
                frequencies=lambda inv, s, dim, base: (inv, exact.real(1)),
                ggml=lambda s, dim, base: (1.0, 0.0, 1.0, (0.0, 0.0)),
                reference="unscaled", ggml_reference="ggml_unscaled"),
    ScalingForm("linear", LinearScaling, (Arg("factor"),),
                build=lambda cx, v, nodes, vals, n: LinearScaling(vals["factor"]),
                frequencies=lambda inv, s, dim, base: ([f / exact.real(s.factor) for f in inv], exact.real(1)),
                ggml=None, reference="linear_scaled", ggml_reference=None,
                # llama.cpp: freq_scale = 1 / factor
                llama_cpp=lambda s, ggml: ({"freq_scale": 1.0 / s.factor}, f"freq_scale = 1/{s.factor:g}")),
    ScalingForm("llama3", Llama3Scaling,
                (Arg("factor"), Arg("low_freq_factor"), Arg("high_freq_factor"),
                 Arg("original_max_positions", integer=True)),
                build=_llama3, frequencies=_llama3_frequencies, ggml=None,
                reference="llama3_scaled", ggml_reference=None,
                llama_cpp=lambda s, ggml: ({"n_ctx_orig": s.original_max_positions}, None)),
    ScalingForm("yarn", YarnScaling,
                (Arg("factor"), Arg("original_max_positions", integer=True), Arg("beta_fast", 32.0),
                 Arg("beta_slow", 1.0), Arg("mscale", optional=True, positive=False),
                 Arg("mscale_all_dim", optional=True, positive=False), Arg("attention_factor", optional=True),
                 Arg("truncate", True, boolean=True)),
                build=_hf_yarn, frequencies=_hf_yarn_frequencies, ggml=None,
                reference="hf_yarn_scaled", ggml_reference=None, describe=_hf_yarn_describe),
    ScalingForm("ntk", NtkScaling, (Arg("factor", optional=True), Arg("alpha", optional=True)),
                build=_ntk, frequencies=_ntk_frequencies, ggml=None,
                reference="ntk_scaled", ggml_reference=None,
                describe=lambda s, dim, base: (f"ntk ({s.word} {s.a:g}): base {base:g} becomes "
                                               f"{float(exact.real(base) * exact.power(s.a, dim, dim - 2)):.17g}")
                if dim > 2 else None),
    ScalingForm("longrope", LongRopeScaling,
                (Arg("short_factor", vector=True), Arg("long_factor", vector=True),
                 Arg("original_max_positions", integer=True), Arg("factor", optional=True),
                 Arg("attention_factor", optional=True)),
                build=by_length.build_longrope, frequencies=by_length.longrope_frequencies, ggml=None,
                reference="longrope_scaled", ggml_reference=None, describe=by_length.longrope_describe,
                length_key=by_length.longrope_key, at_length=by_length.longrope_at,
                length_note=by_length.longrope_at_length),
    ScalingForm("dynamic_ntk", DynamicNtkScaling, (Arg("factor"), Arg("original_max_positions", integer=True)),
                build=by_length.build_dynamic, frequencies=by_length.dynamic_frequencies, ggml=None,
                reference="dynamic_ntk_scaled", ggml_reference=None, describe=by_length.dynamic_describe,
                length_key=by_length.dynamic_key, at_length=by_length.dynamic_at,
                length_note=by_length.dynamic_at_length),
    # llama.cpp's default ext_factor is -1, "1 for YaRN models, else 0": writing ggml_yarn means YaRN.
    ScalingForm("ggml_yarn", GgmlYarnScaling,
                (Arg("freq_scale"), Arg("ext_factor", 1.0, positive=False), Arg("attn_factor", 1.0),
                 Arg("beta_fast", 32.0), Arg("beta_slow", 1.0), Arg("n_ctx_orig", integer=True)),
                build=_yarn, frequencies=_yarn_frequencies, ggml=_yarn_ggml,
                reference="yarn_scaled", ggml_reference="ggml_yarn", llama_cpp=_yarn_llama_cpp),
)
Scaling = Union[tuple(f.ir_type for f in SCALINGS)]
IR_NAMES = frozenset([f.ir_type.__name__ for f in SCALINGS] + ["Scaling"])   # what `ir.` re-exports
_SCALING_BY_WORD = {f.word: f for f in SCALINGS}
_SCALING_BY_TYPE = {f.ir_type: f for f in SCALINGS}


# Hugging Face rope_type words (and vLLM's) that are not ropegen words: what to write instead.
HF_HINTS = {
    "default": "Hugging Face's 'default' is no scaling: leave `scaling` out or write `scaling = none`",
    "dynamic": "Hugging Face's 'dynamic' is dynamic_ntk(factor = ..., original_max_positions = ...) "
               "(original_max_positions: HF's max_position_embeddings); the static form is ntk(factor = ...)",
    "su": "'su' is LongRoPE: longrope(short_factor = [...], long_factor = [...], original_max_positions = ..., "
          "factor = ...)",
    "phi3": "Phi-3's scaling is longrope(short_factor = [...], long_factor = [...], original_max_positions = ..., "
            "factor = ...)",
    "deepseek_yarn": "DeepSeek's YaRN is yarn(factor = ..., original_max_positions = ..., mscale = ..., "
                     "mscale_all_dim = ...)",
    "ggml": "ggml's YaRN parameters are ggml_yarn(freq_scale = ..., ext_factor = ..., ...)",
}


def scaling_of(s: Scaling) -> ScalingForm:
    return _SCALING_BY_TYPE[type(s)]


def check_scaling(cx, v: A.Value, n_pairs: int) -> Scaling:
    """The IR of a scaling value; `n_pairs`: the rotated pairs its frequencies are for."""
    form = _SCALING_BY_WORD.get(getattr(v, "name", None))
    if isinstance(v, A.Word) and form is not None and not form.args:
        return form.build(cx, v, {}, {}, n_pairs)     # a form without arguments may be written bare
    if not isinstance(v, (A.Word, A.Call)):
        cx.fail("C008", "scaling must be a word or a call such as linear(factor = 2)", v.loc)
    if not isinstance(v, A.Call) or form is None:
        cx.fail("C009", f"unknown scaling '{v.name}'", v.loc,
                HF_HINTS.get(v.name) or did_you_mean(v.name, _SCALING_BY_WORD))
    names = tuple(a.name for a in form.args)
    nodes = cx.call_args(v, names, tuple(a.name for a in form.args if a.default is None and not a.optional))
    vals = {}
    for a in form.args:
        if a.name not in nodes:
            vals[a.name] = a.default
        elif a.boolean:
            vals[a.name] = cx.word(nodes[a.name], a.name, ("true", "false")) == "true"
        elif a.vector:
            node = nodes[a.name]
            if not isinstance(node, A.ListValue) or not node.items:
                cx.fail("C008", f"{a.name} must be a list of numbers, e.g. [1.0, 1.02, ...]", node.loc)
            vals[a.name] = [cx.number(x, f"a {a.name} entry", positive=True) for x in node.items]
        else:
            vals[a.name] = cx.number(nodes[a.name], a.name, integer=a.integer, positive=a.positive,
                                     nonneg=not a.positive)
    return form.build(cx, v, nodes, vals, n_pairs)
