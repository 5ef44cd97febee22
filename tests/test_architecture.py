"""The architecture rules of issue 9, as tests: each fails naming the file and line that breaks its rule.

1. modules: a docstring each; none over 400 lines without "over 400 lines because ..." at its top
2. templates: at most 3 `{% if %}` deep as written; no arithmetic inside `{{ }}` / `{% %}`
3. operator kind: no isinstance/type tests on the op classes, no `== "rope"` outside ropegen/ops/
4. targets only through the registry: no target name as a literal, no import of a target's package
5. a new target is a Backend subclass, a template folder and a registry entry (a fake one, end to end)
6. pyproject.toml lists every package
7. ropegen/ir/dtypes.py is target-neutral: no per-target type columns

The rules read the source (Python's ast, Jinja's parser), never grep text, so that comments, docstrings
and string literals cannot hide or fake a violation.
"""
from __future__ import annotations

import ast
import dataclasses
import re
import tomllib
from pathlib import Path

import jinja2
import pytest
from jinja2 import nodes as J

from ropegen import api, backends, cli, crosscheck, generate, render
from ropegen.backends.base import Backend
from ropegen.spec.diagnostics import SpecError

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "ropegen"
TEMPLATES = ROOT / "templates"


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def modules(*globs: str) -> list[Path]:
    """Python files under ropegen/ matching the globs (relative to ropegen/), sorted, without duplicates."""
    found = {p for g in globs for p in PKG.glob(g) if p.suffix == ".py" and "__pycache__" not in p.parts}
    return sorted(found)


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def docstring_nodes(tree: ast.Module) -> set[int]:
    """ids of the Constant nodes that are docstrings (module, class, function)."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def absolute(node: ast.ImportFrom, path: Path) -> str:
    """The absolute module of a `from X import ...`, relative imports resolved against `path`'s package."""
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def report(violations: list[str], rule: str) -> str:
    return f"{rule}\n  " + "\n  ".join(violations)


# ---------------------------------------------------------------------------------------------
# 1. every module has a docstring; none over 400 lines without the reason at its top

MAX_LINES = 400
REASON = re.compile(r"over 400 lines because\b", re.IGNORECASE)


def module_violations(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    doc = ast.get_docstring(parse(path))
    out = []
    if not doc or not doc.strip():
        out.append(f"{rel(path)}:1: no module docstring (it names the module's one job)")
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        comments = [ln for ln in lines[:15] if ln.lstrip().startswith("#")]
        if not REASON.search(doc or "") and not any(REASON.search(c) for c in comments):
            out.append(f"{rel(path)}:1: {len(lines)} lines (> {MAX_LINES}) and no "
                       f"'over 400 lines because ...' in its docstring or a comment of its first 15 lines")
    return out


def test_every_module_has_a_docstring_and_stays_small():
    violations = [v for p in modules("**/*.py") for v in module_violations(p)]
    assert not violations, report(violations, "modules: a docstring each, <= 400 lines unless the reason is written")


# ---------------------------------------------------------------------------------------------
# 2. templates: `{% if %}` at most 3 deep (as written, macros included), no arithmetic

MAX_IF_DEPTH = 3
# binary arithmetic in a Jinja expression; `~` (string concatenation), `{%-`/`-%}` (whitespace control)
# and '-' inside string literals are not arithmetic and never reach the parser as these nodes
ARITH = {J.Add: "+", J.Sub: "-", J.Mul: "*", J.Div: "/", J.FloorDiv: "//", J.Mod: "%", J.Pow: "**"}
# filters and globals that compute on numbers (none is used today)
NUMERIC_FILTERS = {"sum", "round", "abs"}
NUMERIC_CALLS = {"min", "max", "sum", "abs", "round"}


def _environment() -> jinja2.Environment:
    return render.environment()   # the renderer's own delimiters and settings


def _deep_ifs(node: J.Node, depth: int, out: list[tuple[int, int]]) -> None:
    if isinstance(node, J.If):
        depth += 1
        if depth > MAX_IF_DEPTH:
            out.append((node.lineno, depth))
        for child in [node.test, *node.body, *node.else_]:
            _deep_ifs(child, depth, out)
        for branch in node.elif_:   # `{% elif %}` is the same level as its `{% if %}`
            for child in [branch.test, *branch.body, *branch.elif_, *branch.else_]:
                _deep_ifs(child, depth, out)
        return
    for child in node.iter_child_nodes():
        _deep_ifs(child, depth, out)


def template_violations(source: str, name: str) -> list[str]:
    tree = _environment().parse(source, name=name)
    lines = source.splitlines()

    def at(lineno: int) -> str:
        return f"{name}:{lineno}: `{lines[lineno - 1].strip()[:80]}`" if 0 < lineno <= len(lines) else name

    out = []
    deep: list[tuple[int, int]] = []
    _deep_ifs(tree, 0, deep)
    out += [f"{at(ln)}: `{{% if %}}` nested {d} deep (at most {MAX_IF_DEPTH})" for ln, d in deep]
    for kind, op in ARITH.items():
        out += [f"{at(n.lineno)}: arithmetic `{op}` in a template (the plan computes, templates print)"
                for n in tree.find_all(kind)]
    for n in tree.find_all((J.Neg, J.Pos)):
        if not isinstance(n.node, J.Const):
            out.append(f"{at(n.lineno)}: unary arithmetic on a value in a template")
    out += [f"{at(n.lineno)}: numeric filter `|{n.name}` in a template"
            for n in tree.find_all(J.Filter) if n.name in NUMERIC_FILTERS]
    out += [f"{at(n.lineno)}: numeric call `{n.node.name}()` in a template"
            for n in tree.find_all(J.Call) if isinstance(n.node, J.Name) and n.node.name in NUMERIC_CALLS]
    return sorted(out)


def all_templates() -> list[Path]:
    return sorted(TEMPLATES.rglob("*.j2"))


def test_templates_nest_little_and_do_no_arithmetic():
    assert all_templates(), f"no templates under {TEMPLATES}"
    violations = [v for p in all_templates()
                  for v in template_violations(p.read_text(encoding="utf-8"), rel(p))]
    assert not violations, report(violations, "templates: <= 3 `{% if %}` deep, print only (no arithmetic)")


@pytest.mark.parametrize("source, bad", [
    ("{{ a * 2 }}", True),
    ("{{ a + b }}", True),
    ("{{ a // 2 }}", True),
    ("{{ n % 4 }}", True),
    ("{{ a - 1 }}", True),
    ("{{ -a }}", True),
    ("{% set n = loop_count + 1 %}", True),
    ("{{ xs | sum }}", True),
    ("{{ max(a, b) }}", True),
    ("{% if a %}{% if b %}{% if c %}{% if d %}x{% endif %}{% endif %}{% endif %}{% endif %}", True),
    ("{%- if a -%}{%- if b -%}{%- if c -%}x{%- endif -%}{%- endif -%}{%- endif -%}", False),
    ("{% if a %}{% if b %}1{% elif c %}{% if d %}2{% endif %}{% elif e %}3{% else %}4{% endif %}{% endif %}",
     False),
    ("{{ a ~ '-' ~ b }} {{ '1 + 2 * 3 / 4 % 5' }} x[{{ i }} - {{ j }}] {{ -1 }} {{ loop_var }}", False),
    ("{% macro m(x) %}{% if x %}{% if x.y %}{% if x.z %}{% if x.w %}{% endif %}{% endif %}{% endif %}"
     "{% endif %}{% endmacro %}", True),
])
def test_template_rules_catch_what_they_should(source, bad):
    assert bool(template_violations(source, "<snippet>")) == bad, template_violations(source, "<snippet>")


# ---------------------------------------------------------------------------------------------
# 3. dispatch on operator kind only inside ropegen/ops/ (through its registry elsewhere)

OP_CLASSES = {"RopePlan", "RmsNormPlan", "RopeOp", "RmsNormOp"}


def kind_words() -> set[str]:
    from ropegen import ops
    return {"rope", "rmsnorm", *ops.words()}


def _class_names(node: ast.AST, aliases: dict[str, str]) -> set[str]:
    """Class names an isinstance() second argument names: Name, dotted attribute, tuple, `A | B`."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_class_names(e, aliases) for e in node.elts)) if node.elts else set()
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _class_names(node.left, aliases) | _class_names(node.right, aliases)
    if isinstance(node, ast.Name):
        return {aliases.get(node.id, node.id)}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def _str_constants(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_str_constants(e) for e in node.elts)) if node.elts else set()
    return set()


def kind_dispatch_violations(tree: ast.Module, where: str, words: set[str]) -> list[str]:
    aliases = {a.asname: a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               for a in n.names if a.asname}
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("isinstance", "issubclass") \
                and len(n.args) == 2:
            hit = _class_names(n.args[1], aliases) & OP_CLASSES
            if hit:
                out.append(f"{where}:{n.lineno}: {n.func.id}(..., {'|'.join(sorted(hit))}): dispatch on operator "
                           f"kind goes through ropegen.ops (ops.of(x) / a table keyed by `.kind`)")
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "register" \
                and any(_class_names(a, aliases) & OP_CLASSES for a in n.args):
            out.append(f"{where}:{n.lineno}: singledispatch on an operator class outside ropegen/ops/")
        elif isinstance(n, ast.Compare):
            operands = [n.left, *n.comparators]
            names = set().union(*(_class_names(o, aliases) for o in operands)) & OP_CLASSES
            if names and any(isinstance(o, ast.Call) and isinstance(o.func, ast.Name) and o.func.id == "type"
                             for o in operands):
                out.append(f"{where}:{n.lineno}: type(...) compared with {'|'.join(sorted(names))} outside "
                           f"ropegen/ops/")
            words_hit = set().union(*(_str_constants(o) for o in operands)) & words
            if words_hit:
                out.append(f"{where}:{n.lineno}: comparison with operator kind "
                           f"{', '.join(repr(w) for w in sorted(words_hit))} outside ropegen/ops/: look the kind "
                           f"up in ropegen.ops or in a table keyed by `.kind`")
        elif isinstance(n, ast.MatchValue) and _str_constants(n.value) & words:
            out.append(f"{where}:{n.lineno}: `case {n.value.value!r}` on operator kind outside ropegen/ops/")
    return out


def test_operator_kind_dispatch_stays_in_ops():
    """Tables keyed by the `.kind` word ({"rope": f, "rmsnorm": g}) are lookups and allowed; tests of
    type or comparisons with the word are dispatch chains and belong in ropegen/ops/ only."""
    words = kind_words()
    violations = [v for p in modules("**/*.py") if "ops" not in p.relative_to(PKG).parts[:1]
                  for v in kind_dispatch_violations(parse(p), rel(p), words)]
    assert not violations, report(violations, "operator kind: no isinstance/type/word tests outside ropegen/ops/")


@pytest.mark.parametrize("code, bad", [
    ("isinstance(p, RopePlan)", True),
    ("from ropegen.ops.plan import RopePlan as RP\nisinstance(p, (int, RP))", True),
    ("isinstance(o, ir.RmsNormOp | ir.RopeOp)", True),
    ("type(p) is RopePlan", True),
    ("p.kind == 'rope'", True),
    ("op.kind in ('rmsnorm',)", True),
    ("T = {'rope': 1, 'rmsnorm': 2}\nT[p.kind]", False),
    ("isinstance(p.angles, TableAnglesPlan)", False),
])
def test_kind_dispatch_rule_catches_what_it_should(code, bad):
    found = kind_dispatch_violations(ast.parse(code), "<snippet>", {"rope", "rmsnorm"})
    assert bool(found) == bad, found


# ---------------------------------------------------------------------------------------------
# 4. targets only through the registry

# the stages that must not know any target by name
TARGET_BLIND = ("cli.py", "crosscheck.py", "generate.py", "bench/**/*.py", "spec/**/*.py", "ir/**/*.py",
                "ops/**/*.py")


def target_modules() -> set[str]:
    """The targets' own modules/packages under ropegen/backends/ (base.py is the interface, no target)."""
    out = set()
    for p in (PKG / "backends").iterdir():
        if p.name in ("__init__.py", "base.py", "__pycache__"):
            continue
        if p.suffix == ".py" or (p / "__init__.py").is_file():
            out.add(p.stem)
    return out


def target_names() -> set[str]:
    return ({"c", "cuda", "numpy", "opencl"} | set(backends.names()) | target_modules()
            | {b.folder for b in backends.BACKENDS})


# Unavoidable literals, each with its reason (file relative to the root, the literal).
TARGET_LITERAL_EXCEPTIONS = {
    ("ropegen/bench/peers/__init__.py", "numpy"):
        "the host peers' table: 'numpy' names the NumPy peer and its module bench/peers/numpy.py",
    ("ropegen/bench/peers/numpy.py", "numpy"):
        "the NumPy peer is ropegen's own NumPy target, timed beside the measured one (op.run(backend='numpy'))",
}


def target_literal_violations(tree: ast.Module, where: str, names: set[str], exceptions=()) -> list[str]:
    docs = docstring_nodes(tree)
    return [f"{where}:{n.lineno}: target name {n.value!r} as a literal: find targets through ropegen.backends "
            f"(the registry), never by name"
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
            and n.value in names and (where, n.value) not in exceptions]


def target_import_violations(tree: ast.Module, path: Path, targets: set[str]) -> list[str]:
    where = rel(path) if path.is_absolute() else str(path)
    prefix = "ropegen.backends"

    def target_of(module: str) -> str | None:
        parts = module.split(".")
        if module.startswith(prefix + ".") and len(parts) > 2 and parts[2] in targets:
            return parts[2]
        return None

    out = []
    for n in ast.walk(tree):
        hits: list[str] = []
        if isinstance(n, ast.Import):
            hits = [a.name for a in n.names if target_of(a.name)]
        elif isinstance(n, ast.ImportFrom):
            module = absolute(n, path) if path.is_absolute() else (n.module or "")
            if target_of(module):
                hits = [module]
            elif module == prefix:
                hits = [f"{prefix}.{a.name}" for a in n.names if a.name in targets]
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and target_of(n.value):
            hits = [n.value]   # importlib.import_module("ropegen.backends.<t>...")
        out += [f"{where}:{n.lineno}: imports {h}: a target's own package; use the registry ropegen.backends"
                for h in hits]
    return out


def test_targets_are_found_only_through_the_registry():
    names, targets = target_names(), target_modules()
    violations = []
    for p in modules(*TARGET_BLIND):
        tree = parse(p)
        violations += target_literal_violations(tree, rel(p), names, TARGET_LITERAL_EXCEPTIONS)
        violations += target_import_violations(tree, p, targets)
    assert not violations, report(violations, "targets: no target name or target import in " + ", ".join(TARGET_BLIND))


def test_target_literal_exceptions_are_still_needed():
    """An exception that no longer matches anything is dropped, so the list only shrinks."""
    names = target_names()
    stale = []
    for (where, word), why in TARGET_LITERAL_EXCEPTIONS.items():
        path = ROOT / where
        if not path.is_file() or not target_literal_violations(parse(path), where, names):
            stale.append(f"{where}: {word!r} ({why})")
    assert not stale, report(stale, "remove these entries from TARGET_LITERAL_EXCEPTIONS: they match nothing now")


@pytest.mark.parametrize("code, bad", [
    ("from ropegen.backends.cuda import nvrtc", True),
    ("from ropegen.backends import c", True),
    ("import ropegen.backends.numpy", True),
    ("importlib.import_module('ropegen.backends.cuda.bench')", True),
    ("from ropegen import backends\nfrom ropegen.backends import BACKENDS, get", False),
    ("from ropegen.backends.base import Backend", False),
])
def test_target_import_rule_catches_what_it_should(code, bad):
    found = target_import_violations(ast.parse(code), Path("<snippet>"), {"c", "cuda", "numpy"})
    assert bool(found) == bad, found


def test_target_literal_rule_catches_what_it_should():
    code = '"""A docstring may say cuda."""\nif b == "cuda": pass\nx = {"numpy": 1}\ny = "cudart"\n'
    found = target_literal_violations(ast.parse(code), "<snippet>", {"cuda", "numpy"})
    assert [f.split(":")[1] for f in found] == ["2", "3"], found


# ---------------------------------------------------------------------------------------------
# 5. a new target: a Backend subclass + a template folder + a registry entry, no other edit

FAKE = "fakeisa"
FAKE_TEMPLATES = Path(__file__).resolve().parent / "fake_target" / "templates"
FAKE_RESERVED = "fakereg"

TINY_SPEC = """
rope tiny_rope {
    in q:         f32[tokens=T, heads=2, head_dim=8]
    in positions: i64[T]
    out q_rot = rotate(q)
    pairing   = neox
    positions = positions
    angles    = computed(base = 10000)
}

rmsnorm tiny_rms {
    in x:     f32[N, 8]
    in scale: f32[8]
    out y
}
"""


class FakeBackend(Backend):
    """The whole of a target: its facts, its template folder (tests/fake_target/templates/fakeisa/) and
    a loader. Its kernels run as the NumPy target's, so `ropegen check` has something to compare."""

    name = FAKE
    folder = FAKE
    comment = "//"
    reserved = frozenset({FAKE_RESERVED})

    def __init__(self, why: str | None = None):
        self.why = why

    def sources(self, plan, spec_file: str) -> dict[str, str]:
        return {f"{plan.name}.fake": self.render_file(plan, "fake", spec_file)}

    def unavailable(self) -> str | None:
        return self.why

    def load(self, plan, sources):
        host = backends.get("numpy")
        return host.load(plan, host.sources(plan, "<fakeisa>"))


def install_fake(monkeypatch, why: str | None = None) -> FakeBackend:
    """Register the fake target. Its template folder lives under tests/, not in ropegen's templates/,
    so the test adds it as a second root of the renderer's loader: a real target's folder sits beside
    the others in templates/ and needs neither this nor any edit of render.py."""
    env = render.environment()
    monkeypatch.setattr(env, "loader", jinja2.ChoiceLoader([env.loader, jinja2.FileSystemLoader(str(FAKE_TEMPLATES))]))
    fake = FakeBackend(why)
    monkeypatch.setattr(backends, "BACKENDS", (*backends.BACKENDS, fake))
    return fake


@pytest.fixture
def tiny(tmp_path) -> Path:
    spec = tmp_path / "tiny.rope"
    spec.write_text(TINY_SPEC, encoding="utf-8")
    return spec


def test_new_target_compile_writes_its_files(monkeypatch, tmp_path, tiny, capsys):
    install_fake(monkeypatch)
    assert FAKE in generate.ready_targets()
    out = tmp_path / "out"
    assert cli.main(["compile", "--target", FAKE, "-o", str(out), str(tiny)]) == cli.EXIT_OK, capsys.readouterr().err
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == [f"tiny/{FAKE}/tiny_rms.fake", f"tiny/{FAKE}/tiny_rope.fake"]
    text = (out / "tiny" / FAKE / "tiny_rope.fake").read_text(encoding="utf-8")
    assert text.startswith("// Generated by ropegen") and text.endswith("kernel tiny_rope: rope\n"), text
    assert sorted(capsys.readouterr().out.split()) == [str(out / w) for w in written]


def test_new_target_is_listed_by_check(monkeypatch, tiny, capsys):
    fake = install_fake(monkeypatch, why="no fakeisa device in this test")
    assert cli.main(["check", "--backend", FAKE, str(tiny)]) == cli.EXIT_USER
    assert f"backend '{FAKE}' cannot run here: no fakeisa device in this test" in capsys.readouterr().err
    rows = crosscheck.check_operator(api.compile(tiny)["tiny_rms"], (FAKE,))
    assert [(r.backend, r.status) for r in rows] == [(FAKE, crosscheck.SKIPPED)]

    fake.why = None   # once it can run, `ropegen check` runs it against the float64 reference
    assert cli.main(["check", "--backend", FAKE, str(tiny)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert re.search(rf"^tiny_rope\s+{FAKE}\s", out, re.M) and re.search(rf"^tiny_rms\s+{FAKE}\s", out, re.M), out


def test_new_target_reserved_words_are_refused(monkeypatch):
    spec = TINY_SPEC.split("rmsnorm")[0] + (
        f"rmsnorm tiny_rms {{\n    in {FAKE_RESERVED}: f32[N, 8]\n    in scale: f32[8]\n    out y\n}}\n")
    api.compile(spec)   # an ordinary name while no target reserves it
    install_fake(monkeypatch)
    with pytest.raises(SpecError) as exc:
        api.compile(spec)
    assert [d.code for d in exc.value.diagnostics] == ["C036"], exc.value.render()


def test_new_target_is_offered_by_the_cli(monkeypatch, capsys):
    install_fake(monkeypatch)
    with pytest.raises(SystemExit) as done:
        cli.main(["bench", "--help"])
    assert done.value.code == 0
    assert FAKE in capsys.readouterr().out
    assert cli.build_parser().parse_args(["bench", "--backend", FAKE]).backend == FAKE


def test_nothing_copies_the_registry_at_import():
    """`from ropegen.backends import BACKENDS` would freeze the tuple a module sees: a target registered
    later (a plugin, a test) would be missing from it."""
    violations = [f"{rel(p)}:{n.lineno}: imports BACKENDS by value; use `backends.BACKENDS`"
                  for p in modules("**/*.py") if p != PKG / "backends" / "__init__.py"
                  for n in ast.walk(parse(p))
                  if isinstance(n, ast.ImportFrom) and n.module == "ropegen.backends"
                  and any(a.name == "BACKENDS" for a in n.names)]
    assert not violations, report(violations, "the registry is read where it is used, never copied")


# ---------------------------------------------------------------------------------------------
# 6. pyproject.toml names every package

def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = set(config.get("package-dir", {}))   # ropegen.data: the data folders, mapped elsewhere
    found = {module_name(p) for p in PKG.rglob("__init__.py") if "__pycache__" not in p.parts}
    missing = sorted(found - listed)
    stale = sorted(listed - found - mapped)
    problems = [f"pyproject.toml: [tool.setuptools] packages lacks '{m}' (ropegen/{m[8:].replace('.', '/')}"
                f"/__init__.py exists): a wheel would ship without it" for m in missing]
    problems += [f"pyproject.toml: [tool.setuptools] packages lists '{s}', which has no __init__.py" for s in stale]
    assert not problems, report(problems, "pyproject.toml lists exactly the packages under ropegen/")


# ---------------------------------------------------------------------------------------------
# 7. dtypes: numeric facts only; each target spells types in its own facts module

LANGUAGE_WORDS = {"c", "ctype", "ctypes", "cuda", "cu", "opencl", "cl", "hip", "metal", "ptx", "cpp", "cxx",
                  "sycl", "vulkan", "glsl", "spirv", "triton"}
# interchange formats, not generated-code spellings
DTYPE_FIELD_EXCEPTIONS = {
    "numpy": "numpy's dtype name: the host arrays every stage allocates (reference, inputs, runtime); the "
             "NumPy target spells its types in backends/numpy.py",
}


def test_dtypes_are_target_neutral():
    from ropegen.ir import dtypes
    path = Path(dtypes.__file__)
    words = LANGUAGE_WORDS | target_names()
    tree = parse(path)
    lines = {n.name: n.lineno for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    violations = []
    for cls in [v for v in vars(dtypes).values() if dataclasses.is_dataclass(v) and isinstance(v, type)
                and v.__module__ == dtypes.__name__]:
        for f in dataclasses.fields(cls):
            if f.name not in DTYPE_FIELD_EXCEPTIONS and set(f.name.lower().split("_")) & words:
                violations.append(f"{rel(path)}:{lines.get(cls.__name__, 1)}: {cls.__name__}.{f.name} is a "
                                  f"target's spelling: it belongs in backends/<target>/facts.py")
    for n in tree.body:   # module-level tables per target (C_TYPES = {...})
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name) and set(t.id.lower().split("_")) & words:
                violations.append(f"{rel(path)}:{n.lineno}: {t.id} is a per-target table: it belongs in "
                                  f"backends/<target>/facts.py")
    assert not violations, report(violations, "ropegen/ir/dtypes.py holds numeric facts only")
