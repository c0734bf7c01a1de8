"""fabric.serve.scheduler against a synthetic step model: every request served once with its tokens, KV within
capacity, no token before its request arrived and was prefilled, stretches of decode steps equal to single steps."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fabric.errors import ConfigError
from fabric.serve.plan import parse_plan
from fabric.serve.scheduler import Scheduler
from fabric.serve.workload import Workload


class LinearSteps:
    """t = 100 + 2 n + m + 0.01 kv + 0.001 pairs us: grows with every input, as the real model does."""

    def step(self, n, kv, pairs=0.0, mean_tokens=None, prefill=0, prompts=0):
        m = n if mean_tokens is None else mean_tokens
        t = 100.0 + 2.0 * n + m + 0.01 * kv + 0.001 * pairs
        return t, 0.1 * t, (float(m), 0.0, 0.0)

    def decode_times(self, n, kv, mean_tokens=None):
        m = n if mean_tokens is None else mean_tokens
        t = 100.0 + 2.0 * n + m + 0.01 * np.asarray(kv, np.float64)
        return t, 0.1 * t


class Checked(Scheduler):
    """Checks the KV invariants after every step."""

    def _record(self, r, *args):
        for g in self.groups[r]:
            assert 0 <= g.kv_used <= g.capacity
            assert g.kv_used == int(self.kv[g.running].sum()) if g.running else g.kv_used == 0
            assert len(g.running) <= self.max_seqs
        super()._record(r, *args)


def workload(n, seed, closed=0, prefilled=False):
    rng = np.random.default_rng(seed)
    return Workload("test", np.sort(rng.uniform(0, 0.05, n)) if not closed else np.zeros(n),
                    rng.integers(1, 200, n), rng.integers(2 if prefilled else 1, 60, n), users=closed,
                    prefilled=prefilled)


def run(wl, plan="tp=8", capacity=400, stretch=True, **kw):
    s = Checked(wl, parse_plan(plan), LinearSteps(), capacity, stretch=stretch, **kw)
    s.run()
    return s


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**16), capacity=st.integers(260, 2000),
       budget=st.integers(1, 300), max_seqs=st.integers(1, 16), plan=st.sampled_from(
           ["tp=8", "attn=dp,ep=4", "tp=2,replicas=3", "attn=tp2,ep=4,replicas=2"]),
       balance=st.sampled_from(["least_tokens", "round_robin"]), closed=st.sampled_from([0, 3]))
def test_every_request_served_once(n, seed, capacity, budget, max_seqs, plan, balance, closed):
    wl = workload(n, seed, closed)
    s = run(wl, plan, capacity, token_budget=budget, max_seqs=min(max_seqs, budget), balance=balance)
    assert s.finished == n and not np.isnan(s.finish).any()
    assert (s.generated == wl.output_tokens).all()                 # every token asked for, none more
    assert (s.arrival <= s.first).all() and (s.first <= s.finish).all()
    assert (s.first > s.arrival).all()                             # a first token needs a prefill step
    assert all(not g.running and not g.waiting and g.kv_used == 0 for rep in s.groups for g in rep)
    assert all(g.outstanding == 0 for rep in s.groups for g in rep)
    ref = run(wl, plan, capacity, stretch=False, token_budget=budget, max_seqs=min(max_seqs, budget),
              balance=balance)
    np.testing.assert_allclose(s.finish, ref.finish, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s.first, ref.first, rtol=1e-9, atol=1e-12)
    assert (s.preempted == ref.preempted).all()
    assert s.rec.comm_s == pytest.approx(ref.rec.comm_s, rel=1e-9)
    assert s.rec.comm_s == pytest.approx(0.1 * sum(s.rec.step_dur_s), rel=1e-9)


def test_kv_pressure_preempts_and_recomputes():
    wl = Workload("t", np.zeros(6), np.full(6, 100), np.full(6, 150))
    s = run(wl, "tp=8", capacity=400, token_budget=1000, max_seqs=8)
    assert s.preempted.sum() > 0 and s.finished == 6
    assert (s.generated == 150).all()


def test_a_request_larger_than_the_kv_cache_is_refused_up_front():
    wl = Workload("t", np.zeros(2), np.array([10, 300]), np.array([5, 200]))
    with pytest.raises(ConfigError, match="request 1 needs 500 tokens"):
        Scheduler(wl, parse_plan("tp=8"), LinearSteps(), 400)


def test_decode_runs_in_stretches():
    wl = Workload("t", np.zeros(4), np.full(4, 10), np.full(4, 500))
    s = run(wl, capacity=10_000)
    assert sum(s.rec.step_count) > 10 * len(s.rec.step_count)      # few records for many steps


def test_least_tokens_balances_groups():
    wl = workload(64, 3)
    s = run(wl, "attn=dp,ep=4", capacity=5000, balance="least_tokens")
    per = np.bincount(s.group_of, weights=wl.prompt_tokens + wl.output_tokens, minlength=4)
    assert per.max() / per.mean() < 1.5


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 2**16), capacity=st.integers(260, 1500),
       plan=st.sampled_from(["tp=8", "attn=dp,ep=4", "tp=2,replicas=2"]))
def test_a_decode_pool_serves_prefilled_requests(n, seed, capacity, plan):
    """Requests arriving with their KV (a disaggregated decode pool) decode without a prefill unless preempted,
    each once, to their last token, within the KV cache; stretches equal single steps."""
    wl = workload(n, seed, prefilled=True)
    s = run(wl, plan, capacity, token_budget=64, max_seqs=8)
    assert s.finished == n and (s.generated == wl.output_tokens).all()
    assert np.isnan(s.first).all()                       # the first token was the prefill pool's
    assert all(not g.running and g.kv_used == 0 and g.outstanding == 0 for rep in s.groups for g in rep)
    prefill_steps = sum(p > 0 for p in s.rec.step_prefill)
    assert (prefill_steps > 0) == (s.preempted.sum() > 0)   # only a recompute prefills
    ref = run(wl, plan, capacity, stretch=False, token_budget=64, max_seqs=8)
    np.testing.assert_allclose(s.finish, ref.finish, rtol=1e-9, atol=1e-12)
