"""`ropegen bench --plot`: the lines drawn from bench results (pure Python), the picture itself when
matplotlib is installed, and one clear line when it is not."""
from __future__ import annotations

import builtins

import pytest

from ropegen.bench import plot


def _rec(op: str, t: int, gbps: float, copy: float, peers: dict) -> dict:
    return {"operator": op, "mode": "out_of_place", "sizes": {"T": t}, "gbps": gbps,
            "yardstick": {"gbps": copy}, "peers": peers}


RESULTS = [
    _rec("llama3", 4096, 40.0, 50.0, {"onnxruntime": {"gbps": 20.0}, "ggml": {"error": "no bf16"}}),
    _rec("llama3", 1, 1.0, 20.0, {"onnxruntime": {"gbps": 0.5}}),
    _rec("llama3", 64, 10.0, 40.0, {"onnxruntime": {"gbps": 5.0}}),
    {**_rec("rms", 0, 9.0, 9.0, {}), "sizes": {"N": 16}},
    {**_rec("prefill_only", 0, 9.0, 9.0, {}), "sizes": {}},      # no token count: not drawn
]


def test_series_sorts_by_tokens_and_keeps_only_peers_that_ran():
    s = plot.series(RESULTS)
    assert sorted(s) == [("llama3", "out_of_place"), ("rms", "out_of_place")]
    lines = s[("llama3", "out_of_place")]
    assert lines["ropegen"] == [(1, 1.0), (64, 10.0), (4096, 40.0)]
    assert lines["copy"] == [(1, 20.0), (64, 40.0), (4096, 50.0)]
    assert lines["onnxruntime"] == [(1, 0.5), (64, 5.0), (4096, 20.0)]
    assert "ggml" not in lines
    assert s[("rms", "out_of_place")]["ropegen"] == [(16, 9.0)]


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot draws with matplotlib (the bench extra)")
    out = tmp_path / "bench.png"
    assert plot.plot(RESULTS, str(out)) == 2
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_without_token_counts_are_a_clear_error(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot draws with matplotlib (the bench extra)")
    with pytest.raises(ValueError, match="--shape T="):
        plot.plot([RESULTS[-1]], str(tmp_path / "x.png"))


def test_without_matplotlib_the_message_names_the_extra(monkeypatch, tmp_path):
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(plot.MissingPlotter, match=r"pip install 'ropegen\[bench\]'"):
        plot.plot(RESULTS, str(tmp_path / "x.png"))
