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


def spec_files(program: Program, target: str) -> dict[str, str]:
    """The target's files for the whole spec (a build script naming every operator's sources), from
    its optional `spec_sources` hook; a target without one writes only its operators' files."""
    hook = getattr(backends.get(target), "spec_sources", None)
    if hook is None:
        return {}
    return hook([(op.plan, op.sources[target]) for op in program], program.spec.file)


def write_program(program: Program, out_dir: Path, targets: tuple[str, ...]) -> list[Path]:
    """out_dir/<target>/<file> for every operator, then the target's files for the whole spec;
    returns the paths written."""
    written = []
    for target in targets:
        files = [sorted(op.sources[target].items()) for op in program]
        files.append(sorted(spec_files(program, target).items()))
        for name, text in (item for group in files for item in group):
            path = out_dir / target / name
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
            written.append(path)
    return written
