"""Which extra of the ropegen distribution installs a missing optional package, in one wording for
the CLI, the bench peers and the importers: "the 'onnx' package is not installed; install the onnx
extra: pip install 'ropegen[onnx]'". The extras are read from the installed metadata (pyproject.toml),
so no package or target is named here."""
from __future__ import annotations

import re


def missing_module(exc: BaseException | None) -> str | None:
    """The top-level module whose absence caused `exc` (its causes and contexts searched), if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.split(".")[0] != "ropegen":
            return exc.name.split(".")[0]
        exc = exc.__cause__ or exc.__context__
    return None


def extra_for(module: str) -> str | None:
    """The smallest extra of the installed ropegen distribution that installs `module`'s package."""
    from importlib import metadata
    try:
        requires = metadata.requires("ropegen") or []
    except metadata.PackageNotFoundError:
        return None
    extras: dict[str, list[str]] = {}
    for req in requires:
        m = re.match(r"\s*([A-Za-z0-9_.-]+).*;.*\bextra\s*==\s*['\"]([^'\"]+)['\"]", req)
        if m:
            extras.setdefault(m.group(2), []).append(re.sub(r"[-_.]+", "-", m.group(1).lower()))
    mod = re.sub(r"[-_.]+", "-", module.lower())
    hits = [e for e, dists in extras.items() if any(d == mod or d.startswith(mod + "-") for d in dists)]
    return min(hits, key=lambda e: (len(extras[e]), e)) if hits else None


def install_hint(module: str) -> str:
    extra = extra_for(module)
    return (f"the '{module}' package is not installed; install the {extra} extra: pip install 'ropegen[{extra}]'"
            if extra else f"the '{module}' package is not installed: pip install {module}")
