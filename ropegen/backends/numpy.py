"""The NumPy backend: a self-contained, vectorised Python module per operator (templates/numpy spell
the code; the context below hands them plain values), loaded behind the CPU backends' calling
convention (NumpyKernel)."""
from __future__ import annotations

import keyword
import types
from dataclasses import replace

import numpy as np

from ropegen.ops.plan import Plan, RmsNormPlan, RopePlan
from ropegen.ops.rope import forms
from ropegen.backends.base import Backend, Kernel
from ropegen.lower.strides import token_dims
from ropegen.ops.rope.frequency_rows import FrequencyRows, frequency_rows
from ropegen.runtime.arrays import host_arguments
from ropegen.runtime.host import Convention
from ropegen.runtime.numpy_host import CPU_RULES, HOST

# A step's operands (all rotated streams of a block of tokens, plus temporaries) should stay in a
# typical L2: measured best at about 320 KiB of input per step on 4096 x 40 x 128 f32.
_STEP_BYTES = 320 * 1024


def block_tokens(plan: RopePlan) -> int:
    per_token = 0
    for t in plan.inputs:
        if t.heads is not None:
            per_token += t.heads * plan.unit * t.dtype.itemsize
    return max(1, _STEP_BYTES // max(1, per_token))


# NumPy's spelling of each element type the generated modules name; bf16 has none (ml_dtypes' type is
# not importable from a self-contained module), so they take it from an input's dtype instead.
NP_TYPES = {"f64": "np.float64", "f32": "np.float32", "f16": "np.float16",
            "i32": "np.int32", "i64": "np.int64", "u32": "np.uint32"}


def _np_dtype(p: RmsNormPlan, d) -> str:
    """A dtype as the module spells it: an input's (bf16 and fp8 have no NumPy name without
    ml_dtypes), else its NumPy name, else ml_dtypes' (the module then imports ml_dtypes)."""
    return next((f"_t_{n}.dtype" for n, t in ((p.x_name, p.x), (p.scale_name, p.scale)) if t == d),
                NP_TYPES.get(d.name, f'np.dtype("{d.numpy}")'))


def rms_context(p: RmsNormPlan) -> dict:
    y_np = _np_dtype(p, p.y)
    unq_np = _np_dtype(p, p.y_unquantized) if p.quant_scale else ""
    return dict(
        y_np=y_np, unq_np=unq_np, fp8_emin=p.y.min_exponent, y_bf16="np.dtype(" in y_np + unq_np, max_finite=p.y.max_finite,
        product=p.product,
        product_np=NP_TYPES[p.product.name],
        stash_np=NP_TYPES[p.stash.name],
        padded_scale_shape=p.padded_scale_shape,
        rows_per_step=max(1, _STEP_BYTES // (p.norm_size * 8)),
    )


def rope_context(p: RopePlan) -> dict:
    tensors = {t.name: t for t in p.inputs}
    first = tensors[p.streams[0].src]
    tokens = token_dims(p)
    pos = p.positions
    args: list[str] = [name for name in (pos.ids, p.sequences, pos.pad, pos.offsets) if name]
    args += [v for v in (pos.start, pos.first_seqlen) if isinstance(v, str)]
    rotated = [tensors[st.src].real_heads for st in p.streams if st.rotate]
    kind = p.angles.kind    # the templates' angles_kind: exact | ggml | table
    return dict(
        tensors=tensors,
        block_tokens=block_tokens(p),
        angles_kind=kind,
        positions_kind=pos.kind.value, offset_arith=forms.position_of(pos).offset_arith,
        position_args=list(dict.fromkeys(args)),
        start=pos.start,
        first_seqlen=pos.first_seqlen,
        pad=pos.pad or "",
        ff=getattr(p.angles, "freq_factors", None) or "",
        indptr=p.ir.sequences_indptr,     # `sequences` holds offsets, not lengths
        fused=getattr(p.angles, "fused", False),     # one cos_sin cache: cos, then sin, in each row
        # B and S: an int, or the symbol the module binds in _sym; packed tokens are one batch row
        batch=1 if tokens.batch is None else tokens.batch,
        seq=tokens.seq,
        first=first.name,
        sin_negate=p.sin_sign < 0,
        # the compute type, or None for bf16: the module takes it from the first input's dtype
        compute_np=NP_TYPES.get(p.compute.name),
        # products can be written straight into the output when no type conversion sits between;
        # then rotate_half blocks take the form y = x * [c, c] + [x_b, x_a] * [-s, s]
        direct_store=p.compute == p.storage,
        rotate_half=[p.compute == p.storage and blk.halves for blk in p.blocks],
        max_heads=max(rotated) if rotated else 1,
        split=first.unit_split,
        # freq_factors divide a float32 angle in ggml numerics, a float64 one in exact numerics
        ff_np=NP_TYPES["f32" if kind == "ggml" else "f64"],
        unit=getattr(p.angles, "length_unit", None) or "",     # run takes the call's frequency rows
        np_types=NP_TYPES,
        # fp8 outputs: the rotated values are kept in the compute type (float32 for storage arithmetic)
        quant_buffer="np.float64" if p.compute.name == "f64" else "np.float32",
        fp8_emin=p.out_dtype.min_exponent if p.out_dtype else None,
        per_head=any(p.ir.tensor(n).axes[0].size != 1 for n in p.quant_scales),
    )


# operator kind -> its render context
CONTEXTS = {"rope": rope_context, "rmsnorm": rms_context}


class NumpyBackend(Backend):
    name = "numpy"
    folder = "numpy"
    comment = "#"
    reserved = frozenset(keyword.kwlist) | {"np", "check"}   # the module's own names
    run_options = frozenset({"check", "threads", "out", "inplace"})

    def sources(self, plan: Plan, spec_file: str) -> dict[str, str]:
        return {f"{plan.name}.py": self.render_file(plan, "py", spec_file, **CONTEXTS[plan.kind](plan))}

    def load(self, plan: Plan, sources: dict[str, str]) -> Kernel:
        name = f"{plan.name}.py"
        module = types.ModuleType(f"ropegen_generated_{plan.name}")
        code = compile(sources[name], f"<ropegen numpy {name}>", "exec")
        exec(code, module.__dict__)
        rows = frequency_rows(plan)
        return NumpyKernel(plan, module.run if rows is None else _with_frequency_rows(module.run, plan, rows))


# The C backend's layout rules (runtime/numpy_host.py), so that out= and inplace= are taken and refused
# alike on both CPU backends; threads= is checked as there and ignored (NumPy runs on one thread).
RULES = replace(CPU_RULES, threads=lambda: 1)


class NumpyKernel:
    """The generated module's run behind the CPU backends' calling convention: NumPy arrays, or
    PyTorch CPU tensors and other DLPack host arrays through NumPy views of their memory (results as
    PyTorch tensors when any argument was one); options check, threads, out, inplace. With out= or
    inplace=True the call is first bound as the C backend binds it (runtime/host.py: the same checks
    and messages, aliasing included); the module then computes every output before any is copied
    into the caller's arrays, so in place reads no value it has already written."""

    def __init__(self, plan: Plan, run):
        self.plan, self.run = plan, run
        self.names = [t.name for t in plan.inputs]
        self.convention = Convention(plan, RULES)

    def __call__(self, *arrays, check: bool = True, threads: int | None = None, out=None,
                 inplace: bool = False) -> tuple:
        other = host_arguments(self.names, arrays, out, NumpyBackend.name)
        if other is not None:
            return other.returned(self(*other.arrays, check=check, threads=threads, out=other.out, inplace=inplace))
        if threads is None and out is None and not inplace:
            return self.run(*arrays, check=check)
        call = self.convention.bind(HOST, arrays, threads=threads, out=out, inplace=inplace)
        results = self.run(*arrays, check=check)
        if out is None and not inplace:
            return results
        for y, r in zip(call.outputs.values(), results):
            np.copyto(y.array, r)
        return call.returned()


def _with_frequency_rows(run, plan: RopePlan, rows: FrequencyRows):
    """The module's run with each call's frequency rows (longrope, dynamic_ntk) worked out first. Rows
    of arguments the module refuses are not needed: it says what is wrong with them before inv_freq."""
    names = [t.name for t in plan.inputs]

    def call(*arrays, check=True):
        try:
            given = {n: np.asarray(a) for n, a in zip(names, arrays)}
            inv_freq = rows.for_call(given.__getitem__, {n: a.shape for n, a in given.items()})
        except Exception:   # noqa: BLE001 (malformed arguments: run reports them)
            inv_freq = None
        return run(*arrays, inv_freq=inv_freq, check=check)
    return call
