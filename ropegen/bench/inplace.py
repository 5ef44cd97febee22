"""In-place bench calls: a call over working copies of the inputs it writes, which the timing loop puts
back to the original values before each timed call, untimed (`reset`), so that every call of a row
starts from the same inputs. RoPE over its own output only turns the vectors again, but RMSNorm over its own output
normalizes again and again, and its columns of small scale shrink each time until they are subnormal:
in the bench's rows, after a few calls, a [1024, 4096] bf16 call ran 3x slower on such input."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ropegen.runtime.host import in_place_sources


class InPlace:
    """`call()` runs `run` (which writes over `work`); `reset()` copies `originals` back into `work`."""

    def __init__(self, run: Callable[[], Any], work: Sequence[np.ndarray], originals: Sequence[np.ndarray]):
        self.run, self.work, self.originals = run, list(work), list(originals)

    def __call__(self) -> Any:
        return self.run()

    def reset(self) -> None:
        for w, a in zip(self.work, self.originals):
            np.copyto(w, a)


def over_copies(op, args: Sequence[np.ndarray], make: Callable[[list[np.ndarray]], Callable[[], Any]]) -> InPlace:
    """An InPlace call of `op` made by `make(work)`, `work` being `args` with a fresh copy of each input
    the call writes over (runtime.host.in_place_sources). Only those are copied back by reset: a
    read-only input (a 4 MiB cos / sin table) copied before every timed call evicted the call's data
    from the caches at decode sizes."""
    written = in_place_sources(op.plan)
    flags = [name in written for name in op.inputs]
    work = [np.array(a, copy=True) if w else a for a, w in zip(args, flags, strict=True)]
    kept = [(w, a) for w, a, flag in zip(work, args, flags) if flag]
    return InPlace(make(work), [w for w, _ in kept], [a for _, a in kept])
