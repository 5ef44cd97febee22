"""Helpers of tests/test_reliability.py: a spec tokenizer and mutator, a generator of random valid
rope specs, strided views of inputs, and hostile inputs for the sanitizer runs."""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import numpy as np

# ---------------------------------------------------------------------------------------------
# part 1: tokens and mutations

TOKEN_RE = re.compile(r'#[^\n]*|"[^"\n]*"|[A-Za-z_][A-Za-z0-9_]*|[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?'
                      r'|\s+|.', re.S)


def tokenize(text: str) -> list[str]:
    toks = TOKEN_RE.findall(text)
    assert "".join(toks) == text
    return toks


def is_space(tok: str) -> bool:
    return tok.isspace() or tok.startswith("#")


PUNCT = list("{}[]()=,:;.+-*/@!$%^&|~<>?'\"`\\")
HUGE_NUMBERS = ["18446744073709551616", "9223372036854775808", "9223372036854775807", "-9223372036854775809",
                "1e309", "-1e309", "1e-400", "4294967296", "99999999999999999999999999999999999", "0", "-0",
                "0.0", "1e308", "2147483648", "-1", "65536"]
UNICODE = ["é", "héads", "ｑ", "\u200b", "\u00a0", "\u2028", "\u0085", "😀", "Ω", "ß", "\ufeff", "İ", "ǅ", "\u0301"]
# whitespace the grammar accepts (space, tab, \r, \n) and a few it does not
ODD_SPACE = ["\t", "\r", "\r\n", "\n\n\n", " \t ", "\x0b", "\x00", "\x1b"]
# the form feed: a known bug (line numbers after a \f)
FORM_FEED = ["\f", "\f\n", "\x0c\x0c"]


def random_identifier(rnd: random.Random) -> str:
    first = rnd.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
    return first + "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(rnd.randint(0, 8)))


def random_number(rnd: random.Random) -> str:
    """A number token: small integers (sizes stay small: huge sizes are a separate, known bug),
    decimals, exponents, signs."""
    k = rnd.randint(0, 4)
    if k == 0:
        return str(rnd.randint(-10, 300))
    if k == 1:
        return f"{rnd.uniform(-1e3, 1e3):.3f}"
    if k == 2:
        return rnd.choice(["0", "1", "2", "3", "7", "64", "128", "-2", "0.5", "1e-5", "+4", ".5", "-0", "0.0"])
    if k == 3:
        return str(rnd.choice([2, 4, 6, 8, 16, 32, 48, 96]))
    return f"{rnd.randint(1, 9)}e{rnd.randint(-30, 30)}"


def mutate(text: str, ops: list[tuple[str, int, int]], corpus: list[str]) -> str:
    """Apply edits (kind, a, b) to the non-blank tokens of `text`: a and b are raw draws, reduced
    modulo the token count (and used as the seed of any random payload)."""
    toks = tokenize(text)
    for kind, a, b in ops:
        idx = [i for i, t in enumerate(toks) if not is_space(t)] or [0]
        if not toks:
            toks = [""]
        i = idx[a % len(idx)]
        j = idx[b % len(idx)]
        rnd = random.Random(a * 1_000_003 + b)
        if kind == "delete":
            toks[i] = ""
        elif kind == "duplicate":
            toks[i] = toks[i] + " " + toks[i]
        elif kind == "swap":
            toks[i], toks[j] = toks[j], toks[i]
        elif kind == "corpus":
            toks[i] = corpus[b % len(corpus)]
        elif kind == "insert_corpus":
            toks[i] = toks[i] + " " + corpus[b % len(corpus)]
        elif kind == "ident":
            toks[i] = random_identifier(rnd)
        elif kind == "number":
            toks[i] = random_number(rnd)
        elif kind == "number_any":      # a number replacing a number (sizes, arguments)
            nums = [k for k in idx if toks[k][:1].isdigit() or toks[k][:1] in "+-." and len(toks[k]) > 1]
            if nums:
                toks[nums[b % len(nums)]] = random_number(rnd)
        elif kind == "huge":
            nums = [k for k in idx if toks[k][:1].isdigit()]
            if nums:
                toks[nums[b % len(nums)]] = HUGE_NUMBERS[a % len(HUGE_NUMBERS)]
        elif kind == "punct":
            toks[i] = rnd.choice(PUNCT)
        elif kind == "insert_punct":
            toks[i] = toks[i] + rnd.choice(PUNCT)
        elif kind == "unicode":
            toks[i] = toks[i] + UNICODE[b % len(UNICODE)]
        elif kind == "space":
            toks[i] = toks[i] + ODD_SPACE[b % len(ODD_SPACE)]
        elif kind == "formfeed":
            toks[i] = toks[i] + FORM_FEED[b % len(FORM_FEED)]
        elif kind == "nest":
            n = [3, 30, 300, 3000][b % 4]
            o, c = [("(", ")"), ("[", "]"), ("{", "}")][a % 3]
            toks[i] = toks[i] + o * n + c * n
        elif kind == "nest_value":       # f(f(f(...))) as a setting value
            n = [5, 50, 500, 5000][b % 4]
            toks[i] = toks[i] + "f(" * n + "1" + ")" * n
        elif kind == "long_name":
            n = [64, 255, 300, 5000][b % 4]
            toks[i] = "a" * n if toks[i][:1].isalpha() or toks[i][:1] == "_" else toks[i] + " " + "b" * n
        elif kind == "truncate":
            cut = sum(len(t) for t in toks[:i])
            return "".join(toks)[:cut]
        else:
            raise AssertionError(kind)
        toks = tokenize("".join(toks))
    return "".join(toks)


SAFE_KINDS = ("delete", "duplicate", "swap", "corpus", "insert_corpus", "ident", "number", "number_any",
              "punct", "insert_punct", "unicode", "space", "truncate")
# edits that reach a known bug: huge sizes, form-feed line numbers, deep nesting, 300-char names
KNOWN_BUG_KINDS = ("huge", "formfeed", "nest", "nest_value", "long_name")


DIAG_CODE = re.compile(r"[PC]\d{3}")


def diagnostic_problems(err, text: str, file: str) -> list[str]:
    """What is wrong with the diagnostics of one SpecError (empty: nothing)."""
    problems = []
    nlines = text.count("\n") + 1
    if not err.diagnostics:
        problems.append("SpecError without diagnostics")
    lines = text.split("\n")
    for d in err.diagnostics:
        where = f"{d.code} {d.loc.file}:{d.loc.line}:{d.loc.column}"
        if not (isinstance(d.code, str) and DIAG_CODE.fullmatch(d.code)):
            problems.append(f"bad code {d.code!r}")
        if d.loc.file != file:
            problems.append(f"{where}: file {d.loc.file!r}, expected {file!r}")
        if not (isinstance(d.loc.line, int) and 1 <= d.loc.line <= nlines):
            problems.append(f"{where}: line outside 1..{nlines}")
        elif not (isinstance(d.loc.column, int) and 1 <= d.loc.column <= len(lines[d.loc.line - 1]) + 1):
            problems.append(f"{where}: column outside 1..{len(lines[d.loc.line - 1]) + 1}")
        if not d.message or "Loc(" in d.message or "Token(" in d.message:
            problems.append(f"{where}: message {d.message!r}")
    try:
        rendered = str(err)
    except Exception as exc:  # noqa: BLE001
        problems.append(f"rendering the report raised {type(exc).__name__}: {exc}")
    else:
        for d in err.diagnostics:
            if f"error[{d.code}]" not in rendered:
                problems.append(f"report misses error[{d.code}]")
    return problems


# ---------------------------------------------------------------------------------------------
# part 2: random valid configurations

LAYOUTS = ("tokens", "merged", "bshd", "bhsd", "sbhd", "bs_merged")
TOKEN_LAYOUTS = ("tokens", "merged")


@dataclass
class Config:
    index: int
    layout: str
    pairing: str             # neox gptj glm2d_gptj glm2d_neox block
    dtype: str
    head_dim: int
    rotary_dim: int | None
    heads: tuple[int, ...]    # heads of each rotated / copied tensor
    copy_second: bool
    positions: str           # ids32 ids64 in_sequence arange arange_scalar arange_pad glm2d glm2d_pad none
    angles: str              # table computed
    table_dtype: str = "f32"
    width: int = 0
    full_width: bool = False
    coeff: int = 0
    scaling: str = "none"
    freq_factors: bool = False
    magnitude: float | None = None
    numerics: str = "exact"
    base: float = 10000.0
    direction: str = "forward"
    compute: str = "f32"
    sequences: bool = False
    start_literal: int = 0
    text: str = field(default="", repr=False)

    @property
    def label(self) -> str:
        bits = [f"cfg{self.index:03d}", self.layout, self.pairing, self.dtype, f"d{self.head_dim}"]
        if self.rotary_dim is not None:
            bits.append(f"r{self.rotary_dim}")
        bits.append(self.positions)
        if self.angles == "table":
            bits.append(f"table-{self.table_dtype}-w{self.width}" + ("-full" if self.full_width else ""))
        else:
            bits.append(f"computed-{self.scaling.split('(')[0]}" + ("-ff" if self.freq_factors else "")
                        + ("-mag" if self.magnitude else "") + ("-ggml" if self.numerics == "ggml" else ""))
        bits += [self.direction, f"compute-{self.compute}"]
        return "-".join(bits)


def _dims(layout: str, heads: int, head_dim: int) -> str:
    h, d = f"heads={heads}", f"head_dim={head_dim}"
    return {"tokens": f"tokens=T, {h}, {d}", "merged": f"tokens=T, ({h}, {d})",
            "bshd": f"batch=B, seq=S, {h}, {d}", "bhsd": f"batch=B, {h}, seq=S, {d}",
            "sbhd": f"seq=S, batch=B, {h}, {d}", "bs_merged": f"batch=B, seq=S, ({h}, {d})"}[layout]


def _token_syms(layout: str) -> list[str]:
    return {"tokens": ["T"], "merged": ["T"], "bshd": ["B", "S"], "bhsd": ["B", "S"], "sbhd": ["S", "B"],
            "bs_merged": ["B", "S"]}[layout]


SCALINGS = ("none", "linear(factor = 4)", "linear(factor = 0.5)",
            "llama3(factor = 8, low_freq_factor = 1, high_freq_factor = 4, original_max_positions = 64)",
            "ggml_yarn(freq_scale = 0.25, ext_factor = 1, attn_factor = 1, beta_fast = 32, beta_slow = 1, "
            "n_ctx_orig = 128)",
            "ggml_yarn(freq_scale = 0.5, n_ctx_orig = 4096)")


def random_config(index: int, seed: int) -> Config:
    rnd = random.Random(seed * 7919 + index)
    layout = rnd.choice(LAYOUTS)
    tokens = layout in TOKEN_LAYOUTS
    pairing = rnd.choice(("neox", "gptj", "neox", "gptj", "block") + (() if tokens or layout == "sbhd" else ("glm2d_gptj", "glm2d_neox")))
    dtype = rnd.choice(("f32", "f16", "bf16", "f64"))
    head_dim = rnd.choice((2, 4, 6, 8, 12, 16, 24, 32, 64)) if not pairing.startswith("glm2d") else \
        rnd.choice((4, 8, 12, 16, 32))
    rotary_dim = None
    if pairing != "block" and rnd.random() < 0.5:
        step = 4 if pairing.startswith("glm2d") else 2
        rotary_dim = rnd.choice(range(step, head_dim + 1, step))
    r = rotary_dim or head_dim
    nt = rnd.choice((1, 1, 2, 2, 3))
    heads = tuple(rnd.randint(1, 4) for _ in range(nt))
    copy_second = nt > 1 and rnd.random() < 0.25
    # positions
    if pairing.startswith("glm2d"):
        positions = rnd.choice(("glm2d", "glm2d_pad"))
    elif tokens:
        positions = rnd.choice(("ids32", "ids64", "ids64", "in_sequence", "arange", "arange_scalar", "none"))
    else:
        positions = rnd.choice(("ids32", "ids64", "ids64", "arange", "arange_scalar", "arange_pad", "none"))
    angles = "table" if pairing == "block" or positions == "none" else rnd.choice(("table", "computed"))
    cfg = Config(index=index, layout=layout, pairing=pairing, dtype=dtype, head_dim=head_dim, rotary_dim=rotary_dim,
                 heads=heads, copy_second=copy_second, positions=positions, angles=angles)
    if pairing == "block":
        cfg.width = rnd.choice([w for w in (head_dim, head_dim // 2) if w >= 2 and w % 2 == 0] or [head_dim])
        cfg.coeff = rnd.choice([c for c in range(2, cfg.width + 1, 2) if cfg.width % c == 0])
    elif angles == "table":
        need = r // 4 if pairing.startswith("glm2d") else r // 2
        # full-width tables (column e for element e) exist for neox and gptj only
        cfg.full_width = rnd.random() < 0.3 and not pairing.startswith("glm2d")
        cfg.width = 2 * need if cfg.full_width else need
    if angles == "table":
        cfg.table_dtype = rnd.choice(("f32", "f32", "f16", "bf16", "f64", dtype))
    else:
        cfg.numerics = "ggml" if dtype != "f64" and rnd.random() < 0.25 else "exact"
        choices = SCALINGS if cfg.numerics == "exact" else (SCALINGS[0],) + SCALINGS[4:]
        cfg.scaling = rnd.choice(choices)
        cfg.freq_factors = not pairing.startswith("glm2d") and rnd.random() < 0.25
        cfg.magnitude = rnd.choice((None, None, None, 0.5, 1.25))
        cfg.base = rnd.choice((10000.0, 500000.0, 100.0))
    cfg.sequences = positions == "in_sequence" or (tokens and positions == "none" and rnd.random() < 0.5)
    cfg.start_literal = rnd.choice((0, 3, 100))
    cfg.direction = rnd.choice(("forward", "forward", "backward"))
    if dtype == "f64":
        cfg.compute = rnd.choice(("f64", "storage"))
    elif dtype == "f32":
        cfg.compute = rnd.choice(("f32", "f64", "storage"))
    else:
        cfg.compute = rnd.choice(("f32", "f64", "storage"))
    cfg.text = config_spec(cfg)
    return cfg


def config_spec(c: Config) -> str:
    names = ["q", "k", "v"]
    lines = [f"rope r{c.index} {{"]
    for n, h in zip(names, c.heads):
        lines.append(f"    in {n}: {c.dtype}[{_dims(c.layout, h, c.head_dim)}]")
    tsyms = _token_syms(c.layout)
    if c.pairing == "block":
        pw = f"block(coeff = {c.coeff})"
    elif c.pairing.startswith("glm2d"):
        pw = f"glm2d(inner = {c.pairing.split('_')[1]})"
    else:
        pw = c.pairing
    settings = [f"    pairing = {pw}"]
    if c.rotary_dim is not None:
        settings.append(f"    rotary_dim = {c.rotary_dim}")
    p = c.positions
    if p in ("ids32", "ids64"):
        lines.append(f"    in pos: {'i32' if p == 'ids32' else 'i64'}[{', '.join(tsyms)}]")
        settings.append("    positions = pos")
    elif p == "in_sequence":
        settings.append("    positions = in_sequence")
    elif p == "arange":
        settings.append(f"    positions = arange(start = {c.start_literal})")
    elif p == "arange_scalar":
        lines.append("    in start: i64[]")
        settings.append("    positions = arange(start = start)")
    elif p == "arange_pad":
        lines.append("    in start: i64[]")
        lines.append("    in pad: i32[B]")
        settings.append("    positions = arange(start = start, pad = pad)")
    elif p in ("glm2d", "glm2d_pad"):
        lines.append("    in start: i64[]")
        lines.append("    in fs: i64[]")
        if p == "glm2d_pad":
            lines.append("    in pad: i64[B]")
            settings.append("    positions = glm2d(start = start, pad = pad, first_seqlen = fs)")
        else:
            settings.append("    positions = glm2d(start = start, first_seqlen = fs)")
    if c.sequences:
        lines.append(f"    in seqlen: {'i32' if c.index % 2 else 'i64'}[N]")
        settings.append("    sequences = seqlen")
    if c.angles == "table":
        lead = ", ".join(tsyms) if p == "none" else "P"
        lines.append(f"    in cos_t: {c.table_dtype}[{lead}, {c.width}]")
        lines.append(f"    in sin_t: {c.table_dtype}[{lead}, {c.width}]")
        settings.append("    angles = table(cos = cos_t, sin = sin_t)")
    else:
        args = [f"base = {c.base!r}"]
        if c.scaling != "none":
            args.append(f"scaling = {c.scaling}")
        if c.freq_factors:
            lines.append(f"    in ff: f32[{(c.rotary_dim or c.head_dim) // 2}]")
            args.append("freq_factors = ff")
        if c.magnitude is not None:
            args.append(f"magnitude = {c.magnitude!r}")
        settings.append(f"    angles = computed({', '.join(args)})")
        if c.numerics == "ggml":
            settings.append("    angle_numerics = ggml")
    for i, n in enumerate(names[:len(c.heads)]):
        fn = "copy" if (i == 1 and c.copy_second) else "rotate"
        lines.append(f"    out {n}_out = {fn}({n})")
    settings.append(f"    direction = {c.direction}")
    settings.append(f"    compute = {c.compute}")
    return "\n".join(lines + settings + ["}"]) + "\n"


# ---------------------------------------------------------------------------------------------
# strided / odd views holding the same values

def view_variants(a: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Views of the values of `a` (rank >= 2): reversed, sliced out of a wider array, misaligned,
    Fortran-ordered; each equal to `a` element for element."""
    out = {}
    if a.ndim == 0 or a.size == 0:
        return out
    rev = np.flip(np.array(a, copy=True), axis=0)
    out["negative stride"] = np.flip(rev, axis=0)
    wide = np.empty(a.shape[:-1] + (a.shape[-1] * 2 + 3,), dtype=a.dtype)
    wide[...] = 0
    wide[..., 3:3 + a.shape[-1]] = a
    out["sliced from wider rows"] = wide[..., 3:3 + a.shape[-1]]
    if a.ndim >= 2:
        big = np.zeros((a.shape[0],) + (a.shape[1] + 2,) + a.shape[2:], dtype=a.dtype)
        big[:, 1:-1] = a
        out["middle of a wider axis 1"] = big[:, 1:-1]
    raw = np.zeros(a.nbytes + a.itemsize, np.uint8)
    mis = np.ndarray(a.shape, a.dtype, buffer=raw, offset=1) if a.itemsize > 1 else None
    if mis is not None:
        mis[...] = a
        out["misaligned"] = mis
    out["fortran order"] = np.asfortranarray(a)
    return out
