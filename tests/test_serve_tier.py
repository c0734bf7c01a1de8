"""The host-memory KV tier in the scheduler (fabric.serve.tier, fabric.serve.scheduler), against a synthetic step
model and tier timing: every KV block in exactly one place, bytes moved equal to the KV of the sequences moved, no
decode before the KV is back, swap and recompute giving the same tokens at different times, every request served
once; and the KV-aware balancer."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fabric.serve.plan import parse_plan
from fabric.serve.scheduler import Scheduler
from fabric.serve.tier import OFFLOAD, RELOAD
from fabric.serve.workload import Workload, with_shared_prefix
from tests.test_serve_scheduler import LinearSteps, workload

BPT = 1000.0                     # bytes per KV token, synthetic


class _Fit:
    def __init__(self, base, per_byte):
        self.base_us, self.one_us_per_byte = base, per_byte


class FakeTier:
    """5 us + 1 us per token moved, stores what each of the group's ranks holds."""

    engine = "synthetic"
    bpt = BPT
    rank_bytes = {OFFLOAD: BPT, RELOAD: BPT}

    def __init__(self, tokens_per_group, attn_tp):
        self.tokens_per_group, self.attn_tp = tokens_per_group, attn_tp
        self.fit = {OFFLOAD: _Fit(5.0, 1 / BPT), RELOAD: _Fit(5.0, 1 / BPT)}
        self.log = []

    def time_us(self, moves):
        self.log.append(list(moves))
        return 5.0 + sum(t for _, t, _ in moves)

    def bytes(self, moves):
        out = [0.0, 0.0]
        for _, t, d in moves:
            out[d] += t * BPT * self.attn_tp
        return tuple(out)


class Tracked(Scheduler):
    """After every step: each sequence's KV is in exactly one place (HBM of its group, host memory, or neither
    when it holds none), the groups' counts add up, and nothing decodes while its KV is in host memory."""

    def _record(self, r, *args):
        for g in self.groups[r]:
            assert 0 <= g.kv_used <= g.capacity
            assert g.kv_used == (int(self.kv[g.running].sum()) if g.running else 0) + sum(g.cache.values())
            assert not set(g.cache) & set(g.host_cache)                 # an entry in one tier only
            pinned = self.shared[g.running + g.waiting] > 0 if g.running or g.waiting else []
            users = self.pid[np.asarray(g.running + g.waiting, np.int64)[pinned]] if self.pid is not None else []
            assert all(g.pins.get(p, 0) == int((users == p).sum()) for p in set(g.pins) | set(users))
            assert all(p in g.cache and g.cache[p] >= self.shared[rid]   # a sequence's prefix stays in HBM
                       for rid in g.running + g.waiting if self.shared[rid] for p in [int(self.pid[rid])])
            if self.tier is not None:
                assert 0 <= g.host_used <= self.tier.tokens_per_group
                assert g.host_used == (int(self.host[g.waiting].sum()) if g.waiting else 0) + \
                    sum(g.host_cache.values())
        assert not ((self.kv > 0) & (self.host > 0)).any()          # never in two places
        running = {rid for rep in self.groups for g in rep for rid in g.running}
        assert all(self.host[rid] == 0 for rid in running)            # a running sequence's KV is all in HBM
        super()._record(r, *args)


def run(wl, plan="tp=8", capacity=400, tier_tokens=None, **kw):
    p = parse_plan(plan)
    tier = FakeTier(tier_tokens, p.attn_tp) if tier_tokens else None
    s = Tracked(wl, p, LinearSteps(), capacity, tier=tier, **kw)
    s.run()
    return s


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 2**16), capacity=st.integers(260, 900),
       tier_tokens=st.integers(1, 3000), budget=st.integers(1, 300),
       plan=st.sampled_from(["tp=8", "attn=dp,ep=4", "tp=2,replicas=2"]),
       balance=st.sampled_from(["least_tokens", "round_robin", "kv_aware"]), closed=st.sampled_from([0, 3]))
def test_swapping_serves_every_request_once_with_its_tokens(n, seed, capacity, tier_tokens, budget, plan, balance,
                                                            closed):
    wl = workload(n, seed, closed)
    s = run(wl, plan, capacity, tier_tokens, token_budget=budget, max_seqs=min(8, budget), balance=balance)
    assert s.finished == n and (s.generated == wl.output_tokens).all()
    assert all(g.host_used == 0 and g.kv_used == 0 for rep in s.groups for g in rep)
    assert not s.shared.any()
    assert not s.host.any()
    moved = [m for step in s.tier.log for m in step]
    out = sum(t for _, t, d in moved if d == OFFLOAD)
    back = sum(t for _, t, d in moved if d == RELOAD)
    assert out == back                                   # everything offloaded came back (all finished)
    assert s.rec.tier_bytes[0] == pytest.approx(out * BPT * s.plan.attn_tp)
    assert s.rec.tier_bytes[1] == pytest.approx(back * BPT * s.plan.attn_tp)
    assert (s.swapped > 0).sum() <= n


def test_swap_and_recompute_give_the_same_tokens_at_different_times():
    """KV pressure: without a tier the newest sequences are recomputed; with one they are swapped and no prompt
    token is prefilled twice."""
    wl = Workload("t", np.zeros(6), np.full(6, 100), np.full(6, 150))
    recompute = run(wl, "tp=8", capacity=400, token_budget=1000, max_seqs=8)
    swap = run(wl, "tp=8", capacity=400, tier_tokens=10_000, token_budget=1000, max_seqs=8)
    assert recompute.preempted.sum() > 0 and swap.preempted.sum() == 0 and swap.swapped.sum() > 0
    assert (swap.generated == recompute.generated).all() and swap.finished == recompute.finished == 6
    prefilled = lambda s: sum(s.rec.step_prefill)                              # noqa: E731
    assert prefilled(swap) == wl.prompt_tokens.sum() < prefilled(recompute)
    assert not np.allclose(swap.finish, recompute.finish)
    assert swap.rec.tier_s > 0 and recompute.rec.tier_s == 0


def test_a_full_tier_falls_back_to_recompute():
    wl = Workload("t", np.zeros(6), np.full(6, 100), np.full(6, 150))
    s = run(wl, "tp=8", capacity=400, tier_tokens=120, token_budget=1000, max_seqs=8)
    assert s.swapped.sum() > 0 and s.preempted.sum() > 0 and s.finished == 6


def test_a_reloaded_sequence_waits_for_its_kv():
    """The step that reloads a sequence pays for the move before its forward pass: its duration includes it."""
    wl = Workload("t", np.zeros(6), np.full(6, 100), np.full(6, 150))
    s = run(wl, "tp=8", capacity=400, tier_tokens=10_000, token_budget=1000, max_seqs=8)
    assert any(d == RELOAD for step in s.tier.log for _, _, d in step)
    base = LinearSteps()
    waited = [dur * 1e6 - base.step(tok, 0)[0] for dur, tok, k in
              zip(s.rec.step_dur_s, s.rec.step_tokens, s.rec.step_count) if k == 1]
    assert max(waited) >= 5.0 + 100                      # 5 us + a 100-token reload at least


def test_kv_aware_balancer_weighs_the_kv_already_held():
    """Group 0 decodes a long prompt (much KV, little work left), group 1 a short prompt with a long output (little
    KV, much work left). The next request goes where the work is least under least_tokens (group 0), where the KV
    room is largest under kv_aware (group 1)."""
    wl = Workload("t", np.array([0.0, 0.0001, 0.03]), np.array([3000, 10, 10]), np.array([400, 1000, 50]))
    p = parse_plan("attn=dp,ep=2")
    placed = {}
    for balance in ("least_tokens", "kv_aware"):
        s = Scheduler(wl, p, LinearSteps(), 10_000, balance=balance, token_budget=4096, max_seqs=8)
        s.run()
        assert s.finished == 3 and s.group_of[0] != s.group_of[1]
        placed[balance] = s.group_of[2]
    assert placed["least_tokens"] == 0 and placed["kv_aware"] == 1


def test_unknown_balance_policy_is_one_line():
    from fabric.errors import ConfigError
    with pytest.raises(ConfigError, match="kv_aware"):
        Scheduler(workload(2, 0), parse_plan("tp=8"), LinearSteps(), 400, balance="random")


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 2**16), capacity=st.integers(260, 900),
       tier_tokens=st.sampled_from([0, 50, 3000]), frac=st.sampled_from(["0.5", "1", "0.3:3"]),
       plan=st.sampled_from(["tp=8", "attn=dp,ep=4"]),
       balance=st.sampled_from(["least_tokens", "kv_aware"]), closed=st.sampled_from([0, 3]))
def test_a_prefix_cache_serves_every_request_once(n, seed, capacity, tier_tokens, frac, plan, balance, closed):
    wl = with_shared_prefix(workload(n, seed, closed), frac, seed)
    s = run(wl, plan, capacity, tier_tokens or None, token_budget=256, max_seqs=8, balance=balance)
    assert s.finished == n and (s.generated == wl.output_tokens).all()
    assert not s.shared.any() and not s.host.any()
    for rep in s.groups:                                  # what is left is cache, nobody's
        for g in rep:
            assert g.kv_used == sum(g.cache.values()) and not any(g.pins.values())
    # every prompt token is prefilled or read from the cache, recomputed ones again
    assert sum(s.rec.step_prefill) + s.rec.prefix_hit_tokens >= wl.prompt_tokens.sum()


def test_a_shared_prefix_is_prefilled_once():
    """Ten requests with one 900-token system prompt, arriving apart: the first prefills it, the others read it."""
    n = 10
    wl = Workload("t", np.arange(n) * 0.2, np.full(n, 1000), np.full(n, 5))
    cold = run(wl, "tp=8", capacity=20_000, token_budget=4096, max_seqs=8)
    warm = run(with_shared_prefix(wl, "0.9"), "tp=8", capacity=20_000, token_budget=4096, max_seqs=8)
    assert warm.rec.prefix_hit_tokens == 9 * 900
    assert sum(warm.rec.step_prefill) == 1000 + 9 * 100 < sum(cold.rec.step_prefill)
    ttft = lambda s: (s.first - s.arrival)[1:].mean()                           # noqa: E731
    assert ttft(warm) < 0.5 * ttft(cold)


def test_an_evicted_prefix_is_reloaded_from_host_memory():
    """Two prefixes that do not both fit next to the running sequences: the idle one is evicted to the host tier and
    reloaded on its next hit (never recomputed)."""
    wl = Workload("t", np.array([0.0, 0.05, 0.1, 0.15]), np.array([300, 300, 300, 300]), np.full(4, 3),
                  prefix_id=np.array([0, 1, 0, 1]), prefix_tokens=np.full(4, 250))
    s = run(wl, "tp=8", capacity=400, tier_tokens=10_000, token_budget=4096, max_seqs=8)
    assert s.rec.prefix_host_hits >= 1 and s.rec.prefix_hit_tokens == 2 * 250
    assert sum(s.rec.step_prefill) == 2 * 300 + 2 * 50
    moves = [m for step in s.tier.log for m in step]
    assert any(d == OFFLOAD and t == 250 for _, t, d in moves) and any(d == RELOAD and t == 250 for _, t, d in moves)


@pytest.mark.parametrize("n, seed, capacity, tier_tokens, frac, balance, closed", [
    (27, 13881, 261, 3000, "0.3:3", "kv_aware", 0),    # swapped sequences pinned entries: a livelock
    (22, 41924, 286, 3000, "1", "least_tokens", 3),    # a swapped one kept its old entry from eviction: a stall
    (27, 60739, 273, 50, "0.3:3", "least_tokens", 0),  # a full tier dropped the entry about to be reloaded
])
def test_prefix_cache_cases_that_once_stalled(n, seed, capacity, tier_tokens, frac, balance, closed):
    wl = with_shared_prefix(workload(n, seed, closed), frac, seed)
    s = run(wl, "tp=8", capacity, tier_tokens, token_budget=256, max_seqs=8, balance=balance)
    assert s.finished == n and (s.generated == wl.output_tokens).all()


def test_batch_imbalance_is_the_busiest_groups_mean_batch_over_the_mean():
    """One request on two attention groups: one group runs it all the time, the other nothing: 2x the mean batch
    and KV; two equal requests, one on each: even."""
    from fabric.serve.report import _imbalance
    p = parse_plan("attn=dp,ep=2")
    one = Workload("t", np.zeros(1), np.array([50]), np.array([20]))
    s = Scheduler(one, p, LinearSteps(), 1000, token_budget=256, max_seqs=8)
    s.run()
    imb = _imbalance(s, one, ~np.isnan(s.finish))
    assert imb["batch_max_over_mean"] == pytest.approx(2.0) and imb["kv_max_over_mean"] == pytest.approx(2.0)
    two = Workload("t", np.zeros(2), np.array([50, 50]), np.array([20, 20]))
    s = Scheduler(two, p, LinearSteps(), 1000, token_budget=256, max_seqs=8, balance="round_robin")
    s.run()
    assert _imbalance(s, two, ~np.isnan(s.finish))["batch_max_over_mean"] == pytest.approx(1.0)
