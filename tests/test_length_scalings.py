"""The length-dependent scalings (longrope, dynamic_ntk) on small heads with original_max_positions 64,
so positions cross it cheaply.

* Diagnostics: factor lists of the wrong length or kind, a missing set, glm2d positions, rotary_dim 2,
  ggml numerics.
* Per call: every token rotates with the frequencies of max(position) + 1 of the whole call (the short
  set / the base up to 64, the long set / a grown base beyond), on every backend that runs here, checked
  against the float64 reference and against rotations written in this file from the definitions.
* Per packed sequence (lengths, indptr, with and without in_sequence offsets, empty sequences): each
  sequence's own length picks its frequencies.
* FrequencyRows: deterministic, cached per key, bounded, the planned row up to the original length.
* Bad inputs are ValueErrors on every backend and from the generated NumPy module itself.
* `ropegen explain --length`, and a mutation check that wrong rows are caught.
"""
from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen import backends
from ropegen.ops import reference
from ropegen.ops.rope.frequency_rows import FrequencyRows
from ropegen.spec.diagnostics import SpecError

L0 = 64
BASE = 10000.0
BACKENDS = ["numpy", "c"] + (["opencl"] if backends.get("opencl").unavailable() is None else [])


def short_set(n: int) -> list[float]:
    return [1.0 + 0.05 * c for c in range(n)]


def long_set(n: int) -> list[float]:
    return [1.5 * 1.25 ** c for c in range(n)]


def longrope(n: int, extra: str = ", factor = 4") -> str:
    return (f"longrope(short_factor = {short_set(n)}, long_factor = {long_set(n)}, "
            f"original_max_positions = {L0}{extra})")


def dynamic(factor: float = 2) -> str:
    return f"dynamic_ntk(factor = {factor}, original_max_positions = {L0})"


def call_spec(scaling: str, dtype: str = "f32", dim: int = 16, extra: str = "") -> str:
    return f"""
rope r {{
    in q:   {dtype}[tokens=T, heads=2, head_dim={dim}]
    in k:   {dtype}[tokens=T, heads=1, head_dim={dim}]
    in pos: i64[T]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing   = neox
    positions = pos
    {extra}
    angles    = computed(base = {BASE}, scaling = {scaling})
}}"""


# sequence input declarations and settings: (inputs, sequences, positions)
PACKED = {
    "lengths": ("in seqlens: i32[N]", "seqlens", "in_sequence"),
    "lengths+offsets": ("in seqlens: i32[N] in offsets: i64[N]", "seqlens", "in_sequence(start = offsets)"),
    "indptr": ("in indptr: i32[N1]", "indptr(indptr)", "in_sequence"),
    "indptr+offsets": ("in indptr: i32[N1] in offsets: i64[N]", "indptr(indptr)", "in_sequence(start = offsets)"),
}


def packed_spec(kind: str, scaling: str, dtype: str = "f32", dim: int = 16) -> str:
    decl, seqs, pos = PACKED[kind]
    return f"""
rope r {{
    in q: {dtype}[tokens=T, heads=2, head_dim={dim}]
    {decl}
    out q_rot = rotate(q)
    pairing   = neox
    sequences = {seqs}
    positions = {pos}
    angles    = computed(base = {BASE}, scaling = {scaling})
}}"""


def compile_one(text: str):
    return ropegen.compile(text)["r"]


# ---------------------------------------------------------------------------------------------
# the definitions, in float64, independent of ropegen

def base_inv(dim: int, base: float = BASE) -> np.ndarray:
    return base ** -(np.arange(0, dim, 2, dtype=np.float64) / dim)


def longrope_freqs(dim: int, length: int, factor: float | None = 4, attention: float | None = None):
    """(inv_freq, magnitude): HF's _compute_longrope_parameters, long set when length > L0."""
    n = dim // 2
    ext = np.array(long_set(n) if length > L0 else short_set(n))
    if attention is not None:
        gain = attention
    elif factor is None or factor <= 1:
        gain = 1.0
    else:
        gain = math.sqrt(1 + math.log(factor) / math.log(L0))
    return base_inv(dim) / ext, gain


def dynamic_base(dim: int, length: int, factor: float = 2) -> float:
    L = max(length, L0)
    return BASE * (factor * L / L0 - (factor - 1)) ** (dim / (dim - 2))


def dynamic_freqs(dim: int, length: int, factor: float = 2):
    return base_inv(dim, dynamic_base(dim, length, factor)), 1.0


def rotate_neox(x: np.ndarray, pos: np.ndarray, inv: np.ndarray, gain: float) -> np.ndarray:
    """x [T, H, D] (float64), pos [T], inv [T, D/2] or [D/2]: NeoX halves rotated by pos * inv."""
    x = x.astype(np.float64)
    theta = pos.astype(np.float64)[:, None] * np.broadcast_to(inv, (pos.size, inv.shape[-1]))
    c, s = (np.cos(theta) * gain)[:, None, :], (np.sin(theta) * gain)[:, None, :]
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}
# bf16 stores 8 significant bits: half an ulp of values up to 4 is 2^-7
TOL = {"f32": dict(rtol=2e-6, atol=2e-5), "bf16": dict(rtol=2 ** -7, atol=2 ** -6)}


def draw(rng, shape, dtype: str) -> np.ndarray:
    return rng.standard_normal(shape).astype(DTYPES[dtype])


def f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def expect_code(text: str, code: str, *fragments: str) -> None:
    with pytest.raises(SpecError) as ei:
        ropegen.compile(text)
    diags = ei.value.diagnostics
    assert [d.code for d in diags] == [code], str(ei.value)
    for frag in fragments:
        assert frag in diags[0].message, diags[0].message


# ---------------------------------------------------------------------------------------------
# 1. diagnostics

def test_factor_list_of_wrong_length_is_c018_naming_the_count():
    bad = (f"longrope(short_factor = {short_set(7)}, long_factor = {long_set(8)}, "
           f"original_max_positions = {L0})")
    expect_code(call_spec(bad), "C018", "short_factor has 7 factors", "expected 8")
    bad = (f"longrope(short_factor = {short_set(8)}, long_factor = {long_set(9)}, "
           f"original_max_positions = {L0})")
    expect_code(call_spec(bad), "C018", "long_factor has 9 factors", "expected 8")
    # rotary_dim, not head_dim, counts the pairs
    expect_code(call_spec(longrope(16), dim=32, extra="rotary_dim = 16"), "C018", "has 16 factors", "expected 8")
    compile_one(call_spec(longrope(8), dim=32, extra="rotary_dim = 16"))


@pytest.mark.parametrize("value", ["[]", "1.0", "short"])
def test_factor_set_that_is_not_a_list_is_c008(value):
    bad = f"longrope(short_factor = {value}, long_factor = {long_set(8)}, original_max_positions = {L0})"
    expect_code(call_spec(bad), "C008", "short_factor must be a list of numbers")


def test_missing_short_factor_is_c011():
    bad = f"longrope(long_factor = {long_set(8)}, original_max_positions = {L0})"
    expect_code(call_spec(bad), "C011", "short_factor")


def test_length_scalings_need_the_length_of_the_call_c030():
    for scaling in (longrope(8), dynamic()):
        text = f"""
rope r {{
    in q: f32[batch=B, seq=S, heads=2, head_dim=32]
    in start_pos: i64[] in pad_len: i64[B] in first_seqlen: i64[]
    out q_rot = rotate(q)
    pairing   = glm2d(inner = gptj)
    positions = glm2d(start = start_pos, pad = pad_len, first_seqlen = first_seqlen)
    angles    = computed(base = 10000, scaling = {scaling})
}}"""
        expect_code(text, "C030", "needs the length of the call")


def test_dynamic_ntk_with_rotary_dim_2_is_c029():
    expect_code(call_spec(dynamic(), extra="rotary_dim = 2"), "C029", "rotary_dim above 2")


@pytest.mark.parametrize("scaling", [longrope(8), dynamic()])
def test_ggml_numerics_take_no_length_scaling_c030(scaling):
    expect_code(call_spec(scaling, extra="angle_numerics = ggml"), "C030", "ggml")


# ---------------------------------------------------------------------------------------------
# 2. per call

def run_call(op, backend, q, k, pos):
    return [f64(o) for o in op.run_all(q, k, pos, backend=backend)]


def check_call(op, backend, dtype, q, k, pos, inv, gain):
    """The op's outputs against the float64 reference and the rotation by (inv, gain)."""
    got = run_call(op, backend, q, k, pos)
    ref = reference.evaluate(op.ir, {"q": q, "k": k, "pos": pos})
    for name, x, out in (("q_rot", q, got[0]), ("k_rot", k, got[1])):
        want = rotate_neox(f64(x), pos, inv, gain)
        np.testing.assert_allclose(ref[name], want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out, want, **TOL[dtype])
    return got


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype,dim", [("f32", 16), ("bf16", 32)])
def test_longrope_per_call_takes_the_set_of_the_largest_position(backend, dtype, dim):
    op = compile_one(call_spec(longrope(dim // 2), dtype, dim))
    rng = np.random.default_rng(1)
    q, k = draw(rng, (5, 2, dim), dtype), draw(rng, (5, 1, dim), dtype)
    short, gain = longrope_freqs(dim, L0)
    long, gain_long = longrope_freqs(dim, L0 + 1)
    assert gain == gain_long == math.sqrt(1 + math.log(4) / math.log(L0))
    # all below L0 (the largest is L0 - 1: length L0, still short)
    inside = np.array([40, 3, 0, 17, L0 - 1], np.int64)
    check_call(op, backend, dtype, q, k, inside, short, gain)
    # one token at L0: length L0 + 1, every token takes the long set, position 40 included
    beyond = np.array([40, 3, 0, 17, L0], np.int64)
    got = check_call(op, backend, dtype, q, k, beyond, long, gain)
    first_long = rotate_neox(f64(q[:1]), beyond[:1], long, gain)
    first_short = rotate_neox(f64(q[:1]), beyond[:1], short, gain)
    np.testing.assert_allclose(got[0][:1], first_long, **TOL[dtype])
    assert np.abs(got[0][:1] - first_short).max() > 0.1     # the sets really differ at position 40
    # a call far beyond, in any order
    far = np.array([200, 1, 90, 0, 5], np.int64)
    check_call(op, backend, dtype, q, k, far, long, gain)


@pytest.mark.parametrize("backend", BACKENDS)
def test_longrope_attention_factor_and_no_factor(backend):
    rng = np.random.default_rng(2)
    q, k = draw(rng, (3, 2, 16), "f32"), draw(rng, (3, 1, 16), "f32")
    pos = np.array([5, 70, 9], np.int64)
    op = compile_one(call_spec(longrope(8, ", factor = 4, attention_factor = 0.75")))
    check_call(op, backend, "f32", q, k, pos, longrope_freqs(16, 71)[0], 0.75)
    op = compile_one(call_spec(longrope(8, "")))
    check_call(op, backend, "f32", q, k, pos, longrope_freqs(16, 71, None)[0], 1.0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype,dim", [("f32", 16), ("bf16", 32)])
def test_dynamic_ntk_per_call_grows_the_base_with_the_largest_position(backend, dtype, dim):
    op = compile_one(call_spec(dynamic(2), dtype, dim))
    rng = np.random.default_rng(3)
    q, k = draw(rng, (4, 2, dim), dtype), draw(rng, (4, 1, dim), dtype)
    planned = base_inv(dim)
    check_call(op, backend, dtype, q, k, np.array([30, 0, L0 - 1, 7], np.int64), planned, 1.0)
    for top in (L0, 100, 1000):
        pos = np.array([30, 0, top, 7], np.int64)
        inv = dynamic_freqs(dim, top + 1)[0]
        assert dynamic_base(dim, top + 1) > BASE
        got = check_call(op, backend, dtype, q, k, pos, inv, 1.0)
        if top >= 100:   # position 30 with the grown base, not the planned one
            first_planned = rotate_neox(f64(q[:1]), pos[:1], planned, 1.0)
            np.testing.assert_allclose(got[0][:1], rotate_neox(f64(q[:1]), pos[:1], inv, 1.0), **TOL[dtype])
            assert np.abs(got[0][:1] - first_planned).max() > 0.05


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pairing", ["neox", "gptj"])
def test_partial_rotary_takes_rotary_dim_pairs_and_keeps_the_tail(backend, pairing):
    # Phi-4-mini's shape: head_dim 32, rotary_dim 16, so 8 factors per set and d = 16 in every formula
    for scaling, freqs in ((longrope(8), lambda L: longrope_freqs(16, L)),
                           (dynamic(2), lambda L: dynamic_freqs(16, L))):
        op = compile_one(call_spec(scaling, dim=32, extra="rotary_dim = 16").replace("neox", pairing))
        rng = np.random.default_rng(8)
        q, k = draw(rng, (3, 2, 32), "f32"), draw(rng, (3, 1, 32), "f32")
        pos = np.array([33, 2, 90], np.int64)
        inv, gain = freqs(91)
        got = op.run_all(q, k, pos, backend=backend)
        for x, out in ((q, got[0]), (k, got[1])):
            head = f64(x[..., :16])
            if pairing == "gptj":    # adjacent pairs: the same rotation on the de-interleaved halves
                order = np.r_[0:16:2, 1:16:2]
                head = head[..., order]
            want = rotate_neox(head, pos, inv, gain)
            if pairing == "gptj":
                want = want[..., np.argsort(order)]
            np.testing.assert_allclose(f64(out)[..., :16], want, **TOL["f32"])
            assert np.array_equal(f64(out)[..., 16:], f64(x)[..., 16:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_positions_take_the_largest_of_the_whole_call(backend):
    op = ropegen.compile(f"""
rope r {{
    in q:   f32[batch=B, seq=S, heads=2, head_dim=16]
    in pos: i64[B, S]
    out q_rot = rotate(q)
    pairing   = neox
    positions = pos
    angles    = computed(base = {BASE}, scaling = {longrope(8)})
}}""")["r"]
    rng = np.random.default_rng(4)
    q = draw(rng, (2, 3, 2, 16), "f32")
    pos = np.array([[0, 1, 2], [10, 11, 80]], np.int64)    # only the second row crosses L0
    long, gain = longrope_freqs(16, 81)
    want = rotate_neox(q.reshape(6, 2, 16), pos.reshape(6), long, gain).reshape(2, 3, 2, 16)
    np.testing.assert_allclose(reference.evaluate(op.ir, {"q": q, "pos": pos})["q_rot"], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(f64(op.run(q, pos, backend=backend)), want, **TOL["f32"])


# ---------------------------------------------------------------------------------------------
# 3. per packed sequence

def packed_arrays(kind: str, q: np.ndarray, lens: list[int], offsets: list[int]) -> tuple[list, dict]:
    """(run arguments, reference arrays by name) of a packed call."""
    names = {"lengths": ["seqlens"], "lengths+offsets": ["seqlens", "offsets"],
             "indptr": ["indptr"], "indptr+offsets": ["indptr", "offsets"]}[kind]
    vals = {"seqlens": np.array(lens, np.int32),
            "indptr": np.concatenate([[0], np.cumsum(lens)]).astype(np.int32),
            "offsets": np.array(offsets, np.int64)}
    args = [q] + [vals[n] for n in names]
    return args, dict({"q": q}, **{n: vals[n] for n in names})


def per_sequence_expected(q, lens, offsets, freqs):
    """Each sequence's tokens rotated at offset + index with the frequencies of offset + length."""
    out, t = [], 0
    for n, o in zip(lens, offsets):
        pos = o + np.arange(n, dtype=np.int64)
        inv, gain = freqs(o + n)
        out.append(rotate_neox(f64(q[t:t + n]), pos, inv, gain))
        t += n
    return np.concatenate(out)


@pytest.mark.parametrize("kind", sorted(PACKED))
@pytest.mark.parametrize("form", ["longrope", "dynamic_ntk"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_each_packed_sequence_takes_its_own_frequencies(kind, form, dtype):
    dim = 16
    scaling, freqs = ((longrope(8), lambda L: longrope_freqs(dim, L)) if form == "longrope" else
                      (dynamic(3), lambda L: dynamic_freqs(dim, L, 3)))
    op = compile_one(packed_spec(kind, scaling, dtype, dim))
    with_offsets = kind.endswith("offsets")
    # short / empty / crossing L0 by its offset or by its own length / exactly L0 / empty at the end
    lens = [5, 0, 8, 70, 4, 0]
    offsets = [10, 500, 60, 0, 60, 7] if with_offsets else [0] * len(lens)
    rng = np.random.default_rng(5)
    q = draw(rng, (sum(lens), 2, dim), dtype)
    args, arrays = packed_arrays(kind, q, lens, offsets)
    want = per_sequence_expected(q, lens, offsets, freqs)
    np.testing.assert_allclose(reference.evaluate(op.ir, arrays)["q_rot"], want, rtol=1e-12, atol=1e-12)
    outs = {b: f64(op.run(*args, backend=b)) for b in BACKENDS}
    for b, got in outs.items():
        np.testing.assert_allclose(got, want, **TOL[dtype], err_msg=b)
    if dtype == "f32":
        np.testing.assert_allclose(outs["c"], outs["numpy"], rtol=2e-6, atol=2e-6)
    # the sequences really choose differently: the first sequence with the frequencies of the 4th
    other = rotate_neox(f64(q[:5]), offsets[0] + np.arange(5), *freqs(offsets[3] + lens[3]))
    assert np.abs(outs["numpy"][:5] - other).max() > 0.05


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_sequences_empty_and_no_sequences(backend):
    op = compile_one(packed_spec("lengths+offsets", longrope(8)))
    q = np.zeros((0, 2, 16), np.float32)
    for lens in ([0, 0], []):
        out = op.run(q, np.array(lens, np.int32), np.full(len(lens), 100, np.int64), backend=backend)
        assert out.shape == (0, 2, 16)


# ---------------------------------------------------------------------------------------------
# 4. rows

@pytest.mark.parametrize("form", ["longrope", "dynamic_ntk"])
def test_rows_are_deterministic_cached_bounded_and_planned_up_to_L0(form):
    dim = 16
    scaling, freqs = ((longrope(8), lambda L: longrope_freqs(dim, L)) if form == "longrope" else
                      (dynamic(2), lambda L: dynamic_freqs(dim, L)))
    op = compile_one(call_spec(scaling, dim=dim))
    planned = np.array(op.plan.angles.inv_freq, dtype=np.float64)
    rows, again = FrequencyRows(op.plan), FrequencyRows(op.plan)
    for L in (0, 1, 17, L0):
        row = rows.at(L)
        assert row.dtype == np.float64 and not row.flags.writeable
        assert np.array_equal(row, planned), (L, row, planned)
        assert row is rows.at(L0)          # one key for every length up to L0
    for L in (L0 + 1, 100, 5000):
        row = rows.at(L)
        assert np.array_equal(row, again.at(L))    # the same bits from a fresh cache
        assert not np.array_equal(row, planned)
        np.testing.assert_allclose(row, freqs(L)[0], rtol=1e-14, atol=0)
        assert rows.at(L) is row
    if form == "longrope":
        assert rows.at(L0 + 1) is rows.at(10 ** 9)       # one long row
    else:
        assert not np.array_equal(rows.at(100), rows.at(101))
    # bounded: the oldest key goes, and comes back with the same bits
    small = FrequencyRows(op.plan)
    small.CACHED = 2
    first = small.at(1000)
    for L in range(1001, 1010):
        small.at(L)
    assert len(small._cache) <= 2
    back = small.at(1000)
    assert np.array_equal(back, first)
    if form == "dynamic_ntk":
        assert back is not first
    assert FrequencyRows.CACHED >= 1024


def test_rows_of_a_call_one_per_unit():
    op = compile_one(packed_spec("lengths+offsets", longrope(8)))
    rows = FrequencyRows(op.plan)
    arrays = {"seqlens": np.array([3, 0, 2], np.int32), "offsets": np.array([62, 900, 63], np.int64)}
    got = rows.for_call(arrays.__getitem__, {"q": (5, 2, 16), **{n: a.shape for n, a in arrays.items()}})
    assert got.shape == (3, 8) and got.dtype == np.float64 and got.flags.c_contiguous
    short, long = longrope_freqs(16, 1)[0], longrope_freqs(16, 100)[0]
    np.testing.assert_allclose(got, [long, short, long], rtol=1e-14)   # 65, 0 (empty), 65


# ---------------------------------------------------------------------------------------------
# 5. bad inputs

@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_positions_are_value_errors(backend):
    op = compile_one(call_spec(longrope(8)))
    q, k = np.zeros((4, 2, 16), np.float32), np.zeros((4, 1, 16), np.float32)
    for pos in (np.arange(5, dtype=np.int64), np.arange(4, dtype=np.float64), np.arange(8, dtype=np.int64).reshape(4, 2),
                np.arange(4, dtype=np.int16)):
        with pytest.raises(ValueError):
            op.run(q, k, pos, backend=backend)
    with pytest.raises(ValueError):
        op.run(q, np.zeros((3, 1, 16), np.float32), np.arange(4), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scaling", [longrope(8), dynamic(2), dynamic(2).replace("= 2", "= 1000")])
def test_extreme_positions_run_and_stay_finite(backend, scaling):
    # max(position) + 1 overflows int64 at the top: the length is a Python int, the rows stay finite
    op = compile_one(call_spec(scaling))
    q, k = np.ones((3, 2, 16), np.float32), np.ones((3, 1, 16), np.float32)
    for pos in ([0, 1, 2 ** 63 - 1], [-(2 ** 63), -5, 0], [-3, -2, -1], [10 ** 15, 1, 2]):
        pos = np.array(pos, np.int64)
        for out in op.run_all(q, k, pos, backend=backend):
            assert np.isfinite(f64(out)).all()
    row = FrequencyRows(op.plan).at(2 ** 63)
    assert np.isfinite(row).all() and (row > 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(PACKED))
def test_bad_sequences_are_value_errors(backend, kind):
    op = compile_one(packed_spec(kind, dynamic(2)))
    q = np.zeros((6, 2, 16), np.float32)
    bad = []
    for lens in ([2, 2], [4, 4], [7, -1]):          # sums short, over, a negative length
        bad.append(packed_arrays(kind, q, lens, [0] * len(lens))[0])
    args = packed_arrays(kind, q, [3, 3], [0, 0])[0]
    bad.append([args[0], args[1].astype(np.float32)] + args[2:])       # float sequence input
    if kind.endswith("offsets"):
        bad.append(args[:2] + [np.zeros(3, np.int64)])                 # offsets of the wrong count
        bad.append(args[:2] + [np.array([0, 2 ** 63 - 2], np.int64)])  # a position beyond int64
    for a in bad:
        with pytest.raises(ValueError):
            op.run(*a, backend=backend)
    op.run(*args, backend=backend)     # the good call still runs after the refusals


def _generated_run(op):
    ns: dict = {}
    exec(compile(op.sources["numpy"][f"{op.name}.py"], "<generated>", "exec"), ns)
    return ns["run"]


def test_generated_numpy_module_checks_its_inv_freq():
    op = compile_one(call_spec(dynamic(2)))
    run = _generated_run(op)
    q, k, pos = np.ones((3, 2, 16), np.float32), np.ones((3, 1, 16), np.float32), np.arange(3)
    good = FrequencyRows(op.plan).at(3)[None]
    run(q, k, pos, inv_freq=good)
    for inv in (None, good[0], np.ones((2, 8)), np.ones((1, 7)), np.ones((1, 8, 1))):
        with pytest.raises(ValueError, match="inv_freq"):
            run(q, k, pos, inv_freq=inv)
    packed = compile_one(packed_spec("indptr", longrope(8)))
    prun = _generated_run(packed)
    q = np.ones((5, 2, 16), np.float32)
    indptr = np.array([0, 2, 5], np.int32)
    prun(q, indptr, inv_freq=np.ones((2, 8)))
    for inv in (None, np.ones((1, 8)), np.ones((3, 8))):
        with pytest.raises(ValueError, match="inv_freq"):
            prun(q, indptr, inv_freq=inv)


# ---------------------------------------------------------------------------------------------
# 6. explain --length

def test_explain_names_the_set_and_base_at_each_length(tmp_path, capsys):
    from ropegen import cli
    spec = tmp_path / "s.rope"
    spec.write_text(call_spec(longrope(8)) + call_spec(dynamic(2)).replace("rope r", "rope d"))
    assert cli.main(["explain", str(spec), "--length", "10", "--length", "100"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"at length\s+10: short_factor", out), out
    assert re.search(r"at length\s+100: long_factor", out), out
    m10 = re.search(r"at length\s+10: base ([0-9.e+]+) \(L = 64\)", out)
    m100 = re.search(r"at length\s+100: base ([0-9.e+]+) \(L = 100\)", out)
    assert m10 and m100, out
    assert float(m10.group(1)) == BASE
    assert math.isclose(float(m100.group(1)), dynamic_base(16, 100), rel_tol=1e-14)


# ---------------------------------------------------------------------------------------------
# 7. the checks above can fail

def test_wrong_rows_are_caught():
    op = compile_one(call_spec(longrope(8)))
    run = _generated_run(op)
    rng = np.random.default_rng(7)
    q, k = draw(rng, (3, 2, 16), "f32"), draw(rng, (3, 1, 16), "f32")
    pos = np.array([20, 0, 80], np.int64)
    ref = reference.evaluate(op.ir, {"q": q, "k": k, "pos": pos})["q_rot"]
    rows = FrequencyRows(op.plan)
    right = run(q, k, pos, inv_freq=rows.at(81)[None])[0]
    np.testing.assert_allclose(f64(right), ref, **TOL["f32"])
    wrong = run(q, k, pos, inv_freq=rows.at(10)[None])[0]     # the short set on a long call
    assert np.abs(f64(wrong) - ref).max() > 0.1
    packed = compile_one(packed_spec("lengths", dynamic(2)))
    prun = _generated_run(packed)
    q = draw(rng, (130, 2, 16), "f32")
    seqlens = np.array([30, 100], np.int32)
    ref = reference.evaluate(packed.ir, {"q": q, "seqlens": seqlens})["q_rot"]
    prows = FrequencyRows(packed.plan).rows([30, 100])
    np.testing.assert_allclose(f64(prun(q, seqlens, inv_freq=prows)[0]), ref, **TOL["f32"])
    swapped = prun(q, seqlens, inv_freq=prows[::-1].copy())[0]
    assert np.abs(f64(swapped) - ref).max() > 0.05
