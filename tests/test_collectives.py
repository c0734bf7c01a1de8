"""Collective fragments: selection policy, transfer counts and bytes against the alpha-beta model, flags, costs."""
import numpy as np
import pytest

import dataclasses

from fabric import collectives, phy, sim
from fabric.collectives import ALGORITHMS, KINDS, cost_model, select
from fabric.collectives.cost import MODELS
from fabric.config import CollectivesConfig, Sd200LibraryConfig, load_config
from fabric.errors import ConfigError
from fabric.taskgraph import COMPUTE, LOAD, REDUCE, TRANSFER
from fabric.trace import COLL_NAMES

CC = CollectivesConfig()
BETA = phy.ps_per_byte(phy.data_gbps(load_config())) / phy.PS_PER_NS    # ns per byte of one sd200 link


def test_sd200_policy_tiers():
    """Fixed ceilings (the auto tiers, the default: tests/test_policy_tiers.py)."""
    cc = dataclasses.replace(CC, sd200=Sd200LibraryConfig(oneshot_max_bytes=8192, twoshot_max_bytes=512 << 10))
    assert select("allreduce", 4096, 64, cc) == "oneshot"
    assert select("allreduce", cc.sd200.oneshot_max_bytes, 64, cc) == "oneshot"
    assert select("allreduce", 14336, 64, cc) == "twoshot"  # the DeepSeek-R1 decode AllReduce: medium tier
    assert select("allreduce", cc.sd200.twoshot_max_bytes, 64, cc) == "twoshot"
    assert select("allreduce", cc.sd200.twoshot_max_bytes + 1, 64, cc) == "ring"
    assert select("allgather", 4040 * 64, 64, cc) == "direct"
    assert select("reduce_scatter", 1 << 30, 64, cc) == "ring"
    assert select("alltoall", 1 << 30, 64, cc) == "direct"
    # auto (a [collectives] section alone: the default fabric): direct below ring for AllGather too
    assert select("allgather", 4040 * 64, 64, CC, oracle=sim.analytic_times) == "direct"
    assert select("reduce_scatter", 1 << 30, 64, CC, oracle=sim.analytic_times) == "ring"
    with pytest.raises(ConfigError, match="unknown collective"):
        select("allmagic", 1, 2, cc)


@pytest.mark.parametrize("policy", ["oneshot", "twoshot", "ring", "halving_doubling"])
def test_fixed_policies_via_set(policy):
    cfg = load_config(overrides={"collectives.policy": policy})
    for nbytes in (64, 14336, 1 << 26):
        assert select("allreduce", nbytes, 64, cfg) == policy
    ag = select("allgather", 14336, 12, cfg)
    assert ag == {"oneshot": "direct", "twoshot": "direct", "ring": "ring", "halving_doubling": "ring"}[policy]
    assert select("allgather", 14336, 16, cfg) in ALGORITHMS["allgather"]


def test_unoptimised_library_knobs_are_config():
    cfg = load_config(overrides={"collectives.policy": "ring", "collectives.launch_ns": "6600",
                                 "collectives.step_ns": "600", "collectives.entry_barrier": "true"})
    assert cfg.collectives.entry_barrier is True and cfg.collectives.step_ns == 600.0
    with pytest.raises(ConfigError):
        load_config(overrides={"collectives.reduce_gbps": "0"})


def data_transfers(frag):
    """Data transfers (not flags) and their payload bytes."""
    data = (frag.task_kind == TRANSFER) & (frag.sem.dst_buf >= 0)
    return data, frag.sem.length[data]


def transfer_depth(frag):
    """Longest chain of data transfers through the fragment."""
    g = frag.to_graph()
    is_data = ((g.kind == TRANSFER) | (g.kind == 3)) & (g.sem.dst_buf >= 0)
    depth = np.zeros(g.n_tasks, np.int64)
    for t in g.topo_order():
        d = depth[t] + (1 if is_data[t] else 0)
        depth[t] = d
        s = g.successors(t)
        depth[s] = np.maximum(depth[s], d)
    return int(depth.max())


CASES = [(k, a) for k, algs in ALGORITHMS.items() for a in algs]


@pytest.mark.parametrize("kind, alg", CASES)
@pytest.mark.parametrize("n", [2, 5, 8])
@pytest.mark.parametrize("nbytes", [14336, 1001])
def test_bytes_and_steps_match_cost_model(kind, alg, n, nbytes):
    if kind == "sendrecv":
        n = 2
    if alg == "halving_doubling" and kind != "allreduce" and n & (n - 1):
        with pytest.raises(ConfigError, match="power-of-two"):
            collectives.build(kind, alg, nbytes, n)
        with pytest.raises(ConfigError, match="power-of-two"):
            cost_model(kind, alg, nbytes, n, alpha_ns=700.0, beta_ns_per_byte=BETA)
        return
    frag = collectives.build(kind, alg, nbytes, n)
    c = cost_model(kind, alg, nbytes, n, alpha_ns=700.0, beta_ns_per_byte=BETA)
    data, length = data_transfers(frag)
    assert length.sum() == c.bytes_total  # exact: every algorithm moves exactly its textbook volume
    load = frag.op[data] == LOAD
    sender = np.where(load, frag.peer[data], frag.rank[data])        # a load's data comes from its owner
    sent = np.bincount(sender, weights=length, minlength=n)
    assert sent.max() <= np.ceil(c.bytes_max) + n  # uneven chunks differ by at most a byte per chunk
    assert transfer_depth(frag) == c.steps
    # folded flags: every data store carries flag_bytes more than its payload; a load carries its payload only
    # (the reader sees its own completions); the only other transfers are the load variants' flag stores
    assert (frag.task_nbytes[data] == length + np.where(load, 0, CC.flag_bytes)).all()
    flags = (frag.task_kind == TRANSFER) & ~data
    assert (frag.task_nbytes[flags] == CC.flag_bytes).all()
    if alg.endswith("_load"):
        assert load.all() == (alg == "oneshot_load") and load.sum() == n * (n - 1)
        # a ready flag per (owner, reader) pair, and one-shot's done flags back
        assert flags.sum() == n * (n - 1) * (2 if alg == "oneshot_load" else 1)
    else:
        assert not load.any() and not flags.any()
    assert c.time_ns == pytest.approx(c.alpha_count * 700.0 + c.bytes_max / 64)   # 64 GB/s links


def test_one_list_of_kinds_and_algorithms():
    """The registry is the list: the cost model covers exactly its algorithms, the trace format's collective
    codes name its kinds, and the fixed policies are the AllReduce algorithms (plus the tiers and the tuner)."""
    assert set(MODELS) == set(CASES)
    assert COLL_NAMES[1:] == KINDS
    policy = {f.name: f for f in dataclasses.fields(CollectivesConfig)}["policy"]
    assert policy.metadata["choices"] == ("sd200", "auto") + ALGORITHMS["allreduce"]


@pytest.mark.parametrize("kind, alg", [("allreduce", "magic"), ("allgather", "oneshot"), ("allmagic", "direct")])
def test_unknown_algorithm_raises_everywhere(kind, alg):
    with pytest.raises(ConfigError):
        cost_model(kind, alg, 1024, 8, 1.0, 1.0)
    with pytest.raises(ConfigError):
        collectives.build(kind, alg, 1024, 8)


def test_textbook_volumes_one_shot_vs_two_shot_vs_ring():
    n, M = 64, 14336
    one = cost_model("allreduce", "oneshot", M, n, 1, 1)
    two = cost_model("allreduce", "twoshot", M, n, 1, 1)
    ring = cost_model("allreduce", "ring", M, n, 1, 1)
    assert one.bytes_max == (n - 1) * M
    assert two.bytes_max == ring.bytes_max == 2 * (n - 1) * M / n
    assert (one.steps, two.steps, ring.steps) == (1, 2, 2 * (n - 1))
    assert (one.alpha_count, two.alpha_count) == (2, 3)


def test_separate_flags_and_entry_barrier_counts():
    n, M = 6, 6000
    base = collectives.build("allreduce", "twoshot", M, n)
    xf = (base.task_kind == TRANSFER).sum()
    assert xf == 2 * n * (n - 1)
    sep = collectives.build("allreduce", "twoshot", M, n, CollectivesConfig(fold_flags=False))
    is_flag = (sep.task_kind == TRANSFER) & (sep.sem.dst_buf < 0)
    assert is_flag.sum() == xf and (sep.task_nbytes[is_flag] == 8).all()
    bar = collectives.build("allreduce", "ring", M, n, CollectivesConfig(entry_barrier=True))
    flags = (bar.task_kind == TRANSFER) & (bar.sem.dst_buf < 0)
    assert flags.sum() == n  # ring: each rank only hears from its left neighbour
    assert set(zip(bar.rank[flags].tolist(), bar.peer[flags].tolist())) == {((r + 1) % n, r) for r in range(n)}


def test_reduce_and_overhead_durations():
    cc = CollectivesConfig(reduce_gbps=1000.0, reduce_kernel_ns=300.0, step_ns=100.0, launch_ns=1000.0)
    n, M = 4, 4000
    f = collectives.build("allreduce", "oneshot", M, n, cc)
    red = f.task_kind == REDUCE
    assert red.sum() == n
    # n operands read + 1 written, at 1000 GB/s = 1 B/ps, plus the kernel cost
    assert (f.task_nbytes[red] == (n + 1) * M).all()
    assert (f.duration_ps[red] == (n + 1) * M + 300_000).all()
    comp = f.task_kind == COMPUTE
    assert sorted(set(f.duration_ps[comp].tolist())) == [100_000, 1_000_000]  # one wait + one launch per rank
    assert comp.sum() == 2 * n and (f.stream[comp | red] == 0).all()
    r = collectives.build("allreduce", "ring", M, n, cc)
    assert ((r.task_kind == COMPUTE) & (r.duration_ps == 100_000)).sum() == 2 * (n - 1) * n
    z = collectives.build("allreduce", "ring", M, n, CollectivesConfig(step_ns=0, launch_ns=0))
    assert (z.task_kind != COMPUTE).all()


def test_structure_start_done_and_group_of_one():
    f = collectives.build("allgather", "ring", 4096, 5)
    g = f.to_graph()
    assert (g.n_deps[f.start] == 0).all()
    assert all(len(g.successors(d)) == 0 for d in f.done)
    one = collectives.build("allreduce", "ring", 100, 1)
    assert (one.task_kind != TRANSFER).all()
    from fabric.collectives.symbolic import check
    check(one.to_graph())


def test_halving_doubling_non_power_of_two_uses_pre_and_post_steps():
    n, M = 6, 600
    f = collectives.build("allreduce", "halving_doubling", M, n)
    data, length = data_transfers(f)
    full = length == M
    # ranks 4, 5 push their whole input to 0, 1 and get the whole result back
    assert sorted(zip(f.rank[data][full].tolist(), f.peer[data][full].tolist())) == [(0, 4), (1, 5), (4, 0),
                                                                                      (5, 1)]
