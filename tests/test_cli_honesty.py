"""The command line never pretends: a bad option is exit 2 with a message (not a MISMATCH, not a
traceback), a check that checked nothing does not pass, a backend named but unable to run is an
error, sizes that cannot be allocated are refused before allocating, and the README's first command
leaves the checkout clean."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ropegen import backends, cli
from ropegen import crosscheck as checker
from ropegen import bench as B
from ropegen.backends.cuda import bench as cuda_bench
from ropegen.backends.base import Backend
from ropegen.crosscheck import NOT_RUN, Row, check_operator, format_table
from ropegen.ops.inputs import CASES, case_bytes
from ropegen.runtime.memory import memory_limit

ROOT = Path(__file__).resolve().parent.parent
LLAMA = ROOT / "examples" / "llama3.rope"

HUGE_SPEC = """
rope huge {
    in q:         f32[tokens=T, heads=2000000000, head_dim=8]
    in positions: i64[T]
    out q_rot = rotate(q)
    pairing   = neox
    positions = positions
    angles    = computed(base = 10000)
}
"""

# 64 heads of 1024: a few MiB per case, fine for the machine, too large for a 1 MiB limit
WIDE_SPEC = HUGE_SPEC.replace("heads=2000000000, head_dim=8", "heads=64, head_dim=1024").replace("huge", "wide")


def _run_cli(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "ropegen", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def _no_traceback(r):
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr[-2000:]


# ---------------------------------------------------------------------------------------------
# 1. bad options: argparse errors, exit 2

BAD_OPTIONS = [
    ("check", str(LLAMA), "--seed", "-5"),
    ("check", str(LLAMA), "--seed", str(2 ** 64)),
    ("bench", "--suite", "llama3", "--threads", "0"),
    ("bench", "--suite", "llama3", "--threads", "-2"),
    ("bench", "--suite", "llama3", "--threads", "100000"),
    ("bench", "--suite", "llama3", "--repeats", "0"),
    ("bench", "--suite", "llama3", "--repeats", "-3"),
    ("bench", "--suite", "llama3", "--shape", "T=-1"),
    ("bench", "--suite", "llama3", "--shape", "T"),
    ("bench", "--suite", "llama3", "--shape", "T=x"),
    ("bench", "--suite", "llama3", "--shape", "=4"),
    ("bench", "--suite", "llama3", "--shape", ","),
    ("bench", "--suite", "llama3", "--shape", "T=4,positions=sideways"),
    ("bench", "--suite", "llama3", "--shape", "T=4,dtype=i64"),
    ("bench", "--suite", "llama3", "--backend", "fpga"),
]


@pytest.mark.parametrize("argv", BAD_OPTIONS, ids=[" ".join(a[2:] if a[0] == "check" else a[3:]) + f" ({a[0]})"
                                                   for a in BAD_OPTIONS])
def test_a_bad_option_is_exit_2_with_a_message(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(list(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    option = [a for a in argv if a.startswith("--")][-1]
    assert f"argument {option}" in err and "usage:" in err, err


def test_negative_seed_is_not_a_mismatch():
    r = _run_cli("check", str(LLAMA), "--backend", "numpy", "--seed", "-5")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "MISMATCH" not in r.stdout and "--seed" in r.stderr and "out of range" in r.stderr
    _no_traceback(r)


def test_bench_api_rejects_impossible_repeats_and_threads():
    op = B.llama3_suite(("f32",))[0]
    for kw in ({"repeats": 0}, {"repeats": -1}, {"threads": 0}, {"threads": True}):
        with pytest.raises(ValueError):
            B.bench([op], shapes=["T=1"], peers=(), **kw)


def test_cuda_shapes_are_parsed_strictly():
    assert cuda_bench.parse_shapes(["T=64,dtype=f32"]) == ((64, 32, 8, 128, "f32"),)
    assert cuda_bench.parse_shapes(["T=2,HQ=4,HK=2,D=64,dtype=f16"]) == ((2, 4, 2, 64, "f16"),)
    for bad in ("Q=3", "T=4,positions=prefill", "D=3", "HQ=0", "T=-1", "T=x", "T", "dtype=i64"):
        with pytest.raises(ValueError):
            cuda_bench.parse_shapes([bad])


# ---------------------------------------------------------------------------------------------
# 2. a check that checks nothing does not pass

@pytest.mark.parametrize("cc", ["/nonexistent/cc", "false"])
def test_check_backend_c_without_a_compiler_is_an_error(cc):
    if cc == "false" and shutil.which("false") is None:
        pytest.skip("no `false` program on this machine to stand in for a broken compiler")
    r = _run_cli("check", str(LLAMA), "--backend", "c", env={"CC": cc})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "backend 'c' cannot run here" in r.stderr and cc.split("/")[-1] in r.stderr
    assert "passed" not in r.stdout and "MISMATCH" not in r.stdout
    _no_traceback(r)


def test_check_without_backend_names_each_skipped_backend_once():
    r = _run_cli("check", str(LLAMA), env={"CC": "/nonexistent/cc"})
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "skipped backends" in r.stdout
    reason = "C compiler '/nonexistent/cc' not found"
    assert r.stdout.count(reason) == 1, r.stdout            # once per backend, not once per operator row
    table = r.stdout.split("skipped backends")[0]
    assert not re.search(r"^\S+\s+c\s", table, re.M), table  # no c rows in the table
    assert len(re.findall(r"^\S+\s+numpy\s.*\sok$", table, re.M)) == 6, table   # 2 operators x 3 cases
    assert re.search(r"\b\d+ passed, 0 failed; skipped backends: c\b", r.stdout), r.stdout
    _no_traceback(r)


class _Unavailable(Backend):
    name = "numpy"
    folder = "numpy"
    comment = "#"

    def unavailable(self):
        return "switched off for this test"

    def sources(self, plan, spec_file):
        raise AssertionError("must not be asked")

    def load(self, plan, sources):
        raise AssertionError("must not be run")


def test_check_where_no_backend_can_run_fails(monkeypatch, capsys):
    monkeypatch.setattr(backends, "BACKENDS", (_Unavailable(),))
    assert cli.main(["check", str(LLAMA)]) == 2
    out, err = capsys.readouterr()
    assert "nothing was checked" in err and "switched off for this test" in out
    assert "0 passed, 0 failed" in out


def test_check_prints_progress_per_operator(capsys):
    assert cli.main(["check", str(LLAMA), "--backend", "numpy"]) == 0
    err = capsys.readouterr().err
    assert f"checking {LLAMA}: llama3_8b (numpy) ..." in err
    assert f"checking {LLAMA}: llama3_8b_cached (numpy) ..." in err


def test_check_operator_skips_a_compiler_that_builds_nothing(monkeypatch):
    if shutil.which("false") is None:
        pytest.skip("no `false` program on this machine to stand in for a broken compiler")
    import ropegen
    monkeypatch.setenv("CC", "false")
    op = ropegen.compile(LLAMA)["llama3_8b"]
    rows = check_operator(op, ("c",))
    assert len(rows) == 1 and rows[0].status == checker.SKIPPED, rows
    assert "cannot build" in rows[0].note


def test_long_notes_are_referenced_in_the_table_and_kept_in_full_below():
    long = "error: CompilerError: C compiler failed (cc -std=c11 " + "-flag " * 40 + "):\nline two of the log"
    rows = [Row("op", "c", "f32", "1 token", float("inf"), float("inf"), False, long),
            Row("op", "numpy", "f32", "1 token", 0.0, 0.0, True)]
    text = format_table(rows)
    table, _, details = text.partition("notes:")
    assert all(len(line) <= checker.WIDTH for line in text.splitlines()), text
    assert table.strip().splitlines()[2].endswith("MISMATCH [1]") and "line two" not in table
    assert details.strip().startswith("[1] error: CompilerError")
    # wrapped to the width, nothing dropped: the words in order, the log's own line break kept
    assert " ".join(details.split()) == "[1] " + " ".join(long.split())
    assert "\n      line two of the log" in details


# ---------------------------------------------------------------------------------------------
# 3. sizes that cannot be allocated are refused before allocating

def test_check_refuses_fixed_sizes_too_large_to_test(tmp_path):
    spec = tmp_path / "huge.rope"
    spec.write_text(HUGE_SPEC)
    r = _run_cli("check", str(spec), "--backend", "numpy", timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "too large to test" in r.stdout and "too large to test" in r.stderr
    assert "MISMATCH" not in r.stdout and "0 passed, 0 failed, 3 not run" in r.stdout
    _no_traceback(r)


def test_case_bytes_counts_before_allocating():
    import ropegen
    op = ropegen.compile(HUGE_SPEC, file="huge.rope")["huge"]
    assert case_bytes(op.ir, CASES[0]) > 2_000_000_000 * 8 * 4        # q alone, f32
    for path in sorted((ROOT / "examples").glob("*.rope")):           # the examples are small
        for ex in ropegen.compile(path):
            assert max(case_bytes(ex.ir, c) for c in CASES) < 256 * 2 ** 20, ex.name


def test_memory_limit_can_be_set_and_is_validated(tmp_path, monkeypatch, capsys):
    spec = tmp_path / "wide.rope"
    spec.write_text(WIDE_SPEC)
    monkeypatch.setenv("ROPEGEN_MEMORY_LIMIT", "1M")
    assert memory_limit() == 2 ** 20
    assert cli.main(["check", str(spec), "--backend", "numpy"]) == 2
    out, err = capsys.readouterr()
    assert "not run" in out and "ROPEGEN_MEMORY_LIMIT" in err
    monkeypatch.setenv("ROPEGEN_MEMORY_LIMIT", "lots")
    assert cli.main(["check", str(spec), "--backend", "numpy"]) == 2
    assert "ROPEGEN_MEMORY_LIMIT='lots'" in capsys.readouterr().err
    monkeypatch.setenv("ROPEGEN_MEMORY_LIMIT", "1G")
    assert cli.main(["check", str(spec), "--backend", "numpy"]) == 0


def test_out_of_memory_is_not_a_mismatch_nor_a_traceback(monkeypatch, capsys):
    def no_memory(*a, **k):
        raise MemoryError()
    monkeypatch.setattr(checker, "make_inputs", no_memory)
    assert cli.main(["check", str(LLAMA), "--backend", "numpy"]) == 2
    out = capsys.readouterr().out
    assert "MISMATCH" not in out and "out of memory" in out
    rows = check_operator(__import__("ropegen").compile(LLAMA)["llama3_8b"], ("numpy",))
    assert rows and all(r.status == NOT_RUN and not r.ok for r in rows)


def test_bench_refuses_a_shape_too_large_before_allocating():
    r = _run_cli("bench", "--suite", "llama3", "--shape", "T=10000000000000", timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "too large" in r.stderr and "ROPEGEN_MEMORY_LIMIT" in r.stderr
    _no_traceback(r)


def test_bench_api_refuses_a_shape_too_large():
    op = B.llama3_suite(("f32",))[0]
    with pytest.raises(ValueError, match="too large"):
        B.bench([op], shapes=["T=10000000000000"], peers=())
    with pytest.raises(ValueError, match="too large"):
        cuda_bench.require_memory(cuda_bench.parse_shapes(["T=10000000000000"]))


# ---------------------------------------------------------------------------------------------
# 4. the README's first command writes only where git ignores

def _first_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("```sh", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]


def _ignored(path: str) -> bool:
    if shutil.which("git") and (ROOT / ".git").exists():
        r = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, capture_output=True)
        if r.returncode in (0, 1):
            return r.returncode == 0
    patterns = [line.strip().rstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines()]
    return any(path == p or path.startswith(p + "/") for p in patterns if p and not p.startswith("#"))


def test_readme_first_command_does_not_dirty_the_checkout():
    commands = _first_commands()
    assert len(commands) == 2, commands
    main = commands[0]
    assert "pip install ." in main and "ropegen check examples/*.rope" in main
    out = re.search(r"ropegen compile \S+ -o (\S+)", main)
    assert out, main
    assert _ignored(out.group(1) + "/llama3/numpy/llama3_8b.py"), f"{out.group(1)} is not git-ignored"
