"""The Python API: compile a spec, get operators with sources per target and a run method."""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Iterator

import numpy as np

from ropegen import backends, ir
from ropegen.spec.sema import check
from ropegen.spec.diagnostics import SpecError, SpecWarning
from ropegen.spec.parse import parse
from ropegen.ops.plan import Plan, plan_operator


class Operator:
    """One compiled operator: its IR, its plan, its sources per target, and run()."""

    def __init__(self, op: ir.Operator, spec: ir.Spec):
        self.ir = op
        self.spec = spec
        self.plan: Plan = plan_operator(op, spec.sha256)
        self._kernels: dict[str, object] = {}
        self.sources = _Sources(self)

    @property
    def name(self) -> str:
        return self.ir.name

    @property
    def kind(self) -> str:
        return self.ir.kind

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.ir.inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.ir.output_names

    def kernel(self, backend: str):
        if backend not in self._kernels:
            b = _backend(backend)
            why = b.unavailable()
            if why:
                raise RuntimeError(f"backend '{backend}' cannot run here: {why}")
            self._kernels[backend] = b.load(self.plan, self.sources[backend])
        return self._kernels[backend]

    def run(self, *arrays, backend: str = "numpy", **options):
        """Run on arrays given in declaration order; one output is returned bare, several as a tuple."""
        if len(arrays) != len(self.ir.inputs):
            raise ValueError(f"{self.name}: expected {len(self.inputs)} inputs ({', '.join(self.inputs)}), "
                             f"got {len(arrays)}")
        kernel = self._kernels.get(backend)
        if kernel is None:
            kernel = self.kernel(backend)
        outs = kernel(*arrays, **options)
        return outs[0] if len(outs) == 1 else tuple(outs)

    __call__ = run

    def bind(self, *arrays, backend: str = "c", threads: int | None = None, out=None, inplace: bool = False):
        """A call validated once, for callers who run the same shapes in a loop (decode).

        Checks the arrays and options as run() does and returns a callable: `bound()` runs the kernel
        on the bound arrays again (new outputs each call unless out= or inplace=True was bound);
        `bound(*arrays)` (and `out=` when bound with out=) runs it on new arrays of the same signature,
        i.e. the same dtype, shape and strides, alignment and, for outputs written over the caller's
        arrays, no overlap, checked cheaply per call; any other change is a ValueError saying to bind
        again. Positions and sequence lengths are still checked on every call. One output is returned
        bare, several as a tuple. The C backend binds its ctypes arguments once; other backends check
        the signature and then make the whole run() call (which checks everything, from the first call).
        """
        if len(arrays) != len(self.ir.inputs):
            raise ValueError(f"{self.name}: expected {len(self.inputs)} inputs ({', '.join(self.inputs)}), "
                             f"got {len(arrays)}")
        kernel = self.kernel(backend)
        if hasattr(kernel, "bound_call"):
            return kernel.bound_call(*arrays, threads=threads, out=out, inplace=inplace, bare=True)
        given = {"threads": threads, "out": out, "inplace": inplace or None}   # only what was given
        options = {k: v for k, v in given.items() if v is not None}
        return _RunBound(self, backend, arrays, options)

    def run_all(self, *arrays, backend: str = "numpy", **options) -> tuple[np.ndarray, ...]:
        """Like run(), but always a tuple."""
        outs = self.run(*arrays, backend=backend, **options)
        return outs if isinstance(outs, tuple) else (outs,)

    def __repr__(self) -> str:
        return f"<ropegen {self.kind} '{self.name}' inputs={self.inputs} outputs={self.outputs}>"


class _RunBound:
    """Operator.bind for a backend without its own bound call: the signature checked, then run()."""

    def __init__(self, op: Operator, backend: str, arrays: tuple, options: dict):
        self.op, self.backend, self.options = op, backend, options
        self.arrays = arrays
        self.sig = [_sig(a) for a in arrays]

    def __call__(self, *arrays, out=None):
        options = self.options
        if out is not None:
            if "out" not in options:
                raise ValueError(f"{self.op.name}: bound without out=; bind again (op.bind) with out=")
            options = {**options, "out": out}
        if arrays:
            if len(arrays) != len(self.sig) or any(_sig(a) != s for a, s in zip(arrays, self.sig)):
                raise ValueError(f"{self.op.name}: the arrays differ from the bound ones in count, dtype, shape "
                                 f"or strides; bind again (op.bind) for a new signature")
        return self.op.run(*(arrays or self.arrays), backend=self.backend, **options)


def _sig(a) -> tuple:
    a = a if hasattr(a, "dtype") and hasattr(a, "shape") else np.asarray(a)
    return (str(a.dtype), tuple(a.shape), tuple(getattr(a, "strides", None) or ()))


class _Sources:
    """`op.sources[target]` -> {file name: text}, rendered on first use."""

    def __init__(self, op: Operator):
        self._op = op
        self._cache: dict[str, dict[str, str]] = {}

    def __getitem__(self, target: str) -> dict[str, str]:
        if target not in self._cache:
            self._cache[target] = _backend(target).sources(self._op.plan, self._op.spec.file)
        return self._cache[target]

    def __iter__(self) -> Iterator[str]:
        return iter(backends.names())


def _backend(name: str):
    try:
        return backends.get(name)
    except KeyError:
        raise ValueError(f"unknown backend '{name}'; available: {', '.join(backends.names())}") from None


class Program:
    """All operators of one spec."""

    def __init__(self, spec: ir.Spec, source: str):
        self.spec = spec
        self.source = source
        self.operators = tuple(Operator(op, spec) for op in spec.operators)

    def __getitem__(self, name: str) -> Operator:
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)

    def __iter__(self) -> Iterator[Operator]:
        return iter(self.operators)

    def __len__(self) -> int:
        return len(self.operators)


def load_source(path_or_text: str | os.PathLike) -> tuple[str, str]:
    """(text, file name) from a path or from spec text itself."""
    if isinstance(path_or_text, os.PathLike):
        p = Path(path_or_text)
        return p.read_text(encoding="utf-8"), str(p)
    text = str(path_or_text)
    if "\n" not in text and "{" not in text and text.strip():
        p = Path(text)
        return p.read_text(encoding="utf-8"), str(p)
    return text, "<spec>"


def compile(path_or_text: str | os.PathLike, file: str | None = None) -> Program:  # noqa: A001
    """Parse, check and plan a spec given as a path or as text; raises SpecError on a bad spec and
    issues a SpecWarning for each warning-level diagnostic."""
    text, name = load_source(path_or_text)
    spec = check(parse(text, file or name))
    for w in spec.warnings:
        warnings.warn(w.render(text), SpecWarning, stacklevel=2)
    try:
        return Program(spec, text)
    except SpecError as exc:   # a planned constant that overflows (C029): quote the spec like the checker does
        raise SpecError(exc.diagnostics, text) from None
