"""The C backend: one C11 header + source per operator, built on demand and called through ctypes,
and per spec a CMakeLists.txt + pkg-config template that make those sources one library for C/C++ builds.

Rendered sources are kept in the build cache (`sources/`), keyed by the plan, the spec's file name,
and the C templates' and ropegen modules' files (name, mtime, size; an installed wheel's RECORD): a
process that loads a cached kernel neither runs Jinja nor the compiler.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import zlib
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import ropegen

from ropegen.backends.base import Backend, Kernel
from ropegen.backends.c import build as cbuild
from ropegen.backends.c.abi import C_KEYWORDS, abi, function_name, words_function_name
from ropegen.backends.c.call import CKernel
from ropegen.backends.c.context import rms_context, rope_context
from ropegen.lower.status import STATUSES
from ropegen.render import provenance, render
from ropegen.spec.limits import MAX_NAME
from ropegen.resources import templates_dir
from ropegen.runtime import cache

if TYPE_CHECKING:   # annotations only: the plans belong to the ops slices
    from ropegen.ops.plan import Plan

# build.py's fallback when the compiler has no OpenMP runtime: `omp simd` loops without threads.
OPENMP_SIMD_FLAG = "-fopenmp-simd"

# The render context of each operator kind (the plan's `.kind` word).
CONTEXTS = {"rope": rope_context, "rmsnorm": rms_context}


class CBackend(Backend):
    name = "c"
    folder = "c"
    comment = "//"
    reserved = C_KEYWORDS
    run_options = frozenset({"threads", "out", "inplace"})

    def context(self, plan: Plan) -> dict:
        """What templates/c print: the plan's render context and the status table of the header."""
        return {"statuses": STATUSES, **CONTEXTS[plan.kind](plan)}

    def sources(self, plan: Plan, spec_file: str) -> dict[str, str]:
        path = _sources_path(plan, spec_file)
        cached = _read_sources(path) if path else None
        if cached is not None:
            return cached
        ctx = self.context(plan)
        out = {f"{plan.name}.h": self.render_file(plan, "h", spec_file, **ctx),
               f"{plan.name}.c": self.render_file(plan, "c", spec_file, **ctx)}
        if path:
            _write_sources(path, out)
        return out

    def driver_source(self, plan: Plan, spec_file: str) -> dict[str, str]:
        """A standalone test / timing driver (driver.c) for the operator's sources: see templates/c/driver.c.j2."""
        ctx = self.context(plan)
        return {"driver.c": render("c/driver.c.j2", p=plan, header=self.header(plan, spec_file), **ctx)}

    def spec_sources(self, ops: list[tuple[Plan, dict[str, str]]], spec_file: str) -> dict[str, str]:
        """The files for a whole spec beside its operators' (plan, sources): a CMakeLists.txt making every
        operator's .c one library, ropegen_<spec> (ALIAS ropegen::<spec>), and its pkg-config template."""
        if not ops:
            return {}
        ctx = cmake_context([plan for plan, _ in ops], [files for _, files in ops], spec_file)
        return {"CMakeLists.txt": render("c/CMakeLists.txt.j2", **ctx),
                ctx["pc_in"]: render("c/library.pc.in.j2", **ctx)}

    def unavailable(self) -> str | None:
        try:
            cbuild.check_usable()
        except cbuild.CompilerError as exc:
            return str(exc)
        return None

    def prebuild(self, jobs: list[tuple[Plan, dict[str, str]]]) -> None:
        """Build the kernels of many (plan, sources) at once into the cache; a failure is left for
        load() to report when that kernel is used."""
        cbuild.build_many([(sources, plan.name) for plan, sources in jobs])

    def load(self, plan: Plan, sources: dict[str, str]) -> Kernel:
        lib = cbuild.load_library(cbuild.build(sources, plan.name))
        params = abi(plan)
        func = getattr(lib, function_name(plan))
        func.restype = ctypes.c_int
        func.argtypes = [q.ctype for q in params]
        words = ctypes.cast(getattr(lib, words_function_name(plan)), ctypes.c_void_p).value
        return CKernel(plan, func, params, words)


def library_name(spec_file: str, plans: list[Plan]) -> str:
    """The spec's library word: its file's stem (the folder `ropegen compile` writes into) as CMake and
    pkg-config spell a name, no longer than an operator's (it becomes file names too); the first
    operator's name for a spec given as text."""
    stem = PurePosixPath(spec_file.replace("\\", "/")).stem
    word = re.sub(r"[^A-Za-z0-9_]+", "_", stem).strip("_")[:MAX_NAME]
    return word if word and not spec_file.startswith("<") else plans[0].name


def cmake_context(plans: list[Plan], files: list[dict[str, str]], spec_file: str) -> dict:
    """What templates/c/CMakeLists.txt.j2 and library.pc.in.j2 print. The flags are build.py's one list,
    split by who sets each in CMake: the language standard is the target's C_STANDARD property, the
    optimisation level the user's build type (ours only when none is chosen), the rest numerics."""
    word = library_name(spec_file, plans)
    flags = cbuild.PINNED_FLAGS
    std = [f for f in flags if f.startswith("-std=c")]
    opt = [f for f in flags if f.startswith("-O")]
    if len(std) != 1 or len(opt) != 1:
        raise RuntimeError(f"build.py's pinned flags {flags} need one -std=cNN and one -O level")
    names = [p.name for p in plans]
    header = provenance("#", spec_file, plans[0].spec_sha256, "', '".join(names))
    return {"header": header, "spec_file": PurePosixPath(spec_file.replace("\\", "/")).name,
            "target": f"ropegen_{word}", "alias": f"ropegen::{word}", "pc_in": f"ropegen_{word}.pc.in",
            "operators": names,
            "sources": sorted(n for f in files for n in f if n.endswith(".c")),
            "headers": sorted(n for f in files for n in f if n.endswith(".h")),
            "c_standard": std[0].removeprefix("-std=c"), "optimize_flag": opt[0],
            "numerics_flags": [f for f in flags if f not in std and f not in opt],
            "simd_flag": OPENMP_SIMD_FLAG, "layout_flags": list(cbuild.BRANCH_ALIGN_FLAGS)}


@lru_cache(maxsize=1)
def _code_stamp() -> str:
    """What rendering depends on besides the plan: the C templates and every ropegen module. Installed
    from a wheel, that is its RECORD file (pip writes a new one, listing every file's sha256, with
    each install: 2 stat()s). In a checkout or an editable install, each file by path, mtime and size,
    the rule by which Python itself trusts a module's cached bytecode: an edit saved in place still
    changes its file's mtime, and a checkout writes new files (135 modules: ~1 ms). Hashing the
    templates' text cost another millisecond of every process's first call on a CPU without SHA
    instructions (196 KB at ~200 MB/s)."""
    h = hashlib.sha256(ropegen.__version__.encode("utf-8") + b"\0")
    package = Path(ropegen.__file__).resolve().parent
    templates = templates_dir() / "c"
    record = package.parent / f"ropegen-{ropegen.__version__}.dist-info" / "RECORD"
    if package in templates.parents and record.is_file():
        st = record.stat()
        h.update(f"{record}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_size}\0".encode("utf-8", "surrogateescape"))
        return h.hexdigest()
    for root, only_py in ((templates, False), (package, True)):
        _stamp_tree(h, str(root), only_py)
    return h.hexdigest()


def _stamp_tree(h, folder: str, only_py: bool) -> None:
    """Every file under `folder` (only .py with only_py; no __pycache__) into h, in name order. scandir's
    entries know which are folders, so only files are stat()ed: 135 modules in ~1 ms, os.walk's ~1.5."""
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.is_dir(follow_symlinks=False):     # as os.walk: no loop through a linked folder
            if e.name != "__pycache__":
                _stamp_tree(h, e.path, only_py)
        elif not only_py or e.name.endswith(".py"):
            st = e.stat()
            h.update(f"{e.path}\0{st.st_mtime_ns}\0{st.st_size}\0".encode("utf-8", "surrogateescape"))


def _sources_path(plan: Plan, spec_file: str) -> Path | None:
    """Where the rendered sources of `plan` are cached; None when the plan's repr does not name all
    of it (a shortened array or an object's address), so it cannot key a cache."""
    text = repr(plan)
    if "..." in text or " at 0x" in text:
        return None
    try:
        key = cache.key("sources", (_code_stamp(),), (), {"spec": spec_file, "plan": text}, 24)
    except (OSError, UnicodeEncodeError):     # an unreadable tree, or a file name no UTF-8 spells
        return None
    return cbuild.cache_dir() / "sources" / f"{plan.name}-{key}.json"


def _read_sources(path: Path) -> dict[str, str] | None:
    """The cached sources, or None when missing or damaged (their recorded digest must still match)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files, recorded = data["files"], data["crc32"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (isinstance(files, dict) and files and all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in files.items())):
        return None
    return files if _digest(files) == recorded else None


def _write_sources(path: Path, files: dict[str, str]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cbuild.write_atomic(path, json.dumps({"files": files, "crc32": _digest(files)}).encode("utf-8"))
    except OSError:
        pass   # a read-only cache: render again next time


def _digest(files: dict[str, str]) -> int:
    """A checksum of the sources by name, to see damage (their key is in the file's name). CRC-32 over the
    texts: 0.05 ms for a kernel's 66 KB, where a sha256 of their JSON took 0.5-1 ms of the first call."""
    crc = 0
    for name in sorted(files):
        crc = zlib.crc32(name.encode("utf-8", "surrogatepass") + b"\0", crc)
        crc = zlib.crc32(files[name].encode("utf-8", "surrogatepass") + b"\0", crc)
    return crc
