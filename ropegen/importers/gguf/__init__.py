"""`ropegen import-gguf`: a GGUF model (llama.cpp's format) to one spec holding the attention RoPE llama.cpp
computes for it (operator `rope`: q, k, positions -> q_rot, k_rot, float32 q and k, int32 positions, ggml's
float32 angle numerics) and its RMSNorm (operator `rmsnorm`: x, weight -> y).

Only the metadata and the small rope tensors are read (the `gguf` package memory-maps the file; no weight is
touched). The rotation comes from `general.architecture` through llama.cpp's rope-type table (rope_types.py),
its arguments from the `<arch>.rope.*` and `<arch>.attention.*` keys as llama.cpp reads them (llama_cpp.py).
A model whose rope tensor (rope_freqs, LongRoPE's rope_factors_long / rope_factors_short) divides the angles
takes it as the `freq_factors` input; its values are written beside the spec as `<name>.<tensor>.npy`.
MROPE models (Qwen2-VL) take positions [3, T] (t, h, w) through `mrope(...)`; IMROPE, whose leftover lanes
ggml sends to a fourth stream, is refused. What the language cannot say is a ValueError naming the key; what
the spec leaves out, a warning.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ropegen.importers.gguf.llama_cpp import Meta, rope_params
from ropegen.importers.gguf.spec import spec_text

# the rope tensors llama.cpp hands ggml_rope_ext as freq_factors (LLM_TENSOR_ROPE_FREQS, _LONG, _SHORT)
ROPE_TENSORS = ("rope_freqs", "rope_factors_long", "rope_factors_short")


def _value(field):
    """A field's value: scalars and strings as Python values, arrays as lists."""
    if hasattr(field, "contents"):
        return field.contents()
    from gguf import GGUFValueType            # gguf before 0.10: no contents()
    parts = [field.parts[i] for i in field.data]
    if field.types and field.types[-1] == GGUFValueType.STRING:
        vals = [bytes(p).decode("utf-8") for p in parts]
    else:
        vals = [p.tolist()[0] for p in parts]
    return vals if field.types[0] == GGUFValueType.ARRAY else vals[0]


def read_gguf(path: Path) -> tuple[dict, dict, set[str]]:
    """(the general.* and <arch>.* keys, the rope tensors by name without `.weight`, every tensor name)."""
    try:
        import gguf
    except ImportError:
        raise ValueError("reading GGUF files needs the gguf package (pip install gguf)") from None
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:   # bad magic, truncation, memory-map errors: the reader's own exception types
        raise ValueError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc})") from None
    try:
        fields = reader.fields
        arch = _value(fields["general.architecture"]) if "general.architecture" in fields else None
        # the tokenizer's arrays are large and say nothing about the RoPE: not decoded
        kv = {k: _value(f) for k, f in fields.items()
              if k.startswith("general.") or (isinstance(arch, str) and k.startswith(arch + "."))}
        names, tensors = set(), {}
        for t in reader.tensors:
            names.add(t.name)
            base = t.name.removesuffix(".weight")
            if base in ROPE_TENSORS:
                if t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                    raise ValueError(f"tensor '{t.name}' is {t.tensor_type.name}; llama.cpp reads it as F32")
                tensors[base] = np.array(t.data, dtype=np.float32).reshape(tuple(int(n) for n in t.shape))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    except Exception as exc:   # the reader's struct / index / memory-map errors on a damaged file
        raise ValueError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc})") from None
    return kv, tensors, names


def _rms_eps(m: Meta, warnings: list[str]) -> float | None:
    if m.has("attention.layer_norm_rms_epsilon"):
        return m.number("attention.layer_norm_rms_epsilon")
    if m.has("attention.layer_norm_epsilon"):
        warnings.append(f"'{m.arch}' normalizes with LayerNorm ('{m.key('attention.layer_norm_epsilon')}'): "
                        "no rmsnorm operator written")
    else:
        warnings.append(f"the GGUF has no '{m.key('attention.layer_norm_rms_epsilon')}': no rmsnorm operator written")
    return None


def import_gguf(path: str | Path, out_dir: str | Path) -> tuple[Path, list[str]]:
    """Read a GGUF file, write <out_dir>/<name>.rope (and its factor tensors as .npy); (the spec written,
    warnings)."""
    path = Path(path)
    kv, tensors, names = read_gguf(path)
    name = re.sub(r"[^A-Za-z0-9_]+", "_", path.stem) or "model"
    try:
        p = rope_params(kv, tensors)
        m = Meta(kv, p.arch)
        warnings = list(p.notes)
        eps = _rms_eps(m, warnings)
        n_embd = m.number("embedding_length", integer=True)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if any(n.endswith("attn_q_norm.weight") for n in names):
        warnings.append("the model normalizes q and k per head (attn_q_norm / attn_k_norm) before the rotation: "
                        "not written")
    files = {t: f"{name}.{t}.npy" for _, t, _ in p.variants if t}
    text = spec_text(p, name, files, eps, n_embd)
    from ropegen import compile as compile_spec
    compile_spec(text)    # the importer's own output must compile: a SpecError here is a bug of ours
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for tensor, file in files.items():
        np.save(out / file, tensors[tensor])
        warnings.append(f"the {tensor} tensor is the spec's freq_factors input: written to {out / file}")
    target = out / f"{name}.rope"
    target.write_text(text)
    return target, warnings
