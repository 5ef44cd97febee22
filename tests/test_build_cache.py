"""The C build cache under damage and stress: a damaged cached library is rebuilt once (then a clear
CompilerError), a compiler that writes nothing or garbage is reported, a hanging compiler is killed
after ROPEGEN_CC_TIMEOUT, concurrent processes share one build, and no temporary file is left.

Every test has its own XDG_CACHE_HOME, so the user's cache is never touched; fake compilers get a
path of their own, so cbuild's per-compiler lru_caches never answer for them from an earlier test.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen import cli
from ropegen.backends.c import build as cbuild
from ropegen.backends.c.backend import CBackend

ROOT = Path(__file__).resolve().parent.parent
REAL_CC = shutil.which(cbuild.compiler()[0])

pytestmark = pytest.mark.skipif(CBackend().unavailable() is not None, reason=str(CBackend().unavailable()))

SPEC = """
rope tiny {
    in x:            f32[batch=B, heads=2, seq=S, head_dim=8]
    in cos_cache:    f32[P, 4]
    in sin_cache:    f32[P, 4]
    in position_ids: i64[B, S]
    out y = rotate(x)
    pairing   = neox
    positions = position_ids
    angles    = table(cos = cos_cache, sin = sin_cache)
}
"""

# Builds the spec's C kernel in a fresh process (after `go` exists, so that several start together)
# and compares it with the NumPy backend; a crash or a traceback shows in its exit status.
CHILD = """
import os, sys, time
import numpy as np
import ropegen
from ropegen.ops.inputs import CASES, make_inputs
op, = ropegen.compile(sys.argv[1])
go = sys.argv[2] if len(sys.argv) > 2 else None
while go and not os.path.exists(go):
    time.sleep(0.01)
a = make_inputs(op.ir, CASES[1], seed=7)
args = [a[n] for n in op.inputs]
assert np.array_equal(op.run(*args, backend="c"), op.run(*args, backend="numpy"))
print("ok")
"""

# A stand-in compiler. FAKE_CC_MODE picks its fault: silent (exit 0, write nothing), garbage (write
# bytes that are no library), hang-version / hang-probe / hang-build (sleep, with a child of its own).
FAKE_CC = """
import os, subprocess, sys, time
argv = sys.argv[1:]
mode = os.environ["FAKE_CC_MODE"]
stage = "version" if "--version" in argv else "build" if "-shared" in argv else "probe"
line = f"{stage} {os.getpid()}"
if mode == "hang-" + stage:
    line += f" {subprocess.Popen(['sleep', '60']).pid}"
with open(os.environ["FAKE_CC_LOG"], "a") as f:
    f.write(line + "\\n")
if mode == "hang-" + stage:
    time.sleep(60)
if stage == "version":
    print("fake-cc 1.0")
elif stage == "build" and mode == "garbage":
    with open(argv[argv.index("-o") + 1], "wb") as f:
        f.write(b"this is not a shared library\\n" * 64)
"""

TINY_C = {"t.c": "int answer(void) { return 42; }\n"}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "ropegen"


def _fake_cc(tmp_path: Path, monkeypatch, mode: str) -> Path:
    script = tmp_path / f"fake-cc-{mode}"
    script.write_text(f"#!{sys.executable}\n{FAKE_CC}")
    script.chmod(0o755)
    log = tmp_path / "cc.log"
    monkeypatch.setenv("CC", str(script))
    monkeypatch.setenv("FAKE_CC_MODE", mode)
    monkeypatch.setenv("FAKE_CC_LOG", str(log))
    return log


def _counting_cc(tmp_path: Path, monkeypatch) -> Path:
    """The real compiler behind a wrapper that logs each call."""
    log = tmp_path / "cc.log"
    wrapper = tmp_path / "counting-cc"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{REAL_CC}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    return log


def _builds(log: Path) -> int:
    """Library builds in a compiler log (the counting wrapper logs argv, the fake its stage)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return sum("-shared" in line or line.startswith("build ") for line in lines)


def _child(tmp_path: Path, *extra: str) -> subprocess.Popen:
    spec = tmp_path / "tiny.rope"
    spec.write_text(SPEC)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(spec), *extra], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen) -> None:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0 and out.strip().endswith("ok"), f"exit {proc.returncode}:\n{out[-3000:]}"


def _intact(lib: Path) -> bool:
    recorded = Path(str(lib) + ".sha256").read_text().strip()
    return hashlib.sha256(lib.read_bytes()).hexdigest() == recorded


# ---------------------------------------------------------------------------------------------
# damage to the cache repairs itself

def _damage(kind: str, data: bytes) -> bytes:
    if kind == "empty":
        return b""
    if kind == "truncated":
        return data[:len(data) // 2]
    if kind == "garbage":
        return np.random.default_rng(0).integers(0, 256, len(data), dtype=np.uint8).tobytes()
    flipped = bytearray(data)              # one byte: dlopen may well accept it; only the digest sees it
    flipped[len(data) // 2] ^= 0xFF
    return bytes(flipped)


@pytest.mark.parametrize("kind", ["empty", "truncated", "garbage", "one byte flipped"])
def test_damaged_library_in_cache_is_rebuilt_once(cache, tmp_path, monkeypatch, kind):
    log = _counting_cc(tmp_path, monkeypatch)
    _finish(_child(tmp_path))
    (lib,) = cache.glob("tiny-*.so")
    assert _builds(log) == 1
    damaged = _damage(kind, lib.read_bytes())
    # A new file renamed over the library, as a crash or a disk fault would leave it; writing into
    # the library in place is what cbuild must never do (a process with it mapped gets SIGBUS).
    (tmp_path / "damaged").write_bytes(damaged)
    os.replace(tmp_path / "damaged", lib)
    _finish(_child(tmp_path))             # a child process, so that a crash on the damaged file is a failure
    assert lib.read_bytes() != damaged and _intact(lib)
    assert _builds(log) == 2
    _finish(_child(tmp_path))             # the repaired library is used as it is
    assert _builds(log) == 2


def test_legacy_library_without_a_digest_is_rebuilt(cache, tmp_path, monkeypatch):
    log = _counting_cc(tmp_path, monkeypatch)
    lib = cbuild.build(TINY_C, "t")
    Path(str(lib) + ".sha256").unlink()
    assert cbuild.build(TINY_C, "t") == lib and _intact(lib) and _builds(log) == 2
    assert cbuild.load_library(lib).answer() == 42


def test_compiler_writing_nothing_is_a_clear_error(cache, tmp_path, monkeypatch):
    _fake_cc(tmp_path, monkeypatch, "silent")
    with pytest.raises(cbuild.CompilerError, match="wrote nothing"):
        cbuild.build(TINY_C, "t")
    # neither a 0-byte library nor a temporary file (probes/ holds the compiler's recorded answers)
    assert [p for p in cache.iterdir() if p.name != "probes"] == []


def test_library_that_will_not_load_is_rebuilt_once_then_a_clear_error(cache, tmp_path, monkeypatch):
    log = _fake_cc(tmp_path, monkeypatch, "garbage")
    lib = cbuild.build(TINY_C, "t")
    assert _builds(log) == 1
    with pytest.raises(cbuild.CompilerError, match="cannot be loaded after a rebuild"):
        cbuild.load_library(lib)
    assert _builds(log) == 2
    op, = ropegen.compile(SPEC)           # the same route from the API: a CompilerError, not an OSError
    with pytest.raises(cbuild.CompilerError, match="cannot be loaded"):
        op.kernel("c")


# ---------------------------------------------------------------------------------------------
# a hanging compiler

def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("stage", ["version", "probe", "build"])
def test_hanging_compiler_is_killed_after_the_timeout(cache, tmp_path, monkeypatch, stage):
    log = _fake_cc(tmp_path, monkeypatch, f"hang-{stage}")
    monkeypatch.setenv("ROPEGEN_CC_TIMEOUT", "1")
    start = time.monotonic()
    with pytest.raises(cbuild.CompilerError, match=r"did not finish .* within 1 s \(set ROPEGEN_CC_TIMEOUT"):
        cbuild.build(TINY_C, "t")
    assert time.monotonic() - start < 20
    (hung,) = [line.split() for line in log.read_text().splitlines() if line.split()[0] == stage]
    deadline = time.monotonic() + 5      # the compiler's own child is killed with it (reaped by init)
    while not all(_gone(int(pid)) for pid in hung[1:]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(int(pid)) for pid in hung[1:])
    assert not list(cache.glob(".*.tmp"))


def test_hanging_compiler_through_the_cli_is_a_failed_row_not_a_traceback(cache, tmp_path, monkeypatch, capsys):
    _fake_cc(tmp_path, monkeypatch, "hang-build")
    monkeypatch.setenv("ROPEGEN_CC_TIMEOUT", "0.5")
    spec = tmp_path / "tiny.rope"
    spec.write_text(SPEC)
    assert cli.main(["check", str(spec), "--backend", "c"]) == cli.EXIT_MISMATCH
    out = capsys.readouterr()
    assert "CompilerError: C compiler" in out.out and "within 0.5 s" in out.out
    assert "Traceback" not in out.out + out.err


@pytest.mark.parametrize("value", ["soon", "0", "-3", "nan", "inf"])
def test_bad_timeout_setting_is_a_clear_error(cache, monkeypatch, value):
    monkeypatch.setenv("ROPEGEN_CC_TIMEOUT", value)
    with pytest.raises(cbuild.CompilerError, match=f"ROPEGEN_CC_TIMEOUT must be a positive number of seconds, "
                                                   f"not '{value}'"):
        cbuild.build(TINY_C, "t")


# ---------------------------------------------------------------------------------------------
# concurrency and leftovers

def test_concurrent_processes_share_one_build(cache, tmp_path):
    go = tmp_path / "go"
    children = [_child(tmp_path, str(go)) for _ in range(4)]
    time.sleep(0.5)                       # let them import, then release them together
    go.touch()
    for proc in children:
        _finish(proc)
    (lib,) = cache.glob("tiny-*.so")
    # no temp files, here or in the folders of recorded compiler answers and rendered sources
    assert sorted(p.name for p in cache.iterdir() if p.is_file()) == [lib.name, lib.name + ".sha256"]
    assert not [p for p in cache.rglob("*") if p.name.endswith(".tmp")]
    assert _intact(lib)


def test_stale_temporary_files_are_swept_and_fresh_ones_kept(cache):
    cache.mkdir(parents=True)
    stale, fresh = cache / ".dead-1234.tmp", cache / ".busy-5678.tmp"
    for p in (stale, fresh):
        p.write_bytes(b"partial")
    two_days_ago = time.time() - 2 * 86400
    os.utime(stale, (two_days_ago, two_days_ago))
    cbuild.build(TINY_C, "t")
    assert not stale.exists() and fresh.exists()   # `fresh` may be another process's build in flight


def test_test_suite_host_builds_leave_no_temporary_folder(tmp_path):
    """The host stand-in for CUDA builds into a scratch folder that must go with the process (it was
    left in /tmp after every run, and by every test module that imported the host builds)."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TMPDIR": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                        str(tmp_path / "pytest"), "tests/test_layouts.py", "-k", "sbhd and host"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert " passed" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ropegen-")) == []
