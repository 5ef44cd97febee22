"""Build C sources into a cached shared library or executable with the system C compiler.

The compiler is $CC or `cc`. Libraries are cached under $XDG_CACHE_HOME/ropegen (else
~/.cache/ropegen), keyed by the sources, the compiler's identity (`CC --version`) and the flags, and
written through a temporary file and os.replace so that concurrent builds of one kernel are safe.
Numerics-changing flags are pinned: ISO C11 (no GNU extensions), no FMA contraction, never
-ffast-math. -march=native is added only when ROPEGEN_MARCH_NATIVE=1 asks for it.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

# Flags every ropegen C build uses; the generated headers record them (keep in sync: one list).
PINNED_FLAGS: tuple[str, ...] = ("-std=c11", "-O3", "-ffp-contract=off", "-fno-math-errno", "-fno-fast-math")
# Flags for a shared library loaded by ctypes.
SHARED_FLAGS: tuple[str, ...] = ("-fPIC", "-shared")
# Sanitizer build of a test driver.
SANITIZE_FLAGS: tuple[str, ...] = ("-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                                   "-fno-omit-frame-pointer")


class CompilerError(RuntimeError):
    """The C compiler is missing or rejected a generated source."""


def compiler() -> list[str]:
    """The compiler command ($CC or cc), split like a shell word list."""
    words = shlex.split(os.environ.get("CC", "") or "cc")
    if not words:
        words = ["cc"]
    return words


def _require(cmd: list[str]) -> None:
    if shutil.which(cmd[0]) is None:
        raise CompilerError(f"C compiler '{cmd[0]}' not found; install one (e.g. gcc) or point CC at it")


@lru_cache(maxsize=None)
def _identity(cmd: tuple[str, ...]) -> str:
    _require(list(cmd))
    try:
        r = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise CompilerError(f"C compiler '{cmd[0]}' cannot be run: {exc}") from None
    return (r.stdout + r.stderr).strip()


def identity() -> str:
    """`CC --version` output: part of every cache key."""
    return _identity(tuple(compiler()))


@lru_cache(maxsize=None)
def _supports(cmd: tuple[str, ...], flag: str) -> bool:
    """Whether the compiler accepts `flag` for a tiny C11 program."""
    with tempfile.TemporaryDirectory(prefix="ropegen-probe-") as d:
        src = Path(d) / "probe.c"
        src.write_text("int main(void) { return 0; }\n", encoding="utf-8")
        try:
            r = subprocess.run([*cmd, "-std=c11", flag, str(src), "-o", str(Path(d) / "probe")],
                               capture_output=True, text=True, timeout=120)
        except OSError:
            return False
        return r.returncode == 0


def openmp_flags() -> tuple[str, ...]:
    """-fopenmp when the compiler links it, else -fopenmp-simd when accepted, else nothing."""
    cmd = tuple(compiler())
    _require(list(cmd))
    if os.environ.get("ROPEGEN_NO_OPENMP") != "1" and _supports(cmd, "-fopenmp"):
        return ("-fopenmp",)
    if _supports(cmd, "-fopenmp-simd"):
        return ("-fopenmp-simd",)
    return ()


def optional_flags() -> tuple[str, ...]:
    """Flags that the environment asks for: -march=native with ROPEGEN_MARCH_NATIVE=1."""
    if os.environ.get("ROPEGEN_MARCH_NATIVE") == "1":
        return ("-march=native",)
    return ()


def build_flags(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Every flag of a normal kernel build, in order."""
    return PINNED_FLAGS + optional_flags() + openmp_flags() + tuple(extra)


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "ropegen"


def cache_key(sources: dict[str, str], flags: tuple[str, ...], kind: str) -> str:
    h = hashlib.sha256()
    for part in (kind, identity(), " ".join(compiler()), "\0".join(flags)):
        h.update(part.encode("utf-8") + b"\0")
    for name in sorted(sources):
        h.update(name.encode("utf-8") + b"\0" + sources[name].encode("utf-8") + b"\0")
    return h.hexdigest()[:24]


def _compile(sources: dict[str, str], flags: tuple[str, ...], target: Path) -> None:
    """Write the sources to a scratch folder and compile every .c file into `target`."""
    cmd = compiler()
    _require(cmd)
    with tempfile.TemporaryDirectory(prefix="ropegen-build-") as d:
        for name, text in sources.items():
            (Path(d) / name).write_text(text, encoding="utf-8")
        cfiles = [str(Path(d) / n) for n in sorted(sources) if n.endswith(".c")]
        argv = [*cmd, *flags, "-I", d, *cfiles, "-o", str(target), "-lm"]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        except OSError as exc:
            raise CompilerError(f"C compiler '{cmd[0]}' cannot be run: {exc}") from None
        if r.returncode != 0:
            raise CompilerError(f"C compiler failed ({' '.join(cmd)} {' '.join(flags)}):\n{r.stderr.strip()}")


def build(sources: dict[str, str], name: str, *, shared: bool = True, extra_flags: tuple[str, ...] = (),
          flags: tuple[str, ...] | None = None) -> Path:
    """The cached build of `sources` (a shared library, or an executable with shared=False)."""
    if flags is None:
        flags = build_flags(extra_flags) + (SHARED_FLAGS if shared else ())
    kind = "so" if shared else "exe"
    key = cache_key(sources, flags, kind)
    out_dir = cache_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / (f"{name}-{key}.so" if shared else f"{name}-{key}")
    if path.is_file():
        return path
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".tmp", dir=out_dir)
    os.close(fd)
    try:
        _compile(sources, flags, Path(tmp))
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


_LOADED: dict[str, ctypes.CDLL] = {}


def load_library(path: Path) -> ctypes.CDLL:
    """Load (once per process) a built shared library."""
    key = str(path)
    if key not in _LOADED:
        _LOADED[key] = ctypes.CDLL(key)
    return _LOADED[key]


@lru_cache(maxsize=1)
def default_threads() -> int:
    """The cores this process may run on (looked up once)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
