"""Refuse kernel calls whose outputs share memory with anything else the kernel reads or writes.

Arrays are described by Extent (address, shape, byte strides, itemsize), so NumPy arrays and device
pointers from CuPy, DLPack or __cuda_array_interface__ go through the same test. Whether two
extents share a byte (`overlap`), or two elements of one extent do (`internal_overlap`), is a
bounded linear Diophantine equation, decided exactly within a work budget; past it the answer is
"maybe", which `check` treats as overlap.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Mapping

import numpy as np

# Nested layouts (each stride at least the span of the axes inside it) leave one or two candidates
# per axis, so real calls take a few dozen steps; the budget only bounds contrived as_strided views.
MAX_WORK = 100_000


@dataclass(frozen=True)
class Extent:
    """The bytes of a strided array: address + sum(i_k * strides[k]) + [0, itemsize) over the index box."""

    address: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]     # in bytes, any sign
    itemsize: int

    @classmethod
    def of(cls, a: np.ndarray) -> Extent:
        return cls(int(a.__array_interface__["data"][0]), tuple(a.shape), tuple(a.strides), int(a.itemsize))

    @property
    def empty(self) -> bool:
        return 0 in self.shape or self.itemsize == 0

    def _axes(self) -> tuple[int, list[tuple[int, int]]]:
        """(lowest address, [(|stride|, count - 1)]) over the axes that move; negative strides run
        backwards from a lower start, which is the same set of bytes."""
        low, axes = self.address, []
        for n, s in zip(self.shape, self.strides):
            if n > 1 and s != 0:
                if s < 0:
                    low += s * (n - 1)
                axes.append((abs(s), n - 1))
        return low, axes

    def bounds(self) -> tuple[int, int]:
        """The lowest and highest byte, inclusive (only for a non-empty extent)."""
        low, axes = self._axes()
        return low, low + sum(s * u for s, u in axes) + self.itemsize - 1

    def same_view(self, other: Extent) -> bool:
        """The very same elements in the same order (strides of length-1 axes never matter)."""
        if (self.address, self.shape, self.itemsize) != (other.address, other.shape, other.itemsize):
            return False
        return all(a == b for n, a, b in zip(self.shape, self.strides, other.strides) if n > 1)


class _TooHard(Exception):
    pass


def overlap(a: Extent, b: Extent, max_work: int | None = None) -> bool | None:
    """True when the two extents share a byte, False when they cannot, None when deciding took more
    than `max_work` (default MAX_WORK) steps."""
    if a.empty or b.empty:
        return False
    lo_a, hi_a = a.bounds()
    lo_b, hi_b = b.bounds()
    if hi_a < lo_b or hi_b < lo_a:
        return False
    # a byte of a equals a byte of b: lo_a + sum(a_k i_k) + t = hi_b - sum(b_k j_k) - t', every
    # coefficient positive and every unknown in [0, bound]: sum(c x) = hi_b - lo_a
    terms: dict[int, int] = {}
    for ext in (a, b):
        _, axes = ext._axes()
        for c, u in axes + [(1, ext.itemsize - 1)]:
            if u:
                # c x + c y with x <= u1, y <= u2 reaches exactly the c z with z <= u1 + u2
                terms[c] = terms.get(c, 0) + u
    try:
        return _solvable(sorted(terms.items(), reverse=True), hi_b - lo_a, [max_work or MAX_WORK])
    except _TooHard:
        return None


def internal_overlap(e: Extent, max_work: int | None = None) -> bool | None:
    """Whether two different elements of one extent share a byte (a broadcast or as_strided view):
    True, False, or None when undecided within the work budget."""
    if e.empty:
        return False
    if any(n > 1 and s == 0 for n, s in zip(e.shape, e.strides)):
        return True
    _, axes = e._axes()
    if _nested(axes, e.itemsize):
        return False
    work = [max_work or MAX_WORK]
    try:
        # two index tuples differ first at axis m, where (by symmetry) the step d_m >= 1; later
        # axes step by d_k in [-u_k, u_k]; they collide when |sum(s_k d_k)| < itemsize. Shifted to
        # unknowns in [0, bound] that is: s_m y + sum(s_k x_k) + t = sum(s_k u_k) + itemsize - 1 - s_m
        for m, (s_m, u_m) in enumerate(axes):
            terms: dict[int, int] = {}
            for c, u in [(s_m, u_m - 1)] + [(s, 2 * u) for s, u in axes[m + 1:]] + [(1, 2 * (e.itemsize - 1))]:
                if u:
                    terms[c] = terms.get(c, 0) + u
            target = sum(s * u for s, u in axes[m + 1:]) + e.itemsize - 1 - s_m
            if _solvable(sorted(terms.items(), reverse=True), target, work):
                return True
    except _TooHard:
        return None
    return False


def _nested(axes: list[tuple[int, int]], itemsize: int) -> bool:
    """Every axis steps past all the bytes the axes of smaller stride reach (any dense or sliced
    array): two index tuples then differ by at least an element at the largest axis where they
    differ, so no two elements share a byte and the search is not needed."""
    reach = itemsize
    for s, u in sorted(axes):
        if s < reach:
            return False
        reach += s * u
    return True


def _solvable(terms: list[tuple[int, int]], target: int, work: list[int]) -> bool:
    """Whether sum(c_k x_k) == target has a solution with 0 <= x_k <= u_k (coefficients descending)."""
    n = len(terms)
    reach = [0] * (n + 1)    # the largest sum of terms[k:]
    div = [0] * (n + 1)      # every sum of terms[k:] is a multiple of div[k]
    for k in range(n - 1, -1, -1):
        c, u = terms[k]
        reach[k] = reach[k + 1] + c * u
        div[k] = gcd(div[k + 1], c)

    def search(k: int, rest: int) -> bool:
        work[0] -= 1
        if work[0] < 0:
            raise _TooHard
        if k == n:
            return rest == 0
        if rest < 0 or rest > reach[k] or rest % div[k]:
            return False
        c, u = terms[k]
        lo = max(0, -(-(rest - reach[k + 1]) // c))
        hi = min(u, rest // c)
        g = div[k + 1]
        if g == 0:
            return lo <= hi and rest == c * lo
        # the later terms only reach multiples of g: c x = rest (mod g) fixes x modulo g / gcd(c, g)
        h = gcd(c, g)
        step = g // h
        x0 = (rest // h) * pow(c // h, -1, step) % step if step > 1 else 0
        x = lo + (x0 - lo) % step
        while x <= hi:
            if search(k + 1, rest - c * x):
                return True
            x += step
        return False

    return search(0, target)


def check(inputs: Mapping[str, Extent | np.ndarray], outputs: Mapping[str, Extent | np.ndarray],
          sources: Mapping[str, str]) -> None:
    """Raise ValueError naming two arguments of one call whose memory the kernel cannot share.

    `inputs` and `outputs` map argument names to memory; `sources` maps an output to the input it
    is computed from element by element. Inputs may overlap each other (they are only read). An
    output may overlap nothing else, except that it may be exactly its own source (in place) when
    no other output reads that source: a kernel writes each element after reading it, but a
    shifted view would overwrite elements still to be read.
    """
    ins = {n: _extent(a) for n, a in inputs.items()}
    outs = {n: _extent(a) for n, a in outputs.items()}

    def label(o: str) -> str:
        # written in place: the caller passed the source itself, so name it as they did
        src = sources.get(o)
        return src if src in ins and outs[o].same_view(ins[src]) else f"out {o}"

    names = list(outs)
    for o in names:
        found = internal_overlap(outs[o])
        if found is not False:
            raise ValueError(f"{label(o)}: its elements {_verb(found, 'overlap')} each other in memory (a broadcast "
                             f"or self-overlapping view), so the kernel's writes would collide")
    for i, o in enumerate(names):
        for o2 in names[i + 1:]:
            found = overlap(outs[o], outs[o2])
            if found is False:
                continue
            if label(o) == label(o2):
                raise ValueError(f"{o} and {o2} would both be written in place over {label(o)}: "
                                 f"pass out= arrays")
            raise ValueError(f"{label(o)} and {label(o2)} {_verb(found, 'overlap')} in memory, and both are "
                             f"written: pass separate arrays")
    for o in names:
        for i_name, ext in ins.items():
            found = overlap(outs[o], ext)
            if found is False:
                continue
            readers = [o2 for o2 in names if sources.get(o2) == i_name]
            others = [o2 for o2 in readers if o2 != o]
            exact = outs[o].same_view(ext)
            if o in readers and exact and not others:
                continue
            if o in readers and exact:
                raise ValueError(f"{o} is written in place over {i_name}, which {', '.join(others)} still "
                                 f"{'read' if len(others) > 1 else 'reads'}: pass separate arrays")
            if o in readers:
                raise ValueError(f"{label(o)} {_verb(found)} its source {i_name} in memory without being exactly "
                                 f"{i_name} (same address, shape and strides): write in place or to separate memory")
            raise ValueError(f"{label(o)} {_verb(found)} {i_name} in memory, which is still to be read: "
                             f"pass separate arrays")


def _verb(found: bool | None, verb: str = "overlaps") -> str:
    return verb if found else "may overlap"


def _extent(a: Extent | np.ndarray) -> Extent:
    return a if isinstance(a, Extent) else Extent.of(a)
