"""The spec text of a GGUF model: its attention RoPE as llama.cpp's ggml_rope_ext computes it (operator `rope`,
and `rope_long` for LongRoPE's long factors) and its RMSNorm (operator `rmsnorm`).

Every float the GGUF holds is a float32 (and so is every value llama.cpp derives from them); the spec prints
the shortest decimal that reads back to that float32, which ggml's float32 numerics (`angle_numerics = ggml`)
round back to the same value.
"""
from __future__ import annotations

import numpy as np

from ropegen.importers.gguf import rope_types
from ropegen.importers.gguf.llama_cpp import RopeParams

FACTORS = "freq_factors"      # the spec input that takes a factor tensor


def f32_literal(x) -> str:
    """The shortest decimal of float32(x), as a spec number."""
    v = np.float32(x)
    return str(int(v)) if float(v).is_integer() and abs(v) < 2 ** 53 else str(v)


def _angles(p: RopeParams, factors: str | None) -> str:
    args = [f"base = {f32_literal(p.freq_base)}"] + ([f"{FACTORS} = {FACTORS}"] if factors else [])
    if p.freq_scale == 1 and p.ext_factor == 0:
        if p.attn_factor != 1:
            args.append(f"magnitude = {f32_literal(p.attn_factor)}")
        return f"computed({', '.join(args)})"
    yarn = (f"ggml_yarn(freq_scale = {f32_literal(p.freq_scale)}, ext_factor = {f32_literal(p.ext_factor)}, "
            f"attn_factor = {f32_literal(p.attn_factor)},\n{' ' * 50}beta_fast = {f32_literal(p.beta_fast)}, "
            f"beta_slow = {f32_literal(p.beta_slow)}, n_ctx_orig = {p.n_ctx_orig})")
    return f"computed({', '.join(args)},\n{' ' * 30}scaling = {yarn})"


def _call(p: RopeParams) -> str:
    sections = f"sections = [{', '.join(map(str, p.sections))}, 0], " if p.sections else ""
    return (f"ggml_rope_{'multi' if p.sections else 'ext'}(n_dims = {p.n_rot}, {sections}"
            f"mode = {rope_types.GGML_MODE[p.kind]}, n_ctx_orig = {p.n_ctx_orig},\n"
            f"#   freq_base = {f32_literal(p.freq_base)}, freq_scale = {f32_literal(p.freq_scale)}, "
            f"ext_factor = {f32_literal(p.ext_factor)}, attn_factor = {f32_literal(p.attn_factor)}, "
            f"beta_fast = {f32_literal(p.beta_fast)}, beta_slow = {f32_literal(p.beta_slow)})")


def rope_lines(p: RopeParams, op: str, factors: str | None) -> list[str]:
    n = p.n_rot // 2
    lines = [f"rope {op} {{",
             f"    in q:            f32[tokens=T, heads={p.n_head}, head_dim={p.head_dim}]",
             f"    in k:            f32[tokens=T, heads={p.n_head_kv}, head_dim={p.head_dim}]",
             f"    in positions:    i32[{'3, ' if p.sections else ''}T]"]
    if factors:
        lines.append(f"    in {FACTORS}: f32[{n}]")
    lines += ["    out q_rot = rotate(q)", "    out k_rot = rotate(k)",
              f"    pairing        = {'gptj' if p.kind == rope_types.NORM else 'neox'}"]
    if p.n_rot != p.head_dim:
        lines.append(f"    rotary_dim     = {p.n_rot}")
    positions = (f"mrope(positions, sections = [{', '.join(map(str, p.sections))}])" if p.sections
                 else "positions")
    return lines + [f"    positions      = {positions}", f"    angles         = {_angles(p, factors)}",
                    "    angle_numerics = ggml", "}"]


def spec_text(p: RopeParams, name: str, files: dict[str, str], eps: float | None, n_embd: int) -> str:
    """The whole spec; `files`: factor tensor -> the file its values were written to; `eps`: the RMSNorm
    epsilon (None: no rmsnorm operator)."""
    pairs = "adjacent pairs" if p.kind == rope_types.NORM else "halves, pairs (i, i + n_rot/2)"
    if p.sections:
        pairs += ",\n# each pair at the position of its section's stream (rows t, h, w; ggml's 4th stream unused)"
    lines = [f"# {name}: imported by `ropegen import-gguf` from its GGUF metadata (general.architecture "
             f"'{p.arch}').",
             f"# llama.cpp's attention RoPE, LLAMA_ROPE_TYPE_{p.kind}: {pairs},",
             "# float32 q and k, int32 positions, ggml's float32 angle numerics"
             + (f", the first {p.n_rot} of {p.head_dim} dims rotated" if p.n_rot != p.head_dim else "") + ":",
             f"# {_call(p)}"]
    if p.mla:
        lines.append(f"# MLA: q is the rotated part q_pe of every head, k the k_pe all heads share ({p.n_rot} wide).")
    for op, tensor, when in p.variants:
        if tensor:
            lines += [""] if op != p.variants[0][0] else []
            lines += [f"# {FACTORS}: the GGUF's {tensor} tensor ({when}),",
                      f"# written beside this spec as {files[tensor]}"]
        lines += rope_lines(p, op, tensor)
    if eps is not None:
        lines += ["", "# its RMSNorm (llama.cpp's LLM_NORM_RMS: ggml_rms_norm(x, eps), then times the weight, "
                  "float32; ggml",
                  "# sums the squares in double, as stash = f64 does)",
                  "rmsnorm rmsnorm {", f"    in x:      f32[T, {n_embd}]", f"    in weight: f32[{n_embd}]",
                  "    out y", f"    epsilon = {f32_literal(eps)}", "    stash   = f64", "}"]
    return "\n".join(lines) + "\n"
