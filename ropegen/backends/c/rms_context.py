"""The C render context of an RMSNorm plan (templates/c/rmsnorm.c.j2): types, conversion helpers, the
summation's blocks and tree, the vector row loops of each instruction-set variant, preformatted
literals; the template spells every statement."""
from __future__ import annotations

from typing import Any

from ropegen.backends.c import build as cbuild
from ropegen.backends.c import facts
from ropegen.backends.c.abi import function_name, rms_abi, words_function_name
from ropegen.backends.c.ctxbase import CHUNK_BYTES, param_name, size_expr, stream_min
from ropegen.ops.plan import RmsNormPlan


def rms_product_name(p: RmsNormPlan) -> str:
    return p.product.name


def _halvings(n: int) -> list[int]:
    """The widths of a pairwise tree over n (a power of two) partial sums: n/2, n/4, ..., 1."""
    return [n >> k for k in range(1, n.bit_length())]


def _rms_block(lanes: int, n: int) -> int:
    """Elements per summation block: 64 vectors, or for a shorter row the whole multiple of the four
    accumulators' width in it, so that a row of 128 is summed by the vector loop rather than the
    scalar tail. The bits do not change: a row shorter than 64 vectors is one block, whose sums join
    totals that are still zero (exactly), then the tail, in the order the tail alone would take."""
    sums = 4 * lanes
    return min(lanes * 64, max(sums, n // sums * sums))


# rows from which a bf16 call's AVX2 variant deals its scale for its dealt step (rmsnorm.c.j2). A row
# of 4096 gains about 0.06 us from that step (16 rows in cache, the whole call: 23.3 -> 22.3 us); a
# deal on every call, by a loop without AVX2, cost a one-row call 0.2-0.5 us (3.0-3.1 -> 3.2-3.6 us).
# rg_deal_scale_avx2 costs less, but below a few rows it still does not pay
DEAL_ROWS = 8

# the dealt steps' rounding by Veltkamp's split (rmsnorm.c.j2, rg_vsplit_bf16_*): c = v * (2^16 + 1),
# exact in float for every v it rounds; and the largest magnitude it rounds right, below 2^SPLIT_LOG2
SPLIT_C = 65537.0
SPLIT_LOG2 = 111


def split_scale_log2(n: int) -> int:
    """The scale bound (a power of two, its exponent) under which the AVX2 and AVX-512 dealt steps'
    products stay below 2^SPLIT_LOG2, where their split rounds them. A normalized value is at most sqrt(n) in magnitude
    but for a few roundings (the row's float sum is at least each square: adding a non-negative term in
    round-to-nearest never lowers it), and at most 2^-8 more once rounded to bf16: so 2^k >= 1.01 sqrt(n),
    the smallest such k taken, bounds it, and a scale below 2^(SPLIT_LOG2 - k) keeps every product below
    2^SPLIT_LOG2. Integer arithmetic: 4^k * 100 >= 102.01 n."""
    k = 0
    while 4 ** k * 10000 < 10201 * n:
        k += 1
    return SPLIT_LOG2 - k

# the row loop's variants (templates/c/_host.inc.j2)
VARIANTS = ("rg_run_base", "rg_run_avx2", "rg_run_avx512", "rg_run_avx512bf16")


def _rms_vectors(p: RmsNormPlan, stash: str, product: str, norm_carry: bool) -> dict[str, Any]:
    """The vector row loop of the AVX2 / AVX-512 variants (rmsnorm.c.j2): x loaded (and converted) into
    vector registers, normalized, scaled, and y stored (converted, non-temporal when streaming) straight to
    the output, two vectors at a time, instead of through the piece buffer and a streaming copy. f32 rows
    in every row path; bf16 rows in the fast one only, which has no NaN, so that the normalized value's
    rounding is the carry form on each lane. Each lane computes the scalar formula: the same bits.
    rms_vec_fast / rms_vec_exact: variant -> its form, for the fast and the exact row loop. bf16 rows also
    get the AVX512-BF16 variant (`bf16_isa`; its step `rg_vrms_bf16`), dealt AVX2 and AVX-512 steps whose
    scale is dealt once per call (`deal_w`; `rg_vrms_bf16_avx2` / `_avx512`), rounding by the split in the
    row loops of `split_runs`, and a row sum in registers (`vsum`; rms_sum: variant -> the function summing
    its rows' squares). rms_fuse: variant -> the form whose row's y is computed in the loop that sums the
    next row."""
    t = p.x.name
    if (p.residual or p.quant_scale or (stash, product) != ("f32", "f32") or p.y.name != t
            or t not in ("f32", "bf16")):
        return dict(rms_vec={}, rms_vec_fast={}, rms_vec_exact={}, bf16_isa=False, vsum=False,
                    rms_sum=dict.fromkeys(VARIANTS, "rg_sum_squares"), rms_fuse={}, prefetch_l2=False,
                    exact_piece_prefetch=[], deal_w=False, split_runs=[], fuse_over=False)

    def form(isa: str, width: int) -> dict[str, Any]:
        return dict(w=width, w2=2 * width, t={8: "__m256", 16: "__m512"}[width],
                    set1={8: "_mm256_set1_ps", 16: "_mm512_set1_ps"}[width],
                    ld_x=f"rg_vld_{t}_{isa}", ld_w=f"rg_vld_f32_{isa}", step_args="",
                    # bf16 rows take the vector loop on the fast path only, which has no NaN
                    stp=f"rg_vstp_nonan_bf16_{isa}" if t == "bf16" else f"rg_vstp_{t}_{isa}",
                    grid=f"rg_vgrid_bf16_{isa}" if norm_carry else f"rg_vsame_{isa}", step="")
    forms = {"rg_run_avx2": form("avx2", 8), "rg_run_avx512": form("avx512", 16)}
    sums = dict.fromkeys(VARIANTS, "rg_sum_squares")
    if t == "bf16":     # the AVX512-BF16 variant: a step of 32 by rg_vrms_bf16 (rmsnorm.c.j2)
        forms["rg_run_avx512bf16"] = dict(form("avx512", 16), step="rg_vrms_bf16")
        # AVX2: a dealt step of 16 (rg_vrms_bf16_avx2), whose scale rg_w carries dealt as well (deal_w)
        # and AVX-512: a step of 32 (rg_vrms_bf16_avx512), its scale dealt likewise. Each has its
        # natural-order form (`plain`, for calls whose scale is not dealt); its dealt form rounds by the split
        # (before the scale too where the plan rounds there: `split`), or, where a call or a thread may not
        # split and for a row done again, by the carry form (`fallback`: AVX2 dealt, AVX-512 in natural
        # order); `split2_nt` two split steps (`w4` elements) with aligned stores (`split_align`: the
        # address mask)
        for isa, name, align, fallback in (("avx2", "rg_run_avx2", "31u", "RG_DEALT"),
                                           ("avx512", "rg_run_avx512", "63u", "RG_NATURAL")):
            forms[name] = dict(forms[name], step=f"rg_vrms_bf16_{isa}", step_args=", rg_d", plain=forms[name],
                               split=f"rg_vsplit_bf16_{isa}" if norm_carry else f"rg_vsame_{isa}",
                               split2_nt=f"rg_vrms_split2_nt_{isa}", w4=4 * forms[name]["w"], split_align=align,
                               fallback=fallback)
        # every vector variant sums a row's blocks in registers (rg_vsum_squares_bf16[_avx2])
        sums.update(rg_run_avx2="rg_vsum_squares_bf16_avx2", rg_run_avx512="rg_vsum_squares_bf16",
                    rg_run_avx512bf16="rg_vsum_squares_bf16")
    return dict(rms_vec=forms, rms_vec_fast=forms if t == "bf16" else {},
                rms_vec_exact=forms if t == "f32" else {}, lanes_t=t, lanes_elem=facts.element(p.x),
                bf16_isa=t == "bf16", vsum=t == "bf16", rms_sum=sums, prefetch_l2=True, deal_w=t == "bf16",
                deal_rows=DEAL_ROWS,
                # the variants whose dealt step rounds by the split, and so test the denormal flag
                split_runs=["rg_run_avx2", "rg_run_avx512"] if t == "bf16" else [],
                split_c=facts.LITERAL["f32"](SPLIT_C),
                split_w_log2=(w_log2 := split_scale_log2(p.norm_size)),
                split_w_max=facts.LITERAL["f32"](2.0 ** w_log2),
                # the vector row loops that take a row's y in the loop summing the next row
                # (rg_run_*_fused): all of them (bf16's AVX2 one since its sum and step are dealt: with
                # the natural-order ones it was slower fused, 5.86 -> 6.32 ms for [4096, 4096])
                rms_fuse=dict(forms),
                # bf16 rows of a call large enough to stream, but in place (which never streams), take the
                # fused loop too, storing plainly over x: [4096, 4096] from memory, one thread, C harness,
                # alternated, AVX-512 5.3-6.1 -> 4.8-5.2 ms on a line, 5.9-7.3 -> 5.3-6.0 16 bytes into one,
                # AVX2 0.96-1.01; f32's AVX-512 rows were 1.5x slower so (its AVX2 ones 0.95-0.97)
                fuse_over=t == "bf16",
                # the vector variants whose exact row path has no vector loop (bf16's)
                exact_piece_prefetch=[] if t == "f32" else list(forms))


def rms_context(p: RmsNormPlan) -> dict[str, Any]:
    params = rms_abi(p)
    stash = p.stash.name
    product = rms_product_name(p)
    lanes = 8 if stash == "f64" else 16
    before = p.cast == "before_scale"
    # the fast row path (see rmsnorm.c.j2): bf16 roundings without their NaN select, where the
    # rounding is rg_f32_to_bf16 of a float (stash / product f32); after_scale rounds no normalized value
    norm_carry = before and (p.x.name, stash, product) == ("bf16", "f32", "f32")
    y_unq = p.y_unquantized or p.y         # fp8: the type y is rounded to before its scale
    y_carry = (y_unq.name, product) == ("bf16", "f32")
    padded = p.padded_scale_shape
    full_scale = all(st != 0 for st in p.scale_strides) and padded == p.norm_shape
    literal = facts.LITERAL[stash]
    return dict(
        fn=function_name(p), words_fn=words_function_name(p), guard=p.name.upper(), params=params,
        flags=cbuild.PINNED_FLAGS,
        x=param_name(params, "in", p.x_name), scale=param_name(params, "in", p.scale_name),
        y=param_name(params, "out", p.out),
        residual=param_name(params, "in", p.residual) if p.residual else "",
        h=param_name(params, "out", p.sum_output) if p.residual else "",
        storage=p.residual_add == "storage", before_scale=before,
        xt=facts.element(p.x), scalet=facts.element(p.scale), yt=facts.element(p.y),
        stash_t=facts.ARITH[stash], product_t=facts.ARITH[product],
        load_x=facts.load(p.x.name, stash), store_norm=facts.store(stash, p.x.name),
        load_norm=facts.load(p.x.name, product), load_scale=facts.load(p.scale.name, product),
        store_y=facts.store(product, y_unq.name), store_h=facts.store(stash, p.x.name),
        to_product=facts.store(stash, product),
        weight_offset=facts.LITERAL[product](p.weight_offset) if p.weight_offset else "",
        epsilon=literal(p.epsilon_stash), n_literal=literal(float(p.norm_size)),
        rows=[size_expr(a.size, params) for a in p.ir.x.axes[:p.axis]],
        lanes=lanes, block=_rms_block(lanes, p.norm_size), fold_widths=_halvings(4 * lanes), fold_vec=_halvings(4 * lanes)[:-1], fast=norm_carry or y_carry, norm_carry=norm_carry, y_carry=y_carry,
        sqrt_fn=facts.SQRT[stash], symbol_params=[q for q in params if q.kind == "dim"],
        threads=params[-1].c_name, full_scale=full_scale,
        chunk_rows=max(1, CHUNK_BYTES // max(1, p.norm_size * p.x.itemsize)),
        stream_min_rows=stream_min(p.y, p.norm_size * p.y.itemsize),
        # the address bits a streamed row of y must have clear to be stored non-temporally straight from
        # the vector loops; otherwise its pieces go through the piece buffer and a streamed copy. An f32
        # out= array 16 bytes into a line (NumPy's own) split every vector store ([4096, 4096] from
        # memory, one thread, op.run with out=: AVX-512 14.3-14.7 -> 8.5-9.4 ms, AVX2 10.3-11.8 ->
        # 8.5-8.9; 8.0-8.3 on a line). bf16, bound by its compute, keeps 16 bytes (rope.c.j2's heads,
        # context.py's nt_mask, measured the buffer slower there). y over x is never streamed
        # (_host.inc.j2's no_stream_over).
        nt_mask=63 if p.y.name == "f32" else 15,
        scale_dims=list(zip(p.norm_shape, p.scale_strides)),
        fp8=bool(p.quant_scale), qscale=param_name(params, "in", p.quant_scale) if p.quant_scale else "",
        load_unq=facts.load(y_unq.name, "f32") if p.quant_scale else "",
        store_q=facts.store("f32", p.y.name) if p.quant_scale else "",
        **_rms_vectors(p, stash, product, norm_carry),
    )
