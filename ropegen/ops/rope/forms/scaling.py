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
class Arg:
    name: str
    default: float | None = None    # None: the argument is required
    integer: bool = False
    positive: bool = True           # else: must not be negative


@dataclass(frozen=True)
class ScalingForm:
    word: str
    ir_type: type
    args: tuple[Arg, ...]
    # (checker, call node, argument nodes, argument values) -> IR; validates across arguments
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


def _llama3(cx, v: A.Call, nodes: dict, vals: dict) -> Llama3Scaling:
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


def _yarn(cx, v: A.Call, nodes: dict, vals: dict) -> GgmlYarnScaling:
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
    ScalingForm("none", NoScaling, (), build=lambda cx, v, nodes, vals: NoScaling(),
                frequencies=lambda inv, s, dim, base: (inv, exact.real(1)),
                ggml=lambda s, dim, base: (1.0, 0.0, 1.0, (0.0, 0.0)),
                reference="unscaled", ggml_reference="ggml_unscaled"),
    ScalingForm("linear", LinearScaling, (Arg("factor"),),
                build=lambda cx, v, nodes, vals: LinearScaling(vals["factor"]),
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


def scaling_of(s: Scaling) -> ScalingForm:
    return _SCALING_BY_TYPE[type(s)]


def check_scaling(cx, v: A.Value) -> Scaling:
    form = _SCALING_BY_WORD.get(getattr(v, "name", None))
    if isinstance(v, A.Word) and form is not None and not form.args:
        return form.build(cx, v, {}, {})     # a form without arguments may be written bare
    if not isinstance(v, (A.Word, A.Call)):
        cx.fail("C008", "scaling must be a word or a call such as linear(factor = 2)", v.loc)
    if not isinstance(v, A.Call) or form is None:
        cx.fail("C009", f"unknown scaling '{v.name}'", v.loc, did_you_mean(v.name, _SCALING_BY_WORD))
    names = tuple(a.name for a in form.args)
    nodes = cx.call_args(v, names, tuple(a.name for a in form.args if a.default is None))
    vals = {}
    for a in form.args:
        if a.name not in nodes:
            vals[a.name] = a.default
            continue
        vals[a.name] = cx.number(nodes[a.name], a.name, integer=a.integer, positive=a.positive,
                                 nonneg=not a.positive)
    return form.build(cx, v, nodes, vals)
