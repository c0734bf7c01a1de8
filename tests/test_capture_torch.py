"""The torch engine (real transformers models on the meta device) agrees with the analytic engine.

Skips cleanly without the [capture] extra (torch, transformers)."""
from __future__ import annotations

import resource
import time

import pytest

pytest.importorskip("h5py")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from fabric import trace as T  # noqa: E402
from fabric.capture import capture, logical_graph, resolve_model  # noqa: E402
from fabric.capture.spec import spec_from_config  # noqa: E402


def _graphs(model, context=4096):
    name, cfg = resolve_model(model)
    spec = spec_from_config(cfg, name)
    return logical_graph(spec, cfg, context, "analytic"), logical_graph(spec, cfg, context, "torch")


@pytest.mark.parametrize("model", ["qwen3-235b-a22b", "llama-3-70b"])
def test_engines_agree_on_logical_graph(model):
    a, t = _graphs(model)
    assert len(a) == len(t)
    for x, y in zip(a, t):
        assert x.key() == y.key(), (x, y)


def test_engines_agree_deepseek_full_671b_trace_time_and_memory():
    """Full DeepSeek-R1 config: same trace from both engines (ops per layer, shapes, collectives), < 30 s, < 2 GB."""
    t0 = time.perf_counter()
    tt = capture("deepseek-r1", tp=64, engine="torch")
    dt = time.perf_counter() - t0
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux
    assert dt < 30, dt
    assert rss_gb < 2.0, rss_gb
    ta = capture("deepseek-r1", tp=64, engine="analytic")
    assert tt.meta["tool"] == "fabric-capture/torch"
    assert tt.ops[0].same_as(ta.ops[0])
    assert T.summary(tt)["collectives"] == T.summary(ta)["collectives"]


def test_engines_agree_under_expert_parallelism():
    a = capture("toy-mla", tp=2, ep=8, batch=4, context=64, engine="analytic")
    t = capture("toy-mla", tp=2, ep=8, batch=4, context=64, engine="torch")
    assert all(x.same_as(y) for x, y in zip(a.ops, t.ops))


def test_cli_torch_engine(tmp_path):
    from click.testing import CliRunner

    from fabric.cli.capture import main
    out = tmp_path / "t.h5"
    res = CliRunner().invoke(main, ["--model", "toy-mla", "--tp", "8", "--context", "32", "--engine", "torch",
                                    "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert T.read(out).meta["tool"] == "fabric-capture/torch"


def test_paused_gc_restores_the_collector():
    import gc

    from fabric.capture.torch_engine import paused_gc
    for before in (True, False):
        (gc.enable if before else gc.disable)()
        try:
            with pytest.raises(KeyError), paused_gc():
                assert not gc.isenabled()
                raise KeyError
            assert gc.isenabled() == before
        finally:
            gc.enable()
