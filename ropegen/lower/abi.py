"""The one kernel-parameter model of every compiled target: each parameter of a generated kernel and
what the host passes for it.

A target builds its parameter list once per plan (backends/c/abi.py; lower/gpu/abi.py for every GPU target); the
list drives both the printed signature (the target spells `dtype`/`const`/`bits` in its own
language) and the host's argument values (runtime/host.py fills each from `source`). A parameter's
`source` is one of:

    ("in", tensor)             address of an input
    ("out", output)            address of an output
    ("stride", tensor, axis)   element stride of a rotated input or output along "b", "s", "h" or "d"
                               (lower/strides.py; packed tokens: "s" is the token stride, "b" is 0)
    ("axis_stride", tensor, i) element stride of memory axis i of an input
    ("extent", tensor, i)      size of memory axis i of an input
    ("dim", symbol)            the size a symbol is bound to by this call
    ("scalar", tensor)         the value of a rank-0 integer input, passed by value
    ("threads",)               CPU threads for this call
    ("launch", key)            a launch quantity the target computes (tokens, seq_len, rows, ...)
    ("err",)                   address of the device error word (lower/status.py codes as bits)
    ("seq_ends",)              address of the int64 inclusive prefix sums of the sequence lengths
    ("freq",)                  address of the float64 [units, columns] frequency rows of a call whose
                               frequencies depend on its length (ops/rope/frequency_rows.py)
    ("zero",)                  0 (the batch stride of packed-token tensors)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from ropegen.ir.dtypes import DType

# The arity of each source kind (the kind word included): a typo in a target's list fails at once.
SOURCES = {"in": 2, "out": 2, "stride": 3, "axis_stride": 3, "extent": 3, "dim": 2, "scalar": 2,
           "threads": 1, "launch": 2, "err": 1, "seq_ends": 1, "freq": 1,
           "zero": 1}

# Identifier prefixes generated code keeps for itself; a spec name that starts with one is renamed.
INTERNAL_PREFIXES = ("rg_", "ropegen_", "ROPEGEN_", "__")


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its identifier, what the host passes, and its type in neutral words."""

    name: str                    # the identifier printed in the generated source
    source: tuple                # see the module docstring
    dtype: DType | None = None   # pointers: the element type (None: an integer passed by value)
    const: bool = False          # pointers: the kernel only reads through it
    bits: int = 64               # integers passed by value: their width
    doc: str = ""                # one line for the generated header

    def __post_init__(self) -> None:
        if SOURCES.get(self.source[0] if self.source else None) != len(self.source):
            raise AssertionError(f"parameter {self.name}: unknown source {self.source!r}")

    @property
    def kind(self) -> str:
        return self.source[0]

    @property
    def tensor(self) -> str | None:
        """The tensor, output or symbol the parameter belongs to (None for threads, launch, err ...)."""
        return self.source[1] if self.kind in ("in", "out", "stride", "axis_stride", "extent", "dim",
                                               "scalar") else None

    @property
    def is_pointer(self) -> bool:
        return self.dtype is not None


def find(params: Iterable[Param], *source) -> Param:
    """The parameter whose source is `source`; KeyError when the kernel takes none."""
    for q in params:
        if q.source == source:
            return q
    raise KeyError(source)


def positions(params: Sequence[Param]) -> dict[tuple, int]:
    """source -> index in the parameter list (each source appears once per kernel)."""
    out: dict[tuple, int] = {}
    for i, q in enumerate(params):
        if q.source in out:
            raise AssertionError(f"two parameters pass {q.source!r}: {params[out[q.source]].name}, {q.name}")
        out[q.source] = i
    return out


def mangle(name: str, taken: set[str], reserved: frozenset[str], prefix: str = "u_",
           internal: tuple[str, ...] = INTERNAL_PREFIXES) -> str:
    """An identifier for a spec name: unchanged unless reserved by the target, in the generated
    code's own namespace (`internal`), or already taken; records it in `taken`."""
    out = name
    if out in reserved or out.startswith(internal):
        out = prefix + out
    while out in reserved or out in taken:
        out = out + "_"
    taken.add(out)
    return out


def symbols(plan) -> list[str]:
    """The size symbols of a plan's inputs, in order of first appearance (one "dim" parameter each)."""
    seen: list[str] = []
    for t in plan.inputs:
        for d in t.shape:
            if isinstance(d, str) and d not in seen:
                seen.append(d)
    return seen


# The host-language entry point that takes every parameter as one 64-bit word is the kernel's own
# function name plus this (templates/c: `ropegen_NAME_words`); the spec checker refuses an operator
# named so that it collides with another's (C039).
WORDS_SUFFIX = "_words"
