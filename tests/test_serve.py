"""fabric-serve end to end on the real step model: reproducible from a seed, a golden small run, one user on SD200
served at the decode step's own TPOT, and the step model's interpolation against direct simulation."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import fabric.capture
import fabric.serve
from fabric.serve import serve

SMALL = dict(model="toy-mla", preset="sd200", plan="tp=8", requests=40,
             workload="poisson:rate=400,in=uniform:16-96,out=uniform:2-24")
VOLATILE = ("wall_s", "step_model")


def stable(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in VOLATILE}


def test_same_seed_same_results():
    a, b, c = serve(**SMALL, seed=5), serve(**SMALL, seed=5), serve(**SMALL, seed=6)
    assert json.dumps(stable(a), sort_keys=True) == json.dumps(stable(b), sort_keys=True)
    assert stable(a) != stable(c)
    assert a["finished"] == 40 and a["output_tokens"] == int(
        fabric.serve.workload.parse_workload(SMALL["workload"], requests=40, seed=5).output_tokens.sum())


def test_cli_json_has_meta_and_matches_the_api(tmp_path):
    from fabric.cli.serve import main
    out = tmp_path / "r.json"
    tl = tmp_path / "t.json"
    args = ["--model", "toy-mla", "--plan", "tp=8", "--workload", SMALL["workload"], "--requests", "40",
            "--seed", "5", "--json", str(out), "--timeline", str(tl), "--slo-ttft-ms", "5", "--slo-tpot-ms", "1"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "TTFT (ms)" in res.output and "goodput" in res.output
    r = json.loads(out.read_text())
    assert r["meta"]["seed"] == 5 and r["meta"]["config"]["sim"]["seed"] == 5 and r["plan"] == "tp=8"
    api = fabric.serve(**SMALL, seed=5, slo_ttft_ms=5, slo_tpot_ms=1)
    assert r["ttft_ms"] == api["ttft_ms"] and r["goodput_requests_per_s"] == api["goodput_requests_per_s"]
    events = json.loads(tl.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == r["step_records"]


def test_one_user_on_sd200_gets_the_decode_steps_tpot():
    """Batch 1 of DeepSeek-R1 TP64: the served TPOT is the simulated decode step's at that context."""
    from fabric.config import load_config
    from fabric.replay import run_step
    r = fabric.serve(model="deepseek-r1", plan="tp=64", workload="closed:users=1,in=4096,out=33", requests=1,
                     token_budget=512)
    tr = fabric.capture.capture("deepseek-r1", tp=64, batch=1, context=4096 + 16)
    step_us = run_step(tr, load_config("sd200"), engine="analytic").summary["step_us"]
    assert r["tpot_ms"]["p50"] * 1e3 == pytest.approx(step_us, rel=0.005)
    assert r["batch_max"] == 1 and r["preemptions"] == 0


def test_interpolated_steps_match_direct_simulation():
    """Off-grid decode and mixed steps of toy-mla within 3 % of the step captured and simulated as it is."""
    from fabric.capture import load_chip, resolve_model
    from fabric.capture.spec import spec_from_config
    from fabric.config import load_config
    from fabric.serve.plan import parse_plan
    from fabric.serve.stepmodel import StepModel
    spec = spec_from_config(resolve_model("toy-mla")[1], "toy-mla")
    sm = StepModel("toy-mla", None, spec, parse_plan("tp=8"), load_chip("sd200-accelerator"), load_config("sd200"))
    for dec, ctx, pre, prefix in ((3, 700, 0, 0), (24, 2500, 0, 0), (5, 1500, 40, 100), (90, 300, 200, 0)):
        pairs = pre * prefix + pre * (pre + 1) / 2
        got = sm.step(dec + pre, dec * ctx, pairs, prefill=pre, prompts=1 if pre else 0)[0]
        want = sm.direct(dec, ctx, pre, prefix + (pre + 1) / 2, prefix + pre)
        assert got == pytest.approx(want, rel=0.03), (dec, ctx, pre, prefix)


def test_golden_small_run():
    """A small run under KV pressure (10 preemptions) on toy-mla with data-parallel attention: its figures as they
    were when recorded. A change to the scheduler, the step model or the engines moves them; rewrite them in the
    same commit with the reason. (Last: issue 32's compute model, prefill attention as FlashAttention tiles and the
    GEMM N-tile choice with its epilogue: 64 -> 63 steps, 12 -> 10 preemptions, TTFT p50 0.3688 -> 0.3454 ms.)"""
    r = serve(model="toy-mla", plan="attn=dp,ep=8", workload="poisson:rate=100000,in=uniform:20-60,out=uniform:20-60",
              requests=60, seed=11, token_budget=128, max_seqs=16, kv_fraction=1.3e-6)
    assert (r["finished"], r["steps"], r["preemptions"], r["memory"]["kv_tokens_per_group"]) == (60, 63, 10, 450)
    assert r["ttft_ms"]["p50"] == pytest.approx(0.3454098720212941, rel=1e-9)
    assert r["tpot_ms"]["p50"] == pytest.approx(0.18320084814193222, rel=1e-9)
    assert r["output_tokens_per_s"] == pytest.approx(212455.71370548976, rel=1e-9)


@pytest.mark.parametrize("model, tp, n, ctx", [("deepseek-r1", 64, 5, 1000), ("deepseek-r1", 1, 65, 4377),
                                               ("llama-3-70b", 8, 300, 0), ("toy-mla", 8, 7, 2000)])
def test_decode_attention_without_a_capture(model, tp, n, ctx):
    """The step model's decode attention (capture.plan.decode_attention_ns) is the capture's attention rows."""
    from fabric.capture import Plan, capture, load_chip, resolve_model
    from fabric.capture.plan import decode_attention_ns
    from fabric.capture.spec import spec_from_config
    chip = load_chip("sd200-accelerator")
    cols = capture(model, tp=tp, batch=n, context=ctx, chip=chip).ops[0].columns()
    want = cols["duration_ns"][cols["name"].astype(str) == "attention"].sum()
    spec = spec_from_config(resolve_model(model)[1], model)
    got = decode_attention_ns(spec, Plan(tp=tp, batch=n, context=ctx, cost_model=chip.cost_model), chip)
    assert got == pytest.approx(want, rel=1e-12)


def test_least_outstanding_tokens_spreads_load_more_evenly_than_round_robin():
    """Per-group imbalance (busiest over mean) of the KV held, under both balancers: least outstanding tokens holds
    it more even. The tokens served are only reported: which balancer serves them more evenly turns with the step
    times (after issue 32's compute model, least_tokens is the more even on 2 of seeds 1-8, round robin on 6; the KV
    held stays more even under least_tokens on 6 of 8, this seed included)."""
    run = dict(model="toy-mla", plan="attn=dp,ep=8", requests=200, seed=3,
               workload="poisson:rate=2000,in=lognormal:200,1.0,out=uniform:1-40")
    lot, rr = serve(**run, balance="least_tokens")["imbalance"], serve(**run, balance="round_robin")["imbalance"]
    assert lot["tokens_max_over_mean"] >= 1.0 and rr["tokens_max_over_mean"] >= 1.0
    assert 1.0 <= lot["kv_max_over_mean"] < rr["kv_max_over_mean"]
    assert lot["batch_max_over_mean"] >= 1.0 and rr["batch_max_over_mean"] >= 1.0
    assert serve(**dict(run, plan="tp=8", requests=20))["imbalance"] == {}      # one group: nothing to balance
