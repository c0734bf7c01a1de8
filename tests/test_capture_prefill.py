"""Mixed serving steps (decode + chunked-prefill tokens) in capture, and the vectorised routing behind large steps."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.capture import Plan
from fabric.capture import plan as plan_mod
from fabric.capture.spec import builtin_config, spec_from_config


def _spec(name):
    return spec_from_config(builtin_config(name), name)


# ---------------------------------------------------------------- routing oracle

def _route_loop(spec, layer, n, seed):
    """The per-token loop route replays (Generator.choice, one token at a time)."""
    rng = np.random.default_rng([seed, layer, 0x5EED])
    G, kg = max(spec.n_group, 1), max(spec.topk_group, 1)
    per = spec.n_experts // G
    out = np.empty((n, spec.topk), np.int64)
    for t in range(n):
        groups = rng.choice(G, size=kg, replace=False)
        out[t] = np.sort(rng.choice((groups[:, None] * per + np.arange(per)[None, :]).ravel(), size=spec.topk,
                                    replace=False))
    return out


@pytest.mark.parametrize("model,layer,seed,n", [
    ("deepseek-r1", 3, 1, 700),
    ("kimi-k2", 1, 0, 300),            # one group: choice(1, 1) draws no word
    ("qwen3-235b-a22b", 0, 2, 300),
    ("toy-mla", 1, 0, 500),
    ("deepseek-r1", 0, 57086, 40),     # a Lemire rejection at token 9: the rejected word is skipped
    ("deepseek-r1", 0, 70253, 200),    # ... and at token 133
])
def test_route_replays_the_per_token_loop(model, layer, seed, n):
    spec = _spec(model)
    plan_mod._kept.cache_clear()
    assert np.array_equal(plan_mod.route(spec, layer, n, seed), _route_loop(spec, layer, n, seed))


def test_route_is_a_prefix_stream_across_the_kept_rows(monkeypatch):
    """Rows past KEEP_ROWS come from a copy of the kept generator: any order of calls gives the same stream."""
    spec = _spec("deepseek-r1")
    monkeypatch.setattr(plan_mod, "KEEP_ROWS", 50)
    plan_mod._kept.cache_clear()
    long = plan_mod.route(spec, 2, 400, 5)
    assert np.array_equal(long[:120], _route_loop(spec, 2, 120, 5))
    for n in (10, 399, 60, 50, 51, 400, 1):
        assert np.array_equal(plan_mod.route(spec, 2, n, 5), long[:n]), n
    assert len(plan_mod._kept(spec, 2, 5)[1]) == 50
    plan_mod._kept.cache_clear()
    monkeypatch.setattr(plan_mod, "KEEP_ROWS", 1 << 17)
    assert np.array_equal(plan_mod.route(spec, 2, 400, 5), long)
    plan_mod._kept.cache_clear()


# ---------------------------------------------------------------- expert-parallel layout

def _ep_layout_loop(spec, plan, routing, b_local):
    """The token-by-token layout _ep_layout vectorises."""
    n, tp = plan.n_ranks, plan.tp
    per_rank = spec.n_experts // n
    slots = -(-b_local // tp)
    sent = np.zeros((n, n), np.int64)
    pairs = np.zeros(n, np.int64)
    active = [set() for _ in range(n)]
    for r in range(n):
        d, j = divmod(r, tp)
        for tok in range(j * slots, min((j + 1) * slots, b_local)):
            experts = routing[d * b_local + tok]
            owners = experts // per_rank
            for dst in np.unique(owners):
                sent[r, dst] += 1
            for e, o in zip(experts, owners):
                pairs[o] += 1
                active[o].add(int(e))
    return sent, pairs, np.array([len(a) for a in active])


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([("deepseek-r1", 8, 32), ("deepseek-r1", 1, 64), ("deepseek-r1", 4, 4), ("kimi-k2", 4, 16),
                        ("toy-mla", 2, 4), ("toy-mla", 1, 16)]),
       st.integers(1, 70), st.integers(0, 3), st.booleans())
def test_ep_layout_equals_the_token_loop(case, b_local, seed, shuffled):
    model, tp, ep = case
    spec = _spec(model)
    plan = Plan(tp=tp, ep=ep, batch=b_local)
    routing = plan_mod.route(spec, 1, plan.dp * b_local, seed)
    if shuffled:          # the layout must not rely on route's sorted rows
        routing = np.random.default_rng(seed).permuted(routing, axis=1)
    got = plan_mod._ep_layout(spec, plan, routing, b_local)
    sent, pairs, active = _ep_layout_loop(spec, plan, routing, b_local)
    assert np.array_equal(got["sent"], sent) and np.array_equal(got["pairs"], pairs)
    assert np.array_equal(got["active"], active)
    assert got["slots"] == -(-b_local // tp) and got["combine_bytes"] == sent.max() * spec.hidden * 2
