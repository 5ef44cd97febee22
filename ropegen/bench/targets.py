"""Which targets `ropegen bench` can measure and how: found through the backend registry, never by name.

A target's bench behaviour lives in an optional module `bench` of the target's own package (the package
of its Backend class's module: ropegen/backends/<t>/bench.py); a target that is a single module (NumPy)
has none. The hooks such a module may define:

- `device_bench(ops, shapes, repeats) -> list[dict]` and `format_results(results) -> str`: the target
  times itself (its own clock, copy yardstick and peers); `shapes` are the CLI's --shape strings or None.
  `unavailable()` of the backend is asked first: a target that cannot run here is a ValueError.
- `copy_yardstick(measured: str)`: the host copy yardstick, an object with `runner(kind, nbytes,
  threads) -> callable` for kind 'memcpy' (out of place) and 'scale' (in place). The host bench uses the
  first target in the registry that has one, whatever target it measures.
- `kernel_runner(op, args, threads, mode) -> callable` and `modes(op, inplace) -> list[str]`: how the
  host bench calls this target's kernel (threaded; modes 'out_of_place' / 'in_place'). Without them the
  host bench calls `op.run(*args, backend=name)`, one thread, out of place.
- `USER_ERRORS`: exception types the CLI reports as the user's problem (no traceback, exit 2).
"""
from __future__ import annotations

import importlib
import sys
from types import ModuleType

from ropegen import backends


def hooks(name: str) -> ModuleType | None:
    """The bench module of target `name`, or None when it has none."""
    module = sys.modules[type(backends.get(name)).__module__]
    package = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
    if not package or package == backends.__name__:     # a single-module target
        return None
    try:
        return importlib.import_module(f"{package}.bench")
    except ModuleNotFoundError as exc:
        if exc.name == f"{package}.bench":
            return None
        raise


def names() -> tuple[str, ...]:
    """Every built target, the default first, the others in registry order."""
    built = tuple(b.name for b in backends.BACKENDS if b.ready)
    first = default()
    return tuple(sorted(built, key=lambda n: n != first))


def default() -> str | None:
    """The target measured when none is named: the first whose kernels run next to the copy yardstick
    it provides (measured on the same footing as their yardstick); else the first built one."""
    built = [b.name for b in backends.BACKENDS if b.ready]
    for name in built:
        h = hooks(name)
        if h is not None and hasattr(h, "copy_yardstick") and hasattr(h, "kernel_runner"):
            return name
    return built[0] if built else None


def device_targets() -> tuple[str, ...]:
    """The targets that time themselves (device_bench)."""
    return tuple(b.name for b in backends.BACKENDS if b.ready and hasattr(hooks(b.name), "device_bench"))


def copy_yardstick(measured: str):
    """The host copy yardstick (the first target providing one builds it)."""
    for b in backends.BACKENDS:
        h = hooks(b.name)
        if h is not None and hasattr(h, "copy_yardstick"):
            return h.copy_yardstick(measured)
    raise ValueError("no target provides a copy yardstick for the host bench")


def user_errors() -> tuple[type[BaseException], ...]:
    """ValueError and every target's USER_ERRORS."""
    errors: tuple[type[BaseException], ...] = (ValueError,)
    for b in backends.BACKENDS:
        errors += tuple(getattr(hooks(b.name), "USER_ERRORS", ()))
    return errors
