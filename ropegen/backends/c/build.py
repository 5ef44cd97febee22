"""Build C sources into a cached shared library or executable with the system C compiler.

The compiler is $CC or `cc`. Builds are cached under $XDG_CACHE_HOME/ropegen (else ~/.cache/ropegen),
keyed by the sources, the compiler's identity (`CC --version`) and the flags (runtime/cache.py's
recipe, shared with the other targets' build caches). The compiler's answers (`--version`, which flags
it accepts) are kept in `probes/` there, keyed by the compiler's resolved file, its mtime and size
and the variables that select it, for a day: a later process loads a cached kernel without running
the compiler at all. Each build goes to a temporary file in the cache folder and is published with
os.replace, so concurrent builds of one kernel are safe and a library some process has mapped is
never written in place (that is SIGBUS). Next to each build, `<file>.sha256` holds its digest; a
build whose bytes no longer match, or a library that will not load, is rebuilt once, then reported
as a CompilerError. Every compiler run (the `--version` identity, the flag probes, the build) is
killed after ROPEGEN_CC_TIMEOUT seconds when that is set (default: 60 s for `--version`, 120 s for a
probe, 600 s for a build). build_many() builds several kernels at once, one compiler per core.
Numerics-changing flags are pinned: ISO C11 (no GNU extensions), no FMA contraction, never
-ffast-math. -march=native only with ROPEGEN_MARCH_NATIVE=1; branch padding wherever accepted.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shlex
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

from ropegen.backends.c.ccrun import CompilerError, run as _run
from ropegen.runtime import cache

# Flags every ropegen C build uses; the generated headers record them (keep in sync: one list).
PINNED_FLAGS: tuple[str, ...] = ("-std=c11", "-O3", "-ffp-contract=off", "-fno-math-errno", "-fno-fast-math")
# Flags for a shared library loaded by ctypes.
SHARED_FLAGS: tuple[str, ...] = ("-fPIC", "-shared")
# Sanitizer build of a test driver.
SANITIZE_FLAGS: tuple[str, ...] = ("-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                                   "-fno-omit-frame-pointer")
# A temporary build file this old belongs to a process that died mid-build: nobody will publish it.
_STALE_TMP_S = 24 * 3600
# Variables that change which compiler `cc` runs or what it links: part of the probe cache's key.
PROBE_ENV = ("CC", "COMPILER_PATH", "GCC_EXEC_PREFIX", "LIBRARY_PATH")
# Probe answers are trusted this long: a library installed later (libgomp) is noticed within a day
# even though the compiler's own file did not change.
_PROBE_TTL_S = 24 * 3600
_PROBE_FORMAT = 1


def compiler() -> list[str]:
    """The compiler command ($CC or cc), split like a shell word list."""
    return list(_split(os.environ.get("CC", "") or "cc"))


@lru_cache(maxsize=8)
def _split(cc: str) -> tuple[str, ...]:
    return tuple(shlex.split(cc)) or ("cc",)


def _require(cmd: list[str]) -> None:
    if shutil.which(cmd[0]) is None:
        raise CompilerError(f"C compiler '{cmd[0]}' not found; install one (e.g. gcc) or point CC at it")


@lru_cache(maxsize=None)
def _stamp(cmd: tuple[str, ...]) -> str:
    """What the probe cache trusts to name one compiler: its resolved file, that file's mtime and size,
    the rest of the command and the variables that select it (a new or upgraded compiler is a new stamp)."""
    found = shutil.which(cmd[0]) or cmd[0]
    real = os.path.realpath(found)
    try:
        st = os.stat(real)
        stat = f"{st.st_mtime_ns}:{st.st_size}"
    except OSError:
        stat = "?"
    parts = [*cmd, found, real, stat, *(f"{v}={os.environ.get(v, '')}" for v in PROBE_ENV)]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:24]


def _probe_path(stamp: str) -> Path:
    return cache_dir() / "probes" / f"{stamp}.json"


def _read_probes(stamp: str, fresh: bool = False) -> tuple[float, dict[str, str | bool]]:
    """When the recorded answers for one compiler stamp were first probed, and the answers; anything
    unreadable, damaged or stale is no answer (and now)."""
    now = time.time()
    try:
        data = _probe_record(str(_probe_path(stamp)), fresh)
    except (OSError, ValueError):
        return now, {}
    if not (isinstance(data, dict) and data.get("format") == _PROBE_FORMAT and data.get("stamp") == stamp):
        return now, {}
    when, answers = data.get("time"), data.get("answers")
    if not (isinstance(when, (int, float)) and 0 <= now - when < _PROBE_TTL_S and isinstance(answers, dict)):
        return now, {}
    return float(when), {k: v for k, v in answers.items() if isinstance(k, str) and isinstance(v, (str, bool))}


# The probe files this process has read, by path: a first kernel asks up to four questions of one
# file (~0.1 ms a read). A question it does not answer sends _probed to the file itself again.
_RECORDS: dict[str, object] = {}


def _probe_record(path: str, fresh: bool) -> object:
    if fresh or path not in _RECORDS:
        with open(path, encoding="utf-8") as f:
            _RECORDS[path] = json.loads(f.read())
    return _RECORDS[path]


def _probed(cmd: tuple[str, ...], question: str, ask):
    """The compiler's recorded answer to `question`, else ask() it (running the compiler) and record it."""
    stamp = _stamp(cmd)
    _, answers = _read_probes(stamp)
    # `--version` is answered by text, a flag by yes / no: an answer of the other type is damage
    if isinstance(answers.get(question), str if question == "--version" else bool):
        return answers[question]
    answer = ask()
    # read again: another process may have recorded other answers meanwhile (they keep their age)
    when, answers = _read_probes(stamp, fresh=True)
    answers[question] = answer
    try:
        path = _probe_path(stamp)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"format": _PROBE_FORMAT, "stamp": stamp, "time": when, "answers": answers}
        write_atomic(path, json.dumps(record, sort_keys=True).encode("utf-8"))
        _RECORDS[str(path)] = record
    except OSError:
        pass   # a read-only cache: probe again next time
    return answer


@lru_cache(maxsize=None)
def _identity(cmd: tuple[str, ...]) -> str:
    _require(list(cmd))

    def ask() -> str:
        r = _run([*cmd, "--version"], 60, "'--version'")
        return (r.stdout + r.stderr).strip()
    return _probed(cmd, "--version", ask)


def identity() -> str:
    """`CC --version` output: part of every cache key."""
    return _identity(tuple(compiler()))


def check_usable() -> None:
    """CompilerError unless the compiler builds a trivial C11 program: a `CC` that is found but builds
    nothing (CC=false) must make the C backend unavailable, not produce failed checks."""
    cmd = tuple(compiler())
    _identity(cmd)
    if not _supports(cmd, "-std=c11"):
        raise CompilerError(f"C compiler '{' '.join(cmd)}' cannot build a trivial C11 program; "
                            "install one (e.g. gcc) or point CC at it")


@lru_cache(maxsize=None)
def _supports(cmd: tuple[str, ...], flag: str) -> bool:
    """Whether the compiler accepts `flag` for a tiny C11 program."""
    def ask() -> bool:
        with tempfile.TemporaryDirectory(prefix="ropegen-probe-") as d:
            src = Path(d) / "probe.c"
            src.write_text("int main(void) { return 0; }\n", encoding="utf-8")
            r = _run([*cmd, "-std=c11", flag, str(src), "-o", str(Path(d) / "probe")], 120, f"the {flag} probe")
            return r.returncode == 0
    return bool(_probed(cmd, flag, ask))


def openmp_flags() -> tuple[str, ...]:
    """-fopenmp when the compiler links it, else -fopenmp-simd when accepted, else nothing."""
    cmd = tuple(compiler())
    _require(list(cmd))
    if os.environ.get("ROPEGEN_NO_OPENMP") != "1" and _supports(cmd, "-fopenmp"):
        return ("-fopenmp",)
    if _supports(cmd, "-fopenmp-simd"):
        return ("-fopenmp-simd",)
    return ()


# Jumps padded off 32-byte boundaries (padding only): on Skylake-derived cores the JCC erratum's fix
# sends a jump touching one past the decoded-instruction cache, so a kernel's speed moved with where the
# linker put its loops (Cascade Lake, one RMSNorm object in two harnesses: 11.9 / 14.6 us; padded 12.3).
BRANCH_ALIGN_FLAGS: tuple[str, ...] = ("-Wa,-mbranches-within-32B-boundaries",)


def layout_flags() -> tuple[str, ...]:
    """BRANCH_ALIGN_FLAGS where the compiler and its assembler accept them (not Clang's, not Arm's)."""
    cmd = tuple(compiler())
    _require(list(cmd))
    return BRANCH_ALIGN_FLAGS if all(_supports(cmd, f) for f in BRANCH_ALIGN_FLAGS) else ()


def optional_flags() -> tuple[str, ...]:
    """Flags that the environment asks for: -march=native with ROPEGEN_MARCH_NATIVE=1."""
    if os.environ.get("ROPEGEN_MARCH_NATIVE") == "1":
        return ("-march=native",)
    return ()


def build_flags(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Every flag of a normal kernel build, in order."""
    return PINNED_FLAGS + layout_flags() + optional_flags() + openmp_flags() + tuple(extra)


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "ropegen"


def cache_key(sources: dict[str, str], flags: tuple[str, ...], kind: str) -> str:
    """The build's key (runtime/cache.py's recipe): the compiler's identity and command are its toolchain."""
    return cache.key(kind, (identity(), " ".join(compiler())), flags, sources)


def _compile(sources: dict[str, str], flags: tuple[str, ...], target: Path) -> None:
    """Write the sources to a scratch folder and compile every .c file into `target`."""
    cmd = compiler()
    _require(cmd)
    with tempfile.TemporaryDirectory(prefix="ropegen-build-") as d:
        for name, text in sources.items():
            (Path(d) / name).write_text(text, encoding="utf-8")
        cfiles = [str(Path(d) / n) for n in sorted(sources) if n.endswith(".c")]
        argv = [*cmd, *flags, "-I", d, *cfiles, "-o", str(target), "-lm"]
        r = _run(argv, 600, f"building {', '.join(sorted(sources))}")
        if r.returncode != 0:
            raise CompilerError(f"C compiler failed ({' '.join(cmd)} {' '.join(flags)}):\n{r.stderr.strip()}")


def _sum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _intact(path: Path) -> bool:
    """Whether the cached build exists and still has the digest recorded when it was built."""
    try:
        recorded = _sum_path(path).read_text(encoding="ascii").strip()
        data = path.read_bytes()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(data) and cache.digest(data) == recorded


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _publish(sources: dict[str, str], flags: tuple[str, ...], path: Path) -> None:
    """Build into a temporary file beside `path`, then publish the digest and the build by rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        _compile(sources, flags, Path(tmp))
        try:
            data = Path(tmp).read_bytes()
        except OSError:
            data = b""
        if not data:
            raise CompilerError(f"C compiler '{compiler()[0]}' reported success but wrote nothing for {path.name}")
        os.chmod(tmp, 0o755)
        # The digest goes first: whoever then sees the new build also sees its digest (a compiler
        # gives the same bytes for the same key, so a concurrent builder's digest fits as well).
        write_atomic(_sum_path(path), cache.digest(data).encode("ascii") + b"\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _sweep(folder: Path) -> None:
    """Delete temporary build files that processes killed mid-build left behind."""
    now = time.time()
    for p in folder.glob(".*.tmp"):
        try:
            if now - p.stat().st_mtime > _STALE_TMP_S:
                p.unlink()
        except OSError:
            pass  # gone already, or another process's


# What each cached path was built from, so that load_library can rebuild a library that will not load.
_RECIPES: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}


def build(sources: dict[str, str], name: str, *, shared: bool = True, extra_flags: tuple[str, ...] = (),
          flags: tuple[str, ...] | None = None) -> Path:
    """The cached build of `sources` (a shared library, or an executable with shared=False); a
    cached file that is missing or no longer matches its recorded digest is built again."""
    if flags is None:
        flags = build_flags(extra_flags) + (SHARED_FLAGS if shared else ())
    flags = tuple(flags)
    kind = "so" if shared else "exe"
    key = cache_key(sources, flags, kind)
    out_dir = cache_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / (f"{name}-{key}.so" if shared else f"{name}-{key}")
    _RECIPES[str(path)] = (dict(sources), flags)
    if not _intact(path):
        _sweep(out_dir)
        _publish(sources, flags, path)
    return path


def build_many(jobs: list[tuple[dict[str, str], str]], workers: int | None = None) -> list[Path | CompilerError]:
    """build() of each (sources, name), several compilers at once (default: one per core); each
    result is the built path or the CompilerError of that job. Every build still publishes by rename,
    so a parallel build is as safe as serial ones (and two jobs of one key share the one file)."""
    build_flags()   # the probes once, here, rather than raced by every thread
    workers = max(1, min(len(jobs), workers or default_threads()))

    def one(job: tuple[dict[str, str], str]) -> Path | CompilerError:
        try:
            return build(*job)
        except CompilerError as exc:
            return exc
    if workers == 1:
        return [one(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ropegen-cc") as pool:
        return list(pool.map(one, jobs))


_LOADED: dict[str, ctypes.CDLL] = {}


def load_library(path: Path) -> ctypes.CDLL:
    """Load (once per process) a built shared library. One that build() made but that will not load
    is deleted and built once more (build() has already replaced one whose digest no longer
    matched); if that fails too, CompilerError."""
    path = Path(path)
    key = str(path)
    if key not in _LOADED:
        try:
            _LOADED[key] = ctypes.CDLL(key)
        except OSError as exc:
            recipe = _RECIPES.get(key)
            if recipe is None:
                raise CompilerError(f"the built library {path.name} cannot be loaded: {exc}") from None
            # Deleted first so that a rebuild that fails leaves no library known to be bad.
            path.unlink(missing_ok=True)
            _sum_path(path).unlink(missing_ok=True)
            _publish(*recipe, path)
            try:
                _LOADED[key] = ctypes.CDLL(key)
            except OSError as again:
                raise CompilerError(f"the built library {path.name} cannot be loaded after a rebuild: "
                                    f"{again}") from None
    return _LOADED[key]


@lru_cache(maxsize=1)
def default_threads() -> int:
    """The cores this process may run on (looked up once)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
