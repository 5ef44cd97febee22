"""The C backend's bound calls done in C (fastcall.c): built once per Python, NumPy and compiler into
the build cache and loaded as an extension module, or None with the reason it cannot be.

Where it cannot be (no Python headers, no compiler, ROPEGEN_FASTCALL=0 in the environment), bound
calls make the same checks in Python (backends/c/call.py): the same results, a few microseconds more
per call.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import numpy as np

from ropegen.backends.c import build as cbuild
from ropegen.runtime.aligned import fresh_on_a_line
from ropegen.runtime.numpy_host import ALLOCATED, IN_PLACE

MODULE = "ropegen_fastcall"
SOURCE = Path(__file__).with_name("fastcall.c")
# ROPEGEN_FASTCALL=0: bound calls stay in Python (for tests of both ways, and a way out)
ENV = "ROPEGEN_FASTCALL"


def module() -> ModuleType | None:
    """The loaded extension, or None (unavailable() says why)."""
    return None if os.environ.get(ENV) == "0" else _loaded()[0]


def unavailable() -> str | None:
    """Why the bound calls stay in Python, or None."""
    if os.environ.get(ENV) == "0":
        return f"{ENV}=0"
    return _loaded()[1]


@lru_cache(maxsize=1)
def _loaded() -> tuple[ModuleType | None, str | None]:
    if sys.implementation.name != "cpython":
        return None, f"needs CPython, not {sys.implementation.name}"
    include = _include()
    if not (Path(include) / "Python.h").is_file():
        return None, f"no Python.h under {include or 'the interpreter'} (install the Python development headers)"
    flags = ("-std=c11", "-O2", "-fno-strict-aliasing", "-I", include, "-I", np.get_include(),
             *cbuild.SHARED_FLAGS)
    # the name carries what the build's key does not see: the interpreter's ABI and NumPy's version
    name = f"fastcall-{sys.implementation.cache_tag}-numpy{np.__version__}"
    try:
        path = cbuild.build({SOURCE.name: SOURCE.read_text(encoding="utf-8")}, name, flags=flags)
        loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
        spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except (cbuild.CompilerError, ImportError, OSError) as exc:
        return None, f"{SOURCE.name} could not be built or loaded: {str(exc).splitlines()[0]}"
    return mod, None


def _include() -> str:
    """Where Python.h is: under the interpreter's base prefix, as every CPython scheme on POSIX puts it
    (system, venv, pyenv, conda), else where sysconfig says. Asking sysconfig first cost 1.5 ms of the
    first bound call of every process (it imports and expands the interpreter's whole build config)."""
    abi = f"python{sys.version_info[0]}.{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
    guess = os.path.join(sys.base_prefix, "include", abi)
    if os.path.isfile(os.path.join(guess, "Python.h")):
        return guess
    return sysconfig.get_paths().get("include") or ""


def call_for(bound, words_address: int | None, values: list[int], raise_status, keep: bool = True) -> object | None:
    """The extension's Call for a BoundCall (backends/c/bound.py) bound to `values` (its parameter
    values), or None where its calls stay in Python: no extension or words entry point, a scalar input
    (read per call), more words or inputs than it holds. raise_status(code, arrays) raises a nonzero
    status; it must not hold the bound call (the Call keeps it, and a cycle through a C object is never
    collected). Outputs the caller gave (out=) may be passed anew after the inputs of a call; keep=False:
    the Call holds no bound output, and every call must pass them."""
    mod = module()
    if mod is None or words_address is None or len(values) > mod.MAX_WORDS or \
            len(bound.per_input) + len(bound.out_shapes) > mod.MAX_INPUTS:
        return None
    if any(ptrs is None or len(ptrs) > 4 for *_, ptrs, _, _ in bound.per_input):
        return None
    words_of = {}
    for j, o in bound.ptr_out:
        words_of.setdefault(o, []).append(j)
    if any(len(w) > 4 for w in words_of.values()):
        return None
    outputs, fixed, spans, sources, out_spans, given = [], None, [], [], [], []
    if bound.mode == ALLOCATED:
        outputs = [(dtype, shape, None if alloc is fresh_on_a_line else alloc, tuple(words_of.get(o, ())))
                   for o, (alloc, shape, dtype) in enumerate(bound.allocs)]
    elif bound.mode == IN_PLACE:
        sources = [(i, tuple(words_of.get(o, ()))) for o, i in enumerate(bound.kern.fast.srcs)]
        out_spans = list(bound.spans[1])
    else:   # the caller's outputs, bound, or passed with each call in the bound signature
        if keep:
            fixed, spans = bound.returned, bound.out_bytes
        aligned = set(bound.kern.fast.out_aligned)
        at = {o: (lo, hi) for o, lo, hi in bound.spans[1]}
        given = [(dtype, shape, strides, dtype.alignment - 1 if o in aligned else 0, tuple(words_of.get(o, ())),
                  *at.get(o, (0, -1))) for o, (dtype, shape, strides) in enumerate(bound.out_sig)]
        if any(len(w) > 4 for *_, w, _, _ in given):
            return None
    return mod.Call(words_address, values, list(bound.per_input), outputs, fixed, spans, bound.single, raise_status,
                    sources, out_spans, given)
