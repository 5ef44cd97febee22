"""Specs written to break the front end: huge sizes, deep brackets, odd line breaks, long names,
ggml_yarn defaults, misused forms, cos/sin tables of the wrong width.

Each must end in diagnostics with a code and a position (or check cleanly where the spec is legal),
never in a traceback, an out-of-memory planner or a file name the OS refuses.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from ropegen import ir
from ropegen.api import compile as compile_spec
from ropegen.spec.sema import check
from ropegen.spec.limits import MAX_FIXED_ELEMENTS, MAX_HEAD_DIM, MAX_NAME
from ropegen.spec.diagnostics import QUOTE_WIDTH, SpecError, SpecWarning
from ropegen.generate import ready_targets, write_program
from ropegen.spec.parse import MAX_NESTING, parse
from ropegen.ops.plan import ExactAngles

FILE = "hostile.rope"

ROPE = """\
rope r {
    in x: f32[tokens=T, heads=2, head_dim=8]
    in pos: i64[T]
    out y = rotate(x)
    pairing = neox
    positions = pos
    angles = computed(base=10000)
}
"""

TABLE = """\
rope t {
    in x: f32[batch=B, seq=S, heads=2, head_dim=8]
    in cos_cache: f32[P, 4]
    in sin_cache: f32[P, 4]
    in position_ids: i64[B, S]
    out y = rotate(x)
    pairing = neox
    positions = position_ids
    angles = table(cos=cos_cache, sin=sin_cache)
}
"""

RMS = """\
rmsnorm n {
    in x: f32[N, 4, 5]
    in w: f32[4, 5]
    out y
    axis = 1
}
"""


def _edit(base: str, old: str, new: str) -> str:
    assert base.count(old) == 1, f"{old!r} occurs {base.count(old)} times"
    return base.replace(old, new)


def _errors(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        check(parse(text, FILE))
    return info.value


def _where(text: str) -> list[tuple[str, int, int]]:
    return [(d.code, d.loc.line, d.loc.column) for d in _errors(text).diagnostics]


def _col(line: str, needle: str) -> int:
    """1-based column of the only occurrence of `needle` on `line`."""
    assert line.count(needle) == 1
    return line.index(needle) + 1


def _assert_caret(err: SpecError, source: str) -> None:
    """The rendered report quotes the reported line (as the parser counts lines) with the caret
    under the reported column, and prints nothing that would move the terminal's cursor."""
    for d in err.diagnostics:
        rendered = d.render(source)
        quoted_line = source.split("\n")[d.loc.line - 1].rstrip("\r")
        out = rendered.split("\n")
        assert out[1].startswith(f"  {d.loc.line:>4} | "), rendered
        shown = out[1][len(f"  {d.loc.line:>4} | "):]
        assert all(ch.isprintable() for ch in shown), repr(shown)
        col = out[2].index("^") - len("       | ")
        if len(quoted_line) <= QUOTE_WIDTH:
            assert len(shown) == len(quoted_line)
            assert all(a == b or not b.isprintable() for a, b in zip(shown, quoted_line)), rendered
            assert col == d.loc.column - 1, rendered
        else:   # a window of the line around the caret, `...` where it was cut
            assert len(shown) <= QUOTE_WIDTH + 6, rendered
            assert shown.strip(".") in "".join(c if c.isprintable() else " " for c in quoted_line)
            want = quoted_line[d.loc.column - 1] if d.loc.column <= len(quoted_line) else None
            assert want is None or not want.isprintable() or shown[col] == want, rendered


# ---------------------------------------------------------------------------------------------
# 1. sizes the planner would materialize, or that overflow int64 element counts
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("old,new,needle", [
    ("heads=2, head_dim=8", "heads=2, head_dim=4294967296", "4294967296"),
    ("heads=2, head_dim=8", f"heads=2, head_dim={MAX_HEAD_DIM + 2}", str(MAX_HEAD_DIM + 2)),
    # fixed heads are not materialized, but heads * head_dim elements overflow the C code's int64
    ("heads=2, head_dim=8", "heads=1000000000000000, head_dim=8", "head_dim=8"),
    ("heads=2, head_dim=8", "heads=1099511627776, head_dim=8192", "8192"),
    ("[tokens=T, heads=2, head_dim=8]", "[tokens=T, (heads=1099511627776, head_dim=8192)]", "8192"),
])
def test_huge_rotated_sizes_are_c029_at_the_number(old, new, needle):
    spec = _edit(ROPE, old, new)
    line = spec.split("\n")[1]
    col = _col(line, needle) + (len(needle) - len(needle.split("=")[-1]))
    err = _errors(spec)
    assert _where(spec) == [("C029", 2, col)], str(err)
    _assert_caret(err, spec)


def test_head_dim_at_the_limit_checks():
    spec = _edit(ROPE, "head_dim=8", f"head_dim={MAX_HEAD_DIM}")
    (op,) = check(parse(spec, FILE)).operators
    assert op.rotary_dim == MAX_HEAD_DIM
    assert _where(_edit(ROPE, "head_dim=8", f"head_dim={MAX_HEAD_DIM + 2}"))[0][0] == "C029"


def test_table_wider_than_the_limit_is_c029_at_the_width():
    spec = TABLE.replace("f32[P, 4]", "f32[P, 1000000]")
    assert _where(spec) == [("C029", 3, _col(spec.split("\n")[2], "1000000"))]


@pytest.mark.parametrize("x,w,line,needle", [
    # 2^40 * 2^40 wrapped np.prod to a normalized size of 0
    ("f32[N, 1099511627776, 1099511627776]", "f32[1099511627776]", 2, "1099511627776]"),
    ("f32[1048576, 1048576, 1048576]", "f32[1048576, 1048576]", 2, "1048576]"),
])
def test_rmsnorm_element_count_is_bounded(x, w, line, needle):
    spec = _edit(_edit(RMS, "f32[N, 4, 5]", x), "f32[4, 5]", w)
    assert _where(spec) == [("C029", line, _col(spec.split("\n")[line - 1], needle))]


def test_rmsnorm_at_the_element_limit_plans_its_exact_size():
    side = 2 ** ((MAX_FIXED_ELEMENTS.bit_length() - 1) // 2)
    spec = _edit(_edit(RMS, "f32[N, 4, 5]", f"f32[N, {side}, {side}]"), "f32[4, 5]", f"f32[{side}]")
    (op,) = compile_spec(spec)
    assert op.plan.norm_size == side * side == MAX_FIXED_ELEMENTS
    assert _where(_edit(spec, f"f32[N, {side}, {side}]", f"f32[N, {side}, {2 * side}]"))[0][0] == "C029"


# ---------------------------------------------------------------------------------------------
# 2. deep brackets
# ---------------------------------------------------------------------------------------------

def _nested(kind: str, depth: int) -> tuple[str, int]:
    """A spec whose deepest bracket is `depth` levels in, and the line of those brackets."""
    if kind == "call":       # computed( is the first level
        return _edit(ROPE, "base=10000", "base=10000, magnitude=" + "f(" * (depth - 1) + "1" + ")" * (depth - 1)), 7
    if kind == "kwarg":
        return _edit(ROPE, "pairing = neox", "pairing = " + "a(b=" * depth + "1" + ")" * depth), 5
    if kind == "list":
        return _edit(ROPE, "pairing = neox", "pairing = " + "[" * depth + "]" * depth), 5
    if kind == "list-in-call":
        return _edit(ROPE, "pairing = neox", "pairing = g(" + "[" * (depth - 1) + "]" * (depth - 1) + ")"), 5
    assert kind == "shape"   # the shape's '[' is the first level
    return _edit(ROPE, "[tokens=T, heads=2, head_dim=8]",
                 "[tokens=T, " + "(" * (depth - 1) + "heads=2, head_dim=8" + ")" * (depth - 1) + "]"), 2


def _opener_column(line: str, level: int) -> int:
    """1-based column of the first bracket `level` deep on `line`; a call is located at its name."""
    depth = 0
    for i, ch in enumerate(line):
        if ch in "([":
            depth += 1
            if depth == level:
                start = i
                while ch == "(" and start > 0 and (line[start - 1].isalnum() or line[start - 1] == "_"):
                    start -= 1
                return start + 1
        elif ch in ")]":
            depth -= 1
    raise AssertionError(f"no bracket {level} deep")


@pytest.mark.parametrize("kind", ["call", "kwarg", "list", "list-in-call", "shape"])
def test_deep_brackets_are_p005_at_the_first_opener_too_deep(kind):
    spec, line_no = _nested(kind, 1000)
    err = _errors(spec)
    col = _opener_column(spec.split("\n")[line_no - 1], MAX_NESTING + 1)
    assert _where(spec) == [("P005", line_no, col)], str(err)[:300]
    _assert_caret(err, spec)
    # at the limit: the ordinary diagnostics of the value (nested merged dims are even valid)
    at_limit, _ = _nested(kind, MAX_NESTING)
    try:
        check(parse(at_limit, FILE))
    except SpecError as exc:
        assert all(d.code != "P005" for d in exc.diagnostics), str(exc)[:300]


def test_very_deep_brackets_are_one_diagnostic():
    spec = _edit(ROPE, "pairing = neox", "pairing = " + "a(" * 20000 + ")" * 20000)
    assert _where(spec) == [("P005", 5, len("    pairing = ") + 2 * MAX_NESTING + 1)]


# ---------------------------------------------------------------------------------------------
# 3. line breaks: one count of lines for the parser, the diagnostics and the rendered report
# ---------------------------------------------------------------------------------------------

ODD_BREAKS = ["\f", "\v", "\r", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("ch", ODD_BREAKS, ids=[repr(c) for c in ODD_BREAKS])
@pytest.mark.parametrize("where", ["comment-first-line", "comment-before-end", "two-comments"])
def test_end_of_file_line_ignores_breaks_that_are_not_newlines(ch, where):
    body = ROPE[: ROPE.rindex("}")]          # missing '}': P003 just after the last line written
    if where == "comment-first-line":
        spec = f"# a{ch}b\n" + body
    elif where == "comment-before-end":
        spec = body.replace("    angles", f"    # x{ch}{ch}y\n    angles")
    else:
        spec = f"#{ch}\n#{ch}{ch}\n" + body.replace("    pairing", f"    # {ch}\n    pairing")
    err = _errors(spec)
    last = spec.rstrip().split("\n")
    assert _where(spec) == [("P003", len(last), len(last[-1]) + 1)], str(err)
    assert last[-1].endswith("angles = computed(base=10000)")
    _assert_caret(err, spec)


@pytest.mark.parametrize("ch", ODD_BREAKS, ids=[repr(c) for c in ODD_BREAKS])
def test_report_quotes_a_line_with_an_odd_character_under_the_right_column(ch):
    spec = ROPE.replace("\n", "\r\n")
    spec = _edit(spec, "pairing = neox", f"pairing = nexo  # {ch}{ch} !")
    err = _errors(spec)
    assert _where(spec) == [("C009", 5, 15)]
    _assert_caret(err, spec)


def test_unexpected_control_character_is_quoted_printably():
    spec = _edit(ROPE, "pairing = neox", "pairing =\v neox")
    err = _errors(spec)
    assert _where(spec) == [("P001", 5, 14)]
    _assert_caret(err, spec)


# ---------------------------------------------------------------------------------------------
# 4. names that become file names and identifiers
# ---------------------------------------------------------------------------------------------

def test_long_operator_name_is_c037_at_the_name():
    spec = _edit(ROPE, "rope r {", "rope " + "r" * 300 + " {")
    err = _errors(spec)
    assert _where(spec) == [("C037", 1, 6)]
    assert "128" in err.diagnostics[0].message
    _assert_caret(err, spec)


def test_long_tensor_name_is_c037_at_the_name():
    long = "p" * (MAX_NAME + 1)
    spec = _edit(_edit(ROPE, "in pos:", f"in {long}:"), "positions = pos", f"positions = {long}")
    assert _where(spec) == [("C037", 3, 8)]


def test_longest_operator_name_writes_every_target(tmp_path):
    name = "o" * MAX_NAME
    program = compile_spec(_edit(ROPE, "rope r {", f"rope {name} {{"))
    written = write_program(program, tmp_path, ready_targets())
    spec_level = ("CMakeLists.txt", f"ropegen_{name}.pc.in")     # the C target's files for the whole spec
    assert written and all(p.is_file() and (p.name.startswith(name) or p.name in spec_level) for p in written)
    assert _where(_edit(ROPE, "rope r {", f"rope {name}o {{")) == [("C037", 1, 6)]


# ---------------------------------------------------------------------------------------------
# 5. ggml_yarn: ext_factor 1 by default; freq_scale above 1 warns
# ---------------------------------------------------------------------------------------------

def _yarn(args: str) -> str:
    return _edit(ROPE, "computed(base=10000)", f"computed(base=10000, scaling=ggml_yarn({args}))")


def test_ggml_yarn_without_ext_factor_applies_the_yarn_ramp_and_magnitude():
    program = compile_spec(_yarn("freq_scale = 0.25, n_ctx_orig = 4096"))
    (op,) = program
    assert op.ir.angles.scaling.ext_factor == 1.0
    assert op.plan.angles == compile_spec(
        _yarn("freq_scale = 0.25, ext_factor = 1, n_ctx_orig = 4096")).operators[0].plan.angles
    assert isinstance(op.plan.angles, ExactAngles)
    assert op.plan.angles.magnitude == pytest.approx(1 + 0.1 * __import__("math").log(4))
    assert program.spec.warnings == ()
    # ext_factor = 0 stays available: plain interpolation, magnitude 1
    (plain,) = compile_spec(_yarn("freq_scale = 0.25, ext_factor = 0, n_ctx_orig = 4096"))
    assert plain.plan.angles.magnitude == 1.0


def test_freq_scale_above_one_is_a_warning_not_an_error(tmp_path):
    spec = _yarn("freq_scale = 4, n_ctx_orig = 4096")
    result = check(parse(spec, FILE))
    assert isinstance(result, ir.Spec) and len(result.operators) == 1
    (w,) = result.warnings
    col = _col(spec.split("\n")[6], "4, n_ctx")
    assert (w.code, w.severity, w.loc.line, w.loc.column) == ("C038", "warning", 7, col)
    rendered = w.render(spec)
    assert rendered.startswith(f"{FILE}:7:{col}: warning[C038]: ") and "error[" not in rendered
    assert "0.25" in (w.hint or "")

    with pytest.warns(SpecWarning, match=r"warning\[C038\]"):   # the Python API says it too
        compile_spec(spec)

    path = tmp_path / "yarn.rope"
    path.write_text(spec, encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "ropegen", "explain", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"{path}:7:{col}: warning[C038]" in run.stderr
    assert "warning" not in run.stdout


# ---------------------------------------------------------------------------------------------
# 6. in_sequence takes no arguments
# ---------------------------------------------------------------------------------------------

PACKED = """\
rope p {
    in x: f32[tokens=T, heads=2, head_dim=8]
    in seqlen: i32[B]
    out y = rotate(x)
    pairing = neox
    sequences = seqlen
    positions = in_sequence
    angles = computed(base=10000)
}
"""


@pytest.mark.parametrize("call,arg,code,says,hint", [
    ("in_sequence(start = 3)", "3", "C008", "names an input", "arange(start"),
    ("in_sequence(3)", "3", "C010", "no positional argument", "start=..."),
])
def test_in_sequence_arguments_are_checked(call, arg, code, says, hint):
    spec = _edit(PACKED, "positions = in_sequence", f"positions = {call}")
    err = _errors(spec)
    assert _where(spec) == [(code, 7, _col(spec.split("\n")[6], arg))], str(err)
    d = err.diagnostics[0]
    assert says in d.message and hint in (d.hint or ""), (d.message, d.hint)


def test_in_sequence_called_without_arguments_is_in_sequence():
    (op,) = check(parse(_edit(PACKED, "positions = in_sequence", "positions = in_sequence()"), FILE)).operators
    assert op.positions.kind is ir.PositionKind.IN_SEQUENCE


# ---------------------------------------------------------------------------------------------
# 7. cos/sin table widths
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pairing", ["neox", "gptj"])
@pytest.mark.parametrize("width,rotary", [(6, None), (16, None), (8, 4), (3, 4)])
def test_table_width_other_than_half_or_full_rotary_is_c018(pairing, width, rotary):
    spec = TABLE.replace("f32[P, 4]", f"f32[P, {width}]").replace("pairing = neox", f"pairing = {pairing}")
    if rotary is not None:
        spec = _edit(spec, "    out y", f"    rotary_dim = {rotary}\n    out y")
    err = _errors(spec)
    assert _where(spec) == [("C018", 3, 8)], str(err)
    r = rotary or 8
    assert f"{r // 2}" in err.diagnostics[0].hint and f"{r}" in err.diagnostics[0].hint


@pytest.mark.parametrize("pairing", ["neox", "gptj"])
def test_half_and_full_width_tables_check(pairing):
    for width in (4, 8):
        spec = TABLE.replace("f32[P, 4]", f"f32[P, {width}]").replace("pairing = neox", f"pairing = {pairing}")
        check(parse(spec, FILE))
    assert _where(TABLE.replace("f32[P, 4]", "f32[P, 7]"))[0][0] == "C018"


GLM = """\
rope g {
    in x: f32[batch=B, seq=S, heads=2, head_dim=16]
    in cos: f32[P, 4]
    in sin: f32[P, 4]
    in fs: i64[]
    out y = rotate(x)
    pairing = glm2d(inner = gptj)
    positions = glm2d(first_seqlen = fs)
    angles = table(cos = cos, sin = sin)
}
"""


@pytest.mark.parametrize("width", [5, 8, 16])
def test_glm2d_table_must_be_a_quarter_of_rotary_dim(width):
    check(parse(GLM, FILE))
    spec = GLM.replace("f32[P, 4]", f"f32[P, {width}]")
    assert _where(spec) == [("C018", 3, 8)]


# ---------------------------------------------------------------------------------------------
# a long source line is quoted around the caret, not whole
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_long_lines_are_quoted_around_the_caret(where):
    pad = " " * 3000
    bad = "pairing = neoxx"
    body = {"start": bad + pad, "middle": pad + bad + pad, "end": pad + bad}[where]
    text = ("rope r { in x: f32[tokens=T, heads=2, head_dim=8] in p: i64[T] out y = rotate(x) positions = p "
            "angles = computed(base = 10000) " + body + " }")
    with pytest.raises(SpecError) as e:
        compile_spec(text)
    (d,) = [d for d in e.value.diagnostics if d.code == "C009"]
    rendered = d.render(text)
    quoted, caret = rendered.split("\n")[1:3]
    assert len(quoted) < 230 and len(caret) < 230
    # the caret still points at the offending word in the quoted text
    col = caret.index("^")
    assert quoted[col:col + len("neoxx")] == "neoxx"
    assert caret.count("^") == len("neoxx")


def test_planned_constant_overflow_is_quoted_like_every_diagnostic():
    """freq_scale = 1e308 checks (it is a positive number) but ggml's float32 mscale overflows: the
    planner's C029 used to come without the quoted line and caret."""
    spec = _yarn("freq_scale = 1e308, n_ctx_orig = 4096").replace("angles", "angle_numerics = ggml\n    angles", 1)
    with pytest.warns(SpecWarning, match="C038"), pytest.raises(SpecError) as e:
        compile_spec(spec)
    (d,) = e.value.diagnostics
    assert d.code == "C029" and "overflows" in d.message
    rendered = str(e.value)
    assert rendered.count("\n") >= 2 and "^" in rendered, rendered
