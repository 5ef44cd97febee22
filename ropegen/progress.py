"""Progress of the long commands (check, compile, bench), always on stderr: a rich progress bar when
stderr is a terminal, one plain line per step when it is not (a log, a CI job, a pipe), nothing at all
with --quiet. Never on stdout, which stays parseable (written paths, tables, JSON)."""
from __future__ import annotations

import sys
import time
from typing import IO


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return False


class Phase:
    """One stretch of work: `total` named steps (None: one step of unknown length)."""

    def __init__(self, progress: "Progress", text: str, total: int | None):
        self._progress, self.text, self.total = progress, text, total
        self.done = 0        # steps finished
        self.started = 0     # steps begun
        self._task = None
        self._t0 = time.perf_counter()

    def step(self, label: str) -> None:
        """Begin the next step; the one before it is finished."""
        if self.started > self.done:
            self.done += 1
        self.started += 1
        self._progress._show(self, label)

    def finish(self) -> None:
        self.done = self.started if self.total is None else max(self.done, self.started)
        self._progress._end(self)

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self._t0

    def __enter__(self) -> "Phase":
        return self

    def __exit__(self, *exc) -> None:
        self.finish()


class Progress:
    """`with Progress(quiet=...) as p: with p.phase("checking", total=n) as ph: ph.step("op (backend)")`.

    `live` forces the terminal (True) or the plain (False) display; None asks the stream. Without rich
    importable the display is the plain one."""

    def __init__(self, stream: IO[str] | None = None, quiet: bool = False, live: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self._rich = None
        if quiet or not (live if live is not None else _is_terminal(self.stream)):
            return
        try:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress, SpinnerColumn,
                                       TextColumn, TimeElapsedColumn)
        except ImportError:   # rich is a core dependency; a broken install still gets the plain lines
            return
        console = Console(file=self.stream, force_terminal=True if live else None, stderr=self.stream is sys.stderr)
        self._rich = RichProgress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True,
                                  # stdout is never drawn on: it carries what a program reads
                                  redirect_stdout=False, redirect_stderr=True)

    @property
    def live(self) -> bool:
        """True when the rich display is in use."""
        return self._rich is not None

    def __enter__(self) -> "Progress":
        if self._rich is not None:
            self._rich.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.stop()

    def phase(self, text: str, total: int | None = None) -> Phase:
        """A stretch of work; with total=None it is one step, begun now and labelled `text`."""
        ph = Phase(self, text, total)
        if total is None:
            ph.step(text)
        return ph

    # the two displays

    def _show(self, ph: Phase, label: str) -> None:
        if self.quiet:
            return
        if self._rich is None:
            count = f"[{ph.started}/{ph.total}] " if ph.total else ""
            print(f"{count}{label} ...", file=self.stream, flush=True)
            return
        if ph._task is None:
            ph._task = self._rich.add_task(label, total=ph.total)
        self._rich.update(ph._task, description=label, completed=ph.done)

    def _end(self, ph: Phase) -> None:
        if self.quiet or self._rich is None or ph._task is None:
            return
        self._rich.update(ph._task, completed=ph.done if ph.total is None else ph.total)
        self._rich.remove_task(ph._task)
        self._rich.console.print(f"{ph.text}: done in {ph.seconds:.1f} s", markup=False, highlight=False)
