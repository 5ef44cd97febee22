"""A helper of the C backend's tests: a small C program built beside a kernel's generated sources (which
it #includes, so that it reaches their static helpers) with the backend's pinned flags, run, and its
standard output returned."""
from __future__ import annotations

import subprocess
from pathlib import Path

from ropegen.backends.c import build as cbuild


def run_harness(tmp_path: Path, sources: dict[str, str], harness: str, *defines: str) -> str:
    """Writes `sources` and `harness` (as t.c) into tmp_path, builds t.c with the pinned flags and
    `defines`, runs it and returns its standard output; a build or run that fails fails the test."""
    for fname, text in sources.items():
        (tmp_path / fname).write_text(text)
    (tmp_path / "t.c").write_text(harness)
    exe = tmp_path / "t"
    r = subprocess.run([*cbuild.compiler(), *cbuild.PINNED_FLAGS, *defines, "-I", str(tmp_path),
                        str(tmp_path / "t.c"), "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
