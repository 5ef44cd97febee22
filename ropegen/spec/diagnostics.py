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


def source_lines(source: str) -> list[str]:
    """The lines of a spec as the parser numbers them: only \\n breaks a line (str.splitlines would
    also break at \\f, \\v, \\r, \\x1c-\\x1e, \\x85, \\u2028, \\u2029 and shift every later line)."""
    return source.split("\n")


def _printable(text: str) -> str:
    """One visible column per character, so the caret stays under the parser's column: a tab, a
    lone \\r or a \\u2028 printed raw would move the cursor or break the quoted line."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


QUOTE_WIDTH = 200   # characters of a source line quoted around the caret (real spec lines are shorter)


def _window(text: str, column: int, width: int) -> tuple[str, int, int]:
    """A long line (generated specs, one-line specs, thousands of brackets) cut to QUOTE_WIDTH
    characters around the caret, with `...` where text was cut; the caret's new column and width."""
    if len(text) <= QUOTE_WIDTH:
        return text, column, width
    width = min(width, QUOTE_WIDTH // 2)
    start = max(0, min(column - 1 - QUOTE_WIDTH // 3, len(text) - QUOTE_WIDTH))
    head = "..." if start > 0 else ""
    tail = "..." if start + QUOTE_WIDTH < len(text) else ""
    return head + text[start:start + QUOTE_WIDTH] + tail, column - start + len(head), width


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    loc: Loc
    hint: str | None = None
    severity: str = "error"   # "warning": reported, but the spec still checks

    def render(self, source: str | None) -> str:
        head = f"{self.loc.file}:{self.loc.line}:{self.loc.column}: {self.severity}[{self.code}]: {self.message}"
        lines = [head]
        if source is not None:
            src_lines = source_lines(source)
            if 1 <= self.loc.line <= len(src_lines):
                text = _printable(src_lines[self.loc.line - 1].rstrip("\r"))
                width = 1
                if self.loc.end_column and self.loc.end_column > self.loc.column:
                    width = self.loc.end_column - self.loc.column
                text, col, width = _window(text, self.loc.column, width)
                lines.append(f"  {self.loc.line:>4} | {text}")
                lines.append("       | " + " " * (col - 1) + "^" * width)
        if self.hint:
            lines.append(f"  = help: {self.hint}")
        return "\n".join(lines)


class SpecWarning(UserWarning):
    """A spec that checks but probably says something other than what was meant (a warning[C0xx])."""


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
    warnings: list[Diagnostic] = field(default_factory=list)

    def error(self, code: str, message: str, loc: Loc, hint: str | None = None) -> None:
        self.items.append(Diagnostic(code, message, loc, hint))

    def warn(self, code: str, message: str, loc: Loc, hint: str | None = None) -> None:
        self.warnings.append(Diagnostic(code, message, loc, hint, "warning"))

    def sorted_warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(sorted(self.warnings, key=lambda d: (d.loc.line, d.loc.column)))

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
