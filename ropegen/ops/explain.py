"""`ropegen explain`: the resolved plan in words and tables, for a reviewer, or as JSON-ready facts for a
program (each kind's text and facts are in its slice, ops/<kind>/explain.py: `explain` and `facts`)."""
from __future__ import annotations

import dataclasses
from enum import Enum

import numpy as np

from ropegen import ops

SCHEMA_VERSION = 1


def explain(plan, lengths: tuple[int, ...] = ()) -> str:
    """`lengths`: call lengths (max position + 1) to show length-dependent frequencies at."""
    return ops.of(plan).explain(plan, tuple(lengths))


def facts(plan, lengths: tuple[int, ...] = ()) -> dict:
    """What explain prints, as data with stable keys (docs: the `ropegen explain --json` schema)."""
    return {"kind": plan.kind, **ops.of(plan).explain_facts(plan, tuple(lengths))}


def number(x) -> dict:
    """A planned float constant, exactly: `decimal` is the shortest text that reads back to the same
    value in its own precision, `hex` the exact value (float.hex of the float64 it widens to), `type`
    f32 or f64."""
    if isinstance(x, np.floating) and x.dtype.itemsize == 4:
        return {"decimal": np.format_float_positional(x, unique=True, trim="0") if _plain(x) else
                np.format_float_scientific(x, unique=True, trim="-"), "hex": float(x).hex(), "type": "f32"}
    x = float(x)
    return {"decimal": repr(x), "hex": x.hex(), "type": "f64"}


def _plain(x: np.floating) -> bool:
    a = abs(float(x))
    return a == 0 or 1e-4 <= a < 1e16


def tensor(t) -> dict:
    """A tensor plan: name, dtype and shape (ints for fixed sizes, symbol names for the others)."""
    return {"name": t.name, "dtype": t.dtype.name, "shape": [d if isinstance(d, int) else str(d) for d in t.shape]}


def dtype_name(d) -> str | None:
    return None if d is None else d.name


def record(x):
    """An IR or plan record as JSON-ready data: dataclasses as objects of their fields, enums as their
    words, dtypes as names, floats through number(), tuples as lists."""
    if isinstance(x, Enum):
        return x.value
    if isinstance(x, (bool, int, str)) or x is None:
        return x
    if isinstance(x, (float, np.floating)):
        return number(x)
    if isinstance(x, (tuple, list)):
        return [record(v) for v in x]
    if hasattr(x, "np_dtype"):   # an ir.dtypes.DType
        return x.name
    if dataclasses.is_dataclass(x):
        return {f.name: record(getattr(x, f.name)) for f in dataclasses.fields(x)}
    raise TypeError(f"explain cannot write a {type(x).__name__} as JSON")
