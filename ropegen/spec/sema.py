"""Stage 2: syntax tree -> IR, collecting every semantic error with a stable code and a hint.

This module is the generic part: the operator loop, tensor declarations, settings collection,
unused inputs and generated-name clashes. Which settings an operator kind accepts and what they
mean is decided by the kind's checker (ops/<kind>/check.py), found through the ops registry.
"""
from __future__ import annotations

import hashlib

from ropegen import ir, ops
from ropegen.lower.abi import WORDS_SUFFIX
from ropegen.spec import ast as A
from ropegen.spec.diagnostics import Collector, Loc, did_you_mean
from ropegen.spec.limits import name_too_long
from ropegen.spec.tensors import ROLE_NAMES, Declarations, reserved_words

__all__ = ["check", "reserved_words", "ROLE_NAMES", "OperatorChecker"]


def check(spec: A.SpecNode) -> ir.Spec:
    """Check every operator; raise SpecError listing all problems, else return the IR."""
    c = Collector(spec.file)
    out: list[ir.Operator] = []
    seen: dict[str, Loc] = {}
    if not spec.operators:
        c.error("C035", "the spec declares no operator", Loc(spec.file, 1, 1),
                "start with e.g. `rope my_rope { ... }` or `rmsnorm my_norm { ... }`")
    for node in spec.operators:
        too_long = name_too_long(node.name)
        if too_long:
            c.error("C037", too_long, node.name_loc, "operator names become file names: shorten it")
            continue
        if node.name in seen:
            c.error("C002", f"operator '{node.name}' is declared twice", node.name_loc,
                    f"the first one is at line {seen[node.name].line}")
            continue
        seen[node.name] = node.name_loc
        stem = node.name[:-len(WORDS_SUFFIX)] if node.name.endswith(WORDS_SUFFIX) else None
        if stem in seen or node.name + WORDS_SUFFIX in seen:
            first, second = (stem, node.name) if stem in seen else (node.name, node.name + WORDS_SUFFIX)
            c.error("C039", f"operator '{second}' would collide with the C entry point generated for "
                    f"'{first}' (ropegen_{first}{WORDS_SUFFIX})", node.name_loc, "rename one of them")
            continue
        if node.kind not in ops.words():
            c.error("C001", f"unknown operator kind '{node.kind}'", node.kind_loc,
                    did_you_mean(node.kind, ops.words()))
            continue
        op = OperatorChecker(c, node).run()
        if op is not None:
            out.append(op)
    c.raise_if_any(spec.source)
    digest = hashlib.sha256(spec.source.encode("utf-8")).hexdigest()
    return ir.Spec(spec.file, digest, tuple(out), c.sorted_warnings())


class OperatorChecker(Declarations):
    """One operator declaration: what every kind shares, around the kind's own checker."""

    def run(self) -> ir.Operator | None:
        kind = ops.get(self.node.kind)
        self.collect_inputs()
        self.collect_settings(kind.settings)
        op = self.guarded(kind.check, self)
        if op is not None:
            self.unused_inputs()
            self.generated_name_clashes()
        return op

    def collect_settings(self, keys: tuple[str, ...]) -> None:
        for s in self.node.settings:
            if s.key not in keys:
                self.err("C006", f"'{s.key}' is not a setting of {self.node.kind}", s.loc,
                         did_you_mean(s.key, keys))
            elif s.key in self.settings:
                self.err("C024", f"'{s.key}' is set twice", s.loc,
                         f"the first is at line {self.settings[s.key].loc.line}")
            else:
                self.settings[s.key] = s

    def generated_name_clashes(self) -> None:
        """Backends derive parameter names as NAME_s<c> (strides); a tensor named like that would
        collide with another tensor's derived name."""
        names = [(i.name, i.loc) for i in self.node.inputs] + [(o.name, o.loc) for o in self.node.outputs]
        declared = {n for n, _ in names}
        for n, loc in names:
            stem, sep, tail = n.rpartition("_s")
            if sep and len(tail) == 1 and tail.isalnum() and stem in declared:
                self.err("C036", f"'{n}' would collide with a name generated for '{stem}'", loc,
                         f"rename it, e.g. '{stem}_{tail}s'")

    def unused_inputs(self) -> None:
        for name, t in self.tensors.items():
            if name not in self.used:
                self.err("C026", f"input '{name}' is declared but never used", t.loc,
                         "remove it, or refer to it from a setting")
