"""The C kernels of the RMSNorm family (residual add, weight offset, cast order, output type): every
example against the float64 reference, and bit for bit against a float32 NumPy transcription of the
numerics contract that sums the squares in the kernel's documented order; in place (inplace= and out=
over the inputs, streamed or not, also under AddressSanitizer); and that the transcription of the other
cast order or residual add is told apart, so that a kernel implementing the wrong one fails.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.backends.c import build as cbuild
from ropegen.backends.c.backend import CBackend
from ropegen.crosscheck import _storage_dtype, compare
from ropegen.ops import reference
from ropegen.ops.inputs import CASES, make_inputs

ROOT = Path(__file__).resolve().parent.parent
BACKEND = CBackend()
FAMILY = {op.name: op for op in ropegen.compile(ROOT / "examples" / "rmsnorm_family.rope")}
RESIDUAL = [n for n, op in FAMILY.items() if op.plan.residual]

pytestmark = pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable()))


# ---------------------------------------------------------------------------------------------
# the contract, transcribed in NumPy's float32 / float64 (every operation IEEE, rounded to nearest)

def kernel_sum_squares(sq: np.ndarray) -> np.ndarray:
    """Row sums of `sq` in templates/c/rmsnorm.c.j2's order: 4 * LANES partial sums (LANES = one vector
    of the stash type: 16 floats, 8 doubles), each a sequential sum over a block of 64 * LANES
    elements joining the row total per block, the tail added element by element, then a pairwise tree."""
    lanes = 8 if sq.dtype == np.float64 else 16
    sums, block = 4 * lanes, 64 * lanes
    rows, n = sq.shape
    total = np.zeros((rows, sums), sq.dtype)
    for b in range(n // block):
        part = np.zeros((rows, sums), sq.dtype)
        for k in sq[:, b * block:(b + 1) * block].reshape(rows, block // sums, sums).transpose(1, 0, 2):
            part = part + k
        total = total + part
    for c in range(n // block * block, n, sums):    # element i joins partial sum i % sums (c is a multiple)
        piece = sq[:, c:c + sums]
        total[:, :piece.shape[1]] += piece
    w = sums // 2
    while w:
        total[:, :w] = total[:, :w] + total[:, w:2 * w]
        w //= 2
    return total[:, 0]


def transcribe(plan, arrays, cast: str | None = None, residual_add: str | None = None) -> dict[str, np.ndarray]:
    """The outputs as the contract's steps 1-6 state them; `cast` / `residual_add` override the plan's."""
    cast = cast or plan.cast
    residual_add = residual_add or plan.residual_add
    st, pr, xt, yt = (d.np_dtype.type for d in (plan.stash, plan.product, plan.x, plan.y))
    shape = np.shape(arrays[plan.x_name])
    x = np.asarray(arrays[plan.x_name]).reshape(-1, plan.norm_size)
    out = {}
    with np.errstate(all="ignore"):
        if plan.residual:
            total = x.astype(st) + np.asarray(arrays[plan.residual]).reshape(x.shape).astype(st)
            h = total.astype(xt)
            out[plan.sum_output] = h.reshape(shape)
            s = h.astype(st) if residual_add == "storage" else total
        else:
            s = x.astype(st)
        mean_square = kernel_sum_squares(s * s) / st(plan.norm_size)
        inv_rms = st(1) / np.sqrt(mean_square + st(plan.epsilon_stash))
        n = s * inv_rms[:, None]
        v = n.astype(xt).astype(pr) if cast == "before_scale" else n.astype(pr)
        scale = np.asarray(arrays[plan.scale_name]).reshape(plan.padded_scale_shape)
        w = np.broadcast_to(scale, plan.norm_shape).reshape(-1).astype(pr)
        if plan.weight_offset:
            w = w + pr(plan.weight_offset)
        out[plan.out] = (v * w).astype(yt).reshape(shape)
    return out


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in units in the last place of their (common) float type, counted on the ordered bits."""
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    low = np.iinfo(bits).min

    def ordered(v):
        i = np.ascontiguousarray(v).view(bits).astype(np.int64)
        return np.where(i < 0, low - i, i)
    return np.abs(ordered(a) - ordered(b))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and np.array_equal(np.ascontiguousarray(a).view(np.uint8),
                                                 np.ascontiguousarray(b).view(np.uint8))


def _cast(values, dtype):
    return np.asarray(values, np.float64).astype(dtype.np_dtype)


def exposing_inputs(op, rows: int, seed: int) -> dict[str, np.ndarray]:
    """x of magnitude 64..128 and a residual below one of x's ulps there: h's rounding to x's type
    drops most of the residual (so `storage` and `stash` differ), and the normalized values sit in
    the middle of their binades (so rounding them before the scale matters)."""
    rng = np.random.default_rng(seed)
    p = op.plan
    x = next(t for t in p.inputs if t.name == p.x_name)
    shape = tuple(rows if isinstance(d, str) else d for d in x.shape)
    arrays = {p.x_name: _cast(rng.choice([-1.0, 1.0], shape) * rng.uniform(64, 128, shape), p.x),
              p.scale_name: _cast(rng.uniform(0.5, 2.0, p.scale_shape), p.scale)}
    if p.residual:
        arrays[p.residual] = _cast(rng.uniform(-0.45, 0.45, shape), p.x)
    return arrays


def _args(op, arrays):
    return [arrays[n] for n in op.inputs]


def _run_c(op, arrays, **options) -> dict[str, np.ndarray]:
    return dict(zip(op.outputs, op.run_all(*_args(op, arrays), backend="c", **options)))


# ---------------------------------------------------------------------------------------------
# every example: the reference, and the transcription bit for bit

@pytest.mark.parametrize("name", list(FAMILY))
def test_example_matches_reference_and_transcription(name, monkeypatch):
    op = FAMILY[name]
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=700 + i)
        ref = reference.evaluate(op.ir, arrays)
        want = transcribe(op.plan, arrays)
        magnitude = max(float(np.max(np.abs(a.astype(np.float64)))) for a in arrays.values())
        for isa in ("base", "avx2", ""):
            monkeypatch.setenv("ROPEGEN_ISA", isa)
            got = _run_c(op, arrays, threads=3)
            for o in op.outputs:
                _, _, ok = compare(got[o], ref[o], _storage_dtype(op), magnitude)
                assert ok, f"{name} {case.label} {o}: outside the reference's tolerance"
                # every step is one IEEE operation in the same order in both: the same bits
                assert same_bits(got[o], want[o]), \
                    f"{name} {case.label} {o} ISA {isa or 'best'}: {int(ulps(got[o], want[o]).max())} ulps from the transcription"


@pytest.mark.parametrize("name", list(FAMILY))
def test_exposing_inputs_match_the_transcription(name):
    op = FAMILY[name]
    arrays = exposing_inputs(op, rows=37, seed=11)
    got, want = _run_c(op, arrays, threads=2), transcribe(op.plan, arrays)
    for o in op.outputs:
        assert same_bits(got[o], want[o]), f"{name} {o}"


def test_kernel_sum_order_is_not_numpys():
    # the exact comparisons above lean on the order: a plain float32 sum gives other bits somewhere
    rng = np.random.default_rng(3)
    sq = rng.uniform(0, 1, (64, 2304)).astype(np.float32) ** 2
    assert not np.array_equal(kernel_sum_squares(sq), sq.sum(axis=1, dtype=np.float32))
    assert np.allclose(kernel_sum_squares(sq), sq.astype(np.float64).sum(axis=1), rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# a wrong cast order or residual add would fail: the other mode's transcription is far off

def _other(word: str, pair: tuple[str, str]) -> str:
    return pair[1] if word == pair[0] else pair[0]


@pytest.mark.parametrize("name", list(FAMILY))
def test_the_other_cast_order_is_caught(name):
    op = FAMILY[name]
    arrays = exposing_inputs(op, rows=37, seed=12)
    got = _run_c(op, arrays)[op.plan.out]
    wrong = transcribe(op.plan, arrays, cast=_other(op.plan.cast, ("before_scale", "after_scale")))[op.plan.out]
    if op.plan.x == op.plan.product:
        # x in the product type: rounding the normalized value to it is no rounding at all
        assert same_bits(got, wrong)
        return
    assert not same_bits(got, wrong), f"{name}: the other cast order gives the same bits"


@pytest.mark.parametrize("name", RESIDUAL)
def test_the_other_residual_add_is_caught(name):
    op = FAMILY[name]
    arrays = exposing_inputs(op, rows=37, seed=13)
    got = _run_c(op, arrays)
    wrong = transcribe(op.plan, arrays, residual_add=_other(op.plan.residual_add, ("storage", "stash")))
    assert same_bits(got[op.plan.sum_output], wrong[op.plan.sum_output])    # h is the same in both
    assert not same_bits(got[op.plan.out], wrong[op.plan.out]), f"{name}: the other residual add gives the same bits"


# with a float32 output the modes are thousands of ulps apart, far beyond a 1-ulp tolerance
VARIANT = """
rmsnorm variant {{
    in x:        {x}[T, 2304]
{residual_decl}    in weight:   bf16[2304]
    out y
{h_decl}{settings}    dtype   = f32
    epsilon = 1e-6
}}
"""


def _variant(x: str, settings: str, residual: bool):
    text = VARIANT.format(x=x, settings=settings,
                          residual_decl=f"    in residual: {x}[T, 2304]\n" if residual else "",
                          h_decl="    out h\n    residual = residual\n" if residual else "")
    return ropegen.compile(text)["variant"]


@pytest.mark.parametrize("x, settings, residual, field, words", [
    ("bf16", "    cast = after_scale\n    weight_offset = 1\n", False, "cast", ("before_scale", "after_scale")),
    ("bf16", "    cast = before_scale\n", False, "cast", ("before_scale", "after_scale")),
    ("bf16", "    residual_add = storage\n", True, "residual_add", ("storage", "stash")),
    ("f16", "    residual_add = stash\n    cast = after_scale\n", True, "residual_add", ("storage", "stash")),
])
def test_wrong_modes_exceed_one_ulp(x, settings, residual, field, words):
    op = _variant(x, settings, residual)
    arrays = exposing_inputs(op, rows=29, seed=14)
    got = _run_c(op, arrays)[op.plan.out]
    assert got.dtype == np.float32
    right = transcribe(op.plan, arrays)[op.plan.out]
    assert same_bits(got, right)
    wrong = transcribe(op.plan, arrays, **{field: _other(getattr(op.plan, field), words)})[op.plan.out]
    assert int(ulps(got, wrong).max()) > 1000, f"{field}: the other mode is within {int(ulps(got, wrong).max())} ulps"


# ---------------------------------------------------------------------------------------------
# in place: y over x, h over the residual, the same bits as out of place

def _copies(arrays):
    return {k: np.array(v, copy=True) for k, v in arrays.items()}


@pytest.mark.parametrize("stream", ["0", "1"])
@pytest.mark.parametrize("name", list(FAMILY))
def test_in_place_gives_the_out_of_place_bits(name, stream, monkeypatch):
    monkeypatch.setenv("ROPEGEN_STREAM", stream)     # non-temporal stores of y through a piece buffer, or not
    op = FAMILY[name]
    p = op.plan
    arrays = exposing_inputs(op, rows=100, seed=21)        # several scheduling chunks, three threads
    want = _run_c(op, _copies(arrays), threads=3)
    sources = {p.out: p.x_name, **({p.sum_output: p.residual} if p.residual else {})}

    a = _copies(arrays)
    outs = op.run_all(*_args(op, a), backend="c", inplace=True, threads=3)
    for o, got in zip(op.outputs, outs):
        assert np.shares_memory(got, a[sources[o]]), f"{name} {o}: not written over {sources[o]}"
        assert same_bits(got, want[o]), f"{name} {o}: in place differs from out of place"

    # out= arrays that are the inputs, all of them or one at a time
    for over in [list(sources)] + ([[o] for o in sources] if len(sources) > 1 else []):
        a = _copies(arrays)
        out = tuple(a[sources[o]] if o in over else np.empty(a[p.x_name].shape, want[o].dtype)
                    for o in op.outputs)
        outs = op.run_all(*_args(op, a), backend="c", out=out, threads=3)
        for o, got in zip(op.outputs, outs):
            assert same_bits(got, want[o]), f"{name} {o}: out= over {over} differs from out of place"


# ---------------------------------------------------------------------------------------------
# in place under AddressSanitizer + UBSan, through the standalone driver

@pytest.mark.parametrize("name", RESIDUAL)
def test_in_place_under_sanitizers(name, tmp_path):
    from test_c_backend import SANITIZE, _sanitizers_work, read_outputs, write_case
    if not _sanitizers_work():
        pytest.skip("the C compiler cannot build with -fsanitize=address,undefined here")
    op = FAMILY[name]
    exe = cbuild.build({**op.sources["c"], **BACKEND.driver_source(op.plan, op.spec.file)}, f"{name}-asan-inplace",
                       shared=False, flags=SANITIZE + cbuild.openmp_flags())
    arrays = exposing_inputs(op, rows=5, seed=31)
    want = _run_c(op, _copies(arrays), threads=2)
    a = _copies(arrays)
    bound = op.kernel("c").bind(*_args(op, a), threads=2, inplace=True)
    case_file, out_file = tmp_path / "case.bin", tmp_path / "out.bin"
    outs = write_case(case_file, op.kernel("c"), bound)
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=99",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=98"}
    for isa, stream in (("", "1"), ("base", "0")):
        r = subprocess.run([str(exe), str(case_file), str(out_file)], capture_output=True, text=True,
                           env={**env, "ROPEGEN_ISA": isa, "ROPEGEN_STREAM": stream}, timeout=120)
        assert r.returncode == 0 and "status 0" in r.stdout, r.stderr[-3000:]
        for o, got in zip(op.outputs, read_outputs(out_file, outs)):
            assert same_bits(np.ascontiguousarray(got), want[o]), f"{name} {o} ISA {isa or 'best'}"
