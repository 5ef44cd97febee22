"""import-onnx on the graphs ONNX Runtime GenAI / Olive export: com.microsoft RotaryEmbedding,
SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization with 3-D [B, S, H*D] inputs and symbolic
batch / sequence_length, fp16 and fp32; `fix` pins symbolic dims; `report` summarises skipped nodes.

Each imported spec is compiled and run (numpy and c) and compared with onnxruntime executing the same
model on the CPU (ORT runs the com.microsoft ops); fp16 results are also required to be mostly
bit-identical to ORT's, which tells `cast = after_scale` / `residual_add = stash` from the alternatives.
Without onnxruntime those comparisons skip; the spec texts, `fix`, `report` and error paths still run.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx (the `test` extra) is not installed")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ropegen  # noqa: E402
from ropegen import backends  # noqa: E402
from ropegen.importers import onnx as ro  # noqa: E402
from ropegen.ir.dtypes import DTYPES  # noqa: E402

MS = "com.microsoft"
BACKENDS = ("numpy", "c")
DTYPE = {"f32": (TensorProto.FLOAT, np.float32), "f16": (TensorProto.FLOAT16, np.float16)}
DIMS = ["batch_size", "sequence_length"]


def _require(backend: str) -> None:
    why = backends.get(backend).unavailable()
    if why:
        pytest.skip(f"backend '{backend}' unavailable: {why}")


def _model(nodes, inputs, outputs, initializers=()) -> "onnx.ModelProto":
    graph = helper.make_graph(nodes, "genai", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _ort(model, feeds: dict) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime (the `bench` extra) is not installed: nothing "
                                                     "to compare with")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _close(got: np.ndarray, want: np.ndarray, dtype: str, ulps: int = 2) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = ulps * DTYPES[dtype].eps
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def _caches(rng, rows: int, width: int, npt):
    theta = rng.uniform(0, 2 * np.pi, (rows, width))
    return np.cos(theta).astype(npt), np.sin(theta).astype(npt)


# ---------------------------------------------------------------------------------------------
# com.microsoft RotaryEmbedding
# ---------------------------------------------------------------------------------------------

# name -> (attributes, x shape with symbols, position_ids shape, cache width)
ROTARY = {
    "3d_ids": (dict(num_heads=4), [*DIMS, 64], DIMS, 8),
    "3d_no_num_heads": ({}, [*DIMS, 64], DIMS, 8),
    "3d_partial_interleaved_start": (dict(num_heads=4, rotary_embedding_dim=8, interleaved=1), [*DIMS, 64], [1], 4),
    "4d_ids": ({}, ["batch_size", 4, "sequence_length", 16], DIMS, 8),
    "4d_interleaved_scalar_start": (dict(interleaved=1), ["batch_size", 2, "sequence_length", 16], [], 8),
}


def _rotary_model(attrs, x_shape, pos_shape, cos, sin, elem):
    node = helper.make_node("RotaryEmbedding", ["x", "position_ids", "cos_cache", "sin_cache"], ["y"], domain=MS,
                            name="/model/layers.0/attn/q_rotary/RotaryEmbedding", **attrs)
    return _model([node], [_vi("x", elem, x_shape), _vi("position_ids", TensorProto.INT64, pos_shape)],
                  [_vi("y", elem, None)],
                  [numpy_helper.from_array(cos, "cos_cache"), numpy_helper.from_array(sin, "sin_cache")])


def _concrete(shape, b, s):
    return tuple({"batch_size": b, "sequence_length": s}.get(d, d) for d in shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", list(DTYPE))
@pytest.mark.parametrize("variant", list(ROTARY))
def test_ms_rotary_matches_onnxruntime(variant, dtype, backend, tmp_path):
    _require(backend)
    attrs, x_shape, pos_shape, width = ROTARY[variant]
    elem, npt = DTYPE[dtype]
    rng = np.random.default_rng(len(variant))
    cos, sin = _caches(rng, 40, width, npt)
    model = _rotary_model(attrs, x_shape, pos_shape, cos, sin, elem)
    (path,) = ro.import_model(model, tmp_path)
    text = path.read_text()
    assert "batch=batch_size" in text and "seq=sequence_length" in text
    op = ropegen.compile(path).operators[0]
    for b, s in ((1, 1), (2, 5), (3, 7)):           # one spec serves every batch and sequence length
        x = rng.uniform(-2, 2, _concrete(x_shape, b, s)).astype(npt)
        if len(pos_shape) == 2:
            pos = rng.integers(0, 40, (b, s), dtype=np.int64)
        else:                                       # the first position; the last one is the cache's last row
            pos = np.full(pos_shape, 40 - s, dtype=np.int64)
        want = _ort(model, {"x": x, "position_ids": pos})[0]
        got = op.run(x, pos.reshape(()) if pos.ndim < 2 else pos, cos, sin, backend=backend)
        _close(got, want, dtype)


def test_ms_rotary_start_position_is_declared_rank_0(tmp_path):
    attrs, x_shape, pos_shape, width = ROTARY["3d_partial_interleaved_start"]
    cos, sin = _caches(np.random.default_rng(0), 16, width, np.float32)
    (path,) = ro.import_model(_rotary_model(attrs, x_shape, pos_shape, cos, sin, TensorProto.FLOAT), tmp_path)
    text = path.read_text()
    assert "in position_ids: i64[]" in text and "arange(start = position_ids)" in text
    assert "rotary_dim = 8" in text and "pairing    = gptj" in text and "pass it reshaped to rank 0" in text


@pytest.mark.parametrize("dtype", list(DTYPE))
def test_run_node_ms_rotary(dtype):
    elem, npt = DTYPE[dtype]
    rng = np.random.default_rng(9)
    cos, sin = _caches(rng, 20, 4, npt)
    model = _rotary_model(dict(num_heads=2, rotary_embedding_dim=8), [2, 3, 32], [1], cos, sin, elem)
    x = rng.uniform(-1, 1, (2, 3, 32)).astype(npt)
    pos = np.array([5], np.int64)
    want = _ort(model, {"x": x, "position_ids": pos})[0]
    got = ro.run_node(model.graph.node[0], [x, pos, cos, sin])
    _close(got[0], want, dtype)


# ---------------------------------------------------------------------------------------------
# SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization
# ---------------------------------------------------------------------------------------------

def _norm_model(elem, hidden: int):
    # ORT registers SimplifiedLayerNormalization in the default domain, SkipSimplified... in com.microsoft
    simple = helper.make_node("SimplifiedLayerNormalization", ["x", "w0"], ["y"], epsilon=1e-5, axis=-1,
                              name="/model/layers.0/input_layernorm/LayerNorm")
    skip = helper.make_node("SkipSimplifiedLayerNormalization", ["y", "skip", "w1"], ["z", "", "", "h"], domain=MS,
                            epsilon=1e-6, name="/model/layers.0/post_attention_layernorm/SkipLayerNorm")
    ins = [_vi("x", elem, [*DIMS, hidden]), _vi("skip", elem, [*DIMS, hidden]), _vi("w0", elem, [hidden]),
           _vi("w1", elem, [hidden])]
    outs = [_vi(n, elem, [*DIMS, hidden]) for n in ("y", "z", "h")]
    return _model([simple, skip], ins, outs)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", list(DTYPE))
def test_ms_norms_match_onnxruntime(dtype, backend, tmp_path):
    _require(backend)
    elem, npt = DTYPE[dtype]
    hidden = 96
    model = _norm_model(elem, hidden)
    paths = ro.import_model(model, tmp_path)
    simple_text, skip_text = (p.read_text() for p in paths)
    assert "cast    = after_scale" in simple_text
    assert "residual     = skip" in skip_text and "residual_add = stash" in skip_text and "out h" in skip_text
    simple, skip = (ropegen.compile(p).operators[0] for p in paths)
    rng = np.random.default_rng(3)
    w0, w1 = (rng.uniform(0.5, 1.5, hidden).astype(npt) for _ in range(2))
    same = total = 0
    for b, s in ((1, 3), (2, 17)):
        x = rng.standard_normal((b, s, hidden)).astype(npt)
        sk = (4 * rng.standard_normal((b, s, hidden))).astype(npt)
        want_y, want_z, want_h = _ort(model, {"x": x, "skip": sk, "w0": w0, "w1": w1})
        y = simple.run(x, w0, backend=backend)
        z, h = skip.run_all(want_y, sk, w1, backend=backend)   # from the same input as ORT's
        for got, want in ((y, want_y), (z, want_z), (h, want_h)):
            _close(got, want, dtype)
            same += int((got == want).sum())
            total += want.size
        np.testing.assert_array_equal(h, want_h)          # the sum is one rounding of input + skip
    if dtype == "f16":
        # ORT rounds once from float: after_scale and the unrounded sum agree with it bit for bit nearly
        # everywhere (before_scale or residual_add = storage differ in about a tenth of the elements)
        assert same >= 0.99 * total, (same, total)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("xdt, sdt", [("f16", "f32"), ("f32", "f16")])
def test_simplified_layer_norm_mixed_types(xdt, sdt, backend, tmp_path):
    # ORT's Y has scale's type V: the spec says `dtype` since an after_scale rmsnorm writes x's type by default
    _require(backend)
    (xe, xn), (se, sn) = DTYPE[xdt], DTYPE[sdt]
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "w"], ["y"], epsilon=1e-4)
    model = _model([node], [_vi("x", xe, ["n", 64]), _vi("w", se, [64])], [_vi("y", se, None)])
    (path,) = ro.import_model(model, tmp_path)
    assert f"dtype   = {sdt}" in path.read_text()
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((5, 64)).astype(xn), rng.standard_normal(64).astype(sn)
    want = _ort(model, {"x": x, "w": w})[0]
    _close(ropegen.compile(path).operators[0].run(x, w, backend=backend), want, "f16")


def test_simplified_layer_norm_double(tmp_path):
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "w0"], ["y"], epsilon=1e-3)
    model = _model([node], [_vi("x", TensorProto.DOUBLE, ["n", 3, 8]), _vi("w0", TensorProto.DOUBLE, [8])],
                   [_vi("y", TensorProto.DOUBLE, None)])
    (path,) = ro.import_model(model, tmp_path)
    assert "stash   = f64" in path.read_text()      # ORT runs double X in double whatever stash_type says
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 8)), rng.standard_normal(8)
    want = _ort(model, {"x": x, "w0": w})[0]
    np.testing.assert_allclose(ropegen.compile(path).operators[0].run(x, w), want, rtol=1e-13, atol=1e-13)


# ---------------------------------------------------------------------------------------------
# A decoder layer as GenAI exports it: norms, projections, RoPE on q and k, attention elsewhere
# ---------------------------------------------------------------------------------------------

def _layer_model(elem, npt, rng, hidden=64, heads=4, kv_heads=2, rows=64, gqa_rotary=0):
    head = hidden // heads
    w = {n: rng.standard_normal(shape).astype(npt) * 0.2 for n, shape in
         (("wq", (hidden, hidden)), ("wk", (hidden, kv_heads * head)), ("g0", (hidden,)))}
    cos, sin = _caches(rng, rows, head // 2, npt)
    nodes = [
        helper.make_node("SimplifiedLayerNormalization", ["x", "g0"], ["n0"], epsilon=1e-5, name="ln0"),
        helper.make_node("MatMul", ["n0", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["n0", "wk"], ["k"], name="k_proj"),
        helper.make_node("RotaryEmbedding", ["q", "position_ids", "cos_cache", "sin_cache"], ["q_rot"], domain=MS,
                         num_heads=heads, name="q_rotary"),
        helper.make_node("RotaryEmbedding", ["k", "position_ids", "cos_cache", "sin_cache"], ["k_rot"], domain=MS,
                         num_heads=kv_heads, name="k_rotary"),
        helper.make_node("Add", ["q_rot", "n0"], ["r"], name="residual_add"),
        helper.make_node("GroupQueryAttention", ["q_rot", "k_rot", "k_rot", "", "", "seqlens_k", "total_len"],
                         ["attn"], domain=MS, num_heads=heads, kv_num_heads=kv_heads, do_rotary=gqa_rotary,
                         name="attn"),
    ]
    ins = [_vi("x", elem, [*DIMS, hidden]), _vi("position_ids", TensorProto.INT64, DIMS),
           _vi("seqlens_k", TensorProto.INT32, ["batch_size"]), _vi("total_len", TensorProto.INT32, [])]
    outs = [_vi(n, elem, None) for n in ("n0", "q", "k", "q_rot", "k_rot")]
    inits = [numpy_helper.from_array(a, n) for n, a in (*w.items(), ("cos_cache", cos), ("sin_cache", sin))]
    # value_info as GenAI's builder writes it (onnx shape inference knows no com.microsoft op)
    vinfo = [_vi(n, elem, [*DIMS, d]) for n, d in (("n0", hidden), ("q", hidden), ("k", kv_heads * head),
                                                   ("q_rot", hidden), ("k_rot", kv_heads * head), ("r", hidden))]
    model = _model(nodes, ins, outs, inits)
    model.graph.value_info.extend(vinfo)
    return model, w, cos, sin


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", list(DTYPE))
def test_decoder_layer_end_to_end(dtype, backend, tmp_path):
    _require(backend)
    elem, npt = DTYPE[dtype]
    rng = np.random.default_rng(5)
    model, w, cos, sin = _layer_model(elem, npt, rng)
    lines = []
    paths = ro.import_model(model, tmp_path, report=lines.append)
    assert [p.stem for p in paths] == ["ln0", "q_rotary", "k_rotary"]
    assert lines == ["skipped 4 nodes: MatMul x2, Add x1, GroupQueryAttention x1",
                     "symbolic dims kept as spec symbols: batch_size, sequence_length (pin one with --fix NAME=SIZE)"]
    ln, q_rope, k_rope = (ropegen.compile(p).operators[0] for p in paths)
    b, s = 2, 6
    x = rng.standard_normal((b, s, 64)).astype(npt)
    pos = np.tile(np.arange(10, 10 + s), (b, 1)).astype(np.int64)
    # ORT runs the graph up to the rotations (the attention node's own inputs are not needed for them)
    sub = onnx.utils.Extractor(model).extract_model(["x", "position_ids"], ["n0", "q", "k", "q_rot", "k_rot"])
    n0, q, k, q_rot, k_rot = _ort(sub, {"x": x, "position_ids": pos})
    _close(ln.run(x, w["g0"], backend=backend), n0, dtype)
    _close(q_rope.run(q, pos, cos, sin, backend=backend), q_rot, dtype)
    _close(k_rope.run(k, pos, cos, sin, backend=backend), k_rot, dtype)


def test_contrib_outputs_get_shapes_from_onnxruntime_inference(tmp_path):
    # onnx's shape inference skips com.microsoft ops and ORT's SimplifiedLayerNormalization, so without
    # value_info the projections' shapes come from ONNX Runtime's symbolic shape inference
    pytest.importorskip("onnxruntime", reason="onnxruntime (the `onnx` extra) is not installed")
    pytest.importorskip("sympy", reason="sympy (the `onnx` extra), which onnxruntime's shape inference needs, is not installed")
    model, *_ = _layer_model(TensorProto.FLOAT16, np.float16, np.random.default_rng(4))
    del model.graph.value_info[:]
    paths = ro.import_model(model, tmp_path)
    assert "f16[batch=batch_size, seq=sequence_length, (heads=2, head_dim=16)]" in paths[2].read_text()


def test_fix_pins_symbolic_dims(tmp_path):
    rng = np.random.default_rng(2)
    model, *_ = _layer_model(TensorProto.FLOAT, np.float32, rng)
    lines = []
    paths = ro.import_model(model, tmp_path, fix={"batch_size": 1}, report=lines.append)
    text = paths[1].read_text()
    assert "f32[batch=1, seq=sequence_length, (heads=4, head_dim=16)]" in text
    assert "i64[1, sequence_length]" in text
    assert "in x:     f32[1, sequence_length, 64]" in paths[0].read_text()
    assert lines[-1] == "symbolic dims kept as spec symbols: sequence_length (pin one with --fix NAME=SIZE)"
    paths = ro.import_model(model, tmp_path / "both", fix={"batch_size": 2, "sequence_length": 3})
    assert "[batch=2, seq=3, (heads=4" in paths[1].read_text()
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch_size"   # the caller's model


@pytest.mark.parametrize("fix, message", [
    ({"batch": 1}, r"cannot fix 'batch': the model's symbolic dimensions are 'batch_size', 'sequence_length'"),
    ({"batch_size": 0}, r"fix batch_size=0: a size must be a positive integer"),
    ({"batch_size": "2"}, r"fix batch_size='2'"),
    ({"batch_size": True}, r"fix batch_size=True"),
])
def test_fix_errors(fix, message, tmp_path):
    model, *_ = _layer_model(TensorProto.FLOAT, np.float32, np.random.default_rng(0))
    with pytest.raises(ValueError, match=message):
        ro.import_model(model, tmp_path / "out", fix=fix)
    assert not (tmp_path / "out").exists()


def test_symbolic_hidden_size_asks_for_fix(tmp_path):
    elem, npt = DTYPE["f32"]
    cos, sin = _caches(np.random.default_rng(0), 8, 8, npt)
    model = _rotary_model(dict(num_heads=4), [*DIMS, "hidden"], DIMS, cos, sin, elem)
    with pytest.raises(ValueError, match=r"hidden_size \(dimension 2 of 3-D input\) is 'hidden'.*--fix NAME=SIZE"):
        ro.import_model(model, tmp_path)
    (path,) = ro.import_model(model, tmp_path, fix={"hidden": 64})
    assert "(heads=4, head_dim=16)" in path.read_text()


def test_gqa_with_do_rotary_is_refused(tmp_path):
    model, *_ = _layer_model(TensorProto.FLOAT, np.float32, np.random.default_rng(0), gqa_rotary=1)
    with pytest.raises(ValueError, match=r"com.microsoft.GroupQueryAttention node 'attn': do_rotary = 1 .*seqlens_k"):
        ro.import_model(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_only_skipped_nodes(tmp_path):
    model, *_ = _layer_model(TensorProto.FLOAT, np.float32, np.random.default_rng(0))
    keep = [n for n in model.graph.node if n.op_type in ("MatMul", "GroupQueryAttention")]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    with pytest.raises(ValueError, match=r"no RotaryEmbedding, .* node in the main graph \(skipped 3 nodes: "
                                         r"MatMul x2, GroupQueryAttention x1\)"):
        ro.import_model(model, tmp_path)


# ---------------------------------------------------------------------------------------------
# Error paths of the contrib ops
# ---------------------------------------------------------------------------------------------

def _ms_rope(**attrs):
    return helper.make_node("RotaryEmbedding", ["x", "p", "c", "s"], ["y"], domain=MS, name="rope", **attrs)


def _skip_norm(inputs=("x", "s", "g"), **attrs):
    return helper.make_node("SkipSimplifiedLayerNormalization", list(inputs), ["y", "", "", "h"], domain=MS,
                            name="skipnorm", **attrs)


X3 = ("f32", ("B", "S", 64))
POS = ("i64", ("B", "S"))
CACHE8 = ("f32", (32, 8))
ROPE_TYPES = [X3, POS, CACHE8, CACHE8]


@pytest.mark.parametrize("node, types, message", [
    (_ms_rope(num_heads=4, scale=2.0), ROPE_TYPES, r"node 'rope': attribute scale = 2.0 is not supported"),
    (_ms_rope(num_heads=4, is_packed_batching=1), ROPE_TYPES, r"node 'rope': attribute is_packed_batching = 1"),
    (_ms_rope(rotary_embedding_dim=8), ROPE_TYPES, r"rotary_embedding_dim needs the num_heads attribute"),
    (_ms_rope(num_heads=4, rotary_embedding_dim=8), ROPE_TYPES, r"caches are 8 wide.*exactly 4 wide"),
    (_ms_rope(num_heads=3), ROPE_TYPES, r"hidden_size 64 is not num_heads \(3\) x the head size 16"),
    (_ms_rope(num_heads=4, interleaved=2), ROPE_TYPES, r"interleaved must be 0 or 1"),
    (_ms_rope(num_heads=4, foo=1), ROPE_TYPES, r"'foo' is not an attribute of com.microsoft RotaryEmbedding-1"),
    (_ms_rope(num_heads=4), [X3, ("i64", (3,)), CACHE8, CACHE8], r"position_ids has shape \[3\]"),
    (_ms_rope(num_heads=4), [X3, ("i32", ("B", "S")), CACHE8, CACHE8], r"position_ids is i32"),
    (_ms_rope(num_heads=4), [X3, POS, ("f32", (2, 32, 8)), ("f32", (2, 32, 8))], r"must both be 2-D"),
    (_ms_rope(num_heads=4), [X3, POS, ("f16", (32, 8)), CACHE8], r"cos_cache is f16 but the input is f32"),
    (_ms_rope(num_heads=4), [("f64", ("B", "S", 64)), POS, ("f64", (32, 8)), ("f64", (32, 8))], r"input is f64"),
    (_ms_rope(), [("f32", ("B", 4, "S", 8)), POS, CACHE8, CACHE8], r"takes the head size from the caches"),
    (_ms_rope(num_heads=4), [("f32", ("B", "S")), POS, CACHE8, CACHE8], r"input has rank 2"),
    (_ms_rope(num_heads=4), [X3, POS, CACHE8], r"no input types given for input 's'|got 3 input types"),
    (_skip_norm(("x", "s", "g", "bias")), [X3, X3, ("f32", (64,)), ("f32", (64,))], r"input 'bias' \('bias'\)"),
    (_skip_norm(), [X3, ("f32", ("S", 64)), ("f32", (64,))], r"a broadcast skip is not imported"),
    (_skip_norm(), [("f32", (2, 3, 4, 64)), ("f32", (2, 3, 4, 64)), ("f32", (64,))], r"takes 3-D .* or 2-D"),
    (_skip_norm(epsilon=-1.0), [X3, X3, ("f32", (64,))], r"epsilon must be"),
    (_skip_norm(axis=0), [X3, X3, ("f32", (64,))], r"'axis' is not an attribute of com.microsoft "
                                                    r"SkipSimplifiedLayerNormalization-1"),
    (helper.make_node("SimplifiedLayerNormalization", ["x", "w"], ["y"], stash_type=10),
     [X3, ("f32", (64,))], r"stash_type 10 is not supported"),
    (helper.make_node("SimplifiedLayerNormalization", ["x", "w"], ["y"], domain=MS), [X3, ("f32", (64,))],
     r"com.microsoft.SimplifiedLayerNormalization node \(domain 'com.microsoft'\): ropegen imports only"),
])
def test_contrib_errors(node, types, message):
    with pytest.raises(ValueError, match=message):
        ro.spec_for_node(node, types, "op")


def test_skip_norm_default_epsilon_is_ort_1e_12():
    text = ro.spec_for_node(_skip_norm(), [("f16", (4, 64)), ("f16", (4, 64)), ("f16", (64,))], "n")
    assert f"epsilon      = {float(np.float32(1e-12))!r}" in text
    ropegen.compile(text)


def test_ort_shape_inference_leaves_no_file_in_the_working_directory(tmp_path, monkeypatch):
    """ONNX Runtime's symbolic shape inference saves `sym_shape_infer_temp.onnx` in the working
    directory when it cannot finish (here: a node of an unknown domain); an import must not."""
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from ropegen.importers.onnx.graph import ort_inferred
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Mystery", ["x"], ["y"], domain="example.unknown")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("example.unknown", 1)])
    monkeypatch.chdir(tmp_path)
    ort_inferred(model)
    assert list(tmp_path.iterdir()) == []
