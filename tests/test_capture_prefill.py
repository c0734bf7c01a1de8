"""Mixed serving steps (decode + chunked-prefill tokens) in capture, and the vectorised routing behind large steps."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric import trace as T
from fabric.capture import Plan, capture, load_chip
from fabric.capture import plan as plan_mod
from fabric.capture.kernels import logical_op_time
from fabric.capture.memory import memory_plan
from fabric.capture.spec import builtin_config, spec_from_config
from fabric.errors import ConfigError


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
       st.integers(1, 70), st.integers(0, 3))
def test_ep_layout_equals_the_token_loop(case, b_local, seed):
    model, tp, ep = case
    spec = _spec(model)
    plan = Plan(tp=tp, ep=ep, batch=b_local)
    routing = plan_mod._routed(spec, 1, plan.dp * b_local, seed)
    got = plan_mod._ep_layout(spec, plan, routing, b_local)
    sent, pairs, active = _ep_layout_loop(spec, plan, routing, b_local)
    assert np.array_equal(got["sent"], sent) and np.array_equal(got["pairs"], pairs)
    assert np.array_equal(got["active"], active)
    assert got["slots"] == -(-b_local // tp) and got["combine_bytes"] == sent.max() * spec.hidden * 2


# ---------------------------------------------------------------- mixed steps

def _rows(tr, layer, rank=0):
    t = tr.ops[rank]
    return {str(t.name[i]): i for i in np.nonzero(t.layer == layer)[0]}, t


def _deps(t, i):
    return set(t.dep_idx[t.dep_ptr[i]:t.dep_ptr[i + 1]].tolist())


def _compute_us(tr, rank=0):
    t = tr.ops[rank]
    return t.duration_ns[t.kind == T.KIND_COMPUTE].sum() / 1e3


MIXED = dict(prefill_tokens=96, prefill_context=70.5, prefill_kv_tokens=140, prefill_seqs=2)


@pytest.mark.parametrize("kw", [dict(model="toy-mla", tp=2, ep=4, batch=6, context=100),
                                dict(model="llama-3-70b", tp=8, batch=3, context=300, cost_model="roofline")])
def test_no_prefill_is_the_decode_step(kw):
    """prefill fields at 0 leave the step as it was: every column, the groups and the metadata (no prefill keys)."""
    plain = capture(**kw)
    zero = capture(**kw, prefill_tokens=0, prefill_context=0, prefill_kv_tokens=0, prefill_seqs=1)
    assert zero.meta == plain.meta and zero.groups == plain.groups
    assert not any(k.startswith("prefill") for k in plain.meta["plan"])
    for a, b in zip(plain.ops, zero.ops):
        assert a.same_as(b)
    assert "prefill_attention" not in set(plain.ops[0].name)


@pytest.mark.parametrize("cost_model", ["roofline", "shape"])
def test_mla_mixed_step_rows_tokens_and_collectives(cost_model):
    spec = _spec("toy-mla")
    b, T_, tp = 5, MIXED["prefill_tokens"], 2
    dec = capture("toy-mla", tp=tp, batch=b, context=100, cost_model=cost_model)
    mix = capture("toy-mla", tp=tp, batch=b, context=100, cost_model=cost_model, **MIXED)
    assert mix.meta["plan"]["prefill_tokens"] == T_ and mix.meta["plan"]["prefill_kv_tokens"] == 140
    nd, td = _rows(dec, 1)
    nm, tm = _rows(mix, 1)
    order = list(nm)
    assert order.index("w_uv") < order.index("prefill_kv_up") < order.index("prefill_attention") < order.index("o_proj")
    assert _deps(tm, nm["prefill_kv_up"]) == {nm["w_uv"]} and _deps(tm, nm["o_proj"]) == {nm["prefill_attention"]}
    assert tm.stream[nm["prefill_attention"]] == tm.stream[nm["attention"]]
    for name in ("w_uk", "attention", "w_uv"):            # decode attention: the decode tokens only
        assert tm.flops[nm[name]] == td.flops[nd[name]] and tm.duration_ns[nm[name]] == td.duration_ns[nd[name]]
    for name in ("qkv_a_proj", "q_b_proj", "o_proj"):      # token-linear: b + T tokens
        assert tm.flops[nm[name]] == pytest.approx(td.flops[nd[name]] * (b + T_) / b)
    hl = spec.heads // tp
    i = nm["prefill_attention"]
    assert tm.flops[i] == pytest.approx(2 * T_ * hl * 70.5 * (spec.nope + spec.rope + spec.v_dim))
    assert tm.bytes[i] == pytest.approx(2 * (140 * (hl * (spec.nope + spec.v_dim) + spec.rope)
                                             + T_ * hl * (spec.nope + spec.rope + spec.v_dim)))
    assert tm.flops[nm["prefill_kv_up"]] == pytest.approx(2 * 140 * spec.kv_lora * hl * (spec.nope + spec.v_dim))
    ar = nm["o_proj.allreduce"]
    assert tm.coll_bytes[ar] == (b + T_) * spec.hidden * 2 == td.coll_bytes[nd["o_proj.allreduce"]] * (b + T_) / b
    nh, th = _rows(mix, -1)
    nhd, thd = _rows(dec, -1)
    assert th.coll_bytes[nh["lm_head.allgather"]] == thd.coll_bytes[nhd["lm_head.allgather"]] * (b + 2) / b
    assert th.coll_bytes[nh["embed.allreduce"]] == (b + T_) * spec.hidden * 2


def test_gqa_mixed_step_attention():
    spec = _spec("llama-3-70b")
    mix = capture("llama-3-70b", tp=8, batch=3, context=300, **MIXED)
    names, t = _rows(mix, 2)
    assert "prefill_kv_up" not in names
    order = list(names)
    assert order.index("attention") < order.index("prefill_attention") < order.index("o_proj")
    i = names["prefill_attention"]
    hl, kv = spec.heads // 8, -(-spec.kv_heads // 8)
    assert t.flops[i] == pytest.approx(4 * 96 * hl * 70.5 * spec.head_dim)
    assert t.bytes[i] == pytest.approx(2 * (140 * kv * spec.head_dim * 2 + 2 * 96 * hl * spec.head_dim))


@pytest.mark.parametrize("cost_model", ["roofline", "shape"])
@pytest.mark.parametrize("model,plan", [("deepseek-r1", dict(tp=8, ep=32, batch=16)),
                                        ("llama-3-70b", dict(tp=8, batch=4))])
def test_mixed_step_costs_grow_with_prefill(cost_model, model, plan):
    kw = dict(plan, model=model, context=512, cost_model=cost_model)
    dec = _compute_us(capture(**kw))
    small = capture(**kw, prefill_tokens=128, prefill_context=200.0, prefill_kv_tokens=300)
    more_tokens = capture(**kw, prefill_tokens=512, prefill_context=200.0, prefill_kv_tokens=700)
    longer = capture(**kw, prefill_tokens=128, prefill_context=2000.0, prefill_kv_tokens=3000)
    assert dec < _compute_us(small) < _compute_us(more_tokens)
    assert _compute_us(small) < _compute_us(longer)
    pa = [tr.ops[0].duration_ns[list(tr.ops[0].name).index("prefill_attention")] for tr in (small, longer)]
    assert pa[0] < pa[1]


def test_expert_parallel_step_routes_every_token():
    """dp x (b_local + T) tokens reach the experts: the routed pairs over all ranks, and the all-to-all chunks."""
    spec = _spec("deepseek-r1")
    kw = dict(model="deepseek-r1", tp=4, ep=32, batch=8 * 3, context=64)
    dec, mix = capture(**kw), capture(**kw, **MIXED)
    inter = spec.moe_inter
    for tr, tokens in ((dec, 3), (mix, 3 + 96)):
        gate_up = sum(t.flops[t.name == "experts_gate_up"].sum() for t in tr.ops)
        moe_layers = int((tr.ops[0].name == "experts_gate_up").sum())
        assert gate_up == pytest.approx(moe_layers * 8 * tokens * spec.topk * 2 * spec.hidden * 2 * inter)
    a2a = lambda tr: max(int(c) for c in tr.ops[0].coll_bytes[tr.ops[0].name == "moe_dispatch"])  # noqa: E731
    assert a2a(mix) > 10 * a2a(dec)
    s = T.summary(mix)
    ag = [c for c in s["collectives"] if c["kind"] == "allgather" and c["bytes"] == 25 * spec.hidden * 2]
    assert ag and ag[0]["count_per_rank"][0] == moe_layers     # slots of ceil(99 / 4) tokens per TP rank


@pytest.mark.parametrize("kw", [dict(model="deepseek-r1", tp=8, ep=32, batch=12, cost_model="shape"),
                                dict(model="toy-mla", tp=2, ep=8, batch=7, cost_model="roofline")])
def test_expert_parallel_mixed_ranks_equal_their_op_by_op_build(monkeypatch, kw):
    """rank_table (ranks 1.. from rank 0's table) holds for mixed steps too."""
    import functools

    import fabric.capture as cap
    fast = capture(**kw, **MIXED)
    monkeypatch.setattr(cap, "lower", functools.partial(plan_mod.lower, each_rank_built=True))
    ref = capture(**kw, **MIXED)
    assert fast.meta == ref.meta
    for a, b in zip(fast.ops, ref.ops):
        for c in T.COLUMNS:
            assert np.array_equal(getattr(a, c), getattr(b, c)), c


def test_shape_model_prefill_attention_matches_kernel_cost():
    """Both cost models see the same flops and bytes; the shape model's time is compute-bound and grows with ctx."""
    chip = load_chip("h200")
    spec = _spec("deepseek-r1")
    op = [o for o in plan_mod.prefill_ops(spec, 0, 1500.5, 4000, 2) if o.name == "prefill_attention"][0]
    flops, nbytes = plan_mod.kernel_cost(op, 8, 2048, 2)
    got = logical_op_time(chip, op, 8, 2048, "bf16")
    assert got["flops"] == pytest.approx(flops) and got["bytes"] == pytest.approx(nbytes)
    assert got["regime"] == "compute" and got["ctas"] == 2 * math.ceil(1024 / 128) * 16
    op2 = [o for o in plan_mod.prefill_ops(spec, 0, 3000.5, 4000, 2) if o.name == "prefill_attention"][0]
    assert logical_op_time(chip, op2, 8, 2048, "bf16")["time_ns"] > 1.8 * got["time_ns"]


def test_memory_plan_counts_the_step_tokens():
    spec, chip = _spec("deepseek-r1"), load_chip("h200")
    dec = memory_plan(spec, Plan(tp=8, ep=64, batch=8 * 4, context=1024), chip)
    mix = memory_plan(spec, Plan(tp=8, ep=64, batch=8 * 4, context=1024, prefill_tokens=2048,
                                 prefill_context=1500.0, prefill_kv_tokens=3000), chip)
    assert mix["kv_tokens"] == dec["kv_tokens"] + 3000 == 4 * 1025 + 3000
    assert mix["kv_cache_gib"] == pytest.approx(dec["kv_cache_gib"] * (4 * 1025 + 3000) / (4 * 1025))
    residual = 2 * 2048 * spec.hidden * 2 / 2 ** 30        # the prompt tokens' residual stream alone
    assert mix["activations_gib"] > dec["activations_gib"] + residual
    assert mix["weights_gib"] == dec["weights_gib"]        # kv_b_proj's weight is counted once


@pytest.mark.parametrize("kw,match", [
    (dict(prefill_tokens=-1), "prefill_tokens=-1 must be a non-negative integer"),
    (dict(prefill_tokens=2.0), "prefill_tokens=2.0 must be a non-negative integer"),
    (dict(prefill_tokens=64, prefill_context=30, prefill_kv_tokens=32), r"prefill_kv_tokens=32 must be in"),
    (dict(prefill_tokens=64, prefill_context=0, prefill_kv_tokens=64), r"prefill_context=0 must be in \[1"),
    (dict(prefill_tokens=64, prefill_context=65, prefill_kv_tokens=64), r"prefill_context=65 must be in \[1"),
    (dict(prefill_tokens=64, prefill_context=float("nan"), prefill_kv_tokens=64), "must be a non-negative number"),
    (dict(prefill_tokens=64, prefill_context=30, prefill_kv_tokens=64, prefill_seqs=65), "prefill_seqs=65"),
    (dict(prefill_tokens=64, prefill_context=30, prefill_kv_tokens=64, prefill_seqs=0), "prefill_seqs=0"),
    (dict(prefill_kv_tokens=64), "describe prefill tokens"),
    (dict(prefill_context=3.5), "describe prefill tokens"),
    (dict(prefill_tokens=65536, prefill_context=30, prefill_kv_tokens=65536), "65537 tokens per step"),
    (dict(batch=65537), "65537 tokens per step"),
    (dict(batch=0), "--batch=0 must be a positive integer"),
    (dict(prefill_tokens=8, prefill_context=3, prefill_kv_tokens=8, runtime="eager", cost_model="shape"),
     "fused runtime only"),
])
def test_bad_prefill_inputs_are_one_line_errors(kw, match):
    args = dict(dict(model="toy-mla", tp=2, batch=1, context=10), **kw)
    with pytest.raises(ConfigError, match=match) as e:
        capture(**args)
    assert "\n" not in str(e.value)


def test_large_groups_are_accepted():
    """Up to 65536 tokens per attention group, the batch past the old 4096 cap (dp groups of it)."""
    tr = capture("toy-mla", tp=1, ep=16, batch=16 * 5000, context=10, prefill_tokens=60536, prefill_context=100.0,
                 prefill_kv_tokens=70000, prefill_seqs=4)
    assert tr.meta["plan"]["batch_per_replica"] == 5000 and tr.n_ranks == 16
