"""Calling a GPU target's kernels, target-neutral: bind the arrays on runtime/host.py's convention,
check on the host what only a GPU target checks there (sequence lengths, position arithmetic),
pick the vector or the scalar kernel, work out the launch and the argument values, and turn the
error word into lower/status.py's exceptions, without a device sync on the default path (RopeRunner
says when one is made).

A target supplies its memory (runtime/host.py's Memory plus `error_word`, `to_host` and
`prefix_sums`, below) and one function that launches a kernel; `rope_bind` is pure Python, so
the CPU tests bind host memory through it and run the generated source on the host. A repeated
signature of device arrays takes a quick path that skips the binding (its first call checked it):
quick_hit and learn, which runtime/gpu_rms.py (the RMSNorm runner) shares.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ropegen.lower import status, strides
from ropegen.lower.gpu import Launch, RopeCfg, RopeKernel, rope_launch, rope_vector_ok
from ropegen.ops.plan import Plan, RopePlan
from ropegen.ops.rope import forms
from ropegen.ops.rope.frequency_rows import frequency_rows
from ropegen.runtime import host
from ropegen.runtime.arrays import DeviceArray

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
    # the kernel on device copies and `returned` copies the results into them. Without a sync:
    # stream_key, stream, device, zero(word), host_copy(a), device_sequences(a, indptr, S); on the type,
    # caller_stream(arrays, out) and, for the quick path, signature(arrays) -> (key, addresses, stream) |
    # None, specs(outputs) and allocate(specs) -> (arrays, addresses) (backends/cuda/memory.py says more)


# launch(memory, kernel, launch shape, argument values in parameter order); optional: prepared(kernel,
# launch shape, values, pointer slots) -> launch(memory, addresses), for the quick path
Launcher = Callable[[Any, Any, Launch, list], None]
Read = Callable[[str], 'np.ndarray | None']    # read(input name): its values on the host, or None


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


def check_position_arith(p: RopePlan, value: Read, B: int, S: int) -> None:
    """ValueError when the position arithmetic of a form with a start (arange, glm2d) would overflow:
    a few scalars and the [batch] pads. Skipped when `value` cannot give one without a read-back the
    call does not make (device inputs, check=False): the kernel's 64-bit arithmetic then wraps, which
    reads nothing out of bounds (table rows are range-checked) but gives unspecified values."""
    pos = p.positions
    if not forms.position_of(pos).offset_arith or not B * S:
        return
    got = {v: value(v) for v in (pos.start, pos.first_seqlen, pos.pad) if isinstance(v, str)}
    if any(v is None for v in got.values()):
        return

    def scalar(v) -> int | None:
        return int(got[v].reshape(())) if isinstance(v, str) else v

    pads: tuple[int, ...] = (0,)
    if pos.pad:
        host_pads = got[pos.pad].astype(np.int64)
        pads = (int(host_pads.min()), int(host_pads.max()))
    start, first = scalar(pos.start), scalar(pos.first_seqlen)
    if not positions_fit(start, S, pads, first):
        raise ValueError(f"position arithmetic overflows int64 ({pos.kind.value} positions: start {start}, "
                         f"{S} tokens{', first_seqlen ' + str(first) if first is not None else ''}, pads in "
                         f"[{min(pads)}, {max(pads)}])")


def packed_sequences(p: RopePlan, mem: GpuMemory, arrs: dict[str, DeviceArray], S: int, value: Read) -> DeviceArray:
    """The int64 prefix sums of the packed sequences on the device; `arrs` gets the lengths the kernels
    read (an indptr's differences). What the shapes say is checked here; the values on the host when
    `value` gives them, else on the device (memory's `device_sequences`) where the kernel reports
    them in its error word: no read-back before the launch."""
    seq, off = p.sequences, p.positions.offsets
    n = arrs[seq].shape[0]
    n_seq = n - 1 if p.ir.sequences_indptr else n
    if n_seq < 0:
        raise ValueError(f"{seq}: the indptr must start at 0, never decrease and end at the {S} packed tokens")
    if off and arrs[off].shape[0] != n_seq:
        raise ValueError(f"{off}: {arrs[off].shape[0]} offsets for {n_seq} sequences")
    values = value(seq)
    if values is None and n_seq * (S + 1) < 2 ** 63 and hasattr(mem, "device_sequences"):
        arrs[seq], ends = mem.device_sequences(arrs[seq], p.ir.sequences_indptr, S)
        return ends
    if values is None:    # so many sequences that the clipped sums could wrap: check them here
        values = mem.to_host(arrs[seq])
    # checked before any launch: every index derives from these; a wrapped int64 sum must not pass for S
    if p.ir.sequences_indptr:     # the kernels read lengths: upload the indptr's differences
        values = sequence_lengths(p, values, S)
        arrs[seq] = mem.take(seq, values, 1)
    host_lens = values.astype(np.int64)
    if bool(((host_lens < 0) | (host_lens > S)).any()) or int(host_lens.sum()) != S:
        raise ValueError(f"{seq}: sequence lengths must be in [0, {S}] and sum to the {S} packed tokens")
    offs = value(off) if off else None
    top = np.iinfo(np.int64).max - (np.maximum(host_lens, 1) - 1)
    if offs is not None and bool((offs.astype(np.int64) > top).any()):
        raise ValueError(f"{off}: offset + index overflows int64")
    return mem.prefix_sums(arrs[seq])


@dataclass
class Flags:
    """One operator's error words on one (device, stream), made once: `deferred` collects calls with
    check=False until check_errors(), `checked` serves each call with check=True (cleared when set);
    `shapes`: the last call's input shapes, for the message."""
    deferred: DeviceArray
    checked: DeviceArray
    stream: Any
    shapes: dict


@dataclass
class Quick:
    """A repeated signature's call: its outputs' specs (memory's allocate), shapes, the launch
    with every argument but the addresses converted once, and the outputs' addresses modulo 64 (new
    outputs must match them, as the inputs match the signature's, for the same kernel to be right)."""
    outputs: list
    shapes: dict
    launch: Callable[[Any, list], None]
    aligned: list


def quick_hit(memory, table: dict[tuple, Quick], arrays, stream):
    """A repeated signature's call without the binding: (the call's memory, its Quick, the addresses
    of the arrays then of the new outputs, the new outputs), or None when the call must be bound (a
    new signature, outputs allocated at other alignments)."""
    got = memory.signature(arrays)
    # (another stream than a tensor's own: the binding's DLPack export orders the two)
    if got is None or not (stream is None or got[2] is None):
        return None
    mem = memory(stream if stream is not None else got[2])
    q = table.get((got[0], mem.device))
    if q is None:
        return None
    outs, addresses = mem.allocate(q.outputs)
    if [a & 63 for a in addresses] != q.aligned:
        return None
    return mem, q, got[1] + addresses, outs


def learn(table: dict[tuple, Quick], memory, launcher, arrays, mem, call: host.Call, k, launch: Launch,
          args: list) -> None:
    """Keep in `table` what a call of this signature needs again (quick_hit): not when a bound array is
    not the caller's own memory (an upload, a copy) or a pointer parameter is neither an array's
    nor the error word's. The quick launch takes the inputs', the outputs' and the error word's addresses."""
    got = memory.signature(arrays)
    names = list(call.inputs)
    if got is None or [call.inputs[n].ptr for n in names] != got[1]:
        return
    outs = list(call.outputs.values())
    where = {("in", n): i for i, n in enumerate(names)}
    where.update({("out", n): len(names) + i for i, n in enumerate(call.outputs)})
    where[("err",)] = len(names) + len(outs)
    slots = [(i, where[prm.source]) for i, prm in enumerate(k.params) if prm.source in where]
    if any(prm.is_pointer and prm.source not in where for prm in k.params):
        return
    table[(got[0], mem.device)] = Quick(memory.specs(outs), call.shapes, launcher.prepared(k, launch, args, slots),
                                        [o.ptr & 63 for o in outs])


class RopeRunner:
    """A RoPE operator on a GPU target: `memory(stream)` makes one call's memory, `launch` runs a
    kernel, `kernel_word` names the kernel in status messages ("the CUDA kernel").

    check=True reads the error word back after the launch (a sync) and raises; check=False records
    errors in a word kept per (device, stream) that `check_errors()` reads. The default (None) is
    True when every input came from the host (the call syncs to return NumPy anyway) or the memory
    keeps no such word, else False: a call on device arrays neither syncs nor reads back (CUDA-graph
    capturable), except for longrope / dynamic_ntk rows, which depend on the largest position (read
    back, as transformers' own `torch.max(position_ids)` is). Sequence lengths, offsets and position
    arithmetic are checked on the host when their values are there or check=True; otherwise the
    kernels test the lengths, and offsets or positions that overflow int64 give unspecified values.
    With check=False a token whose position is out of range is not written: its outputs hold what
    the memory held (new outputs: unspecified; out= or in place: the previous values)."""

    def __init__(self, plan: RopePlan, cfg: RopeCfg, memory: Callable[[Any], GpuMemory], launch: Launcher,
                 kernel_word: str):
        self.p, self.cfg, self.memory, self.launch, self.kernel_word = plan, cfg, memory, launch, kernel_word
        self.rows = frequency_rows(plan)
        self.flags: dict[Any, Flags] = {}
        self.quick: dict[tuple, Quick] = {}
        self.caller_stream = getattr(memory, "caller_stream", None)
        # the quick path: memory that reads signatures, a launcher that prepares, calls that read no values
        self.quick_ok = hasattr(memory, "signature") and hasattr(launch, "prepared") and not plan.sequences \
            and self.rows is None

    def __call__(self, *arrays, check: bool | None = None, inplace: bool = False, out=None, stream=None, **options):
        if self.quick_ok and not (check or inplace or options) and out is None:
            hit = quick_hit(self.memory, self.quick, arrays, stream)
            if hit is not None:
                mem, q, addresses, outs = hit
                flags = self._flags(mem)
                flags.shapes = q.shapes
                q.launch(mem, addresses + [flags.deferred.ptr])
                return tuple(outs)
        if stream is None and self.caller_stream is not None:
            stream = self.caller_stream(arrays, out)
        return self._call(arrays, check, inplace, out, stream, options)

    def _flags(self, mem) -> Flags:
        f = self.flags.get(mem.stream_key)
        if f is None:
            f = self.flags[mem.stream_key] = Flags(mem.error_word(), mem.error_word(), mem.stream, {})
        return f

    def check_errors(self) -> None:
        """Raise what kernels run with check=False recorded since the last check, as a call with
        check=True would have (ValueError), and clear it. Synchronises each stream this operator ran on."""
        for f in self.flags.values():
            mem = self.memory(f.stream)
            code = status.from_word(int(mem.to_host(f.deferred)[0]))
            if code:
                mem.zero(f.deferred)
                exc = status.error(self.p, code, f.shapes, None, self.kernel_word)
                exc.args = (f"{exc.args[0]} (in a call with check=False since the last check; its outputs are "
                            f"unspecified at the failing tokens)",)
                raise exc

    def _call(self, arrays, check, inplace, out, stream, options):
        p, cfg = self.p, self.cfg
        no_options(options, self.kernel_word)
        mem = self.memory(stream)
        if inplace and not getattr(mem, "writes_back", False) and any(isinstance(a, np.ndarray) for a in arrays):
            raise ValueError("inplace=True needs device arrays (NumPy inputs are copied to the device)")
        call = host.bind(p, mem, RULES, arrays, inplace=inplace, out=out)
        arrs = call.inputs
        B, S = call.tokens()
        sticky = hasattr(mem, "stream_key")
        if check is None:
            check = not sticky or mem.host
        host_copy = getattr(mem, "host_copy", lambda a: None)

        def value(name: str) -> np.ndarray | None:   # None: only a read-back the call does not make has it
            got = host_copy(arrs[name])
            return got if got is not None or not (check or not sticky) else mem.to_host(arrs[name])

        freq = None if self.rows is None else mem.take(   # their lengths are read back (inherent)
            "inv_freq", self.rows.for_call(lambda n: mem.to_host(arrs[n]), call.shapes), 2)
        if sticky:
            flags = self._flags(mem)
            flags.shapes = call.shapes
            err = flags.checked if check else flags.deferred
        else:
            err = mem.error_word()
        seq_ends = packed_sequences(p, mem, arrs, S, value) if p.sequences else None
        check_position_arith(p, value, B, S)
        seq_ptr = seq_ends.ptr if seq_ends is not None and seq_ends.shape[0] else err.ptr
        k, launch, args = rope_bind(p, cfg, arrs, call.outputs, B, S, err.ptr, seq_ptr, call=call,
                                    freq_ptr=freq.ptr if freq is not None else 0)
        n_seq = arrs[p.sequences].shape[0] if p.sequences else 0
        if B * S or n_seq:
            self.launch(mem, k, launch, args)
        if check:
            code = status.from_word(int(mem.to_host(err)[0]))
            if code:
                if sticky:
                    mem.zero(err)
                exc = status.error(p, code, call.shapes, None, self.kernel_word)
                if inplace or out is not None:   # every thread ran: the tokens that could be rotated were
                    exc.args = (f"{exc.args[0]} (the outputs' other tokens were written)",)
                raise exc
        elif self.quick_ok and sticky and not (inplace or out is not None or mem.host) and B * S:
            learn(self.quick, self.memory, self.launch, arrays, mem, call, k, launch, args)
        # keep every input alive until the launch is queued; results as NumPy when inputs were
        return call.returned()


def no_options(options: dict, kernel_word: str) -> None:
    """A ValueError naming the options a GPU call does not take (threads= is the C backend's)."""
    if options:
        raise ValueError(f"{kernel_word} takes no option {', '.join(map(repr, sorted(options)))}; its options "
                         f"are {', '.join(sorted(OPTIONS))}")


def runner(plan: Plan, cfg, memory: Callable[[Any], GpuMemory], launch: Launcher, kernel_word: str):
    """The callable kernel of `plan` on a GPU target: the runner of its operator kind (the plan's `.kind`)."""
    from ropegen.runtime.gpu_rms import RmsRunner    # (it builds on this module: imported once both exist)
    runners = {"rope": RopeRunner, "rmsnorm": RmsRunner}
    return runners[plan.kind](plan, cfg, memory, launch, kernel_word)
