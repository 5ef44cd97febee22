"""What the command line writes for programs and people: `check --json` / `explain --json` documents
with stable keys, progress on stderr only (plain lines off a terminal, rich on one, none with --quiet),
a check table within 100 columns, one line naming the extra for a missing optional package, and the
import-gguf / import-onnx --fix wiring."""
from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ropegen
from ropegen import backends, cli, extras
from ropegen import crosscheck as checker
from ropegen.crosscheck import NOT_RUN, RAN, Report, Row
from ropegen.ops.explain import facts, number
from ropegen.progress import Progress

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
LLAMA = EXAMPLES / "llama3.rope"

CHECK_KEYS = {"schema_version", "command", "ropegen_version", "seed", "memory_limit_bytes", "backends",
              "skipped_backends", "operators", "summary"}
OPERATOR_KEYS = {"spec", "operator", "kind", "tolerance", "backends"}
RESULT_KEYS = {"backend", "status", "reason", "cases_run", "cases_total", "max_abs_error", "max_rel_error", "cases"}
CASE_KEYS = {"case", "status", "max_abs_error", "max_rel_error", "note"}
STATUSES = {"passed", "failed", "skipped", "not_run"}


def _check_json(capsys, *argv) -> tuple[int, dict, str]:
    code = cli.main(["check", *map(str, argv), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def _results(doc: dict) -> list[dict]:
    return [r for op in doc["operators"] for r in op["backends"]]


# ---------------------------------------------------------------------------------------------
# check --json

def test_check_json_has_the_documented_keys(capsys):
    code, doc, err = _check_json(capsys, LLAMA, "--backend", "numpy", "--seed", "3")
    assert code == 0 and doc["summary"]["exit_code"] == 0
    assert set(doc) == CHECK_KEYS and doc["schema_version"] == 1 and doc["command"] == "check"
    assert doc["seed"] == 3 and doc["backends"] == ["numpy"] and doc["skipped_backends"] == []
    assert [op["operator"] for op in doc["operators"]] == ["llama3_8b", "llama3_8b_cached"]
    for op in doc["operators"]:
        assert set(op) == OPERATOR_KEYS and op["kind"] == "rope" and op["spec"] == str(LLAMA)
        assert op["tolerance"]["dtype"] == "bf16" and op["tolerance"]["rtol"] > 0 and op["tolerance"]["atol"] > 0
        (r,) = op["backends"]
        assert set(r) == RESULT_KEYS and r["status"] == "passed" and r["reason"] is None
        assert r["cases_run"] == r["cases_total"] == 3 == len(r["cases"])
        assert all(set(c) == CASE_KEYS and c["status"] == "passed" for c in r["cases"])
        assert r["max_abs_error"] == max(c["max_abs_error"] for c in r["cases"]) > 0
    assert doc["summary"] == {"passed": 6, "failed": 0, "not_run": 0, "exit_code": 0}
    assert "checking" in err            # progress still shows, on stderr


def test_check_json_lists_skipped_backends_with_reasons(monkeypatch, capsys):
    class Off(type(backends.get("numpy"))):
        def unavailable(self):
            return "switched off for this test"
    monkeypatch.setattr(backends, "BACKENDS", (Off(), *[b for b in backends.BACKENDS if b.name != "numpy"]))
    wanted, skipped = checker.select_backends(None)
    code, doc, _ = _check_json(capsys, LLAMA)
    assert {"backend": "numpy", "reason": "switched off for this test"} in doc["skipped_backends"]
    assert doc["backends"] == list(wanted) and [s["backend"] for s in doc["skipped_backends"]] == list(skipped)
    for op in doc["operators"]:
        off = [r for r in op["backends"] if r["backend"] == "numpy"]
        assert off == [{"backend": "numpy", "status": "skipped", "reason": "switched off for this test",
                        "cases_run": 0, "cases_total": 0, "max_abs_error": None, "max_rel_error": None,
                        "cases": []}]
    assert code == doc["summary"]["exit_code"]


def test_check_json_reports_a_mismatch(monkeypatch, capsys):
    monkeypatch.setattr(checker, "compare", lambda *a: (0.5, 0.25, False))
    code, doc, _ = _check_json(capsys, LLAMA, "--backend", "numpy")
    assert code == 1 and doc["summary"] == {"passed": 0, "failed": 6, "not_run": 0, "exit_code": 1}
    for r in _results(doc):
        assert r["status"] == "failed" and r["reason"] == "the error exceeds the tolerance"
        assert r["max_abs_error"] == 0.5 and r["max_rel_error"] == 0.25 and r["cases_run"] == 3


def test_a_nan_in_a_later_output_is_not_hidden_by_an_earlier_finite_error(monkeypatch, capsys):
    """llama3_8b has two outputs: q_rot's error was finite, k_rot's NaN; the case's worst error was
    max(0.5, nan) = 0.5 (Python's max keeps the first when NaN compares false): a finite number for a
    NaN output."""
    verdicts = iter([(0.5, 0.25, False), (math.nan, math.nan, False)] * 20)
    monkeypatch.setattr(checker, "compare", lambda *a: next(verdicts))
    rows = checker.check_operator(ropegen.compile(LLAMA)["llama3_8b"], ("numpy",))
    assert rows and all(math.isnan(r.max_abs) and math.isnan(r.max_rel) and not r.ok for r in rows), rows
    verdicts = iter([(0.5, 0.25, False), (math.nan, math.nan, False)] * 20)
    code, doc, _ = _check_json(capsys, LLAMA, "--backend", "numpy")
    r = doc["operators"][0]["backends"][0]
    assert code == 1 and r["max_abs_error"] is None and [c["max_abs_error"] for c in r["cases"]] == [None] * 3
    assert "not finite" in r["reason"] and all("not finite" in c["note"] for c in r["cases"])


def test_check_json_marks_cases_too_large_as_not_run(monkeypatch, capsys):
    monkeypatch.setenv("ROPEGEN_MEMORY_LIMIT", "1K")
    code, doc, err = _check_json(capsys, LLAMA, "--backend", "numpy")
    assert code == 2 and "not run" in err
    for r in _results(doc):
        assert r["status"] == "not_run" and r["cases_run"] == 0 and r["cases_total"] == 3
        assert "too large to test" in r["reason"]


def test_check_json_is_strict_json_for_every_row_kind():
    rows = [Row("o", "numpy", "f32", "1 token", 0.1, 0.2, True),
            Row("o", "numpy", "f32", "odd 7x3", math.inf, math.inf, False, "error: boom"),
            Row("o", "numpy", "f32", "33 strided", math.nan, math.nan, False, "not run: too large", NOT_RUN)]
    op = ropegen.compile(LLAMA)["llama3_8b"]
    doc = Report(("numpy",), {"cuda": "no device"}, [("s.rope", op, rows)]).document(1)
    json.dumps(doc, allow_nan=False)
    (res, skipped) = doc["operators"][0]["backends"]
    assert res["status"] == "failed" and res["reason"] == "error: boom" and res["cases_run"] == 2
    assert [c["status"] for c in res["cases"]] == ["passed", "failed", "not_run"]
    assert skipped["status"] == "skipped" and skipped["reason"] == "no device"


# ---------------------------------------------------------------------------------------------
# explain --json

def test_explain_json_has_the_plan_facts(capsys):
    specs = [EXAMPLES / "ggml_rope.rope", EXAMPLES / "rmsnorm_family.rope", LLAMA]
    assert cli.main(["explain", *map(str, specs), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1 and doc["command"] == "explain" and doc["lengths"] == []
    assert [s["spec"] for s in doc["specs"]] == [str(s) for s in specs]
    for s in doc["specs"]:
        program = ropegen.compile(s["spec"])
        assert s["sha256"] == program.spec.sha256
        assert [o["name"] for o in s["operators"]] == [op.name for op in program]
    ops = {o["name"]: o for s in doc["specs"] for o in s["operators"]}
    llama = ops["llama3_8b"]
    assert llama["kind"] == "rope" and llama["pairing"]["kind"] == "neox" and llama["head_dim"] == 128
    assert llama["pairs"][:2] == [{"a": 0, "b": 64, "ca": 0, "cb": 0, "stream": 0},
                                  {"a": 1, "b": 65, "ca": 1, "cb": 1, "stream": 0}]
    assert llama["inputs"][0] == {"name": "q", "dtype": "bf16", "shape": ["T", 32, 128]}
    assert llama["scaling"]["form"] == "llama3" and llama["angles"]["form"] == "exact"
    assert llama["dtypes"]["storage"] == "bf16"
    plan = ropegen.compile(LLAMA)["llama3_8b"].plan
    # the constants exactly: hex gives the very float64 the plan holds, decimal reads back to it too
    assert [float.fromhex(f["hex"]) for f in llama["angles"]["inv_freq"]] == list(plan.angles.inv_freq)
    assert [float(f["decimal"]) for f in llama["angles"]["inv_freq"]] == list(plan.angles.inv_freq)
    assert ops["ggml_neox_yarn"]["angles"]["form"] == "ggml" and ops["ggml_neox_yarn"]["angles"]["yarn"]
    assert ops["ggml_neox_yarn"]["angles"]["theta_scale"]["type"] == "f32"
    assert ops["llama3_8b_cached"]["angles"]["form"] == "table"
    norm = ops["gemma_rmsnorm"]
    assert norm["kind"] == "rmsnorm" and float.fromhex(norm["epsilon"]["hex"]) > 0
    assert set(norm["dtypes"]) == {"x", "scale", "y", "stash", "product", "y_unquantized"}


def test_explain_json_pairs_match_the_pair_blocks():
    for path in sorted(EXAMPLES.glob("*.rope")):
        for op in ropegen.compile(path):
            f = facts(op.plan)
            json.dumps(f, allow_nan=False)
            if f["kind"] == "rope":
                assert len(f["pairs"]) == sum(b["count"] for b in f["pair_blocks"]), op.name


def test_explain_json_at_lengths(capsys):
    spec = EXAMPLES / "longrope_dynamic.rope"
    assert cli.main(["explain", str(spec), "--json", "--length", "100", "--length", "100000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ops = [o for o in doc["specs"][0]["operators"] if o["kind"] == "rope"]
    dependent = [o for o in ops if o["at_lengths"] and o["at_lengths"][0]["depends_on_length"]]
    assert dependent, [o["name"] for o in ops]
    for o in dependent:
        short, long = o["at_lengths"]
        assert (short["length"], long["length"]) == (100, 100000) and short["note"]
        assert short["inv_freq"] != long["inv_freq"], o["name"]


def test_numbers_are_exact_in_their_own_precision():
    import numpy as np
    for x in (0.1, 1e-300, 2.0 ** -1074, 123456789.125):
        d = number(x)
        assert d["type"] == "f64" and float(d["decimal"]) == x and float.fromhex(d["hex"]) == x
    for x in (np.float32(0.1), np.float32(3e20), np.float32(1e-45), np.float32(1)):
        d = number(x)
        assert d["type"] == "f32" and np.float32(d["decimal"]) == x and float.fromhex(d["hex"]) == float(x)
    assert number(np.float32(0.1))["decimal"] == "0.1"


# ---------------------------------------------------------------------------------------------
# progress: stderr only; plain off a terminal, rich on one, nothing with --quiet

def test_progress_off_a_terminal_is_plain_lines_on_stderr(capsys):
    assert cli.main(["check", str(LLAMA), "--backend", "numpy"]) == 0
    out, err = capsys.readouterr()
    assert "building the kernels of 2 operator(s) ..." in err
    assert f"[1/2] checking {LLAMA}: llama3_8b (numpy) ..." in err
    assert f"[2/2] checking {LLAMA}: llama3_8b_cached (numpy) ..." in err
    assert "\x1b[" not in err and "checking" not in out and out.startswith("operator")


def test_quiet_silences_progress(capsys, tmp_path):
    assert cli.main(["check", str(LLAMA), "--backend", "numpy", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "passed" in out
    assert cli.main(["compile", str(LLAMA), "-o", str(tmp_path), "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and all(Path(p).is_file() for p in out.split())


def test_compile_prints_paths_on_stdout_and_progress_on_stderr(capsys, tmp_path):
    assert cli.main(["compile", str(LLAMA), str(EXAMPLES / "rmsnorm_family.rope"), "-o", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert all(Path(p).is_file() for p in out.split()) and len(out.split()) > 4
    assert f"[1/2] compiling {LLAMA} ..." in err and "[2/2] compiling" in err


def test_progress_object_plain_quiet_and_live(capsys):
    plain = io.StringIO()
    with Progress(stream=plain, live=False) as p:
        assert not p.live
        with p.phase("building"):
            pass
        with p.phase("checking", total=2) as ph:
            ph.step("a")
            ph.step("b")
        assert ph.done == 2
    assert plain.getvalue() == "building ...\n[1/2] a ...\n[2/2] b ...\n"
    quiet = io.StringIO()
    with Progress(stream=quiet, quiet=True) as p, p.phase("x", total=1) as ph:
        ph.step("y")
    assert quiet.getvalue() == ""
    live = io.StringIO()
    with Progress(stream=live, live=True) as p, p.phase("checking", total=2) as ph:
        assert p.live
        ph.step("first")
        ph.step("second")
    assert "checking: done in" in live.getvalue() and "\x1b[" in live.getvalue()
    out, _ = capsys.readouterr()
    assert out == ""                     # never on stdout
    assert not Progress(stream=io.StringIO()).live   # a stream that is no terminal: plain


def test_bench_progress_is_on_stderr(capsys):
    host = backends.BACKENDS[0].name
    assert cli.main(["bench", str(LLAMA), "--backend", host, "--shape", "T=1", "--repeats", "1"]) == 0
    out, err = capsys.readouterr()
    assert f"measuring 2 operator(s) on {host} ..." in err
    assert out.startswith("operator") and "measuring" not in out and "llama3_8b_cached" in out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses a Linux pseudo-terminal for stderr")
def test_progress_on_a_terminal_is_rich_and_stdout_stays_clean():
    import pty
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ropegen", "check", str(LLAMA), "--backend", "numpy", "--json"],
                            stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, env={**os.environ, "COLUMNS": "100"})
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:    # the child closed the terminal
            break
        if not chunk:
            break
        err += chunk
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 0
    os.close(master)
    doc = json.loads(out)                 # stdout is the JSON document alone
    assert doc["summary"]["passed"] == 6
    assert b"\x1b[" in err and "━".encode() in err and b"checking: done in" in err
    assert b"[1/2]" not in err            # not the plain lines


# ---------------------------------------------------------------------------------------------
# the table fits 100 columns

def test_check_table_of_the_examples_fits_100_columns(capsys):
    specs = sorted(str(p) for p in EXAMPLES.glob("*.rope"))
    assert cli.main(["check", *specs, "--backend", "numpy", "-q"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100, max(out.splitlines(), key=len)
    assert "passed, 0 failed" in out


def test_long_names_and_notes_stay_within_100_columns():
    name = "an_operator_with_a_very_long_name_indeed_" * 2
    note = "error: RuntimeError: " + "x" * 300 + " and then " + "word " * 50
    rows = [Row(name, "numpy", "f8e4m3", "33 strided", 1.234e-12, 5.678e-300, False, note),
            Row(name + "2", "numpy", "f32", "1 token", math.nan, math.nan, False, "not run: " + "y " * 80, NOT_RUN),
            Row("short", "numpy", "f32", "1 token", 0.0, 0.0, True)]
    op = ropegen.compile(LLAMA)["llama3_8b"]
    text = Report(("numpy",), {"cuda": "CuPy is not importable " * 10}, [("s", op, rows)]).text()
    assert max(len(line) for line in text.splitlines()) <= 100, text
    assert "MISMATCH [1]" in text and "not run [2]" in text and "..." in text
    # every fact is still there, in the notes below or the skipped list (long words broken, not cut)
    flat = "".join(text.split())
    assert "".join(note.split()) in flat and "".join(("CuPy is not importable " * 10).split()) in flat
    assert all(r.status in (RAN, NOT_RUN) for r in rows)


# ---------------------------------------------------------------------------------------------
# a missing optional package: one line naming the extra, exit 2

def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ropegen: error: ") and "Traceback" not in err, err
    return lines[0]


def test_extra_is_found_from_the_distribution_metadata(monkeypatch):
    from importlib import metadata
    monkeypatch.setattr(metadata, "requires", lambda dist: [
        "numpy>=1.24", 'onnx>=1.18; extra == "test"', 'onnx>=1.18; extra == "onnx"', 'pytest; extra == "test"',
        'cupy-cuda12x; extra == "gpu"', 'ggml-python>=0.0.45; extra == "bench"', 'onnxruntime; extra == "bench"'])
    assert extras.extra_for("onnx") == "onnx"          # the smallest extra that brings it
    assert extras.extra_for("cupy") == "gpu" and extras.extra_for("ggml") == "bench"
    assert extras.extra_for("onnxruntime") == "bench" and extras.extra_for("numpy") is None
    assert extras.install_hint("onnx").endswith("install the onnx extra: pip install 'ropegen[onnx]'")
    assert extras.install_hint("nothere").endswith("pip install nothere")


def test_a_backend_without_its_package_names_the_extra(monkeypatch, capsys):
    gpu = backends.BACKENDS[-1]
    monkeypatch.setattr(type(gpu), "unavailable",
                        lambda self: "X is not importable (ModuleNotFoundError: No module named 'cupy'); pip install x")
    monkeypatch.setattr(extras, "extra_for", lambda module: {"cupy": "gpux"}.get(module))
    for argv in (["bench", "--suite", "llama3", "--backend", gpu.name], ["check", str(LLAMA), "--backend", gpu.name]):
        assert cli.main(argv) == 2
        line = _one_line_error(capsys.readouterr().err)
        assert line == (f"ropegen: error: backend '{gpu.name}' cannot run here: the 'cupy' package is not "
                        f"installed; install the gpux extra: pip install 'ropegen[gpux]'")
    assert cli.main(["check", str(LLAMA), "-q"]) == 0        # not named: skipped, with the same words
    assert (f"  {gpu.name}: the 'cupy' package is not installed; install the gpux extra: pip install "
            f"'ropegen[gpux]'") in capsys.readouterr().out
    monkeypatch.setattr(type(gpu), "unavailable", lambda self: "no device")   # not a package: said as it is
    assert cli.main(["check", str(LLAMA), "--backend", gpu.name]) == 2
    assert _one_line_error(capsys.readouterr().err).endswith("cannot run here: no device")


def test_import_onnx_without_onnx_names_the_extra(monkeypatch, tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\0")
    monkeypatch.setitem(sys.modules, "onnx", None)      # `import onnx` fails as when it is not installed
    assert cli.main(["import-onnx", str(model), "-o", str(tmp_path / "out")]) == 2
    line = _one_line_error(capsys.readouterr().err)
    extra = extras.extra_for("onnx")
    assert "the 'onnx' package is not installed" in line
    assert line.endswith(f"pip install 'ropegen[{extra}]'" if extra else "pip install onnx")


def test_import_gguf_without_gguf_names_the_package(monkeypatch, tmp_path, capsys):
    pytest.importorskip("ropegen.importers.gguf", reason="the GGUF importer is not in this checkout yet")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "gguf", None)
    assert cli.main(["import-gguf", str(model), "-o", str(tmp_path / "out")]) == 2
    line = _one_line_error(capsys.readouterr().err)
    extra = extras.extra_for("gguf")
    assert "the 'gguf' package is not installed" in line
    assert line.endswith(f"pip install 'ropegen[{extra}]'" if extra else "pip install gguf")


def test_any_command_missing_a_package_is_one_line(monkeypatch, capsys):
    def explain(*a, **k):
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
    monkeypatch.setattr("ropegen.ops.explain.explain", explain)
    assert cli.main(["explain", str(LLAMA)]) == 2
    assert "explain: the 'matplotlib' package is not installed" in _one_line_error(capsys.readouterr().err)

    def broken(*a, **k):     # a module of ropegen itself missing is a bug, not the user's: not hidden
        raise ModuleNotFoundError("No module named 'ropegen.nothing'", name="ropegen.nothing")
    monkeypatch.setattr("ropegen.ops.explain.explain", broken)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["explain", str(LLAMA)])


# ---------------------------------------------------------------------------------------------
# the importers' entry points

def test_import_gguf_is_wired(monkeypatch, tmp_path, capsys):
    import types
    calls = []

    def import_gguf(model, out_dir):
        calls.append((model, out_dir))
        if "bad" in str(model):
            raise ValueError("general.architecture: 'mamba' has no RoPE")
        return Path(out_dir) / "m.rope", ["rope_scaling.finetuned is not modelled"]
    monkeypatch.setitem(sys.modules, "ropegen.importers.gguf", types.SimpleNamespace(import_gguf=import_gguf))
    model, bad = tmp_path / "m.gguf", tmp_path / "bad.gguf"
    model.write_bytes(b"GGUF")
    bad.write_bytes(b"GGUF")
    assert cli.main(["import-gguf", str(model), "-o", str(tmp_path / "out")]) == 0
    out, err = capsys.readouterr()
    assert calls == [(str(model), str(tmp_path / "out"))]
    assert out == f"{tmp_path / 'out' / 'm.rope'}\n" and err == "warning: rope_scaling.finetuned is not modelled\n"
    assert cli.main(["import-gguf", str(bad), "-o", str(tmp_path)]) == 2
    assert _one_line_error(capsys.readouterr().err).endswith("'mamba' has no RoPE")
    assert cli.main(["import-gguf", str(tmp_path / "none.gguf"), "-o", str(tmp_path)]) == 2
    assert "no such model file" in capsys.readouterr().err


def test_import_onnx_fix_and_report_are_wired(monkeypatch, tmp_path, capsys):
    import ropegen.importers.onnx as onnx_importer
    seen = {}

    def import_model(model, out_dir, fix=None, report=None):
        seen.update(model=model, out_dir=out_dir, fix=fix)
        report("skipped 2 nodes: Cos, Sin")
        return [Path(out_dir) / "a.rope", Path(out_dir) / "b.rope"]
    monkeypatch.setattr(onnx_importer, "import_model", import_model)
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\0")
    argv = ["import-onnx", str(model), "-o", str(tmp_path), "--fix", "batch=1", "--fix", " sequence_length = 128"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert seen == {"model": str(model), "out_dir": str(tmp_path), "fix": {"batch": 1, "sequence_length": 128}}
    assert out.split() == [str(tmp_path / "a.rope"), str(tmp_path / "b.rope")]
    assert err == "skipped 2 nodes: Cos, Sin\n"
    assert cli.main(argv + ["--fix", "batch=2"]) == 2
    assert "--fix batch is given twice" in _one_line_error(capsys.readouterr().err)
    for bad in ("batch", "batch=0", "=3", "batch=x"):
        with pytest.raises(SystemExit) as info:
            cli.main(["import-onnx", str(model), "-o", str(tmp_path), "--fix", bad])
        assert info.value.code == 2 and "argument --fix" in capsys.readouterr().err


def test_bench_json_uses_the_targets_document_hook(tmp_path, monkeypatch):
    """A target whose bench module has `json_document` (CUDA: the device's facts) writes that document,
    with the command as given; other targets write the bare rows."""
    import types

    import ropegen.bench.harness as harness
    import ropegen.bench.targets as targets
    from ropegen import cli
    rows = [{"impl": "ropegen c", "ms": 1.0}]
    monkeypatch.setattr(harness, "measure", lambda ops, **kw: (rows, "table"))
    hook = types.SimpleNamespace(json_document=lambda results, command: {"command": command, "rows": results})
    monkeypatch.setattr(targets, "hooks", lambda name: hook)
    out = tmp_path / "r.json"
    assert cli.main(["bench", "examples/llama3.rope", "--backend", "c", "-q", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["rows"] == rows and doc["command"].startswith("ropegen bench examples/llama3.rope --backend c")
    monkeypatch.setattr(targets, "hooks", lambda name: types.SimpleNamespace())
    assert cli.main(["bench", "examples/llama3.rope", "--backend", "c", "-q", "--json", str(out)]) == 0
    assert json.loads(out.read_text()) == rows
