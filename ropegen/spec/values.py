"""Value readers of the checker: turn one setting's syntax value into a number, a word, an input or
call arguments, or record a diagnostic and stop reading it.

Every operator kind's checker (ops/<kind>/check.py) reads its settings through these, so that the
same mistake gets the same code and message in every kind.
"""
from __future__ import annotations

import math
from typing import Callable

from ropegen import ir
from ropegen.spec import ast as A
from ropegen.spec.diagnostics import Collector, Loc, did_you_mean


class Bad(Exception):
    """A value could not be read; the diagnostic is already recorded."""


class Reader:
    """Diagnostics and value readers over one operator declaration.

    The tensor declarations (`tensors`, `broken`) are filled by the generic checker before a kind's
    checker runs; `ref` records which inputs a setting used.
    """

    def __init__(self, c: Collector, node: A.OperatorNode):
        self.c = c
        self.node = node
        self.tensors: dict[str, ir.Tensor] = {}
        self.broken: set[str] = set()   # inputs whose declaration already has an error
        self.used: set[str] = set()
        self.settings: dict[str, A.SettingNode] = {}
        self.axis_locs: dict[str, tuple[Loc, ...]] = {}   # where each input's axes are written

    def err(self, code: str, msg: str, loc: Loc, hint: str | None = None) -> None:
        self.c.error(code, msg, loc, hint)

    def warn(self, code: str, msg: str, loc: Loc, hint: str | None = None) -> None:
        self.c.warn(code, msg, loc, hint)

    def axis_loc(self, tensor: str, axis: int) -> Loc:
        return self.axis_locs[tensor][axis]

    def fail(self, code: str, msg: str, loc: Loc, hint: str | None = None):
        self.err(code, msg, loc, hint)
        raise Bad

    def guarded(self, fn: Callable, *args):
        try:
            return fn(*args)
        except Bad:
            return None

    def setting(self, key: str) -> A.SettingNode | None:
        return self.settings.get(key)

    def require(self, key: str) -> A.SettingNode:
        s = self.setting(key)
        if s is None:
            self.fail("C007", f"{self.node.kind} '{self.node.name}' needs the setting '{key}'",
                      self.node.name_loc)
        return s

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        s = self.setting(key)
        return default if s is None else self.word(s.value, key, choices)

    def ref(self, v: A.Value, what: str) -> ir.Tensor:
        """A value that must name a declared input."""
        if not isinstance(v, A.Word):
            self.fail("C008", f"{what} must name an input", v.loc)
        if v.name in self.broken:
            raise Bad   # reported at its declaration
        if v.name not in self.tensors:
            self.fail("C012", f"'{v.name}' is not a declared input", v.loc,
                      did_you_mean(v.name, self.tensors) if self.tensors else "declare it with `in NAME: dtype[...]`")
        self.used.add(v.name)
        return self.tensors[v.name]

    def number(self, v: A.Value, what: str, *, integer: bool = False, positive: bool = False,
               nonneg: bool = False) -> float:
        if not isinstance(v, A.Number):
            self.fail("C008", f"{what} must be a number", v.loc)
        if integer and not v.is_int:
            self.fail("C008", f"{what} must be an integer", v.loc)
        if not math.isfinite(v.value) or (integer and abs(v.value) > 2 ** 62):
            self.fail("C029", f"{what} is too large", v.loc)
        if positive and not v.value > 0:
            self.fail("C029", f"{what} must be positive", v.loc)
        if nonneg and v.value < 0:
            self.fail("C029", f"{what} must not be negative", v.loc)
        return int(v.value) if integer else v.value

    def scalar(self, v: A.Value, what: str) -> ir.Scalar:
        """An integer literal, or the name of a rank-0 integer input."""
        if isinstance(v, A.Number):
            return int(self.number(v, what, integer=True))
        t = self.ref(v, what)
        if t.dtype.is_float or len(t.axes) != 0:
            self.fail("C016", f"{what} '{t.name}' must be a rank-0 integer tensor, e.g. i64[]", t.loc)
        return t.name

    def word(self, v: A.Value, what: str, choices: tuple[str, ...]) -> str:
        if isinstance(v, A.Call) and v.name in choices:
            self.fail("C008", f"'{v.name}' takes no arguments here", v.loc)
        if not isinstance(v, A.Word):
            self.fail("C008", f"{what} must be one of: {', '.join(choices)}", v.loc)
        if v.name not in choices:
            self.fail("C009", f"unknown {what} '{v.name}'", v.loc, did_you_mean(v.name, choices))
        return v.name

    def call_args(self, v: A.Call, allowed: tuple[str, ...], required: tuple[str, ...],
                  positional: tuple[str, ...] = ()) -> dict[str, A.Value]:
        out: dict[str, A.Value] = {}
        pos_i = 0
        for a in v.args:
            name = a.name
            if name is None:
                if pos_i >= len(positional):
                    self.fail("C010", f"'{v.name}' takes no positional argument here", a.loc,
                              f"name it: {v.name}({', '.join(x + '=...' for x in allowed)})")
                name = positional[pos_i]
                pos_i += 1
            elif name not in allowed:
                self.fail("C010", f"'{name}' is not an argument of '{v.name}'", a.loc,
                          did_you_mean(name, allowed))
            if name in out:
                self.fail("C010", f"argument '{name}' is given twice", a.loc)
            out[name] = a.value
        for r in required:
            if r not in out:
                self.fail("C011", f"'{v.name}' needs the argument '{r}'", v.loc,
                          f"{v.name}({', '.join(x + '=...' for x in required)})")
        return out
