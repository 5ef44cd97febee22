"""ropegen.bench.harness: the numbers it reports are well-formed and JSON-ready (no timing is asserted), its
inputs are valid at benchmark sizes, and its onnxruntime and ggml peers compute the same operator."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen import bench as B
from ropegen.backends.c.backend import CBackend

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(CBackend().unavailable() is not None,
                                reason=f"no C compiler for the bench kernels and yardstick: {CBackend().unavailable()}")


def _op(spec: str, name: str):
    return ropegen.compile(ROOT / "examples" / spec)[name]


def test_parse_shape():
    assert B.parse_shape("T=16, P=32,positions=prefill") == {"label": "T=16, P=32,positions=prefill",
                                                             "sizes": {"T": 16, "P": 32}, "positions": "prefill"}
    assert B.parse_shape({"sizes": {"T": 3}})["positions"] == "random"
    for bad in ("T", "T=x", "T=-1", "positions=sideways"):
        with pytest.raises(ValueError):
            B.parse_shape(bad)


def test_bench_rejects_sizes_no_operator_has():
    with pytest.raises(ValueError, match="no operator has"):
        B.bench([_op("llama3.rope", "llama3_8b")], shapes=["Q=4"], repeats=1, peers=())


def test_every_timed_call_follows_a_call_of_itself(monkeypatch):
    """A timed call meets the caches as its own previous call left them, never as another function's
    did: a copy right after another copy over the same buffers would read a source already cached."""
    from ropegen.bench import harness
    log: list[str] = []
    clock = iter(range(1000))
    monkeypatch.setattr(harness.time, "perf_counter", lambda: (log.append("clock"), next(clock))[1])
    names = ["kernel", "memcpy", "stream"]
    times = harness.interleaved([lambda n=n: log.append(n) for n in names], 4)
    assert [len(t) for t in times] == [4, 4, 4]
    starts = [i for i, x in enumerate(log) if x == "clock"][::2]      # each timing's first reading
    assert len(starts) == 12
    for i in starts:
        assert log[i - 1] == log[i + 1], f"{log[i + 1]} timed right after {log[i - 1]}"


def test_with_a_flush_every_timed_call_follows_it(monkeypatch):
    from ropegen.bench import harness
    log: list[str] = []
    monkeypatch.setattr(harness.time, "perf_counter", lambda: (log.append("clock"), 0.0)[1])
    harness.interleaved([lambda n=n: log.append(n) for n in ("kernel", "stream")], 3,
                        flush=lambda: log.append("flush"))
    starts = [i for i, x in enumerate(log) if x == "clock"][::2]
    assert len(starts) == 6 and all(log[i - 1] == "flush" for i in starts)
    assert log[:2] == ["kernel", "stream"]          # the warm-up round, unflushed


class _Resettable:
    """A bench call with a reset, as an in-place call has (ropegen.bench.inplace)."""

    def __init__(self, name: str, log: list[str]):
        self.name, self.log = name, log

    def __call__(self):
        self.log.append(self.name)

    def reset(self):
        self.log.append("reset " + self.name)


@pytest.mark.parametrize("cold", [True, False], ids=["cold", "hot"])
def test_an_in_place_call_is_reset_before_each_timed_call(monkeypatch, cold):
    """Reset untimed: before the flush (so the call still starts from memory), or after the untimed
    call of itself (hot), never between a clock reading and the call."""
    from ropegen.bench import harness
    log: list[str] = []
    monkeypatch.setattr(harness.time, "perf_counter", lambda: (log.append("clock"), 0.0)[1])
    harness.interleaved([_Resettable("kernel", log), lambda: log.append("scale")], 3,
                        flush=(lambda: log.append("flush")) if cold else None)
    starts = [i for i, x in enumerate(log) if x == "clock"][::2]
    kernel = [i for i in starts if log[i + 1] == "kernel"]
    assert len(starts) == 6 and len(kernel) == 3
    for i in kernel:
        assert log[i - 2:i] == (["reset kernel", "flush"] if cold else ["kernel", "reset kernel"]), log[i - 3:i + 2]
    assert log.count("reset kernel") == 3


def test_rmsnorm_is_measured_in_place_where_its_outputs_keep_their_types():
    from ropegen.backends.c import bench as cbench
    same, mixed = _op("rmsnorm_family.rope", "gemma_rmsnorm"), _op("onnx_rmsnorm.rope", "rms_mixed_types")
    assert cbench.modes(same, None) == ["out_of_place", "in_place"] and cbench.modes(same, True) == ["in_place"]
    assert cbench.modes(mixed, None) == ["out_of_place"]
    assert cbench.modes(_op("llama3.rope", "llama3_8b"), None) == ["out_of_place", "in_place"]


def test_an_in_place_rmsnorm_runner_starts_again_from_its_inputs():
    """Normalized over itself again and again, a row's small-scale columns shrink towards subnormals:
    the bench's in-place runner puts the inputs back (reset) between its timed calls."""
    from ropegen.backends.c import bench as cbench
    op = _op("rmsnorm_family.rope", "gemma_rmsnorm")
    arrays = B.bench_inputs(op, {"T": 8})
    args = [arrays[n] for n in op.inputs]
    kept = [np.array(a, copy=True) for a in args]
    run = cbench.kernel_runner(op, args, 1, "in_place")
    run()
    first = np.array(run.work[0], copy=True)
    run()
    assert not np.array_equal(first.view(np.uint16), run.work[0].view(np.uint16))     # it drifts
    run.reset()
    run()
    assert np.array_equal(first.view(np.uint16), run.work[0].view(np.uint16))
    assert all(np.array_equal(a, k) for a, k in zip(args, kept))        # the inputs themselves untouched


def test_an_in_place_runner_copies_and_resets_only_what_the_call_writes():
    """q and k are copied and put back; the cos / sin tables (4 MiB at P = 8192) are the inputs
    themselves: copied back before each timed call, they evicted the call's data at decode sizes
    (llama3 f32 cached in place, T = 1: 5.7 -> 15.3 us)."""
    from ropegen.backends.c import bench as cbench
    op = _op("llama3.rope", "llama3_8b_cached")
    arrays = B.bench_inputs(op, {"T": 4, "P": 64})
    args = [arrays[n] for n in op.inputs]
    run = cbench.kernel_runner(op, args, 1, "in_place")
    by_name = dict(zip(op.inputs, args))
    assert [a is by_name["q"] or a is by_name["k"] for a in run.originals] == [True, True]
    assert all(w is not a for w, a in zip(run.work, run.originals))
    run()
    run.reset()
    assert all(np.array_equal(w, a) for w, a in zip(run.work, run.originals))
    whole = B.harness.whole_call(op, args, 1, "in_place", "c")
    assert len(whole.work) == 2 and all(a is by_name[n] for a, n in zip(whole.originals, ("q", "k")))


def _table_cells(text: str, operator: str) -> dict[str, str]:
    """The header's columns -> the cells of the row of `operator` (columns are two spaces apart)."""
    import re
    lines = text.splitlines()
    head = re.split(r"\s{2,}", lines[0].strip())
    row = next(ln for ln in lines[2:] if ln.startswith(operator + " "))
    return dict(zip(head, re.split(r"\s{2,}", row.strip())))


def test_prefill_rows_are_timed_cold_and_decode_rows_hot(monkeypatch):
    """A prefill-sized row flushes the caches before every timed call of the kernel, its copies and its
    peers (each then reads from memory), on the bench's threads; a decode-sized row never does."""
    from ropegen.bench import flush as flush_mod
    from ropegen.bench import harness
    made: list[tuple[int, int, bool]] = []

    class SmallFlush(flush_mod.Flush):
        def __init__(self, nbytes, threads=1, reader=None):
            super().__init__(1 << 20, threads, reader)
            made.append((self.nbytes, threads, reader is not None))
            self.calls = 0

        def __call__(self):
            self.calls += 1
            return super().__call__()
    monkeypatch.setattr(harness, "Flush", SmallFlush)
    seen = {}

    def fake_run(names, op_, arrays, nbytes, threads, repeats, measured, beside=None, flush=None):
        seen["flush"] = flush
        return {}
    monkeypatch.setattr(harness.peer_registry, "run", fake_run)
    op = _op("llama3.rope", "llama3_8b")
    r = B.bench([op], threads=1, shapes=["T=4,positions=prefill"], repeats=2, inplace=False)
    assert r[0]["cache"] == "hot" and made == [] and seen["flush"] is None and "flush_bytes" not in r[0]
    assert _table_cells(B.format_results(r), "llama3_8b")["cache"] == "hot"
    r = B.bench([op], threads=2, shapes=["T=80,positions=prefill"], repeats=2, inplace=False)
    assert r[0]["cache"] == "cold" and made == [(1 << 20, 2, True)] and r[0]["flush_bytes"] == 1 << 20
    assert isinstance(seen["flush"], SmallFlush)
    assert seen["flush"].calls == 2 * 4         # two rounds of the kernel, memcpy and the two stream copies
    assert _table_cells(B.format_results(r), "llama3_8b")["cache"] == "cold"


def test_the_numpy_peer_is_flushed_with_its_rounds():
    """peers.run hands the flush to each peer, which runs it before every timed call of its own and of
    the measured call beside it."""
    from ropegen.bench import peers
    from ropegen.bench.peers import numpy as numpy_peer
    op = _op("llama3.rope", "llama3_8b")
    arrays = B.bench_inputs(op, {"T": 4}, "prefill")
    calls = {"flush": 0, "beside": 0}

    def count(name):
        def f():
            calls[name] += 1
        return f
    out = peers.run(["numpy"], op, arrays, 1000, 1, 3, "c", beside=count("beside"), flush=count("flush"))
    assert "time_min_s" in out["numpy"]
    rounds = min(3, numpy_peer.NUMPY_REPEATS)
    assert calls["flush"] == 2 * rounds and calls["beside"] == 1 + rounds


def test_flush_size_is_twice_the_last_level_caches(tmp_path):
    from ropegen.bench import flush as flush_mod

    def cache(cpu, i, level, size, shared=None, broken=False):
        d = tmp_path / f"cpu{cpu}" / "cache" / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        if not broken:
            (d / "size").write_text(f"{size}\n")
        if shared is not None:
            (d / "shared_cpu_list").write_text(f"{shared}\n")
    # two CPUs sharing one 260 MiB L3, two more on a second 32M domain, one index unreadable
    for cpu in (0, 1):
        cache(cpu, 0, 1, "48K", str(cpu))
        cache(cpu, 1, 2, "2048K", str(cpu))
        cache(cpu, 2, 3, "266240K", "0-1")
    for cpu in (2, 3):
        cache(cpu, 0, 1, "48K", broken=True)
        cache(cpu, 1, 3, "32M", "2-3")
    assert flush_mod.last_level_cache_bytes(tmp_path, {0}) == 266240 << 10
    assert flush_mod.last_level_cache_bytes(tmp_path, {0, 1}) == 266240 << 10     # one domain, counted once
    assert flush_mod.last_level_cache_bytes(tmp_path, {0, 1, 2, 3}) == (266240 << 10) + (32 << 20)
    assert flush_mod.last_level_cache_bytes(tmp_path, {7}) is None
    assert flush_mod.flush_bytes(100 << 20) == 200 << 20
    assert flush_mod.flush_bytes(1 << 20) == flush_mod.MIN_BYTES
    assert flush_mod.flush_bytes(None) == 2 * flush_mod.FALLBACK_LLC_BYTES
    f = flush_mod.Flush(1 << 20)
    assert f.nbytes == 1 << 20 and f() == (1 << 20) // 64


def test_the_c_yardstick_reads_the_flush_buffer_on_threads():
    from ropegen.backends.c.bench import Yardstick
    from ropegen.bench import flush as flush_mod
    yard = Yardstick()
    for threads in (1, 2):
        f = flush_mod.Flush(3 << 20, threads, yard.read)
        f.buffer[::8] = np.arange(f.buffer[::8].size, dtype=np.uint64)
        assert f() == int(f.buffer[::8].sum())      # one word of every line, every chunk


def test_bench_refuses_a_shape_that_leaves_no_room_for_the_flush(monkeypatch):
    from ropegen.bench import harness
    from ropegen.runtime.memory import TooLarge
    op = _op("llama3.rope", "llama3_8b")
    need = B.bench_bytes(op, {"T": 80})
    monkeypatch.setattr(harness, "memory_limit", lambda: need + (1 << 20))
    monkeypatch.setattr(harness, "flush_bytes", lambda: 64 << 20)
    with pytest.raises(TooLarge, match="cache-flush buffer"):
        B.bench([op], threads=1, shapes=["T=80,positions=prefill"], repeats=1, peers=())


@pytest.mark.parametrize("positions", ["prefill", "random"])
def test_bench_inputs_are_valid_for_every_example(positions):
    for path in sorted((ROOT / "examples").glob("*.rope")):
        for op in ropegen.compile(path):
            sizes = {s: 8 for s in B.symbol_roles(op.ir)}
            sizes.update({s: 1 for s, r in B.symbol_roles(op.ir).items() if r in ("batch", "sequences")})
            arrays = B.bench_inputs(op, sizes, positions)
            op.run_all(*[arrays[n] for n in op.inputs], backend="c")    # raises on an invalid input
            assert B.bytes_moved(op, arrays) > 0


def test_bytes_moved_llama3_cached():
    op = _op("llama3.rope", "llama3_8b_cached")
    arrays = B.bench_inputs(op, {"T": 4, "P": 100})
    qk = 4 * 40 * 128 * 2
    assert B.bytes_moved(op, arrays) == 2 * qk + 4 * 8 + 2 * 4 * 64 * 4


def test_bench_results_are_json_ready_and_formatted():
    ops = [_op("llama3.rope", "llama3_8b"), _op("onnx_rmsnorm.rope", "rms_mixed_types")]
    results = B.bench(ops, threads=1, shapes=["T=8,positions=prefill"], repeats=2)
    assert [(r["operator"], r["mode"]) for r in results] == [
        ("llama3_8b", "out_of_place"), ("llama3_8b", "in_place"), ("rms_mixed_types", "out_of_place")]
    for r in results:
        assert r["time_min_s"] > 0 and r["time_median_s"] >= r["time_min_s"] and r["bytes"] > 0
        assert r["gbps"] == pytest.approx(r["bytes"] / r["time_min_s"] / 1e9)
        assert r["yardstick"]["kind"] == ("scale" if r["mode"] == "in_place" else "memcpy")
        assert r["ratio_to_copy"] == pytest.approx(r["yardstick"]["time_min_s"] / r["time_min_s"])
        assert r["sizes"]["T"] == 8
    assert "numpy" in results[0]["peers"] and "time_min_s" in results[0]["peers"]["numpy"]
    assert results[0]["peers"]["numpy"]["beside_min_s"] > 0       # ropegen timed in the peer's rounds
    json.loads(json.dumps(results))
    text = B.format_results(results)
    assert "llama3_8b" in text and "rms_mixed_types" in text and "ratio" in text


def test_peers_are_timed_in_rounds_alternating_with_the_measured_call(monkeypatch):
    from ropegen.bench import harness
    calls = []
    got = harness.timed_beside(lambda: calls.append("peer"), lambda: calls.append("ropegen"), 3, 100)
    # one warm-up round, then three, each call timed right after an untimed call of itself
    assert calls == ["peer", "ropegen"] + ["peer", "peer", "ropegen", "ropegen"] * 3
    assert 0 < got["beside_min_s"] and 0 < got["time_min_s"] <= got["time_median_s"]
    assert "beside_min_s" not in harness.timed_beside(lambda: None, None, 2, 100)

    # the speedup is the peer's time over ropegen's in the peer's own rounds, not in the kernel's
    op = _op("llama3.rope", "llama3_8b")
    seen = {}

    def fake_run(names, op_, arrays, nbytes, threads, repeats, measured, beside=None, flush=None):
        seen["beside"] = beside
        return {"numpy": {"time_min_s": 6.0, "time_median_s": 6.0, "gbps": 1.0, "beside_min_s": 2.0}}
    monkeypatch.setattr(harness.peer_registry, "run", fake_run)
    r = B.bench([op], threads=1, shapes=["T=8,positions=prefill"], repeats=1, inplace=False)
    assert callable(seen["beside"]) and r[0]["peers"]["numpy"]["speedup"] == pytest.approx(3.0)


def test_the_onnxruntime_peer_does_not_spin_between_rounds(monkeypatch):
    """Its pool threads spin-wait after a run by default, taking the cores from ropegen's call in the
    next round (RMSNorm 4096 x 16384, two threads: 7.1 ms in its own rounds, 9.7-14 ms between
    onnxruntime's); onnxruntime itself runs as fast without it (measured in blocks of rounds)."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime (the `test` extra) is not installed")
    entries = []
    real = ort.SessionOptions.add_session_config_entry

    class Options(ort.SessionOptions):
        def add_session_config_entry(self, key, value):
            entries.append((key, value))
            return real(self, key, value)
    monkeypatch.setattr(ort, "SessionOptions", Options)
    op = _op("onnx_rmsnorm.rope", "rms_last_axis")
    r = B.bench([op], threads=2, shapes=["N=4"], repeats=1, peers=("onnxruntime",))
    assert "time_min_s" in r[0]["peers"]["onnxruntime"], r[0]["peers"]
    assert ("session.intra_op.allow_spinning", "0") in entries


def test_numpy_backend_can_be_benched():
    r = B.bench([_op("onnx_rotary.rope", "onnx_rope_3d")], backend="numpy", shapes=["B=1,S=4,P=8"], repeats=1,
                peers=())
    assert len(r) == 1 and r[0]["backend"] == "numpy" and r[0]["peers"] == {}


def test_llama3_suite_has_the_issue_operators():
    names = [op.name for op in B.llama3_suite()]
    assert names == ["llama3_8b_f32", "llama3_8b_cached_f32", "rmsnorm_4096_f32",
                     "llama3_8b_bf16", "llama3_8b_cached_bf16", "rmsnorm_4096_bf16"]


@pytest.mark.parametrize("spec,name", [("onnx_rotary.rope", "onnx_rope_3d"), ("onnx_rotary.rope", "onnx_rope_4d"),
                                       ("onnx_rotary.rope", "onnx_rope_partial_interleaved"),
                                       ("onnx_rotary.rope", "onnx_rope_no_position_ids"),
                                       ("onnx_rmsnorm.rope", "rms_axis_negative_broadcast"),
                                       ("llama3.rope", "llama3_8b")])
def test_onnxruntime_peer_computes_the_same_operator(spec, name):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime (the `bench` extra) is not installed")
    pytest.importorskip("onnx", reason="onnx (the `test` extra) is not installed")
    op = _op(spec, name)
    if op.kind == "rope" and op.plan.storage.name == "bf16":       # onnxruntime has no bf16 kernel: f32 copy
        op = ropegen.compile((ROOT / "examples" / spec).read_text().replace("bf16", "f32"))[name]
    arrays = B.bench_inputs(op, {s: 3 for s in B.symbol_roles(op.ir)} | {"P": 40, "T": 5})
    model, feeds, outs = B.onnx_peer_model(op, arrays)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(list(outs), feeds)
    want = op.run_all(*[arrays[n] for n in op.inputs], backend="c")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.reshape(w.shape), w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("spec,name", [("ggml_rope.rope", "ggml_normal"), ("ggml_rope.rope", "ggml_neox_partial"),
                                       ("ggml_rope.rope", "ggml_neox_yarn"), ("ggml_rope.rope", "ggml_freq_factors"),
                                       ("ggml_rope.rope", "ggml_backward"), ("ggml_rope.rope", "ggml_neox_yarn_exact"),
                                       ("llama3.rope", "llama3_8b")])
def test_ggml_peer_computes_the_same_operator(spec, name):
    pytest.importorskip("ggml", reason="ggml-python (the `bench` extra) is not installed")
    op = _op(spec, name)
    if op.plan.storage.name == "bf16":              # ggml's rope has f32 and f16 kernels only: an f32 copy
        op = ropegen.compile((ROOT / "examples" / spec).read_text().replace("bf16", "f32"))[name]
    arrays = B.bench_inputs(op, {"T": 6})
    ids = op.ir.positions.ids
    # small positions: ggml's float32 running-product angles stay within ~1e-5 of exact ones
    arrays[ids] = np.random.default_rng(1).integers(0, 64, arrays[ids].shape).astype(arrays[ids].dtype)
    graph = B.ggml_peer_graph(op, arrays, threads=2)
    assert not isinstance(graph, str), graph
    try:
        graph.compute()
        got = list(graph.outs.values())
    finally:
        graph.close()
    want = op.run_all(*[arrays[n] for n in op.inputs], backend="c")
    exact = op.ir.numerics.value == "exact"
    for g, w in zip(got, want):
        w = np.asarray(w, dtype=np.float64).reshape(g.shape)
        tol = (1e-3 if g.dtype == np.float16 else 2e-5 if exact else 1e-6) * float(np.max(np.abs(w)))
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=0, atol=tol)


def test_ggml_peer_says_why_not():
    pytest.importorskip("ggml", reason="ggml-python (the `bench` extra) is not installed")
    cached = _op("llama3.rope", "llama3_8b_cached")
    assert "cos/sin table" in B.ggml_peer_graph(cached, B.bench_inputs(cached, {"T": 2, "P": 4}))
    bf16 = _op("llama3.rope", "llama3_8b")
    assert "bf16" in B.ggml_peer_graph(bf16, B.bench_inputs(bf16, {"T": 2}))
    rms = _op("onnx_rmsnorm.rope", "rms_last_axis")
    assert "RoPE only" in B.ggml_peer_graph(rms, B.bench_inputs(rms, {s: 2 for s in B.symbol_roles(rms.ir)}))


def test_ggml_peer_in_bench_results():
    pytest.importorskip("ggml", reason="ggml-python (the `bench` extra) is not installed")
    op = ropegen.compile((ROOT / "examples" / "llama3.rope").read_text().replace("bf16", "f32"))["llama3_8b"]
    r = B.bench([op], threads=1, shapes=["T=8,positions=prefill"], repeats=2, peers=("ggml",), inplace=False)
    peer = r[0]["peers"]["ggml"]
    assert peer["time_min_s"] > 0 and "ggml_rope_ext" in peer["note"] and peer["max_rel_diff"] < 1e-4
    assert "ggml" in B.format_results(r)


def test_ggml_peer_setup_turns_llama3_scaling_into_rope_freqs():
    """The ggml peer's parameters, built without ggml itself (so this runs where ggml-python is not
    installed): Llama-3 scaling becomes llama.cpp's rope_freqs, 1 / (planned / base frequency). It
    broke unseen when the planner's base frequencies became high-precision values."""
    op = B.llama3_suite(("f32",))[0]                      # llama3_8b_f32: computed angles, f32
    assert op.name == "llama3_8b_f32"
    setup = B._ggml_rope_setup(op, B.bench_inputs(op, {"T": 4}))
    assert isinstance(setup, dict), setup
    base = 500000.0 ** -(np.arange(64) * 2 / 128)
    want = base / np.asarray(op.plan.angles.inv_freq)       # 1 for high, 8 for low frequencies, between
    np.testing.assert_allclose(setup["freq_factors"], want, rtol=1e-6)
    assert setup["freq_factors"][0] == 1.0 and setup["freq_factors"][-1] == pytest.approx(8.0)
    assert "freq_factors from the llama3 scaling" in setup["note"]


# ---------------------------------------------------------------------------------------------
# ropegen.bench.device: the GPU targets' shared loop, driven here by a host clock on the NumPy target

def _host_clock(calls: list, free_bytes=None, peers=None):
    from ropegen.bench import device

    def time(fn, repeats):
        calls.append(fn())          # one real call: the inputs fit the kernel
        return 0.5

    return device.DeviceClock(backend="numpy", name="host", free_bytes=free_bytes, time=time,
                              copy_ms=lambda nbytes, repeats: nbytes * 1e-6, to_device=lambda a: a,
                              impl="ropegen host", copy_label="host copy",
                              peers=peers or (lambda *shape: []), call=lambda kernel, inputs: kernel(*inputs))


def test_device_run_rows_with_a_host_clock():
    from ropegen.bench import device
    ops = list(ropegen.compile(ROOT / "examples" / "llama3.rope"))
    assert [op.name for op in ops] == ["llama3_8b", "llama3_8b_cached"]
    calls: list = []
    peer_shapes: list = []

    def peers(tokens, hq, hk, d, dtype, repeats, base):
        peer_shapes.append((tokens, dtype, base))
        return [dict(impl="peer", ms=0.25, bytes=7), dict(impl="broken peer", ms=float("nan"), bytes=7, note="x")]

    shapes = ["T=4,dtype=bf16", "T=3,HQ=4,HK=2,D=64,dtype=f32"]
    rows = device.run(ops, shapes, 2, _host_clock(calls, peers=peers))
    assert [(r["impl"], r["op"], r["dtype"]) for r in rows] == [
        ("host copy", "-", "bf16"), ("ropegen host", "llama3_8b", "bf16"), ("ropegen host", "llama3_8b_cached", "bf16"),
        ("peer", "-", "bf16"), ("broken peer", "-", "bf16"),
        ("host copy", "-", "f32"), ("peer", "-", "f32"), ("broken peer", "-", "f32")]    # no f32 operator here
    bf16_bytes = 2 * 4 * (32 + 8) * 128 * 2
    f32_bytes = 2 * 3 * (4 + 2) * 64 * 4
    for r in rows:
        nbytes = bf16_bytes if r["dtype"] == "bf16" else f32_bytes
        assert r["device"] == "host" and r["copy_ms"] == pytest.approx(nbytes * 1e-6)
        if r["impl"] == "broken peer":
            assert np.isnan(r["ratio"]) and np.isnan(r["gbps"]) and r["note"] == "x"
            continue
        assert r["ratio"] == pytest.approx(r["copy_ms"] / r["ms"])
        assert r["gbps"] == pytest.approx(r["bytes"] / (r["ms"] * 1e-3) / 1e9)
        if r["impl"] != "peer":
            assert r["bytes"] == nbytes
            assert (r["tokens"], r["heads_q"], r["heads_k"], r["head_dim"]) == \
                ((4, 32, 8, 128) if r["dtype"] == "bf16" else (3, 4, 2, 64))
    assert [r["ms"] for r in rows if r["impl"] == "ropegen host"] == [0.5, 0.5]
    # the kernels really ran on the uploaded inputs: q_rot, k_rot at the bf16 shape
    assert len(calls) == 2 and all([o.shape for o in outs] == [(4, 32, 128), (4, 8, 128)] for outs in calls)
    # the peers get the operator's rope_theta (500000 for llama3_8b), the default without one
    assert peer_shapes[0][:2] == (4, "bf16") and peer_shapes[0][2] == pytest.approx(500000.0)
    assert peer_shapes[1] == (3, "f32", device.DEFAULT_BASE)
    text = device.format_results(rows, "host copy")
    assert "llama3_8b_cached" in text and "device: host; vs copy = same-run host copy time / time" in text


def test_device_run_checks_before_touching_the_device():
    from ropegen.bench import device
    from ropegen.runtime.memory import TooLarge
    op = _op("llama3.rope", "llama3_8b")

    def no_device():
        raise AssertionError("the clock was made before the host checks")

    for shapes, repeats in ((["T=10000000000000"], 1), (["Q=4"], 1), (["T=4"], 0), (["T=4"], 1.5)):
        with pytest.raises(ValueError):
            device.run([op], shapes, repeats, no_device)
    with pytest.raises(TooLarge, match="device memory"):
        device.run([op], ["T=4096,dtype=bf16"], 1, lambda: _host_clock([], free_bytes=1000))
    assert device.format_results([]) == device.format_results([], "x")
