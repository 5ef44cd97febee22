"""Stage 1: text -> syntax tree (Lark, LALR), every node keeping its file:line:col."""
from __future__ import annotations

from functools import lru_cache

from lark import Lark, Token, Tree, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ropegen.spec import ast as A
from ropegen.spec.diagnostics import Diagnostic, Loc, SpecError, source_lines
from ropegen.resources import grammar_path

# The LALR parser itself keeps its stack on the heap, but building and checking the tree recurses
# once per bracket: a bound far above any real spec keeps that well inside Python's recursion limit.
MAX_NESTING = 32

# Human names for the grammar's terminals, used in "expected ..." messages.
_TERMINAL_NAMES = {
    "NAME": "a name", "INT": "an integer", "SIGNED_NUMBER": "a number", "STRING": "a string",
    "LBRACE": "'{'", "RBRACE": "'}'", "LSQB": "'['", "RSQB": "']'", "LPAR": "'('", "RPAR": "')'",
    "$END": "end of file", "COMMA": "','", "COLON": "':'", "EQUAL": "'='", "IN": "'in'", "OUT": "'out'",
}


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(grammar_path().read_text(encoding="utf-8"), parser="lalr",
                propagate_positions=True, maybe_placeholders=True)


def _loc(file: str, meta_or_token) -> Loc:
    if isinstance(meta_or_token, Token):
        end = meta_or_token.end_column if meta_or_token.end_line == meta_or_token.line else None
        return Loc(file, meta_or_token.line, meta_or_token.column, end)
    m = meta_or_token
    end = m.end_column if getattr(m, "end_line", None) == m.line else None
    return Loc(file, m.line, m.column, end)


def parse(source: str, file: str = "<spec>") -> A.SpecNode:
    """Parse a spec; a syntax error raises SpecError with exactly one diagnostic."""
    try:
        tree = _parser().parse(source)
    except UnexpectedInput as exc:
        raise SpecError([_syntax_diagnostic(exc, source, file)], source) from None
    try:
        ops = tuple(_Builder(file).operator(t) for t in tree.children)
    except SpecError as exc:
        raise SpecError(exc.diagnostics, source) from None
    return A.SpecNode(file, source, ops)


def _expected_text(expected) -> str:
    names = sorted({_TERMINAL_NAMES.get(e, e.lower() if e.isupper() else repr(e)) for e in expected})
    if len(names) > 8:
        names = names[:8] + ["..."]
    return ", ".join(names)


def _syntax_diagnostic(exc: UnexpectedInput, source: str, file: str) -> Diagnostic:
    if isinstance(exc, UnexpectedCharacters):
        ch = source[exc.pos_in_stream] if exc.pos_in_stream < len(source) else "?"
        return Diagnostic("P001", f"unexpected character {ch!r}", Loc(file, exc.line, exc.column),
                          "names are letters, digits and '_'; comments start with '#'")
    if isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
        lines = source_lines(source.rstrip())   # just after the last thing written, not on a blank line
        line = len(lines)
        col = len(lines[-1]) + 1
        expected = getattr(exc, "expected", None) or getattr(exc, "accepts", None) or []
        return Diagnostic("P003", "unexpected end of file", Loc(file, line, col),
                          f"expected {_expected_text(expected)}" if expected else "is a '}' missing?")
    assert isinstance(exc, UnexpectedToken)
    tok = exc.token
    expected = exc.accepts or exc.expected
    end = tok.end_column if tok.end_line == tok.line else None
    return Diagnostic("P002", f"unexpected {str(tok)!r}", Loc(file, tok.line, tok.column, end),
                      f"expected {_expected_text(expected)}")


class _Builder:
    """Turns Lark's tree into ropegen.spec.ast nodes."""

    def __init__(self, file: str):
        self.file = file

    def loc(self, x) -> Loc:
        return _loc(self.file, x)

    def nest(self, depth: int, opener) -> int:
        """The depth inside one more bracket; P005 at the first bracket past MAX_NESTING."""
        depth += 1
        if depth > MAX_NESTING:
            raise SpecError([Diagnostic("P005", "brackets nested too deep", self.loc(opener),
                                        f"at most {MAX_NESTING} levels of '(' and '[' may be nested")])
        return depth

    def operator(self, t: Tree) -> A.OperatorNode:
        kind, name, *items = t.children
        inputs, outputs, settings = [], [], []
        for it in items:
            if it.data == "input_decl":
                n, ty = it.children
                inputs.append(A.InputNode(str(n), self.tensor_type(ty), self.loc(n)))
            elif it.data == "output_decl":
                n, v = it.children
                outputs.append(A.OutputNode(str(n), None if v is None else self.value(v), self.loc(n)))
            else:
                k, v = it.children
                settings.append(A.SettingNode(str(k), self.value(v), self.loc(k)))
        return A.OperatorNode(str(kind), self.loc(kind), str(name), self.loc(name),
                              tuple(inputs), tuple(outputs), tuple(settings), self.loc(t.meta))

    def tensor_type(self, t: Tree) -> A.TensorTypeNode:
        dtype, *dims = t.children
        axes = tuple(self.axis(d) for d in dims if d is not None)
        return A.TensorTypeNode(str(dtype), self.loc(dtype), axes, self.loc(t.meta))

    def axis(self, d: Tree, depth: int = 1) -> A.AxisNode:
        if d.data == "merged_dim":
            depth = self.nest(depth, d.meta)
            parts = []
            for c in d.children:
                sub = self.axis(c, depth)
                parts.extend(sub.parts)
            return A.AxisNode(tuple(parts), self.loc(d.meta))
        return A.AxisNode((self.dim(d),), self.loc(d.meta))

    def dim(self, d: Tree) -> A.DimNode:
        if d.data == "labelled_dim":
            label, size = d.children
            return A.DimNode(self.size(size), str(label), self.loc(size.meta), self.loc(label))
        return A.DimNode(self.size(d), None, self.loc(d.meta))

    def size(self, s: Tree) -> int | str:
        tok = s.children[0]
        if s.data != "int_size":
            return str(tok)
        if len(tok) > 18:
            raise SpecError([Diagnostic("P004", "this size is too large", self.loc(tok),
                                        "sizes must fit in 64 bits")])
        return int(tok)

    def value(self, v, depth: int = 0) -> A.Value:
        data = v.data
        if data == "number":
            tok = v.children[0]
            return A.Number(float(tok), str(tok), self.loc(tok))
        if data == "string":
            tok = v.children[0]
            return A.String(str(tok)[1:-1], self.loc(tok))
        if data == "word":
            tok = v.children[0]
            return A.Word(str(tok), self.loc(tok))
        if data == "call":
            name, *args = v.children
            depth = self.nest(depth, name)
            built = []
            for a in args:
                if a is None:
                    continue
                if a.data == "kwarg":
                    k, val = a.children
                    built.append(A.Arg(str(k), self.value(val, depth), self.loc(k)))
                else:
                    val = self.value(a.children[0], depth)
                    built.append(A.Arg(None, val, val.loc))
            return A.Call(str(name), tuple(built), self.loc(name))
        if data == "list":
            depth = self.nest(depth, v.meta)
            return A.ListValue(tuple(self.value(c, depth) for c in v.children if c is not None), self.loc(v.meta))
        raise AssertionError(f"unknown value node {data}")
