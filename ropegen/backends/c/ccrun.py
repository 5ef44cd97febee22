"""Run one C compiler command under a time limit (ROPEGEN_CC_TIMEOUT, else the caller's default), killing
the whole process group on a hang, and the one error every C build reports (CompilerError)."""
from __future__ import annotations

import math
import os
import signal
import subprocess

TIMEOUT_ENV = "ROPEGEN_CC_TIMEOUT"


class CompilerError(RuntimeError):
    """The C compiler is missing, hangs, rejected a generated source or built something unusable."""


def _timeout(default: float) -> float:
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise CompilerError(f"{TIMEOUT_ENV} must be a positive number of seconds, not '{raw}'")
    return seconds


def run(argv: list[str], default_timeout: float, what: str) -> subprocess.CompletedProcess:
    """Run one compiler command; a hang is killed, with whatever it started, and reported."""
    seconds = _timeout(default_timeout)
    try:
        # A session of its own so that a timeout kills the whole group: `cc` is a driver whose
        # cc1 / ld children would otherwise run on.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", start_new_session=True)
    except OSError as exc:
        raise CompilerError(f"C compiler '{argv[0]}' cannot be run: {exc}") from None
    with proc:
        try:
            out, err = proc.communicate(timeout=seconds)
        except BaseException as exc:
            _kill_group(proc)
            if isinstance(exc, subprocess.TimeoutExpired):
                raise CompilerError(f"C compiler '{argv[0]}' did not finish {what} within {seconds:g} s "
                                    f"(set {TIMEOUT_ENV} to allow longer)") from None
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    # Only wait for the process: a grandchild that escaped the group may still hold the pipes open.
    proc.wait()
