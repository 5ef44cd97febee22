"""Core pipeline: examples check clean on every available backend, the CLI's exit codes, generated/."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen import backends, cli
from ropegen.backends.base import Backend
from ropegen.crosscheck import check_operator

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.rope"))


def _ops():
    for path in EXAMPLES:
        for op in ropegen.compile(path):
            yield pytest.param(op, id=f"{path.stem}:{op.name}")


@pytest.mark.parametrize("op", list(_ops()))
def test_example_checks_on_every_available_backend(op):
    rows = check_operator(op)
    ran = [r for r in rows if not r.note.startswith("skipped")]
    assert ran, "no backend ran"
    bad = [r for r in ran if not r.ok]
    assert not bad, bad


def test_check_command_passes_on_examples(capsys):
    assert cli.main(["check", *map(str, EXAMPLES), "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "max abs err" in out and "MISMATCH" not in out


class _WrongBackend(Backend):
    """A backend that returns zeros: check must catch it."""

    name = "wrong"
    folder = "numpy"
    comment = "#"

    def sources(self, plan, spec_file):
        return backends.get("numpy").sources(plan, spec_file)

    def load(self, plan, sources):
        good = backends.get("numpy").load(plan, sources)
        return lambda *a, **k: tuple(np.zeros_like(o) for o in good(*a, **k))


def test_check_command_fails_on_a_wrong_backend(monkeypatch, capsys):
    monkeypatch.setattr(backends, "BACKENDS", backends.BACKENDS + (_WrongBackend(),))
    assert cli.main(["check", str(ROOT / "examples" / "llama3.rope")]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def _run_cli(*args, env=None, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "ropegen", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, **(env or {})})


def test_bad_spec_is_a_user_error_without_traceback(tmp_path):
    bad = tmp_path / "bad.rope"
    bad.write_text("rope r {\n    pairing = neoxx\n}\n")
    r = _run_cli("compile", str(bad), "-o", str(tmp_path / "out"))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "bad.rope:2:15: error[C009]" in r.stderr or "bad.rope:1:6" in r.stderr
    assert "^" in r.stderr


def test_unknown_target_lists_what_exists(tmp_path):
    r = _run_cli("compile", str(EXAMPLES[0]), "--target", "fpga", "-o", str(tmp_path))
    assert r.returncode == 2 and "unknown target 'fpga'" in r.stderr and "numpy" in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_file_is_a_user_error(tmp_path):
    r = _run_cli("check", str(tmp_path / "none.rope"))
    assert r.returncode == 2 and "no such spec file" in r.stderr


@pytest.mark.parametrize("command", ["compile", "check", "explain", "import-onnx", "bench"])
def test_help_everywhere(command):
    r = _run_cli(command, "--help")
    assert r.returncode == 0 and "usage:" in r.stdout


def test_explain_shows_plan():
    r = _run_cli("explain", str(ROOT / "examples" / "ggml_rope.rope"))
    assert r.returncode == 0
    assert "theta_scale" in r.stdout and "pair map" in r.stdout and "YaRN corr dims (20.0, 46.0)" in r.stdout


def test_bad_input_arrays_are_value_errors():
    op = ropegen.compile(ROOT / "examples" / "onnx_rotary.rope")["onnx_rope_4d"]
    x = np.zeros((2, 4, 3, 8), np.float32)
    cos = np.zeros((10, 4), np.float32)
    pos = np.array([[0, 1, 2], [3, 4, 10]])
    with pytest.raises(ValueError, match="out of range"):
        op(x, cos, cos, pos)
    with pytest.raises(ValueError, match="dtype"):
        op(x.astype(np.float64), cos, cos, pos)
    with pytest.raises(ValueError, match="dimension"):
        op(x[:, :3], cos, cos, pos[:, :2] * 0)
    with pytest.raises(ValueError, match="expected 4 inputs"):
        op(x, cos, cos)


def _generate(out: Path, seed: str, env: dict[str, str] | None = None) -> None:
    r = _run_cli("compile", *[str(p) for p in EXAMPLES], "-o", str(out), env={"PYTHONHASHSEED": seed, **(env or {})})
    assert r.returncode == 0, r.stderr


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _no_simd_env() -> dict[str, str]:
    """Switch numpy's run-time SIMD dispatch off (AVX2/AVX-512 on x86), as on an older host."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:   # numpy < 2
        from numpy.core import _multiarray_umath as umath
    return {"NPY_DISABLE_CPU_FEATURES": " ".join(umath.__cpu_dispatch__)}


def test_generated_is_deterministic_and_committed(tmp_path):
    _generate(tmp_path / "a", "1")
    _generate(tmp_path / "b", "2", _no_simd_env())
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert a == b, "generated output depends on PYTHONHASHSEED or on numpy's SIMD paths (the host CPU)"
    committed = _tree(ROOT / "generated")
    assert sorted(committed) == sorted(a), "generated/ lists other files than `ropegen compile examples/*.rope -o generated`"
    stale = [k for k in a if committed[k] != a[k]]
    assert not stale, f"generated/ is stale; run `ropegen compile examples/*.rope -o generated`: {stale}"
    for name, text in a.items():
        assert b"Spec sha256:" in text[:400], name
        assert str(ROOT).encode() not in text and str(tmp_path).encode() not in text, name


def test_program_api():
    prog = ropegen.compile(ROOT / "examples" / "llama3.rope")
    op = prog["llama3_8b"]
    assert op.inputs == ("q", "k", "positions") and op.outputs == ("q_rot", "k_rot")
    assert "llama3_8b.py" in op.sources["numpy"]
    text_prog = ropegen.compile((ROOT / "examples" / "llama3.rope").read_text())
    assert [o.name for o in text_prog] == [o.name for o in prog]
