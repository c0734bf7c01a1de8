"""Disaggregated serving (fabric.serve.disagg): the KV hand-over against the fabric's zero-load bound, every request
served once with its KV moved before it decodes, the bytes moved, and bad pool splits refused in one line."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from click.testing import CliRunner

from fabric.serve.disagg import Handover, couple, serve_disaggregated
from fabric.serve.plan import parse_plan
from fabric.serve.scheduler import Scheduler
from fabric.serve.workload import Workload
from tests.test_serve_scheduler import LinearSteps, workload

TOY = dict(model="toy-mla", prefill="tp=8", decode="attn=dp,ep=8",
           workload="poisson:rate=400,in=uniform:16-96,out=uniform:1-24", requests=40, seed=5)


def test_handover_of_a_4096_token_prompt_meets_the_zero_load_bound():
    """DeepSeek-R1's latent KV of 4,096 tokens from rank 0 to rank 8 (another host domain) on the idle sd200
    fabric: bytes over both ports' payload rate, plus the path's latency (fabric.phy), within 10 %."""
    from fabric import phy
    from fabric.config import load_config
    cfg = load_config("sd200")
    bpt = 61 * (512 + 64) * 2                                     # layers x (kv_lora + rope) x BF16
    h = Handover(cfg, [0], [8], bpt)
    ports = cfg.topology.ports_per_accel
    per_port = 4096 * bpt / ports
    bound_us = phy.wire_bytes(cfg, per_port) * 8 / phy.data_gbps(cfg) / 1e3 + phy.link_latency_ps(cfg) * 5 / 1e6
    got = h.time_us(4096)
    assert got == pytest.approx(h.simulate(4096), rel=1e-3)      # linear between the probed sizes
    assert bound_us <= got <= 1.1 * bound_us


@pytest.mark.parametrize("engine", ["analytic", "packet"])
def test_handover_under_load_takes_longer_than_the_bound(engine):
    """The same hand-over while the other seven ranks of its host domain each send as much to the other domain's
    ranks (an all-to-all crossing the same switch-to-switch links): it shares them and lands later."""
    from fabric.config import load_config
    cfg = load_config("sd200")
    bpt = 61 * (512 + 64) * 2
    h = Handover(cfg, [0], [8], bpt, engine)
    idle = h.simulate(4096)
    src = np.repeat(np.arange(1, 8), 2)
    dst = np.tile([9, 10], 7)
    loaded = h.simulate(4096, background=(src, dst, np.full(len(src), 4096 * bpt // 2)))
    assert idle == pytest.approx(h.time_us(4096), rel=1e-3)
    assert loaded > 1.5 * idle


def test_every_request_served_once_and_decoded_after_its_kv_landed():
    r = serve_disaggregated(**TOY)
    from fabric.serve.workload import parse_workload
    wl = parse_workload(TOY["workload"], requests=40, seed=5)
    assert r["finished"] == 40 and r["output_tokens"] == int(wl.output_tokens.sum())
    moved = wl.output_tokens > 1
    h = r["kv_handover"]
    assert h["requests"] == int(moved.sum())
    assert h["bytes"] == pytest.approx(float((wl.prompt_tokens[moved] * r["memory"]["kv_bytes_per_token"]).sum()))
    hand_ms = (h["fixed_us"] + h["us_per_token"] * wl.prompt_tokens) / 1e3
    e2e, ttft = np.array(r["per_request"]["e2e_ms"]), np.array(r["per_request"]["ttft_ms"])
    assert np.all(e2e[moved] >= ttft[moved] + hand_ms[moved])    # no decode before the KV landed
    assert np.all(e2e[~moved] == ttft[~moved])                    # one token: done at the prefill
    assert r["ranks"] == 16 and r["pools"]["prefill"]["ranks"] == 8


def test_a_layered_handover_lands_between_the_prefill_end_and_the_handover_after_it():
    """Layer by layer, the KV lands no later than after the prefill, and no earlier than the prefill's end plus one
    layer's share of its last chunk; never faster than the fabric moves the whole prompt since the prefill began."""
    from fabric.serve.disagg import Disaggregated
    from fabric.serve.workload import parse_workload
    wl = parse_workload(TOY["workload"], requests=40, seed=5)
    moved = wl.output_tokens > 1
    kw = {k: v for k, v in TOY.items() if k not in ("prefill", "workload", "requests")}
    after = Disaggregated(prefill="tp=8", **kw).serve(TOY["workload"], requests=40)
    layered = Disaggregated(prefill="tp=8,handover=layered", **kw).serve(TOY["workload"], requests=40)
    assert layered["kv_handover"]["mode"] == "layered" and after["kv_handover"]["mode"] == "after"
    assert layered["finished"] == 40 and layered["output_tokens"] == after["output_tokens"]
    assert layered["ttft_ms"] == after["ttft_ms"]                               # the prefill pool is the same
    assert 0 < layered["kv_handover"]["mean_ms"] < after["kv_handover"]["mean_ms"]
    e2e_l, e2e_a = (np.array(r["per_request"]["e2e_ms"]) for r in (layered, after))
    assert np.all(e2e_l[moved] <= e2e_a[moved] + 1e-6) and np.mean(e2e_l[moved]) < np.mean(e2e_a[moved])


def test_handover_belongs_to_the_prefill_plan():
    from fabric.errors import ConfigError
    from fabric.serve.plan import parse_plan
    with pytest.raises(ConfigError, match="give it in --prefill"):
        parse_plan("attn=dp,ep=8,handover=layered", "--decode")
    with pytest.raises(ConfigError, match="after, layered"):
        parse_plan("tp=8,handover=sideways", "--prefill")


def test_disaggregated_run_is_reproducible():
    a, b = serve_disaggregated(**TOY), serve_disaggregated(**TOY)
    assert a["ttft_ms"] == b["ttft_ms"] and a["tpot_ms"] == b["tpot_ms"] and a["kv_handover"] == b["kv_handover"]


@pytest.mark.parametrize("args, message", [
    (["--prefill", "attn=dp,ep=16", "--decode", "attn=dp,ep=16,replicas=4"], "need 80 ranks"),
    (["--prefill", "tp=64"], "needs both --prefill PLAN and --decode PLAN"),
    (["--prefill", "tp=3", "--decode", "tp=8"], "--prefill 'tp=3'"),
])
def test_bad_pool_splits_are_one_line(tmp_path, args, message):
    from fabric.cli.serve import main
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["--model", "toy-mla", "--requests", "4", "--json", str(out), "--quiet"] + args)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.output
    assert not out.exists()


def test_pools_made_once_serve_as_fresh_ones():
    """A Disaggregated deployment serving a second workload gives what a fresh one gives (its step models kept)."""
    from fabric.serve.disagg import Disaggregated
    pools = {k: TOY[k] for k in ("model", "prefill", "decode")}
    kept = Disaggregated(**pools, seed=5)
    kept.serve("poisson:rate=100,in=uniform:16-64,out=uniform:2-8", requests=20)
    again = kept.serve(TOY["workload"], requests=40)
    fresh = serve_disaggregated(**TOY)
    for key in ("ttft_ms", "tpot_ms", "e2e_ms", "kv_handover", "fabric_bytes", "per_request"):
        assert again[key] == fresh[key], key


class Pool(Scheduler):
    """Scheduler checks for a coupled pool: KV never past capacity, held KV counted, nothing decodes early."""

    def _record(self, r, *args):
        for g in self.groups[r]:
            held = [rid for rid, grp in self.held.items() if grp is g]
            assert 0 <= g.kv_used <= g.capacity
            assert g.kv_used == int(self.kv[g.running].sum()) + int(self.kv[held].sum()) + sum(g.cache.values())
        super()._record(r, *args)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 2**16), dec_capacity=st.integers(330, 1200),
       layered=st.booleans(), closed=st.sampled_from([0, 2]), transfer_us=st.sampled_from([1.0, 500.0]))
def test_coupled_pools_serve_every_request_once_under_backpressure(n, seed, dec_capacity, layered, closed,
                                                                   transfer_us):
    """A decode pool with little KV: requests wait for room there, their KV held in the prefill pool meanwhile; no
    request is lost or served twice, none decodes before its KV landed, and no KV cache overflows."""
    wl = workload(n, seed, closed)
    moved = wl.output_tokens > 1
    ps = Pool(dataclasses.replace(wl, output_tokens=np.ones(n, np.int64)), parse_plan("tp=8"), LinearSteps(), 600,
              token_budget=256, max_seqs=8)
    ds = Pool(dataclasses.replace(wl, prefilled=True), parse_plan("attn=dp,ep=2"), LinearSteps(), dec_capacity,
              token_budget=256, max_seqs=8)
    t_us = lambda rid, t: transfer_us                                        # noqa: E731
    streamed = (lambda rid: ps.finish[rid] + 1e-6) if layered else None
    landed = couple(ps, ds, moved, t_us, streamed)
    assert ps.finished == n and ds.finished == int(moved.sum())
    assert (ds.generated[moved] == wl.output_tokens[moved]).all()
    assert not ps.held and all(g.kv_used == 0 for rep in ps.groups + ds.groups for g in rep)
    assert np.isnan(landed[~moved]).all() and (landed[moved] > ps.finish[moved]).all()
    # the second token comes from a decode step that started after the KV landed
    assert (ds.finish[moved] > landed[moved]).all()
    if closed:
        assert (np.diff(np.sort(ps.arrival)) >= 0).all()


def test_a_full_decode_pool_holds_the_prefill_pool_back():
    """One decode group with room for one request at a time: the others wait, their KV in the prefill pool, and
    the prefill pool (room for two prompts) stalls its third prefill until a hand-over frees it."""
    wl = Workload("t", np.zeros(4), np.full(4, 200), np.full(4, 100))
    ps = Scheduler(dataclasses.replace(wl, output_tokens=np.ones(4, np.int64)), parse_plan("tp=8"), LinearSteps(),
                   450, token_budget=1000, max_seqs=8)
    ds = Scheduler(dataclasses.replace(wl, prefilled=True), parse_plan("tp=8"), LinearSteps(), 310,
                   token_budget=1000, max_seqs=8)
    landed = couple(ps, ds, np.ones(4, bool), lambda rid, t: 10.0)
    order = np.argsort(landed)
    assert (np.diff(landed[order]) > 0).all()
    assert (landed[order][1:] >= ds.finish[order][:-1]).all()     # one at a time: each lands after the last left
    assert ps.first[order[2]] > landed[order[0]]                  # the third prefill waited for the first hand-over


def test_handover_links_carry_its_bytes():
    """The packet engine's channel counts: every byte of the hand-over enters the destination over its ports (their
    shares sum to 1) and leaves the sources over theirs; the report scales the shares to the run's bytes."""
    from fabric.config import load_config
    h = Handover(load_config("sd200"), range(8), [8], 61 * (512 + 64) * 2)
    links = h.links()
    into = sum(x["share"] for x in links if x["channel"].endswith(("->acc8", "->acc8#1")))
    out_of = sum(x["share"] for x in links if x["channel"].startswith(tuple(f"acc{r}->" for r in range(8))))
    assert into == pytest.approx(1.0) and out_of == pytest.approx(1.0)
    r = serve_disaggregated(**TOY)
    h = r["kv_handover"]
    assert h["links"] and all(x["gb"] == pytest.approx(x["share"] * h["bytes"] / 1e9) for x in h["links"])


@pytest.mark.parametrize("load", [0.25, 0.6])
def test_handover_slowdown_under_decode_traffic_lies_within_the_engines_outcomes(load):
    """A coupled run slows a hand-over by 1 / (1 - load) where the decode pool's traffic takes `load` of the
    destination rank's ingress (traffic spread evenly over the hand-over). The engines, given that many bytes into the
    same rank from 4 or 8 other ranks, land the hand-over earlier or later depending on who queues first (analytic:
    first come first served; packet: round robin): the fluid estimate lies within their outcomes, and every one of
    them is later than the idle hand-over."""
    from fabric.config import load_config
    cfg = load_config("sd200")
    bpt, tokens = 61 * (512 + 64) * 2, 4096
    other = tokens * bpt * load / (1 - load)                       # bytes into rank 40 from its own pool meanwhile
    outcomes = []
    for engine in ("analytic", "packet"):
        h = Handover(cfg, [0], [40], bpt, engine)
        for src in ([33, 34, 35, 36], [32, 41, 42, 43, 44, 45, 46, 47]):
            k = len(src)
            outcomes.append(h.simulate(tokens, background=(np.array(src), np.full(k, 40), np.full(k, int(other // k)))))
    model = h.base_us + h.slope_us * tokens / (1 - load)
    assert min(outcomes) > h.time_us(tokens) and min(outcomes) <= model <= max(outcomes)


def test_a_busy_decode_pool_slows_the_handover():
    r = serve_disaggregated(**dict(TOY, workload="poisson:rate=2000,in=uniform:200-400,out=uniform:20-40"))
    h = r["kv_handover"]
    assert 1.0 < h["slowdown_mean"] <= h["slowdown_max"] <= 10.0


def test_pd_against_co_located_on_a_small_model():
    """The PD/co-located comparison of docs/serving.md, regression-checked on toy-mla: on the same 16 ranks and
    load, prefills on their own ranks never stall a decode step, so the TPOT tail of PD is below co-located's."""
    import fabric.serve
    load = dict(model="toy-mla", workload="poisson:rate=300,in=uniform:500-2000,out=uniform:20-60", requests=120,
                seed=3)
    colo = fabric.serve(plan="attn=dp,ep=16", token_budget=1024, **load)
    pd = serve_disaggregated(prefill="attn=tp8,ep=8", decode="attn=dp,ep=8", token_budget=1024, **load)
    assert colo["finished"] == pd["finished"] == 120 and colo["output_tokens"] == pd["output_tokens"]
    assert pd["tpot_ms"]["p99"] < colo["tpot_ms"]["p99"]
