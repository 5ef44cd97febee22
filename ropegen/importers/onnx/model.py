"""A whole ONNX model -> one `.rope` spec file per RoPE / RMSNorm node (RotaryEmbedding-23, RMSNormalization-23
and ONNX Runtime's contrib ops): the model's value types after shape inference, the opset check, names for
specs and symbols (`import_model`)."""
from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Union

from ropegen.importers.onnx.common import (_INPUTS, _OUT, _RMS_NAMES, _ROPE_NAMES, DEFAULT_DOMAINS, IMPORTED_OPS,
                                           ONNX_DTYPES, OPSET, SUPPORTED_OPS, TensorType, _fmt_shape, _require_onnx,
                                           _where, op_key)
from ropegen.importers.onnx.graph import gqa_rotary_error, ort_inferred, pin_dims, skip_summary
from ropegen.importers.onnx.node import spec_for_node
from ropegen.spec.sema import reserved_words

if TYPE_CHECKING:
    import onnx


def _sanitize(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    s = re.sub(r"_+", "_", s)
    if not s:
        return ""
    if not s[0].isalpha():
        s = "op_" + s
    if s in reserved_words():
        s += "_op"
    return s


def _value_types(model: "onnx.ModelProto") -> dict[str, tuple[int, Optional[list]]]:
    """Name -> (elem_type, dims or None) from graph inputs, value_info, outputs and initializers."""
    g = model.graph
    out: dict[str, tuple[int, Optional[list]]] = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims: Optional[list] = None
        if tt.HasField("shape"):
            dims = []
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
        prev = out.get(vi.name)
        if prev is None or (prev[1] is None and dims is not None):
            out[vi.name] = (tt.elem_type, dims)
    for init in g.initializer:
        out[init.name] = (init.data_type, [int(d) for d in init.dims])
    for init in g.sparse_initializer:
        out[init.values.name] = (init.values.data_type, [int(d) for d in init.dims])
    return out


def _ranked(info: Optional[tuple[int, Optional[list]]]) -> bool:
    return info is not None and info[1] is not None


def _merge_ort_shapes(known: dict, model: "onnx.ModelProto") -> None:
    """Fill the types onnx's inference left out (outputs of com.microsoft nodes, which it skips) from ONNX
    Runtime's symbolic shape inference, where that is installed and succeeds. Only values onnx knows
    nothing of (not even the rank) are filled: a dimension the model leaves unnamed stays an error."""
    extra = ort_inferred(model)
    if extra is None:
        return
    for name, info in _value_types(extra).items():
        if not _ranked(known.get(name)) and _ranked(info) and None not in info[1]:
            known[name] = info


def _default_opset(model: "onnx.ModelProto") -> Optional[int]:
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return int(imp.version)
    return None


def _check_opset(onnx_mod, node: "onnx.NodeProto", opset: Optional[int]) -> None:
    if opset is None:
        raise ValueError(f"{_where(node)}: the model imports no default-domain opset")
    if opset < OPSET:
        raise ValueError(f"{_where(node)}: the model imports opset {opset}; {node.op_type} exists from opset "
                         f"{OPSET} on")
    try:
        since = onnx_mod.defs.get_schema(node.op_type, max_inclusive_version=opset, domain="").since_version
    except Exception:  # noqa: BLE001 - onnx raises SchemaError, a private type
        since = None
    if since != OPSET:
        raise ValueError(f"{_where(node)}: opset {opset} resolves {node.op_type} to version {since}; "
                         f"ropegen imports version {OPSET}")


def _node_types(node: "onnx.NodeProto", known: dict, symbols: dict[str, str]) -> list[Optional[TensorType]]:
    """The node's input types; each symbolic dimension becomes a spec symbol, recorded in `symbols`."""
    types: list[Optional[TensorType]] = []
    for slot, tensor in zip(_INPUTS[op_key(node)], node.input):
        if not tensor:
            types.append(None)
            continue
        info = known.get(tensor)
        if info is None:
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has no known type or shape; give the "
                             "model value_info for it (neither onnx's shape inference nor, where installed, "
                             "ONNX Runtime's symbolic shape inference could infer it)")
        elem, dims = info
        if elem not in ONNX_DTYPES:
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has element type "
                             f"{_type_name(elem)}, which ropegen does not support")
        if dims is None:
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has an unknown shape (not even its rank); "
                             "give the model input shapes or value_info for it")
        if any(d is None for d in dims):
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has shape "
                             f"{_fmt_shape(['?' if d is None else d for d in dims])} with unknown dimensions "
                             "(neither a size nor a name); give the model's inputs named or fixed dims (e.g. "
                             "python -m onnxruntime.tools.make_dynamic_shape_fixed)")
        for d in dims:
            if isinstance(d, str):
                symbols.setdefault(d, _symbol(d))
        types.append((ONNX_DTYPES[elem], tuple(symbols[d] if isinstance(d, str) else d for d in dims)))
    return types


def _symbol(dim_param: str) -> str:
    s = _sanitize(dim_param)
    if not s or s in reserved_words() or s in (*_ROPE_NAMES, *_RMS_NAMES, _OUT):
        s = f"dim_{s}" if s else "dim"
    return s


def _type_name(elem: int) -> str:
    try:
        import onnx
        return onnx.TensorProto.DataType.Name(elem).lower()
    except Exception:  # noqa: BLE001
        return str(elem)


def import_model(model_path: Union[str, os.PathLike, "onnx.ModelProto"], out_dir: Union[str, os.PathLike],
                 fix: Optional[Mapping[str, int]] = None,
                 report: Optional[Callable[[str], None]] = None) -> list[Path]:
    """Write one .rope spec per RotaryEmbedding / RMSNormalization node (opset 23) and per ONNX Runtime
    contrib RotaryEmbedding / SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization node.

    Shapes and types come from the model after onnx shape inference (graph inputs, value_info,
    outputs, initializers). Named symbolic dims (dim_param, e.g. batch, sequence_length) become spec
    symbols where the language allows them (batch, seq, cache rows, RMSNorm's leading dims); `fix`
    pins named ones to sizes first (`--fix batch=1`; a name the model lacks is a ValueError listing
    its symbolic dims). Every node is checked first; if any cannot be imported (GroupQueryAttention
    with do_rotary = 1 included), a ValueError lists all problems and nothing is written. `report`
    receives one-line notes: the nodes skipped ("skipped 212 nodes: MatMul x96, Add x40, ...") and the
    symbolic dims kept. Returns the written paths, in graph order.
    """
    onnx = _require_onnx()
    from ropegen.api import compile as compile_spec
    from ropegen.spec.diagnostics import SpecError

    if isinstance(model_path, onnx.ModelProto):
        model, label = model_path, "<model>"
    else:
        label = os.fspath(model_path)
        try:
            model = onnx.load(label, load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - protobuf raises several types
            raise ValueError(f"{label}: cannot read an ONNX model: {exc}") from None
    if fix:
        model = pin_dims(onnx, model, fix, label)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - fall back to the shapes the model declares
        inferred = model
    known = _value_types(inferred)
    opset = _default_opset(model)

    nodes: list[tuple[int, "onnx.NodeProto"]] = []
    errors: list[str] = []
    skipped: Counter = Counter()
    for i, n in enumerate(model.graph.node):
        gqa = gqa_rotary_error(n)
        if gqa:
            errors.append(gqa)
        elif op_key(n) is None:
            skipped[n.op_type] += 1
        else:
            nodes.append((i, n))
    if not nodes and not errors:
        raise ValueError(f"{label}: no {', '.join(IMPORTED_OPS)} node in the main graph"
                         + (f" ({skip_summary(skipped)})" if skipped else ""))
    if any(not _ranked(known.get(t)) for _, n in nodes for t in n.input if t):
        _merge_ort_shapes(known, model)
    out = Path(out_dir)
    specs: list[tuple[Path, str]] = []
    symbols: dict[str, str] = {}
    used: set[str] = set()
    for index, node in nodes:
        base = _sanitize(node.name) or f"{_sanitize(node.op_type)}_{index}"
        name, k = base, 2
        while name.lower() in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name.lower())
        path = out / f"{name}.rope"
        try:
            if op_key(node) in SUPPORTED_OPS:
                _check_opset(onnx, node, opset)
            text = spec_for_node(node, _node_types(node, known, symbols), name)
            try:
                compile_spec(text, file=str(path))
            except SpecError as exc:
                raise ValueError(f"{_where(node)}: the generated spec does not check (a ropegen bug):\n{exc}") \
                    from None
        except ValueError as exc:
            errors.append(str(exc))
            continue
        specs.append((path, text))
    if errors:
        raise ValueError(f"{label}: " + ("\n".join(errors) if len(errors) == 1 else
                                         f"{len(errors)} nodes cannot be imported:\n" + "\n".join(errors)))
    out.mkdir(parents=True, exist_ok=True)
    for path, text in specs:
        path.write_text(text, encoding="utf-8")
    if report is not None:
        if skipped:
            report(skip_summary(skipped))
        if symbols:
            report("symbolic dims kept as spec symbols: " + ", ".join(
                k if k == v else f"{k} (as {v})" for k, v in symbols.items()) + " (pin one with --fix NAME=SIZE)")
    return [p for p, _ in specs]
