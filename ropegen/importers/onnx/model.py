"""A whole ONNX model -> one `.rope` spec file per RotaryEmbedding / RMSNormalization node: the model's
value types after shape inference, the opset check, names for specs and symbols (`import_model`)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from ropegen.importers.onnx.common import (_INPUTS, _OUT, _RMS_NAMES, _ROPE_NAMES, DEFAULT_DOMAINS, ONNX_DTYPES,
                                           OPSET, SUPPORTED_OPS, TensorType, _fmt_shape, _require_onnx, _where)
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


def _node_types(node: "onnx.NodeProto", known: dict, allow_symbolic: bool) -> list[Optional[TensorType]]:
    types: list[Optional[TensorType]] = []
    for slot, tensor in zip(_INPUTS[node.op_type], node.input):
        if not tensor:
            types.append(None)
            continue
        info = known.get(tensor)
        if info is None:
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has no known type or shape; "
                             "give the model full shape information (onnx.shape_inference could not infer it)")
        elem, dims = info
        if elem not in ONNX_DTYPES:
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has element type "
                             f"{_type_name(elem)}, which ropegen does not support")
        if dims is None:
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has an unknown shape (not even its rank); "
                             "give the model static input shapes")
        unknown = [i for i, d in enumerate(dims) if d is None]
        symbolic = [i for i, d in enumerate(dims) if isinstance(d, str)]
        shape_txt = _fmt_shape(["?" if d is None else d for d in dims])
        if unknown or (symbolic and not allow_symbolic):
            raise ValueError(f"{_where(node)}: input {slot} ('{tensor}') has shape {shape_txt} with "
                             f"{'unknown' if unknown else 'symbolic'} dimensions; ropegen specialises kernels "
                             "on concrete shapes: fix the model's input dims (e.g. python -m "
                             "onnxruntime.tools.make_dynamic_shape_fixed)"
                             + ("" if unknown else " or import with allow_symbolic=True"))
        if symbolic:
            dims = [_symbol(d) if isinstance(d, str) else d for d in dims]
        types.append((ONNX_DTYPES[elem], tuple(dims)))
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
                 *, allow_symbolic: bool = False) -> list[Path]:
    """Write one .rope spec per RotaryEmbedding / RMSNormalization node (opset 23) of a model.

    Shapes and types come from the model after onnx shape inference (graph inputs, value_info,
    outputs, initializers). Every node is checked first; if any cannot be imported, a ValueError
    lists all problems and nothing is written. With allow_symbolic=True, named symbolic dims
    (dim_param) become spec symbols where the language allows them (batch, seq, cache rows,
    RMSNorm's leading dims). Returns the written paths, in graph order.
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
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - fall back to the shapes the model declares
        inferred = model
    known = _value_types(inferred)
    opset = _default_opset(model)

    nodes = [(i, n) for i, n in enumerate(model.graph.node)
             if n.op_type in SUPPORTED_OPS and n.domain in DEFAULT_DOMAINS]
    if not nodes:
        raise ValueError(f"{label}: no {' or '.join(SUPPORTED_OPS)} node (default domain, opset {OPSET}) "
                         "in the main graph")
    out = Path(out_dir)
    errors: list[str] = []
    specs: list[tuple[Path, str]] = []
    used: set[str] = set()
    for index, node in nodes:
        base = _sanitize(node.name) or f"{_sanitize(node.op_type)}_{index}"
        name, k = base, 2
        while name.lower() in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name.lower())
        path = out / f"{name}.rope"
        try:
            _check_opset(onnx, node, opset)
            text = spec_for_node(node, _node_types(node, known, allow_symbolic), name)
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
    return [p for p, _ in specs]
