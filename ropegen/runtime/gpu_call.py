"""Calling a GPU target's kernels, target-neutral: bind the arrays on runtime/host.py's convention,
check on the host what only a GPU target checks there (sequence lengths, position arithmetic),
pick the vector or the scalar kernel, work out the launch and the argument values, and turn the
error word into lower/status.py's exceptions.

A target supplies its memory (runtime/host.py's Memory plus `error_word`, `to_host` and
`prefix_sums`, below) and one function that launches a kernel; `rope_bind` is pure Python, so
the CPU tests bind host memory through it and run the generated source on the host.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ropegen.lower import status, strides
from ropegen.lower.gpu.abi import rms_row_roles
from ropegen.lower.gpu import (Launch, RmsCfg, RopeCfg, RopeKernel, rms_launch, rms_vector_ok, rope_launch,
                               rope_vector_ok)
from ropegen.ops.plan import Plan, RmsNormPlan, RopePlan
from ropegen.ops.rope import forms
from ropegen.ops.rope.frequency_rows import frequency_rows
from ropegen.runtime import host
from ropegen.runtime.arrays import DeviceArray, c_strides

RULES = host.Rules()          # the scalar kernels read any strides: nothing is copied or refused
OPTIONS = frozenset({"check", "inplace", "out", "stream"})   # the keyword options of a runner call


class GpuMemory(Protocol):
    """One call's device memory: runtime/host.py's Memory (take, empty, returned, ...) plus these."""

    def error_word(self) -> DeviceArray:
        """A zeroed int32[1] on the device, for the kernel's error bits."""

    def to_host(self, a: DeviceArray) -> np.ndarray:
        """A device array's values as a NumPy array (integer inputs and the error word)."""

    def prefix_sums(self, a: DeviceArray) -> DeviceArray:
        """The int64 inclusive prefix sums of an integer vector, on the device."""
    # optional: writes_back = True when NumPy arrays may be outputs (in place, out=): the memory runs
    # the kernel on device copies and `returned` copies the results into them


# launch(memory, kernel, launch shape, argument values in parameter order)
Launcher = Callable[[Any, Any, Launch, list], None]


def tokens_of(p: RopePlan, arrs: dict[str, DeviceArray]) -> tuple[int, int]:
    """(B, S) of a call from its arrays (lower/strides.py)."""
    return strides.tokens_of(p, {n: a.shape for n, a in arrs.items()})


def rope_bind(p: RopePlan, cfg: RopeCfg, arrs: dict[str, DeviceArray], outs: dict[str, DeviceArray],
              B: int, S: int, err_ptr: int, seq_ends_ptr: int, kernel: RopeKernel | None = None,
              call: host.Call | None = None, freq_ptr: int = 0):
    """The kernel (vector when every rotated tensor allows it, else scalar; or `kernel`), its
    launch shape and its argument values (ints, in parameter order) for one call. `call`: the
    host.bind of these arrays, whose canonical strides are reused (without it they are worked out
    here, as the CPU tests that bind host memory directly do). `freq_ptr`: the device address of the
    call's frequency rows (longrope, dynamic_ntk: ops/rope/frequency_rows.py)."""
    if call is None:
        canon = {}
        for st in p.streams:
            t = p.ir.tensor(st.src)
            canon[st.src] = strides.canonical_strides(t, arrs[st.src].strides, p.token_layout, arrs[st.src].shape)
            canon[st.out] = strides.canonical_strides(t, outs[st.out].strides, p.token_layout, outs[st.out].shape)
        call = host.Call(p, None, arrs, outs, {}, canon)
    canon = call.strides
    rotated = [(arrs[s.src].ptr, canon[s.src]) for s in p.streams] + \
              [(outs[s.out].ptr, canon[s.out]) for s in p.streams]
    k = kernel or (cfg.vec if rope_vector_ok(cfg.vec.vector, p.storage.itemsize, rotated) else cfg.scalar)
    n_seq = arrs[p.sequences].shape[0] if p.sequences else 0
    launch = rope_launch(cfg, k, B * S, n_seq)
    values = call.values(k.params, launch={"tokens": B * S, "seq_len": S, "head_groups": launch.head_groups},
                         err=err_ptr, seq_ends=seq_ends_ptr, freq=freq_ptr)
    return k, launch, values


def sequence_lengths(p: RopePlan, values: np.ndarray, S: int) -> np.ndarray:
    """The packed sequences' lengths in the input's own dtype (the kernels' signature names it): the
    values themselves, or an indptr's differences after checking it starts at 0, never decreases and
    ends at the S tokens (a ValueError otherwise)."""
    if not p.ir.sequences_indptr:
        return values
    ptr = np.asarray(values).astype(np.int64)
    if ptr.size == 0 or ptr[0] != 0 or bool((np.diff(ptr) < 0).any()) or ptr[-1] != S:
        raise ValueError(f"{p.sequences}: the indptr must start at 0, never decrease and end at the {S} packed tokens")
    return np.diff(ptr).astype(values.dtype)


def positions_fit(start: int, S: int, pads: tuple[int, ...], first: int | None = None) -> bool:
    """Every formula of arange / glm2d positions fits in int64 for tokens s in [0, S) and the given
    pads (each formula is linear in s and pad: the extremes decide); the kernel's 64-bit integer
    arithmetic then never wraps."""
    lo, hi = -(1 << 63), (1 << 63) - 1
    offsets = (start, start + S - 1)
    values = list(offsets)
    for pd in pads:
        for off in offsets:
            values.append(off - pd)
            if first is not None:
                prompt = first - pd
                values += [first - 1, prompt, prompt - 2, off - prompt, off - prompt + 2]
    return all(lo <= v <= hi for v in values)


def check_position_arith(p: RopePlan, arrs: dict[str, DeviceArray], mem: GpuMemory, B: int, S: int) -> None:
    """ValueError when the position arithmetic of a form with a start (arange, glm2d) would overflow
    (always checked: a few scalars and the [batch] pads, read back to the host)."""
    pos = p.positions
    if not forms.position_of(pos).offset_arith or not B * S:
        return

    def scalar(v) -> int | None:
        if v is None or isinstance(v, int):
            return v
        return int(mem.to_host(arrs[v]).reshape(()))

    pads: tuple[int, ...] = (0,)
    if pos.pad:
        host_pads = mem.to_host(arrs[pos.pad]).astype(np.int64)
        pads = (int(host_pads.min()), int(host_pads.max()))
    start, first = scalar(pos.start), scalar(pos.first_seqlen)
    if not positions_fit(start, S, pads, first):
        raise ValueError(f"position arithmetic overflows int64 ({pos.kind.value} positions: start {start}, "
                         f"{S} tokens{', first_seqlen ' + str(first) if first is not None else ''}, pads in "
                         f"[{min(pads)}, {max(pads)}])")


class RopeRunner:
    """A RoPE operator on a GPU target: `memory(stream)` makes one call's memory, `launch` runs a
    kernel, `kernel_word` names the kernel in status messages ("the CUDA kernel")."""

    def __init__(self, plan: RopePlan, cfg: RopeCfg, memory: Callable[[Any], GpuMemory], launch: Launcher,
                 kernel_word: str):
        self.p, self.cfg, self.memory, self.launch, self.kernel_word = plan, cfg, memory, launch, kernel_word
        self.rows = frequency_rows(plan)

    def __call__(self, *arrays, check: bool = True, inplace: bool = False, out=None, stream=None, **options):
        p, cfg = self.p, self.cfg
        _no_options(options, self.kernel_word)
        mem = self.memory(stream)
        if inplace and not getattr(mem, "writes_back", False) and any(isinstance(a, np.ndarray) for a in arrays):
            raise ValueError("inplace=True needs device arrays (NumPy inputs are copied to the device)")
        call = host.bind(p, mem, RULES, arrays, inplace=inplace, out=out)
        arrs = call.inputs
        B, S = call.tokens()
        freq = None
        if self.rows is not None:   # their lengths are read back (as transformers' own `torch.max` is)
            freq = mem.take("inv_freq", self.rows.for_call(lambda n: mem.to_host(arrs[n]), call.shapes), 2)
        err = mem.error_word()
        seq_ends = None
        if p.sequences:
            # checked on the host before any launch: the kernel derives every index from these,
            # and a wrapped-around int64 sum must not pass for the token count
            values = mem.to_host(arrs[p.sequences])
            if p.ir.sequences_indptr:     # the kernels read lengths: upload the indptr's differences
                values = sequence_lengths(p, values, S)
                arrs[p.sequences] = mem.take(p.sequences, values, 1)
            host_lens = values.astype(np.int64)
            if bool(((host_lens < 0) | (host_lens > S)).any()) or int(host_lens.sum()) != S:
                raise ValueError(f"{p.sequences}: sequence lengths must be in [0, {S}] and sum to the "
                                 f"{S} packed tokens")
            seq_ends = mem.prefix_sums(arrs[p.sequences])
            if p.positions.offsets:   # one per sequence, offset + index within int64
                offs = mem.to_host(arrs[p.positions.offsets]).astype(np.int64)
                if offs.shape[0] != host_lens.shape[0]:
                    raise ValueError(f"{p.positions.offsets}: {offs.shape[0]} offsets for {host_lens.shape[0]} "
                                     f"sequences")
                if bool((offs > np.iinfo(np.int64).max - (np.maximum(host_lens, 1) - 1)).any()):
                    raise ValueError(f"{p.positions.offsets}: offset + index overflows int64")
        check_position_arith(p, arrs, mem, B, S)
        seq_ptr = seq_ends.ptr if seq_ends is not None and seq_ends.shape[0] else err.ptr
        k, launch, args = rope_bind(p, cfg, arrs, call.outputs, B, S, err.ptr, seq_ptr, call=call,
                                    freq_ptr=freq.ptr if freq is not None else 0)
        n_seq = arrs[p.sequences].shape[0] if p.sequences else 0
        if B * S or n_seq:
            self.launch(mem, k, launch, args)
        if check:
            code = status.from_word(int(mem.to_host(err)[0]))
            if code:
                exc = status.error(p, code, call.shapes, None, self.kernel_word)
                if inplace or out is not None:   # every thread ran: the tokens that could be rotated were
                    exc.args = (f"{exc.args[0]} (the outputs' other tokens were written)",)
                raise exc
        # keep every input alive until the launch is queued; results as NumPy when inputs were
        return call.returned()


def row_stride(p: RmsNormPlan, a: DeviceArray, name: str) -> int:
    """The one element stride between the rows of array `name` (x, the residual, y or h: each
    indexed by rows of the normalized axes); ValueError when its layout has none."""
    inner = len(p.norm_shape)
    if 0 in a.shape:
        return p.norm_size   # no rows: no layout to read
    if a.strides[len(a.shape) - inner:] != c_strides(a.shape[len(a.shape) - inner:]) and p.norm_size > 1:
        raise ValueError(f"{name}: the normalized axes must be C-contiguous")
    outer_shape = a.shape[:len(a.shape) - inner]
    outer_strides = a.strides[:len(a.shape) - inner]
    # outer axes must collapse to one row stride
    stride = p.norm_size
    kept = [(n, s) for n, s in zip(outer_shape, outer_strides) if n != 1]
    if kept:
        stride = kept[-1][1]
        acc = stride
        for n, s in reversed(kept):
            if s != acc:
                raise ValueError(f"{name}: rows must be evenly spaced (make it contiguous)")
            acc *= n
    return stride


class RmsRunner:
    """An RMSNorm operator on a GPU target (the arguments as RopeRunner's). The call takes the
    operator's inputs in declaration order and returns y (and h, with a residual)."""

    def __init__(self, plan: RmsNormPlan, cfg: RmsCfg, memory: Callable[[Any], GpuMemory], launch: Launcher,
                 kernel_word: str):
        self.p, self.cfg, self.memory, self.launch, self.kernel_word = plan, cfg, memory, launch, kernel_word

    def __call__(self, *arrays, check: bool = True, inplace: bool = False, out=None, stream=None, **options):
        p, cfg = self.p, self.cfg
        _no_options(options, self.kernel_word)
        mem = self.memory(stream)
        if inplace and not getattr(mem, "writes_back", False) and any(isinstance(a, np.ndarray) for a in arrays):
            raise ValueError("inplace=True needs device arrays (NumPy inputs are copied to the device)")
        call = host.bind(p, mem, RULES, arrays, out=out, inplace=inplace)
        xa, sa = call.inputs[p.x_name], call.inputs[p.scale_name]
        if not sa.c_contiguous:
            raise ValueError(f"{p.scale_name}: the scale must be C-contiguous")
        # every row-indexed array with its own row stride, in rms_row_roles' order: y may be x itself
        # (in place), h the residual
        rowed = [(p.x_name, xa)]
        if p.residual:
            rowed.append((p.residual, call.inputs[p.residual]))
        rowed += [(f"out {o}", call.outputs[o]) for o in p.outputs]
        strides = [row_stride(p, a, name) for name, a in rowed]
        outer_shape = xa.shape[:len(xa.shape) - len(p.norm_shape)]
        rows = int(np.prod(outer_shape)) if outer_shape else 1
        k = cfg.vec if rms_vector_ok(cfg.vec, [(a.ptr, a.itemsize) for _, a in rowed], strides) else cfg.scalar
        args = call.values(k.params, launch={"rows": rows, **{f"{r}_row_stride": s
                                                              for r, s in zip(rms_row_roles(p), strides)}})
        if rows:
            self.launch(mem, k, rms_launch(k, rows), args)
        return call.returned()


def _no_options(options: dict, kernel_word: str) -> None:
    """A ValueError naming the options a GPU call does not take (threads= is the C backend's)."""
    if options:
        raise ValueError(f"{kernel_word} takes no option {', '.join(map(repr, sorted(options)))}; its options "
                         f"are {', '.join(sorted(OPTIONS))}")


# The runner of each operator kind (the plan's `.kind` word).
RUNNERS = {"rope": RopeRunner, "rmsnorm": RmsRunner}


def runner(plan: Plan, cfg, memory: Callable[[Any], GpuMemory], launch: Launcher, kernel_word: str):
    """The callable kernel of `plan` on a GPU target."""
    return RUNNERS[plan.kind](plan, cfg, memory, launch, kernel_word)
