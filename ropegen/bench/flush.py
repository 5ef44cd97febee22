"""The host bench's cache flush: a read of a buffer twice the size of the last-level cache, run before
each timed call of a prefill-sized row, so that the kernel, both copies and every peer start from
memory. Without it each call met the caches as the call before it left them: the non-temporal copy,
right after memcpy over the same buffers, read a source already in the L3, while the kernel found its
inputs evicted by the copies' traffic. On a host whose L3 holds a T = 4096 row (a 260 MiB Intel Xeon)
the ratio to copy then read 0.55-0.60 where both sides from memory give 0.86; an untimed call of the
same function before the timed one does not settle it either (the L3 keeps a line it has seen several
times: the kernel needed four calls to reach its in-cache time). Triton's do_bench clears the cache
before each timed call for the same reason.

Reading, not writing: the buffer's lines stay clean, so the timed call that follows never pays for
writing them back.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

# When no cache size can be read: larger than any last-level cache of a two-socket server today.
FALLBACK_BYTES = 1 << 30
MIN_BYTES = 64 << 20


def last_level_cache_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """The size of CPU 0's highest-level cache from sysfs, or None where it cannot be read."""
    best: tuple[int, int] | None = None
    try:
        for index in sorted(root.glob("index*")):
            level = int((index / "level").read_text().strip())
            raw = (index / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1:], 1)
            size = int(raw.rstrip("KMG")) * scale
            if best is None or level > best[0]:
                best = (level, size)
    except (OSError, ValueError):
        return None
    return best[1] if best else None


class Flush:
    """A callable that evicts the caches by reading one word of every line of a buffer 2x the last-level
    cache (at least MIN_BYTES): about 35 ms for a 260 MiB L3. The buffer is allocated and faulted in once."""

    def __init__(self, nbytes: int | None = None):
        if nbytes is None:
            llc = last_level_cache_bytes()
            nbytes = max(MIN_BYTES, 2 * llc) if llc else FALLBACK_BYTES
        try:
            self.buffer = np.ones(nbytes // 8, np.uint64)
        except MemoryError:
            raise ValueError(f"bench cannot allocate its {nbytes >> 20} MiB cache-flush buffer "
                             f"(twice the last-level cache)") from None
        self.nbytes = self.buffer.nbytes
        self.lines = self.buffer[::8]          # one 8-byte word of each 64-byte line

    def __call__(self) -> int:
        return int(self.lines.sum())
