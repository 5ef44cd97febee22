"""Stage 2: syntax tree -> IR, collecting every semantic error with a stable code and a hint.

Which settings each operator kind accepts, and what they mean, is decided here; the grammar only
knows declarations and `key = value`.
"""
from __future__ import annotations

import hashlib
import math
from typing import Callable

from ropegen.spec import ast as A
from ropegen import ir
from ropegen.spec.angles import AngleChecks
from ropegen.spec.limits import MAX_FIXED_ELEMENTS, MAX_HEAD_DIM, name_too_long
from ropegen.spec.diagnostics import Collector, Loc, did_you_mean
from ropegen.ir.dtypes import DTYPES, FLOAT_NAMES

KINDS = ("rope", "rmsnorm")
ROPE_KEYS = ("pairing", "rotary_dim", "positions", "angles", "sequences", "direction",
             "compute", "angle_numerics", "trig")
RMS_KEYS = ("axis", "epsilon", "stash")
ROLE_NAMES = tuple(r.value for r in ir.Role)
PAIR_WORDS = ("neox", "gptj", "block", "glm2d")
def reserved_words() -> frozenset[str]:
    """Words no tensor may be named: tensor names become parameters in every target's generated
    source, so each target lists its own (Backend.reserved) and the checker refuses the union."""
    from ropegen import backends   # the registry imports the plan stage; import it when first used
    return backends.reserved_words()


class _Bad(Exception):
    """Internal: a value could not be read; the diagnostic is already recorded."""


def check(spec: A.SpecNode) -> ir.Spec:
    """Check every operator; raise SpecError listing all problems, else return the IR."""
    c = Collector(spec.file)
    ops: list[ir.Operator] = []
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
        if node.kind not in KINDS:
            c.error("C001", f"unknown operator kind '{node.kind}'", node.kind_loc,
                    did_you_mean(node.kind, KINDS))
            continue
        op = _OperatorChecker(c, node).run()
        if op is not None:
            ops.append(op)
    c.raise_if_any(spec.source)
    digest = hashlib.sha256(spec.source.encode("utf-8")).hexdigest()
    return ir.Spec(spec.file, digest, tuple(ops), c.sorted_warnings())


class _OperatorChecker(AngleChecks):
    def __init__(self, c: Collector, node: A.OperatorNode):
        self.c = c
        self.node = node
        self.tensors: dict[str, ir.Tensor] = {}
        self.broken: set[str] = set()   # inputs whose declaration already has an error
        self.used: set[str] = set()
        self.settings: dict[str, A.SettingNode] = {}
        self.axis_locs: dict[str, tuple[Loc, ...]] = {}   # where each input's axes are written

    # -- helpers -------------------------------------------------------------------------
    def err(self, code: str, msg: str, loc: Loc, hint: str | None = None) -> None:
        self.c.error(code, msg, loc, hint)

    def warn(self, code: str, msg: str, loc: Loc, hint: str | None = None) -> None:
        self.c.warn(code, msg, loc, hint)

    def axis_loc(self, tensor: str, axis: int) -> Loc:
        return self.axis_locs[tensor][axis]

    def fail(self, code: str, msg: str, loc: Loc, hint: str | None = None):
        self.err(code, msg, loc, hint)
        raise _Bad

    def guarded(self, fn: Callable, *args):
        try:
            return fn(*args)
        except _Bad:
            return None

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

    def collect_inputs(self) -> None:
        for o in self.node.outputs:
            self.check_name(o.name, o.loc)
        for inp in self.node.inputs:
            self.check_name(inp.name, inp.loc)
            if inp.name in self.tensors:
                self.err("C003", f"'{inp.name}' is declared twice", inp.loc)
                continue
            t = self.guarded(self.tensor_type, inp)
            if t is not None:
                self.tensors[inp.name] = t
            else:
                self.broken.add(inp.name)

    def check_name(self, name: str, loc: Loc) -> None:
        too_long = name_too_long(name)
        if too_long:
            self.err("C037", too_long, loc, "tensor names become identifiers in generated code: shorten it")
        elif name in reserved_words() or name.startswith("_"):
            self.err("C036", f"'{name}' cannot name a tensor: it is reserved in a generated language", loc,
                     f"rename it, e.g. '{name.lstrip('_')}_t'")

    def tensor_type(self, inp: A.InputNode) -> ir.Tensor:
        ty = inp.type
        if ty.dtype not in DTYPES:
            self.fail("C004", f"unknown dtype '{ty.dtype}'", ty.dtype_loc, did_you_mean(ty.dtype, DTYPES))
        axes = []
        roles_seen: set[ir.Role] = set()
        elements = 1   # product of the fixed extents so far
        for ax in ty.axes:
            parts = []
            for d in ax.parts:
                role = None
                if d.label is not None:
                    if d.label not in ROLE_NAMES:
                        self.fail("C005", f"unknown dimension label '{d.label}'", d.label_loc or d.loc,
                                  did_you_mean(d.label, ROLE_NAMES))
                    role = ir.Role(d.label)
                    if role in roles_seen:
                        self.fail("C033", f"'{d.label}' labels two dimensions of '{inp.name}'",
                                  d.label_loc or d.loc)
                    roles_seen.add(role)
                if isinstance(d.size, int):
                    elements = self.fixed_extent(inp.name, d, role, elements)
                if len(ax.parts) > 1 and not isinstance(d.size, int) and role not in (ir.Role.BATCH, ir.Role.SEQ, ir.Role.TOKENS):
                    self.fail("C027", "inside a merged axis '( ... )' every size but a token dim must be an integer",
                              d.loc)
                parts.append(ir.Dim(d.size, role))
            if len(ax.parts) > 1 and sum(not isinstance(p.size, int) for p in parts) > 0:
                self.fail("C027", "a merged axis '( ... )' needs integer sizes", ax.loc)
            axes.append(ir.Axis(tuple(parts)))
        self.axis_locs[inp.name] = tuple(ax.loc for ax in ty.axes)
        return ir.Tensor(inp.name, DTYPES[ty.dtype], tuple(axes), inp.loc)

    def fixed_extent(self, tensor: str, d: A.DimNode, role: ir.Role | None, elements: int) -> int:
        """Bound one fixed extent; returns the tensor's fixed element count including it."""
        if d.size == 0:
            self.fail("C029", "a dimension must have a positive size", d.loc)
        if role is ir.Role.HEAD_DIM and d.size > MAX_HEAD_DIM:
            self.fail("C029", f"head_dim {d.size} is above the limit {MAX_HEAD_DIM}", d.loc)
        elements *= d.size
        if elements > MAX_FIXED_ELEMENTS:
            self.fail("C029", f"the fixed dimensions of '{tensor}' hold more than "
                      f"2^{MAX_FIXED_ELEMENTS.bit_length() - 1} elements", d.loc,
                      "generated code counts elements in 64 bits; no machine holds this many")
        return elements

    def setting(self, key: str) -> A.SettingNode | None:
        return self.settings.get(key)

    def ref(self, v: A.Value, what: str) -> ir.Tensor:
        """A value that must name a declared input."""
        if not isinstance(v, A.Word):
            self.fail("C008", f"{what} must name an input", v.loc)
        if v.name in self.broken:
            raise _Bad   # reported at its declaration
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

    def require(self, key: str) -> A.SettingNode:
        s = self.setting(key)
        if s is None:
            self.fail("C007", f"{self.node.kind} '{self.node.name}' needs the setting '{key}'",
                      self.node.name_loc)
        return s

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

    # -- operators -----------------------------------------------------------------------
    def run(self) -> ir.Operator | None:
        self.collect_inputs()
        if self.node.kind == "rope":
            self.collect_settings(ROPE_KEYS)
            op = self.guarded(self.rope)
        else:
            self.collect_settings(RMS_KEYS)
            op = self.guarded(self.rmsnorm)
        if op is not None:
            self.unused_inputs()
            self.generated_name_clashes()
        return op

    def outputs_rope(self) -> tuple[ir.RopeOutput, ...]:
        outs = []
        names: set[str] = set()
        for o in self.node.outputs:
            if o.name in names or o.name in self.tensors:
                self.fail("C003", f"'{o.name}' is declared twice", o.loc)
            names.add(o.name)
            v = o.value
            if not (isinstance(v, A.Call) and v.name in ("rotate", "copy") and len(v.args) == 1
                    and v.args[0].name is None):
                self.fail("C025", f"output '{o.name}' must be `rotate(INPUT)` or `copy(INPUT)`",
                          (v.loc if v is not None else o.loc),
                          f"e.g. `out {o.name} = rotate(x)`")
            src = self.ref(v.args[0].value, "the rotated tensor")
            outs.append(ir.RopeOutput(o.name, src.name, v.name == "rotate"))
        if not outs:
            self.fail("C025", f"rope '{self.node.name}' declares no output", self.node.name_loc,
                      "add e.g. `out y = rotate(x)`")
        return tuple(outs)

    def rope(self) -> ir.RopeOp:
        outputs = self.outputs_rope()
        rotated = [self.tensors[o.source] for o in outputs]
        first = rotated[0]
        for t in rotated:
            self.check_rotated(t)
        for t in rotated[1:]:
            if t.dtype != first.dtype:
                self.fail("C031", f"'{t.name}' is {t.dtype.name} but '{first.name}' is {first.dtype.name}",
                          t.loc, "rotated tensors share one storage type")
            if [d.size for d in t.token_dims] != [d.size for d in first.token_dims] or \
                    [d.role for d in t.token_dims] != [d.role for d in first.token_dims]:
                self.fail("C015", f"'{t.name}' has other token dimensions than '{first.name}'", t.loc,
                          "rotated tensors must agree on batch/seq/tokens")
            if t.role_dim(ir.Role.HEAD_DIM).size != first.role_dim(ir.Role.HEAD_DIM).size:
                self.fail("C028", f"'{t.name}' has another head_dim than '{first.name}'", t.loc)
        head_dim = first.role_dim(ir.Role.HEAD_DIM).size
        assert isinstance(head_dim, int)

        pairing = self.pairing()
        rotary_dim = self.rotary_dim(head_dim, pairing)
        sequences = self.sequences(first)
        positions = self.positions(first, sequences)
        angles = self.angles(first, pairing, rotary_dim, positions, head_dim)
        direction = ir.Direction(self.choice("direction", ("forward", "backward"), "forward"))
        compute = ir.Compute(self.choice("compute", ("f32", "f64", "storage"), "f32"))
        numerics = ir.AngleNumerics(self.choice("angle_numerics", ("exact", "ggml"), "exact"))
        trig = ir.Trig(self.choice("trig", ("accurate", "fast"), "accurate"))
        if numerics is ir.AngleNumerics.GGML and not isinstance(angles, ir.ComputedAngles):
            self.fail("C030", "angle_numerics = ggml needs computed angles", self.settings["angle_numerics"].loc,
                      "with `angles = table(...)` the angles come from the tables")
        if numerics is ir.AngleNumerics.GGML and isinstance(angles, ir.ComputedAngles) and \
                isinstance(angles.scaling, (ir.LinearScaling, ir.Llama3Scaling)):
            self.fail("C030", "angle_numerics = ggml takes scaling none or ggml_yarn(...)",
                      self.settings["angle_numerics"].loc,
                      "ggml expresses linear scaling as ggml_yarn(freq_scale = 1/factor, ...)")
        if (pairing.kind is ir.PairKind.GLM2D) != (positions.kind is ir.PositionKind.GLM2D):
            where = self.settings["positions"].loc if "positions" in self.settings else self.settings["pairing"].loc
            self.fail("C030", "glm2d pairing and glm2d positions go together: the two halves rotate with the "
                      "two position streams", where,
                      "use `pairing = glm2d(...)` with `positions = glm2d(...)`")
        if pairing.kind is ir.PairKind.BLOCK and isinstance(angles, ir.ComputedAngles):
            self.fail("C030", "block pairing reads cos/sin per element and needs `angles = table(...)`",
                      self.settings["pairing"].loc)
        return ir.RopeOp(self.node.name, tuple(self.tensors.values()), outputs, pairing, rotary_dim,
                         positions, angles, sequences, direction, compute, numerics, trig, self.node.loc)

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        s = self.setting(key)
        return default if s is None else self.word(s.value, key, choices)

    def check_rotated(self, t: ir.Tensor) -> None:
        if not t.dtype.is_float:
            self.fail("C031", f"'{t.name}' must have a float dtype to be rotated", t.loc)
        for role in (ir.Role.HEADS, ir.Role.HEAD_DIM):
            d = t.role_dim(role)
            if d is None:
                self.fail("C013", f"'{t.name}' needs a dimension labelled '{role.value}'", t.loc,
                          "label its axes, e.g. [tokens=T, heads=32, head_dim=128]")
            if not isinstance(d.size, int):
                self.fail("C027", f"'{role.value}' of '{t.name}' must be an integer, not '{d.size}'", t.loc)
        roles = {d.role for d in t.token_dims}
        if not roles:
            self.fail("C013", f"'{t.name}' needs token dimensions: 'tokens', or 'batch' and 'seq'", t.loc)
        if ir.Role.TOKENS in roles and roles != {ir.Role.TOKENS}:
            self.fail("C013", f"'{t.name}' mixes 'tokens' with 'batch'/'seq'", t.loc,
                      "use tokens for packed layouts, batch and seq otherwise")
        if roles == {ir.Role.BATCH}:
            self.fail("C013", f"'{t.name}' has 'batch' but no 'seq' dimension", t.loc)
        if roles == {ir.Role.SEQ}:
            self.fail("C013", f"'{t.name}' has 'seq' but no 'batch' dimension", t.loc,
                      "label a single token axis 'tokens'")
        unlabelled = [d for d in t.dims if d.role is None]
        if unlabelled:
            self.fail("C013", f"every dimension of rotated '{t.name}' needs a label", t.loc,
                      "labels: " + ", ".join(ROLE_NAMES))
        merged = [a for a in t.axes if len(a.parts) > 1]
        for a in merged:
            if [p.role for p in a.parts] != [ir.Role.HEADS, ir.Role.HEAD_DIM]:
                self.fail("C013", f"'{t.name}': only (heads=H, head_dim=D) may be merged into one axis", t.loc)
        if t.dims[-1].role is not ir.Role.HEAD_DIM:
            self.fail("C013", f"'{t.name}': head_dim must be the innermost (last) dimension", t.loc)

    def pairing(self) -> ir.Pairing:
        s = self.require("pairing")
        v = s.value
        if isinstance(v, A.Word) and v.name == "block":
            self.fail("C011", "'block' needs the argument 'coeff'", v.loc, "e.g. block(coeff = 4)")
        if isinstance(v, A.Word) and v.name == "glm2d":
            return ir.Pairing(ir.PairKind.GLM2D, inner=ir.PairKind.GPTJ)
        if isinstance(v, A.Word):
            name = self.word(v, "pairing", ("neox", "gptj", "block", "glm2d"))
            return ir.Pairing(ir.PairKind(name))
        if isinstance(v, A.Call) and v.name in ("neox", "gptj"):
            self.fail("C008", f"'{v.name}' takes no arguments here", v.loc, f"write `pairing = {v.name}`")
        if isinstance(v, A.Call) and v.name == "block":
            args = self.call_args(v, ("coeff",), ("coeff",), ("coeff",))
            coeff = self.number(args["coeff"], "coeff", integer=True, positive=True)
            return ir.Pairing(ir.PairKind.BLOCK, coeff=int(coeff))
        if isinstance(v, A.Call) and v.name == "glm2d":
            args = self.call_args(v, ("inner",), (), ("inner",))
            inner = ir.PairKind(self.word(args["inner"], "inner pairing", ("neox", "gptj"))) \
                if "inner" in args else ir.PairKind.GPTJ
            return ir.Pairing(ir.PairKind.GLM2D, inner=inner)
        if not isinstance(v, (A.Call, A.Word)):
            self.fail("C008", "pairing must be a word or a call such as block(coeff = 4)", v.loc,
                      "neox, gptj, block(coeff=N), glm2d(inner=gptj)")
        name = v.name
        self.fail("C009", f"unknown pairing '{name}'", v.loc,
                  did_you_mean(name, PAIR_WORDS) or "neox, gptj, block(coeff=N), glm2d(inner=gptj)")

    def rotary_dim(self, head_dim: int, pairing: ir.Pairing) -> int:
        s = self.setting("rotary_dim")
        if head_dim % 2:
            self.fail("C014", f"head_dim {head_dim} is odd; rotation needs pairs", self.node.name_loc)
        if s is None:
            return head_dim
        r = int(self.number(s.value, "rotary_dim", integer=True, positive=True))
        step = 4 if pairing.kind is ir.PairKind.GLM2D else 2
        if r % step or r > head_dim:
            self.fail("C014", f"rotary_dim {r} must be a multiple of {step} and at most head_dim {head_dim}",
                      s.value.loc)
        if pairing.kind is ir.PairKind.BLOCK and r != head_dim:
            self.fail("C030", "block pairing rotates whole heads; drop rotary_dim", s.loc,
                      "partial rotation with ATB tables is done by splitting the tensor")
        return r

    def sequences(self, first: ir.Tensor) -> str | None:
        s = self.setting("sequences")
        if s is None:
            return None
        t = self.ref(s.value, "sequences")
        if t.dtype.is_float or len(t.axes) != 1:
            self.fail("C032", f"sequences '{t.name}' must be a 1-D integer tensor [batch]", t.loc)
        if [d.role for d in first.token_dims] != [ir.Role.TOKENS]:
            self.fail("C032", "sequences = ... describes packed tokens; the rotated tensors need a 'tokens' dim",
                      s.loc)
        return t.name

    def scalar(self, v: A.Value, what: str) -> ir.Scalar:
        if isinstance(v, A.Number):
            return int(self.number(v, what, integer=True))
        t = self.ref(v, what)
        if t.dtype.is_float or len(t.axes) != 0:
            self.fail("C016", f"{what} '{t.name}' must be a rank-0 integer tensor, e.g. i64[]", t.loc)
        return t.name

    def batch_vector(self, v: A.Value, first: ir.Tensor, what: str) -> str:
        t = self.ref(v, what)
        b = first.role_dim(ir.Role.BATCH)
        if b is None:
            self.fail("C016", f"{what} needs rotated tensors with a 'batch' dimension", v.loc)
        if t.dtype.is_float or len(t.axes) != 1 or t.axes[0].size != b.size:
            self.fail("C016", f"{what} '{t.name}' must be an integer tensor [{b.size}]", t.loc)
        return t.name

    def positions(self, first: ir.Tensor, sequences: str | None) -> ir.Positions:
        s = self.setting("positions")
        if s is None:
            return ir.Positions(ir.PositionKind.TOKEN)
        v = s.value
        if isinstance(v, A.Call) and v.name == "in_sequence" and v.args:
            a = v.args[0]
            what = f"'{a.name}'" if a.name else "a positional argument"
            self.fail("C010", f"in_sequence takes no arguments, not {what}", a.loc,
                      "write `positions = in_sequence` with `sequences = SEQLEN`; positions from an offset "
                      "are arange(start = ...)")
        if isinstance(v, (A.Word, A.Call)) and v.name == "in_sequence":
            if sequences is None:
                self.fail("C030", "positions = in_sequence needs `sequences = SEQLEN`", v.loc)
            return ir.Positions(ir.PositionKind.IN_SEQUENCE)
        if isinstance(v, A.Word):
            t = self.ref(v, "positions")
            if t.dtype.name not in ("i32", "i64"):
                self.fail("C017", f"positions '{t.name}' must be i32 or i64, not {t.dtype.name}", t.loc)
            want = [d.size for d in first.token_dims]
            got = [a.size for a in t.axes]
            if got != want:
                self.fail("C016", f"positions '{t.name}' has shape [{', '.join(map(str, got))}]; "
                          f"expected the token dims [{', '.join(map(str, want))}]", t.loc)
            return ir.Positions(ir.PositionKind.IDS, ids=t.name)
        if isinstance(v, A.Call) and v.name in ("arange", "glm2d"):
            if [d.role for d in first.token_dims] != [ir.Role.BATCH, ir.Role.SEQ] and v.name == "glm2d":
                self.fail("C016", "glm2d positions need rotated tensors laid out [batch, seq, ...]", v.loc)
            allowed = ("start", "pad") + (("first_seqlen",) if v.name == "glm2d" else ())
            required = ("first_seqlen",) if v.name == "glm2d" else ()
            args = self.call_args(v, allowed, required)
            start = self.scalar(args["start"], "start") if "start" in args else 0
            pad = self.batch_vector(args["pad"], first, "pad") if "pad" in args else None
            if v.name == "arange":
                if pad is not None and first.role_dim(ir.Role.SEQ) is None:
                    self.fail("C016", "arange(pad=...) needs [batch, seq] token dims", v.loc)
                return ir.Positions(ir.PositionKind.ARANGE, start=start, pad=pad)
            first_seqlen = self.scalar(args["first_seqlen"], "first_seqlen")
            return ir.Positions(ir.PositionKind.GLM2D, start=start, pad=pad, first_seqlen=first_seqlen)
        if not isinstance(v, (A.Word, A.Call)):
            self.fail("C008", "positions must name an integer input or be a form such as arange(...)", v.loc,
                      "an integer input, in_sequence, arange(start=, pad=), glm2d(start=, pad=, first_seqlen=)")
        name = v.name
        self.fail("C009", f"unknown positions form '{name}'", v.loc,
                  did_you_mean(name, ("in_sequence", "arange", "glm2d")) or
                  "an integer input, in_sequence, arange(start=, pad=), glm2d(start=, pad=, first_seqlen=)")

    def rmsnorm(self) -> ir.RmsNormOp:
        if self.broken:
            raise _Bad   # reported at the declaration
        if len(self.node.inputs) != 2 or len(self.tensors) != 2:
            self.fail("C034", "rmsnorm takes exactly two inputs: x, then scale", self.node.name_loc)
        x, scale = self.tensors.values()
        self.used.update((x.name, scale.name))
        if len(self.node.outputs) != 1 or self.node.outputs[0].value is not None:
            loc = self.node.outputs[1].loc if len(self.node.outputs) > 1 else \
                (self.node.outputs[0].value.loc if self.node.outputs else self.node.name_loc)
            self.fail("C025", "rmsnorm has exactly one output, declared as `out NAME`", loc)
        out = self.node.outputs[0].name
        if out in self.tensors:
            self.fail("C003", f"'{out}' is declared twice", self.node.outputs[0].loc)
        for t in (x, scale):
            if t.dtype.name not in FLOAT_NAMES:
                self.fail("C023", f"'{t.name}' must be a float type", t.loc)
            if any(len(a.parts) > 1 or a.parts[0].role is not None for a in t.axes):
                self.fail("C023", "rmsnorm tensors take plain dimensions, not labels", t.loc)
        rank = len(x.axes)
        if rank == 0:
            self.fail("C021", f"'{x.name}' needs at least one dimension", x.loc)
        s = self.setting("axis")
        axis = -1 if s is None else int(self.number(s.value, "axis", integer=True))
        if not -rank <= axis < rank:
            self.fail("C021", f"axis {axis} is out of range for rank {rank}", s.value.loc,
                      f"use {-rank}..{rank - 1}")
        axis %= rank
        normalized = [a.size for a in x.axes[axis:]]
        sshape = [a.size for a in scale.axes]
        if len(sshape) > len(normalized) or any(
                sd != 1 and sd != nd for sd, nd in zip(sshape[::-1], normalized[::-1])):
            self.fail("C022", f"scale shape [{', '.join(map(str, sshape))}] does not broadcast to the "
                      f"normalized shape [{', '.join(map(str, normalized))}]", scale.loc)
        for nd in normalized:
            if not isinstance(nd, int):
                self.fail("C027", f"normalized dimension '{nd}' must be an integer", x.loc)
        e = self.setting("epsilon")
        eps = 1e-5 if e is None else self.number(e.value, "epsilon", nonneg=True)
        st = self.setting("stash")
        stash = DTYPES["f32"]
        if st is not None:
            name = self.word(st.value, "stash", ("f32", "f64"))
            stash = DTYPES[name]
        return ir.RmsNormOp(self.node.name, (x, scale), out, axis, eps, stash, self.node.loc)
