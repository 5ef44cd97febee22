"""When the C kernels stream their outputs past the caches: large out-of-place outputs only. An output
written over its own input (in place) never streams, whatever ROPEGEN_STREAM says, in RoPE and RMSNorm
alike (_host.inc.j2's no_stream_over). Its lines were just read, so a non-temporal store saves no read
for ownership, and RMSNorm's 16-byte streamed pieces over rows 16 bytes into a line (where NumPy puts a
large array) evicted lines its loop still read: [4096, 4096] bf16 in place, one thread, medians 8.4 ->
7.0 ms (AVX-512) and 152 -> 10.9 ms (AVX2); bench/results/rms_in_place_s23/. The bits do not depend on it
(test_c_rms_vectors.py, test_c_stream_copy.py); this checks the decision in every example's source."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import ropegen

ROOT = Path(__file__).resolve().parents[1]
OPS = [op for src in sorted((ROOT / "examples").glob("*.rope")) for op in ropegen.compile(src)
       if op.kind in ("rope", "rmsnorm")]
OVER = re.compile(r"if \(\(const void \*\)(\w+) == \(const void \*\)(\w+)\) rg_stream = 0;")


def _entry(op) -> str:
    """The body of the kernel's exported entry point in its C source."""
    src = op.sources["c"][f"{op.name}.c"]
    body = src[src.index(f"\nint ropegen_{op.name}("):]
    return body[:body.index("\n}\n")]


def test_every_kind_in_the_examples_is_checked():
    assert {op.kind for op in OPS} == {"rope", "rmsnorm"}


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_no_output_over_its_input_streams(op):
    body = _entry(op)
    override = body.index('getenv("ROPEGEN_STREAM")')
    pairs = [(m.group(1), m.group(2), m.start()) for m in OVER.finditer(body)]
    if op.kind == "rmsnorm":
        want = [(op.ir.output_names[0], op.ir.x.name)]      # y over x: the output that streams
    else:
        want = [(out, src) for out, src, _ in pairs]       # one per rotated output, over its source
        assert [out for out, _ in want] == list(op.ir.output_names), op.name
        assert {src for _, src in want} <= {t.name for t in op.ir.inputs}, op.name
    assert [(out, src) for out, src, _ in pairs] == want, op.name
    # after the override: ROPEGEN_STREAM=1 forces streaming on out-of-place calls only
    assert all(at > override for _, _, at in pairs), op.name
    signature = body[:body.index("{")]
    for out, src in want:
        assert re.search(rf"[(,] ?const \w+ \*{src}\b", signature), (op.name, src)     # an input
        assert re.search(rf"[(,] ?(?!const )\w+ \*{out}\b", signature), (op.name, out)   # an output
