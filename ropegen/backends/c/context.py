"""The C render context: the plain values templates/c prints (identifiers, sizes, type and helper names
from backends/c/facts.py, preformatted literals, chunk sizes); the templates spell every statement."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropegen.backends.c import build as cbuild
from ropegen.backends.c import facts
from ropegen.backends.c.abi import function_name, rope_abi, words_function_name
from ropegen.backends.c.ctxbase import CHUNK_BYTES, FAR_BYTES, far_tokens, param_name, scalar_expr, size_expr, stream_min
from ropegen.backends.c.rms_context import rms_context
from ropegen.lower.abi import Param
from ropegen.lower.strides import token_dims
from ropegen.ops.plan import ExactAngles, GgmlAngles, RopePlan, TableAnglesPlan
from ropegen.ops.rope import forms
from ropegen.render import c_double, c_float


# ---- RoPE -----------------------------------------------------------------------------------

# a tensor's token axes, by token layout (lower/strides.py's canonical axes: packed tokens step along "s")
_TOKEN_AXES = {"t": ("s",), "bs": ("b", "s")}


def _token_strides(p: RopePlan, params: list[Param], tensor: str) -> dict[str, str]:
    return {a: param_name(params, "stride", tensor, a) for a in _TOKEN_AXES[p.token_layout]}


def _exact(p: RopePlan, a: ExactAngles, arith: str, params: list[Param]) -> dict[str, Any]:
    return dict(inv_freq=[c_double(v) for v in a.inv_freq], cos_factor=c_double(a.magnitude),
                sin_factor=c_double(p.sin_sign * a.magnitude), load_angle=facts.load("f64", arith),
                table_by_position=False)


def _ggml(p: RopePlan, a: GgmlAngles, arith: str, params: list[Param]) -> dict[str, Any]:
    return dict(theta_scale=c_float(a.theta_scale), freq_scale=c_float(a.freq_scale),
                ramp=[c_float(v) for v in a.ramp], one_minus_ramp=[c_float(v) for v in a.one_minus_ramp],
                yarn=a.yarn, cos_factor=c_double(a.mscale), sin_factor=c_double(p.sin_sign * a.mscale),
                load_angle=facts.load("f64", arith), table_by_position=False)


def _table(p: RopePlan, a: TableAnglesPlan, arith: str, params: list[Param]) -> dict[str, Any]:
    return dict(cos=param_name(params, "in", a.cos), sin=param_name(params, "in", a.sin), table_t=facts.element(a.dtype),
                load_table=facts.load(a.dtype.name, arith), table_width=a.width,
                # elements per table row, and where sin starts in its row (a fused cos_sin cache: both)
                table_stride=a.width + a.sin_column, sin_shift=f" + {a.sin_column}" if a.sin_column else "",
                table_rows=None if a.per_token else size_expr(p.ir.tensor(a.cos).axes[0].size, params),
                table_by_position=not a.per_token,
                # rows picked by a positions input can lie anywhere in the table (decode, random
                # positions): the next token's rows are fetched while this one is rotated
                table_prefetch=not a.per_token and p.positions.kind.value == "ids" and p.token_order != "sb")


# planned angles' kind (the templates' angles_kind) -> (its values; freq_factors divide in this type)
_ANGLES: dict[str, tuple[Callable[..., dict[str, Any]], str]] = {
    "exact": (_exact, "f64"),
    "ggml": (_ggml, "f32"),
    "table": (_table, ""),
}


def rope_context(p: RopePlan) -> dict[str, Any]:
    params = rope_abi(p)
    arith = facts.arith_name(p.compute, p.compute_storage_rounding)
    tensors = {t.name: t for t in p.inputs}
    tokens = token_dims(p)

    streams = []
    for s in p.streams:
        t = tensors[s.src]
        streams.append(dict(
            out=param_name(params, "out", s.out), src=param_name(params, "in", s.src), rotate=s.rotate,
            src_strides=_token_strides(p, params, s.src), out_strides=_token_strides(p, params, s.out),
            src_head=param_name(params, "stride", s.src, "h"), out_head=param_name(params, "stride", s.out, "h"),
            heads=t.real_heads, split=t.unit_split, name=s.out, source=s.src,
            norm=_norm_context(p, s, params, len(streams)), **_stream_scale(p, params, len(streams))))

    pos = p.positions
    per_token = sum(t.real_heads * p.head_dim * t.dtype.itemsize for t in (tensors[s.src] for s in p.streams))
    kind = p.angles.kind
    angles, ff_arith = _ANGLES[kind]
    ff = getattr(p.angles, "freq_factors", None)
    ctx: dict[str, Any] = dict(
        fn=function_name(p), words_fn=words_function_name(p), guard=p.name.upper(), params=params,
        flags=cbuild.PINNED_FLAGS,
        # B and S: packed tokens are one batch row
        batch=1 if tokens.batch is None else size_expr(tokens.batch, params), seq=size_expr(tokens.seq, params),
        st=facts.element(p.storage), arith=arith, ct=facts.ARITH[arith],
        load_x=facts.load(p.storage.name, arith), store_y=facts.store(arith, p.storage.name),
        rnd=facts.ROUND[arith], streams=streams,
        positions_kind=pos.kind.value, offset_arith=forms.position_of(pos).offset_arith, symbol_params=[q for q in params if q.kind == "dim"],
        pointer_params=[q for q in params if q.kind in ("in", "out", "freq")],
        threads=param_name(params, "threads"),
        ids=param_name(params, "in", pos.ids) if pos.ids else "",
        start=scalar_expr(pos.start, params), pad=param_name(params, "in", pos.pad) if pos.pad else "",
        first_seqlen=scalar_expr(pos.first_seqlen, params),
        seqlen=param_name(params, "in", p.sequences) if p.sequences else "",
        nseq=size_expr(p.ir.tensor(p.sequences).axes[0].size, params) if p.sequences else None,
        indptr=p.ir.sequences_indptr,     # `sequences` holds offsets [N + 1], not lengths
        offsets=param_name(params, "in", pos.offsets) if pos.offsets else "",
        noffsets=size_expr(p.ir.tensor(pos.offsets).axes[0].size, params) if pos.offsets else None,
        sin_negate=p.sin_sign < 0,
        chunk_tokens=max(1, CHUNK_BYTES // max(1, per_token)),
        stream_min_tokens=stream_min(p.out_dtype or p.storage, per_token),
        far_tokens=far_tokens(per_token), far_kib=FAR_BYTES // 1024, prefetch_l2=True,
        angles_kind=kind,
        freq=param_name(params, "freq") if getattr(p.angles, "length_unit", None) else "",
        ff=param_name(params, "in", ff) if ff else "",
        ff_t=facts.element(tensors[ff].dtype) if ff else "",
        load_ff=facts.load(tensors[ff].dtype.name, ff_arith) if ff else "",
    )
    ctx.update(angles(p, p.angles, arith, params))
    ctx.update(_rope_quant(p, arith))
    ctx.update(_wide(p, arith, ctx["fp8"]))
    ctx.update(_lanes(p, arith, ctx["fp8"]))
    for s, plan_stream in zip(streams, p.streams):
        if s["norm"] is not None:
            s["norm"]["grid"] = _norm_grid(p, plan_stream.norm, ctx["wide"])
            # bf16's rounding without its NaN select, for rows where no NaN can arise (f16 has none)
            s["norm"]["grid_fast"] = "rg_grid_bf16_fast" if s["norm"]["grid"] == "rg_grid_bf16" else ""
            # vector variants: a head's squares summed from float (_inv_f), its float copy (grid) or the f32
            # head itself, not per token (OLMo 2's); the token's float copies kept for the rotation (keep_f)
            # when they fit 32 KiB, so that each head is converted once (Qwen3 bf16 q + k: 6% faster)
            s["norm"]["inv_f"] = (bool(s["norm"]["grid"]) or (p.storage.name, plan_stream.norm.stash.name) == ("f32", "f32")) \
                and not plan_stream.norm.over_heads
            s["norm"]["keep_f"] = bool(s["norm"]["grid"]) and s["norm"]["inv_f"] and s["heads"] * p.head_dim <= 8192
    norms = [s["norm"] for s in streams if s["norm"]]
    ctx.update(float_norm=any(n["inv_f"] or n["grid"] for n in norms))
    # the head of the first rotated stream at which the next token's angles are computed, where they are
    first = next((s for s in streams if s["rotate"]), None)
    ctx["angles_ahead"] = first is not None and _angles_ahead(p, ctx)
    for s in streams:
        s["ahead_at"] = s["heads"] // 2 if ctx["angles_ahead"] and s is first else None
    return ctx


def _angles_ahead(p: RopePlan, ctx: dict[str, Any]) -> bool:
    """Whether the vector variants compute the next token's angles halfway through this token's first
    rotated stream (templates/c/rope.c.j2), where a token's reads are under way, instead of at its start,
    when nothing is read: f32 heads only, whose rotation leaves the core idle waiting on memory (llama3
    q + k, T = 4096 / 16384 from memory, C harness, both builds alternated in both orders, Cascade Lake:
    in place 0.3-3 % faster at the medians of three series, up to 10 % in a round; out of place 0-1 %;
    bench/results/angles_ahead_s21). f16 and bf16 heads, which keep the core busy converting, measured
    0-5 % slower so (bf16 again after the staged sin / cos of s22: AVX2 1.7 % slower in place, 2.9 %
    out of place; AVX-512 1.6 % faster in place, 3 % slower out of place). The next token's position
    must be its own in the positions input (ids, tokens in order), one position stream, angles computed
    per call."""
    return (ctx["angles_kind"] in ("exact", "ggml") and getattr(p.angles, "length_unit", None) != "sequence"
            and ctx["positions_kind"] == "ids" and p.token_order != "sb" and p.n_streams == 1
            and p.storage.name == "f32" and (p.out_dtype is None or p.out_dtype.name == "f32") and not ctx["fp8"])


def _norm_grid(p: RopePlan, n, wide: str) -> str:
    """The float path of a normalized stream in the vector variants (templates/c/_head_norm.inc.j2): the
    rounding onto x's grid in float lanes, where the head is rotated in float (`wide`) and the norm's
    stash and product are float, so that its float copy holds exactly the values it sums and scales;
    '' keeps the storage round trip."""
    if not wide or (n.stash.name, n.product.name) != ("f32", "f32"):
        return ""
    return {"bf16": "rg_grid_bf16", "f16": "rg_grid_f16"}[wide]


def _wide(p: RopePlan, arith: str, fp8: bool) -> dict[str, Any]:
    """f16 and bf16 storage rotated in float: the AVX2 / AVX-512 variants convert whole runs with
    vector instructions (F16C for f16; a shift in, an integer round to nearest even out for bf16),
    because GCC does not vectorise the software conversions, and each unit's rotated ranges are
    converted back (the passthrough elements are copied as raw bits): wide_ranges, (first, count)
    within a unit. `wide` names the storage type ('' where the kernel prints as before)."""
    if p.storage.name not in ("f16", "bf16") or fp8 or arith not in ("f32", p.storage.name + "r"):
        return dict(wide="")
    ranges, at = [], 0
    for lo, hi in sorted(p.passthrough):
        if lo > at:
            ranges.append((at, lo))
        at = max(at, hi)
    if at < p.unit:
        ranges.append((at, p.unit))
    return dict(wide=p.storage.name, wide_ranges=[(lo, hi - lo) for lo, hi in ranges],   # (first, count)
                # the rotated ranges' conversion: bf16's checks for NaN once per run (rope.c.j2)
                wide_out="rg_bf16_out_fast" if p.storage.name == "bf16" else "rg_f16_out",
                # compute = storage: each product and sum rounded in 32-bit lanes (vectorises), not
                # through uint16_t (rg_round_*); the same bits
                wide_rnd=facts.GRID.get(arith, ""),
                wide_passthrough=[(lo, hi - lo) for lo, hi in sorted(p.passthrough)])


def _lanes(p: RopePlan, arith: str, fp8: bool) -> dict[str, Any]:
    """The vector pair path of the AVX2 / AVX-512 variants (rope.c.j2): where every block pairs runs of
    consecutive elements (neox) or neighbours (2j, 2j + 1: interleaved, through two permutations) with
    consecutive columns, a run of pairs is loaded (and converted) straight into vector registers,
    rotated there and stored (converted, non-temporal when streaming) straight to the output, instead of
    through a float copy of the head and a store buffer: the loads and the non-temporal stores
    interleave, which is what lets an out-of-place call approach a copy's speed. Float arithmetic, or
    compute = storage with each product and sum rounded to the storage grid in the lanes (rnd: F16C, or
    bf16's carry form; the wide loop's rounding, facts.GRID). Interleaved pairs take consecutive
    columns, or columns 2j, 2j + 1 (col2). The same bits as the scalar loop: each
    lane computes the scalar formula. lanes: variant -> its
    vector width, type and helpers (_dispatch.inc.j2); a variant whose width does not divide every
    block's count is absent (its loops stay as they were)."""
    def columns(b) -> bool:
        return b.ca_step == 1 and (b.same_columns or b.cb_step == 1)

    def column_pairs(b) -> bool:
        # a table written per element (HF GPT-J's repeat_interleave): pair j's columns 2j, 2j + 1,
        # dealt into even / odd lanes as the pair is
        return b.ca_step == 2 and b.cb_step == 2 and b.cb0 == b.ca0 + 1

    def interleaved(b) -> bool:
        return b.a_step == 2 and b.b_step == 2 and b.b0 == b.a0 + 1

    runs = all(b.a_step == 1 and b.b_step == 1 and columns(b) for b in p.blocks)
    col2 = all(interleaved(b) and column_pairs(b) for b in p.blocks)
    woven = col2 or all(interleaved(b) and columns(b) for b in p.blocks)
    t = p.storage.name
    rounded = arith in facts.VGRID and arith == f"{t}r"    # compute = storage: rounded in the lanes
    if fp8 or not (arith == "f32" or rounded) or t not in ("f32", "f16", "bf16") or not (runs or woven):
        return dict(lanes={}, lanes_t="", lanes_interleaved=False, bf16_isa=False, bf16_isa_std=False)

    def dealt(width: int) -> bool:
        # bf16 runs, two registers of pairs a step: loaded and stored whole, the even and odd values
        # split between the halves of the 32-bit lanes (rg_vldd_bf16_*), columns dealt to match
        step = 2 * width
        return t == "bf16" and runs and p.n_cols % step == 0 and all(
            b.count % step == 0 and b.ca0 % step == 0 and b.same_columns for b in p.blocks)

    # interleaved bf16 pairs already lie in the halves of 32-bit lanes: dealt, not permuted
    split = "d" if t == "bf16" else "2"

    def group(width: int, deal: bool) -> list[tuple[str, str]]:
        # f32 / f16 runs, and bf16 runs dealt, whose store is under a 64-byte line: as many stores a step
        # as fill one, stored one after another (a write-combining buffer filled at once): suffix, element
        # offset. A dealt store holds two registers' values; its members are suffixed _1, _2, ... (the
        # dealt registers' own suffixes are "" and "1").
        n = 2 * width if deal else width
        g = 64 // (n * p.storage.itemsize) if runs and (deal or t != "bf16") else 1
        ok = g > 1 and not any(b.count % (g * n) for b in p.blocks)
        suffix = "_{}" if deal else "{}"
        return [(suffix.format(h) if h else "", f" + {h * n}" if h else "") for h in range(g)] if ok else []

    def on_16(width: int) -> bool:
        # f16 runs in eight lanes: every store a multiple of 16 bytes into the head (blocks, units), so a
        # head that is 16-byte aligned (rg_nt) needs no test of each store's address (rg_vsta_f16_avx2)
        return t == "f16" and width == 8 and runs and p.unit % width == 0 and all(
            b.a0 % width == 0 and b.b0 % width == 0 for b in p.blocks)

    def form(isa: str, width: int) -> dict[str, Any]:
        deal = dealt(width)
        grp = group(width, deal)
        st = f"rg_vsta_{t}_{isa}" if on_16(width) else f"rg_vst_{t}_{isa}"
        return dict(w=width, t={8: "__m256", 16: "__m512"}[width], ld=f"rg_vld_{t}_{isa}",
                    st=st, stp=f"rg_vstp_{t}_{isa}", paired=t == "bf16", group=grp,
                    col=f"rg_vld_f32_{isa}", ld2=f"rg_vld{split}_{t}_{isa}", st2=f"rg_vst{split}_{t}_{isa}",
                    pairs="runs" if runs else "interleaved", deal=deal, member=(2 if deal else 1) * width,
                    step=(2 if deal else 1) * max(1, len(grp)) * width,
                    regs=[r for m, _ in grp or [("", "")] for r in ([m, "1" + m] if deal else [m])],
                    ldd=f"rg_vldd_{t}_{isa}", std=f"rg_vstd_{t}_{isa}", col2=f"rg_vld2_cols_{isa}" if col2 else "",
                    rnd=facts.VGRID[arith].format(isa=isa) if rounded else "", nt_mask=nt_mask(width))

    def nt_mask(width: int) -> int:
        # The address bits a head must have clear to be streamed straight from the registers (rg_nt);
        # otherwise it goes through the head buffer and a streamed copy, whose stores are whole lines but
        # at the head's ends. f32 streams straight only from a head aligned to its vector stores: an out=
        # array 16 bytes into a line (NumPy's own) split every store (llama3 f32 q + k, T = 4096 from
        # memory, one thread, C harness: AVX-512 11.4-12.5 -> 9.6-10.5 ms, AVX2 11.7-12.2 -> 10.4-11.3;
        # 7.9-8.1 on a line). bf16 and f16, bound by their compute, keep streaming straight from 16-byte
        # aligned heads (AVX2 bf16 through the buffer: 6.7 -> 7.0 ms). In place every type streams
        # straight from 16-byte aligned heads: f32 through the buffer there measured 5.8 -> 7.9 ms.
        return width * 4 - 1 if t == "f32" else 15

    def divides(width: int) -> bool:
        return all(b.count % width == 0 for b in p.blocks)

    lanes = {}
    if divides(8):
        lanes["rg_run_avx2"] = form("avx2", 8)
        # AVX-512 runs eight lanes (the AVX2 forms) where sixteen do not divide every block
        lanes["rg_run_avx512"] = form("avx512", 16) if divides(16) else form("avx2", 8)
    # bf16 pairs stored dealt from sixteen lanes (runs dealt, or interleaved pairs) get the AVX512-BF16
    # variant, the AVX-512 form with each store rounded by vcvtne2ps2bf16 (rg_vstd_bf16_avx512bf16)
    wide16 = lanes.get("rg_run_avx512", {}).get("w") == 16
    bf16_isa = t == "bf16" and wide16 and (lanes["rg_run_avx512"]["deal"] or not runs)
    if bf16_isa:
        # (bf16's dealt store serves runs (std) and interleaved pairs (st2) alike)
        store = "rg_vstd_bf16_avx512bf16"
        lanes["rg_run_avx512bf16"] = dict(lanes["rg_run_avx512"], std=store, st2=store)
    # bf16_isa: the fourth variant (_host.inc.j2, as RMSNorm's bf16 rows have it); bf16_isa_std: its
    # store helper (_dispatch.inc.j2), which only RoPE's lanes call
    return dict(lanes=lanes, lanes_t=t if lanes else "", lanes_interleaved=bool(lanes) and not runs,
                lanes_elem=facts.element(p.storage), bf16_isa=bf16_isa, bf16_isa_std=bf16_isa)


def _rope_quant(p: RopePlan, arith: str) -> dict[str, Any]:
    """fp8 outputs: their C type, and the product with the scale and its rounding (ops/quant.py)."""
    if p.out_dtype is None:
        return dict(fp8=False, ot=facts.element(p.storage))
    qarith = facts.quant_arith(arith)
    return dict(fp8=True, ot=facts.element(p.out_dtype), qt=facts.ARITH[qarith],
                load_qs=facts.load("f32", qarith), store_q=facts.store(qarith, p.out_dtype.name))


def _stream_scale(p: RopePlan, params: list[Param], k: int) -> dict[str, Any]:
    """Stream k's fp8 scale input and the index read from it (the head for a per-head scale)."""
    if not p.quant_scales:
        return {}
    name = p.quant_scales[k]
    per_head = p.ir.tensor(name).axes[0].size != 1
    return dict(qscale=param_name(params, "in", name), qscale_at="rg_h" if per_head else "0")


def _norm_context(p: RopePlan, s, params: list[Param], k: int) -> dict[str, Any] | None:
    """The C words of a stream's per-head rmsnorm (templates/c/_head_norm.inc.j2); None without one."""
    n = s.norm
    if n is None:
        return None
    s_heads = next(t for t in p.inputs if t.name == s.src).real_heads
    st, stash, prod = p.storage.name, n.stash.name, n.product.name
    return dict(
        fn=f"rg_head_norm{k}", src=s.src, weight=param_name(params, "in", n.weight), weight_name=n.weight,
        wt=facts.element(n.weight_dtype), storage=st, stash_t=facts.ARITH[stash], prod_t=facts.ARITH[prod],
        load_stash=facts.load(st, stash), store_stash=facts.store(stash, st), load_prod=facts.load(st, prod),
        load_w=facts.load(n.weight_dtype.name, prod), store_prod=facts.store(prod, st), sqrt=facts.SQRT[stash],
        n_literal=facts.LITERAL[stash](float(p.head_dim * (s_heads if n.over_heads else 1))),
        epsilon=facts.LITERAL[stash](n.epsilon_stash), summed=s_heads if n.over_heads else 1, over_heads=n.over_heads,
        offset=facts.LITERAL[prod](n.weight_offset) if n.weight_offset else "",
        before_scale=n.cast == "before_scale", tail=p.head_dim // 16 * 16)


# operator kind -> its render context
CONTEXTS = {"rope": rope_context, "rmsnorm": rms_context}


def context(plan) -> dict[str, Any]:
    """The render context of any plan, by its operator kind."""
    return CONTEXTS[plan.kind](plan)
