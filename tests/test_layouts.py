"""Metamorphic layout tests: permuting the token and head dims in memory permutes the result.

For every position kind (ids, per-token tables, in_sequence, arange with and without pad, glm2d)
and every angle kind (a table indexed by position, one row per token, computed), the operator is
written for several memory layouts of the same rotated tensors: BSHD, SBHD (Megatron /
TransformerEngine), BHSD (ONNX 4-D), SHBD, merged (heads, head_dim) in both token orders, packed
tokens and [heads, tokens, head_dim]. Positions and per-token tables are declared in the memory
order of the token dims. Inputs are drawn once in the packed [batch, seq, heads, head_dim] order
and permuted by the test (not by ropegen); each layout's result must equal the permuted result of
the packed layout, on the float64 reference and on every backend. Sizes include B > S and B != S
(with B == S a swapped batch / seq index hides).

"cuda-host" runs the whole CUDA wrapper with a stand-in for CuPy whose kernels are the generated
.cu built for the host (tests/test_cuda_backend.py); "cuda" needs a device.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import ropegen
from ropegen import backends
from ropegen.ops import reference

AVAILABLE = {b.name: b.unavailable() for b in backends.BACKENDS}
BACKEND_PARAMS = []
for _name, _why in AVAILABLE.items():
    marks = () if _why is None else pytest.mark.skip(reason=f"backend '{_name}' is unavailable: {_why}")
    BACKEND_PARAMS.append(pytest.param(_name, id=_name, marks=marks))
BACKEND_PARAMS.append(pytest.param("cuda-host", id="cuda-host", marks=() if shutil.which("g++") else
                                   pytest.mark.skip(reason="g++ is not installed (host build of the .cu)")))

D = 8        # head_dim
W = 4        # table width: rotary_dim / 2 columns for neox; rotary_dim / 4 for glm2d (GLM_W)
GLM_W = 2
ROWS = 16    # rows of position-indexed tables
HEADS = {"q": 2, "k": 1}


class Layout:
    """A memory layout: `letters` is the order of (b, s, h, d) in memory (no b: packed tokens)."""

    def __init__(self, name: str, letters: str, merged: bool = False):
        self.name, self.letters, self.merged = name, letters, merged

    @property
    def packed(self) -> bool:
        return "b" not in self.letters

    def dims(self, heads: int) -> str:
        label = {"b": "batch=B", "s": "tokens=S" if self.packed else "seq=S", "h": f"heads={heads}",
                 "d": f"head_dim={D}"}
        parts = [label[c] for c in self.letters]
        if self.merged:
            parts = parts[:-2] + [f"({parts[-2]}, {parts[-1]})"]
        return ", ".join(parts)

    @property
    def token_dims(self) -> str:
        return ", ".join(c.upper() for c in self.letters if c in "bs")

    def tensor(self, x: np.ndarray) -> np.ndarray:
        """[B, S, H, D] -> this layout."""
        if self.packed:
            assert x.shape[0] == 1
            x = x[0]
            order = ["shd".index(c) for c in self.letters]
        else:
            order = ["bshd".index(c) for c in self.letters]
        y = np.ascontiguousarray(x.transpose(order))
        return y.reshape(y.shape[:-2] + (-1,)) if self.merged else y

    def tokens(self, a: np.ndarray) -> np.ndarray:
        """[B, S, ...] (positions, per-token tables) -> the token dims in this layout's memory order."""
        if self.packed:
            assert a.shape[0] == 1
            return np.ascontiguousarray(a[0])
        if self.letters.index("s") < self.letters.index("b"):
            a = np.swapaxes(a, 0, 1)
        return np.ascontiguousarray(a)


BSHD = Layout("bshd", "bshd")
LAYOUTS = [BSHD, Layout("sbhd", "sbhd"), Layout("bhsd", "bhsd"), Layout("shbd", "shbd"),
           Layout("bs_merged", "bshd", merged=True), Layout("sb_merged", "sbhd", merged=True),
           Layout("tokens", "shd"), Layout("htd", "hsd")]
PACKED = [lay for lay in LAYOUTS if lay.packed]
BATCHED = [lay for lay in LAYOUTS if not lay.packed]
BS_ORDER = [lay for lay in BATCHED if lay.letters.index("b") < lay.letters.index("s")]

# (position kind, angle kind, layouts): the first layout is the packed base the others are compared with
COMBOS = {
    "ids-table": ("ids", "table", LAYOUTS),
    "ids-computed": ("ids", "computed", LAYOUTS),
    "token-table": ("none", "token_table", LAYOUTS),
    "in_sequence-table": ("in_sequence", "table", PACKED),
    "in_sequence-computed": ("in_sequence", "computed", PACKED),
    "arange-computed": ("arange", "computed", LAYOUTS),
    "arange-table": ("arange", "table", LAYOUTS),
    "arange_pad-table": ("arange_pad", "table", BATCHED),
    "arange_pad-computed": ("arange_pad", "computed", BATCHED),
    "glm2d-computed": ("glm2d", "computed", BS_ORDER),
    "glm2d-table": ("glm2d", "table", BS_ORDER),
}
SIZES = [(3, 2), (2, 5), (5, 1), (1, 4)]   # (B, S): B > S, B < S, B >> S, one batch row


def spec_text(pos: str, angles: str, lay: Layout) -> str:
    w = GLM_W if pos == "glm2d" else W
    lines = [f"rope op_{lay.name} {{",
             f"    in q: f32[{lay.dims(HEADS['q'])}]",
             f"    in k: f32[{lay.dims(HEADS['k'])}]"]
    if pos == "ids":
        lines.append(f"    in pos: i64[{lay.token_dims}]")
    if pos in ("arange_pad", "glm2d"):
        lines.append("    in pad: i64[B]")
    if pos == "in_sequence":
        lines.append("    in lens: i64[N]")
    if angles == "table":
        lines += [f"    in cos: f32[R, {w}]", f"    in sin: f32[R, {w}]"]
    elif angles == "token_table":
        lines += [f"    in cos: f32[{lay.token_dims}, {w}]", f"    in sin: f32[{lay.token_dims}, {w}]"]
    lines += ["    out q_rot = rotate(q)", "    out k_rot = rotate(k)"]
    lines.append("    pairing = glm2d" if pos == "glm2d" else "    pairing = neox")
    lines.append({"ids": "    positions = pos", "none": "", "in_sequence": "    positions = in_sequence",
                  "arange": "    positions = arange(start = 3)",
                  "arange_pad": "    positions = arange(start = 2, pad = pad)",
                  "glm2d": "    positions = glm2d(start = 1, pad = pad, first_seqlen = 4)"}[pos])
    if pos == "in_sequence":
        lines.append("    sequences = lens")
    lines.append("    angles = computed(base = 10000)" if angles == "computed" else
                 "    angles = table(cos = cos, sin = sin)")
    lines.append("}")
    return "\n".join(lines) + "\n"


_OPS: dict[str, ropegen.Operator] = {}


def compiled(text: str):
    if text not in _OPS:
        (op,) = ropegen.compile(text)
        _OPS[text] = op
    return _OPS[text]


def canonical_inputs(pos: str, angles: str, B: int, S: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = GLM_W if pos == "glm2d" else W
    a = {n: rng.standard_normal((B, S, h, D)).astype(np.float32) for n, h in HEADS.items()}
    if pos == "ids":
        a["pos"] = rng.integers(0, ROWS, (B, S)).astype(np.int64)
    if pos in ("arange_pad", "glm2d"):
        a["pad"] = rng.integers(0, 2, B).astype(np.int64)
    if pos == "in_sequence":
        cut = sorted(rng.integers(0, S + 1, 2))
        a["lens"] = np.array([cut[0], cut[1] - cut[0], S - cut[1]], dtype=np.int64)
    if angles == "table":
        a["cos"] = rng.standard_normal((ROWS, w)).astype(np.float32)
        a["sin"] = rng.standard_normal((ROWS, w)).astype(np.float32)
    elif angles == "token_table":
        a["cos"] = rng.standard_normal((B, S, w)).astype(np.float32)
        a["sin"] = rng.standard_normal((B, S, w)).astype(np.float32)
    return a


def in_layout(a: dict[str, np.ndarray], pos: str, angles: str, lay: Layout) -> dict[str, np.ndarray]:
    out = dict(a)
    for n in HEADS:
        out[n] = lay.tensor(a[n])
    if pos == "ids":
        out["pos"] = lay.tokens(a["pos"])
    if angles == "token_table":
        out["cos"], out["sin"] = lay.tokens(a["cos"]), lay.tokens(a["sin"])
    return out


def run_backend(op, arrays: dict[str, np.ndarray], backend: str, monkeypatch, **options) -> dict[str, np.ndarray]:
    """The outputs (by name) of `op` on `backend` (cuda-host: the CUDA wrapper over host-built kernels)."""
    args = [arrays[n] for n in op.inputs]
    if backend == "cuda-host":
        import test_cuda_backend as tcb
        tcb._fake_cupy(monkeypatch)
        from ropegen.backends.cuda import backend as cuda_backend
        tcb._CFG_OF[op.sources["cuda"][f"{op.name}.cu"]] = (cuda_backend.CudaBackend().config(op.plan),)
        outs = op.run_all(*args, backend="cuda", **options)
    else:
        outs = op.run_all(*args, backend=backend, **options)
    return dict(zip(op.outputs, outs))


def _cases():
    for combo, (pos, angles, layouts) in COMBOS.items():
        for lay in layouts[1:]:
            yield pytest.param(combo, lay, id=f"{combo}-{lay.name}")


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("combo,lay", list(_cases()))
def test_permuted_layout_gives_the_permuted_result(combo, lay, backend, monkeypatch):
    pos, angles, layouts = COMBOS[combo]
    base = layouts[0]
    op_base = compiled(spec_text(pos, angles, base))
    op = compiled(spec_text(pos, angles, lay))
    # packed tokens are one batch row
    sizes = [(1, s) for _, s in SIZES] if base.packed or lay.packed else SIZES
    for i, (B, S) in enumerate(sizes):
        can = canonical_inputs(pos, angles, B, S, seed=100 + i)
        ref_base = reference.evaluate(op_base.ir, in_layout(can, pos, angles, base))
        # the packed base layout's reference, permuted by the test, is the expected result
        want = {o: lay.tensor(base_to_canonical(ref_base[o], base)) for o in op.outputs}
        arrays = in_layout(can, pos, angles, lay)
        ref = reference.evaluate(op.ir, arrays)
        for o in op.outputs:
            np.testing.assert_allclose(ref[o], want[o], rtol=0, atol=1e-12, err_msg=f"reference {o} B={B} S={S}")
        got = run_backend(op, arrays, backend, monkeypatch)
        got_base = run_backend(op_base, in_layout(can, pos, angles, base), backend, monkeypatch)
        for o in op.outputs:
            np.testing.assert_allclose(got[o].astype(np.float64), want[o], rtol=1e-5, atol=1e-5,
                                       err_msg=f"{backend} {o} B={B} S={S}")
            same = lay.tensor(base_to_canonical(got_base[o], base))
            np.testing.assert_allclose(got[o], same, rtol=1e-6, atol=1e-6,
                                       err_msg=f"{backend} {o} against its packed layout, B={B} S={S}")


def base_to_canonical(y: np.ndarray, base: Layout) -> np.ndarray:
    """An output in the base layout (BSHD or packed [tokens, heads, head_dim]) as [B, S, H, D]."""
    return y[None] if base.packed else y


def test_layouts_cover_sb_and_bs_token_orders():
    """The plan's token order follows the first rotated tensor's token dims (seq outer: "sb")."""
    for lay in LAYOUTS:
        op = compiled(spec_text("ids", "table", lay))
        want = "sb" if (not lay.packed and lay.letters.index("s") < lay.letters.index("b")) else "bs"
        assert op.plan.token_order == want, lay.name
