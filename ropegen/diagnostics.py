"""User-facing errors: a stable code, file:line:col, the offending line with a caret, a hint."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable


@dataclass(frozen=True)
class Loc:
    """A position in a spec file (1-based line and column)."""

    file: str
    line: int
    column: int
    end_column: int | None = None


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    loc: Loc
    hint: str | None = None

    def render(self, source: str | None) -> str:
        head = f"{self.loc.file}:{self.loc.line}:{self.loc.column}: error[{self.code}]: {self.message}"
        lines = [head]
        if source is not None:
            src_lines = source.split("\n")   # the parser counts only \n as a line break
            if 1 <= self.loc.line <= len(src_lines):
                text = src_lines[self.loc.line - 1].rstrip("\r").expandtabs(1)
                width = 1
                if self.loc.end_column and self.loc.end_column > self.loc.column:
                    width = self.loc.end_column - self.loc.column
                lines.append(f"  {self.loc.line:>4} | {text}")
                lines.append("       | " + " " * (self.loc.column - 1) + "^" * width)
        if self.hint:
            lines.append(f"  = help: {self.hint}")
        return "\n".join(lines)


class SpecError(Exception):
    """One or more diagnostics against one spec source; str() is the rendered report."""

    def __init__(self, diagnostics: Iterable[Diagnostic], source: str | None = None):
        self.diagnostics = tuple(diagnostics)
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(d.render(self.source) for d in self.diagnostics)


@dataclass
class Collector:
    """Gathers every diagnostic of one pass so a user sees all of them at once."""

    file: str
    items: list[Diagnostic] = field(default_factory=list)

    def error(self, code: str, message: str, loc: Loc, hint: str | None = None) -> None:
        self.items.append(Diagnostic(code, message, loc, hint))

    def raise_if_any(self, source: str) -> None:
        if self.items:
            raise SpecError(sorted(self.items, key=lambda d: (d.loc.line, d.loc.column)), source)


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A hint naming the closest valid spelling, or listing the choices when none is close."""
    choices = sorted(set(choices))
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    if choices and len(choices) <= 12:
        return "expected one of: " + ", ".join(choices)
    return None
