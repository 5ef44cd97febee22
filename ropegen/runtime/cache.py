"""The one cache-key recipe of built kernels: what was built (kind), by which toolchain, with which
flags, from which sources -> a short hex key.

Every target that caches a build names it by `key`: the C target's shared libraries and drivers
(backends/c/build.py, which publishes them atomically with a sha256 sidecar), a GPU target's
compiled modules (kind "cubin", toolchain = compiler version and device architecture). Anything
that changes the bytes of a build must be part of the key; nothing else may be (paths, times).
"""
from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

KEY_CHARS = 24


def key(kind: str, toolchain: Sequence[str], flags: Sequence[str], sources: Mapping[str, str],
        length: int = KEY_CHARS) -> str:
    """The cache key of one build: `kind` (e.g. "so", "exe", "cubin"), the toolchain's identity
    (compiler command and version, device architecture, ...), the flags in order and the sources
    by file name (in name order: the mapping's order does not matter)."""
    h = hashlib.sha256()
    for part in (kind, *toolchain, "\0".join(flags)):
        h.update(part.encode("utf-8") + b"\0")
    for name in sorted(sources):
        h.update(name.encode("utf-8") + b"\0" + sources[name].encode("utf-8") + b"\0")
    return h.hexdigest()[:length]


def digest(data: bytes) -> str:
    """The sha256 of a build's bytes, as recorded beside it to detect a damaged cached file."""
    return hashlib.sha256(data).hexdigest()
