"""The streaming copies behind the store buffers of the C backend (`rg_stream_copy` and its AVX2 and
AVX-512 forms, templates/c/_dispatch.inc.j2): each instruction-set variant of a kernel copies with its
own width, so RMSNorm rows and RoPE heads that go through a store buffer are checked on every variant,
streamed, with outputs starting at every offset the copies' head / body / tail split on: the
baseline's bits, unstreamed, every time."""
from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.context import rope_context
from ropegen.ops.inputs import CASES, make_inputs
from tests.test_c_lanes import _at_offset, _same_bits

BACKEND = CBackend()
pytestmark = [
    pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable())),
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 / AVX-512 are x86 extensions"),
]

# rows of 4096 (whole 256-byte blocks per piece) and of 300 (every row starts at another alignment,
# and ends in a tail shorter than one store); RoPE heads of 50 pairs (no vector width divides them)
# keep the store buffer; f16 heads of 98 elements, 36 rotated (18 pairs: no vector width either), the
# rest passed through: heads at every 2-byte offset, and a passthrough from byte 72 of 196
SPECS = """
rmsnorm rms_f32_4096 { in x: f32[N, 4096]  in scale: f32[4096]  out y }
rmsnorm rms_bf16_4096 { in x: bf16[N, 4096]  in scale: bf16[4096]  out y }
rmsnorm rms_f16_300 { in x: f16[N, 300]  in scale: f16[300]  out y }
rmsnorm rms_f32_300 { in x: f32[N, 300]  in scale: f32[300]  out y }
rope rope_bf16_buffered {
    in x:   bf16[tokens=T, heads=3, head_dim=100]
    in pos: i32[T]
    out y = rotate(x)
    pairing   = neox
    positions = pos
    angles    = computed(base = 10000)
    compute   = storage
}
rope rope_f16_partial_wide {
    in x:   f16[tokens=T, heads=3, head_dim=98]
    in pos: i32[T]
    out y = rotate(x)
    pairing    = neox
    rotary_dim = 36
    positions  = pos
    angles     = computed(base = 10000)
    compute    = f32
}
"""
OPS = list(ropegen.compile(SPECS, file="stream_copy.rope"))
ISAS = ("base", "avx2", "")        # "": the best this CPU runs (AVX-512 where it has it)


def test_the_rope_operator_takes_the_store_buffer():
    rope = next(op for op in OPS if op.kind == "rope")
    assert rope_context(rope.plan)["lanes"] == {}
    src = BACKEND.sources(rope.plan, "stream_copy.rope")[f"{rope.name}.c"]
    assert "rg_stream_copy_avx512(rg_yh, rg_buf" in src[src.index("void rg_run_avx512("):]
    assert "rg_stream_copy_avx2(rg_yh, rg_buf" in src[src.index("void rg_run_avx2("):src.index("void rg_run_avx512(")]


@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
@pytest.mark.parametrize("offset", [0, 2, 4, 16, 32, 48], ids=lambda o: f"out+{o}B")
def test_streamed_outputs_at_every_offset_give_the_baseline_bits(op, offset, monkeypatch):
    args_by_name = make_inputs(op.ir, CASES[1], seed=77)
    args = [args_by_name[n] for n in op.inputs]
    monkeypatch.setenv("ROPEGEN_ISA", "base")
    monkeypatch.setenv("ROPEGEN_STREAM", "0")
    want = [np.array(a, copy=True) for a in op.run_all(*args, backend="c")]
    if offset % want[0].dtype.itemsize:
        pytest.skip(f"{want[0].dtype} cannot start {offset} bytes off")
    assert want[0].nbytes > 256, "too small to reach the copies' 256-byte loop"
    for isa in ISAS:
        monkeypatch.setenv("ROPEGEN_ISA", isa)
        monkeypatch.setenv("ROPEGEN_STREAM", "1")
        for threads in (1, 2):
            outs = tuple(_at_offset(w.shape, w.dtype, offset) for w in want)
            op.run_all(*args, backend="c", out=outs, threads=threads)
            for a, b in zip(want, outs):
                assert _same_bits(a, b), (op.name, isa, offset, threads)


def test_passed_through_elements_are_streamed_as_the_rotated_ones():
    """A streamed output takes no plain store into a line it writes non-temporally (the write-combining
    buffer would be flushed part-filled: HF GPT-J f16 at T = 4096, 16 bytes into a line, 30 ms against
    2.2 ms): a partial rotary's passthrough goes out through rg_pass_* (non-temporal with the pairs),
    and the copies' edges through 4-byte non-temporal stores."""
    gptj = ropegen.compile(Path(__file__).resolve().parents[1] / "examples" / "hf_rope.rope")["gptj_cache"]
    wide = next(op for op in OPS if op.name == "rope_f16_partial_wide")
    assert rope_context(gptj.plan)["lanes"] and not rope_context(wide.plan)["lanes"]
    for op in (gptj, wide):
        src = BACKEND.sources(op.plan, "x.rope")[f"{op.name}.c"]
        for isa in ("avx2", "avx512"):
            body = src[src.index(f"void rg_run_{isa}("):]
            body = body[:body.index("\n}\n")]
            assert f"rg_pass_{isa}(" in body and "rg_how);" in body, (op.name, isa)
            assert "rg_i) rg_y[rg_i] = rg_x[rg_i]" not in body and "+ rg_i] = rg_xh[" not in body, (op.name, isa)
        edge = src[src.index("static inline void rg_stream_edge("):]
        assert "_mm_stream_si32" in edge[:edge.index("\n}\n")]
