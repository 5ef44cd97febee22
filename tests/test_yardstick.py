"""The host bench's copy yardstick (issue 13): memcpy and the non-temporal copy both copy every byte
(odd sizes, unaligned ends, each instruction set), the row is set beside the faster of the two, and a
runner's buffers live as long as the runner (no timing is asserted)."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen import bench as B
from ropegen.backends.c.backend import CBackend
from ropegen.backends.c.context import CHUNK_BYTES
from ropegen.bench import yardstick
from ropegen.bench.report import format_results

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(CBackend().unavailable() is not None,
                                reason=f"no C compiler for the yardstick: {CBackend().unavailable()}")


@pytest.fixture(scope="module")
def yard():
    return yardstick.build("c")


SIZES = [0, 1, 15, 17, 31, 33, 127, 129, 1000, CHUNK_BYTES - 1, CHUNK_BYTES + 37, 3 * CHUNK_BYTES + 5]


@pytest.mark.parametrize("isa", ["base", "avx2", "best"])
@pytest.mark.parametrize("name", ["copy", "stream", "stream_ahead"])
def test_copies_copy_every_byte_and_nothing_else(yard, monkeypatch, name, isa):
    if isa != "best":
        monkeypatch.setenv("ROPEGEN_ISA", isa)     # the SSE2 or AVX2 streaming stores, not the widest
    else:
        monkeypatch.delenv("ROPEGEN_ISA", raising=False)
    fn = getattr(yard, name)
    rng = np.random.default_rng(13)
    for n in SIZES:
        for s_off, d_off in ((0, 0), (1, 3), (5, 0), (0, 7), (13, 29)):
            src = rng.integers(0, 256, n + 64, dtype=np.uint8)
            dst = np.full(n + 64, 0xA5, np.uint8)
            for threads in (1, 2):
                dst[:] = 0xA5
                assert fn(src[s_off:].ctypes.data, dst[d_off:].ctypes.data, n, threads) == 0
                np.testing.assert_array_equal(dst[d_off:d_off + n], src[s_off:s_off + n], err_msg=f"n={n}")
                assert (dst[:d_off] == 0xA5).all() and (dst[d_off + n:] == 0xA5).all(), f"wrote outside, n={n}"


def test_stream_isa_follows_the_override(yard, monkeypatch):
    best = yard.stream_isa()
    assert best in (0, 1, 2, 3)
    monkeypatch.setenv("ROPEGEN_ISA", "avx2")
    assert yard.stream_isa() == min(best, 2)
    monkeypatch.setenv("ROPEGEN_ISA", "base")
    assert yard.stream_isa() == min(best, 1)


def test_runners_time_memcpy_and_the_stream_copies_over_one_pair_of_buffers(yard):
    calls = yardstick.runners(yard, "out_of_place", 2 * 100_000, 2)
    assert list(calls) == ["memcpy", "stream", "stream_ahead"]
    src, dst = calls["memcpy"].buffers
    for name in ("stream", "stream_ahead"):
        assert calls[name].buffers[0] is src and calls[name].buffers[1] is dst
    assert src.nbytes == dst.nbytes == 100_000 // 64 * 64
    for name, call in calls.items():
        src[:] = np.arange(src.size) % 251
        dst[:] = 0
        call()
        np.testing.assert_array_equal(dst, src, err_msg=name)
    scale = yardstick.runners(yard, "in_place", 2 * 100_000, 1)
    assert list(scale) == ["scale"]
    with pytest.raises(ValueError, match="unknown yardstick kind"):
        yard.runner("memmove", 1024, 1)


def test_pick_is_the_faster_copy():
    def st(t):
        return {"time_min_s": t, "time_median_s": 2 * t, "gbps": 1 / t}
    for tm, ts, want in ((2.0, 1.0, "stream"), (1.0, 2.0, "memcpy")):
        y = yardstick.pick("out_of_place", {"memcpy": st(tm), "stream": st(ts)})
        assert y["kind"] == "memcpy" and y["used"] == want
        assert y["time_min_s"] == min(tm, ts) and y["gbps"] == 1 / min(tm, ts)
        assert set(y["copies"]) == {"memcpy", "stream"}
    assert yardstick.pick("in_place", {"scale": st(3.0)})["used"] == "scale"


def test_bench_rows_carry_every_copy_and_use_the_fastest():
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"]
    results = B.bench([op], threads=2, shapes=["T=64,positions=prefill"], repeats=3, peers=())
    out, inp = results
    y = out["yardstick"]
    assert set(y["copies"]) == {"memcpy", "stream", "stream_ahead"}
    assert y["time_min_s"] == min(c["time_min_s"] for c in y["copies"].values())
    assert y["copies"][y["used"]]["time_min_s"] == y["time_min_s"]
    assert out["ratio_to_copy"] == pytest.approx(y["time_min_s"] / out["time_min_s"])
    assert inp["yardstick"]["used"] == "scale" and set(inp["yardstick"]["copies"]) == {"scale"}
    json.dumps(results)
    table = format_results(results)
    cp, nt, pf = (y["copies"][name]["gbps"] for name in ("memcpy", "stream", "stream_ahead"))
    assert f"{cp:.1f} / {nt:.1f} / {pf:.1f}" in table
    assert f"{y['gbps']:.1f} {dict(memcpy='cp', stream='nt', stream_ahead='pf')[y['used']]}" in table


def test_a_later_runner_of_the_same_size_keeps_the_first_ones_buffers(yard):
    nbytes = 2 * 300_000
    first = yard.runner("memcpy", nbytes, 1)
    src, dst = first.buffers
    alive = [weakref.ref(src), weakref.ref(dst)]
    del src, dst
    second = yard.runner("memcpy", nbytes, 1)
    third = yard.runners("memcpy", nbytes, 1)
    del second, third
    gc.collect()
    assert all(r() is not None for r in alive), "a later runner of the same size freed the first one's buffers"
    src, dst = first.buffers
    src[:] = 7
    first()
    assert (dst == 7).all()
    del first, src, dst
    gc.collect()
    assert all(r() is None for r in alive), "the buffers outlive their runner"


def test_calling_the_first_runner_after_a_second_of_the_same_size_is_not_a_use_after_free():
    # Buffers of 48 MiB are mmapped by glibc and unmapped when freed: the old runner, which kept only raw
    # pointers while a second runner of the same size dropped its arrays, crashed here (SIGSEGV).
    code = ("import numpy as np\nfrom ropegen.bench import yardstick\n"
            "y = yardstick.build('c')\nn = 2 * 48 * 2**20\n"
            "first = y.runner('memcpy', n, 1)\nsecond = y.runner('memcpy', n, 1)\nfirst()\n"
            "third = yardstick.runners(y, 'out_of_place', n, 1)\nfirst()\nprint('ok')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])
