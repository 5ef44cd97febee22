"""The float64 rope reference, written from the operator definition.

It reads the checked IR, never the plan or a template: pair maps, positions and frequencies are
derived again here, element by element, so that a planning or template bug cannot hide on both
sides of a comparison. Each form of forms/ names its formula here (`reference` in its row).
"""
from __future__ import annotations

import numpy as np

from ropegen import ir
from ropegen.ops.rope import forms
from ropegen.ops.rope import reference_frequencies as frequencies
from ropegen.ops import quant
from ropegen.ops.rmsnorm import reference as rms_reference


def _formula(name: str):
    """The formula a form's row names (a function of this module or of reference_frequencies)."""
    return globals()[name] if name in globals() else getattr(frequencies, name)


def _canonical(t: ir.Tensor, a: np.ndarray) -> np.ndarray:
    """[batch, seq, heads, head_dim] float64 view of a rotated tensor (tokens become batch 1)."""
    dims = t.dims
    a = np.asarray(a).astype(np.float64).reshape(tuple(_bound(a, t)))
    roles = [d.role for d in dims]
    if ir.Role.TOKENS in roles:
        order = [roles.index(ir.Role.TOKENS), roles.index(ir.Role.HEADS), roles.index(ir.Role.HEAD_DIM)]
        return a.transpose(order)[None]
    order = [roles.index(r) for r in (ir.Role.BATCH, ir.Role.SEQ, ir.Role.HEADS, ir.Role.HEAD_DIM)]
    return a.transpose(order)


def _bound(a: np.ndarray, t: ir.Tensor) -> list[int]:
    """The un-merged shape of `a` (merged axes split into their parts)."""
    out = []
    for ax, n in zip(t.axes, a.shape):
        if len(ax.parts) == 1:
            out.append(n)
        else:
            out.extend(int(p.size) for p in ax.parts)
    return out


def _from_canonical(t: ir.Tensor, c: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    roles = [d.role for d in t.dims]
    if ir.Role.TOKENS in roles:
        c = c[0]
        order = [roles.index(ir.Role.TOKENS), roles.index(ir.Role.HEADS), roles.index(ir.Role.HEAD_DIM)]
    else:
        order = [roles.index(r) for r in (ir.Role.BATCH, ir.Role.SEQ, ir.Role.HEADS, ir.Role.HEAD_DIM)]
    return c.transpose(np.argsort(order)).reshape(shape)


def pair_list(op: ir.RopeOp, width: int, per_element: bool = False) -> list[tuple[int, int, int, int, int]]:
    """(a, b, column for a, column for b, position stream) for every pair of one head of `width`.

    `per_element`: a full-width cos/sin table, where element e reads column e (HF's cat and
    repeat_interleave caches); otherwise pair j reads column j.
    """
    p, r = op.pairing, op.rotary_dim
    pairs = []
    if p.kind is ir.PairKind.NEOX:
        pairs = [(j, j + r // 2, j, j + r // 2 if per_element else j, 0) for j in range(r // 2)]
    elif p.kind is ir.PairKind.GPTJ:
        pairs = [(2 * j, 2 * j + 1, 2 * j if per_element else j, 2 * j + 1 if per_element else j, 0)
                 for j in range(r // 2)]
    elif p.kind is ir.PairKind.GLM2D:
        half = r // 2
        for k in range(2):
            off = k * half
            for j in range(half // 2):
                if p.inner is ir.PairKind.NEOX:
                    pairs.append((off + j, off + j + half // 2, j, j, k))
                else:
                    pairs.append((off + 2 * j, off + 2 * j + 1, j, j, k))
    else:
        # ATB: the rotation unit is the table width W; t = W / coeff
        t = width // p.coeff
        for k in range(p.coeff // 2):
            for j in range(t):
                a = 2 * t * k + j
                pairs.append((a, a + t, a, a + t, 0))
    if op.rotary_start:      # a rotary window: the pairs sit rotary_start elements into the head
        pairs = [(a + op.rotary_start, b + op.rotary_start, ca, cb, k) for a, b, ca, cb, k in pairs]
    if op.positions.kind is ir.PositionKind.MROPE:    # pair j rotates with the positions of its section
        owner = mrope_pair_streams(op.positions, len(pairs))
        pairs = [(a, b, ca, cb, owner[j]) for j, (a, b, ca, cb, _) in enumerate(pairs)]
    return pairs


def full_width_table(op: ir.RopeOp) -> bool:
    """A cos/sin table as wide as the rotary dims (neox / gptj): each element reads its own column."""
    a = op.angles
    return (forms.angles_of(a).tables and op.pairing.kind in (ir.PairKind.NEOX, ir.PairKind.GPTJ)
            and op.tensor(a.cos).axes[-1].size - a.sin_column == op.rotary_dim)


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def by_token(op: ir.RopeOp, a: np.ndarray, B: int, S: int) -> np.ndarray:
    """A per-token array (positions, or a table with one row per token) as [B, S, ...].

    Such an array is declared with the token dims of the first rotated tensor in its memory order
    ([batch, seq], [seq, batch] or [tokens]); its axes are found by their labels.
    """
    roles = [d.role for d in op.rotated[0].token_dims]
    a = np.asarray(a)
    if roles == [ir.Role.TOKENS]:
        return a.reshape((1, S) + a.shape[1:])
    size = {ir.Role.BATCH: B, ir.Role.SEQ: S}
    a = a.reshape(tuple(size[r] for r in roles) + a.shape[len(roles):])
    return np.moveaxis(a, [roles.index(ir.Role.BATCH), roles.index(ir.Role.SEQ)], [0, 1])


def mrope_pair_streams(pos: ir.Positions, n_pairs: int) -> list[int]:
    """The stream of each pair as transformers builds M-RoPE's cos: Qwen2-VL splits the half-width
    frequencies by `mrope_section` (chunk i from stream i % 3); Qwen3-VL's apply_interleaved_mrope
    starts from stream 0 and gives stream k the pairs k, k + 3, ... below 3 * section[k]."""
    n = len(pos.sections)
    if pos.interleaved:
        owner = [0] * n_pairs
        for k in range(1, n):
            for j in range(k, min(n * pos.sections[k], n_pairs), n):
                owner[j] = k
        return owner
    return [k for k, size in enumerate(pos.sections) for _ in range(size)]


def _fits(*values: int) -> bool:
    return all(INT64_MIN <= v <= INT64_MAX for v in values)


def position_streams(op: ir.RopeOp, arrays: dict[str, np.ndarray], B: int, S: int) -> list[np.ndarray]:
    """Each position stream as [B, S] int64, from the operator's definition.

    arange / glm2d positions are integers: every formula of their definition (every branch, for
    every token) must fit in int64, else ValueError; nothing wraps around.
    """
    return _formula(forms.position_of(op.positions).reference)(op, arrays, B, S)


def _scalar(v, arrays) -> int:
    return int(v) if isinstance(v, int) else int(np.asarray(arrays[v]).reshape(()))


def _start_pad(op: ir.RopeOp, arrays, B: int) -> tuple[int, list[int]]:
    # Python integers: no arithmetic on them can wrap
    pos = op.positions
    pad = [0] * B if pos.pad is None else [int(v) for v in np.asarray(arrays[pos.pad]).astype(np.int64)]
    return _scalar(pos.start, arrays), pad


def mrope_positions(op, arrays, B, S):
    p = np.asarray(arrays[op.positions.ids]).astype(np.int64)
    return [by_token(op, p[k], B, S) for k in range(len(op.positions.sections))]


def id_positions(op, arrays, B, S):
    return [by_token(op, np.asarray(arrays[op.positions.ids]).astype(np.int64), B, S)]


def token_positions(op, arrays, B, S):
    return [np.arange(B * S).reshape(B, S)]


def in_sequence_positions(op, arrays, B, S):
    v = np.asarray(arrays[op.sequences]).astype(np.int64)
    if op.sequences_indptr:       # offsets: 0 first, then each sequence's end
        if v.size == 0 or v[0] != 0:
            raise ValueError(f"indptr {v.tolist()} must start at 0")
        v = np.diff(v)
    lens = [int(n) for n in v]
    if any(n < 0 for n in lens) or sum(lens) != S:
        raise ValueError(f"sequence lengths {lens} must be >= 0 and sum to the {S} packed tokens")
    offsets = [0] * len(lens)
    if op.positions.offsets:      # the position of each sequence's first token
        offsets = [int(o) for o in np.asarray(arrays[op.positions.offsets]).astype(np.int64)]
        if len(offsets) != len(lens):
            raise ValueError(f"{len(offsets)} offsets for {len(lens)} sequences")
        if not _fits(*(o + max(n - 1, 0) for o, n in zip(offsets, lens))):
            raise ValueError("offset + index overflows int64")
    out = np.empty(S, dtype=np.int64)
    t = 0
    for n, o in zip(lens, offsets):
        for i in range(int(n)):
            out[t] = o + i
            t += 1
    return [out.reshape(1, S)]


def arange_positions(op, arrays, B, S):
    start, pad = _start_pad(op, arrays, B)
    for b in range(B):
        for s in range(S):
            if not _fits(start + s, start + s - pad[b]):
                raise ValueError(f"position arithmetic overflows int64: start {start} + {s} - pad {pad[b]}")
    return [np.array([[start + s - pad[b] for s in range(S)] for b in range(B)], dtype=np.int64)]


def glm2d_positions(op, arrays, B, S):
    """GLM-1 2-D positions, as written in the ppl Rotary2DPositionEmbedding definition."""
    start, pad = _start_pad(op, arrays, B)
    first = _scalar(op.positions.first_seqlen, arrays)
    p0 = np.zeros((B, S), dtype=np.int64)
    p1 = np.zeros((B, S), dtype=np.int64)
    for b in range(B):
        prompt_len = first - pad[b]
        for s in range(S):
            offset = start + s
            if not _fits(offset, first - 1, prompt_len, prompt_len - 2, offset - pad[b],
                         offset - prompt_len, offset - prompt_len + 2):
                raise ValueError(f"position arithmetic overflows int64: glm2d start {start} + {s}, "
                                 f"pad {pad[b]}, first_seqlen {first}")
            if offset < pad[b]:
                p0[b, s], p1[b, s] = 0, 0
            elif offset < first - 1:
                p0[b, s], p1[b, s] = offset - pad[b], 0
            else:
                p0[b, s], p1[b, s] = prompt_len - 2, offset - prompt_len + 2
    return [p0, p1]


# ---------------------------------------------------------------------------------------------
# frequencies: the base formula, then each scaling form's (named by its row)

def inverse_frequencies(op: ir.RopeOp, n: int, length: int = 0) -> tuple[np.ndarray, float]:
    """Exact-mode inverse frequencies (float64) and the magnitude factor, from the formulas;
    `length`: max(position) + 1 of the call or sequence (the forms whose frequencies depend on it)."""
    a = op.angles
    assert isinstance(a, ir.ComputedAngles)
    d = op.rotary_dim // 2 if op.pairing.kind is ir.PairKind.GLM2D else op.rotary_dim
    inv = np.array([a.base ** (-(2.0 * i) / d) for i in range(n)])
    row = forms.scaling_of(a.scaling)
    extra = {} if row.length_key is None else {"length": length}
    return _formula(row.reference)(inv, a.magnitude, a.scaling, d, a.base, n, **extra)


def token_lengths(op: ir.RopeOp, arrays, streams, B: int, S: int) -> np.ndarray:
    """[B, S]: the length each token's frequencies are chosen by, max(position) + 1 over the call
    (Hugging Face: `torch.max(position_ids) + 1` per forward), or over the token's own packed
    sequence when positions are counted in sequences."""
    if op.positions.kind is ir.PositionKind.IN_SEQUENCE:
        p = streams[0][0]
        v = np.asarray(arrays[op.sequences]).astype(np.int64)
        lens = np.diff(v) if op.sequences_indptr else v
        out = np.zeros((1, S), dtype=object)
        t = 0
        for n in lens:
            out[0, t:t + n] = int(p[t + n - 1]) + 1 if n else 0    # a sequence's last token is its largest
            t += n
        return out
    top = max((int(p.max()) for p in streams if p.size), default=-1)
    return np.full((B, S), top + 1, dtype=object)


def _ggml_cos_sin(op: ir.RopeOp, p: np.ndarray, n: int, ff: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """ggml's rope_cache_init / rope_yarn angle numerics in float32; trig in float64."""
    f32 = np.float32
    a = op.angles
    d = op.rotary_dim // 2 if op.pairing.kind is ir.PairKind.GLM2D else op.rotary_dim
    fs, ext, attn, low, high = _formula(forms.scaling_of(a.scaling).ggml_reference)(a.scaling, d, a.base)
    # ggml's powf(base, -2.0f/n_dims): the float32 exponent, the power correctly rounded to float32
    theta_scale = f32(float(f32(a.base)) ** float(f32(-2.0) / f32(d)))
    mscale = attn
    if ext != 0:
        mscale = f32(mscale * (f32(1) + f32(0.1) * np.log(f32(1) / fs, dtype=f32)))
    mscale = float(mscale) * a.magnitude
    theta = p.astype(f32)
    cos = np.empty(p.shape + (n,))
    sin = np.empty(p.shape + (n,))
    for i in range(n):
        te = theta if ff is None else (theta / f32(ff[i])).astype(f32)
        ti = (fs * te).astype(f32)
        th = ti
        if ext != 0:
            y = (f32(i) - f32(low)) / max(f32(0.001), f32(high) - f32(low))
            ramp = f32(f32(1) - min(f32(1), max(f32(0), f32(y)))) * ext
            th = (ti * (f32(1) - ramp) + te * ramp).astype(f32)
        cos[..., i] = np.cos(th.astype(np.float64)) * mscale
        sin[..., i] = np.sin(th.astype(np.float64)) * mscale
        theta = (theta * theta_scale).astype(f32)
    return cos, sin


def table_cos_sin(op: ir.RopeOp, arrays, streams, B: int, S: int, head_dim: int):
    """cos/sin per stream from the tables, and the rotation unit (a table's width for block pairing)."""
    a = op.angles
    cos_t = np.asarray(arrays[a.cos]).astype(np.float64)
    sin_t = np.asarray(arrays[a.sin]).astype(np.float64)
    if a.sin_column:      # one cos_sin cache: cos in its first half, sin in its second
        cos_t, sin_t = cos_t[..., :a.sin_column], sin_t[..., a.sin_column:]
    width = cos_t.shape[-1]
    if forms.position_of(op.positions).per_token:
        cs = [(by_token(op, cos_t, B, S), by_token(op, sin_t, B, S))]
    else:
        for p in streams:
            if p.size and (p.min() < 0 or p.max() >= cos_t.shape[0]):
                raise ValueError(f"position out of range for {cos_t.shape[0]} table rows")
        cs = [(cos_t[p], sin_t[p]) for p in streams]
    return cs, width if op.pairing.kind is ir.PairKind.BLOCK else head_dim


def computed_cos_sin(op: ir.RopeOp, arrays, streams, B: int, S: int, head_dim: int):
    """cos/sin per stream from the frequencies, in the operator's angle numerics (named by its row)."""
    a = op.angles
    n = op.rotary_dim // 4 if op.pairing.kind is ir.PairKind.GLM2D else op.rotary_dim // 2
    ff = None if a.freq_factors is None else np.asarray(arrays[a.freq_factors]).astype(np.float64)
    numerics = _formula(forms.numerics_of(op.numerics).reference)
    if forms.scaling_of(a.scaling).length_key is None:
        return [numerics(op, p, n, ff) for p in streams], head_dim
    lengths = token_lengths(op, arrays, streams, B, S)
    return [exact_cos_sin(op, p, n, ff, lengths) for p in streams], head_dim


def cos_sin_at(op: ir.RopeOp, p: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin of computed angles at positions `p` (columns < n, no freq_factors) in the operator's
    angle numerics: the cos/sin cache a peer that takes tables is given."""
    return _formula(forms.numerics_of(op.numerics).reference)(op, p, n, None)


def exact_cos_sin(op: ir.RopeOp, p: np.ndarray, n: int, ff: np.ndarray | None,
                  lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """theta = p * inv_freq (/ freq_factors) in float64, cos/sin scaled by the magnitude; `lengths`
    (per token): the frequencies of each token's length."""
    if lengths is None:
        inv, m = inverse_frequencies(op, n)
    else:
        inv, m = np.empty(p.shape + (n,)), 1.0
        for length in set(lengths.ravel().tolist()):
            inv[lengths == length], m = inverse_frequencies(op, n, length)
    theta = p[..., None].astype(np.float64) * inv
    if ff is not None:
        theta = theta / ff
    return np.cos(theta) * m, np.sin(theta) * m


def evaluate(op: ir.RopeOp, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs (float64) of `op` for the given inputs (by name)."""
    first = op.rotated[0]
    x0 = _canonical(first, arrays[first.name])
    B, S = x0.shape[0], x0.shape[1]
    streams = position_streams(op, arrays, B, S)
    head_dim = x0.shape[3]
    cs, unit = _formula(forms.angles_of(op.angles).reference)(op, arrays, streams, B, S, head_dim)
    sign = -1.0 if op.direction is ir.Direction.BACKWARD else 1.0
    pairs = pair_list(op, unit, full_width_table(op))
    out = {}
    for o in op.outputs:
        t = op.tensor(o.source)
        src = np.asarray(arrays[t.name])
        x = _canonical(t, src)
        if o.norm is not None:      # the head normalized first, stored in t's type as the model does
            w = np.asarray(arrays[o.norm.weight]).astype(np.float64) + o.norm.weight_offset
            axes = (-2, -1) if o.norm.over_heads else (-1,)     # [b, s, h, d]: over the token's heads, or each
            x = rms_reference.normalize(x, w, o.norm.epsilon, o.norm.cast, t.dtype, axes)
            x = x.astype(t.dtype.np_dtype).astype(np.float64)
        y = x.copy()
        if o.rotate:
            for u in range(0, head_dim, unit):
                for (ea, eb, ca, cb, k) in pairs:
                    cos, sin = cs[k]
                    xa, xb = x[:, :, :, u + ea], x[:, :, :, u + eb]
                    y[:, :, :, u + ea] = xa * cos[:, :, None, ca] - xb * sin[:, :, None, ca] * sign
                    y[:, :, :, u + eb] = xb * cos[:, :, None, cb] + xa * sin[:, :, None, cb] * sign
        if op.quant_scales:     # fp8: the rotated value times its scale (per tensor or per head), saturated
            scale = np.asarray(arrays[op.quant_scales[op.outputs.index(o)]]).astype(np.float64)
            y = quant.quantized(y, scale.reshape(1, 1, -1, 1) if scale.size > 1 else scale.reshape(()),
                                op.out_dtype)
        out[o.name] = _from_canonical(t, y, src.shape)
    return out


def tolerance_dtype(op: ir.RopeOp):
    """The storage type of the rotated tensors (an fp8 output's type, when quantized) bounds the error
    of a kernel against this reference."""
    return op.out_dtype or op.rotated[0].dtype
