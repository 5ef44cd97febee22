"""The ONNX importer: onnx's own node tests, import_model end to end, error paths, extra dtypes.

* Every ONNX backend node test case of RotaryEmbedding and RMSNormalization (from the onnx
  package's case generators, onnx.backend.test.case.node) runs through `ropegen.importers.onnx.run_node` on
  every backend in ropegen.backends.BACKENDS; a backend that cannot run here is a skip with its
  reason. The `_expanded` variants (the function body as many nodes) carry the same inputs and
  expected outputs, so they run the original single node on their data.
* import_model writes specs for a model built with onnx.helper; they compile and match
  onnx.reference.ReferenceEvaluator.
* f16 / bf16 RotaryEmbedding against the ONNX reference evaluated in float32, mixed-type and
  float64-stash RMSNormalization against a float64 transcription of the operator.
"""
from __future__ import annotations

import re
import warnings
import zlib

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx (the `test` extra) is not installed")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx.reference.ops.op_rotary_embedding import rotary_embedding  # noqa: E402

import ropegen  # noqa: E402
from ropegen import backends  # noqa: E402
from ropegen.importers import onnx as ro  # noqa: E402
from ropegen.ir.dtypes import DTYPES  # noqa: E402

OPS = ("RotaryEmbedding", "RMSNormalization")
# onnx's backend-test defaults (onnx.backend.test.runner), used when a case carries none
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-7


# ---------------------------------------------------------------------------------------------
# The onnx package's node test cases
# ---------------------------------------------------------------------------------------------

def _export_cases() -> list:
    """The TestCases that onnx's RotaryEmbedding and RMSNormalization generators produce.

    onnx.backend.test.case.node.collect_testcases(op_type) keeps one global list and fills it on
    first import only, so a second call with another op_type returns the first op's cases. Here
    the generators' expect() calls are captured into a fresh list instead.
    """
    import onnx.backend.test.case.node as node_cases

    if not all(hasattr(node_cases, a) for a in ("_TargetOpType", "_NodeTestCases", "_existing_names")):
        return list(node_cases.collect_testcases(None))        # pragma: no cover - other onnx layouts
    saved = node_cases._TargetOpType, node_cases._NodeTestCases, node_cases._existing_names
    node_cases._TargetOpType, node_cases._NodeTestCases, node_cases._existing_names = None, [], {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from onnx.backend.test.case.node import rmsnormalization, rotaryembedding
            if not node_cases._NodeTestCases:   # already imported elsewhere: run the generators again
                for cls in (rotaryembedding.RotaryEmbedding, rmsnormalization.RMSNormalization):
                    for key in vars(cls):
                        if key.startswith("export"):
                            np.random.seed(0)
                            getattr(cls, key)()
        return list(node_cases._NodeTestCases)
    finally:
        node_cases._TargetOpType, node_cases._NodeTestCases, node_cases._existing_names = saved


def _node_cases() -> list[tuple[str, "onnx.NodeProto", list, list, float, float]]:
    """(name, node to run, inputs, expected outputs, rtol, atol) for every case of the two ops."""
    cases = _export_cases()
    single = {}
    for c in cases:
        nodes = c.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in OPS:
            single[c.name] = nodes[0]
    out = []
    for c in cases:
        nodes = c.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in OPS:
            node = nodes[0]
        elif "_expanded" in c.name and c.name.split("_expanded")[0] in single:
            node = single[c.name.split("_expanded")[0]]     # same inputs and outputs as the original
        else:
            continue
        for i, (inputs, outputs) in enumerate(c.data_sets):
            name = c.name if len(c.data_sets) == 1 else f"{c.name}[{i}]"
            out.append((name, node, list(inputs), list(outputs),
                        getattr(c, "rtol", None) or DEFAULT_RTOL, getattr(c, "atol", None) or DEFAULT_ATOL))
    return out


NODE_CASES = _node_cases()
BACKEND_NAMES = backends.names()


def _require_backend(name: str) -> None:
    why = backends.get(name).unavailable()
    if why:
        pytest.skip(f"backend '{name}' unavailable: {why}")


def test_node_cases_cover_both_operators():
    names = [c[0] for c in NODE_CASES]
    rotary = [n for n in names if "rotary_embedding" in n]
    rms = [n for n in names if "rms_normalization" in n]
    # onnx 1.23: 8 RotaryEmbedding and 19 RMSNormalization node tests, each with an _expanded twin
    assert len(rotary) >= 16 and len(rms) >= 38, names
    assert any(n.endswith("_expanded") for n in rotary) and any(n.endswith("_expanded") for n in rms)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("case", NODE_CASES, ids=[c[0] for c in NODE_CASES])
def test_onnx_node_case(case, backend):
    _require_backend(backend)
    name, node, inputs, expected, rtol, atol = case
    got = ro.run_node(node, inputs, backend=backend)
    assert len(got) == len(expected) == 1
    assert got[0].shape == expected[0].shape
    assert got[0].dtype == expected[0].dtype
    np.testing.assert_allclose(got[0], expected[0], rtol=rtol, atol=atol, err_msg=name)


# ---------------------------------------------------------------------------------------------
# spec_for_node: the text it writes
# ---------------------------------------------------------------------------------------------

def _rope_node(**attrs) -> "onnx.NodeProto":
    inputs = ["x", "cos", "sin", "pos"]
    if attrs.pop("no_positions", False):
        inputs = inputs[:3]
    return helper.make_node("RotaryEmbedding", inputs, ["y"], name="rope", **attrs)


def _rms_node(**attrs) -> "onnx.NodeProto":
    return helper.make_node("RMSNormalization", ["x", "w"], ["y"], name="norm", **attrs)


def test_spec_4d_is_specialised_and_checks():
    text = ro.spec_for_node(_rope_node(), [("f32", (2, 4, 3, 8)), ("f32", (50, 4)), ("f32", (50, 4)),
                                           ("i64", (2, 3))], "r4")
    assert "in x:            f32[batch=2, heads=4, seq=3, head_dim=8]" in text
    assert "in position_ids: i64[2, 3]" in text
    assert re.search(r"pairing\s+= neox", text) and "rotary_dim" not in text
    op = ropegen.compile(text).operators[0]
    assert op.inputs == ("x", "cos_cache", "sin_cache", "position_ids") and op.outputs == ("y",)


def test_spec_3d_partial_interleaved():
    node = _rope_node(num_heads=4, interleaved=1, rotary_embedding_dim=4)
    text = ro.spec_for_node(node, [("f16", (1, 5, 32)), ("f16", (9, 2)), ("f16", (9, 2)), ("i64", (1, 5))], "r3")
    assert "f16[batch=1, seq=5, (heads=4, head_dim=8)]" in text
    assert re.search(r"pairing\s+= gptj", text) and re.search(r"rotary_dim\s+= 4", text)
    ropegen.compile(text)


def test_spec_without_position_ids_has_per_token_caches():
    node = _rope_node(no_positions=True)
    text = ro.spec_for_node(node, [("bf16", (2, 4, 3, 8)), ("bf16", (2, 3, 4)), ("bf16", (2, 3, 4))], "r")
    assert not re.search(r"^\s+positions\s*=", text, re.M) and "in position_ids" not in text
    assert "in cos_cache: bf16[2, 3, 4]" in text
    ropegen.compile(text)


def test_spec_accepts_empty_optional_input_name():
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", ""], ["y"])
    types = [("f32", (1, 2, 3, 4)), ("f32", (1, 3, 2)), ("f32", (1, 3, 2)), None]
    text = ro.spec_for_node(node, types, "r")
    assert "in position_ids" not in text and "positions" not in text
    assert ro.spec_for_node(node, types[:3], "r") == text


@pytest.mark.parametrize("eps", [None, 0.1, 1e-6, 3e-7, 0.0])
def test_rms_epsilon_round_trips_exactly(eps):
    node = _rms_node(axis=1) if eps is None else _rms_node(axis=1, epsilon=eps)
    text = ro.spec_for_node(node, [("f32", (2, 3, 4)), ("f32", (3, 4))], "n")
    attr = float(np.float32(1e-5 if eps is None else eps))
    m = re.search(r"epsilon\s+= (\S+)", text)
    assert m and m.group(1) == repr(attr)
    assert float(m.group(1)) == attr
    op = ropegen.compile(text).operators[0]
    assert op.ir.epsilon == attr and op.ir.axis == 1


def test_rms_scale_with_leading_ones_is_squeezed():
    node = _rms_node()
    text = ro.spec_for_node(node, [("f32", (2, 3, 8)), ("f32", (1, 1, 8))], "n")
    assert "in scale: f32[8]" in text and "leading 1s dropped" in text
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((1, 1, 8)).astype(np.float32)
    want = ReferenceEvaluator(_single_node_model(node, [x, w])).run(None, {"x": x, "w": w})[0]
    np.testing.assert_allclose(ro.run_node(node, [x, w])[0], want, rtol=1e-5, atol=1e-6)


def test_run_node_caches_compiled_specs():
    node = _rms_node()
    x = np.ones((3, 4), np.float32)
    w = np.ones(4, np.float32)
    ro.run_node(node, [x, w])
    before = ro._compiled.cache_info().hits
    ro.run_node(node, [x * 2, w])
    assert ro._compiled.cache_info().hits == before + 1


def test_run_node_accepts_inputs_aligned_with_empty_names():
    rng = np.random.default_rng(3)
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", ""], ["y"], interleaved=1)
    x = rng.random((2, 2, 3, 8), dtype=np.float32)
    cos = rng.random((2, 3, 4), dtype=np.float32)
    sin = rng.random((2, 3, 4), dtype=np.float32)
    want = rotary_embedding(x, cos, sin, interleaved=1)
    for inputs in ([x, cos, sin, None], [x, cos, sin]):
        np.testing.assert_allclose(ro.run_node(node, inputs)[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_run_node_strided_inputs_and_position_range(backend):
    _require_backend(backend)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4, 8)).astype(np.float32).transpose(0, 2, 1, 3)   # [2, 4, 3, 8], strided
    cos = rng.random((10, 2)).astype(np.float32)
    sin = rng.random((10, 2)).astype(np.float32)
    pos = rng.integers(0, 10, (2, 3))
    for interleaved in (0, 1):
        node = _rope_node(interleaved=interleaved, rotary_embedding_dim=4)
        want = rotary_embedding(x, cos, sin, pos, interleaved=interleaved, rotary_embedding_dim=4)
        np.testing.assert_allclose(ro.run_node(node, [x, cos, sin, pos], backend=backend)[0], want,
                                   rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="position"):
        ro.run_node(_rope_node(rotary_embedding_dim=4), [x, cos, sin, pos + 5], backend=backend)


# ---------------------------------------------------------------------------------------------
# import_model end to end
# ---------------------------------------------------------------------------------------------

def _single_node_model(node, inputs, opset: int = 23) -> "onnx.ModelProto":
    names = [n for n in node.input if n]
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in zip(names, inputs)]
    out = helper.make_tensor_value_info(node.output[0], TensorProto.UNDEFINED, None)
    graph = helper.make_graph([node], "g", vis, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _two_node_model(x_shape=(2, 4, 3, 8), rows=16, eps=1e-6, batch_dim=None, seq_dim=None):
    """X -> RotaryEmbedding -> Y -> RMSNormalization(scale initializer) -> Z, all shapes known."""
    b, h, s, d = x_shape
    bd = batch_dim or b
    sd = seq_dim or s
    rope = helper.make_node("RotaryEmbedding", ["X", "cos", "sin", "pos"], ["Y"], name="layers.0/attn/rope")
    norm = helper.make_node("RMSNormalization", ["Y", "gamma"], ["Z"], name="layers.0/norm", epsilon=eps,
                            axis=-1)
    rng = np.random.default_rng(7)
    gamma = rng.standard_normal(d).astype(np.float32)
    graph = helper.make_graph(
        [rope, norm], "two_nodes",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [bd, h, sd, d]),
         helper.make_tensor_value_info("cos", TensorProto.FLOAT, [rows, d // 2]),
         helper.make_tensor_value_info("sin", TensorProto.FLOAT, [rows, d // 2]),
         helper.make_tensor_value_info("pos", TensorProto.INT64, [bd, sd])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)],
        initializer=[onnx.numpy_helper.from_array(gamma, "gamma")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]), gamma


def _rope_feeds(x_shape, rows, seed=0):
    rng = np.random.default_rng(seed)
    b, h, s, d = x_shape
    theta = rng.random((rows, d // 2))
    return {"X": rng.standard_normal(x_shape).astype(np.float32),
            "cos": np.cos(theta).astype(np.float32), "sin": np.sin(theta).astype(np.float32),
            "pos": rng.integers(0, rows, (b, s)).astype(np.int64)}


def test_import_model_end_to_end(tmp_path):
    model, gamma = _two_node_model()
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    written = ro.import_model(path, tmp_path / "specs")
    assert [p.name for p in written] == ["layers_0_attn_rope.rope", "layers_0_norm.rope"]
    assert all(p.parent == tmp_path / "specs" and p.is_file() for p in written)

    feeds = _rope_feeds((2, 4, 3, 8), 16)
    want_y, want_z = ReferenceEvaluator(model).run(None, feeds)
    rope = ropegen.compile(written[0]).operators[0]
    norm = ropegen.compile(written[1]).operators[0]
    assert rope.name == "layers_0_attn_rope" and norm.name == "layers_0_norm"
    for backend in BACKEND_NAMES:
        if backends.get(backend).unavailable():
            continue
        y = rope.run(feeds["X"], feeds["cos"], feeds["sin"], feeds["pos"], backend=backend)
        np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
        z = norm.run(y, gamma, backend=backend)
        np.testing.assert_allclose(z, want_z, rtol=1e-5, atol=1e-6)
    text = written[1].read_text()
    assert f"epsilon = {float(np.float32(1e-6))!r}" in text


def test_import_model_3d_interleaved_partial_and_mixed_rms(tmp_path):
    rope = helper.make_node("RotaryEmbedding", ["X", "cos", "sin"], ["Y"], num_heads=2, interleaved=1,
                            rotary_embedding_dim=6)
    norm = helper.make_node("RMSNormalization", ["H", "w"], ["Z"], axis=-2, epsilon=0.1)
    graph = helper.make_graph(
        [rope, norm], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT16, [1, 5, 16]),
         helper.make_tensor_value_info("cos", TensorProto.FLOAT16, [1, 5, 3]),
         helper.make_tensor_value_info("sin", TensorProto.FLOAT16, [1, 5, 3]),
         helper.make_tensor_value_info("H", TensorProto.FLOAT16, [3, 4, 6]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 6])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, None),
         helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    written = ro.import_model(model, tmp_path)
    assert [p.name for p in written] == ["RotaryEmbedding_0.rope", "RMSNormalization_1.rope"]
    rope_text, rms_text = (p.read_text() for p in written)
    assert "f16[batch=1, seq=5, (heads=2, head_dim=8)]" in rope_text and "rotary_dim = 6" in rope_text
    assert "in x:     f16[3, 4, 6]" in rms_text and "in scale: f32[4, 6]" in rms_text
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 16)).astype(np.float16)
    th = rng.random((1, 5, 3))
    cos, sin = np.cos(th).astype(np.float16), np.sin(th).astype(np.float16)
    y = ropegen.compile(written[0]).operators[0].run(x, cos, sin)
    want = rotary_embedding(*(a.astype(np.float32) for a in (x, cos, sin)), interleaved=1,
                            rotary_embedding_dim=6, num_heads=2)
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-3, atol=2e-3)
    h = rng.standard_normal((3, 4, 6)).astype(np.float16)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    z = ropegen.compile(written[1]).operators[0].run(h, w)
    assert z.dtype == np.float32
    np.testing.assert_allclose(z, _rms64(h, w, axis=-2, eps=np.float32(0.1)), rtol=2e-3, atol=2e-3)


def test_import_model_symbolic_dims(tmp_path):
    model, gamma = _two_node_model(batch_dim="batch", seq_dim="seq_len")
    lines = []
    written = ro.import_model(model, tmp_path / "sym", report=lines.append)
    assert lines == ["symbolic dims kept as spec symbols: batch, seq_len (pin one with --fix NAME=SIZE)"]
    text = written[0].read_text()
    assert "[batch=batch, heads=4, seq=seq_len, head_dim=8]" in text
    rope = ropegen.compile(written[0]).operators[0]
    for b, s in ((1, 2), (3, 5)):
        feeds = _rope_feeds((b, 4, s, 8), 16, seed=b)
        want_y = ReferenceEvaluator(model).run(["Y"], feeds)[0]
        np.testing.assert_allclose(rope.run(*feeds.values()), want_y, rtol=1e-5, atol=1e-6)


def test_import_model_dedupes_names_and_skips_other_ops(tmp_path):
    nodes = [helper.make_node("Relu", ["A"], ["B"], name="n"),
             helper.make_node("RMSNormalization", ["B", "w"], ["C"], name="n"),
             helper.make_node("RMSNormalization", ["C", "w"], ["D"], name="n"),
             helper.make_node("RMSNormalization", ["D", "w"], ["E"], name="for")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 4]),
                                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("E", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    written = ro.import_model(model, tmp_path)
    assert [p.stem for p in written] == ["n", "n_2", "for_op"]
    for p in written:
        ropegen.compile(p)


# ---------------------------------------------------------------------------------------------
# Error paths
# ---------------------------------------------------------------------------------------------

def test_import_model_unknown_shape(tmp_path):
    node = helper.make_node("RotaryEmbedding", ["X", "cos", "sin", "pos"], ["Y"], name="rope")
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, None),        # rank unknown
         helper.make_tensor_value_info("cos", TensorProto.FLOAT, [16, 4]),
         helper.make_tensor_value_info("sin", TensorProto.FLOAT, [16, 4]),
         helper.make_tensor_value_info("pos", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    with pytest.raises(ValueError, match=r"RotaryEmbedding node 'rope'.*X \('X'\).*unknown shape"):
        ro.import_model(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_import_model_unknown_dimension(tmp_path):
    model, _ = _two_node_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].Clear()       # neither dim_value nor dim_param
    with pytest.raises(ValueError, match=r"unknown dimensions"):
        ro.import_model(model, tmp_path)


def test_import_model_bad_stash_type_lists_every_bad_node(tmp_path):
    nodes = [helper.make_node("RMSNormalization", ["A", "w"], ["B"], name="half", stash_type=10),
             helper.make_node("RMSNormalization", ["B", "w"], ["C"], name="ok"),
             helper.make_node("RMSNormalization", ["C", "w"], ["D"], name="bf", stash_type=16)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 4]),
                                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("D", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    with pytest.raises(ValueError) as exc:
        ro.import_model(model, tmp_path / "out")
    msg = str(exc.value)
    assert "2 nodes cannot be imported" in msg
    assert "node 'half': stash_type 10 is not supported" in msg and "stash_type 16" in msg
    assert "1 (float)" in msg and "11 (double)" in msg
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stash", [0, 10, 16, 7])
def test_bad_stash_type_run_node(stash):
    x = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match=f"stash_type {stash} is not supported"):
        ro.run_node(_rms_node(stash_type=stash), [x, x[0]])


def test_stash_type_double():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 7, 16)).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)
    node = _rms_node(stash_type=11, epsilon=1e-3)
    assert "stash   = f64" in ro.spec_for_node(node, [("f32", x.shape), ("f32", w.shape)], "n")
    np.testing.assert_allclose(ro.run_node(node, [x, w])[0], _rms64(x, w, -1, np.float32(1e-3)),
                               rtol=1e-6, atol=1e-6)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    np.testing.assert_allclose(ro.run_node(node, [x64, w64])[0], _rms64(x64, w64, -1, np.float32(1e-3)),
                               rtol=1e-12, atol=1e-12)


def test_import_model_opset_too_old(tmp_path):
    model, _ = _two_node_model()
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 22))
    with pytest.raises(ValueError, match="opset 22; RotaryEmbedding exists from opset 23"):
        ro.import_model(model, tmp_path)


def test_import_model_without_supported_nodes(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["A"], ["B"])], "g",
                              [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("B", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    with pytest.raises(ValueError, match="no RotaryEmbedding, RMSNormalization, SimplifiedLayerNormalization, "
                                         r"SkipSimplifiedLayerNormalization node in the main graph \(skipped 1 "
                                         r"node: Relu x1\)"):
        ro.import_model(model, tmp_path)


def test_import_model_unreadable_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\x00 definitely not protobuf")
    with pytest.raises(ValueError, match="cannot read an ONNX model"):
        ro.import_model(bad, tmp_path / "out")


F32_ROPE = [("f32", (2, 4, 3, 8)), ("f32", (50, 4)), ("f32", (50, 4)), ("i64", (2, 3))]


@pytest.mark.parametrize("node, types, message", [
    (_rope_node(num_heads=0), [("f32", (2, 3, 32))] + F32_ROPE[1:], "needs the num_heads attribute"),
    (_rope_node(num_heads=5), [("f32", (2, 3, 32))] + F32_ROPE[1:], "not a multiple of num_heads"),
    (_rope_node(num_heads=3), F32_ROPE, "num_heads = 3 but 4-D X"),
    (_rope_node(interleaved=2), F32_ROPE, "interleaved must be 0 or 1"),
    (_rope_node(rotary_embedding_dim=3), F32_ROPE, "must be even"),
    (_rope_node(rotary_embedding_dim=10), F32_ROPE, "at most head_size 8"),
    (_rope_node(rotary_embedding_dim=6), [F32_ROPE[0], ("f32", (50, 2)), ("f32", (50, 2)), F32_ROPE[3]],
     "exactly 3 wide"),
    (_rope_node(rotary_embedding_dim=4), F32_ROPE, "are 4 wide.*exactly 2 wide"),
    (_rope_node(scale=2), F32_ROPE, "'scale' is not an attribute of RotaryEmbedding-23"),
    (_rope_node(interleaved=1.0), F32_ROPE, "must be an INT"),
    (_rope_node(), [("f64",) + F32_ROPE[0][1:]] + F32_ROPE[1:], "X is f64"),
    (_rope_node(), F32_ROPE[:3] + [("i32", (2, 3))], "position_ids is i32"),
    (_rope_node(), F32_ROPE[:3] + [("i64", (3, 3))], "disagree on the batch size"),
    (_rope_node(), [("f32", (2, 4, 3, 8)), ("f32", (50, 4)), ("f32", (50, 2)), ("i64", (2, 3))], "same shape"),
    (_rope_node(), [("f32", (2, 4, 3, 8)), ("f32", (2, 3, 4)), ("f32", (2, 3, 4)), ("i64", (2, 3))],
     "caches are 2-D"),
    (_rope_node(no_positions=True), F32_ROPE[:3], "caches are 3-D"),
    (_rope_node(), [("f32", (2, 4, 3, 7))] + F32_ROPE[1:], "head_size 7 is odd"),
    (_rope_node(), [("f32", (2, 4, 3, "D"))] + F32_ROPE[1:], "head_size.*must be a known integer"),
    (_rope_node(), F32_ROPE[:3], "no input types given for input 'pos'|got 3 input types"),
    (_rms_node(axis=2), [("f32", (2, 3)), ("f32", (3,))], "axis 2 is out of range"),
    (_rms_node(), [("f32", (2, 3)), ("f32", (2, 3))], "varies over dimensions"),
    (_rms_node(axis=0), [("f32", (2, 3)), ("f32", (3, 3))], "does not broadcast"),
    (_rms_node(epsilon=-1.0), [("f32", (2, 3)), ("f32", (3,))], "epsilon must be"),
    (_rms_node(), [("i64", (2, 3)), ("f32", (3,))], "X is i64"),
    (helper.make_node("RotaryEmbedding", ["x", "c", "s"], ["y"], domain="com.example"), F32_ROPE[:3],
     "default ONNX domain and com.microsoft RotaryEmbedding"),
])
def test_spec_for_node_errors(node, types, message):
    with pytest.raises(ValueError, match=message):
        ro.spec_for_node(node, types, "op")


# ---------------------------------------------------------------------------------------------
# More dtypes than the node tests carry
# ---------------------------------------------------------------------------------------------

def _rms64(x, w, axis, eps):
    x64 = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    norm = x64 / np.sqrt(np.mean(x64 * x64, axis=axes, keepdims=True) + float(eps))
    return norm * w.astype(np.float64)


ROPE_VARIANTS = {
    "4d": dict(shape=(2, 3, 5, 16), attrs={}),
    "3d": dict(shape=(2, 5, 48), attrs=dict(num_heads=3)),
    "interleaved": dict(shape=(1, 2, 7, 16), attrs=dict(interleaved=1)),
    "partial": dict(shape=(2, 2, 4, 16), attrs=dict(rotary_embedding_dim=8)),
    "partial_interleaved_3d": dict(shape=(1, 6, 32), attrs=dict(num_heads=2, interleaved=1,
                                                                 rotary_embedding_dim=12)),
    "no_position_ids": dict(shape=(2, 3, 5, 16), attrs=dict(no_positions=True)),
}
LOW_PRECISION = {"f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("dtype", list(LOW_PRECISION))
@pytest.mark.parametrize("variant", list(ROPE_VARIANTS))
def test_rotary_low_precision(variant, dtype, backend):
    _require_backend(backend)
    v = ROPE_VARIANTS[variant]
    attrs = dict(v["attrs"])
    no_pos = attrs.get("no_positions", False)
    node = _rope_node(**attrs)
    attrs.pop("no_positions", None)
    rng = np.random.default_rng(zlib.crc32(f"{variant}/{dtype}".encode()))
    shape = v["shape"]
    b = shape[0]
    s = shape[2] if len(shape) == 4 else shape[1]
    head = shape[3] if len(shape) == 4 else shape[2] // attrs["num_heads"]
    width = (attrs.get("rotary_embedding_dim") or head) // 2
    npt = LOW_PRECISION[dtype]
    x = rng.uniform(-2, 2, shape).astype(npt)
    theta = rng.uniform(0, 2 * np.pi, (b, s, width) if no_pos else (32, width))
    cos, sin = np.cos(theta).astype(npt), np.sin(theta).astype(npt)
    inputs = [x, cos, sin]
    pos = None
    if not no_pos:
        pos = rng.integers(0, 32, (b, s)).astype(np.int64)
        inputs.append(pos)
    got = ro.run_node(node, inputs, backend=backend)[0]
    assert got.dtype == npt and got.shape == x.shape
    want = rotary_embedding(x.astype(np.float32), cos.astype(np.float32), sin.astype(np.float32),
                            position_ids=pos, **attrs)
    # the float32 result rounded once to the storage type: half an ulp of |y| <= 2 * 2
    tol = DTYPES[dtype].eps * 4
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("xdt, sdt", [("f16", "f32"), ("f32", "f16"), ("bf16", "bf16"), ("bf16", "f32"),
                                      ("f16", "f64"), ("f64", "f32")])
def test_rms_mixed_types(xdt, sdt, backend):
    _require_backend(backend)
    rng = np.random.default_rng(11)
    xt, st = DTYPES[xdt].np_dtype, DTYPES[sdt].np_dtype
    x = rng.standard_normal((4, 3, 64)).astype(xt)
    w = rng.standard_normal((3, 64)).astype(st)
    node = _rms_node(axis=1, epsilon=1e-4)
    y = ro.run_node(node, [x, w], backend=backend)[0]
    assert y.dtype == st and y.shape == x.shape
    want = _rms64(x, w, 1, np.float32(1e-4))
    # stage one is rounded to X's type, then multiplied by scale and rounded to scale's type
    tol = 4 * max(DTYPES[xdt].eps, DTYPES[sdt].eps, DTYPES["f32"].eps)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol * np.abs(w).max())
