"""Property tests (hypothesis) over small random shapes and values, on every available backend.

RoPE:
- each rotated pair keeps its norm, times the magnitude factor (computed angles: neox / gptj / glm2d
  pairing, partial rotary, f32 / f64 storage, exact and ggml numerics, linear / llama3 / ggml_yarn
  scaling, an explicit `magnitude`); pass-through lanes are copied bit-exactly;
- forward then backward (`direction = backward`, same settings) gives m^2 * x, the identity when the
  magnitude m is 1 (backward is the transposed rotation, sin -> -sin), for computed angles and tables;
- for plain RoPE the dot product of rotated q at position m and rotated k at position n depends only
  on m - n.
RMSNorm:
- with scale = ones each normalized row has RMS sqrt(ms / (ms + eps)) (1 for eps -> 0);
- x and c*x (c > 0) give the same output, up to the epsilon's share.

Specs are written inline; the pair maps and the expected magnitudes are re-derived here, not taken
from ropegen's plan.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ropegen
from ropegen import backends
from ropegen.spec.diagnostics import SpecError

AVAILABLE = [b.name for b in backends.BACKENDS if b.unavailable() is None]
UNAVAILABLE = {b.name: b.unavailable() for b in backends.BACKENDS if b.unavailable() is not None}
BACKEND_PARAMS = [pytest.param(b, id=b) for b in AVAILABLE] + [
    pytest.param(b, id=b, marks=pytest.mark.skip(reason=f"backend '{b}' is unavailable: {why}"))
    for b, why in UNAVAILABLE.items()]

# Compiled backends build one kernel per distinct spec (a cold C build is ~0.3 s), so they get
# fewer examples than NumPy; the whole file stays well under 30 s on two cores with a cold build cache.
EXAMPLES = {"numpy": 50}
COMPILED_EXAMPLES = 6


def each_backend(**strategies):
    """One hypothesis property per backend (a pytest parameter; unavailable backends are skipped).

    The decorated body takes `backend` first, then the drawn values; the number of examples depends
    on the backend (EXAMPLES, else COMPILED_EXAMPLES); derandomized so that CI runs are reproducible.
    """
    def deco(body):
        @pytest.mark.parametrize("backend", BACKEND_PARAMS)
        def test(backend):
            @settings(max_examples=EXAMPLES.get(backend, COMPILED_EXAMPLES), deadline=None, derandomize=True,
                      database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
            @given(**strategies)
            def prop(**drawn):
                body(backend, **drawn)
            prop()
        test.__name__ = body.__name__
        test.__qualname__ = body.__qualname__
        test.__doc__ = body.__doc__
        return test
    return deco


NP = {"f32": np.float32, "f64": np.float64}
# relative accuracy of a rotated result in each storage type (a few ulps)
TOL = {"f32": 4e-6, "f64": 1e-12}


@lru_cache(maxsize=None)
def compiled(text: str) -> ropegen.Operator:
    prog = ropegen.compile(text)
    assert len(prog) == 1
    return prog.operators[0]


# ---------------------------------------------------------------------------------------------
# spec builders

def scaling_text_and_magnitude(kind: str, p: dict) -> tuple[str | None, float]:
    """The `scaling = ...` argument and the magnitude factor it implies (landscape 2.2, 2.7, 2.8)."""
    if kind == "none":
        return None, 1.0
    if kind == "linear":
        return f"linear(factor = {p['factor']!r})", 1.0
    if kind == "llama3":
        return ("llama3(factor = 8, low_freq_factor = 1, high_freq_factor = 4, "
                "original_max_positions = 64)"), 1.0
    fs, ext, attn = p["freq_scale"], p["ext_factor"], p["attn_factor"]
    text = (f"ggml_yarn(freq_scale = {fs!r}, ext_factor = {ext!r}, attn_factor = {attn!r}, "
            f"beta_fast = 32, beta_slow = 1, n_ctx_orig = 64)")
    return text, attn * ((1 + 0.1 * math.log(1 / fs)) if ext != 0 else 1.0)


def pairing_text(pairing: str) -> str:
    return {"neox": "neox", "gptj": "gptj", "glm2d_gptj": "glm2d(inner = gptj)",
            "glm2d_neox": "glm2d(inner = neox)"}[pairing]


def computed_spec(*, dtype: str, heads: int, head_dim: int, pairing: str, rotary_dim: int, scaling: str | None,
                  magnitude: float | None, numerics: str, direction: str = "forward", compute: str | None = None,
                  base: float = 10000.0) -> str:
    """A rope operator with computed angles. glm2d pairing takes [batch, seq] tensors and glm2d positions
    (inputs x, start, first); the others take packed tokens and an i64 position per token (x, pos)."""
    args = [f"base = {base!r}"]
    if scaling:
        args.append(f"scaling = {scaling}")
    if magnitude is not None:
        args.append(f"magnitude = {magnitude!r}")
    if pairing.startswith("glm2d"):
        decl = (f"    in x: {dtype}[batch=B, seq=S, heads={heads}, head_dim={head_dim}]\n"
                "    in start: i64[]\n"
                "    in first: i64[]\n")
        positions = "glm2d(start = start, first_seqlen = first)"
    else:
        decl = (f"    in x: {dtype}[tokens=T, heads={heads}, head_dim={head_dim}]\n"
                "    in pos: i64[T]\n")
        positions = "pos"
    lines = ["rope r {", decl.rstrip("\n"), "    out y = rotate(x)",
             f"    pairing = {pairing_text(pairing)}",
             f"    rotary_dim = {rotary_dim}",
             f"    positions = {positions}",
             f"    angles = computed({', '.join(args)})",
             f"    angle_numerics = {numerics}",
             f"    direction = {direction}"]
    if compute:
        lines.append(f"    compute = {compute}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def pair_map(pairing: str, rotary_dim: int) -> list[tuple[int, int]]:
    """The (a, b) lanes of every rotated pair of one head (landscape section 3)."""
    r = rotary_dim
    if pairing == "neox":
        return [(j, j + r // 2) for j in range(r // 2)]
    if pairing == "gptj":
        return [(2 * j, 2 * j + 1) for j in range(r // 2)]
    half = r // 2
    out = []
    for off in (0, half):
        if pairing == "glm2d_neox":
            out += [(off + j, off + j + half // 2) for j in range(half // 2)]
        else:
            out += [(off + 2 * j, off + 2 * j + 1) for j in range(half // 2)]
    return out


@st.composite
def computed_cases(draw):
    pairing = draw(st.sampled_from(["neox", "gptj", "glm2d_gptj", "glm2d_neox"]))
    step = 4 if pairing.startswith("glm2d") else 2
    head_dim = draw(st.sampled_from([4, 8, 12, 16, 24]))
    rotary_dim = draw(st.sampled_from([r for r in range(step, head_dim + 1, step)]))
    dtype = draw(st.sampled_from(["f32", "f64"]))
    heads = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["none", "linear", "llama3", "ggml_yarn"]))
    p = {}
    if kind == "linear":
        p["factor"] = draw(st.sampled_from([2.0, 4.0, 0.5]))
    if kind == "ggml_yarn":
        p["freq_scale"] = draw(st.sampled_from([0.25, 0.5, 1.0, 0.125]))
        p["ext_factor"] = draw(st.sampled_from([0.0, 1.0, 0.5]))
        p["attn_factor"] = draw(st.sampled_from([1.0, 0.75, 1.5]))
    scaling, mag = scaling_text_and_magnitude(kind, p)
    magnitude = draw(st.sampled_from([None, 0.5, 2.0]))
    if magnitude is not None:
        mag *= magnitude
    numerics = draw(st.sampled_from(["exact", "ggml"])) if kind in ("none", "ggml_yarn") else "exact"
    base = draw(st.sampled_from([10000.0, 500000.0, 100.0]))
    return dict(pairing=pairing, head_dim=head_dim, rotary_dim=rotary_dim, dtype=dtype, heads=heads,
                scaling=scaling, magnitude=magnitude, numerics=numerics, base=base,
                compute=case_compute(dtype)), mag


def case_compute(dtype: str) -> str:
    """f64 storage is rotated in f64 (the default arithmetic is f32)."""
    return "f64" if dtype == "f64" else "f32"


def case_tol(case: dict) -> float:
    """ggml numerics form cos/sin in float32 whatever the storage: cos^2 + sin^2 = 1 + O(2^-24)."""
    return TOL["f32"] if case["numerics"] == "ggml" else TOL[case["dtype"]]


def make_inputs(case: dict, data, rng: np.random.Generator):
    """Arrays in declaration order, and the x they rotate."""
    dt = NP[case["dtype"]]
    if case["pairing"].startswith("glm2d"):
        B = data.draw(st.integers(1, 2), label="batch")
        S = data.draw(st.integers(1, 5), label="seq")
        start = data.draw(st.integers(0, 3000), label="start")
        first = data.draw(st.integers(0, 3000), label="first_seqlen")
        x = rng.uniform(-2, 2, (B, S, case["heads"], case["head_dim"])).astype(dt)
        return (x, np.int64(start), np.int64(first)), x
    T = data.draw(st.integers(1, 6), label="tokens")
    pos = np.array(data.draw(st.lists(st.integers(0, 5000), min_size=T, max_size=T), label="pos"), dtype=np.int64)
    x = rng.uniform(-2, 2, (T, case["heads"], case["head_dim"])).astype(dt)
    return (x, pos), x


def pair_norms(a: np.ndarray, pairs) -> np.ndarray:
    a = a.astype(np.float64)
    return np.stack([np.hypot(a[..., i], a[..., j]) for i, j in pairs], axis=-1)


# =============================================================================================
# RoPE: norm preservation

@each_backend(cm=computed_cases(), data=st.data(), seed=st.integers(0, 2 ** 32 - 1))
def test_pairs_keep_their_norm_times_magnitude(backend, cm, data, seed):
    case, m = cm
    op = compiled(computed_spec(**case))
    arrays, x = make_inputs(case, data, np.random.default_rng(seed))
    y = op.run(*arrays, backend=backend)
    assert y.dtype == x.dtype and y.shape == x.shape
    pairs = pair_map(case["pairing"], case["rotary_dim"])
    nx, ny = pair_norms(x, pairs), pair_norms(y, pairs)
    tol = case_tol(case)
    np.testing.assert_allclose(ny, m * nx, rtol=tol, atol=tol * m * 4)
    # every lane not in a pair passes through unchanged, bit for bit
    rotated = sorted({i for p in pairs for i in p})
    assert rotated == list(range(case["rotary_dim"]))
    assert np.array_equal(y[..., case["rotary_dim"]:], x[..., case["rotary_dim"]:])


def test_yarn_magnitude_formula():
    """The ggml_yarn magnitude is attn_factor * (1 + 0.1 ln(1/freq_scale)) when ext_factor != 0."""
    case = dict(pairing="neox", head_dim=8, rotary_dim=8, dtype="f64", heads=1, magnitude=None,
                numerics="exact", base=10000.0, compute="f64",
                scaling="ggml_yarn(freq_scale = 0.25, ext_factor = 1, attn_factor = 0.8, n_ctx_orig = 64)")
    op = compiled(computed_spec(**case))
    x = np.zeros((1, 1, 8))
    x[0, 0, 0] = 1.0
    y = op.run(x, np.array([0], dtype=np.int64))
    # at position 0 the rotation is the identity, so y = m x
    assert y[0, 0, 0] == pytest.approx(0.8 * (1 + 0.1 * math.log(4)), rel=1e-14)


# =============================================================================================
# RoPE: forward then backward

@each_backend(cm=computed_cases(), data=st.data(), seed=st.integers(0, 2 ** 32 - 1))
def test_forward_then_backward_is_identity_computed(backend, cm, data, seed):
    case, m = cm
    fwd = compiled(computed_spec(**case))
    bwd = compiled(computed_spec(**case, direction="backward"))
    arrays, x = make_inputs(case, data, np.random.default_rng(seed))
    y = fwd.run(*arrays, backend=backend)
    z = bwd.run(y, *arrays[1:], backend=backend)
    tol = case_tol(case) * 4
    r = case["rotary_dim"]
    np.testing.assert_allclose(z[..., :r].astype(np.float64), m * m * x[..., :r].astype(np.float64),
                               rtol=tol, atol=tol * m * m * 2)
    assert np.array_equal(z[..., r:], x[..., r:])


def table_spec(*, dtype: str, table_dtype: str, heads: int, head_dim: int, pairing: str, rotary_dim: int,
               width: int, direction: str) -> str:
    rot = "" if pairing.startswith("block") else f"    rotary_dim = {rotary_dim}\n"
    pair = {"neox": "neox", "gptj": "gptj"}.get(pairing, pairing)
    return (f"rope t {{\n"
            f"    in x: {dtype}[tokens=T, heads={heads}, head_dim={head_dim}]\n"
            f"    in pos: i32[T]\n"
            f"    in cos: {table_dtype}[P, {width}]\n"
            f"    in sin: {table_dtype}[P, {width}]\n"
            f"    out y = rotate(x)\n"
            f"    pairing = {pair}\n{rot}"
            f"    positions = pos\n"
            f"    angles = table(cos = cos, sin = sin)\n"
            f"    direction = {direction}\n"
            f"    compute = {case_compute(dtype)}\n"
            f"}}\n")


@each_backend(data=st.data(), seed=st.integers(0, 2 ** 32 - 1))
def test_forward_then_backward_is_identity_tables(backend, data, seed):
    rng = np.random.default_rng(seed)
    pairing = data.draw(st.sampled_from(["neox", "gptj", "block"]), label="pairing")
    dtype = data.draw(st.sampled_from(["f32", "f64"]), label="dtype")
    heads = data.draw(st.integers(1, 3), label="heads")
    head_dim = data.draw(st.sampled_from([4, 8, 16]), label="head_dim")
    P = data.draw(st.integers(1, 9), label="rows")
    T = data.draw(st.integers(1, 6), label="tokens")
    if pairing == "block":
        # ATB rotaryCoeff c over a table of width W (head_dim or head_dim/2); a rotation table has
        # cos[a] = cos[b] for every pair (a, a + t) of each 2t-wide block
        width = data.draw(st.sampled_from([head_dim, head_dim // 2]), label="width")
        coeff = data.draw(st.sampled_from([c for c in range(2, width + 1, 2) if width % c == 0]), label="coeff")
        t = width // coeff
        ang = np.zeros((P, width))
        for k in range(coeff // 2):
            for j in range(t):
                a = 2 * t * k + j
                ang[:, a] = ang[:, a + t] = rng.uniform(-4, 4, P)
        rotary_dim = head_dim
        pairing_word = f"block(coeff = {coeff})"
    else:
        step = 2
        rotary_dim = data.draw(st.sampled_from(list(range(step, head_dim + 1, step))), label="rotary_dim")
        width = rotary_dim // 2
        ang = rng.uniform(-4, 4, (P, width))
        pairing_word = pairing
    kw = dict(dtype=dtype, table_dtype=dtype, heads=heads, head_dim=head_dim, pairing=pairing_word,
              rotary_dim=rotary_dim, width=width)
    fwd = compiled(table_spec(**kw, direction="forward"))
    bwd = compiled(table_spec(**kw, direction="backward"))
    dt = NP[dtype]
    cos, sin = np.cos(ang).astype(dt), np.sin(ang).astype(dt)
    x = rng.uniform(-2, 2, (T, heads, head_dim)).astype(dt)
    pos = rng.integers(0, P, T).astype(np.int32)
    y = fwd.run(x, pos, cos, sin, backend=backend)
    z = bwd.run(y, pos, cos, sin, backend=backend)
    # a rounded table is a rotation only to its own precision: cos^2 + sin^2 = 1 + O(eps)
    tol = TOL[dtype] * 4
    np.testing.assert_allclose(z.astype(np.float64), x.astype(np.float64), rtol=tol, atol=tol * 2)
    if rotary_dim < head_dim:
        assert np.array_equal(z[..., rotary_dim:], x[..., rotary_dim:])


# =============================================================================================
# RoPE: relative positions

def relative_spec(*, head_dim: int, rotary_dim: int, pairing: str, base: float, scaling: str | None) -> str:
    sc = f", scaling = {scaling}" if scaling else ""
    return (f"rope rel {{\n"
            f"    in x: f64[tokens=T, heads=1, head_dim={head_dim}]\n"
            f"    in pos: i64[T]\n"
            f"    out y = rotate(x)\n"
            f"    pairing = {pairing}\n"
            f"    rotary_dim = {rotary_dim}\n"
            f"    positions = pos\n"
            f"    angles = computed(base = {base!r}{sc})\n"
            f"    compute = f64\n"
            f"}}\n")


@each_backend(data=st.data(), seed=st.integers(0, 2 ** 32 - 1))
def test_dot_product_depends_only_on_relative_position(backend, data, seed):
    rng = np.random.default_rng(seed)
    pairing = data.draw(st.sampled_from(["neox", "gptj"]), label="pairing")
    head_dim = data.draw(st.sampled_from([2, 4, 8, 16, 32]), label="head_dim")
    rotary_dim = data.draw(st.sampled_from(list(range(2, head_dim + 1, 2))), label="rotary_dim")
    base = data.draw(st.sampled_from([10000.0, 500000.0, 10.0]), label="base")
    scaling = data.draw(st.sampled_from([None, "linear(factor = 4)"]), label="scaling")
    m = data.draw(st.integers(0, 4096), label="m")
    n = data.draw(st.integers(0, 4096), label="n")
    d = data.draw(st.integers(-min(m, n), 4096), label="shift")
    op = compiled(relative_spec(head_dim=head_dim, rotary_dim=rotary_dim, pairing=pairing, base=base,
                                scaling=scaling))
    q = rng.standard_normal(head_dim)
    k = rng.standard_normal(head_dim)
    xq = np.broadcast_to(q, (2, 1, head_dim)).copy()
    xk = np.broadcast_to(k, (2, 1, head_dim)).copy()
    rq = op.run(xq, np.array([m, m + d], dtype=np.int64), backend=backend)
    rk = op.run(xk, np.array([n, n + d], dtype=np.int64), backend=backend)
    dot0 = float(rq[0, 0] @ rk[0, 0])
    dot1 = float(rq[1, 0] @ rk[1, 0])
    # float64 angles p * inv_freq: absolute angle error ~ 1e-16 * p per pair
    assert dot1 == pytest.approx(dot0, abs=1e-10 * np.linalg.norm(q) * np.linalg.norm(k))


def test_relative_position_rotation_is_not_trivial():
    """Guard for the property above: the dot product does change with m - n."""
    op = compiled(relative_spec(head_dim=8, rotary_dim=8, pairing="neox", base=10000.0, scaling=None))
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal(8), rng.standard_normal(8)
    xs = np.stack([q, q])[:, None, :]
    ks = np.stack([k, k])[:, None, :]
    rq = op.run(xs, np.array([5, 9], dtype=np.int64))
    rk = op.run(ks, np.array([2, 2], dtype=np.int64))
    assert abs(float(rq[0, 0] @ rk[0, 0]) - float(rq[1, 0] @ rk[1, 0])) > 1e-3


# =============================================================================================
# RoPE: a spec the checker accepts must run

@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_glm2d_pairing_with_one_position_stream_is_rejected_or_runs(backend):
    text = ("rope r {\n"
            "    in x: f64[tokens=T, heads=2, head_dim=8]\n"
            "    in pos: i64[T]\n"
            "    out y = rotate(x)\n"
            "    pairing = glm2d(inner = gptj)\n"
            "    positions = pos\n"
            "    angles = computed(base = 10000)\n"
            "}\n")
    try:
        op = ropegen.compile(text)["r"]
    except SpecError:
        return
    x = np.random.default_rng(0).uniform(-1, 1, (3, 2, 8))
    y = op.run(x, np.arange(3, dtype=np.int64), backend=backend)
    assert y.shape == x.shape


# =============================================================================================
# RMSNorm

def rms_spec(*, dtype: str, shape: tuple, axis: int, epsilon: float) -> str:
    dims = ", ".join(["R"] + [str(n) for n in shape[1:]])
    norm = shape[axis % len(shape):]
    return (f"rmsnorm n {{\n"
            f"    in x: {dtype}[{dims}]\n"
            f"    in scale: {dtype}[{', '.join(map(str, norm))}]\n"
            f"    out y\n"
            f"    axis = {axis}\n"
            f"    epsilon = {epsilon!r}\n"
            f"    stash = {'f64' if dtype == 'f64' else 'f32'}\n"
            f"}}\n")


@st.composite
def rms_cases(draw):
    dtype = draw(st.sampled_from(["f32", "f64"]))
    rank = draw(st.integers(2, 3))
    shape = tuple([draw(st.integers(1, 4))] + [draw(st.integers(1, 9)) for _ in range(rank - 1)])
    axis = draw(st.sampled_from([a for a in range(1, rank)] + [-1]))
    return dtype, shape, axis


def _rms_x(rng, shape, dtype, axis):
    """Rows with mean square >= ~1e-2: magnitudes 10^[-1, 2], random signs, a few zeros."""
    x = rng.choice([-1.0, 1.0], shape) * 10.0 ** rng.uniform(-1, 2, shape)
    x[rng.random(shape) < 0.1] = 0.0
    x = x.astype(NP[dtype])
    flat = x.reshape(int(np.prod(shape[:axis % len(shape)])), -1)     # a view: one normalized row each
    flat[:, 0] = np.where(flat[:, 0] == 0, 1.0, flat[:, 0])          # no all-zero row
    return x


@each_backend(case=rms_cases(), seed=st.integers(0, 2 ** 32 - 1))
def test_rmsnorm_rows_have_unit_rms(backend, case, seed):
    dtype, shape, axis = case
    eps = 1e-9
    op = compiled(rms_spec(dtype=dtype, shape=shape, axis=axis, epsilon=eps))
    rng = np.random.default_rng(seed)
    x = _rms_x(rng, shape, dtype, axis)
    a = axis % len(shape)
    scale = np.ones(shape[a:], dtype=NP[dtype])
    y = op.run(x, scale, backend=backend)
    assert y.shape == x.shape and y.dtype == x.dtype
    axes = tuple(range(a, len(shape)))
    x64 = x.astype(np.float64)
    ms = np.mean(x64 * x64, axis=axes)
    rms = np.sqrt(np.mean(y.astype(np.float64) ** 2, axis=axes))
    np.testing.assert_allclose(rms, np.sqrt(ms / (ms + eps)), rtol=TOL[dtype] * 2)
    np.testing.assert_allclose(rms, 1.0, rtol=TOL[dtype] * 2 + eps / ms.min())


@each_backend(case=rms_cases(), seed=st.integers(0, 2 ** 32 - 1), c=st.floats(0.1, 10.0))
def test_rmsnorm_is_scale_invariant(backend, case, seed, c):
    dtype, shape, axis = case
    eps = 1e-12
    op = compiled(rms_spec(dtype=dtype, shape=shape, axis=axis, epsilon=eps))
    rng = np.random.default_rng(seed)
    x = _rms_x(rng, shape, dtype, axis)
    a = axis % len(shape)
    scale = rng.uniform(0.5, 2.0, shape[a:]).astype(NP[dtype])
    cx = (x.astype(np.float64) * c).astype(NP[dtype])
    y1 = op.run(x, scale, backend=backend).astype(np.float64)
    y2 = op.run(cx, scale, backend=backend).astype(np.float64)
    # c*x rounds once per element (f32); epsilon shifts the result by about eps / (2 min(1, c^2) ms)
    x64 = x.astype(np.float64)
    ms = np.mean(x64.reshape(int(np.prod(shape[:a])), -1) ** 2, axis=1).min()
    tol = TOL[dtype] * 4 + eps / (min(1.0, c * c) * ms)
    np.testing.assert_allclose(y2, y1, rtol=tol, atol=tol * float(np.abs(y1).max()))


@each_backend(case=rms_cases(), seed=st.integers(0, 2 ** 32 - 1), k=st.integers(-6, 6))
def test_rmsnorm_power_of_two_scaling_is_exact_without_epsilon(backend, case, seed, k):
    """With epsilon = 0, scaling x by 2^k scales every intermediate exactly: identical outputs."""
    dtype, shape, axis = case
    op = compiled(rms_spec(dtype=dtype, shape=shape, axis=axis, epsilon=0.0))
    rng = np.random.default_rng(seed)
    x = _rms_x(rng, shape, dtype, axis)
    scale = rng.uniform(0.5, 2.0, shape[axis % len(shape):]).astype(NP[dtype])
    y1 = op.run(x, scale, backend=backend)
    y2 = op.run(x * NP[dtype](2.0 ** k), scale, backend=backend)
    np.testing.assert_array_equal(y2, y1)
