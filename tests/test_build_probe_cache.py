"""The compiler probe cache, the rendered-source cache and parallel builds of the C backend.

A later process must not run the compiler for a cached kernel (its `--version` and flag probes come from
the cache directory), a changed compiler (another path, a new mtime) must be probed again, a damaged
probe or source cache is ignored, a changed template changes the source key, and build_many() gives the
very libraries that serial builds give. Every test has its own XDG_CACHE_HOME; no timing is asserted.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest

import ropegen
from ropegen.backends.c import backend as cbackend
from ropegen.backends.c import build as cbuild
from ropegen.backends.c import ccrun
from ropegen.backends.c.backend import CBackend

ROOT = Path(__file__).resolve().parent.parent
REAL_CC = shutil.which(cbuild.compiler()[0])

pytestmark = pytest.mark.skipif(CBackend().unavailable() is not None, reason=str(CBackend().unavailable()))

SPEC = """
rope tiny{n} {{
    in x:            f32[batch=B, heads=2, seq=S, head_dim=8]
    in cos_cache:    f32[P, 4]
    in sin_cache:    f32[P, 4]
    in position_ids: i64[B, S]
    out y = rotate(x)
    pairing   = {pairing}
    positions = position_ids
    angles    = table(cos = cos_cache, sin = sin_cache)
}}
"""


def _forget() -> None:
    """What a new process would not know: the per-process caches of the probes."""
    cbuild._identity.cache_clear()
    cbuild._supports.cache_clear()
    cbuild._stamp.cache_clear()
    cbuild._RECORDS.clear()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _forget()
    yield tmp_path / "cache" / "ropegen"
    _forget()


def _wrapper(path: Path, log: Path) -> Path:
    """A compiler of its own path that logs every run and then runs the real one."""
    path.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{REAL_CC}" "$@"\n', encoding="utf-8")
    path.chmod(0o755)
    return path


@pytest.fixture
def counted(monkeypatch):
    """The number of processes cbuild starts (every compiler run goes through ccrun's subprocess.Popen)."""
    calls: list[list[str]] = []
    real = subprocess.Popen

    def popen(argv, *args, **kwargs):
        calls.append(list(argv))
        return real(argv, *args, **kwargs)
    monkeypatch.setattr(ccrun.subprocess, "Popen", popen)
    return calls


def test_probes_are_not_rerun_when_cached(cache, counted):
    flags, ident = cbuild.build_flags(), cbuild.identity()
    cbuild.check_usable()
    assert len(counted) >= 2   # --version and at least one flag probe ran
    assert any("--version" in argv for argv in counted)
    assert len(list((cache / "probes").glob("*.json"))) == 1
    counted.clear()
    _forget()
    assert cbuild.build_flags() == flags and cbuild.identity() == ident
    cbuild.check_usable()
    assert counted == []


def test_a_changed_compiler_is_probed_again(cache, counted, tmp_path, monkeypatch):
    log = tmp_path / "cc.log"
    cc = _wrapper(tmp_path / "cc-a", log)
    monkeypatch.setenv("CC", str(cc))
    first = cbuild.identity()
    cbuild.build_flags()
    assert len(counted) >= 2
    counted.clear()
    _forget()
    cbuild.identity()
    cbuild.build_flags()
    assert counted == []
    # the same compiler file with a new mtime: an upgrade in place
    st = cc.stat()
    os.utime(cc, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    _forget()
    assert cbuild.identity() == first
    cbuild.build_flags()
    assert any("--version" in argv for argv in counted)
    # another path (the same script): another compiler as far as the cache can tell
    counted.clear()
    monkeypatch.setenv("CC", str(_wrapper(tmp_path / "cc-b", log)))
    _forget()
    cbuild.identity()
    assert any("--version" in argv for argv in counted)
    assert len(list((cache / "probes").glob("*.json"))) == 3


@pytest.mark.parametrize("damage", [
    b"", b"{not json", b"[]", b'{"format": 1}',
    "wrong types", "another stamp", "stale", "from the future",
])
def test_a_damaged_probe_cache_is_ignored(cache, counted, damage):
    flags, ident = cbuild.build_flags(), cbuild.identity()
    path, = (cache / "probes").glob("*.json")
    record = json.loads(path.read_text(encoding="utf-8"))
    if damage == "wrong types":
        record["answers"] = {k: (1 if isinstance(v, bool) else True) for k, v in record["answers"].items()}
    elif damage == "another stamp":
        record["stamp"] = "0" * 24
    elif damage == "stale":
        record["time"] -= 2 * 24 * 3600
    elif damage == "from the future":
        record["time"] += 3600
    path.write_bytes(damage if isinstance(damage, bytes) else json.dumps(record).encode("utf-8"))
    counted.clear()
    _forget()
    assert cbuild.build_flags() == flags and cbuild.identity() == ident
    assert any("--version" in argv for argv in counted)
    # and the cache is whole again: the next process asks nothing
    counted.clear()
    _forget()
    assert cbuild.build_flags() == flags and cbuild.identity() == ident
    assert counted == []


_OPENED: list[str] | None = None     # while a list, the paths that files are opened at (audit events)


def _audit(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


@pytest.fixture
def opened():
    """The paths opened while the test runs (Python's audit hook sees every open(), however made)."""
    global _OPENED
    if _audit not in _HOOKED:        # an audit hook cannot be removed: one for the whole session
        sys.addaudithook(_audit)
        _HOOKED.append(_audit)
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None


_HOOKED: list = []


def test_a_process_reads_its_compilers_probe_file_once(cache, opened):
    """A first kernel asks up to four questions of one compiler (its version, C11, OpenMP, branch padding):
    all from one read of the probe file, not one read each."""
    flags, ident = cbuild.build_flags(), cbuild.identity()
    cbuild.check_usable()
    path, = (cache / "probes").glob("*.json")
    _forget()
    opened.clear()
    assert cbuild.identity() == ident
    cbuild.check_usable()
    assert cbuild.build_flags() == flags
    assert opened.count(str(path)) == 1


def test_the_code_stamp_reads_no_template(opened):
    """The source cache's stamp of the templates is their name, mtime and size (like the modules'), not
    their text: hashing it cost a millisecond of every process's first call without SHA instructions."""
    cbackend._code_stamp.cache_clear()
    try:
        cbackend._code_stamp()
    finally:
        cbackend._code_stamp.cache_clear()
    templates = str(cbackend.templates_dir())
    assert not [p for p in opened if p.startswith(templates)]


def _stamp_of(package: Path) -> str:
    """The code stamp with ropegen's package (and so its templates) at `package`."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ropegen, "__file__", str(package / "__init__.py"))
        mp.setattr(cbackend, "templates_dir", lambda: package / "data" / "templates")
        cbackend._code_stamp.cache_clear()
        try:
            return cbackend._code_stamp()
        finally:
            cbackend._code_stamp.cache_clear()


def test_an_installed_wheel_is_stamped_by_its_record(tmp_path):
    """Installed from a wheel (the package beside its dist-info), the code stamp is the RECORD that pip
    rewrites with every install; a package without one (a checkout, an editable install) is stamped file by
    file, so that an edit changes it."""
    site = tmp_path / "site"
    package = site / "ropegen"
    (package / "data" / "templates" / "c").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    module = package / "api.py"
    module.write_text("x = 1\n", encoding="utf-8")
    (package / "data" / "templates" / "c" / "rope.c.j2").write_text("{{ x }}\n", encoding="utf-8")
    checkout = _stamp_of(package)
    module.write_text("x = 22\n", encoding="utf-8")
    assert _stamp_of(package) != checkout
    info = site / f"ropegen-{ropegen.__version__}.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("ropegen/api.py,sha256=a,7\n", encoding="utf-8")
    installed = _stamp_of(package)
    assert installed != checkout
    (tmp_path / "new").write_text("ropegen/api.py,sha256=b,7\n", encoding="utf-8")
    os.replace(tmp_path / "new", info / "RECORD")          # as a reinstall leaves it
    assert _stamp_of(package) != installed


def test_a_template_rewritten_to_the_same_size_changes_the_source_key(cache, tmp_path, monkeypatch):
    op = _operators(1)[0]
    copy = tmp_path / "templates"
    shutil.copytree(cbackend.templates_dir() / "c", copy / "c")
    monkeypatch.setattr(cbackend, "templates_dir", lambda: copy)
    target = copy / "c" / "rope.c.j2"
    cbackend._code_stamp.cache_clear()
    try:
        before = cbackend._sources_path(op.plan, "tiny0.rope")
        text = target.read_text(encoding="utf-8")
        st = target.stat()
        target.write_text(text.replace("{", "(", 1), encoding="utf-8")     # one byte changed, same size
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # as a later save leaves it
        cbackend._code_stamp.cache_clear()
        after = cbackend._sources_path(op.plan, "tiny0.rope")
    finally:
        cbackend._code_stamp.cache_clear()
    assert before is not None and after is not None and before != after


def _operators(n: int) -> list:
    return [op for i in range(n) for op in ropegen.compile(SPEC.format(n=i, pairing=("neox", "gptj")[i % 2]),
                                                           file=f"tiny{i}.rope")]


def test_parallel_builds_equal_serial_builds(tmp_path, monkeypatch):
    ops = _operators(4)
    jobs = [(op.sources["c"], op.plan.name) for op in ops]
    jobs.append(jobs[0])   # one key twice: both jobs share the one published file
    built = {}
    for mode in ("serial", "parallel"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / mode))
        _forget()
        if mode == "serial":
            paths = [cbuild.build(*job) for job in jobs]
        else:
            paths = cbuild.build_many(jobs, workers=3)
        assert all(isinstance(p, Path) for p in paths), paths
        assert paths[0] == paths[-1]
        built[mode] = {p.name: p.read_bytes() for p in paths}
        assert not list(paths[0].parent.glob(".*.tmp"))
    _forget()
    assert built["serial"] == built["parallel"]
    assert len(built["serial"]) == 4


def test_build_many_reports_each_failure(cache):
    ok = _operators(1)[0]
    bad = {"bad.c": "this is not C\n"}
    got = cbuild.build_many([(ok.sources["c"], ok.plan.name), (bad, "bad")], workers=2)
    assert isinstance(got[0], Path) and got[0].is_file()
    assert isinstance(got[1], cbuild.CompilerError)


def test_sources_cache_round_trip_and_damage(cache):
    op = _operators(1)[0]
    b = CBackend()
    rendered = b.sources(op.plan, "tiny0.rope")
    path = cbackend._sources_path(op.plan, "tiny0.rope")
    assert path is not None and path.is_file()
    assert b.sources(op.plan, "tiny0.rope") == rendered
    # another spec file name is another header, so another key
    assert cbackend._sources_path(op.plan, "other.rope") != path
    for damage in (b"", b"{", json.dumps({"files": {"x.c": "int x;"}, "sha256": "0"}).encode()):
        path.write_bytes(damage)
        assert b.sources(op.plan, "tiny0.rope") == rendered
    # cached text that was changed in place is damage too (its digest no longer matches)
    data = json.loads(path.read_text(encoding="utf-8"))
    name = next(iter(data["files"]))
    data["files"][name] += "/* edited */\n"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert b.sources(op.plan, "tiny0.rope") == rendered


def test_a_changed_template_changes_the_source_key(cache, tmp_path, monkeypatch):
    op = _operators(1)[0]
    copy = tmp_path / "templates"
    shutil.copytree(cbackend.templates_dir() / "c", copy / "c")
    monkeypatch.setattr(cbackend, "templates_dir", lambda: copy)
    cbackend._code_stamp.cache_clear()
    try:
        before = cbackend._sources_path(op.plan, "tiny0.rope")
        with open(copy / "c" / "rope.c.j2", "a", encoding="utf-8") as f:
            f.write("{# a change #}\n")
        cbackend._code_stamp.cache_clear()
        after = cbackend._sources_path(op.plan, "tiny0.rope")
    finally:
        cbackend._code_stamp.cache_clear()
    assert before is not None and after is not None and before != after


CHILD = """
import sys
import ropegen
from ropegen.ops.inputs import CASES, make_inputs
op, = ropegen.compile(sys.argv[1])
a = make_inputs(op.ir, CASES[1], seed=3)
op.run(*[a[n] for n in op.inputs], backend="c")
print("ok")
"""


def test_a_later_process_runs_no_compiler_for_a_cached_kernel(tmp_path):
    log = tmp_path / "cc.log"
    spec = tmp_path / "tiny.rope"
    spec.write_text(SPEC.format(n=0, pairing="neox"), encoding="utf-8")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "CC": str(_wrapper(tmp_path / "cc", log)),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", CHILD, str(spec)], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
        runs.append(log.read_text(encoding="utf-8").splitlines() if log.exists() else [])
    assert any("-shared" in line for line in runs[0])   # the first process built it
    assert runs[1] == runs[0]                             # the second ran the compiler not once


def _assembles_with_branch_padding() -> bool:
    """Whether the compiler really assembles with BRANCH_ALIGN_FLAGS (asked here, not through cbuild)."""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "p.c"
        src.write_text("int main(void) { return 0; }\n", encoding="utf-8")
        r = subprocess.run([*cbuild.compiler(), *cbuild.BRANCH_ALIGN_FLAGS, str(src), "-o", str(Path(d) / "p")],
                           capture_output=True)
        return r.returncode == 0


def test_branch_padding_is_used_where_the_assembler_takes_it(cache, monkeypatch):
    """The assembler's branch padding (for the JCC erratum's microcode fix) is in every kernel build's flags
    exactly where the compiler accepts it, probed once per compiler like the OpenMP flags; a compiler that
    refuses it builds without it."""
    flags = cbuild.build_flags()
    assert (set(cbuild.BRANCH_ALIGN_FLAGS) <= set(flags)) == _assembles_with_branch_padding()
    assert flags[:len(cbuild.PINNED_FLAGS)] == cbuild.PINNED_FLAGS
    _forget()
    real = cbuild._supports.__wrapped__

    @lru_cache(maxsize=None)
    def refuses_padding(cmd, flag):
        return flag not in cbuild.BRANCH_ALIGN_FLAGS and real(cmd, flag)
    monkeypatch.setattr(cbuild, "_supports", refuses_padding)
    assert not set(cbuild.BRANCH_ALIGN_FLAGS) & set(cbuild.build_flags())
