"""The `ropegen` command line: compile, check, explain, import-onnx, import-hf, import-gguf, bench."""
from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

from ropegen import __version__
from ropegen.extras import install_hint, missing_module
from ropegen.progress import Progress
from ropegen.spec.diagnostics import SpecError, SpecWarning

EXIT_OK, EXIT_MISMATCH, EXIT_USER = 0, 1, 2


class UserError(Exception):
    """A problem with what the user asked for: printed without a traceback, exit 2."""


def _load(path: str):
    from ropegen.api import compile as compile_spec
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{path}: no such spec file")
    with warnings.catch_warnings():   # printed below, with the other diagnostics' layout
        warnings.simplefilter("ignore", SpecWarning)
        program = compile_spec(p)
    for w in program.spec.warnings:   # stderr, so that compile's list of written paths stays clean
        print(w.render(program.source), file=sys.stderr)
    return program


# ---------------------------------------------------------------------------------------------
# a missing optional dependency: one line naming the extra that brings it (from the installed metadata)

def _reason(why: str) -> str:
    """Why a backend cannot run here; when its package is missing, the extra that brings it instead."""
    m = re.search(r"No module named '(\w+)", why)
    return install_hint(m.group(1)) if m and m.group(1) != "ropegen" else why


def _cannot_run(backend: str, why: str) -> UserError:
    return UserError(f"backend '{backend}' cannot run here: {_reason(why)}")


@contextmanager
def _importing():
    """An importer's ValueError is the user's problem; a package it lacks is the extra to install."""
    try:
        yield
    except (ImportError, ValueError) as exc:
        module = missing_module(exc)
        if module:
            raise UserError(install_hint(module)) from None
        if isinstance(exc, ValueError):
            raise UserError(str(exc)) from None
        raise


def cmd_compile(args) -> int:
    from ropegen.generate import resolve_targets, write_program
    try:
        targets = resolve_targets(args.target)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    written: list[Path] = []
    try:   # the paths are printed once the progress display is gone: a live bar and stdout share a terminal
        with Progress(quiet=args.quiet) as progress, progress.phase("compiling", total=len(args.spec)) as phase:
            for spec in args.spec:
                phase.step(f"compiling {spec}")
                written += write_program(_load(spec), Path(args.output) / Path(spec).stem, targets)
    finally:
        for path in written:
            print(path)
    return EXIT_OK


def cmd_check(args) -> int:
    from ropegen.crosscheck import BackendUnavailable, Report, check_operator, prebuild, select_backends
    from ropegen.runtime.memory import memory_limit
    try:
        limit = memory_limit()
        wanted, skipped = select_backends(args.backend)
    except BackendUnavailable as exc:
        raise _cannot_run(exc.backend, exc.why) from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    programs = [(spec, _load(spec)) for spec in args.spec]   # every spec error before any run
    report = Report(wanted, {b: _reason(why) for b, why in skipped.items()}, [], seed=args.seed, limit=limit)
    ops = [(spec, op) for spec, program in programs for op in program]
    with Progress(quiet=args.quiet) as progress:
        if wanted:   # every kernel built up front, one compiler per core, then found in the cache
            with progress.phase(f"building the kernels of {len(ops)} operator(s)"):
                prebuild([op for _, op in ops], wanted)
        with progress.phase("checking", total=len(ops) * len(wanted)) as phase:
            for spec, op in ops:
                rows = check_operator(op, wanted, seed=args.seed, limit=limit,
                                      on_backend=lambda b: phase.step(f"checking {spec}: {op.name} ({b})")
                                      ) if wanted else []
                report.checked.append((spec, op, rows))
    code = report.exit_code()
    print(json.dumps(report.document(code), indent=2, allow_nan=False) if args.json else report.text())
    for line in report.errors():
        print(f"ropegen: error: {line}", file=sys.stderr)
    return code


def cmd_explain(args) -> int:
    from ropegen.ops.explain import SCHEMA_VERSION, explain, facts
    specs = []
    for spec in args.spec:
        program = _load(spec)
        if args.json:
            specs.append({"spec": spec, "sha256": program.spec.sha256,
                          "operators": [facts(op.plan, args.length or ()) for op in program]})
            continue
        print(f"# {spec} (sha256 {program.spec.sha256[:16]}...)")
        for op in program:
            print(explain(op.plan, args.length or ()))
            print()
    if args.json:
        print(json.dumps({"schema_version": SCHEMA_VERSION, "command": "explain", "ropegen_version": __version__,
                          "lengths": list(args.length or ()), "specs": specs}, indent=2, allow_nan=False))
    return EXIT_OK


def cmd_import_onnx(args) -> int:
    from ropegen.importers.onnx import import_model
    if not Path(args.model).is_file():
        raise UserError(f"{args.model}: no such model file")
    fix: dict[str, int] = {}
    for name, size in args.fix or ():
        if fix.setdefault(name, size) != size:
            raise UserError(f"--fix {name} is given twice, as {fix[name]} and {size}")
    with _importing():
        paths = import_model(args.model, args.output, fix=fix, report=lambda line: print(line, file=sys.stderr))
    for path in paths:
        print(path)
    return EXIT_OK


def cmd_import_gguf(args) -> int:
    from ropegen.importers.gguf import import_gguf
    if not Path(args.model).is_file():
        raise UserError(f"{args.model}: no such model file")
    with _importing():
        return _written(*import_gguf(args.model, args.output))


def cmd_import_hf(args) -> int:
    from ropegen.importers.hf import import_config
    if not Path(args.config).is_file():
        raise UserError(f"{args.config}: no such config file")
    with _importing():
        return _written(*import_config(args.config, args.output))


def _written(path: Path, warnings: list[str]) -> int:
    """An importer's spec: its warnings on stderr, its path on stdout."""
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(path)
    return EXIT_OK


def cmd_bench(args) -> int:
    from ropegen.bench.targets import user_errors
    try:
        return _bench(args)
    except user_errors() as exc:   # ValueError and the targets' own (a C compiler that is missing, ...)
        raise UserError(str(exc)) from None


def _bench(args) -> int:
    from ropegen import backends
    from ropegen.bench.harness import measure
    from ropegen.bench.suites import SUITES
    why = backends.get(args.backend).unavailable() if args.backend else None
    if why:
        raise _cannot_run(args.backend, why)
    programs = [_load(s) for s in args.spec]
    ops = [op for p in programs for op in p]
    if args.suite:
        ops += SUITES[args.suite]()
    if not ops:
        raise UserError("nothing to measure: give SPEC files or --suite llama3")
    with Progress(quiet=args.quiet) as progress, progress.phase(f"measuring {len(ops)} operator(s) on {args.backend}"):
        results, table = measure(ops, backend=args.backend, threads=args.threads, shapes=args.shape,
                                 repeats=args.repeats)
    print(table)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        from ropegen.bench.targets import hooks
        h = hooks(args.backend)    # a target may write its own document: the device's facts, the command, the rows
        doc = (h.json_document(results, shlex.join(["ropegen", *args.argv])) if hasattr(h, "json_document")
               else results)
        Path(args.json).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if args.plot:
        from ropegen.bench.plot import MissingPlotter, plot
        try:
            Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
            n = plot(results, args.plot)
        except (MissingPlotter, ValueError, OSError) as exc:
            raise UserError(str(exc)) from None
        print(f"plotted {n} panel(s) into {args.plot}", file=sys.stderr)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# option types: a bad value is an argparse error (usage, message, exit 2), never a traceback

MAX_SEED, MAX_THREADS, MAX_REPEATS = 2 ** 63 - 1, 1024, 1_000_000


def _int_option(lo: int, hi: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer {what}, got '{text}'") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is out of range: {what} is {lo}..{hi}")
        return value
    parse.__name__ = what   # argparse names the type in some messages
    return parse


def _fix_option(text: str) -> tuple[str, int]:
    """NAME=N: a symbolic dim and a size of at least 1."""
    name, eq, size = text.partition("=")
    if not eq or not name.strip() or not size.strip().isdigit() or int(size) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=N with N >= 1, got '{text}'")
    return name.strip(), int(size)


def _shape_option(text: str) -> str:
    """NAME=VALUE items (bench.shape_items); which names apply is checked against the bench later."""
    from ropegen.bench.shapes import shape_items
    try:
        shape_items(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _alternatives(words: tuple[str, ...]) -> str:
    """'a (default), b or c' for choices whose first is the default."""
    if not words:
        return "none is built"
    rest = words[1:]
    tail = f"{', '.join(rest[:-1])} or {rest[-1]}" if len(rest) > 1 else "".join(rest)
    return f"{words[0]} (default)" + (f", {tail}" if tail else "")


def build_parser() -> argparse.ArgumentParser:
    from ropegen.bench import targets
    from ropegen.bench.suites import SUITES
    bench_targets = targets.names()     # the registry's targets, the default first
    ap = argparse.ArgumentParser(prog="ropegen", description="Compile .rope specs into RoPE and RMSNorm kernels "
                                 "for NumPy, C and CUDA, and check every backend against a float64 reference.")
    ap.add_argument("--version", action="version", version=f"ropegen {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    quiet = argparse.ArgumentParser(add_help=False)   # the commands that show progress on stderr
    quiet.add_argument("-q", "--quiet", action="store_true", help="no progress display on stderr")

    p = sub.add_parser("compile", parents=[quiet], help="write the generated sources of SPEC files",
                       description="Write DIR/<spec stem>/<target>/<operator files> for each SPEC.")
    p.add_argument("spec", nargs="+", metavar="SPEC")
    p.add_argument("-o", "--output", default="generated", metavar="DIR", help="output folder (default: generated)")
    p.add_argument("--target", default=None, help="comma list of targets (default: every built target)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("check", parents=[quiet], help="run every backend against the float64 reference",
                       description="Run each operator of each SPEC on random inputs (several shapes, odd sizes, "
                                   "strided views) on every available backend and compare with the float64 "
                                   "reference. Backends that cannot run here are listed with the reason. Exit 1 "
                                   "on any mismatch; exit 2 when a backend named by --backend cannot run, when "
                                   "nothing ran, or when a case's arrays would need more than $ROPEGEN_MEMORY_LIMIT "
                                   "(default: half the available memory).")
    p.add_argument("spec", nargs="+", metavar="SPEC")
    p.add_argument("--backend", default=None, help="comma list of backends (default: all available)")
    p.add_argument("--seed", type=_int_option(0, MAX_SEED, "seed"), default=0,
                   help=f"seed of the random inputs, 0..{MAX_SEED} (default: 0)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table "
                   "(schema: docs/json.md)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("explain", help="print the resolved plan: pair map, frequencies, constants, dtypes")
    p.add_argument("spec", nargs="+", metavar="SPEC")
    p.add_argument("--length", type=_int_option(0, 2 ** 62, "length"), action="append", metavar="N",
                   help="also show what longrope / dynamic_ntk frequencies apply to a call of this length "
                        "(max position + 1); may be repeated")
    p.add_argument("--json", action="store_true", help="print the plans as one JSON document (schema: docs/json.md)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("import-onnx", help="write a .rope spec for each RotaryEmbedding / RMSNormalization node",
                       description="Read an ONNX model (opset 23) and write one .rope spec per RotaryEmbedding or "
                                   "RMSNormalization node, shapes and dtypes from the model's value info.")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.add_argument("--fix", action="append", type=_fix_option, metavar="NAME=N",
                   help="pin the model's symbolic dim NAME to size N first (repeatable)")
    p.set_defaults(func=cmd_import_onnx)

    p = sub.add_parser("import-gguf", help="write the .rope spec of a llama.cpp GGUF model's RoPE and RMSNorm",
                       description="Read a GGUF file's metadata (and its rope factor tensors) and write one spec "
                                   "like import-hf's, plus the factor tensors as .npy files.")
    p.add_argument("model", metavar="MODEL.gguf")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.set_defaults(func=cmd_import_gguf)

    p = sub.add_parser("import-hf", help="write the .rope spec of a transformers model's RoPE and RMSNorm",
                       description="Read a transformers config.json (rope_scaling or rope_parameters, rope_theta, "
                                   "head_dim, partial_rotary_factor, num_key_value_heads, rms_norm_eps) and write "
                                   "one spec: operator `rope` (q, k, positions -> q_rot, k_rot) and `rmsnorm`.")
    p.add_argument("config", metavar="CONFIG.json")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.set_defaults(func=cmd_import_hf)

    p = sub.add_parser("bench", parents=[quiet], help="measure time, bytes moved, GB/s and the ratio to a copy of the same bytes")
    p.add_argument("spec", nargs="*", metavar="SPEC")
    p.add_argument("--suite", choices=tuple(SUITES), default=None,
                   help="add a built-in set: llama3 = Llama-3-8B RoPE (f32, bf16; cache and computed) "
                        "and RMSNorm [4096, 4096]; fusion = Qwen3 q/k RMSNorm + RoPE fused, beside the "
                        "unfused RMSNorm and RoPE operators it replaces")
    p.add_argument("--backend", default=(bench_targets or (None,))[0], choices=bench_targets,
                   help=_alternatives(bench_targets))
    p.add_argument("--threads", type=_int_option(1, MAX_THREADS, "threads"), default=None,
                   help=f"threads for the C backend, 1..{MAX_THREADS} (default: all cores)")
    p.add_argument("--shape", action="append", default=None, type=_shape_option,
                   help="symbol sizes, e.g. T=4096 (repeatable; default: the issue's Llama-3 shapes)")
    p.add_argument("--repeats", type=_int_option(1, MAX_REPEATS, "repeats"), default=20,
                   help=f"timed repeats per measurement, 1..{MAX_REPEATS} (default: 20)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw GB/s against T for ropegen, its peers and the copy (matplotlib: the bench extra)")
    p.set_defaults(func=cmd_bench)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)     # the command, as results files record it
    try:
        return args.func(args)
    except SpecError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_USER
    except UserError as exc:
        print(f"ropegen: error: {exc}", file=sys.stderr)
        return EXIT_USER
    except ImportError as exc:   # an optional package a command needs; any other import failure is a bug
        if not missing_module(exc):
            raise
        print(f"ropegen: error: {args.command}: {install_hint(missing_module(exc))}", file=sys.stderr)
        return EXIT_USER
    except (OSError, UnicodeDecodeError) as exc:
        print(f"ropegen: error: {exc}", file=sys.stderr)
        return EXIT_USER
    except MemoryError:   # the size checks come first; this is the last resort
        print("ropegen: error: out of memory: the sizes asked for do not fit in this machine's memory",
              file=sys.stderr)
        return EXIT_USER


if __name__ == "__main__":
    sys.exit(main())
