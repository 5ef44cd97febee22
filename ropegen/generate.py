"""Write the sources of every operator of a spec, per target, into a folder tree (byte-deterministic)."""
from __future__ import annotations

from pathlib import Path

from ropegen import backends
from ropegen.api import Program


def ready_targets() -> tuple[str, ...]:
    return tuple(b.name for b in backends.BACKENDS if b.ready)


def resolve_targets(requested: str | None) -> tuple[str, ...]:
    """Target names from a comma list; raises ValueError naming what exists for a bad one."""
    if requested is None:
        return ready_targets()
    names = tuple(t.strip() for t in requested.split(",") if t.strip())
    for n in names:
        if n not in backends.names():
            raise ValueError(f"unknown target '{n}'; targets: {', '.join(ready_targets())}")
        if not backends.get(n).ready:
            raise ValueError(f"target '{n}' is not built yet; available targets: {', '.join(ready_targets())}")
    return names


def write_program(program: Program, out_dir: Path, targets: tuple[str, ...]) -> list[Path]:
    """out_dir/<target>/<file> for every operator; returns the paths written."""
    written = []
    for target in targets:
        for op in program:
            for name, text in sorted(op.sources[target].items()):
                path = out_dir / target / name
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "w", encoding="utf-8", newline="\n") as f:
                    f.write(text)
                written.append(path)
    return written
