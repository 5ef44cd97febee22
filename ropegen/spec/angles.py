"""The `angles` setting of rope: cos/sin tables or computed frequencies with their scaling.

A mixin of check._OperatorChecker (it uses its fail/warn/ref/number/call_args helpers), kept apart
because the table-width rules and the scaling defaults are the part of the checker that follows
other frameworks' conventions (HF, ATB, ggml) rather than the grammar.
"""
from __future__ import annotations

from ropegen.spec import ast as A
from ropegen import ir
from ropegen.spec.limits import MAX_TABLE_WIDTH
from ropegen.spec.diagnostics import Loc, did_you_mean

SCALING_ARGS = {
    "none": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_positions"),
    "ggml_yarn": ("freq_scale", "ext_factor", "attn_factor", "beta_fast", "beta_slow", "n_ctx_orig"),
}
# llama.cpp's default ext_factor is -1, "1 for YaRN models, else 0": writing ggml_yarn means YaRN.
YARN_DEFAULTS = {"ext_factor": 1.0, "attn_factor": 1.0, "beta_fast": 32.0, "beta_slow": 1.0}


class AngleChecks:
    def angles(self, first: ir.Tensor, pairing: ir.Pairing, rotary_dim: int, positions: ir.Positions,
               head_dim: int) -> ir.Angles:
        s = self.require("angles")
        v = s.value
        if not isinstance(v, (A.Word, A.Call)):
            self.fail("C008", "angles must be table(...) or computed(...)", v.loc)
        if not isinstance(v, A.Call) or v.name not in ("table", "computed"):
            name = v.name
            self.fail("C009", f"unknown angle source '{name}'", v.loc,
                      did_you_mean(name, ("table", "computed")) or "table(cos=, sin=) or computed(base=, ...)")
        if v.name == "table":
            args = self.call_args(v, ("cos", "sin"), ("cos", "sin"), ("cos", "sin"))
            cos = self.ref(args["cos"], "cos")
            sin = self.ref(args["sin"], "sin")
            if cos.name == sin.name:
                self.fail("C018", "cos and sin must be two different inputs", args["sin"].loc)
            self.check_tables(cos, sin, first, pairing, rotary_dim, positions, head_dim, v.loc)
            return ir.TableAngles(cos.name, sin.name)
        args = self.call_args(v, ("base", "scaling", "freq_factors", "magnitude"), ("base",))
        base = self.number(args["base"], "base", positive=True)
        if base == 1:
            self.fail("C029", "base must not be 1 (every frequency would be 1)", args["base"].loc)
        scaling = self.scaling(args["scaling"]) if "scaling" in args else ir.NoScaling()
        ff = None
        if "freq_factors" in args:
            t = self.ref(args["freq_factors"], "freq_factors")
            n = rotary_dim // 2
            if not t.dtype.is_float or [a.size for a in t.axes] != [n]:
                self.fail("C018", f"freq_factors '{t.name}' must be a float tensor [{n}] (rotary_dim/2)", t.loc)
            if pairing.kind is ir.PairKind.GLM2D:
                self.fail("C030", "freq_factors are not defined for glm2d pairing", args["freq_factors"].loc)
            ff = t.name
        magnitude = self.number(args["magnitude"], "magnitude", positive=True) if "magnitude" in args else 1.0
        if positions.kind is ir.PositionKind.TOKEN:
            self.fail("C030", "computed angles need positions", v.loc,
                      "add `positions = POS` (an integer input), arange(...), in_sequence or glm2d(...)")
        return ir.ComputedAngles(base, scaling, ff, magnitude)

    def scaling(self, v: A.Value) -> ir.Scaling:
        if isinstance(v, A.Word) and v.name == "none":
            return ir.NoScaling()
        if not isinstance(v, (A.Word, A.Call)):
            self.fail("C008", "scaling must be a word or a call such as linear(factor = 2)", v.loc)
        if not isinstance(v, A.Call) or v.name not in SCALING_ARGS:
            name = v.name
            self.fail("C009", f"unknown scaling '{name}'", v.loc, did_you_mean(name, SCALING_ARGS))
        if v.name == "none":
            self.call_args(v, (), ())
            return ir.NoScaling()
        names = SCALING_ARGS[v.name]
        opt = YARN_DEFAULTS if v.name == "ggml_yarn" else {}
        args = self.call_args(v, names, tuple(n for n in names if n not in opt))
        vals = {}
        for n in names:
            if n not in args:
                vals[n] = opt[n]
                continue
            integer = n in ("original_max_positions", "n_ctx_orig")
            positive = n not in ("ext_factor",)
            vals[n] = self.number(args[n], n, integer=integer, positive=positive, nonneg=not positive)
        if v.name == "linear":
            return ir.LinearScaling(vals["factor"])
        if v.name == "llama3":
            if vals["high_freq_factor"] < vals["low_freq_factor"]:
                self.fail("C029", "high_freq_factor must be at least low_freq_factor", v.loc)
            return ir.Llama3Scaling(vals["factor"], vals["low_freq_factor"], vals["high_freq_factor"],
                                    int(vals["original_max_positions"]))
        fs = vals["freq_scale"]
        if fs > 1:
            # legal (it compresses the context), but almost always the YaRN factor written by mistake
            self.warn("C038", f"freq_scale {args['freq_scale'].text} is above 1: ggml's freq_scale is "
                      "1/factor, so this shortens wavelengths", args["freq_scale"].loc,
                      f"for a {fs:g}x context extension write freq_scale = {1 / fs:.6g}")
        return ir.GgmlYarnScaling(vals["freq_scale"], vals["ext_factor"], vals["attn_factor"],
                                  vals["beta_fast"], vals["beta_slow"], int(vals["n_ctx_orig"]))

    def check_tables(self, cos: ir.Tensor, sin: ir.Tensor, first: ir.Tensor, pairing: ir.Pairing,
                     rotary_dim: int, positions: ir.Positions, head_dim: int, loc: Loc) -> None:
        for t in (cos, sin):
            if not t.dtype.is_float:
                self.fail("C019", f"table '{t.name}' must have a float dtype", t.loc)
        if [a.size for a in cos.axes] != [a.size for a in sin.axes] or cos.dtype != sin.dtype:
            self.fail("C018", f"'{cos.name}' and '{sin.name}' must have the same shape and dtype", sin.loc)
        if not cos.axes:
            self.fail("C018", f"table '{cos.name}' needs at least one dimension", cos.loc)
        width = cos.axes[-1].size
        if not isinstance(width, int):
            self.fail("C018", f"the last dimension of '{cos.name}' (its width) must be an integer", cos.loc)
        lead = [a.size for a in cos.axes[:-1]]
        tokens = [d.size for d in first.token_dims]
        if positions.kind is ir.PositionKind.TOKEN:
            if lead != tokens:
                self.fail("C018", f"without positions, '{cos.name}' holds one row per token: expected "
                          f"[{', '.join(map(str, tokens + [width]))}]", cos.loc,
                          "or give `positions = ...` to gather rows")
        elif len(lead) != 1:
            self.fail("C018", f"'{cos.name}' is indexed by position: expected [ROWS, {width}]", cos.loc)
        if width > MAX_TABLE_WIDTH:
            self.fail("C029", f"table width {width} is above the limit {MAX_TABLE_WIDTH}",
                      self.axis_loc(cos.name, len(cos.axes) - 1))
        if pairing.kind is ir.PairKind.BLOCK:
            c = pairing.coeff
            if head_dim % width:
                self.fail("C018", f"table width {width} must divide head_dim {head_dim}", cos.loc)
            if c is None or c < 2 or c % 2 or width % c:
                self.fail("C020", f"block coeff {c} must be even and divide the table width {width}",
                          self.settings["pairing"].value.loc, "ATB allows 2, 4, W/2 and W")
        elif pairing.kind is ir.PairKind.GLM2D:
            if width != rotary_dim // 4:
                self.fail("C018", f"table '{cos.name}' is {width} wide; glm2d needs rotary_dim/4 = "
                          f"{rotary_dim // 4} columns", cos.loc,
                          "each half rotates rotary_dim/4 pairs with its own position stream")
        elif width not in (rotary_dim // 2, rotary_dim):
            # the width says how columns map to elements; any other width has no single reading
            # (reading its first rotary_dim/2 columns would be silently wrong for a full-width table)
            self.fail("C018", f"table '{cos.name}' is {width} wide; {pairing.kind.value} reads "
                      f"{rotary_dim // 2} or {rotary_dim} columns", cos.loc,
                      f"rotary_dim/2 = {rotary_dim // 2} (pair j reads column j) or rotary_dim = {rotary_dim} "
                      "(element e reads column e, as HF's cat / repeat_interleave caches)")
