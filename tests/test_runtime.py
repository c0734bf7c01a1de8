"""Runtimes of capture (fabric.capture.runtime): fused (a serving engine's kernels, the default) vs eager (a plain
framework, one kernel per framework op); the CLI options --runtime, --cost-model, --launch."""
from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

pytest.importorskip("h5py")
from click.testing import CliRunner  # noqa: E402

from fabric import trace as T  # noqa: E402
from fabric.capture import capture  # noqa: E402
from fabric.capture.chips import load_chip  # noqa: E402
from fabric.config import load_config  # noqa: E402
from fabric.errors import ConfigError  # noqa: E402
from fabric.experiments.serving import replay_trace  # noqa: E402

KIND_COMPUTE = 0


def _compute_rows(tr, rank=0):
    t = tr.ops[rank]
    return int(np.count_nonzero(t.kind == KIND_COMPUTE))


@pytest.fixture(scope="module")
def ds_h200():
    fused = capture("deepseek-r1", tp=64, chip="h200")
    eager = capture("deepseek-r1", tp=64, chip="h200", runtime="eager")
    return fused, eager


def test_eager_has_more_kernels_and_larger_tpot(ds_h200):
    fused, eager = ds_h200
    assert "runtime" not in fused.meta["plan"]                 # the default leaves the metadata as it was
    assert eager.meta["plan"]["runtime"] == "eager"
    assert eager.meta["plan"]["launch"] == "eager" and eager.meta["plan"]["cost_model"] == "shape"
    n_f, n_e = _compute_rows(fused), _compute_rows(eager)
    assert n_e == eager.meta["plan"]["kernels_per_step"]
    assert n_e > 2 * n_f
    cfg = load_config("sd200")
    t_f = replay_trace(fused, cfg, "analytic")["tpot_us"]
    t_e = replay_trace(eager, cfg, "analytic")["tpot_us"]
    assert t_e > 2 * t_f
    # the host issues every kernel (6 us each on h200) and runs ahead of the GPU: the step's kernels take at least
    # the host's time, and each at least its own GPU time (queue launch 1.5 us + body)
    dur = eager.ops[0].duration_ns[eager.ops[0].kind == KIND_COMPUTE]
    assert dur.sum() >= n_e * 6000.0 - 1e-3
    assert dur.min() >= 1500.0
    # same collectives as the fused runtime (the plan, not the runtime, decides them)
    assert T.summary(fused)["collectives"] == T.summary(eager)["collectives"]


def test_eager_single_stream_and_kernels(ds_h200):
    _, eager = ds_h200
    t = eager.ops[0]
    assert set(np.unique(t.stream)) == {0}
    names = [str(n) for n, L in zip(t.name, t.layer) if L == 10]
    for k in ("input_norm.residual_add", "input_norm.pow", "input_norm.rsqrt", "q_a_proj", "kv_a_proj",
              "q_pe.cat", "cache_cat_latent", "kv_b_proj", "sdpa", "gate.w_to_fp32", "topk", "gather",
              "expert0.gate_up", "expert0.index_add_", "shared_gate_proj", "shared_up_proj", "moe.add_shared"):
        assert k in names, k
    assert any(n.endswith(".splitk_reduce") for n in names)   # split-K reduces are kernels of their own


def test_eager_graph_launch_between(ds_h200):
    """The same eager kernels replayed from a CUDA graph: cheaper than eager launch, dearer than fused."""
    fused, eager = ds_h200
    graph = capture("deepseek-r1", tp=64, chip="h200", runtime="eager", launch="graph")
    cfg = load_config("sd200")
    t = [replay_trace(x, cfg, "analytic")["tpot_us"] for x in (fused, graph, eager)]
    assert t[0] < t[1] < t[2]


def test_host_timeline():
    from fabric.capture.runtime import host_timeline
    assert host_timeline([1.0, 1.0, 1.0], 6.0) == [7.0, 6.0, 6.0]            # host-bound: 6 per kernel
    assert host_timeline([20.0, 1.0, 1.0, 1.0, 1.0], 6.0) == [26.0, 1.0, 1.0, 1.0, 2.0]  # a long kernel banks host time
    assert host_timeline([20.0, 20.0], 6.0) == [26.0, 20.0]                 # GPU-bound


@pytest.mark.parametrize("chip, model", [("sd200-accelerator", "shape"), ("h200", "roofline")])
def test_fused_default_is_the_chips_cost_model(chip, model):
    a = capture("toy-mla", tp=8, context=64, chip=chip)
    b = capture("toy-mla", tp=8, context=64, chip=chip, runtime="fused", cost_model=model)
    assert a.meta == b.meta and all(x.same_as(y) for x, y in zip(a.ops, b.ops))


def test_chip_cost_model_checked(tmp_path):
    text = (resources.files("fabric.capture.chips") / "h200.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('[chip]\n', '[chip]\ncost_model = "tiles"\n', 1))
    with pytest.raises(ConfigError, match="cost_model"):
        load_chip(str(bad))
    bare = tmp_path / "bare.toml"
    bare.write_text(text.replace('[chip]\n', '[chip]\ncost_model = "shape"\n', 1).split("[kernels]")[0])
    with pytest.raises(ConfigError, match="needs a \\[kernels\\] section"):
        load_chip(str(bare))


def test_runtime_errors():
    with pytest.raises(ConfigError, match="runtime"):
        capture("toy-mla", tp=8, context=64, runtime="lazy")
    with pytest.raises(ConfigError, match="shape"):
        capture("toy-mla", tp=8, context=64, runtime="eager", cost_model="roofline")


@pytest.mark.parametrize("model,tp", [("llama-3-70b", 8), ("qwen3-235b-a22b", 4), ("kimi-k2", 8)])
def test_eager_families(model, tp):
    f = capture(model, tp=tp, context=256, chip="h200", cost_model="shape")
    e = capture(model, tp=tp, context=256, chip="h200", runtime="eager")
    assert _compute_rows(e) > 2 * _compute_rows(f)
    assert e.ops[0].duration_ns.sum() > f.ops[0].duration_ns.sum()


def test_eager_expert_parallel_and_quantised():
    f = capture("toy-mla", tp=2, ep=8, batch=4, context=64, chip="h200", cost_model="shape")
    e = capture("toy-mla", tp=2, ep=8, batch=4, context=64, chip="h200", runtime="eager")
    assert T.summary(f)["collectives"] == T.summary(e)["collectives"]
    assert all(_compute_rows(e, r) > _compute_rows(f, r) for r in range(8))
    q = capture("toy-mla", tp=8, context=64, chip="h200", runtime="eager", weight_dtype="fp8")
    names = {str(n) for n in q.ops[0].name}
    assert "q_a_proj.dequant" in names                           # F.linear has no FP8 path: dequantise first


def test_cli_runtime_options(tmp_path):
    from fabric.cli.capture import main
    out = tmp_path / "e.h5"
    res = CliRunner().invoke(main, ["--model", "toy-mla", "--tp", "8", "--context", "64", "--chip", "h200",
                                    "--runtime", "eager", "--launch", "graph", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "eager runtime" in res.output
    p = T.read(out).meta["plan"]
    assert (p["runtime"], p["launch"], p["cost_model"]) == ("eager", "graph", "shape")
    res = CliRunner().invoke(main, ["--model", "toy-mla", "--tp", "8", "--context", "64", "--chip", "h200",
                                    "--cost-model", "shape", "--launch", "queue", "-o", str(out)])
    assert res.exit_code == 0, res.output
    p = T.read(out).meta["plan"]
    assert (p["runtime"], p["launch"], p["cost_model"]) == ("fused", "queue", "shape")
    for args in (["--runtime", "lazy"], ["--cost-model", "exact"], ["--launch", "warp"],
                 ["--runtime", "eager", "--cost-model", "roofline"]):
        res = CliRunner().invoke(main, ["--model", "toy-mla", "--tp", "8", "--context", "64", *args, "-o", str(out)])
        assert res.exit_code == 2, (args, res.output)


def test_torch_engine_eager_from_aten():
    """With the torch engine the eager kernels are the recorded aten ops of a TP-sharded model."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    a = capture("toy-mla", tp=8, context=64, chip="h200", runtime="eager")
    t = capture("toy-mla", tp=8, context=64, chip="h200", runtime="eager", engine="torch")
    assert T.summary(a)["collectives"] == T.summary(t)["collectives"]
    na, nt = _compute_rows(a), _compute_rows(t)
    assert 0.8 * na <= nt <= 1.2 * na, (na, nt)
    names = {str(n) for n in t.ops[0].name}
    assert {"linear", "sdpa", "pow", "rsqrt", "topk", "cat", "copy_"} <= names
    assert not names & {"view", "transpose", "reshape_alias", "split_with_sizes", "select", "slice", "unsqueeze"}
    with pytest.raises(ConfigError, match="--ep 1"):
        capture("toy-mla", tp=2, ep=8, batch=4, context=64, chip="h200", runtime="eager", engine="torch")


@pytest.mark.parametrize("model_type,extra", [("mixtral", dict(num_local_experts=8, num_experts_per_tok=2)),
                                              ("gemma", {}), ("phi3", {}), ("gemma2", {}), ("phi", {})])
def test_torch_eager_other_transformers_models(tmp_path, model_type, extra):
    """Models outside the four built-in families capture without new code (--engine torch --runtime eager)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import json
    cfg = dict(model_type=model_type, hidden_size=256, num_hidden_layers=2, vocab_size=1024, num_attention_heads=8,
               num_key_value_heads=4, head_dim=32, intermediate_size=512, **extra)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="--engine torch --runtime eager"):
        capture(hf_config=str(p), tp=4, context=64)
    tr = capture(hf_config=str(p), tp=4, context=64, chip="h200", engine="torch", runtime="eager")
    colls = {c["kind"]: (c["count_per_rank"][0], c["bytes"]) for c in T.summary(tr)["collectives"]}
    assert colls["allreduce"] == (1 + 2 * 2, 256 * 2)          # embedding, then attention and MLP of each layer
    assert colls["allgather"] == (1, 1024 // 4 * 2)             # the vocab-parallel logits
    names = {str(n) for n in tr.ops[0].name}
    assert "linear" in names and _compute_rows(tr) > 30
    if model_type == "mixtral":
        from fabric.cli.capture import main
        out = tmp_path / "m.h5"
        res = CliRunner().invoke(main, ["--hf-config", str(p), "--tp", "4", "--context", "64", "--chip", "h200",
                                        "--engine", "torch", "--runtime", "eager", "-o", str(out)])
        assert res.exit_code == 0, res.output
        assert T.read(out).meta["plan"]["runtime"] == "eager"
