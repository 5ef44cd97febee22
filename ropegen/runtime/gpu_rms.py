"""Calling a GPU target's RMSNorm kernels: where the rows of x, the residual, y and h lie (evenly
spaced, or in evenly spaced groups of evenly spaced rows, as the heads of a fused-QKV view are), the
vector or the scalar kernel, the launch values, and runtime/gpu_call.py's quick path for a repeated
signature of device arrays.

A fused-QKV view `q = qkv[:, :32 * 128].view(T, 32, 128)` has its rows (t, h) at t * 6144 + h * 128:
no one row stride. The kernels index row r at (r / row_group) * group stride + (r % row_group) *
row stride, one row_group for every array and each array its own two strides; row_group 0 when every
array's rows are evenly spaced, so those calls divide nothing in the kernel.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropegen.lower.gpu import RmsCfg, rms_launch, rms_vector_ok
from ropegen.lower.gpu.abi import rms_row_roles
from ropegen.ops.plan import RmsNormPlan
from ropegen.runtime import host
from ropegen.runtime.arrays import DeviceArray, c_strides
from ropegen.runtime.gpu_call import RULES, GpuMemory, Launcher, Quick, learn, no_options, quick_hit


@dataclass(frozen=True)
class RowLayout:
    """The rows of one call: how many, `group` rows per group (0: no groups, the rows of every array
    evenly spaced) and, per row-indexed array in rms_row_roles' order, (row stride, group stride)."""
    rows: int
    group: int
    strides: tuple[tuple[int, int], ...]

    def launch(self, p: RmsNormPlan) -> dict[str, int]:
        """The launch values of the kernels' parameters (lower/gpu/abi.py rms_params)."""
        values = {"rows": self.rows, "row_group": self.group}
        for role, (row, group) in zip(rms_row_roles(p), self.strides):
            values[f"{role}_row_stride"], values[f"{role}_group_stride"] = row, group
        return values


def row_layout(p: RmsNormPlan, rowed: list[tuple[str, DeviceArray]]) -> RowLayout:
    """The RowLayout of the row-indexed arrays `rowed` ((name, array): x first, each of x's shape);
    ValueError naming an array whose rows follow no such layout, or split in other groups than
    another's (one row_group serves them all)."""
    inner = len(p.norm_shape)
    outer = rowed[0][1].shape[:len(rowed[0][1].shape) - inner]
    rows = math.prod(outer)
    if rows == 0 or 0 in rowed[0][1].shape:
        return RowLayout(0, 0, ((p.norm_size, 0),) * len(rowed))   # no rows: no layout to read
    kept = [i for i, n in enumerate(outer) if n != 1]     # an axis of one element has no spacing
    split: tuple[str, int] | None = None      # (array, position in kept where its groups begin)
    for name, a in rowed:
        if a.strides[len(outer):] != c_strides(a.shape[len(outer):]) and p.norm_size > 1:
            raise ValueError(f"{name}: the normalized axes must be C-contiguous")
        st = [a.strides[i] for i in kept]
        breaks = [j for j in range(1, len(kept)) if st[j - 1] != st[j] * outer[kept[j]]]
        if len(breaks) > 1:
            raise ValueError(f"{name}: rows must be evenly spaced, or in evenly spaced groups of evenly "
                             f"spaced rows (make it contiguous)")
        if breaks and split is not None and split[1] != breaks[0]:
            raise ValueError(f"{name}: its rows fall in groups of {_group(outer, kept, breaks[0])}, {split[0]}'s "
                             f"in groups of {_group(outer, kept, split[1])}: one grouping must serve every "
                             f"array (make one contiguous)")
        if breaks and split is None:
            split = (name, breaks[0])
    strides = []
    for _, a in rowed:
        st = [a.strides[i] for i in kept]
        row = st[-1] if st else p.norm_size
        # evenly spaced arrays of a grouped call: their group stride is G rows (the outer axis' own)
        strides.append((row, st[split[1] - 1] if split else 0))
    return RowLayout(rows, _group(outer, kept, split[1]) if split else 0, tuple(strides))


def _group(outer: tuple[int, ...], kept: list[int], j: int) -> int:
    """The rows of a group that begins at position j of the kept outer axes."""
    return math.prod(outer[i] for i in kept[j:])


class RmsRunner:
    """An RMSNorm operator on a GPU target (the arguments as gpu_call.RopeRunner's). The call takes
    the operator's inputs in declaration order and returns y (and h, with a residual); its kernels
    report no errors (`check` is accepted and changes nothing), and it runs on the caller's stream
    like RopeRunner. A repeated signature of device arrays (not in place, no out=) skips the binding
    and the host checks: its first call made them."""

    def __init__(self, plan: RmsNormPlan, cfg: RmsCfg, memory: Callable[[Any], GpuMemory], launch: Launcher,
                 kernel_word: str):
        self.p, self.cfg, self.memory, self.launch, self.kernel_word = plan, cfg, memory, launch, kernel_word
        self.quick: dict[tuple, Quick] = {}
        self.caller_stream = getattr(memory, "caller_stream", None)
        self.quick_ok = hasattr(memory, "signature") and hasattr(launch, "prepared")

    def __call__(self, *arrays, check: bool | None = None, inplace: bool = False, out=None, stream=None,
                 **options):
        if self.quick_ok and not (inplace or options) and out is None:
            hit = quick_hit(self.memory, self.quick, arrays, stream)
            if hit is not None:
                mem, q, addresses, outs = hit
                q.launch(mem, addresses)
                return tuple(outs)
        p, cfg = self.p, self.cfg
        no_options(options, self.kernel_word)
        if stream is None and self.caller_stream is not None:
            stream = self.caller_stream(arrays, out)
        mem = self.memory(stream)
        if inplace and not getattr(mem, "writes_back", False) and any(isinstance(a, np.ndarray) for a in arrays):
            raise ValueError("inplace=True needs device arrays (NumPy inputs are copied to the device)")
        call = host.bind(p, mem, RULES, arrays, out=out, inplace=inplace)
        sa = call.inputs[p.scale_name]
        if not sa.c_contiguous:
            raise ValueError(f"{p.scale_name}: the scale must be C-contiguous")
        # every row-indexed array with its own strides, in rms_row_roles' order: y may be x itself
        # (in place), h the residual
        rowed = [(p.x_name, call.inputs[p.x_name])]
        if p.residual:
            rowed.append((p.residual, call.inputs[p.residual]))
        rowed += [(f"out {o}", call.outputs[o]) for o in p.outputs]
        layout = row_layout(p, rowed)
        vector = rms_vector_ok(cfg.vec, [(a.ptr, a.itemsize) for _, a in rowed], [s for pair in layout.strides
                                                                                   for s in pair])
        k = cfg.vec if vector else cfg.scalar
        args = call.values(k.params, launch=layout.launch(p))
        if layout.rows:
            shape = rms_launch(k, layout.rows)
            self.launch(mem, k, shape, args)
            if self.quick_ok and hasattr(mem, "stream_key") and not (inplace or out is not None or mem.host):
                learn(self.quick, self.memory, self.launch, arrays, mem, call, k, shape, args)
        return call.returned()
