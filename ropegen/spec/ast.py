"""Syntax tree of a .rope file: plain frozen nodes, each carrying its source position."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ropegen.spec.diagnostics import Loc


@dataclass(frozen=True)
class Number:
    value: float
    text: str
    loc: Loc

    @property
    def is_int(self) -> bool:
        return self.text.lstrip("+-").isdigit()


@dataclass(frozen=True)
class String:
    value: str
    loc: Loc


@dataclass(frozen=True)
class Word:
    name: str
    loc: Loc


@dataclass(frozen=True)
class Arg:
    name: str | None      # None for a positional argument
    value: "Value"
    loc: Loc


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Arg, ...]
    loc: Loc


@dataclass(frozen=True)
class ListValue:
    items: tuple["Value", ...]
    loc: Loc


Value = Union[Number, String, Word, Call, ListValue]


@dataclass(frozen=True)
class DimNode:
    """One axis of a declared shape: a size (int or symbol), optionally labelled with a role."""

    size: int | str
    label: str | None
    loc: Loc
    label_loc: Loc | None = None


@dataclass(frozen=True)
class AxisNode:
    """A memory axis: one dim, or several dims merged into one (e.g. hidden = heads*head_dim)."""

    parts: tuple[DimNode, ...]
    loc: Loc


@dataclass(frozen=True)
class TensorTypeNode:
    dtype: str
    dtype_loc: Loc
    axes: tuple[AxisNode, ...]
    loc: Loc


@dataclass(frozen=True)
class InputNode:
    name: str
    type: TensorTypeNode
    loc: Loc


@dataclass(frozen=True)
class OutputNode:
    name: str
    value: Value | None
    loc: Loc


@dataclass(frozen=True)
class SettingNode:
    key: str
    value: Value
    loc: Loc


@dataclass(frozen=True)
class OperatorNode:
    kind: str
    kind_loc: Loc
    name: str
    name_loc: Loc
    inputs: tuple[InputNode, ...]
    outputs: tuple[OutputNode, ...]
    settings: tuple[SettingNode, ...]
    loc: Loc


@dataclass(frozen=True)
class SpecNode:
    file: str
    source: str
    operators: tuple[OperatorNode, ...]
