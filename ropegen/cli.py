"""The `ropegen` command line: compile, check, explain, import-onnx, bench."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import __version__
from .diagnostics import SpecError

EXIT_OK, EXIT_MISMATCH, EXIT_USER = 0, 1, 2


class UserError(Exception):
    """A problem with what the user asked for: printed without a traceback, exit 2."""


def _load(path: str):
    from .api import compile as compile_spec
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{path}: no such spec file")
    return compile_spec(p)


def cmd_compile(args) -> int:
    from .generate import resolve_targets, write_program
    try:
        targets = resolve_targets(args.target)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    for spec in args.spec:
        program = _load(spec)
        out = Path(args.output) / Path(spec).stem
        for path in write_program(program, out, targets):
            print(path)
    return EXIT_OK


def cmd_check(args) -> int:
    from . import backends
    from .checker import check_operator, format_table
    wanted = None
    if args.backend:
        wanted = tuple(b.strip() for b in args.backend.split(","))
        for b in wanted:
            if b not in backends.names():
                raise UserError(f"unknown backend '{b}'; backends: {', '.join(backends.names())}")
    rows = []
    for spec in args.spec:
        for op in _load(spec):
            rows += check_operator(op, wanted, seed=args.seed)
    print(format_table(rows))
    bad = [r for r in rows if not r.ok]
    ran = [r for r in rows if not r.note.startswith("skipped")]
    print(f"\n{len(ran) - len(bad)} passed, {len(bad)} failed" +
          (f", {len(rows) - len(ran)} skipped" if len(rows) > len(ran) else ""))
    return EXIT_MISMATCH if bad else EXIT_OK


def cmd_explain(args) -> int:
    from .explain import explain
    for spec in args.spec:
        program = _load(spec)
        print(f"# {spec} (sha256 {program.spec.sha256[:16]}...)")
        for op in program:
            print(explain(op.plan))
            print()
    return EXIT_OK


def cmd_import_onnx(args) -> int:
    from .onnx import import_model
    if not Path(args.model).is_file():
        raise UserError(f"{args.model}: no such model file")
    try:
        for path in import_model(args.model, args.output):
            print(path)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return EXIT_OK


def cmd_bench(args) -> int:
    try:
        return _bench(args)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _bench(args) -> int:
    programs = [_load(s) for s in args.spec]
    ops = [op for p in programs for op in p]
    if args.suite == "llama3":
        from .bench import llama3_suite
        ops += llama3_suite()
    if not ops:
        raise UserError("nothing to measure: give SPEC files or --suite llama3")
    if args.backend == "cuda":
        from .cuda_bench import bench_cuda, format_cuda
        results = bench_cuda(ops, shapes=args.shape, repeats=args.repeats)
        print(format_cuda(results))
    else:
        from .bench import bench, format_results
        results = bench(ops, backend=args.backend, threads=args.threads, shapes=args.shape,
                        repeats=args.repeats)
        print(format_results(results))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ropegen", description="Compile .rope specs into RoPE and RMSNorm kernels "
                                 "for NumPy, C and CUDA, and check every backend against a float64 reference.")
    ap.add_argument("--version", action="version", version=f"ropegen {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("compile", help="write the generated sources of SPEC files",
                       description="Write DIR/<spec stem>/<target>/<operator files> for each SPEC.")
    p.add_argument("spec", nargs="+", metavar="SPEC")
    p.add_argument("-o", "--output", default="generated", metavar="DIR", help="output folder (default: generated)")
    p.add_argument("--target", default=None, help="comma list of targets (default: every built target)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("check", help="run every backend against the float64 reference",
                       description="Run each operator of each SPEC on random inputs (several shapes, odd sizes, "
                                   "strided views) on every available backend and compare with the float64 "
                                   "reference. Exit 1 on any mismatch.")
    p.add_argument("spec", nargs="+", metavar="SPEC")
    p.add_argument("--backend", default=None, help="comma list of backends (default: all available)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("explain", help="print the resolved plan: pair map, frequencies, constants, dtypes")
    p.add_argument("spec", nargs="+", metavar="SPEC")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("import-onnx", help="write a .rope spec for each RotaryEmbedding / RMSNormalization node",
                       description="Read an ONNX model (opset 23) and write one .rope spec per RotaryEmbedding or "
                                   "RMSNormalization node, shapes and dtypes from the model's value info.")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.set_defaults(func=cmd_import_onnx)

    p = sub.add_parser("bench", help="measure time, bytes moved, GB/s and the ratio to a copy of the same bytes")
    p.add_argument("spec", nargs="*", metavar="SPEC")
    p.add_argument("--suite", choices=("llama3",), default=None,
                   help="add a built-in set: llama3 = Llama-3-8B RoPE (f32, bf16; cache and computed) "
                        "and RMSNorm [4096, 4096]")
    p.add_argument("--backend", default="c", help="c (default), numpy or cuda")
    p.add_argument("--threads", type=int, default=None, help="threads for the C backend (default: all cores)")
    p.add_argument("--shape", action="append", default=None,
                   help="symbol sizes, e.g. T=4096 (repeatable; default: the issue's Llama-3 shapes)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
    p.set_defaults(func=cmd_bench)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SpecError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_USER
    except UserError as exc:
        print(f"ropegen: error: {exc}", file=sys.stderr)
        return EXIT_USER
    except (OSError, UnicodeDecodeError) as exc:
        print(f"ropegen: error: {exc}", file=sys.stderr)
        return EXIT_USER


if __name__ == "__main__":
    sys.exit(main())
