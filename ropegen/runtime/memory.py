"""How much memory one check case or benchmark shape may take: $ROPEGEN_MEMORY_LIMIT, else half of
what is available now, so that an impossible size is refused with a message before anything is
allocated instead of ending in a MemoryError or the OOM killer."""
from __future__ import annotations

import os
import re

MEMORY_ENV = "ROPEGEN_MEMORY_LIMIT"
_UNITS = {"": 1, "k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30, "t": 2 ** 40}


class TooLarge(ValueError):
    """The arrays a check case or a benchmark shape needs do not fit in the memory limit."""


def parse_bytes(text: str) -> int:
    """'12345', '512M', '8G', '1.5T' (powers of 1024, optional trailing B/iB) -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if not m:
        raise ValueError(f"{MEMORY_ENV}='{text}': expected a number of bytes such as 4000000000, 512M or 8G")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"{MEMORY_ENV}='{text}': the limit must be positive")
    return value


def available_memory() -> int | None:
    """Bytes this process can still allocate: MemAvailable from /proc/meminfo (capped by a cgroup v2
    memory.max), else the physical memory; None when neither can be read."""
    avail = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        avail = None
    if avail is None:
        try:
            avail = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            avail = None
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            raw = f.read().strip()
        if raw and raw != "max":
            cap = int(raw)
            try:
                with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
                    cap -= int(f.read().strip())
            except (OSError, ValueError):
                pass
            avail = cap if avail is None else min(avail, cap)
    except (OSError, ValueError):
        pass
    return None if avail is None else max(0, avail)


def memory_limit() -> int:
    """Bytes one check case or benchmark shape may need: $ROPEGEN_MEMORY_LIMIT when set (bytes, or
    with a K/M/G/T suffix), else half the memory available now (16 GiB when that cannot be read).
    Raises ValueError for a malformed $ROPEGEN_MEMORY_LIMIT."""
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if raw:
        return parse_bytes(raw)
    avail = available_memory()
    return 16 * 2 ** 30 if avail is None else avail // 2


def format_bytes(n: float) -> str:
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}" if n < 1000 * 2 ** 40 else f"{n:.3g} bytes"
    return f"{int(n)} bytes"


def limit_hint() -> str:
    """How the limit was chosen and how to change it, for messages."""
    if os.environ.get(MEMORY_ENV, "").strip():
        return f"the limit set by {MEMORY_ENV}"
    return f"half the available memory; set {MEMORY_ENV}=BYTES (e.g. 64G) to change it"
