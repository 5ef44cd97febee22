"""The C backend: every example against the float64 reference, rounding identical to NumPy /
ml_dtypes on every bit pattern, strided and in-place calls, range errors, the build cache, the
examples/c program, and all examples under AddressSanitizer + UBSan through a standalone driver.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import os
import shutil
import struct
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.backends.c import build as cbuild
from ropegen.ops import reference
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.call import CKernel
from ropegen.crosscheck import _storage_dtype, compare
from ropegen.ops.inputs import CASES, make_inputs
from ropegen.render import render
from ropegen.runtime.numpy_host import HOST

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.rope"))
BACKEND = CBackend()

pytestmark = pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable()))


def _ops():
    return [op for path in EXAMPLES for op in ropegen.compile(path)]


OPS = _ops()
OP_IDS = [op.name for op in OPS]


def _magnitude(arrays) -> float:
    return max(float(np.max(np.abs(np.asarray(a, dtype=np.float64)))) if a.size and a.dtype.kind == "f"
               else 0.0 for a in arrays.values())


# ---------------------------------------------------------------------------------------------
# every example operator, every input case, against the reference (and NumPy where exact)

@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_example_matches_reference(op):
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=100 + i)
        args = [arrays[n] for n in op.inputs]
        ref = reference.evaluate(op.ir, arrays)
        outs = op.run_all(*args, backend="c")
        for name, out in zip(op.outputs, outs):
            _, _, ok = compare(out, ref[name], _storage_dtype(op), _magnitude(arrays))
            assert ok, f"{op.name} {case.label} {name}"
        if op.kind == "rope" and op.plan.angles.__class__.__name__ == "TableAnglesPlan":
            # no transcendental function between the inputs and the outputs: NumPy's bits exactly
            for a, b in zip(outs, op.run_all(*args, backend="numpy")):
                assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{op.name} {case.label}"


@pytest.mark.parametrize("name", ["llama3_8b", "atb_coeff4_fp16", "atb_coeffW_high_precision", "rms_bf16_stash_f64",
                                  "ppl_rotary_2d", "ggml_neox_yarn", "onnx_rope_partial_interleaved"])
def test_threads_and_instruction_sets_give_identical_bits(name, monkeypatch):
    op = next(o for o in OPS if o.name == name)
    arrays = make_inputs(op.ir, CASES[2], seed=7)
    args = [arrays[n] for n in op.inputs]
    want = op.run_all(*args, backend="c", threads=1)
    for isa in ("base", "avx2", ""):
        monkeypatch.setenv("ROPEGEN_ISA", isa)
        for threads, stream in ((1, "0"), (2, "1"), (3, ""), (1, "1")):
            monkeypatch.setenv("ROPEGEN_STREAM", stream)     # non-temporal stores on / off
            got = op.run_all(*args, backend="c", threads=threads)
            for a, b in zip(want, got):
                assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (isa, threads, stream)


def test_no_fused_multiply_add_in_any_build():
    """-ffp-contract=off is not enough for GCC 12 (its SLP pattern matcher fuses a*c - b*s / b*c + a*s
    into vfmaddsub): the templates are written so that no FMA instruction appears in any variant."""
    import platform
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"the FMA check greps x86 mnemonics; this machine is {platform.machine()}")
    import tempfile
    fma = ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")
    with tempfile.TemporaryDirectory() as d:
        for op in OPS:
            for name, text in op.sources["c"].items():
                (Path(d) / name).write_text(text)
            r = subprocess.run([*cbuild.compiler(), *cbuild.PINNED_FLAGS, *cbuild.openmp_flags(), "-S", "-I", d,
                                str(Path(d) / f"{op.name}.c"), "-o", "-"], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            found = [ln.strip() for ln in r.stdout.splitlines() if ln.strip().startswith(fma)]
            assert not found, f"{op.name}: {found[:3]}"


# ---------------------------------------------------------------------------------------------
# rounding and trigonometry helpers, through a tiny harness over templates/c/_dtypes.inc.j2

HARNESS = r"""
#include <stdint.h>
{dtypes}
{trig}
#define MAP(NAME, IN, OUT, FN) void NAME(const IN *x, OUT *y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = FN(x[i]); }}
MAP(h_f16_to_f32, uint16_t, float, rg_f16_to_f32)
MAP(h_bf16_to_f32, uint16_t, float, rg_bf16_to_f32)
MAP(h_f16_to_f64, uint16_t, double, rg_f16_to_f64)
MAP(h_f32_to_f16, float, uint16_t, rg_f32_to_f16)
MAP(h_f32_to_bf16, float, uint16_t, rg_f32_to_bf16)
MAP(h_f64_to_f16, double, uint16_t, rg_f64_to_f16)
MAP(h_f64_to_bf16, double, uint16_t, rg_f64_to_bf16)
void h_sincos(const double *x, double *s, double *c, int64_t n)
{{
    rg_sincos_cols(x, s, c, (int)n);
}}
/* one angle at a time, all of it in one go: fdlibm's sequence as rg_sincos_cols' stages split it,
 * transcribed here so that a reordering there (other bits) has something to differ from */
void h_sincos_one(const double *th, double *s, double *c, int64_t n)
{{
    for (int64_t i = 0; i < n; ++i) {{
        const double x = th[i];
        if (!(fabs(x) <= RG_TRIG_MAX)) {{ s[i] = sin(x); c[i] = cos(x); continue; }}
        const double fq = x * 6.36619772367581382433e-01 + 6755399441055744.0;
        const uint64_t q = rg_f64_bits(fq);
        const double fn = fq - 6755399441055744.0;
        const double r = ((x - fn * 1.57079632673412561417e+00) - fn * 6.07710050630396597660e-11) - fn * 2.02226624871116645580e-21;
        const double z = r * r;
        const double sr = 8.33333333332248946124e-03 + z * (-1.98412698298579493134e-04 + z * (2.75573137070700676789e-06
                          + z * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)));
        const double sv = r + (z * r) * (-1.66666666666666324348e-01 + z * sr);
        const double cr = z * (4.16666666666666019037e-02 + z * (-1.38888888888741095749e-03 + z * (2.48015872894767294178e-05
                          + z * (-2.75573143513906633035e-07 + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11)))));
        const double hz = 0.5 * z, w = 1.0 - hz;
        const double cv = w + (((1.0 - w) - hz) + z * cr);
        const double a = (q & 1u) ? cv : sv, b = (q & 1u) ? sv : cv;
        s[i] = (q & 2u) ? -a : a;
        c[i] = ((q + 1u) & 2u) ? -b : b;
    }}
}}
"""


@pytest.fixture(scope="module")
def harness():
    src = HARNESS.format(dtypes=render("c/_dtypes.inc.j2"), trig=render("c/_trig.inc.j2"))
    lib = cbuild.load_library(cbuild.build({"harness.c": src}, "rounding-harness"))

    def call(fn: str, x: np.ndarray, out_dtype) -> np.ndarray:
        x = np.ascontiguousarray(x)
        y = np.empty(x.shape, dtype=out_dtype)
        getattr(lib, fn)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data), ctypes.c_int64(x.size))
        return y

    def sincos_by(fn: str):
        def sincos(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            x = np.ascontiguousarray(x, dtype=np.float64)
            s, c = np.empty_like(x), np.empty_like(x)
            getattr(lib, fn)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(s.ctypes.data),
                             ctypes.c_void_p(c.ctypes.data), ctypes.c_int64(x.size))
            return s, c
        return sincos

    call.sincos = sincos_by("h_sincos")
    call.sincos_one = sincos_by("h_sincos_one")
    return call


ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_widening_every_16_bit_pattern(harness):
    with np.errstate(invalid="ignore"):
        assert _bits_equal(harness("h_f16_to_f32", ALL16, np.float32), ALL16.view(np.float16).astype(np.float32))
        assert _bits_equal(harness("h_f16_to_f64", ALL16, np.float64), ALL16.view(np.float16).astype(np.float64))
        assert _bits_equal(harness("h_bf16_to_f32", ALL16, np.float32),
                           ALL16.view(ml_dtypes.bfloat16).astype(np.float32))


def _f32_samples() -> np.ndarray:
    """Every 16-bit prefix (sign, exponent, top mantissa bits) with the rounding-critical low patterns
    (exact, ties, just above / below ties for both f16 and bf16), plus random bit patterns."""
    prefix = (np.arange(1 << 16, dtype=np.uint64) << 16).astype(np.uint64)
    lows = [0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0xffff,
            0x5000, 0x9000, 0xb000, 0xe000]
    parts = [(prefix | np.uint64(lo)).astype(np.uint32) for lo in lows]
    parts.append(np.random.default_rng(0).integers(0, 1 << 32, 1 << 21, dtype=np.uint64).astype(np.uint32))
    return np.concatenate(parts).view(np.float32)


def test_narrowing_f32_matches_numpy_and_ml_dtypes(harness):
    x = _f32_samples()
    with np.errstate(all="ignore"):
        assert _bits_equal(harness("h_f32_to_f16", x, np.uint16), x.astype(np.float16).view(np.uint16))
        assert _bits_equal(harness("h_f32_to_bf16", x, np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
        # round trip of every 16-bit value
        h = ALL16.view(np.float16).astype(np.float32)
        assert _bits_equal(harness("h_f32_to_f16", h, np.uint16), h.astype(np.float16).view(np.uint16))


def _f64_samples() -> np.ndarray:
    """f16 / bf16 neighbourhoods in double: each 16-bit value, the ties above it, and near-ties that
    a detour through float32 would round differently; plus random doubles and NaN payloads."""
    rng = np.random.default_rng(1)
    base16 = ALL16.view(np.float16).astype(np.float64)
    base16 = base16[np.isfinite(base16)]
    ulp16 = np.spacing(np.abs(base16).astype(np.float16)).astype(np.float64)
    basebf = ALL16.view(ml_dtypes.bfloat16).astype(np.float64)
    basebf = basebf[np.isfinite(basebf)]
    ulpbf = np.abs(basebf) * 2.0 ** -8 + 1e-45
    parts = [base16, base16 + ulp16 / 2, base16 + ulp16 / 2 * (1 + 2.0 ** -30), base16 + ulp16 / 2 * (1 - 2.0 ** -30),
             basebf, basebf + ulpbf, basebf * (1 + 2.0 ** -9 + 2.0 ** -35),
             rng.standard_normal(1 << 18) * np.exp2(rng.integers(-30, 20, 1 << 18)),
             rng.integers(0, 1 << 63, 1 << 16, dtype=np.uint64).view(np.float64),
             np.array([0x7ff0000000000001, 0x7ff8000000000001, 0x7ff0200000000000, 0xfff0000100000000,
                       0x7ff0000000000000, 0xfff0000000000000], dtype=np.uint64).view(np.float64)]
    return np.concatenate(parts)


def test_narrowing_f64_matches_numpy_and_ml_dtypes(harness):
    with np.errstate(all="ignore"):
        x = _f64_samples()
        assert _bits_equal(harness("h_f64_to_f16", x, np.uint16), x.astype(np.float16).view(np.uint16))
        assert _bits_equal(harness("h_f64_to_bf16", x, np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_sincos_is_accurate_to_about_one_ulp(harness):
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(-4, 4, 1 << 18), rng.uniform(-1e6, 1e6, 1 << 18),
                        np.arange(-8192, 8192) * 1.0, np.arange(0, 131072, 7) * 0.81461723385654472,
                        np.array([0.0, -0.0, 1e-300, np.pi / 4, np.pi / 2, 3e6, -1e12, 1e300, np.inf, np.nan])])
    s, c = harness.sincos(x)
    with np.errstate(invalid="ignore"):
        ws, wc = np.sin(x), np.cos(x)
    finite = np.isfinite(x)
    assert np.array_equal(np.isnan(s), np.isnan(ws)) and np.array_equal(np.isnan(c), np.isnan(wc))
    assert np.max(np.abs(s[finite] - ws[finite])) <= 2.5e-16
    assert np.max(np.abs(c[finite] - wc[finite])) <= 2.5e-16
    # rounded to float32 (the usual arithmetic type) the values are libm's, but for a rare tie
    agree = np.mean((s[finite].astype(np.float32) == ws[finite].astype(np.float32))
                    & (c[finite].astype(np.float32) == wc[finite].astype(np.float32)))
    assert agree > 0.99999


def test_sincos_stages_keep_each_angles_bits(harness):
    """rg_sincos_cols runs fdlibm's sequence in stages over blocks of columns (for speed): every angle
    must come out as the whole sequence, one angle at a time, gives it, whatever the count of columns
    and wherever the far (libm) angles fall among them."""
    rng = np.random.default_rng(5)
    pool = np.concatenate([rng.uniform(-4, 4, 4096), rng.uniform(-1e6, 1e6, 4096),
                           np.arange(0, 4096) * 0.81461723385654472, rng.uniform(-1e9, 1e9, 64),
                           np.array([0.0, -0.0, np.pi / 4, -np.pi / 2, 1e6, -1e6, np.nextafter(1e6, 2e6),
                                     np.inf, -np.inf, np.nan])])
    for n in (1, 3, 8, 63, 64, 65, 127, 128, 200, pool.size):
        x = rng.permutation(pool)[:n]
        s, c = harness.sincos(x)
        ws, wc = harness.sincos_one(x)
        assert _bits_equal(s, ws) and _bits_equal(c, wc), n


# ---------------------------------------------------------------------------------------------
# layouts: strided views, in place, out=

def _op(name):
    return next(o for o in OPS if o.name == name)


def test_strided_views_run_without_copies_and_match_contiguous():
    op = _op("llama3_8b_cached")
    rng = np.random.default_rng(3)
    bf16 = op.plan.storage.np_dtype
    big_q = rng.standard_normal((9, 40, 128)).astype(bf16)
    big_k = rng.standard_normal((9, 12, 256)).astype(bf16)
    q = big_q[::2, 3:35]                     # token and head strides differ from a dense layout
    k = big_k[::-2, 2:10, 64:192]            # negative token stride
    pos = np.array([0, 5, 17, 8191, 2], dtype=np.int64)
    cos = rng.uniform(-1, 1, (8192, 64)).astype(np.float32)
    sin = rng.uniform(-1, 1, (8192, 64)).astype(np.float32)
    kern: CKernel = op.kernel("c")
    bound = kern.bind(q, k, pos, cos, sin)
    assert bound.given["q"] is q and bound.given["k"] is k          # read in place, not copied
    got = op.run_all(q, k, pos, cos, sin, backend="c")
    want = op.run_all(np.ascontiguousarray(q), np.ascontiguousarray(k), pos, cos, sin, backend="c")
    for a, b in zip(got, want):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    # head_dim not contiguous: copied first, same answer
    q2 = np.repeat(np.ascontiguousarray(q), 2, axis=2)[:, :, ::2]
    assert np.array_equal(op.run_all(q2, k, pos, cos, sin, backend="c")[0].view(np.uint16), want[0].view(np.uint16))


@pytest.mark.parametrize("name", ["llama3_8b", "onnx_rope_4d", "onnx_rope_3d", "ppl_rotary_bypass_key",
                                  "atb_coeff_half_table"])
def test_in_place_and_out_arrays(name):
    op = _op(name)
    arrays = make_inputs(op.ir, CASES[1], seed=11)
    args = [arrays[n] for n in op.inputs]
    want = op.run_all(*args, backend="c")
    outs = tuple(np.full_like(w, 7) for w in want)
    got = op.run_all(*args, backend="c", out=outs)
    assert all(g is o for g, o in zip(got, outs))
    copies = [np.array(a, copy=True) for a in args]
    got = op.run_all(*copies, backend="c", inplace=True)
    sources = [copies[op.inputs.index(s.src)] for s in op.plan.streams]
    for g, src, w in zip(got, sources, want):
        assert g is src and np.array_equal(g.view(np.uint8), w.view(np.uint8))


def test_rmsnorm_out_array_and_no_in_place():
    op = _op("rms_mixed_types")
    arrays = make_inputs(op.ir, CASES[1], seed=2)
    args = [arrays[n] for n in op.inputs]
    want = op.run(*args, backend="c")
    y = np.empty_like(want)
    assert op.run(*args, backend="c", out=(y,)) is y and np.array_equal(y, want)
    with pytest.raises(ValueError, match="in place"):
        op.run(*args, backend="c", inplace=True)
    with pytest.raises(ValueError, match="out y"):
        op.run(*args, backend="c", out=(np.empty(want.shape, np.float64),))


# ---------------------------------------------------------------------------------------------
# errors: every one a ValueError with a message, never a crash

def test_out_of_range_positions_are_value_errors_and_nothing_is_written():
    op = _op("onnx_rope_4d")
    x = np.ones((2, 4, 3, 8), np.float32)
    cos = np.zeros((10, 4), np.float32)
    out = (np.full_like(x, 5.0),)
    for bad in (10, -1, 2 ** 40):
        pos = np.array([[0, 1, 2], [3, 4, bad]])
        with pytest.raises(ValueError, match="out of range"):
            op.run(x, cos, cos, pos, backend="c", out=out)
        assert np.all(out[0] == 5.0)
    with pytest.raises(ValueError, match="out of range"):
        _op("atb_cos_format1").run(np.ones((5, 256), np.float16), np.ones((5, 128), np.float16),
                                   np.ones((3, 64), np.float16), np.ones((3, 64), np.float16),
                                   np.array([1, 4], np.int32), backend="c")


def test_bad_sequence_lengths_are_value_errors():
    op = _op("atb_coeff2_bf16")
    bf16 = op.plan.storage.np_dtype
    q, k = np.ones((6, 256), bf16), np.ones((6, 64), bf16)
    cos = np.ones((6, 64), bf16)
    for lens in ([2, 3], [7, -1], [6, 1], [-6, 12]):
        with pytest.raises(ValueError, match="sequence lengths"):
            op.run(q, k, cos, cos, np.array(lens, np.int32), backend="c")
    op.run(q, k, cos, cos, np.array([6, 0], np.int32), backend="c")


def test_bad_arrays_are_value_errors():
    op = _op("llama3_8b")
    bf16 = op.plan.storage.np_dtype
    q, k, pos = np.ones((3, 32, 128), bf16), np.ones((3, 8, 128), bf16), np.arange(3)
    for args, match in [((q.astype(np.float32), k, pos), "dtype"), ((q, k[:2], pos), "dimension"),
                        ((q, k, pos[:2]), "dimension"), ((q, k), "expected 3 inputs"),
                        ((q, k, pos.astype(np.float64)), "dtype"), ((q, k, [0, 1, 2]), "numpy array")]:
        with pytest.raises(ValueError, match=match):
            op.run(*args, backend="c")
    for threads in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="threads"):
            op.run(q, k, pos, backend="c", threads=threads)
    with pytest.raises(ValueError, match="read-only"):
        ro = q.copy()
        ro.flags.writeable = False
        op.run(q, k, pos, backend="c", out=(ro, k.copy()))
    with pytest.raises(ValueError, match="start_pos: expected dtype int64"):
        _op("ppl_rotary_bypass_key").run(np.ones((1, 2, 8, 64), np.float16), np.ones((1, 2, 8, 64), np.float16),
                                         np.float64(3), backend="c")


# ---------------------------------------------------------------------------------------------
# building: sources, cache, compiler errors

def test_sources_are_deterministic_and_record_the_flags():
    for op in OPS[:6]:
        a = BACKEND.sources(op.plan, str(ROOT / "examples" / "x.rope"))
        b = BACKEND.sources(op.plan, "x.rope")
        assert a == b and set(a) == {f"{op.name}.h", f"{op.name}.c"}
        head = a[f"{op.name}.h"]
        assert head.startswith("// Generated by ropegen") and "Spec sha256:" in head[:400]
        assert "-ffp-contract=off" in head and str(ROOT) not in head + a[f"{op.name}.c"]


def test_build_cache_is_keyed_and_concurrent_builds_are_safe(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    op = _op("onnx_rope_3d")
    src = op.sources["c"]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda _: cbuild.build(src, op.name), range(4)))
    assert len(set(paths)) == 1 and paths[0].parent == tmp_path / "ropegen" and paths[0].is_file()
    # the library and its checksum, no temp files left (beside the cache's folders: probes/, sources/,
    # written there too where this is the process's first build)
    assert (sorted(p.name for p in (tmp_path / "ropegen").iterdir() if not p.is_dir())
            == sorted([paths[0].name, paths[0].name + ".sha256"]))
    changed = dict(src)
    changed[f"{op.name}.c"] += "\n/* another source */\n"
    assert cbuild.build(changed, op.name) != paths[0]
    assert cbuild.build(src, op.name, extra_flags=("-DROPEGEN_NO_DISPATCH",)) != paths[0]


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CC", "no-such-cc-ropegen")
    why = BACKEND.unavailable()
    assert why and "no-such-cc-ropegen" in why
    with pytest.raises(cbuild.CompilerError, match="no-such-cc-ropegen"):
        cbuild.build({"x.c": "int x;\n"}, "x")


# ---------------------------------------------------------------------------------------------
# the examples/c program, built against freshly generated sources

def test_examples_c_program(tmp_path):
    gen = tmp_path / "gen"
    gen.mkdir()
    for op in ropegen.compile(ROOT / "examples" / "llama3.rope"):
        for name, text in op.sources["c"].items():
            (gen / name).write_text(text)
    exe = tmp_path / "llama3_demo"
    cc = cbuild.compiler()
    flags = list(cbuild.PINNED_FLAGS) + list(cbuild.openmp_flags())
    r = subprocess.run([*cc, *flags, "-Wall", "-Wextra", "-Werror", f"-I{gen}", str(ROOT / "examples/c/llama3_demo.c"),
                        str(gen / "llama3_8b.c"), "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "all checks passed" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------------------------------------
# AddressSanitizer + UBSan: every example through a standalone driver, in-range and out-of-range

SANITIZE = ("-std=c11", "-O1", "-g", "-ffp-contract=off", "-fno-math-errno", "-fno-fast-math",
            "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")


def _sanitizers_work() -> bool:
    try:
        cbuild.build({"t.c": "int main(void) { return 0; }\n"}, "sanitizer-probe", shared=False,
                     flags=SANITIZE)
        return True
    except cbuild.CompilerError:
        return False


def write_case(path: Path, kern: CKernel, bound) -> list[tuple[int, np.ndarray]]:
    """The driver's case file for a bound call; returns (parameter, array) of every output."""
    from numpy.lib.array_utils import byte_bounds
    ins = {i: a for i, a in bound.arrays.items() if kern.params[i].kind == "in"}
    outs = []
    with open(path, "wb") as f:
        for i, q in enumerate(kern.params):
            if q.kind in ("in", "out", "freq"):
                a = bound.arrays[i]
                lo, hi = byte_bounds(a) if a.size else (a.ctypes.data, a.ctypes.data)
                if q.kind in ("in", "freq"):
                    f.write(struct.pack("<qq", hi - lo, a.ctypes.data - lo))
                    f.write(ctypes.string_at(lo, hi - lo) if hi > lo else b"")
                else:
                    alias = next((j for j, b in ins.items() if b.ctypes.data == a.ctypes.data and a.size), -1)
                    f.write(struct.pack("<qqq", alias, hi - lo, a.ctypes.data - lo))
                    outs.append((i, a))
            else:
                f.write(struct.pack("<q", bound.values[i]))
    return outs


def read_outputs(path: Path, outs: list[tuple[int, np.ndarray]]) -> list[np.ndarray]:
    from numpy.lib.array_utils import byte_bounds
    data = path.read_bytes()
    got, at = [], 0
    for _, a in outs:
        lo, hi = byte_bounds(a) if a.size else (0, 0)
        buf = np.frombuffer(data[at:at + hi - lo], dtype=np.uint8)
        at += hi - lo
        off = a.ctypes.data - lo if a.size else 0
        raw = np.dtype(f"u{a.itemsize}")     # as_strided cannot make ml_dtypes types (fp8): view after
        got.append(np.lib.stride_tricks.as_strided(buf[off:].view(raw), a.shape, a.strides).view(a.dtype)
                   if a.size else a)
    return got


def _sanitizer_cases(op):
    """(label, inputs, options, expected status) for one operator."""
    cases = []
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=300 + i)
        cases.append((case.label, arrays, {"threads": 2}, 0))
    if op.kind == "rope":
        arrays = make_inputs(op.ir, CASES[1], seed=9)
        if op.plan.out_dtype is None:   # (an fp8 output is never written over its source)
            cases.append(("in place", {k: np.array(v, copy=True) for k, v in arrays.items()},
                          {"threads": 2, "inplace": True}, 0))
        a = op.plan.angles
        if getattr(a, "per_token", True) is False and op.plan.positions.ids:
            bad = dict(arrays)
            ids = np.array(arrays[op.plan.positions.ids], copy=True)
            ids.flat[-1] = arrays[a.cos].shape[0]
            bad[op.plan.positions.ids] = ids
            cases.append(("position = rows", bad, {"threads": 2}, 1))
        if op.plan.sequences:
            bad = dict(arrays)
            lens = np.array(arrays[op.plan.sequences], copy=True)
            lens[0] += 1
            bad[op.plan.sequences] = lens
            cases.append(("seqlen sum + 1", bad, {"threads": 2}, 2))
    return cases


def test_all_examples_under_address_and_undefined_sanitizers(tmp_path):
    if not _sanitizers_work():
        pytest.skip("the C compiler cannot build with -fsanitize=address,undefined here")
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=99",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=98"}
    failures = []
    for op in OPS:
        sources = {**op.sources["c"], **BACKEND.driver_source(op.plan, op.spec.file)}
        exe = cbuild.build(sources, f"{op.name}-asan", shared=False,
                           flags=SANITIZE + cbuild.openmp_flags())
        kern: CKernel = op.kernel("c")
        for label, arrays, options, status in _sanitizer_cases(op):
            args = [arrays[n] for n in op.inputs]
            expected = None
            if status == 0:
                expected = op.run_all(*[np.array(a, copy=True) for a in args], backend="c",
                                      threads=options["threads"])
            bound = kern.bind(*args, **options)
            case_file, out_file = tmp_path / "case.bin", tmp_path / "out.bin"
            outs = write_case(case_file, kern, bound)
            # the best vector variant with streaming stores, and the baseline one without
            for isa, stream in (("", "1"), ("base", "0")):
                r = subprocess.run([str(exe), str(case_file), str(out_file)], capture_output=True, text=True,
                                   env={**env, "ROPEGEN_ISA": isa, "ROPEGEN_STREAM": stream}, timeout=120)
                report = r.stderr.strip()
                where = f"{op.name} [{label}{', ISA ' + isa if isa else ''}]"
                if r.returncode != 0 or "runtime error" in report or "Sanitizer" in report:
                    failures.append(f"{where}: exit {r.returncode}\n{report[-3000:]}")
                    continue
                if f"status {status}" not in r.stdout:
                    failures.append(f"{where}: {r.stdout.strip()} (expected status {status})")
                    continue
                if expected is not None:
                    for got, want in zip(read_outputs(out_file, outs), expected):
                        if not np.array_equal(np.ascontiguousarray(got).view(np.uint8), want.view(np.uint8)):
                            failures.append(f"{where}: driver output differs from the ctypes call")
    assert not failures, "\n".join(failures)


def test_compiler_from_cc_env_is_used(monkeypatch, tmp_path):
    real = shutil.which(cbuild.compiler()[0])
    wrapper = tmp_path / "mycc"
    log = tmp_path / "log"
    wrapper.write_text(f"#!/bin/sh\necho called >> {log}\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cbuild.build({"y.c": "int y(void) { return 1; }\n"}, "y")
    assert log.read_text().count("called") >= 1


# ---------------------------------------------------------------------------------------------
# the NumPy fast path (runtime/numpy_host.py): the values Convention.bind gives, or no answer

FAST_OPS = ["llama3_8b", "llama3_8b_cached", "onnx_rope_4d", "ppl_rotary", "hf_llama_per_token", "rms_axis1",
            "rms_last_axis", "rms_mixed_types"]


def _layouts(op, args):
    """(label, arguments, options) of calls bind accepts unchanged: views, out= arrays, in place."""
    rotated = {s.src for s in op.plan.streams} if op.kind == "rope" else set()
    idx = [i for i, n in enumerate(op.inputs) if n in rotated]
    out = []
    for threads in (None, 1, 3):
        out.append((f"threads={threads}", list(args), {"threads": threads}))
    views = list(args)
    for i in idx:
        big = np.concatenate([args[i], args[i]], axis=0)
        views[i] = big[::2] if args[i].shape[0] > 1 else big[:1]
    out.append(("token-strided views", views, {}))
    flipped = list(args)
    for i in idx:
        flipped[i] = args[i][::-1].copy()[::-1]
    out.append(("negative strides", flipped, {}))
    fresh = op.kernel("c")(*args)
    out.append(("out=", list(args), {"out": tuple(np.empty_like(o) for o in fresh)}))
    if len(fresh) == 1:
        out.append(("out= one array", list(args), {"out": np.empty_like(fresh[0])}))
    if op.kind == "rope":
        padded = tuple(np.empty(o.shape[:-1] + (o.shape[-1] + 8,), o.dtype)[..., 4:-4] for o in fresh)
        out.append(("out= views", list(args), {"out": padded}))
        out.append(("in place", [a.copy() for a in args], {"inplace": True}))
    specs = op.kernel("c").convention.specs
    if all(o.over_src for o in specs):      # out= the very sources: in place, as bind allows it
        over = [a.copy() for a in args]
        out.append(("out= its sources", over, {"out": tuple(over[op.inputs.index(o.src)] for o in specs)}))
    return out


@pytest.mark.parametrize("name", FAST_OPS)
def test_fast_path_gives_the_values_of_the_convention(name):
    """Every call below goes the fast way, and each parameter value (output addresses apart, for
    outputs the call allocates) is the one Convention.bind and Call.values give."""
    op = _op(name)
    kern: CKernel = op.kernel("c")
    pointers_out = [i for i, q in enumerate(kern.params) if q.kind == "out"]
    rotated = {s.src for s in op.plan.streams} if op.kind == "rope" else set()
    for case_no, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=40 + case_no)    # strided case: views of rotated inputs
        args = [arrays[n] if n in rotated else arrays[n].copy() for n in op.inputs]
        for label, call_args, options in _layouts(op, args):
            where = f"{name} [{case.label}, {label}]"
            fast = kern.fast(call_args, options.get("threads"), options.get("out"), options.get("inplace", False))
            assert fast is not None, where
            values, inputs, outputs = fast
            call = kern.convention.bind(HOST, call_args, **options)
            want = call.values(kern.params)
            if "out" in options or options.get("inplace"):
                assert values == want, where
                assert all(a is b for a, b in zip(outputs, call.returned())), where
            else:
                assert [v for i, v in enumerate(values) if i not in pointers_out] == \
                       [v for i, v in enumerate(want) if i not in pointers_out], where
                assert [(o.shape, o.dtype, o.strides) for o in outputs] == \
                       [(o.shape, o.dtype, o.strides) for o in call.returned()], where
            assert all(a is b.array for a, b in zip(inputs, call.inputs.values())), where
            bound = kern.bind(*call_args, **options)
            if "out" in options or options.get("inplace"):
                assert bound.values == values, where
            assert set(bound.arrays) == {i for i, q in enumerate(kern.params) if q.kind in ("in", "out")}


def _refused(op, args):
    """Calls bind refuses (or copies for): each must go its way, so its message is bind's."""
    kern = op.kernel("c")
    fresh = kern(*args)
    bad = []
    for i, a in enumerate(args):
        other = np.float64 if a.dtype != np.float64 else np.float32
        swap = list(args)
        swap[i] = a.astype(other)
        bad.append((f"dtype of {op.inputs[i]}", swap, {}))
        swap = list(args)
        swap[i] = a[None]
        bad.append((f"rank of {op.inputs[i]}", swap, {}))
        if a.ndim:            # (a rank-0 input may be a Python number)
            swap = list(args)
            swap[i] = a.tolist()
            bad.append((f"{op.inputs[i]} as a list", swap, {}))
        if a.ndim and a.shape[-1] > 1:
            swap = list(args)
            swap[i] = np.repeat(a, 2, axis=-1)[..., ::2]
            bad.append((f"{op.inputs[i]} with a strided last axis", swap, {}))
    bad += [("too few inputs", args[:-1], {}), ("threads=0", args, {"threads": 0}),
            ("threads=True", args, {"threads": True}), ("out= and inplace", args, {"out": fresh, "inplace": True}),
            ("out= too short", args, {"out": fresh[:-1]})]
    if not all(o.over_src for o in kern.convention.specs):    # an output of another type over its source
        bad.append(("out= over an input", args, {"out": tuple(args[:len(fresh)]) if op.kind == "rope" else (args[0],)}))
    # an output over its source one element on: not exactly the source, so bind refuses it
    src = op.inputs.index(kern.convention.specs[0].src)
    a = args[src]
    flat = np.empty(a.size + 1, a.dtype)
    shifted = list(args)
    shifted[src] = flat[:-1].reshape(a.shape)
    shifted[src][...] = a
    bad.append(("out= over its source, shifted", shifted,
                {"out": (flat[1:].reshape(a.shape),) + tuple(np.empty_like(o) for o in fresh[1:])}))
    ro = tuple(np.empty_like(o) for o in fresh)
    ro[0].flags.writeable = False
    bad.append(("read-only out=", args, {"out": ro}))
    if op.kind == "rmsnorm":
        if op.plan.y != op.plan.x:     # y over x needs their types to agree
            bad.append(("rmsnorm in place with another output type", args, {"inplace": True}))
        strided = list(args)
        strided[0] = np.repeat(args[0], 2, axis=-1)[..., ::2]
        bad.append(("rmsnorm in place over a non-contiguous x", strided, {"inplace": True}))
    else:
        same = list(args)
        src = op.inputs.index(op.plan.streams[0].src)
        other = op.inputs.index(op.plan.streams[-1].src)
        same[other] = same[src] = args[src].copy()
        if other != src and args[other].shape == args[src].shape:
            bad.append(("one array rotated twice in place", same, {"inplace": True}))
    return bad


@pytest.mark.parametrize("name", FAST_OPS)
def test_fast_path_leaves_every_refusal_and_copy_to_bind(name):
    """The fast path answers no call that bind refuses or copies for, so every message (and any
    copy) comes from bind; the kernel's error is bind's, word for word."""
    op = _op(name)
    kern: CKernel = op.kernel("c")
    args = [make_inputs(op.ir, CASES[1], seed=50)[n] for n in op.inputs]
    for label, call_args, options in _refused(op, args):
        assert kern.fast(call_args, options.get("threads"), options.get("out"),
                         options.get("inplace", False)) is None, f"{name}: {label}"
        try:
            kern.convention.bind(HOST, call_args, **options)
            want = None
        except ValueError as exc:
            want = str(exc)
        if want is None:      # copied first (a strided last axis): the same answer as contiguous
            continue
        with pytest.raises(ValueError) as got:
            kern(*call_args, **options)
        assert str(got.value) == want, f"{name}: {label}"


def test_a_length_one_axis_may_have_any_stride():
    """NumPy ignores the stride of a length-1 axis (and libraries leave any value there): such a
    tensor is read in place, with the answer of its contiguous copy."""
    op = _op("llama3_8b")
    args = [make_inputs(op.ir, CASES[0], seed=60)[n] for n in op.inputs]
    q = args[0]
    buf = np.zeros(q.nbytes + 64, np.uint8)
    odd = np.lib.stride_tricks.as_strided(buf[:q.nbytes].view(q.dtype).reshape(q.shape), q.shape,
                                          (q.strides[0] + 1,) + q.strides[1:])
    odd[...] = q
    assert odd.shape[0] == 1 and odd.flags.aligned
    assert op.kernel("c").bind(odd, *args[1:]).given["q"] is odd
    for a, b in zip(op.run_all(odd, *args[1:], backend="c"), op.run_all(*args, backend="c")):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
