"""The C render context: type names, conversion helpers, constants and chunk sizes printed by templates/c."""
from __future__ import annotations

from typing import Any


from ropegen import ir
from ropegen.backends.c import build as cbuild
from ropegen.ir.dtypes import DType
from ropegen.ops.plan import ExactAngles, GgmlAngles, RmsNormPlan, RopePlan, TableAnglesPlan
from ropegen.render import c_double, c_float
from ropegen.backends.c.abi import Param, function_name, rms_abi, rope_abi


# Tokens (rope) or rows (rmsnorm) are handed to threads in chunks of about this many input bytes:
# small enough to balance two busy cores, large enough that scheduling costs nothing.
CHUNK_BYTES = 256 * 1024

# Out-of-place outputs at least this large are written with non-temporal stores (they would not
# stay in cache anyway): above a typical last-level cache share, where memcpy streams too.
STREAM_BYTES = 32 * 1024 * 1024


def _stream_min(out: DType, bytes_per_item: int) -> int:
    """Tokens (rows) from which outputs are streamed; 0: never. Measured: streaming pays for 4- and
    8-byte elements; 2-byte ones convert more per byte and gain nothing (RMSNorm bf16 lost 10%)."""
    if out.itemsize < 4:
        return 0
    return max(1, STREAM_BYTES // max(1, bytes_per_item))


# ---------------------------------------------------------------------------------------------
# render context

def arith_name(compute: DType, storage_rounding: bool) -> str:
    """The arithmetic type's helper suffix: f32, f64, or f16r / bf16r for rounded storage arithmetic."""
    if storage_rounding and compute.name in ("f16", "bf16"):
        return compute.name + "r"
    return compute.name


def arith_c_type(arith: str) -> str:
    return "double" if arith == "f64" else "float"


def _round_fn(arith: str) -> str:
    return {"f16r": "rg_round_f16", "bf16r": "rg_round_bf16"}.get(arith, "")


def _size_expr(v: ir.Size, params: list[Param]) -> str:
    if isinstance(v, int):
        return f"(int64_t){v}"
    return next(q.c_name for q in params if q.kind == "dim" and q.tensor == v)


def _pname(params: list[Param], kind: str, tensor: str, axis: str | None = None) -> str:
    return next(q.c_name for q in params if q.kind == kind and q.tensor == tensor and q.axis == axis)


def rope_context(p: RopePlan) -> dict[str, Any]:
    params = rope_abi(p)
    arith = arith_name(p.compute, p.compute_storage_rounding)
    tensors = {t.name: t for t in p.inputs}
    first = p.ir.tensor(p.streams[0].src)
    if p.token_layout == "t":
        batch_expr = "(int64_t)1"
        seq_expr = _size_expr(first.role_dim(ir.Role.TOKENS).size, params)
    else:
        batch_expr = _size_expr(first.role_dim(ir.Role.BATCH).size, params)
        seq_expr = _size_expr(first.role_dim(ir.Role.SEQ).size, params)

    def token_offset(tensor: str) -> str:
        if p.token_layout == "t":
            return f"rg_t * {_pname(params, 'stride', tensor, 'token')}"
        return (f"rg_b * {_pname(params, 'stride', tensor, 'batch')} + "
                f"rg_s * {_pname(params, 'stride', tensor, 'seq')}")

    streams = []
    for s in p.streams:
        t = tensors[s.src]
        streams.append(dict(
            out=_pname(params, "out", s.out), src=_pname(params, "in", s.src), rotate=s.rotate,
            src_offset=token_offset(s.src), out_offset=token_offset(s.out),
            src_head=_pname(params, "stride", s.src, "head"), out_head=_pname(params, "stride", s.out, "head"),
            heads=t.real_heads, split=t.unit_split, name=s.out, source=s.src))

    pos = p.positions
    per_token = sum(t.real_heads * p.head_dim * t.dtype.itemsize for t in (tensors[s.src] for s in p.streams))

    def scalar_expr(v) -> str:
        return f"(int64_t){v}" if isinstance(v, int) else _pname(params, "scalar", v)

    a = p.angles
    ctx: dict[str, Any] = dict(
        fn=function_name(p), guard=p.name.upper(), params=params, flags=" ".join(cbuild.PINNED_FLAGS),
        st=p.storage.c_type, arith=arith, ct=arith_c_type(arith),
        load_x=f"rg_load_{p.storage.name}_{arith}", store_y=f"rg_store_{arith}_{p.storage.name}",
        rnd=_round_fn(arith), batch_expr=batch_expr, seq_expr=seq_expr, streams=streams,
        positions_kind=pos.kind.value, symbol_params=[q for q in params if q.kind == "dim"],
        pointer_params=[q for q in params if q.kind in ("in", "out")],
        threads=next(q.c_name for q in params if q.kind == "threads"),
        ids=_pname(params, "in", pos.ids) if pos.ids else "",
        ids_type=tensors[pos.ids].dtype.c_type if pos.ids else "",
        start=scalar_expr(pos.start), pad=_pname(params, "in", pos.pad) if pos.pad else "",
        first_seqlen=scalar_expr(pos.first_seqlen) if pos.first_seqlen is not None else "",
        seqlen=_pname(params, "in", p.sequences) if p.sequences else "",
        nseq=_size_expr(p.ir.tensor(p.sequences).axes[0].size, params) if p.sequences else "",
        sin_negate=p.sin_sign < 0,
        chunk_tokens=max(1, CHUNK_BYTES // max(1, per_token)),
        stream_min_tokens=_stream_min(p.storage, per_token),
    )
    if isinstance(a, TableAnglesPlan):
        cos_t = p.ir.tensor(a.cos)
        ctx.update(angles_kind="table", cos=_pname(params, "in", a.cos), sin=_pname(params, "in", a.sin),
                   load_table=f"rg_load_{a.dtype.name}_{arith}", table_width=a.width,
                   rows_expr="" if a.per_token else _size_expr(cos_t.axes[0].size, params),
                   table_by_position=not a.per_token)
    elif isinstance(a, ExactAngles):
        ctx.update(angles_kind="exact", inv_freq=[c_double(v) for v in a.inv_freq],
                   cos_factor=c_double(a.magnitude), sin_factor=c_double(p.sin_sign * a.magnitude),
                   load_angle=f"rg_load_f64_{arith}", table_by_position=False)
    else:
        assert isinstance(a, GgmlAngles)
        ctx.update(angles_kind="ggml", theta_scale=c_float(a.theta_scale), freq_scale=c_float(a.freq_scale),
                   ramp=[c_float(v) for v in a.ramp], one_minus_ramp=[c_float(v) for v in a.one_minus_ramp],
                   yarn=a.yarn, cos_factor=c_double(a.mscale), sin_factor=c_double(p.sin_sign * a.mscale),
                   load_angle=f"rg_load_f64_{arith}", table_by_position=False)
    ff = getattr(a, "freq_factors", None)
    ctx["ff"] = _pname(params, "in", ff) if ff else ""
    ctx["load_ff"] = ""
    ctx["ff_decl"] = ""
    if ff:
        ff_dtype = tensors[ff].dtype.name
        ctx["ff_decl"] = f", const {tensors[ff].dtype.c_type} *ff"
        ctx["load_ff"] = f"rg_load_{ff_dtype}_{'f64' if ctx['angles_kind'] == 'exact' else 'f32'}"
    return ctx


def rms_product_name(p: RmsNormPlan) -> str:
    return p.product.name


def rms_context(p: RmsNormPlan) -> dict[str, Any]:
    params = rms_abi(p)
    x_t = p.ir.x
    lead = [a.size for a in x_t.axes[:p.axis]]
    rows_expr = " * ".join(_size_expr(v, params) for v in lead) if lead else "(int64_t)1"
    stash = p.stash.name
    product = rms_product_name(p)
    lanes = 8 if stash == "f64" else 16
    # the fast row path (see rmsnorm.c.j2): bf16 roundings without their NaN select, where the
    # rounding is rg_f32_to_bf16 of a float (stash / product f32)
    norm_fast = ("return rg_bits_f32(rg_rms_bf16_carry(v) & 0xffff0000u);"
                 if (p.x.name, stash, product) == ("bf16", "f32", "f32")
                 else f"return rg_load_{p.x.name}_{product}(rg_store_{stash}_{p.x.name}(v));")
    y_fast = ("return (uint16_t)(rg_rms_bf16_carry(v) >> 16);" if (p.y.name, product) == ("bf16", "f32")
              else f"return rg_store_{product}_{p.y.name}(v);")
    fast = "rg_rms_bf16_carry" in norm_fast + y_fast
    padded = p.padded_scale_shape
    stash_eps = p.epsilon_stash
    full_scale = all(st != 0 for st in p.scale_strides) and padded == p.norm_shape
    return dict(
        fn=function_name(p), guard=p.name.upper(), params=params, flags=" ".join(cbuild.PINNED_FLAGS),
        x=params[0].c_name, scale=params[1].c_name, y=params[2].c_name,
        xt=p.x.c_type, scalet=p.scale.c_type, yt=p.y.c_type,
        stash_t=arith_c_type(stash), product_t=arith_c_type(product),
        load_x=f"rg_load_{p.x.name}_{stash}", store_norm=f"rg_store_{stash}_{p.x.name}",
        load_norm=f"rg_load_{p.x.name}_{product}", load_scale=f"rg_load_{p.scale.name}_{product}",
        store_y=f"rg_store_{product}_{p.y.name}",
        epsilon=(c_double(stash_eps) if stash == "f64" else c_float(stash_eps)),
        n_literal=(c_double(float(p.norm_size)) if stash == "f64" else c_float(float(p.norm_size))),
        rows_expr=rows_expr, lanes=lanes, block=lanes * 64, fast=fast, norm_fast=norm_fast, y_fast=y_fast, sqrt_fn="sqrt" if stash == "f64" else "sqrtf", symbol_params=[q for q in params if q.kind == "dim"],
        threads=params[-1].c_name, full_scale=full_scale,
        chunk_rows=max(1, CHUNK_BYTES // max(1, p.norm_size * p.x.itemsize)),
        stream_min_rows=_stream_min(p.y, p.norm_size * p.y.itemsize),
        scale_dims=list(zip(p.norm_shape, p.scale_strides)),
    )


