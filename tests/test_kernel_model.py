"""Shape-aware kernel model (fabric/capture/kernels.py): calibration on the measured H200 GEMVs, leave-one-out,
wave quantisation, split-K and split-KV, launch modes, capture with cost_model="shape", `fabric-probe kernel`."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from fabric.capture import calibrate, load_chip
from fabric.capture.kernels import OPS, predict
from fabric.errors import ConfigError


@pytest.fixture(scope="module")
def h200():
    return load_chip("h200")


# ---------------------------------------------------------------- calibration (docs/compute-model.md)

@pytest.mark.parametrize("k,n,us", calibrate.H200_GEMV)
def test_h200_gemv_rows_within_20_percent(h200, k, n, us):
    r = predict(h200, "linear", shape=(k, n), tokens=1, dtype="bf16", launch="graph")
    assert r["time_us"] == pytest.approx(us, rel=0.20)


def test_h200_fit_is_tight_and_matches_profile(h200):
    """The shipped constants are the fit's (so docs and profile cannot drift) and the fit is within 5 %."""
    f = calibrate.fit(h200)
    assert max(abs(e) for e in f["errors"]) < 0.05
    assert h200.kernels.sm_gbps == pytest.approx(f["sm_gbps"], rel=0.01)
    assert h200.kernels.bw_eta == pytest.approx(f["bw_eta"], rel=0.01)


def test_calibration_equations_match_predict(h200):
    """calibrate._times (vectorised, used by the fit) and kernels.predict are the same model."""
    kp = h200.kernels
    t = calibrate._times(h200, calibrate.H200_GEMV, kp.sm_gbps, kp.bw_eta)
    for (k, n, _), ti in zip(calibrate.H200_GEMV, t):
        assert predict(h200, "linear", shape=(k, n))["time_us"] == pytest.approx(float(ti), rel=1e-9)


def test_leave_one_out_within_20_percent(h200):
    """Each row predicted by a fit on the other four (the held-back errors docs/compute-model.md reports)."""
    loo = calibrate.leave_one_out(h200)
    errs = [r["error"] for r in loo]
    assert max(abs(e) for e in errs) < 0.20, errs
    # the 1.85 GB row is the only one that pins the HBM ceiling: it has the largest held-back error
    assert abs(errs[-1]) == max(abs(e) for e in errs)


def test_tiny_kernel_is_the_measured_launch_cost(h200):
    assert predict(h200, "elementwise", shape=(1,))["time_us"] == pytest.approx(calibrate.H200_TINY_KERNEL_US,
                                                                                rel=0.05)


# ---------------------------------------------------------------- shape, not only bytes

def test_same_bytes_different_shape(h200):
    """7168x576 and 576x7168 move the same bytes and flops; the long-K one has few CTAs with long serial streams."""
    a = predict(h200, "linear", shape=(7168, 576))
    b = predict(h200, "linear", shape=(576, 7168))
    assert a["bytes"] == pytest.approx(b["bytes"]) and a["flops"] == b["flops"]
    assert a["time_ns"] > 1.3 * b["time_ns"]
    assert a["regime"] == "latency"
    # the roofline model cannot tell them apart
    assert h200.kernel_time_ns(a["flops"], a["bytes"]) == pytest.approx(h200.kernel_time_ns(b["flops"], b["bytes"]))


def _one_tile(chip):
    """The chip with a single GEMM tile (no narrower N tile to choose)."""
    return dataclasses.replace(chip, kernels=dataclasses.replace(chip.kernels,
                                                                 gemm_tile_n_min=chip.kernels.gemm_tile_n))


def test_wave_quantisation_step_function(h200):
    """A compute-bound GEMM with one tile shape: time is flat while the CTAs fit the same number of waves and jumps
    by one wave's time when N adds a wave."""
    fixed = _one_tile(h200)
    times, waves = [], []
    for n in range(128 * 8, 128 * 48, 128):
        r = predict(fixed, "linear", shape=(8192, n), tokens=4096)
        assert r["regime"] == "compute"
        times.append(r["time_ns"])
        waves.append(r["waves"])
    times, waves = np.array(times), np.array(waves)
    assert (np.diff(times) >= -1e-6).all()
    for w in np.unique(waves):
        assert np.ptp(times[waves == w]) < 1e-6 * times[waves == w].max()    # flat within a wave count
    steps = np.diff(times)[np.diff(waves) > 0]
    assert len(steps) >= 3 and (steps > 0.05 * times.min()).all()          # and a jump at every new wave


def test_tile_choice_fills_the_last_wave(h200):
    """The N tile is chosen for the fewest waves, then the fullest last wave: never slower than the one 128-wide
    tile, faster where that tile leaves units idle, and still monotone in N."""
    fixed = _one_tile(h200)
    times = []
    for n in range(128 * 8, 128 * 48, 128):
        r, f = predict(h200, "linear", shape=(8192, n), tokens=4096), predict(fixed, "linear", shape=(8192, n),
                                                                              tokens=4096)
        assert r["time_ns"] <= f["time_ns"] * (1 + 1e-9)
        times.append(r["time_ns"])
    assert (np.diff(times) >= -1e-6 * max(times)).all()
    # 4096 x 2112: 128-wide tiles make 5 waves with 16 CTAs in the last; a narrower tile fills it
    r, f = predict(h200, "linear", shape=(7168, 2112), tokens=4096), predict(fixed, "linear", shape=(7168, 2112),
                                                                             tokens=4096)
    assert r["tile"][1] < 128 and r["waves"] == f["waves"] and r["time_ns"] < 0.9 * f["time_ns"]
    # a batch-16 GEMM whose 96 128-wide tiles leave 36 units idle takes a narrower tile (128 CTAs), not split-K
    r = predict(h200, "linear", shape=(5376, 12288), tokens=16)
    assert r["tile"][1] < 128 and r["ctas"] == 128 and r["split"] == 1


def test_gemm_epilogue_follows_the_main_loop(h200):
    """A short-K GEMM with a large output: the tile's store after its main loop is part of the compute time (the
    DeepGEMM 4096 x 32768 x 512 shape runs at half its MMA rate)."""
    r = predict(h200, "linear", shape=(512, 32768), tokens=4096, dtype="fp8")
    mma = r["flops"] / (h200.peak_tflops["fp8"] * 1e3 * h200.eta_c_max)
    assert r["regime"] == "compute" and r["compute_ns"] > 1.7 * mma


def test_split_k_and_reduce_kernel(h200):
    r = predict(h200, "linear", shape=(7168, 256))
    assert r["split"] > 1 and r["kernels"] == 2 and r["extra"][0]["name"] == "splitk_reduce"
    fused = predict(h200, "linear", shape=(7168, 256), fused=True)
    assert fused["kernels"] == 1 and fused["time_ns"] < r["time_ns"]
    # a short K is never split
    assert predict(h200, "linear", shape=(256, 256))["split"] == 1


def test_gemv_vs_tokens(h200):
    """More tokens read the same weights: a GEMV's time grows far slower than its flops."""
    t1 = predict(h200, "linear", shape=(7168, 4096), tokens=1)["time_ns"]
    t8 = predict(h200, "linear", shape=(7168, 4096), tokens=8)["time_ns"]
    assert t1 < t8 < 1.5 * t1


def test_attention_split_kv(h200):
    short = predict(h200, "attention", ctx=128, heads=2, kv_heads=1, head_dim=512, rope=64)
    long = predict(h200, "attention", ctx=32768, heads=2, kv_heads=1, head_dim=512, rope=64)
    assert short["split"] == 2 and long["split"] == h200.kernels.sms
    assert long["kernels"] == 2 and long["extra"][0]["name"] == "splitkv_combine"
    assert long["time_ns"] > short["time_ns"]
    # GQA: the (sequence, KV head) pairs are split along the KV only as far as needed to fill the chip
    some = predict(h200, "attention", tokens=4, ctx=4096, heads=8, kv_heads=8, head_dim=128)
    assert some["split"] == 5 and some["ctas"] == 4 * 8 * 5
    busy = predict(h200, "attention", tokens=64, ctx=4096, heads=8, kv_heads=8, head_dim=128)
    assert busy["split"] == 1 and busy["ctas"] == 64 * 8 and busy["kernels"] == 1


def test_small_kernels(h200):
    for op, shape in (("norm", (7168,)), ("softmax", (256,)), ("topk", (256,)), ("elementwise", (7168,)),
                      ("copy", (7168,)), ("embedding", (7168,))):
        r = predict(h200, op, shape=shape)
        assert 0.95 <= r["time_us"] < 5.0, (op, r["time_us"])
    assert predict(h200, "norm", shape=(7168,), tokens=256)["time_ns"] > predict(h200, "norm", shape=(7168,))[
        "time_ns"]


def test_launch_modes(h200):
    kp = h200.kernels
    g = predict(h200, "linear", shape=(7168, 2112), launch="graph")
    q = predict(h200, "linear", shape=(7168, 2112), launch="queue")
    e = predict(h200, "linear", shape=(7168, 2112), launch="eager")
    assert q["time_ns"] - g["time_ns"] == pytest.approx(kp.launch_ns["queue"] - kp.launch_ns["graph"])
    assert e["time_ns"] >= q["time_ns"]
    tiny = predict(h200, "elementwise", shape=(1,), launch="eager")
    assert tiny["time_ns"] == pytest.approx(kp.launch_ns["eager"])            # the host is the bottleneck
    assert tiny["regime"] == "launch"
    assert predict(h200, "linear", shape=(7168, 2112))["launch"] == kp.launch_mode == "graph"
    assert load_chip("sd200-accelerator").kernels.launch_mode == "queue"


def test_dtypes(h200):
    b = predict(h200, "linear", shape=(7168, 4096), dtype="bf16")
    f = predict(h200, "linear", shape=(7168, 4096), dtype="fp8")
    i4 = predict(h200, "linear", shape=(7168, 4096), dtype="int4")
    assert i4["time_ns"] < f["time_ns"] < b["time_ns"]
    assert f["bytes"] < 0.51 * b["bytes"] + 1e5


def test_bad_inputs(h200, tmp_path):
    with pytest.raises(ConfigError, match="unknown op"):
        predict(h200, "conv", shape=(1, 2))
    with pytest.raises(ConfigError, match="2 dimensions"):
        predict(h200, "linear", shape=(7168,))
    with pytest.raises(ConfigError, match="launch mode"):
        predict(h200, "linear", shape=(1, 2), launch="warp")
    with pytest.raises(ConfigError, match="not supported"):
        predict(h200, "linear", shape=(1, 2), dtype="fp4")
    with pytest.raises(ConfigError, match="no \\[kernels\\] section"):
        predict(dataclasses.replace(h200, kernels=None), "linear", shape=(1, 2))
    text = (calibrate.__file__.rsplit("/", 1)[0] + "/chips/h200.toml")
    body = open(text).read()
    p = tmp_path / "c.toml"
    p.write_text(body.replace('splitk_reduce = "kernel"', 'splitk_reduce = "maybe"'))
    with pytest.raises(ConfigError, match="splitk_reduce"):
        load_chip(str(p))
    p.write_text(body.replace("[launch]", "[launch_off]"))
    with pytest.raises(ConfigError, match="\\[launch\\]"):
        load_chip(str(p))
    p.write_text(body.replace("sms = 132", "sms = 13.5"))
    with pytest.raises(ConfigError, match="integer"):
        load_chip(str(p))


def test_every_profile_has_the_model():
    from fabric.capture import chip_names
    for name in chip_names():
        chip = load_chip(name)
        assert chip.kernels is not None and chip.kernels.sms >= 1 and chip.memory_gib > 0
        r = predict(chip, "linear", shape=(7168, 2112))
        assert r["time_us"] > chip.kernels.launch_ns[chip.kernels.launch_mode] / 1e3


# ---------------------------------------------------------------- capture

def test_capture_shape_model_opt_in():
    from fabric import trace as T
    from fabric.capture import capture
    base = capture("toy-mla", tp=8, context=128, chip="h200")
    again = capture("toy-mla", tp=8, context=128, chip="h200", cost_model="roofline")
    assert base.ops[0].same_as(again.ops[0]) and "cost_model" not in base.meta["plan"]
    shape = capture("toy-mla", tp=8, context=128, chip="h200", cost_model="shape")
    eager = capture("toy-mla", tp=8, context=128, chip="h200", cost_model="shape", launch="eager")
    assert shape.meta["plan"]["cost_model"] == "shape" and shape.meta["plan"]["launch"] == "graph"
    t = shape.ops[0]
    comp = t.kind == T.KIND_COMPUTE
    assert (t.duration_ns[comp] >= 950.0).all()
    assert (eager.ops[0].duration_ns[comp] >= 6000.0).all()
    assert (t.flops == base.ops[0].flops).all() and (t.bytes == base.ops[0].bytes).all()   # only durations differ
    with pytest.raises(ConfigError, match="cost model"):
        capture("toy-mla", tp=8, context=128, cost_model="exact")


def test_capture_shape_model_ep_and_speed():
    import time
    from fabric.capture import capture
    t0 = time.perf_counter()
    capture("deepseek-r1", tp=64, chip="h200", cost_model="shape")
    assert time.perf_counter() - t0 < 1.0
    tr = capture("toy-mla", tp=2, ep=8, batch=4, context=64, chip="h200", cost_model="shape")
    assert tr.n_ranks == 8


# ---------------------------------------------------------------- fabric-probe kernel

def test_cli_probe_kernel(tmp_path):
    from fabric.cli.probe_kernel import OPS as CLI_OPS
    from fabric.cli.probe_kernel import kernel_cmd
    assert tuple(CLI_OPS) == tuple(OPS)
    out = tmp_path / "k.json"
    res = CliRunner().invoke(kernel_cmd, ["--chip", "h200", "--op", "linear", "--shape", "7168,2112", "--tokens", "1",
                                          "--dtype", "bf16", "--launch", "graph", "--json", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    assert d["time_us"] == pytest.approx(13.5, rel=0.2)
    assert {"compute_ns", "memory_ns", "fixed_ns", "regime"} <= set(d)
    assert f"{d['time_us']:.2f} us" in res.output and "bandwidth" in res.output
    res = CliRunner().invoke(kernel_cmd, ["--op", "attention", "--ctx", "4097", "--heads", "2", "--head-dim", "512",
                                          "--rope", "64"])
    assert res.exit_code == 0 and "splitkv_combine" in res.output
    for args in (["--shape", "7168,abc"], ["--shape", "7168"], ["--chip", "h2000", "--shape", "1,2"],
                 ["--shape", "1,2", "--dtype", "fp4"], ["--shape", "1,2", "--launch", "warp"], ["--op", "norm"],
                 ["--shape", "0,5"], ["--shape", "1,2", "--json", str(tmp_path / "no" / "x.json")],
                 ["--shape", "1,2", "--tokens", "0"]):
        res = CliRunner().invoke(kernel_cmd, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.output.startswith("error: ") and res.output.count("\n") == 1, (args, res.output)


def test_cli_probe_prefill_grouped_and_inputs(tmp_path):
    """Issue 32's probe options: causal prefill attention (--phase prefill --tokens N --ctx N), grouped GEMMs by
    --tokens-per-group, and --inputs l2 for a small kernel; each bad value one line, exit 2."""
    from fabric.cli.probe_kernel import kernel_cmd
    out = tmp_path / "p.json"
    res = CliRunner().invoke(kernel_cmd, ["--op", "attention", "--phase", "prefill", "--tokens", "4096", "--ctx",
                                          "4096", "--heads", "16", "--kv-heads", "16", "--json", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    assert d["path"] == "flash-prefill" and d["regime"] == "compute" and "causal prefill" in res.output
    # causal over a 4096-token prompt from position 0: the mean query sees (4096 + 1) / 2 keys
    assert d["flops"] == pytest.approx(2.0 * 4096 * 16 * 2048.5 * 256)
    # a longer prefix costs more than the prompt alone, and two sequences of half the prompt less
    longer = predict(load_chip("h200"), "attention", phase="prefill", tokens=4096, ctx=8192, heads=16, kv_heads=16)
    split = predict(load_chip("h200"), "attention", phase="prefill", tokens=4096, ctx=2048, seqs=2, heads=16,
                    kv_heads=16)
    assert longer["time_ns"] > 1.5 * d["time_ns"] > 1.5 * split["time_ns"]
    res = CliRunner().invoke(kernel_cmd, ["--op", "grouped", "--shape", "7168,4096", "--groups", "8",
                                          "--tokens-per-group", "2048", "--dtype", "fp8", "--json", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    assert d["tokens"] == 2048 and d["flops"] == 2.0 * 8 * 2048 * 7168 * 4096 and d["regime"] == "compute"
    hbm = predict(load_chip("h200"), "norm", shape=(7168,))
    res = CliRunner().invoke(kernel_cmd, ["--op", "norm", "--shape", "7168", "--inputs", "l2", "--json", str(out)])
    assert res.exit_code == 0 and json.loads(out.read_text())["time_ns"] < hbm["time_ns"]
    for args in (["--op", "attention", "--phase", "prefill", "--tokens", "4096", "--ctx", "100"],
                 ["--op", "attention", "--phase", "prefill", "--tokens", "4096", "--seqs", "3", "--ctx", "8192"],
                 ["--op", "attention", "--phase", "prefill", "--seqs", "0"],
                 ["--op", "linear", "--shape", "7,7", "--tokens-per-group", "4"],
                 ["--op", "grouped", "--shape", "7,7", "--tokens-per-group", "0"],
                 ["--op", "norm", "--shape", "7", "--inputs", "l3"], ["--op", "attention", "--phase", "append"]):
        res = CliRunner().invoke(kernel_cmd, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.output.startswith("error: ") and res.output.count("\n") == 1, (args, res.output)


def test_small_kernel_inputs_in_l2_only_where_a_cache_is_modelled():
    """A decode step's norms read the residual stream from L2 on h200 (faster than from HBM) but not on
    sd200-accelerator, which models no cache (its calibrated TPOT stays as it was)."""
    from fabric.capture import resolve_model
    from fabric.capture.graph import analytic_graph
    from fabric.capture.kernels import logical_op_time
    from fabric.capture.spec import spec_from_config
    spec = spec_from_config(resolve_model("deepseek-r1")[1], "deepseek-r1")
    norm = next(op for op in analytic_graph(spec, 4096) if op.op == "norm")
    for name, faster in (("h200", True), ("sd200-accelerator", False)):
        chip = load_chip(name)
        got = logical_op_time(chip, norm, 64, 1, "bf16")["time_ns"]
        no_l2 = logical_op_time(dataclasses.replace(chip, kernels=dataclasses.replace(chip.kernels, l2_mib=0.0)),
                                norm, 64, 1, "bf16")["time_ns"]
        assert (got < no_l2) == faster and got <= no_l2, name


def _with(chip, **kw):
    return dataclasses.replace(chip, kernels=dataclasses.replace(chip.kernels, **kw))


def test_reductions_cost_their_chain_of_exchanges(h200):
    """A rows kernel's reductions add exchanges x exchange_ns to its body (docs/compute-model.md §Small kernels): a
    norm over one warp (128 values: 16 threads of one 16-byte vector) one warp reduce (5), a wider norm the two-level
    block reduce (14), a softmax two of them, a top-k 2k + 1 warp reductions; an elementwise kernel none."""
    from fabric.capture.kernels import norm_exchanges, topk_exchanges
    x = h200.kernels.exchange_ns
    assert x > 0
    free = _with(h200, exchange_ns=0.0)
    for op, shape, n in (("norm", (128,), 5), ("norm", (7168,), 14), ("softmax", (7168,), 28),
                         ("topk", (256,), 17 * 5), ("elementwise", (7168,), 0)):
        got, base = (predict(c, op, shape=shape, tokens=4, inputs="l2") for c in (h200, free))
        assert got["sync_ns"] == pytest.approx(n * x), op
        assert got["time_ns"] - base["time_ns"] == pytest.approx(n * x), op
    # k selection rounds each a max then an index; group-limited routing adds the groups' top two and their rounds
    assert topk_exchanges(256, 8) == 17 * 5 and topk_exchanges(256, 4) == 9 * 5
    assert topk_exchanges(256, 8, n_group=8, topk_group=4) == (17 + 2 + 8) * 5
    assert topk_exchanges(2048, 8) == 17 * 14                  # beyond one warp's 16 scores a lane: block reduces
    assert norm_exchanges(256) == 5 and norm_exchanges(264) == 14
    with pytest.raises(ConfigError, match="--topk"):
        predict(h200, "topk", shape=(16,), topk=17)


def test_l2_resident_small_kernel_is_bounded_by_the_l2_not_the_hbm(h200):
    """An L2-resident small kernel streams under the L2's measured ceiling (l2_gbps, ~3x the HBM's): from L2 its
    memory time is max(one unit's stream, bytes / l2_gbps), never bytes / the HBM ceiling."""
    r = predict(h200, "elementwise", shape=(65536,), tokens=256, inputs="l2")
    kp = h200.kernels
    assert r["memory_ns"] >= r["bytes"] / kp.l2_gbps
    assert r["memory_ns"] < r["bytes"] / (kp.bw_eta * h200.hbm_gbps)
    hbm = predict(h200, "elementwise", shape=(65536,), tokens=256, inputs="hbm")
    assert hbm["memory_ns"] >= hbm["bytes"] / (kp.bw_eta * h200.hbm_gbps)


def test_sd200_accelerator_costs_no_chain():
    """sd200-accelerator's queue_ns was fitted to the published TPOT without a reduction chain: exchange_ns = 0 and no
    L2, so its kernels (and the shipped trace) are what they were."""
    kp = load_chip("sd200-accelerator").kernels
    assert kp.exchange_ns == 0.0 and kp.l2_mib == 0.0


@given(E=st.integers(2, 4096), k=st.integers(1, 16), tokens=st.integers(1, 512), src=st.sampled_from(["l2", "hbm"]))
def test_topk_time_grows_with_its_selection_rounds(E, k, tokens, src):
    """One more expert selected is one more round of two reductions: never cheaper, and exactly that chain more."""
    from fabric.capture.kernels import reduce_exchanges
    h200 = load_chip("h200")
    k = min(k, E - 1)
    a, b = (predict(h200, "topk", shape=(E,), tokens=tokens, topk=kk, inputs=src) for kk in (k, k + 1))
    per_round = 2 * reduce_exchanges(32 if E <= 512 else E // 16) * h200.kernels.exchange_ns
    assert b["sync_ns"] - a["sync_ns"] == pytest.approx(per_round)
    assert b["time_ns"] >= a["time_ns"]


@given(width=st.integers(1, 65536), tokens=st.integers(1, 512), src=st.sampled_from(["l2", "hbm"]))
def test_norm_time_never_falls_as_the_row_widens(width, tokens, src):
    """A wider row is more bytes and, past one warp, the block reduce: its time never falls."""
    h200 = load_chip("h200")
    a, b = (predict(h200, "norm", shape=(w,), tokens=tokens, inputs=src) for w in (width, width + 1))
    assert b["time_ns"] >= a["time_ns"] - 1e-9
