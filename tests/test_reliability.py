"""Reliability suite (marker `reliability`), bounded to run in CI in a few minutes:

1. spec fuzzing: token-level mutants of examples/*.rope must compile (parse, check, plan, render every
   target, explain) or raise SpecError with well-formed diagnostics -- never any other exception;
   the CLI on mutants never lets a traceback reach the user;
2. random valid configurations (pairing, rotary_dim, positions, angles, scaling, dtypes, layouts,
   direction, compute) run on every available backend, on contiguous and strided / misaligned /
   reversed views, in place and out of place, against the float64 reference;
3. the generated C built with AddressSanitizer + UBSan (the standalone driver of test_c_backend.py)
   on hostile shapes, positions, sequence lengths and strides: a correct result or a clean
   ValueError, never a sanitizer report or a crash.

Counts of what each part ran are printed (`pytest -s -m reliability tests/test_reliability.py`).
"""
from __future__ import annotations

import contextlib
import io
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ropegen
from ropegen import backends, cli
from ropegen.backends.c import build as cbuild
from ropegen.ops import reference
from ropegen.crosscheck import _storage_dtype, compare
from ropegen.spec.diagnostics import SpecError
from ropegen.ops.explain import explain
from ropegen.ops.inputs import CASES, Case, make_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reliability_helpers as rh  # noqa: E402

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.rope"))
TEXTS = [p.read_text(encoding="utf-8") for p in EXAMPLES]
CORPUS = sorted({t for text in TEXTS for t in rh.tokenize(text) if not rh.is_space(t)})
FILE = "fuzz.rope"
C_WHY = backends.get("c").unavailable()
CUDA_WHY = backends.get("cuda").unavailable()
RUNNABLE = [b.name for b in backends.BACKENDS if b.unavailable() is None and b.name != "cuda"]

# Fixed, bounded hypothesis settings: the same examples on every run, no example database.
FUZZ = settings(derandomize=True, deadline=None, max_examples=500, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])
KNOWN_FUZZ = settings(FUZZ, max_examples=40)

COUNTS: dict[str, int] = {}


def _count(key: str, n: int = 1) -> None:
    COUNTS[key] = COUNTS.get(key, 0) + n


def _report(prefix: str) -> str:
    line = ", ".join(f"{k.split(':', 1)[1]}={v}" for k, v in sorted(COUNTS.items()) if k.startswith(prefix + ":"))
    print(f"\nreliability {prefix}: {line}")
    return line


# =============================================================================================
# 1. spec fuzzing

def _compile_everything(text: str) -> int:
    """compile + plan + render every target + explain; SpecError diagnostics checked. Returns the
    number of operators compiled (-1: a SpecError)."""
    try:
        program = ropegen.compile(text, file=FILE)
    except SpecError as err:
        problems = rh.diagnostic_problems(err, text, FILE)
        assert not problems, "\n".join(problems) + "\n--- spec ---\n" + text
        return -1
    for op in program:
        for target in backends.names():
            files = op.sources[target]
            assert files and all(isinstance(v, str) and v for v in files.values())
        explain(op.plan)
    return len(program)


def mutations(kinds):
    return st.lists(st.tuples(st.sampled_from(kinds), st.integers(0, 10 ** 6), st.integers(0, 10 ** 6)),
                    min_size=1, max_size=4)


def _fuzz_one(base: int, ops) -> str:
    text = rh.mutate(TEXTS[base], list(ops), CORPUS)
    n = _compile_everything(text)
    _count("fuzz:mutants")
    _count("fuzz:spec_errors" if n < 0 else "fuzz:compiled")
    return text


@FUZZ
@given(base=st.integers(0, len(TEXTS) - 1), ops=mutations(rh.SAFE_KINDS))
def test_fuzz_mutants_compile_or_raise_spec_error(base, ops):
    _fuzz_one(base, ops)


def test_fuzz_mutants_counts():
    """Runs after the fuzz above (file order): the counts for the record."""
    line = _report("fuzz")
    if COUNTS.get("fuzz:mutants"):
        assert COUNTS["fuzz:compiled"] > 0 and COUNTS["fuzz:spec_errors"] > 0, line


def _isolated(code: str, timeout: float = 90) -> None:
    """Run `code` (with this module imported as T) in a child Python limited to 3 GiB of address space
    and `timeout` seconds: a known hang or memory blow-up fails one test instead of stalling CI."""
    prelude = ("import resource, sys\n"
               "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
               f"sys.path[:0] = [{str(Path(__file__).resolve().parent)!r}, {str(Path(ropegen.__file__).parent.parent)!r}]\n"
               "import test_reliability as T\n")
    try:
        r = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish within {timeout} s")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]


# Edits that reached bugs before issue 8 (huge sizes, form feeds, deep nesting, long names): each
# kind alone, in a child process with a memory and time limit, so a regression fails one case.
@pytest.mark.parametrize("kind", ["huge", "formfeed", "nest", "nest_value", "long_name"])
def test_fuzz_known_bug_edits(kind):
    _isolated(f"T._known_bug_edits({kind!r})")


def _known_bug_edits(kind):
    @KNOWN_FUZZ
    @given(base=st.integers(0, len(TEXTS) - 1), ops=mutations((kind,) + rh.SAFE_KINDS[:4]))
    def run(base, ops):
        if not any(k == kind for k, _, _ in ops):
            ops = [(kind, 1, 2)] + list(ops)
        _fuzz_one(base, ops)
        _count(f"fuzz:known-{kind}")
    run()


KNOWN_SPECS = {
    "huge head_dim": ("rope r { in x: f32[tokens=T, heads=1, head_dim=4294967296] in pos: i64[T] out y = rotate(x) "
                      "pairing = neox positions = pos angles = computed(base = 10000) }"),
    "huge heads": ("rope r { in x: f32[tokens=T, heads=9223372036854775807, head_dim=8] in pos: i64[T] "
                   "out y = rotate(x) pairing = neox positions = pos angles = computed(base = 10000) }"),
    "huge merged": ("rope r { in x: f32[tokens=T, (heads=4294967296, head_dim=4294967296)] in pos: i64[T] "
                    "out y = rotate(x) pairing = neox positions = pos angles = computed(base = 10000) }"),
    "huge rmsnorm": "rmsnorm n { in x: f32[N, 4294967296, 4294967296] in w: f32[4294967296] out y }",
    "huge table rows": ("rope r { in x: f32[tokens=T, heads=1, head_dim=8] in pos: i64[T] "
                        "in c: f32[9223372036854775807, 4] in s: f32[9223372036854775807, 4] out y = rotate(x) "
                        "pairing = neox positions = pos angles = table(cos = c, sin = s) }"),
    "huge arange start": ("rope r { in x: f32[batch=B, seq=S, heads=1, head_dim=8] out y = rotate(x) pairing = neox "
                          "positions = arange(start = 9223372036854775807) angles = computed(base = 10000) }"),
    "300-char operator name": "rope " + "a" * 300 + (" { in x: f32[tokens=T, heads=1, head_dim=8] in pos: i64[T] "
                                                     "out y = rotate(x) pairing = neox positions = pos "
                                                     "angles = computed(base = 10000) }"),
    "form feed before error": "\f\f\nrope r {\f in x: f32[tokens=T]\f\n nonsense }\n",
    "deep nesting": "rope r { pairing = " + "f(" * 5000 + ")" * 5000 + " }",
}


@pytest.mark.parametrize("name", list(KNOWN_SPECS))
def test_known_hostile_specs(name):
    _isolated(f"T._compile_everything(T.KNOWN_SPECS[{name!r}])", timeout=30)


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as exc:      # argparse
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", ["compile", "explain"])
def test_cli_on_mutants_prints_no_traceback(command, tmp_path):
    rnd = random.Random(20240601)
    ran = 0
    for i in range(12):
        base = rnd.randrange(len(TEXTS))
        ops = [(rnd.choice(rh.SAFE_KINDS), rnd.randrange(10 ** 6), rnd.randrange(10 ** 6)) for _ in range(2)]
        text = rh.mutate(TEXTS[base], ops, CORPUS)
        spec = tmp_path / f"m{i}.rope"
        spec.write_text(text, encoding="utf-8")
        argv = [command, str(spec)] + (["-o", str(tmp_path / "gen"), "--target", "numpy,c"]
                                       if command == "compile" else [])
        rc, out, err = _cli(argv)   # any exception escaping main() fails the test with its traceback
        ran += 1
        assert rc in (0, 2), (rc, err)
        assert "Traceback" not in out + err
        if rc == 2:
            assert f"{spec}:" in err and "error[" in err, err
    # a file that is not UTF-8, a folder, a missing file
    bad = tmp_path / "bad.rope"
    bad.write_bytes(b"rope r { \xff\xfe }")
    for path in (bad, tmp_path, tmp_path / "missing.rope"):
        rc, out, err = _cli([command, str(path)])
        ran += 1
        assert rc == 2 and "Traceback" not in out + err, err
    _count(f"cli:{command}", ran)
    _report("cli")


# =============================================================================================
# 2. random valid configurations against the reference

N_CONFIGS = 90
CONFIG_SEED = 7
CONFIGS = [rh.random_config(i, CONFIG_SEED) for i in range(N_CONFIGS)]
EXTRA_CASES = (Case("0 tokens", 0, 1, False, 16), Case("0 batch", 3, 0, False, 16))


def _config_params():
    return [pytest.param(c, id=c.label) for c in CONFIGS]


def _magnitude(arrays) -> float:
    return max([float(np.max(np.abs(np.asarray(a, dtype=np.float64)))) for a in arrays.values()
                if a.size and a.dtype.kind == "f"] + [0.0])


def _check_outputs(op, outs, ref, arrays, what: str) -> list[str]:
    bad = []
    dt = _storage_dtype(op)
    for name, out in zip(op.outputs, outs):
        m_abs, m_rel, ok = compare(out, ref[name], dt, _magnitude(arrays))
        if not ok:
            bad.append(f"{what}: output {name} differs from the reference (max abs {m_abs:.3g}, rel {m_rel:.3g})")
    return bad


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.parametrize("cfg", _config_params())
def test_random_config_matches_reference(cfg):
    op = ropegen.compile(cfg.text)[f"r{cfg.index}"]
    rotated = {s.src for s in op.plan.streams}
    failures: list[str] = []
    for ci, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=1000 * cfg.index + ci)
        args = [arrays[n] for n in op.inputs]
        ref = reference.evaluate(op.ir, arrays)
        _count("configs:input cases")
        results = {}
        for b in RUNNABLE:
            what = f"{b} [{case.label}]"
            try:
                outs = op.run_all(*args, backend=b)
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{what}: {type(exc).__name__}: {exc}")
                continue
            _count("configs:backend runs")
            results[b] = outs
            failures += _check_outputs(op, outs, ref, arrays, what)
            if op.kind == "rope" and case.tokens and "inplace" in backends.get(b).run_options:
                copies = [np.array(a, copy=True) for a in args]
                try:
                    got = op.run_all(*copies, backend=b, inplace=True)
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"{what} in place: {type(exc).__name__}: {exc}")
                else:
                    _count("configs:backend runs")
                    for g, w in zip(got, outs):
                        if not np.array_equal(_bits(g), _bits(w)):
                            failures.append(f"{what}: in-place result differs from out-of-place")
        # the same values through strided, reversed, misaligned, Fortran-ordered views
        if case.tokens > 1:
            rng = np.random.default_rng(cfg.index)
            for name in sorted(rotated):
                for label, view in rh.view_variants(arrays[name], rng).items():
                    vargs = [view if n == name else arrays[n] for n in op.inputs]
                    for b in RUNNABLE:
                        what = f"{b} [{case.label}, {name} {label}]"
                        try:
                            outs = op.run_all(*vargs, backend=b)
                        except Exception as exc:  # noqa: BLE001
                            failures.append(f"{what}: {type(exc).__name__}: {exc}")
                            continue
                        _count("configs:backend runs")
                        _count("configs:view runs")
                        for g, w in zip(outs, results.get(b, ())):
                            if not np.array_equal(_bits(g), _bits(w)):
                                failures.append(f"{what}: differs from the contiguous call")
        if len(failures) > 8:
            break
    _count("configs:configs")
    assert not failures, f"{cfg.label}\n--- spec ---\n{cfg.text}\n" + "\n".join(failures[:12])


def _empty_params():
    out = []
    for c in CONFIGS:
        for case in EXTRA_CASES:
            if case.batch == 0 and c.layout in rh.TOKEN_LAYOUTS:
                continue
            out.append(pytest.param(c, case, id=f"{c.label}-{case.label.replace(' ', '')}"))
    return out


@pytest.mark.parametrize("cfg,case", _empty_params())
def test_random_config_empty_inputs(cfg, case):
    """0 tokens (T = 0 or S = 0) and 0 batch: empty outputs shaped like their sources, on every backend."""
    op = ropegen.compile(cfg.text)[f"r{cfg.index}"]
    arrays = make_inputs(op.ir, case, seed=cfg.index)
    args = [arrays[n] for n in op.inputs]
    failures = []
    for b in RUNNABLE:
        try:
            outs = op.run_all(*args, backend=b)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{b} [{case.label}]: {type(exc).__name__}: {exc}")
            continue
        _count("configs:empty-input runs")
        for s, o in zip(op.plan.streams, outs):
            src = arrays[s.src]
            if o.shape != src.shape or o.dtype != src.dtype:
                failures.append(f"{b} [{case.label}]: {s.out} is {o.dtype}{o.shape}, expected {src.dtype}{src.shape}")
    assert not failures, f"{cfg.label}\n--- spec ---\n{cfg.text}\n" + "\n".join(failures)


def test_random_configs_counts():
    _report("configs")


@pytest.mark.skipif(CUDA_WHY is not None, reason=f"cuda backend not run here (no GPU / CUDA unavailable: {CUDA_WHY})")
def test_random_configs_on_cuda():
    cp = pytest.importorskip("cupy", reason="the CUDA cross-check passes CuPy arrays")
    failures = []
    for cfg in CONFIGS[:40]:
        op = ropegen.compile(cfg.text)[f"r{cfg.index}"]
        for ci, case in enumerate(CASES):
            arrays = make_inputs(op.ir, case, seed=1000 * cfg.index + ci)
            ref = reference.evaluate(op.ir, arrays)
            args = [cp.asarray(arrays[n]) if arrays[n].ndim else arrays[n] for n in op.inputs]
            try:
                outs = [cp.asnumpy(o) for o in op.run_all(*args, backend="cuda")]
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{cfg.label} cuda [{case.label}]: {type(exc).__name__}: {exc}")
                continue
            failures += _check_outputs(op, outs, ref, arrays, f"{cfg.label} cuda [{case.label}]")
    assert not failures, "\n".join(failures[:20])


# =============================================================================================
# 3. AddressSanitizer + UBSan on hostile inputs

SAN_SPEC = """
rope ids_table { in x: f32[tokens=T, heads=3, head_dim=8] in k: f32[tokens=T, heads=1, head_dim=8] in pos: i64[T]
  in c: f32[P, 4] in s: f32[P, 4] out y = rotate(x) out yk = rotate(k)
  pairing = neox positions = pos angles = table(cos = c, sin = s) }
rope bhsd_computed { in x: bf16[batch=B, heads=2, seq=S, head_dim=16] in pos: i32[B, S] out y = rotate(x)
  pairing = gptj rotary_dim = 8 positions = pos angles = computed(base = 10000) }
rope ggml_ff { in x: f16[tokens=T, heads=2, head_dim=8] in pos: i32[T] in ff: f32[4] out y = rotate(x)
  pairing = neox positions = pos angle_numerics = ggml
  angles = computed(base = 10000, freq_factors = ff,
                    scaling = ggml_yarn(freq_scale = 0.25, ext_factor = 1, n_ctx_orig = 64)) }
rope arange_table { in x: f32[batch=B, seq=S, heads=2, head_dim=8] in start: i64[] in pad: i64[B]
  in c: f32[P, 4] in s: f32[P, 4] out y = rotate(x)
  pairing = gptj positions = arange(start = start, pad = pad) angles = table(cos = c, sin = s) }
rope arange_computed { in x: f64[batch=B, seq=S, (heads=2, head_dim=8)] in start: i64[] in pad: i32[B]
  out y = rotate(x) pairing = neox positions = arange(start = start, pad = pad)
  angles = computed(base = 10000) compute = f64 }
rope packed_block { in q: f16[tokens=T, (heads=2, head_dim=8)] in k: f16[tokens=T, (heads=1, head_dim=8)]
  in c: f16[T, 8] in s: f16[T, 8] in seqlen: i32[N] out rq = rotate(q) out rk = rotate(k)
  pairing = block(coeff = 4) sequences = seqlen angles = table(cos = c, sin = s) compute = storage }
rope in_seq { in x: f32[tokens=T, heads=2, head_dim=8] in seqlen: i64[N] in c: f32[P, 4] in s: f32[P, 4]
  out y = rotate(x) pairing = neox sequences = seqlen positions = in_sequence angles = table(cos = c, sin = s) }
rope glm { in x: f32[batch=B, seq=S, heads=2, head_dim=8] in k: f32[batch=B, seq=S, heads=2, head_dim=8]
  in start: i64[] in pad: i64[B] in fs: i64[] out y = rotate(x) out yk = copy(k)
  pairing = glm2d(inner = gptj) positions = glm2d(start = start, pad = pad, first_seqlen = fs)
  angles = computed(base = 10000) }
rope glm_table { in x: f32[batch=B, seq=S, heads=1, head_dim=8] in start: i64[] in fs: i64[]
  in c: f32[P, 2] in s: f32[P, 2] out y = rotate(x)
  pairing = glm2d(inner = neox) positions = glm2d(start = start, first_seqlen = fs) angles = table(cos = c, sin = s) }
rope sbhd_table { in x: f32[seq=S, batch=B, heads=2, head_dim=8] in pos: i64[S, B] in c: f32[P, 4] in s: f32[P, 4]
  out y = rotate(x) pairing = neox positions = pos angles = table(cos = c, sin = s) }
rmsnorm rms { in x: f32[N, 3, 8] in w: f32[8] out y axis = -1 }
rmsnorm rms_mixed { in x: bf16[N, 6] in w: f32[6] out y axis = 1 stash = f64 }
"""
SAN_PROGRAM = ropegen.compile(SAN_SPEC)
I64 = np.iinfo(np.int64)
I32 = np.iinfo(np.int32)


def _base_arrays(op, tokens: int, batch: int, seed: int) -> dict[str, np.ndarray]:
    return make_inputs(op.ir, Case(f"{tokens}x{batch}", tokens, batch, False, 40), seed=seed)


def _with(arrays, **changes):
    new = dict(arrays)
    for k, v in changes.items():
        new[k] = v
    return new


def _hostile_cases(op) -> list[tuple[str, dict, dict, str]]:
    """(label, arrays by name, options, expectation: ok | error | either)."""
    cases = []
    plan = op.plan
    tokens_layout = op.kind == "rope" and plan.token_layout == "t"
    batched = op.kind == "rope" and not tokens_layout
    a = _base_arrays(op, 5, 2, 1)
    cases.append(("odd 5x2", a, {}, "ok"))
    cases.append(("1 token", _base_arrays(op, 1, 1, 2), {}, "ok"))
    cases.append(("0 tokens", _base_arrays(op, 0, 1, 3), {}, "ok"))
    if batched:
        cases.append(("0 batch", _base_arrays(op, 4, 0, 4), {}, "ok"))
    cases.append(("threads 3", a, {"threads": 3}, "ok"))
    if op.kind == "rmsnorm":
        x = a[op.inputs[0]]
        cases.append(("x reversed", _with(a, **{op.inputs[0]: np.array(x[::-1], copy=True)[::-1]}), {}, "ok"))
        cases.append(("x zero-stride rows", _with(a, **{op.inputs[0]: np.broadcast_to(x[:1], x.shape)}), {}, "ok"))
        raw = np.zeros(x.nbytes + 1, np.uint8)
        mis = np.ndarray(x.shape, x.dtype, buffer=raw, offset=1)
        mis[...] = x
        cases.append(("x misaligned", _with(a, **{op.inputs[0]: mis}), {}, "ok"))
        cases.append(("scale broadcast (zero strides)",
                      _with(a, **{op.inputs[1]: np.broadcast_to(a[op.inputs[1]][..., :1], a[op.inputs[1]].shape)}),
                      {}, "ok"))
        return cases
    first = plan.streams[0].src
    x = a[first]
    # strides of the rotated input
    cases.append(("negative token stride", _with(a, **{first: np.flip(np.flip(x, 0).copy(), 0)}), {}, "ok"))
    cases.append(("zero token stride", _with(a, **{first: np.broadcast_to(x[:1], x.shape)}), {}, "ok"))
    cases.append(("head_dim not contiguous", _with(a, **{first: np.asfortranarray(x)}), {}, "ok"))
    raw = np.zeros(x.nbytes + 1, np.uint8)
    mis = np.ndarray(x.shape, x.dtype, buffer=raw, offset=1)
    mis[...] = x
    cases.append(("misaligned", _with(a, **{first: mis}), {}, "ok"))
    wide = np.zeros(x.shape[:-1] + (x.shape[-1] + 2,), x.dtype)
    wide[..., 1:-1] = x
    cases.append(("offset rows of a wider array", _with(a, **{first: wide[..., 1:-1]}), {}, "ok"))
    cases.append(("in place, negative stride", _with(a, **{first: np.flip(np.flip(x, 0).copy(), 0)}),
                  {"inplace": True}, "ok"))
    if len(plan.streams) > 1 and x.shape == a[plan.streams[1].src].shape:
        cases.append(("in place, one array as two inputs", _with(a, **{plan.streams[1].src: a[first]}),
                      {"inplace": True}, "error"))
    o = np.zeros_like(x)
    cases.append(("out= zero-stride (read-only)", a, {"out_zero_stride": True}, "error"))
    cases.append(("out= reversed", a, {"out_reversed": True}, "ok"))
    del o
    # positions
    pos = plan.positions
    table = plan.angles.__class__.__name__ == "TableAnglesPlan" and not plan.angles.per_token
    if pos.ids:
        ids = a[pos.ids]
        rows = a[plan.angles.cos].shape[0] if table else None
        info = np.iinfo(ids.dtype)
        for label, v in [("-1", -1), ("rows", rows), ("int max", info.max), ("int min", info.min)]:
            if v is None:
                continue
            bad = np.array(ids, copy=True)
            bad.flat[-1] = v
            cases.append((f"position {label}", _with(a, **{pos.ids: bad}), {}, "error" if table else "either"))
        cases.append(("positions reversed view", _with(a, **{pos.ids: np.flip(np.flip(ids).copy())}), {}, "ok"))
        if table:
            c = a[plan.angles.cos]
            cases.append(("table non-contiguous", _with(a, **{plan.angles.cos: np.asfortranarray(c)}), {}, "ok"))
    if isinstance(pos.start, str):
        # glm2d: a token before its pad is position 0, so a negative start is valid there
        strict = table and pos.kind.value == "arange"
        for label, v in [("start int64 max", I64.max), ("start int64 min", I64.min), ("start -1000", -1000)]:
            cases.append((label, _with(a, **{pos.start: np.int64(v)}), {}, "error" if strict else "either"))
    if pos.pad:
        pad = a[pos.pad]
        info = np.iinfo(pad.dtype)
        for label, v in [("pad max", info.max), ("pad min", info.min)]:
            bad = np.array(pad, copy=True)
            bad[-1] = v
            cases.append((label, _with(a, **{pos.pad: bad}), {}, "error" if table else "either"))
    if isinstance(pos.first_seqlen, str):
        for label, v in [("first_seqlen 0", 0), ("first_seqlen -7", -7), ("first_seqlen int64 max", I64.max),
                         ("first_seqlen int64 min", I64.min)]:
            cases.append((label, _with(a, **{pos.first_seqlen: np.int64(v)}), {}, "either"))
    if plan.sequences:
        lens = a[plan.sequences]
        info = np.iinfo(lens.dtype)
        T = sum(int(v) for v in lens)
        for label, v in [("lengths negative", [T + 1, -1]), ("lengths overflow", [info.max, info.max, T + 2]),
                         ("lengths min", [info.min, T]), ("lengths short", [T - 1])]:
            cases.append((f"sequence {label}", _with(a, **{plan.sequences: np.array(v, lens.dtype)}), {}, "error"))
        cases.append(("zero-length sequences", _with(a, **{plan.sequences: np.array([0, T, 0], lens.dtype)}), {}, "ok"))
        z = _base_arrays(op, 0, 1, 5)
        cases.append(("0 tokens, 0 sequences", _with(z, **{plan.sequences: np.zeros(0, lens.dtype)}), {}, "ok"))
        cases.append(("0 tokens, 3 empty sequences", _with(z, **{plan.sequences: np.zeros(3, lens.dtype)}), {}, "ok"))
    return cases


def _hostile_params():
    out = []
    for op in SAN_PROGRAM:
        for label, *_ in _hostile_cases(op):
            out.append(pytest.param(op.name, label, id=f"{op.name}-{label}"))
    return out


SANITIZE = ("-std=c11", "-O1", "-g", "-ffp-contract=off", "-fno-math-errno", "-fno-fast-math",
            "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")
_SAN_EXE: dict[str, Path | None] = {}


def _sanitizer_exe(op) -> Path | None:
    if op.name not in _SAN_EXE:
        try:
            cbuild.build({"t.c": "int main(void) { return 0; }\n"}, "sanitizer-probe", shared=False, flags=SANITIZE)
        except cbuild.CompilerError:
            _SAN_EXE[op.name] = None
            return None
        sources = {**op.sources["c"], **backends.get("c").driver_source(op.plan, op.spec.file)}
        _SAN_EXE[op.name] = cbuild.build(sources, f"{op.name}-reliability-asan", shared=False,
                                         flags=SANITIZE + cbuild.openmp_flags())
    return _SAN_EXE[op.name]


def _options(op, args, options):
    opts = dict(options)
    if opts.pop("out_zero_stride", False):
        outs = op.run_all(*[np.array(x, copy=True) for x in args], backend="numpy")
        opts["out"] = tuple(np.broadcast_to(o[:1], o.shape) for o in outs)
    if opts.pop("out_reversed", False):
        outs = op.run_all(*[np.array(x, copy=True) for x in args], backend="numpy")
        opts["out"] = tuple(np.flip(np.zeros_like(o), 0) for o in outs)
    return opts


def _copies(args, options):
    """Fresh copies of the arrays a call in place overwrites; one array given twice stays one array."""
    if not options.get("inplace"):
        return list(args)
    fresh = {}
    for x in args:
        if id(x) not in fresh:
            fresh[id(x)] = np.array(x, copy=True) if x.ndim else x
    return [fresh[id(x)] for x in args]


def _call(op, args, options, backend):
    """('ok', outputs) | ('error', message); anything but ValueError propagates."""
    copies = _copies(args, options)
    try:
        return "ok", op.run_all(*copies, backend=backend, **_options(op, copies, options))
    except ValueError as exc:
        return "error", str(exc)


# the run option each hostile case's option word stands for (Backend.run_options)
OPTION_WORDS = {"out_zero_stride": "out", "out_reversed": "out"}


@pytest.mark.skipif(C_WHY is not None, reason=f"no C compiler: {C_WHY}")
@pytest.mark.parametrize("op_name,label", _hostile_params())
def test_hostile_inputs_under_sanitizers(op_name, label, tmp_path):
    from test_c_backend import read_outputs, write_case   # the driver's case-file format, shared
    op = SAN_PROGRAM[op_name]
    (_, arrays, options, expect), = [c for c in _hostile_cases(op) if c[0] == label]
    args = [arrays[n] for n in op.inputs]
    problems = []
    results = {}
    for b in RUNNABLE:
        if {OPTION_WORDS.get(o, o) for o in options} - backends.get(b).run_options:
            continue     # a backend that does not take the option (NumPy: none of them; GPUs: threads=)
        kind, got = _call(op, args, options, b)
        results[b] = (kind, got)
        _count("hostile:backend calls")
        if expect != "either" and kind != expect:
            problems.append(f"{b}: expected {expect}, got {kind}: {got if kind == 'error' else 'outputs'}")
    # every backend agrees on accepting or refusing the call
    kinds = {k for k, _ in results.values()}
    if len(kinds) > 1:
        problems.append("backends disagree: " + ", ".join(f"{b}={k}" for b, (k, _) in results.items()))
    # accepted: compare with the reference (when it can evaluate the inputs)
    for b, (kind, outs) in results.items():
        if kind != "ok":
            continue
        try:
            with np.errstate(all="ignore"):
                ref = reference.evaluate(op.ir, dict(arrays))
        except Exception:  # noqa: BLE001 - the reference is no judge of invalid inputs
            continue
        if expect == "either" and not all(np.isfinite(r).all() for r in ref.values()):
            continue
        problems += _check_outputs(op, outs, ref, arrays, b)
    # the C code itself under ASan + UBSan, through the standalone driver
    exe = _sanitizer_exe(op)
    if exe is None:
        pytest.skip("the C compiler cannot build with -fsanitize=address,undefined here")
    kern = op.kernel("c")
    copies = _copies(args, options)
    try:
        bound = kern.bind(*copies, **_options(op, copies, options))
    except ValueError:
        bound = None     # refused before any C code runs
    if bound is not None:
        env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=99",
               "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=98"}
        case_file, out_file = tmp_path / "case.bin", tmp_path / "out.bin"
        outs = write_case(case_file, kern, bound)
        c_kind, c_got = results.get("c", ("ok", None))
        for isa, stream, threads in (("", "1", None), ("base", "0", 1)):
            if threads is not None:
                bound.values[[q.kind for q in kern.params].index("threads")] = threads
                outs = write_case(case_file, kern, bound)
            r = subprocess.run([str(exe), str(case_file), str(out_file)], capture_output=True, text=True,
                               env={**env, "ROPEGEN_ISA": isa, "ROPEGEN_STREAM": stream}, timeout=120)
            _count("hostile:sanitizer runs")
            report = r.stderr.strip()
            where = f"asan driver (ISA {isa or 'best'})"
            if r.returncode != 0 or "runtime error" in report or "Sanitizer" in report:
                problems.append(f"{where}: exit {r.returncode}\n{report[-3000:]}")
                continue
            status = int(r.stdout.split()[1])
            if (status == 0) != (c_kind == "ok"):
                problems.append(f"{where}: status {status}, but the ctypes call gave {c_kind}")
            elif status == 0 and c_got is not None:
                for got, want in zip(read_outputs(out_file, outs), c_got):
                    if not np.array_equal(_bits(got), _bits(want)):
                        problems.append(f"{where}: output differs from the ctypes call")
    assert not problems, f"{op_name} [{label}]\n" + "\n".join(problems)


@pytest.mark.skipif(C_WHY is not None, reason=f"no C compiler: {C_WHY}")
@pytest.mark.parametrize("op_name", [op.name for op in SAN_PROGRAM])
def test_c_abi_negative_sizes_and_threads_under_sanitizers(op_name, tmp_path):
    """Values only a C caller can pass: negative sizes are ROPEGEN_EARG (3), threads < 1 mean 1."""
    from test_c_backend import write_case
    op = SAN_PROGRAM[op_name]
    exe = _sanitizer_exe(op)
    if exe is None:
        pytest.skip("the C compiler cannot build with -fsanitize=address,undefined here")
    kern = op.kernel("c")
    arrays = _base_arrays(op, 3, 2, 9)
    problems = []
    kinds = [q.kind for q in kern.params]
    for what, idx, value, want in ([("threads 0", kinds.index("threads"), 0, 0),
                                    ("threads -5", kinds.index("threads"), -5, 0)]
                                   + [(f"size {kern.params[i].tensor} = -1", i, -1, 3)
                                      for i, k in enumerate(kinds) if k == "dim"]):
        bound = kern.bind(*[arrays[n] for n in op.inputs], threads=2)
        bound.values[idx] = value
        case_file = tmp_path / "case.bin"
        write_case(case_file, kern, bound)
        r = subprocess.run([str(exe), str(case_file), str(tmp_path / "out.bin")], capture_output=True, text=True,
                           env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1:exitcode=99",
                                "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=98"}, timeout=120)
        _count("hostile:abi runs")
        report = r.stderr.strip()
        if r.returncode != 0 or "runtime error" in report or "Sanitizer" in report:
            problems.append(f"{what}: exit {r.returncode}\n{report[-2000:]}")
        elif f"status {want}" not in r.stdout:
            problems.append(f"{what}: {r.stdout.split(chr(10))[0]}, expected status {want}")
    assert not problems, "\n".join(problems)


def test_hostile_counts():
    _report("hostile")


def test_cli_compile_of_a_300_char_operator_name(tmp_path):
    """Generated file names are the operator name: a clean exit (0, or 2 with a diagnostic), no traceback."""
    spec = tmp_path / "long.rope"
    spec.write_text(KNOWN_SPECS["300-char operator name"], encoding="utf-8")
    rc, out, err = _cli(["compile", str(spec), "-o", str(tmp_path / "gen")])
    _count("cli:compile", 1)
    assert rc in (0, 2) and "Traceback" not in out + err, err


# =============================================================================================
# independent oracles where the backends and the reference could share one misreading

def _rotate_pairs(x, pairs, cos_of, sin_of):
    """x [..., D] float64; pairs (a, b); cos_of(e) / sin_of(e): the angle's cos/sin for element e."""
    y = x.astype(np.float64).copy()
    for a, b in pairs:
        xa, xb = x[..., a].astype(np.float64), x[..., b].astype(np.float64)
        y[..., a] = xa * cos_of(a) - xb * sin_of(a)
        y[..., b] = xb * cos_of(b) + xa * sin_of(b)
    return y


def test_sbhd_token_s_b_uses_positions_s_b():
    """x[s, b] rotates by the angle of pos[s, b] (positions are declared with the token dims [S, B])."""
    op = ropegen.compile("rope s { in x: f64[seq=S, batch=B, heads=1, head_dim=4] in pos: i64[S, B] "
                         "out y = rotate(x) pairing = neox positions = pos angles = computed(base = 10000) "
                         "compute = f64 }")["s"]
    S, B = 3, 2
    x = np.random.default_rng(0).standard_normal((S, B, 1, 4))
    pos = np.arange(S * B, dtype=np.int64).reshape(S, B) * 7
    inv = np.array([1.0, 10000.0 ** -0.5])
    want = np.empty_like(x)
    for s in range(S):
        for b in range(B):
            th = pos[s, b] * inv
            want[s, b] = _rotate_pairs(x[s, b], [(0, 2), (1, 3)], lambda e: np.cos(th[e % 2]),
                                       lambda e: np.sin(th[e % 2]))
    got = {"reference": reference.evaluate(op.ir, {"x": x, "pos": pos})["y"]}
    got.update({b: op.run(x, pos, backend=b) for b in RUNNABLE})
    bad = {k: float(np.abs(v - want).max()) for k, v in got.items() if not np.allclose(v, want, atol=1e-12)}
    assert not bad, f"max error per backend: {bad}"


def test_gptj_full_width_table_element_e_reads_column_e():
    op = ropegen.compile("rope g { in x: f64[tokens=T, heads=1, head_dim=8] in pos: i64[T] in c: f64[P, 8] "
                         "in s: f64[P, 8] out y = rotate(x) pairing = gptj positions = pos "
                         "angles = table(cos = c, sin = s) compute = f64 }")["g"]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 1, 8))
    c, s = rng.uniform(-1, 1, (4, 8)), rng.uniform(-1, 1, (4, 8))
    pos = np.array([3, 0, 2], dtype=np.int64)
    want = np.stack([_rotate_pairs(x[t, 0], [(0, 1), (2, 3), (4, 5), (6, 7)], lambda e, p=pos[t]: c[p, e],
                                   lambda e, p=pos[t]: s[p, e]) for t in range(3)])[:, None]
    got = {"reference": reference.evaluate(op.ir, {"x": x, "pos": pos, "c": c, "s": s})["y"]}
    got.update({b: op.run(x, pos, c, s, backend=b) for b in RUNNABLE})
    bad = {k: float(np.abs(v - want).max()) for k, v in got.items() if not np.allclose(v, want, atol=1e-12)}
    assert not bad, f"max error per backend: {bad}"
