"""The host bench's cache flush: a read of a buffer twice the last-level caches this process runs on,
by as many threads as the measured call uses, before each timed call of a prefill-sized row, so that
the kernel, both copies and every peer start from memory.

Without it each call met the caches as the call before it left them: the non-temporal copy, right
after memcpy over the same buffers, read a source already in the L3, while the kernel found its inputs
evicted by the copies' traffic. On a host whose L3 holds a T = 4096 row (a 260 MiB Intel Xeon) the
ratio to copy then read 0.55-0.60 where both sides from memory give 0.86-0.89; an untimed call of the
same function before the timed one does not settle it either (the L3 keeps a line it has seen several
times: the kernel needed four calls to reach its in-cache time). Triton's do_bench clears the cache
before each timed call for the same reason.

Reading, not writing: the buffer's lines stay clean, so the timed call that follows never pays for
writing them back. Threads: each core's own L2 (and, on chips with several L3 domains, each domain)
is only replaced by reads from a thread that runs there.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

SYSFS_CPU = Path("/sys/devices/system/cpu")
# When no cache size can be read: more than the whole L3 of most servers (2x 512 MiB).
FALLBACK_LLC_BYTES = 512 << 20
# Never less: a host that reports a small cache may still have a larger victim or system cache.
MIN_BYTES = 64 << 20


def _size(text: str) -> int:
    raw = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1:], 1)
    return int(raw.rstrip("KMG")) * scale


def cpu_llc(cpu_dir: Path) -> tuple[str, int] | None:
    """(the CPUs sharing it, its bytes) for one CPU's highest-level cache in sysfs; an index whose files
    are missing or unreadable is skipped, None when no index can be read."""
    best: tuple[int, str, int] | None = None
    for index in sorted(cpu_dir.glob("cache/index*")):
        try:
            level = int((index / "level").read_text().strip())
            size = _size((index / "size").read_text())
            shared = (index / "shared_cpu_list").read_text().strip() if (index / "shared_cpu_list").exists() \
                else cpu_dir.name
        except (OSError, ValueError):
            continue
        if best is None or level > best[0]:
            best = (level, shared, size)
    return None if best is None else (best[1], best[2])


def last_level_cache_bytes(root: Path = SYSFS_CPU, cpus: set[int] | None = None) -> int | None:
    """The bytes of the distinct last-level caches (one per L3 domain or socket) of `cpus` (default:
    those this process may run on), or None where sysfs says nothing."""
    if cpus is None:
        try:
            cpus = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            cpus = {0}
    domains: dict[str, int] = {}
    for cpu in sorted(cpus):
        llc = cpu_llc(root / f"cpu{cpu}")
        if llc is not None:
            domains[llc[0]] = llc[1]
    return sum(domains.values()) if domains else None


def flush_bytes(llc: int | None = -1) -> int:
    """The flush buffer's size: twice the last-level caches (`llc`; by default read from sysfs), at
    least MIN_BYTES; twice FALLBACK_LLC_BYTES when the size is unknown."""
    if llc == -1:
        llc = last_level_cache_bytes()
    return max(MIN_BYTES, 2 * (llc if llc else FALLBACK_LLC_BYTES))


class Flush:
    """A callable that evicts the caches by reading one word of every 64-byte line of a buffer of
    `nbytes` (flush_bytes() by default): about 35 ms for a 260 MiB L3. `reader(address, nbytes,
    threads)` does the read on `threads` threads (the C yardstick's); without one NumPy reads it on
    this thread. The buffer is allocated and faulted in once."""

    def __init__(self, nbytes: int | None = None, threads: int = 1,
                 reader: Callable[[int, int, int], int] | None = None):
        self.nbytes = (flush_bytes() if nbytes is None else int(nbytes)) // 64 * 64
        self.threads, self.reader = threads, reader
        try:
            # ones, not zeros or empty: pages never written all map the one shared zero page, and a
            # read of those would hit the same few cached lines instead of evicting anything
            self.buffer = np.ones(self.nbytes // 8, np.uint64)
        except MemoryError:
            raise ValueError(f"bench cannot allocate its {self.nbytes >> 20} MiB cache-flush buffer") from None

    def __call__(self) -> int:
        if self.reader is not None:
            return int(self.reader(self.buffer.ctypes.data, self.nbytes, self.threads))
        return int(self.buffer[::8].sum())
