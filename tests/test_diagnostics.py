"""Diagnostics: a corpus of malformed specs with exact codes and positions, plus a robustness fuzz.

Every corpus entry is built by one small edit of a valid base spec and must yield exactly one
diagnostic, with the expected code, 1-based line and column; the rendered report must name
`file:line:col`, `error[CODE]`, show the offending source line and put a caret under the column.
The fuzz applies random edits to valid specs and requires that `parse` + `check` either succeed
or raise SpecError with well-formed diagnostics -- never any other exception.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ropegen.backends.numpy import NumpyBackend
from ropegen.ops.plan import plan_operator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ropegen import ir
from ropegen.spec.sema import check
from ropegen.spec.diagnostics import SpecError
from ropegen.spec.parse import parse

FILE = "spec.rope"

# ---------------------------------------------------------------------------------------------
# Valid base specs
# ---------------------------------------------------------------------------------------------

LLAMA3 = """\
rope llama3 {
    in q: bf16[tokens=T, heads=32, head_dim=128]
    in k: bf16[tokens=T, heads=8, head_dim=128]
    in pos: i64[T]
    out q_out = rotate(q)
    out k_out = rotate(k)
    pairing = neox
    positions = pos
    angles = computed(base=500000, scaling=llama3(factor=8, low_freq_factor=1, high_freq_factor=4, original_max_positions=8192))
}
"""

ONNX3D = """\
rope onnx3d {
    in x: f32[batch=B, seq=S, (heads=4, head_dim=8)]
    in cos_cache: f32[P, 4]
    in sin_cache: f32[P, 4]
    in position_ids: i64[B, S]
    out y = rotate(x)
    pairing = neox
    positions = position_ids
    angles = table(cos=cos_cache, sin=sin_cache)
}
"""

ATB = """\
rope atb {
    in q: f16[tokens=T, (heads=4, head_dim=128)]
    in k: f16[tokens=T, (heads=2, head_dim=128)]
    in cos: f16[T, 128]
    in sin: f16[T, 128]
    in seqlen: i32[B]
    out rq = rotate(q)
    out rk = rotate(k)
    pairing = block(coeff=4)
    sequences = seqlen
    angles = table(cos=cos, sin=sin)
    compute = storage
}
"""

RMS = """\
rmsnorm n {
    in x: f32[N, 4, 5]
    in w: f32[4, 5]
    out y
    axis = -2
    epsilon = 1e-5
}
"""

BASES = {"llama3": LLAMA3, "onnx3d": ONNX3D, "atb": ATB, "rmsnorm": RMS}

LLAMA3_SCALING = ("scaling=llama3(factor=8, low_freq_factor=1, high_freq_factor=4, "
                  "original_max_positions=8192)")
EXTRA_AFTER_POS = "    in pos: i64[T]\n"   # anchor for inserting one more input into LLAMA3


def _edit(base: str, old: str, new: str) -> str:
    """Replace the single occurrence of `old` (the corpus must not depend on accidental matches)."""
    assert base.count(old) == 1, f"{old!r} occurs {base.count(old)} times"
    return base.replace(old, new)


def _edit_all(base: str, old: str, new: str) -> str:
    assert old in base, f"{old!r} not in base"
    return base.replace(old, new)


def _after(base: str, line: str, new_line: str) -> str:
    """Insert `new_line` (a full line, no newline) right after the single line `line`."""
    return _edit(base, line + "\n", line + "\n" + new_line + "\n")


def _drop(base: str, line: str) -> str:
    return _edit(base, line + "\n", "")


def _llama3_extra_input(decl: str) -> str:
    """LLAMA3 with one more (unreferenced) input declared on line 5."""
    return _edit(LLAMA3, EXTRA_AFTER_POS, EXTRA_AFTER_POS + f"    {decl}\n")


# ---------------------------------------------------------------------------------------------
# The corpus: (spec, code, line, column, did-you-mean suggestion or None)
# ---------------------------------------------------------------------------------------------

def case(name, spec, code, line, column, suggest=None, marks=()):
    return pytest.param(spec, code, line, column, suggest, id=name, marks=marks)


CASES = [
    # --- syntax -------------------------------------------------------------------------------
    case("P001-semicolon", _edit(LLAMA3, "pairing = neox", "pairing = neox;"), "P001", 7, 19),
    case("P001-at-sign", _edit(LLAMA3, "in q:", "in q@:"), "P001", 2, 9),
    case("P001-unterminated-string", _after(LLAMA3, "    pairing = neox", '    trig = "fast'), "P001", 8, 12),
    case("P002-missing-equals", _edit(LLAMA3, "pairing = neox", "pairing neox"), "P002", 7, 13),
    case("P002-missing-bracket", _edit(LLAMA3, "heads=32, head_dim=128]", "heads=32, head_dim=128"),
         "P002", 3, 5),
    case("P002-missing-colon", _edit(LLAMA3, "in q: bf16", "in q bf16"), "P002", 2, 10),
    case("P002-output-without-name", _edit(LLAMA3, "out q_out =", "out ="), "P002", 5, 9),
    case("P002-number-as-dtype", _edit(LLAMA3, "in pos: i64[T]", "in pos: 64[T]"), "P002", 4, 13),
    case("P002-extra-bracket", _edit(LLAMA3, "head_dim=128]\n    in k", "head_dim=128]]\n    in k"),
         "P002", 2, 49),
    case("P002-missing-open-brace", _edit(LLAMA3, "rope llama3 {", "rope llama3"), "P002", 2, 5),
    case("P002-stray-closing-brace", LLAMA3 + "}\n", "P002", 11, 1),
    case("P002-two-names-after-out", _edit(RMS, "out y", "out y z"), "P002", 5, 5),
    case("P003-missing-closing-brace", LLAMA3[: LLAMA3.rindex("}")], "P003", 9, 129),
    case("P003-truncated-call", LLAMA3[: LLAMA3.index("base=500000") + len("base=500000")], "P003", 9, 34),

    # --- operators ----------------------------------------------------------------------------
    case("C001-kind-typo", _edit(LLAMA3, "rope llama3", "rop llama3"), "C001", 1, 1, "rope"),
    case("C001-rmsnorm-typo", _edit(RMS, "rmsnorm n", "rmsnrm n"), "C001", 1, 1, "rmsnorm"),
    case("C002-operator-twice", LLAMA3 + LLAMA3, "C002", 11, 6),
    case("C039-words-entry-clash", LLAMA3 + _edit(LLAMA3, "rope llama3 {", "rope llama3_words {"), "C039", 11, 6),
    case("C039-words-entry-clash-declared-first", _edit(LLAMA3, "rope llama3 {", "rope llama3_words {") + LLAMA3,
         "C039", 11, 6),
    case("C035-comment-only", "# nothing to see here\n", "C035", 1, 1),

    # --- declarations -------------------------------------------------------------------------
    case("C003-input-twice", _after(LLAMA3, "    in pos: i64[T]", "    in k: bf16[tokens=T, heads=8, head_dim=128]"),
         "C003", 5, 8),
    case("C003-output-named-like-input", _edit(LLAMA3, "out k_out = rotate(k)", "out k = rotate(k)"), "C003", 6, 9),
    case("C003-output-twice", _edit(LLAMA3, "out k_out = rotate(k)", "out q_out = rotate(k)"), "C003", 6, 9),
    case("C003-rmsnorm-output-named-like-input", _edit(RMS, "out y", "out w"), "C003", 4, 9),
    case("C004-dtype-typo", _llama3_extra_input("in extra: fp32[4]"), "C004", 5, 15, "f32"),
    case("C005-label-typo", _llama3_extra_input("in extra: f32[tokens=T, heds=4]"), "C005", 5, 29, "heads"),
    case("C033-label-twice", _llama3_extra_input("in extra: f32[heads=4, heads=4]"), "C033", 5, 28),
    case("C029-zero-size-dim", _llama3_extra_input("in extra: f32[0]"), "C029", 5, 19),
    case("C027-symbol-in-merged-axis", _llama3_extra_input("in extra: f32[(heads=H, head_dim=8)]"), "C027", 5, 26),
    case("C036-reserved-input-name", _edit(_edit(LLAMA3, "in pos: i64[T]", "in int: i64[T]"), "positions = pos",
                                           "positions = int"), "C036", 4, 8),
    case("C036-keyword-input-name", _edit(_edit(LLAMA3, "in pos: i64[T]", "in in: i64[T]"), "positions = pos",
                                          "positions = in"), "C036", 4, 8),
    case("C036-underscore-output-name", _edit(LLAMA3, "out k_out = rotate(k)", "out _k = rotate(k)"), "C036", 6, 9),
    case("C036-reserved-rmsnorm-output", _edit(RMS, "out y", "out double"), "C036", 4, 9),
    case("C026-unused-input", _llama3_extra_input("in extra: f32[4]"), "C026", 5, 8),
    case("C026-unused-seqlen", _drop(ATB, "    sequences = seqlen"), "C026", 6, 8),

    # --- settings -----------------------------------------------------------------------------
    case("C006-key-typo", _edit(ATB, "compute = storage", "compte = storage"), "C006", 12, 5, "compute"),
    case("C006-rmsnorm-key-typo", _edit(RMS, "epsilon", "epsilom"), "C006", 6, 5, "epsilon"),
    case("C006-rope-key-in-rmsnorm", _after(RMS, "    epsilon = 1e-5", "    pairing = neox"), "C006", 7, 5),
    case("C007-missing-angles", _drop(LLAMA3, f"    angles = computed(base=500000, {LLAMA3_SCALING})"),
         "C007", 1, 6),
    case("C007-missing-pairing", _drop(ONNX3D, "    pairing = neox"), "C007", 1, 6),
    case("C024-setting-twice", _after(LLAMA3, "    positions = pos", "    pairing = gptj"), "C024", 9, 5),
    case("C024-rmsnorm-setting-twice", _after(RMS, "    epsilon = 1e-5", "    epsilon = 1e-6"), "C024", 7, 5),

    # --- value kinds --------------------------------------------------------------------------
    case("C008-word-for-number", _after(LLAMA3, "    pairing = neox", "    rotary_dim = sixty"), "C008", 8, 18),
    case("C008-call-for-word", _edit(ATB, "compute = storage", "compute = f32()"), "C008", 12, 15),
    case("C008-fractional-axis", _edit(RMS, "axis = -2", "axis = 1.5"), "C008", 5, 12),
    case("C008-fractional-max-positions",
         _edit(LLAMA3, "original_max_positions=8192", "original_max_positions=8192.5"), "C008", 9, 123),
    case("C008-word-for-epsilon", _edit(RMS, "epsilon = 1e-5", "epsilon = tiny"), "C008", 6, 15),
    case("C008-float-syntax-for-axis", "# header\n\n" + _edit(RMS, "axis = -2", "axis = -3.0"), "C008", 7, 12),
    case("C009-pairing-typo", _edit(LLAMA3, "pairing = neox", "pairing = nexo"), "C009", 7, 15, "neox"),
    case("C009-pairing-typo-second-operator", LLAMA3 + _edit(ONNX3D, "pairing = neox", "pairing = gptx"),
         "C009", 17, 15, "gptj"),
    case("C009-inner-pairing-typo", _edit(LLAMA3, "pairing = neox", "pairing = glm2d(inner=nexo)"),
         "C009", 7, 27, "neox"),
    case("C009-direction-typo", _after(LLAMA3, "    pairing = neox", "    direction = forwards"),
         "C009", 8, 17, "forward"),
    case("C009-angles-typo", _edit(ONNX3D, "angles = table(", "angles = tabel("), "C009", 9, 14, "table"),
    case("C009-scaling-typo", _edit(LLAMA3, "scaling=llama3(", "scaling=lama3("), "C009", 9, 44, "llama3"),
    case("C009-positions-typo", _edit(LLAMA3, "positions = pos", "positions = arrange()"), "C009", 8, 17, "arange"),
    case("C009-trig-typo", _after(LLAMA3, "    pairing = neox", "    trig = fats"), "C009", 8, 12, "fast"),
    case("C009-angle-numerics-typo", _after(LLAMA3, "    pairing = neox", "    angle_numerics = gml"),
         "C009", 8, 22, "ggml"),
    case("C009-stash", _after(RMS, "    epsilon = 1e-5", "    stash = f16"), "C009", 7, 13),

    # --- call arguments -----------------------------------------------------------------------
    case("C010-unknown-argument", _edit(ATB, "block(coeff=4)", "block(coeff=4, stride=2)"), "C010", 9, 30),
    case("C010-argument-typo", _edit(LLAMA3, "computed(base=", "computed(bse="), "C010", 9, 23, "base"),
    case("C010-argument-twice", _edit(ATB, "block(coeff=4)", "block(4, coeff=4)"), "C010", 9, 24),
    case("C010-extra-positional",
         _edit(ONNX3D, "table(cos=cos_cache, sin=sin_cache)", "table(cos_cache, sin_cache, position_ids)"),
         "C010", 9, 42),
    case("C011-table-missing-sin", _edit(ONNX3D, "table(cos=cos_cache, sin=sin_cache)", "table(cos=cos_cache)"),
         "C011", 9, 14),
    case("C011-llama3-missing-arguments", _edit(LLAMA3, LLAMA3_SCALING, "scaling=llama3(factor=8)"), "C011", 9, 44),
    case("C011-computed-missing-base", _edit(LLAMA3, "computed(base=500000, ", "computed("), "C011", 9, 14),

    # --- references ---------------------------------------------------------------------------
    case("C012-rotate-typo", _edit(LLAMA3, "rotate(q)", "rotate(qq)"), "C012", 5, 24, "q"),
    case("C012-positions-typo", _edit(LLAMA3, "positions = pos", "positions = poss"), "C012", 8, 17, "pos"),
    case("C012-table-typo", _edit(ONNX3D, "cos=cos_cache", "cos=cos_cach"), "C012", 9, 24, "cos_cache"),
    case("C012-sequences-typo", _edit(ATB, "sequences = seqlen", "sequences = seqlens"), "C012", 10, 17, "seqlen"),
    case("C012-no-inputs-at-all", "rope r {\n    out y = rotate(x)\n    pairing = neox\n}\n", "C012", 2, 20),

    # --- rotated tensors ----------------------------------------------------------------------
    case("C013-unlabelled-dim", _edit(LLAMA3, "bf16[tokens=T, heads=32, head_dim=128]", "bf16[tokens=T, heads=32, 128]"),
         "C013", 2, 8),
    case("C013-no-heads", _edit(LLAMA3, "bf16[tokens=T, heads=32, head_dim=128]", "bf16[tokens=T, head_dim=128]"),
         "C013", 2, 8),
    case("C013-head-dim-not-last",
         _edit(LLAMA3, "bf16[tokens=T, heads=32, head_dim=128]", "bf16[tokens=T, head_dim=128, heads=32]"),
         "C013", 2, 8),
    case("C013-tokens-and-batch",
         _edit(LLAMA3, "bf16[tokens=T, heads=32, head_dim=128]", "bf16[batch=B, tokens=T, heads=32, head_dim=128]"),
         "C013", 2, 8),
    case("C013-batch-without-seq", _edit(ONNX3D, "batch=B, seq=S, ", "batch=B, "), "C013", 2, 8),
    case("C013-no-token-dims", _edit(ONNX3D, "batch=B, seq=S, ", ""), "C013", 2, 8),
    case("C013-merged-wrong-order", _edit(ONNX3D, "(heads=4, head_dim=8)", "(head_dim=8, heads=4)"), "C013", 2, 8),
    case("C031-dtype-mismatch", _edit(LLAMA3, "in k: bf16", "in k: f16"), "C031", 3, 8),
    case("C031-integer-rotated", _edit_all(LLAMA3, "bf16[tokens", "i32[tokens"), "C031", 2, 8),
    case("C015-other-token-symbol", _edit(LLAMA3, "bf16[tokens=T, heads=8", "bf16[tokens=U, heads=8"), "C015", 3, 8),
    case("C015-batch-seq-vs-tokens", _edit(LLAMA3, "bf16[tokens=T, heads=8", "bf16[batch=B, seq=S, heads=8"),
         "C015", 3, 8),
    case("C028-head-dim-mismatch", _edit(LLAMA3, "heads=8, head_dim=128", "heads=8, head_dim=64"), "C028", 3, 8),
    case("C027-symbolic-heads", _edit(LLAMA3, "heads=32", "heads=H"), "C027", 2, 8),

    # --- rotary_dim ---------------------------------------------------------------------------
    case("C014-rotary-dim-too-big", _after(LLAMA3, "    pairing = neox", "    rotary_dim = 130"), "C014", 8, 18),
    case("C014-rotary-dim-odd", _after(LLAMA3, "    pairing = neox", "    rotary_dim = 63"), "C014", 8, 18),
    case("C014-odd-head-dim", _edit_all(LLAMA3, "head_dim=128", "head_dim=127"), "C014", 1, 6),
    case("C029-rotary-dim-zero", _after(LLAMA3, "    pairing = neox", "    rotary_dim = 0"), "C029", 8, 18),
    case("C030-rotary-dim-with-block", _after(ATB, "    compute = storage", "    rotary_dim = 64"), "C030", 13, 5),

    # --- positions and sequences --------------------------------------------------------------
    case("C016-positions-shape", _edit(LLAMA3, "in pos: i64[T]", "in pos: i64[T, 2]"), "C016", 4, 8),
    case("C016-glm2d-positions-need-batch-seq",
         _drop(_edit(LLAMA3, "positions = pos", "positions = glm2d(first_seqlen=3)"), "    in pos: i64[T]"),
         "C016", 7, 17),
    case("C016-start-not-rank-0", _edit(LLAMA3, "positions = pos", "positions = arange(start=pos)"), "C016", 4, 8),
    case("C016-pad-without-batch", _edit(LLAMA3, "positions = pos", "positions = arange(pad=pos)"), "C016", 8, 28),
    case("C017-float-positions", _edit(LLAMA3, "in pos: i64[T]", "in pos: f32[T]"), "C017", 4, 8),
    case("C017-u32-positions", _edit(LLAMA3, "in pos: i64[T]", "in pos: u32[T]"), "C017", 4, 8),
    case("C032-float-seqlen", _edit(ATB, "in seqlen: i32[B]", "in seqlen: f32[B]"), "C032", 6, 8),
    case("C032-2d-seqlen", _edit(ATB, "in seqlen: i32[B]", "in seqlen: i32[B, 2]"), "C032", 6, 8),
    case("C032-sequences-with-batch-seq",
         _after(_after(ONNX3D, "    in position_ids: i64[B, S]", "    in seqlen: i32[B]"),
                "    positions = position_ids", "    sequences = seqlen"),
         "C032", 10, 5),
    case("C030-in-sequence-without-sequences",
         _drop(_edit(LLAMA3, "positions = pos", "positions = in_sequence"), "    in pos: i64[T]"), "C030", 7, 17),

    # --- angles -------------------------------------------------------------------------------
    case("C018-table-shape-mismatch", _edit(ONNX3D, "in cos_cache: f32[P, 4]", "in cos_cache: f32[P, 3]"),
         "C018", 4, 8),
    case("C018-table-too-narrow", _edit_all(ONNX3D, "f32[P, 4]", "f32[P, 3]"), "C018", 3, 8),
    case("C018-table-1d", _edit_all(ONNX3D, "f32[P, 4]", "f32[4]"), "C018", 3, 8),
    case("C018-table-symbolic-width", _edit_all(ONNX3D, "f32[P, 4]", "f32[P, W]"), "C018", 3, 8),
    case("C018-table-without-positions", _drop(ONNX3D, "    positions = position_ids"), "C018", 3, 8),
    case("C018-freq-factors-shape",
         _edit(_llama3_extra_input("in ff: f32[32]"), "computed(base=500000, ", "computed(base=500000, freq_factors=ff, "),
         "C018", 5, 8),
    case("C018-block-width-not-dividing-head-dim", _edit_all(ATB, "f16[T, 128]", "f16[T, 96]"), "C018", 4, 8),
    case("C019-integer-table", _edit_all(ATB, "f16[T, 128]", "i32[T, 128]"), "C019", 4, 8),
    case("C020-odd-coeff", _edit(ATB, "coeff=4", "coeff=3"), "C020", 9, 15),
    case("C020-coeff-wider-than-table", _edit(ATB, "coeff=4", "coeff=256"), "C020", 9, 15),
    case("C029-coeff-zero", _edit(ATB, "coeff=4", "coeff=0"), "C029", 9, 27),
    case("C029-base-zero", _edit(LLAMA3, "base=500000", "base=0"), "C029", 9, 28),
    case("C029-base-one", _edit(LLAMA3, "base=500000", "base=1"), "C029", 9, 28),
    case("C029-scaling-factor-zero", _edit(LLAMA3, "llama3(factor=8", "llama3(factor=0"), "C029", 9, 58),
    case("C029-magnitude-zero", _edit(LLAMA3, "computed(base=500000, ", "computed(base=500000, magnitude=0, "),
         "C029", 9, 46),
    case("C029-high-below-low-freq-factor", _edit(LLAMA3, "high_freq_factor=4", "high_freq_factor=0.5"),
         "C029", 9, 44),
    case("C029-negative-ext-factor",
         _edit(LLAMA3, LLAMA3_SCALING, "scaling=ggml_yarn(freq_scale=0.25, ext_factor=-1, n_ctx_orig=8192)"),
         "C029", 9, 82),
    case("C030-ggml-numerics-with-table", _after(ONNX3D, "    pairing = neox", "    angle_numerics = ggml"),
         "C030", 8, 5),
    case("C030-block-with-computed-angles",
         _drop(_drop(_edit(ATB, "angles = table(cos=cos, sin=sin)", "angles = computed(base=10000)\n    positions = in_sequence"),
                     "    in cos: f16[T, 128]"), "    in sin: f16[T, 128]"),
         "C030", 7, 5),
    case("C030-computed-without-positions", _drop(_drop(LLAMA3, "    positions = pos"), "    in pos: i64[T]"),
         "C030", 7, 14),
    case("C030-freq-factors-with-glm2d",
         _edit(_edit(_llama3_extra_input("in ff: f32[64]"), "computed(base=500000, ", "computed(base=500000, freq_factors=ff, "),
               "pairing = neox", "pairing = glm2d()"),
         "C030", 10, 49),

    # --- rmsnorm ------------------------------------------------------------------------------
    case("C021-axis-too-big", _edit(RMS, "axis = -2", "axis = 3"), "C021", 5, 12),
    case("C021-axis-too-negative", _edit(RMS, "axis = -2", "axis = -4"), "C021", 5, 12),
    case("C021-rank-0", _drop(_edit(RMS, "in x: f32[N, 4, 5]", "in x: f32[]"), "    axis = -2"), "C021", 2, 8),
    case("C022-scale-shape", _edit(RMS, "in w: f32[4, 5]", "in w: f32[3, 5]"), "C022", 3, 8),
    case("C022-scale-rank", _edit(RMS, "in w: f32[4, 5]", "in w: f32[2, 4, 5]"), "C022", 3, 8),
    case("C023-integer-x", _edit(RMS, "in x: f32", "in x: i32"), "C023", 2, 8),
    case("C023-labelled-scale", _edit(RMS, "in w: f32[4, 5]", "in w: f32[heads=4, 5]"), "C023", 3, 8),
    case("C027-symbolic-normalized-dim", _edit(_edit(RMS, "f32[N, 4, 5]", "f32[N, 4, D]"), "f32[4, 5]", "f32[4, D]"),
         "C027", 2, 8),
    case("C029-negative-epsilon", _edit(RMS, "epsilon = 1e-5", "epsilon = -1e-5"), "C029", 6, 15),
    case("C034-three-inputs", _after(RMS, "    in w: f32[4, 5]", "    in b: f32[4, 5]"), "C034", 1, 9),
    case("C034-one-input", _drop(RMS, "    in w: f32[4, 5]"), "C034", 1, 9),

    # --- outputs ------------------------------------------------------------------------------
    case("C025-rope-output-without-value", _edit(LLAMA3, "out k_out = rotate(k)", "out k_out"), "C025", 6, 9),
    case("C025-rope-output-wrong-call", _edit(LLAMA3, "out k_out = rotate(k)", "out k_out = rope(k)"), "C025", 6, 17),
    case("C025-rope-output-two-args", _edit(LLAMA3, "out k_out = rotate(k)", "out k_out = rotate(k, q)"),
         "C025", 6, 17),
    case("C025-rope-no-output", _drop(ONNX3D, "    out y = rotate(x)"), "C025", 1, 6),
    case("C025-rmsnorm-output-with-value", _edit(RMS, "out y", "out y = x"), "C025", 4, 13),
    case("C025-rmsnorm-two-outputs", _after(RMS, "    out y", "    out z"), "C025", 5, 9),
    case("C025-rmsnorm-no-output", _drop(RMS, "    out y"), "C025", 1, 9),
]

# Checker defects found while building the corpus, now fixed: an input whose declaration has an
# error must not cascade into C012/C034 at its uses; word-setting value kinds report C008.
FIXED_CASES = [
    case("C004-dtype-typo-in-rotated-input", _edit(LLAMA3, "in q: bf16", "in q: fp16"), "C004", 2, 11, "f16"),
    case("C005-label-typo-in-rotated-input", _edit(LLAMA3, "heads=32", "heds=32"), "C005", 2, 26, "heads"),
    case("C027-symbol-in-merged-axis-of-rotated-input", _edit(ONNX3D, "(heads=4,", "(heads=H,"), "C027", 2, 38),
    case("C004-dtype-typo-in-rmsnorm-scale", _edit(RMS, "in w: f32", "in w: f33"), "C004", 3, 11, "f32"),
    case("C008-neox-called-with-parentheses", _edit(LLAMA3, "pairing = neox", "pairing = neox()"), "C008", 7, 15),
    case("C011-block-without-coeff", _edit(ATB, "pairing = block(coeff=4)", "pairing = block"), "C011", 9, 15),
    case("C008-string-for-positions", _edit(LLAMA3, "positions = pos", 'positions = "pos"'), "C008", 8, 17),
]


def _single(spec: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        check(parse(spec, FILE))
    return info.value


@pytest.mark.parametrize("name,spec", list(BASES.items()))
def test_bases_are_valid(name, spec):
    result = check(parse(spec, FILE))
    assert isinstance(result, ir.Spec) and len(result.operators) == 1


def test_all_bases_together_are_valid():
    result = check(parse("".join(BASES.values()), FILE))
    assert [op.name for op in result.operators] == ["llama3", "onnx3d", "atb", "n"]


@pytest.mark.parametrize("spec,code,line,column,suggest", CASES + FIXED_CASES)
def test_malformed_spec(spec, code, line, column, suggest):
    err = _single(spec)
    got = [(d.code, d.loc.line, d.loc.column) for d in err.diagnostics]
    assert got == [(code, line, column)], "\n" + str(err)
    (diag,) = err.diagnostics
    assert diag.loc.file == FILE
    assert diag.message

    rendered = str(err)
    assert f"{FILE}:{line}:{column}" in rendered
    assert f"error[{code}]" in rendered
    lines = rendered.splitlines()
    # The offending source line is quoted, and the caret sits under the reported column.
    src_line = spec.split("\n")[line - 1]
    quoted = [i for i, text in enumerate(lines) if text == f"  {line:>4} | {src_line}"]
    assert quoted, rendered
    caret = lines[quoted[0] + 1]
    assert "^" in caret
    assert caret.index("^") == len("       | ") + column - 1, rendered

    if suggest is not None:
        assert diag.hint is not None and f"did you mean '{suggest}'?" in diag.hint
        assert f"did you mean '{suggest}'?" in rendered


def test_corpus_covers_every_code():
    codes = {p.values[1] for p in CASES}
    assert {f"C{i:03d}" for i in range(1, 36)} <= codes
    assert {"P001", "P002", "P003"} <= codes
    assert len(CASES) >= 45


def test_empty_spec():
    err = _single("")
    assert [(d.code, d.loc.line, d.loc.column) for d in err.diagnostics] == [("C035", 1, 1)]
    assert f"{FILE}:1:1: error[C035]" in str(err)


def test_several_errors_are_all_reported_in_source_order():
    spec = _edit(LLAMA3, "pairing = neox", "pairing = nexo") + _edit(RMS, "epsilon", "epsilom")
    err = _single(spec)
    assert [(d.code, d.loc.line) for d in err.diagnostics] == [("C009", 7), ("C006", 16)]
    rendered = str(err)
    assert rendered.index("error[C009]") < rendered.index("error[C006]")


@pytest.mark.parametrize("value", ["5", '"neox"'])
def test_pairing_value_of_wrong_kind_is_reported_readably(value):
    err = _single(_edit(LLAMA3, "pairing = neox", f"pairing = {value}"))
    assert [(d.loc.line, d.loc.column) for d in err.diagnostics] == [(7, 15)]
    assert "Loc(" not in err.diagnostics[0].message


def test_scaling_none_called_does_not_crash():
    spec = _edit(LLAMA3, LLAMA3_SCALING, "scaling=none()")
    op = check(parse(spec, FILE)).operators[0]
    assert isinstance(op.angles.scaling, ir.NoScaling)


def test_huge_integer_literal_is_a_spec_error_not_a_crash():
    spec = _edit(LLAMA3, "heads=32", "heads=" + "9" * 5000)
    err = _single(spec)
    assert [d.code for d in err.diagnostics] == ["P004"]


def test_render_quotes_the_right_line_after_a_form_feed_in_a_comment():
    spec = "# a\x0cb\n" + _edit(LLAMA3, "pairing = neox", "pairing = nexo")
    err = _single(spec)
    assert [(d.code, d.loc.line, d.loc.column) for d in err.diagnostics] == [("C009", 8, 15)]
    assert "   8 |     pairing = nexo" in str(err)


def test_syntax_hint_does_not_leak_internal_terminal_names():
    err = _single(LLAMA3 + "}\n")
    assert err.diagnostics[0].code == "P002"
    assert "$" not in (err.diagnostics[0].hint or "")


# ---------------------------------------------------------------------------------------------
# Fuzz: random edits of valid specs never crash parse/check
# ---------------------------------------------------------------------------------------------

_EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
SEEDS = list(BASES.values()) + [p.read_text(encoding="utf-8") for p in sorted(_EXAMPLES_DIR.glob("*.rope"))]

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_TOKEN = re.compile(r'[A-Za-z_][A-Za-z0-9_]*|[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|"[^"\n]*"|#[^\n]*|\S')
_PUNCT = ["{", "}", "[", "]", "(", ")", "=", ",", ":", "in", "out", "#", '"', "-", "+", "."]
_COMMENT = re.compile(r"#[^\n]*")
VOCAB = sorted({w for s in SEEDS for w in _WORD.findall(_COMMENT.sub("", s))})
_CHARS = list('{}[]()=,:#"+-.;@$\\_ \t\nxZ09') + ["\x0c", "\r", "\u00e9", "\u2028", "\x00"]
_NUMBERS = st.one_of(
    st.sampled_from(["0", "-0", "1", "-1", "2", "3", "4", "7", "8", "64", "127", "128", "+5", "0.5", "1.", ".5",
                     "-2", "1e-300", "1e999", "-1e999", "1e308", "99999999999999999999999999999", "-128",
                     "00", "2e3", "4096"]),
    st.integers(-(10 ** 30), 10 ** 30).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)


def _pick_span(draw, pattern, text):
    """A random match of `pattern` outside comments (edits inside comments rarely test anything)."""
    comments = [m.span() for m in _COMMENT.finditer(text)]
    spans = [m.span() for m in pattern.finditer(text)
             if not any(a <= m.start() < b for a, b in comments)]
    if not spans:
        return None
    return draw(st.sampled_from(spans))


def _splice(text, span, new):
    return text[: span[0]] + new + text[span[1]:]


def _delete_char(draw, text):
    if not text:
        return text
    i = draw(st.integers(0, len(text) - 1))
    return text[:i] + text[i + 1:]


def _insert_char(draw, text):
    i = draw(st.integers(0, len(text)))
    return text[:i] + draw(st.sampled_from(_CHARS)) + text[i:]


def _replace_char(draw, text):
    if not text:
        return text
    i = draw(st.integers(0, len(text) - 1))
    return text[:i] + draw(st.sampled_from(_CHARS)) + text[i + 1:]


def _delete_token(draw, text):
    span = _pick_span(draw, _TOKEN, text)
    return text if span is None else _splice(text, span, "")


def _insert_token(draw, text):
    span = _pick_span(draw, _TOKEN, text)
    tok = draw(st.sampled_from(VOCAB + _PUNCT))
    if span is None:
        return tok
    at = draw(st.sampled_from(span))
    return text[:at] + " " + tok + " " + text[at:]


def _replace_token(draw, text):
    span = _pick_span(draw, _TOKEN, text)
    return text if span is None else _splice(text, span, draw(st.sampled_from(VOCAB + _PUNCT)))


def _lines_op(kind):
    def op(draw, text):
        lines = text.split("\n")
        i = draw(st.integers(0, len(lines) - 1))
        if kind == "dup":
            lines.insert(i, lines[i])
        elif kind == "drop":
            del lines[i]
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    return op


def _replace_number(draw, text):
    span = _pick_span(draw, _NUMBER, text)
    return text if span is None else _splice(text, span, draw(_NUMBERS))


def _replace_word(draw, text):
    span = _pick_span(draw, _WORD, text)
    return text if span is None else _splice(text, span, draw(st.sampled_from(VOCAB)))


_EDITS = [_delete_char, _insert_char, _replace_char, _delete_token, _insert_token, _replace_token,
          _lines_op("dup"), _lines_op("drop"), _lines_op("swap"), _replace_number, _replace_word]


@st.composite
def mutants(draw):
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 3))):
        text = draw(st.sampled_from(_EDITS))(draw, text)
    return text


_CODE = re.compile(r"^[PC]\d{3}$")


def _assert_robust(text: str) -> None:
    try:
        result = check(parse(text, "fuzz.rope"))
    except SpecError as err:
        assert err.diagnostics
        for d in err.diagnostics:
            assert _CODE.match(d.code), d
            assert d.loc.line >= 1 and d.loc.column >= 1, d
            assert d.message
        rendered = str(err)
        assert rendered.count("error[") == len(err.diagnostics)
    else:
        assert isinstance(result, ir.Spec)
        # a spec that checks must also plan and render to valid Python without an exception, except
        # a planned constant that overflows its type: that C029 is found by the planner
        for op in result.operators:
            try:
                plan = plan_operator(op, result.sha256)
            except SpecError as err:
                assert [d.code for d in err.diagnostics] == ["C029"], err
                assert "overflows" in err.diagnostics[0].message
                continue
            for name, text in NumpyBackend().sources(plan, "fuzz.rope").items():
                compile(text, name, "exec")


# derandomized: CI explores the same 300 mutants on every run (a new failure is a new bug, not luck)
@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(mutants())
def test_fuzzed_specs_fail_only_with_spec_errors(text):
    _assert_robust(text)


@pytest.mark.parametrize("index", range(len(SEEDS)))
def test_fuzz_seeds_are_robust(index):
    _assert_robust(SEEDS[index])
