"""The CUDA bench without a GPU: its measuring loop (ropegen.backends.cuda.bench.measure) driven by a
fake of the CUDA calls it makes, the rows and ratios of the shared device bench, the peers' n/a rows
and equal numerics (PyTorch on the CPU where it is installed), and the JSON document."""
from __future__ import annotations

import contextlib
import json
import math
import sys
import types

import numpy as np
import pytest

from ropegen.backends.cuda import bench as cb
from ropegen.bench import device
from ropegen.bench.peers import case as pc
from ropegen.bench.suites import llama3_suite

HOT, COLD = 1.0, 3.0     # the fake's milliseconds for a launch with the data in L2, and right after a flush


class FakeEvent:
    t = None


class FakeGpu:
    """CupyGpu's calls on a host clock: a launch costs HOT ms, the first after a flush COLD ms; every
    call is logged so that the tests can read what measure() did between its events."""

    def __init__(self, capture: bool = True):
        self.can_capture = capture
        self.log: list = []
        self.t = 0.0
        self.cold = False
        self.capturing = False
        self.why = ""
        self.flush_bytes = 100 << 20
        self.stream = "bench stream"

    @contextlib.contextmanager
    def scope(self):
        self.log.append("enter")
        yield
        self.log.append("exit")

    def event(self):
        return FakeEvent()

    def record(self, ev):
        ev.t = self.t
        self.log.append("record")

    def elapsed_ms(self, a, b):
        return b.t - a.t

    def sync(self):
        self.log.append("sync")

    def flush(self):
        self.cold = True
        self.log.append("flush")

    def run_launch(self):      # the device executing one launch
        self.t += COLD if self.cold else HOT
        self.cold = False

    def capture(self, fn, n, library):
        if not self.can_capture:
            self.why = "RuntimeError: capture not permitted"
            return None
        self.log.append(("capture", n, library))
        self.capturing = True
        for _ in range(n):
            fn()
        self.capturing = False

        def replay():
            self.log.append(("replay", n))
            for _ in range(n):
                self.run_launch()
        return replay

    def work(self, decode=False, library="cupy"):
        calls = []

        def launch():
            if self.capturing:
                self.log.append("captured")
            else:
                self.log.append("launch")
                self.run_launch()
        return device.Work(launch, call=lambda: calls.append(1), library=library, decode=decode), calls


def _between_records(log: list) -> list[list]:
    """What was logged between each start record and its stop record."""
    out, cur = [], None
    for item in log:
        if item == "record":
            if cur is None:
                cur = []
            else:
                out.append(cur)
                cur = None
        elif cur is not None:
            cur.append(item)
    return out


def test_hot_time_is_events_around_graph_replays_and_cold_flushes_before_each_launch():
    gpu = FakeGpu()
    work, calls = gpu.work()
    t = cb.measure(gpu, work, repeats=5, inner=8)
    assert (t.hot_ms, t.cold_ms) == (HOT, COLD)
    assert t.method.startswith("CUDA graph of 8 launches") and "L2 flushed (100 MiB)" in t.method
    assert gpu.log[0] == "enter" and gpu.log[-1] == "exit"
    assert ("capture", 8, "cupy") in gpu.log and ("capture", 1, "cupy") in gpu.log
    spans = _between_records(gpu.log)
    assert spans[:5] == [[("replay", 8)]] * 5             # hot: nothing but one graph of 8 between events
    assert spans[5:] == [[("replay", 1)]] * 5             # cold: one launch between events
    first_cold = [i for i, x in enumerate(gpu.log) if x == ("replay", 1)]
    for i in first_cold:                                   # and each right after a flush and its start event
        assert gpu.log[i - 2:i] == ["flush", "record"]
    # the flushes queued ahead of the cold loop keep the GPU busy while the host issues it
    start = gpu.log.index(("replay", 1)) - 2          # the first cold launch's own flush
    ahead = 0
    while gpu.log[start - 1 - ahead] == "flush":
        ahead += 1
    assert ahead == cb.HEAD_START >= 2
    assert calls == []                                     # not a decode size: no host timing


def test_batch_of_launches_when_capture_fails_and_the_row_says_so():
    gpu = FakeGpu(capture=False)
    work, _ = gpu.work()
    t = cb.measure(gpu, work, repeats=3, inner=4)
    assert (t.hot_ms, t.cold_ms) == (HOT, COLD)
    assert t.method.startswith("batch of 4 launches (graph capture failed: RuntimeError: capture not permitted)")
    spans = _between_records(gpu.log)
    assert spans == [["launch"] * 4] * 3 + [["launch"]] * 3


def test_whole_python_call_is_timed_at_decode_sizes_only():
    gpu = FakeGpu()
    work, calls = gpu.work(decode=True)
    t = cb.measure(gpu, work, repeats=2, inner=2)
    assert len(calls) == cb.CALLS + 1 and t.call_us is not None and t.call_us >= 0
    assert gpu.log[-2] == "sync"                          # the calls' device work is waited for


def test_torch_work_is_captured_through_torch():
    gpu = FakeGpu()
    work, _ = gpu.work(library="torch")
    cb.measure(gpu, work, repeats=1, inner=3)
    assert ("capture", 3, "torch") in gpu.log


def _fake_cupy(gpu, copies: list):
    class Mem:
        def copy_from_device_async(self, src, size, stream):
            copies.append((size, stream))
            if not gpu.capturing:
                gpu.run_launch()

    class Arr:
        def __init__(self, n, dtype=None):
            self.data = Mem()
    props = {"name": b"Fake H100", "l2CacheSize": 50 << 20, "multiProcessorCount": 132, "totalGlobalMem": 80 << 30}
    runtime = types.SimpleNamespace(getDeviceProperties=lambda i: props, driverGetVersion=lambda: 12040,
                                    runtimeGetVersion=lambda: 12060, memGetInfo=lambda: (60 << 30, 80 << 30))
    cuda = types.SimpleNamespace(runtime=runtime, Device=lambda: types.SimpleNamespace(id=0, compute_capability="90"),
                                 nvrtc=types.SimpleNamespace(getVersion=lambda: (12, 6)))
    return types.SimpleNamespace(ones=Arr, empty=Arr, uint8=np.uint8, cuda=cuda, __version__="14.2.0")


def test_copy_yardstick_is_a_device_copy_timed_the_same_way():
    gpu = FakeGpu()
    copies: list = []
    gpu.cupy = _fake_cupy(gpu, copies)
    t = cb.measure(gpu, cb.copy_work(gpu, 1000), repeats=2, inner=4)
    assert copies and set(copies) == {(500, "bench stream")}    # nbytes in total: half read, half written
    assert ("capture", 4, "cupy") in gpu.log and (t.hot_ms, t.cold_ms) == (HOT, COLD)


def test_clock_wiring_facts_copy_and_peers(monkeypatch):
    _no_peer_libraries(monkeypatch)
    gpu = FakeGpu()
    gpu.l2_bytes = 50 << 20
    gpu.cupy = _fake_cupy(gpu, [])
    c = cb.clock(gpu)
    assert c.name == "Fake H100" and c.free_bytes == 60 << 30
    assert {k: c.facts[k] for k in ("driver", "runtime", "nvrtc", "cupy", "sms", "l2_bytes", "compute_capability")} \
        == dict(driver=12040, runtime=12060, nvrtc="12.6", cupy="14.2.0", sms=132, l2_bytes=50 << 20,
                compute_capability="90")
    t = c.copy_ms(1000, 2)
    assert (t.hot_ms, t.cold_ms) == (HOT, COLD)
    case = pc.PeerCase(kind="rmsnorm", tokens=1, dtype="bf16", repeats=1, width=8)
    rows = c.peer_rows(case)
    assert [r["impl"].split()[0] for r in rows] == ["torch", "torch.compile", "FlashInfer", "Liger-Kernel"]
    assert all(r["note"].startswith("n/a") and r["bytes"] == 3 * 8 * 2 for r in rows)


def test_prepare_launches_into_outputs_allocated_once_without_checks():
    gpu = FakeGpu()
    seen = []

    def kernel(*args, **kw):
        seen.append(kw)
        return ("q_rot", "k_rot")
    w = cb.prepare(gpu, kernel, ["q", "k", "pos"], decode=True)
    w.launch()
    w.call()
    assert seen == [dict(check=False, stream="bench stream"),
                    dict(out=("q_rot", "k_rot"), check=False, stream="bench stream"), {}]
    assert w.decode and w.library == "cupy"


def test_ratio_arithmetic_hot_and_cold_against_the_copy_timed_the_same_way():
    copy = device.Timing(hot_ms=0.5, cold_ms=2.0)
    r = device.row(op="x", impl="k", timing=device.Timing(hot_ms=1.0, cold_ms=2.5, call_us=7.0, method="m"),
                   copy=copy, bytes=10_000_000)
    assert r["ms"] == 2.5 and r["ms_hot"] == 1.0 and r["ms_cold"] == 2.5 and r["call_us"] == 7.0
    assert r["ratio"] == pytest.approx(2.0 / 2.5) and r["ratio_cold"] == pytest.approx(0.8)
    assert r["ratio_hot"] == pytest.approx(0.5) and r["copy_ms"] == 2.0
    assert r["gbps"] == pytest.approx(10_000_000 / 2.5e-3 / 1e9)
    na = device.row(op="-", impl="p", timing=device.as_timing(float("nan")), copy=copy, bytes=1)
    assert math.isnan(na["ratio"]) and math.isnan(na["ratio_hot"]) and math.isnan(na["gbps"])


def _timing_clock(peer_cases: list):
    """A DeviceClock on the NumPy target reporting Timings: hot 1 ms, cold 2 ms; copies 0.5 / 1 ms."""
    def time(fn, repeats):
        fn()
        return device.Timing(hot_ms=1.0, cold_ms=2.0, method="fake")

    def peer_rows(case):
        peer_cases.append(case)
        return pc.device_rows(case, lambda w: pytest.fail("a missing peer was timed"), "cuda")
    return device.DeviceClock(backend="numpy", name="fake", free_bytes=None, time=time,
                              copy_ms=lambda n, r: device.Timing(hot_ms=0.5, cold_ms=1.0), to_device=lambda a: a,
                              impl="ropegen fake", copy_label="copy", peer_rows=peer_rows, facts={"name": "fake"})


def _no_peer_libraries(monkeypatch):
    for name in ("torch", "flashinfer", "liger_kernel"):
        monkeypatch.setitem(sys.modules, name, None)      # import fails: as where they are not installed


def test_run_times_rope_and_rmsnorm_with_their_own_copies_and_lists_missing_peers(monkeypatch):
    _no_peer_libraries(monkeypatch)
    cases: list = []
    rows = device.run(llama3_suite(("f32",)), [(3, 32, 8, 128, "f32")], 1, _timing_clock(cases))
    by = {(r["impl"], r["op"]): r for r in rows}
    rope_bytes = 2 * 3 * 40 * 128 * 4
    norm_bytes = (2 * 3 + 1) * 4096 * 4
    assert [r["bytes"] for r in rows if r["impl"] == "copy"] == [rope_bytes, norm_bytes]
    rope = by[("ropegen fake", "llama3_8b_f32")]
    norm = by[("ropegen fake", "rmsnorm_4096_f32")]
    assert rope["ratio"] == pytest.approx(0.5) and rope["ratio_hot"] == pytest.approx(0.5)
    assert norm["bytes"] == norm_bytes and norm["heads_q"] is None and rope["heads_q"] == 32
    # the peers get the computed operator's frequencies and llama3 parameters, and RMSNorm's epsilon
    rope_case, norm_case = cases
    assert rope_case.llama3 == dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                    original_max_positions=8192) and rope_case.theta == 500000.0
    assert rope_case.inv_freq == tuple(llama3_suite(("f32",))[0].plan.angles.inv_freq)
    assert (norm_case.width, norm_case.epsilon) == (4096, 1e-5)
    na = [r for r in rows if r["impl"] not in ("copy", "ropegen fake")]
    assert [r["op"] for r in na] == ["llama3_8b_f32"] * 5 + ["rmsnorm_4096_f32"] * 4    # what each is set beside
    # RoPE: torch eager, torch.compile, FlashInfer pos_ids and cos/sin cache, Liger; RMSNorm: one FlashInfer
    assert [r["impl"].split()[0] for r in na] == ["torch", "torch.compile", "FlashInfer", "FlashInfer", "Liger-Kernel",
                                                "torch", "torch.compile", "FlashInfer", "Liger-Kernel"]
    assert all(r["note"].startswith("n/a: ") and math.isnan(r["ms"]) for r in na)
    assert any("PyTorch is not importable" in r["note"] for r in na)
    text = device.format_results(rows, "copy")
    assert "cold ms" in text and "hot vs copy" in text and "n/a" in text and "torch eager (HF rotate_half), " in text


def test_peers_missing_one_by_one_are_n_a_with_the_reason(monkeypatch):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (CI): the per-library reasons need it")
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    monkeypatch.setitem(sys.modules, "liger_kernel", None)
    monkeypatch.setattr(torch, "compile", lambda fn: fn)     # Inductor's C++ build takes a minute here
    case = pc.PeerCase(kind="rope", tokens=4, dtype="f32", repeats=1, heads_q=2, heads_k=1, head_dim=8,
                       inv_freq=(1.0, 0.1, 0.01, 0.001))
    if not torch.cuda.is_available():
        rows = pc.device_rows(case, lambda w: pytest.fail("timed"), "cuda")
        assert all("PyTorch has no cuda device here" in r["note"] for r in rows)
    timed = []
    rows = pc.device_rows(case, lambda w: timed.append(w) or device.Timing(hot_ms=1.0), "cpu")
    names = [r["impl"] for r in rows]
    assert names[0] == "torch eager (HF rotate_half)" and "timing" in rows[0]
    fi = [r for r in rows if r["impl"].startswith("FlashInfer")]
    li = [r for r in rows if r["impl"].startswith("Liger")]
    assert fi and all("FlashInfer is not importable" in r["note"] for r in fi)
    assert li and all("Liger-Kernel is not importable" in r["note"] for r in li)
    assert all(w.library == "torch" and w.decode for w in timed)


def test_torch_peer_computes_what_ropegen_computes():
    """Equal numerics: the eager peer (f32 angles of the planned llama3 frequencies, f32 rotation) is
    ropegen's computed operator to float32 rounding, on the CPU."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (CI)")
    from ropegen.bench.peers import torch as tp
    op = llama3_suite(("f32",))[0]
    case = pc.rope_case(op, 64, 32, 8, 128, "f32", 1)
    fn, (q, k, pos) = tp.rope_fn(torch, case, "cpu")
    q_rot, k_rot = fn(q, k, pos)
    want_q, want_k = op.run(q.numpy(), k.numpy(), pos.numpy(), backend="numpy")
    np.testing.assert_allclose(q_rot.numpy(), want_q, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(k_rot.numpy(), want_k, atol=2e-4, rtol=1e-4)
    norm = llama3_suite(("f32",))[2]
    fn, (x, w) = tp.rmsnorm_fn(torch, pc.norm_case(norm, 3, 0, 0, 0, "f32", 1), "cpu")
    np.testing.assert_allclose(fn(x, w).numpy(), norm.run(x.numpy(), w.numpy(), backend="numpy"), rtol=1e-5,
                               atol=1e-6)


def test_flashinfer_and_liger_get_their_layout_and_the_operator_numerics(monkeypatch):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (CI)")
    calls = {}
    rope = types.SimpleNamespace(
        apply_llama31_rope_pos_ids_inplace=lambda *a, **kw: calls.setdefault("llama31", (a, kw)),
        apply_rope_with_cos_sin_cache_inplace=lambda *a, **kw: calls.setdefault("cache", (a, kw)))
    monkeypatch.setitem(sys.modules, "flashinfer", types.SimpleNamespace(rope=rope))
    liger = types.ModuleType("liger_kernel.ops.rope")
    liger.LigerRopeFunction = types.SimpleNamespace(apply=lambda *a: calls.setdefault("liger", a))
    for name, mod in (("liger_kernel", types.ModuleType("liger_kernel")), ("liger_kernel.ops", types.ModuleType("o")),
                      ("liger_kernel.ops.rope", liger)):
        monkeypatch.setitem(sys.modules, name, mod)
    op = llama3_suite(("bf16",))[0]
    case = pc.rope_case(op, 5, 32, 8, 128, "bf16", 1)
    from ropegen.bench.peers import flashinfer, liger as liger_peer
    timing = device.Timing(hot_ms=1.0)
    rows = flashinfer.rows(case, lambda w: timing, "cpu") + liger_peer.rows(case, lambda w: timing, "cpu")
    assert [r.get("timing") for r in rows] == [timing] * 3, rows
    (q, k, pos), kw = calls["llama31"]
    assert pos.dtype == torch.int32 and q.shape == (5, 32, 128) and kw["interleave"] is False
    assert (kw["rope_scale"], kw["rope_theta"], kw["low_freq_factor"], kw["high_freq_factor"],
            kw["old_context_len"]) == (8.0, 500000.0, 1.0, 4.0, 8192)
    (pos64, q2, k2, d, cache), kw = calls["cache"]
    assert pos64.dtype == torch.int64 and q2.shape == (5, 32 * 128) and d == 128 and kw == {"is_neox": True}
    ang = np.arange(5)[:, None] * np.asarray(op.plan.angles.inv_freq)[None, :]
    np.testing.assert_allclose(cache.numpy(), np.concatenate([np.cos(ang), np.sin(ang)], -1), rtol=1e-7, atol=1e-7)
    lq, lk, cos, sin = calls["liger"]
    assert lq.shape == (1, 32, 5, 128) and lq.transpose(1, 2).is_contiguous()     # HF's view: no copy
    assert cos.shape == (1, 5, 128) and cos.dtype == torch.float32


def test_json_document_keys_and_strict_json():
    rows = [device.row(op="-", impl="p", timing=device.as_timing(float("nan")), bytes=1, device="d")]
    doc = device.document(rows, {"name": "H100", "driver": 12040, "runtime": 12060}, ["python -m x"])
    assert set(doc) == {"device", "commands", "rows"} and doc["commands"] == ["python -m x"]
    assert doc["device"]["name"] == "H100" and doc["rows"][0]["ms"] is None
    json.dumps(doc, allow_nan=False)


def test_json_hook_carries_the_facts_run_attached(monkeypatch):
    _no_peer_libraries(monkeypatch)
    rows = device.run(llama3_suite(("f32",))[:1], [(1, 32, 8, 128, "f32")], 1, _timing_clock([]))
    doc = cb.json_document(rows, "ropegen bench --backend cuda --suite llama3 --json bench/results/cuda.json")
    assert doc["device"] == {"name": "fake"} and doc["commands"][0].startswith("ropegen bench")
    assert len(doc["rows"]) == len(rows) and {"ms", "ms_hot", "ms_cold", "ratio", "ratio_hot", "ratio_cold",
                                              "method", "bytes", "gbps", "device"} <= set(doc["rows"][1])
    json.dumps(doc, allow_nan=False)


def test_standalone_run_without_cupy_is_an_error_not_a_traceback(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert cb.main(["-o", "never.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the CUDA backend cannot run here: CuPy is not importable")


def test_default_shapes_are_the_issue_token_counts():
    assert sorted({s[0] for s in cb.DEFAULT_SHAPES}) == [1, 16, 64, 512, 4096, 16384, 131072]
    assert {s[1:] for s in cb.DEFAULT_SHAPES} == {(32, 8, 128, "bf16"), (32, 8, 128, "f32")}


def test_standalone_run_writes_the_document(tmp_path, monkeypatch, capsys):
    from ropegen.backends.cuda import backend
    _no_peer_libraries(monkeypatch)
    monkeypatch.setattr(backend, "unavailable", lambda: None)
    monkeypatch.setattr(cb, "clock", lambda: _timing_clock([]))     # the NumPy target behind a fake clock
    out = tmp_path / "cuda.json"
    assert cb.main(["-o", str(out), "--repeats", "1", "--shape", "T=1,dtype=f32"]) == 0
    doc = json.loads(out.read_text())
    assert doc["commands"] == [f"python -m ropegen.backends.cuda.bench -o {out} --repeats 1 --shape T=1,dtype=f32"]
    assert doc["device"] == {"name": "fake"}
    assert {r["op"] for r in doc["rows"] if r["impl"] == "ropegen fake"} == \
        {"llama3_8b_f32", "llama3_8b_cached_f32", "rmsnorm_4096_f32"}
    assert "rmsnorm_4096_f32" in capsys.readouterr().out
