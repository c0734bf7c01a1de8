"""Analytic capture: the serving-engine structure and figures of docs/sources.md §Decode step, chip profiles, plans,
CLI."""
from __future__ import annotations

import json
import re
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("h5py")
from click.testing import CliRunner  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fabric import trace as T  # noqa: E402
from fabric.capture import capture, chip_names, load_chip  # noqa: E402
from fabric.capture.chips import ChipProfile  # noqa: E402
from fabric.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KB, MB = 1e3, 1e6


@pytest.fixture(scope="module")
def ds64():
    return capture("deepseek-r1", tp=64, batch=1, context=4096, chip="sd200-accelerator")


def _layer(tr, layer, rank=0):
    t = tr.ops[rank]
    sel = np.nonzero(t.layer == layer)[0]
    return {str(t.name[i]): i for i in sel}, t


# ---------------------------------------------------- DeepSeek-R1 TP64 (docs/sources.md §Decode step)

def test_deepseek_tp64_collectives(ds64):
    s = T.summary(ds64)
    assert s["ranks"] == 64
    assert s["collectives"] == [dict(kind="allgather", bytes=4040, count_per_rank=[1] * 64),
                                dict(kind="allreduce", bytes=14336, count_per_rank=[123] * 64)]


# (op name in the trace, docs/sources.md §Decode step row: MFLOP, bytes)
MOE_ROWS = [("qkv_a_proj", 30.3, 30.3 * MB), ("q_b_proj", 1.18, 1.18 * MB), ("w_uk", 0.26, 0.26 * MB),
            ("attention", 17.8, 4.72 * MB), ("w_uv", 0.26, 0.26 * MB), ("o_proj", 3.67, 3.67 * MB),
            ("moe_gate", 3.67, 3.67 * MB), ("experts_gate_up", 7.34, 7.34 * MB), ("experts_down", 3.67, 3.67 * MB)]


def test_deepseek_moe_layer_matches_reference(ds64):
    names, t = _layer(ds64, 10)
    for name, mflop, nbytes in MOE_ROWS:
        i = names[name]
        assert t.flops[i] / 1e6 == pytest.approx(mflop, rel=0.05), name
        assert t.bytes[i] == pytest.approx(nbytes, rel=0.05), name
    shared = t.bytes[names["shared_gate_up"]] + t.bytes[names["shared_down"]]
    assert shared == pytest.approx(1.38 * MB, rel=0.05)
    assert t.bytes[names["q_a_norm"]] + t.bytes[names["kv_a_norm"]] == pytest.approx(12 * KB, rel=0.05)
    assert t.bytes[names["post_norm"]] == pytest.approx(71 * KB, rel=0.05)
    idx = list(names.values())
    comp = [i for i in idx if t.kind[i] == T.KIND_COMPUTE]
    assert t.flops[comp].sum() / 1e6 == pytest.approx(69.6, rel=0.05)
    assert t.bytes[comp].sum() == pytest.approx(56.5 * MB, rel=0.05)
    colls = [(str(t.name[i]), int(t.coll_bytes[i])) for i in idx if t.kind[i] == T.KIND_COLLECTIVE]
    assert colls == [("o_proj.allreduce", 14336), ("moe_combine.allreduce", 14336)]
    # the all-reduce comes right after the row-parallel o_proj, and after routed + shared are summed
    order = [str(t.name[i]) for i in idx]
    assert order[order.index("o_proj") + 1] == "o_proj.allreduce"
    assert order[order.index("moe_combine") + 1] == "moe_combine.allreduce"


def test_deepseek_dense_layer_and_head(ds64):
    names, t = _layer(ds64, 1)
    assert t.bytes[names["gate_up_proj"]] == pytest.approx(7168 * 576 * 2, rel=0.01)
    assert t.bytes[names["down_proj"]] == pytest.approx(288 * 7168 * 2, rel=0.01)
    assert sum(t.kind[i] == T.KIND_COLLECTIVE for i in names.values()) == 2  # after o_proj and after down_proj
    names, t = _layer(ds64, -1)
    assert t.bytes[names["lm_head"]] == pytest.approx(7168 * 2020 * 2, rel=0.01)
    assert int(t.coll_bytes[names["lm_head.allgather"]]) == 4040
    assert int(t.coll_bytes[names["embed.allreduce"]]) == 14336


def test_deepseek_per_token_totals(ds64):
    t = ds64.ops[0]
    assert t.flops.sum() / 1e9 == pytest.approx(4.3, rel=0.05)
    assert t.bytes.sum() / 1e9 == pytest.approx(3.5, rel=0.05)
    fp8 = capture("deepseek-r1", tp=64, weight_dtype="fp8")
    assert fp8.ops[0].bytes.sum() / 1e9 == pytest.approx(2.0, rel=0.10)


def test_deepseek_compute_split_is_plausible(ds64):
    """docs/sources.md §Decode step [E]: ~3-5 ms memory time + ~3-4 ms fixed kernel cost per token on a ~1.6 TB/s
    accelerator. The fixed cost per kernel is calibrated on the published TPOT (docs/calibration.md: 4.2 us, ~5 ms
    per token, above that rough split); the memory time is a priori."""
    chip = load_chip("sd200-accelerator")
    t = ds64.ops[0]
    comp = t.kind == T.KIND_COMPUTE
    fixed = comp.sum() * chip.per_kernel_ns / 1e6
    total = t.duration_ns[comp].sum() / 1e6
    assert 2.5 <= fixed <= 5.5
    assert 3.0 <= total - fixed <= 5.0
    main_stream = t.duration_ns[comp & (t.stream == 0)].sum() / 1e6
    assert main_stream < 8.9  # the serial stream leaves room for communication within the measured TPOT


def test_multi_stream_overlap(ds64):
    """Shared expert on the main stream, router + routed experts on the alternate stream; kv_a norm on stream 1."""
    names, t = _layer(ds64, 10)
    s1 = sorted(str(t.name[i]) for i in names.values() if t.stream[i] == 1)
    assert s1 == sorted(["kv_a_norm", "moe_gate", "moe_topk", "experts_gate_up", "experts_act", "experts_down"])
    fork = names["post_norm"]
    assert t.deps(names["moe_gate"]).tolist() == [fork]
    assert t.deps(names["shared_gate_up"]).tolist() == [fork]
    assert sorted(t.deps(names["moe_combine"]).tolist()) == sorted([names["experts_down"], names["shared_down"]])


# ---------------------------------------------------------------- other models and plans

@pytest.mark.parametrize("model,tp,n_ar,ar_bytes,ag_bytes", [
    ("llama-3-70b", 8, 161, 16384, 128256 // 8 * 2),
    ("qwen3-235b-a22b", 8, 189, 8192, 151936 // 8 * 2),
    ("kimi-k2", 64, 123, 14336, 163840 // 64 * 2),
])
def test_models_tensor_parallel(model, tp, n_ar, ar_bytes, ag_bytes):
    tr = capture(model, tp=tp)
    s = T.summary(tr)
    assert s["collectives"] == [dict(kind="allgather", bytes=ag_bytes, count_per_rank=[1] * tp),
                                dict(kind="allreduce", bytes=ar_bytes, count_per_rank=[n_ar] * tp)]


def test_llama_attention_bytes():
    tr = capture("llama-3-70b", tp=8, context=4096)
    names, t = _layer(tr, 3)
    # one kv head per rank: 4097 tokens x (k + v) x 128 x 2 B
    assert t.bytes[names["attention"]] == pytest.approx(4097 * 2 * 128 * 2, rel=0.01)
    assert t.bytes[names["qkv_proj"]] == pytest.approx(8192 * (8 + 2) * 128 * 2, rel=0.01)


def test_tp_ep_alltoall():
    tr = capture("deepseek-r1", tp=8, ep=8, batch=1, context=4096)
    s = T.summary(tr)
    kinds = {(c["kind"], c["bytes"]): c["count_per_rank"] for c in s["collectives"]}
    assert kinds[("alltoall", 7392)] == [58] * 8       # FP8 dispatch: 7168 B + 56 fp32 scales, one token per peer
    assert kinds[("alltoall", 14336)] == [58] * 8      # BF16 combine
    assert kinds[("allreduce", 14336)] == [3 * 2 + 58 + 1] * 8
    assert kinds[("allgather", 14336)] == [58] * 8
    expert_bytes = [t.bytes[t.name == "experts_gate_up"].sum() for t in tr.ops]
    assert len(set(expert_bytes)) > 1                 # routing makes ranks differ
    # 8 experts per token x 58 MoE layers, each expert 7168 x 4096 BF16 for gate_up
    assert sum(expert_bytes) == pytest.approx(58 * 8 * 7168 * 4096 * 2, rel=0.02)


@pytest.mark.parametrize("kw", [dict(model="deepseek-r1", tp=8, ep=32, batch=4),
                                dict(model="kimi-k2", tp=4, ep=16, batch=8, weight_dtype="fp8"),
                                dict(model="qwen3-235b-a22b", tp=4, ep=16, batch=2, cost_model="shape"),
                                dict(model="deepseek-r1", tp=16, ep=16, dispatch_dtype="bf16")])
def test_expert_parallel_ranks_equal_their_op_by_op_build(monkeypatch, kw):
    """Ranks 1.. of an expert-parallel step are derived from rank 0's table (plan.lower's rank_table): every
    column of every rank equals building that rank op by op (dp = ep/tp tp groups, shape and roofline costs)."""
    import functools

    import fabric.capture as cap
    from fabric.capture import plan as plan_mod
    fast = capture(**kw)
    monkeypatch.setattr(cap, "lower", functools.partial(plan_mod.lower, each_rank_built=True))
    ref = capture(**kw)
    assert fast.n_ranks == ref.n_ranks == kw["ep"] and fast.meta == ref.meta
    assert len({int(t.group.max()) for t in fast.ops}) == max(kw["ep"] // kw["tp"], 1)
    for r, (a, b) in enumerate(zip(fast.ops, ref.ops)):
        for c in T.COLUMNS:
            assert np.array_equal(getattr(a, c), getattr(b, c)), (r, c)


def test_tp8_ep64_replicas():
    tr = capture("deepseek-r1", tp=8, ep=64, batch=8)
    assert tr.n_ranks == 64 and len(tr.groups) == 9
    assert tr.meta["plan"]["dp"] == 8


def test_plan_errors():
    with pytest.raises(ConfigError, match="must divide the 128 attention heads"):
        capture("deepseek-r1", tp=6)
    with pytest.raises(ConfigError, match="multiple of --tp"):
        capture("deepseek-r1", tp=8, ep=12)
    with pytest.raises(ConfigError, match="needs a mixture-of-experts"):
        capture("llama-3-70b", tp=8, ep=8)
    with pytest.raises(ConfigError, match="unknown model"):
        capture("gpt-5", tp=8)
    with pytest.raises(ConfigError, match="exactly one"):
        capture(tp=8)


def test_hf_config_equals_builtin(tmp_path):
    from fabric.capture.spec import builtin_config
    p = tmp_path / "config.json"
    p.write_text(json.dumps(builtin_config("qwen3-235b-a22b")))
    a = capture(hf_config=str(p), tp=8)
    b = capture("qwen3-235b-a22b", tp=8)
    assert a.ops[0].same_as(b.ops[0])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "gpt2", "hidden_size": 8}))
    with pytest.raises(ConfigError, match="model_type 'gpt2' is not supported"):
        capture(hf_config=str(bad), tp=1)
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    with pytest.raises(ConfigError, match="missing 'num_hidden_layers'"):
        capture(hf_config=str(bad), tp=1)


def test_full_671b_capture_time_and_memory():
    tracemalloc.start()
    t0 = time.perf_counter()
    tr = capture("deepseek-r1", tp=64)
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert dt < 30 and peak < 2e9
    assert len(tr.ops[0]) > 1000


# ---------------------------------------------------------------- chip profiles

GEMV = [(7168, 2112, 13.5), (7168, 576, 7.8), (256, 7168, 3.7), (7168, 4096, 20.0), (7168, 129280, 408.0)]


@pytest.mark.parametrize("k,n,us", GEMV)
def test_h200_reproduces_gemv_table(k, n, us):
    chip = load_chip("h200")
    t = chip.kernel_time_ns(2.0 * k * n, k * n * 2 + (k + n) * 2, "bf16") / 1e3
    assert t == pytest.approx(us, rel=0.20)


def test_h200_tiny_kernel():
    assert load_chip("h200").kernel_time_ns(0, 64) / 1e3 == pytest.approx(0.95, rel=0.20)


def test_chip_profiles_documented():
    assert {"h200", "h100", "sd200-accelerator"} <= set(chip_names())
    for name in chip_names():
        chip = load_chip(name)
        assert isinstance(chip, ChipProfile) and chip.hbm_gbps > 0 and chip.fixed_kernel_ns > 0
        text = (ROOT / "fabric" / "capture" / "chips" / f"{name}.toml").read_text()
        for line in text.splitlines():
            if re.match(r"^\s*[a-z0-9_]+\s*=\s*[-0-9.tf]", line):  # numeric and boolean parameters
                assert "#" in line, f"{name}: undocumented parameter line {line!r}"
    sd = load_chip("sd200-accelerator")
    assert 1000 <= sd.hbm_gbps <= 1700
    assert sd.reduce_time_ns(14336, 64, fused=False) > sd.fixed_kernel_ns
    assert sd.reduce_time_ns(14336, 64) < sd.fixed_kernel_ns  # fused into the communication kernel


def test_chip_errors(tmp_path):
    with pytest.raises(ConfigError, match="did you mean h200"):
        load_chip("h2000")
    p = tmp_path / "c.toml"
    p.write_text("[hbm]\ngbps = -1\n")
    with pytest.raises(ConfigError):
        load_chip(str(p))


# ---------------------------------------------------------------- shipped traces and CLI

def test_shipped_traces_valid_and_current():
    import importlib.util
    spec = importlib.util.spec_from_file_location("capture_traces", ROOT / "tools" / "capture_traces.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for path, args in mod.TRACES.items():
        shipped = T.read(ROOT / path)
        fresh = capture(**args)
        assert all(a.same_as(b) for a, b in zip(shipped.ops, fresh.ops)), path
        assert Path(path).name in (ROOT / "traces" / "README.md").read_text()


def test_cli_capture(tmp_path):
    from fabric.cli.capture import main
    out = tmp_path / "t.h5"
    res = CliRunner().invoke(main, ["--model", "toy-mla", "--tp", "8", "--context", "128", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert T.read(out).n_ranks == 8
    for args in (["--model", "nope", "--tp", "8", "-o", str(out)], ["--model", "toy-mla", "--tp", "3", "-o", str(out)],
                 ["--hf-config", str(tmp_path / "missing.json"), "--tp", "8", "-o", str(out)],
                 ["--model", "toy-mla", "--tp", "8", "--chip", "tpu9", "-o", str(out)]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.output.startswith("error: ") and res.output.count("\n") == 1


def _route_fresh(spec, layer, n, seed):
    """route's draw from a new generator (what it returned before its draws were kept per layer)."""
    rng = np.random.default_rng([seed, layer, 0x5EED])
    per = spec.n_experts // max(spec.n_group, 1)
    out = np.empty((n, spec.topk), np.int64)
    for t in range(n):
        groups = rng.choice(max(spec.n_group, 1), size=max(spec.topk_group, 1), replace=False)
        out[t] = np.sort(rng.choice((groups[:, None] * per + np.arange(per)[None, :]).ravel(), size=spec.topk,
                                    replace=False))
    return out


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=5), st.integers(0, 3), st.integers(0, 2))
def test_route_kept_draws_equal_a_fresh_draw_in_any_order(sizes, layer, seed):
    from fabric.capture.plan import route
    from fabric.capture.spec import builtin_config, spec_from_config
    spec = spec_from_config(builtin_config("deepseek-r1"), "deepseek-r1")
    for n in sizes:
        got = route(spec, layer, n, seed)
        assert np.array_equal(got, _route_fresh(spec, layer, n, seed))
        got[...] = -1                   # the caller's copy: the kept draws are not touched
    assert np.array_equal(route(spec, layer, max(sizes), seed), _route_fresh(spec, layer, max(sizes), seed))
