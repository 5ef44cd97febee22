"""The Python API: compile a spec, get operators with sources per target and a run method."""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Iterator

import numpy as np

from ropegen import backends, ir
from ropegen.spec.sema import check
from ropegen.runtime.arrays import host_arguments
from ropegen.spec.diagnostics import SpecError, SpecWarning, did_you_mean
from ropegen.spec.parse import parse
from ropegen.ops.plan import Plan, plan_operator


class Operator:
    """One compiled operator: its IR, its plan, its sources per target, and run()."""

    def __init__(self, op: ir.Operator, spec: ir.Spec):
        self.ir = op
        self.spec = spec
        self.plan: Plan = plan_operator(op, spec.sha256)
        self._kernels: dict[str, object] = {}
        self._options: dict[str, frozenset[str]] = {}    # per backend: the option words run() takes
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
        """Run on arrays given in declaration order and/or by input name (`op.run(q, k, positions=p)`);
        one output is returned bare, several as a tuple. NumPy arrays, or on the CPU backends PyTorch
        CPU tensors and other DLPack host arrays, read in place (results as PyTorch tensors when any
        argument was one, NumPy arrays for other producers). A keyword that names an input is that
        input; the others are the backend's options (`backends.get(name).run_options`, and check)."""
        if options:
            known = self._options.get(backend)
            if known is None:   # a keyword that names an input is that input
                known = self._options[backend] = (_backend(backend).run_options | {"check"}) - set(self.inputs)
            if not known.issuperset(options):
                arrays, options = self._arguments(arrays, options, backend, known)
            elif len(arrays) != len(self.ir.inputs):
                raise self._count_error(len(arrays))
        elif len(arrays) != len(self.ir.inputs):
            raise self._count_error(len(arrays))
        kernel = self._kernels.get(backend)
        if kernel is None:
            kernel = self.kernel(backend)
        outs = kernel(*arrays, **options)
        return outs[0] if len(outs) == 1 else outs if type(outs) is tuple else tuple(outs)

    __call__ = run

    def bind(self, *arrays, backend: str = "c", **options):
        """A call validated once, for callers who run the same shapes in a loop (decode).

        Takes the arrays as run() does (in order and/or by input name) and the options threads, out
        and inplace; checks them as run() does and returns a callable: `bound()` runs the kernel
        on the bound arrays again (new outputs each call unless out= or inplace=True was bound);
        `bound(*arrays)` (and `out=` when bound with out=) runs it on new arrays of the same signature,
        i.e. the same dtype, shape and strides, alignment and, for outputs written over the caller's
        arrays, no overlap, checked cheaply per call; any other change is a ValueError saying to bind
        again. Positions and sequence lengths are still checked on every call. One output is returned
        bare, several as a tuple. The C backend binds its ctypes arguments once (on NumPy views of
        PyTorch / DLPack host arrays, converted again per call); other backends check the signature
        and then make the whole run() call (which checks everything, from the first call).
        """
        arrays, options = self._arguments(arrays, options, backend, frozenset({"threads", "out", "inplace"}))
        kernel = self.kernel(backend)
        threads, out, inplace = options.get("threads"), options.get("out"), bool(options.get("inplace"))
        if hasattr(kernel, "bound_call"):
            other = host_arguments(self.inputs, arrays, out, backend)
            if other is not None:
                bound = kernel.bound_call(*other.arrays, threads=threads, out=other.out, inplace=inplace)
                return _HostBound(bound, other, self.inputs, backend)
            return kernel.bound_call(*arrays, threads=threads, out=out, inplace=inplace, bare=True)
        given = {"threads": threads, "out": out, "inplace": inplace or None}   # only what was given
        options = {k: v for k, v in given.items() if v is not None}
        return _RunBound(self, backend, arrays, options)

    def _count_error(self, got: int) -> ValueError:
        return ValueError(f"{self.name}: expected {len(self.inputs)} inputs ({', '.join(self.inputs)}), got {got}")

    def _arguments(self, arrays: tuple, options: dict, backend: str, known: frozenset) -> tuple[tuple, dict]:
        """(the inputs in declaration order, the options) from a call's positional and keyword
        arguments; a ValueError for an unknown keyword (with a did-you-mean), an input given twice or
        missing."""
        names = self.inputs
        named, rest = {}, {}
        for key, value in options.items():
            if key in names:
                named[key] = value
            elif key in known:
                rest[key] = value
            else:
                hint = did_you_mean(key, names + tuple(known)) or ""
                raise ValueError(f"{self.name}: unknown argument {key!r}: no input of that name, and the {backend} "
                                 f"backend takes no option {key!r}; {hint + ' ' if hint else ''}inputs: "
                                 f"{', '.join(names)}; options: {', '.join(sorted(known))}")
        if len(arrays) > len(names) or (not named and len(arrays) != len(names)):
            raise self._count_error(len(arrays) + len(named))
        if not named:
            return arrays, rest
        twice = [(i, n) for i, n in enumerate(names[:len(arrays)]) if n in named]
        if twice:
            i, n = twice[0]
            raise ValueError(f"{self.name}: input {n!r} given twice: as argument {i + 1} and by name")
        missing = [n for n in names[len(arrays):] if n not in named]
        if missing:
            raise ValueError(f"{self.name}: missing input{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(map(repr, missing))} (inputs: {', '.join(names)})")
        return arrays + tuple(named[n] for n in names[len(arrays):]), rest

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


class _HostBound:
    """Operator.bind's bound call of a kernel over NumPy views of PyTorch / DLPack host arrays
    (runtime/arrays.py): each call's arrays viewed again, its results in the caller's types."""

    def __init__(self, bound, host, names: tuple, backend: str):
        self.bound, self.host, self.names, self.backend = bound, host, names, backend

    def __call__(self, *arrays, out=None):
        if arrays or out is not None:
            other = host_arguments(self.names, arrays, out, self.backend)
            outs = self.bound(*arrays, out=out) if other is None else \
                other.returned(self.bound(*other.arrays, out=other.out))
        else:
            outs = self.host.returned(self.bound())
        return outs[0] if len(outs) == 1 else tuple(outs)


def _sig(a) -> tuple:
    a = a if hasattr(a, "dtype") and hasattr(a, "shape") else np.asarray(a)
    strides, dtype = getattr(a, "strides", None), str(a.dtype)
    if strides is None and callable(getattr(a, "stride", None)):     # a PyTorch tensor: as NumPy says it
        strides, dtype = tuple(s * a.element_size() for s in a.stride()), dtype.removeprefix("torch.")
    return (dtype, tuple(a.shape), tuple(strides or ()))


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
