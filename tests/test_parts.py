"""A run split into independent parts (fabric.parts, sim.run(jobs > 1)) gives the joint run's results bit for bit.

Parts share no node and no dependency, each engine takes its events in (time, order) with its own sequence
numbers, randomness is per channel and a transfer keeps its whole-run flow id (which candidate route it takes), so
every task time, channel counter, link state, total and translation count must equal the joint run's: on random
groups of ranks exchanging stores and loads with compute between them, on both engines, with bit errors; on a
lowered step of two data-parallel replicas; and on parts whose own transfer numbering differs from the whole
run's. A part that cannot finish makes the whole run again as one engine, with the joint run's report."""
import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import event, given, settings, strategies as st

from fabric import parts, sim
from fabric.capture import capture
from fabric.cli.replay import main
from fabric.config import load_config
from fabric.errors import ConfigError, SimulationError
from fabric.lower import lower
from fabric.network import build
from fabric.taskgraph import COMPUTE, LOAD, STORE, TRANSFER, GraphBuilder
from fabric.trace import read, write


def assert_same(a: sim.RunResult, b: sim.RunResult) -> None:
    assert np.array_equal(a.task_start_ps, b.task_start_ps) and np.array_equal(a.task_end_ps, b.task_end_ps)
    assert a.counters.keys() == b.counters.keys()
    for k in a.counters:
        assert np.array_equal(a.counters[k], b.counters[k]), k
    for k, v in a.link_state.items():
        assert np.array_equal(np.asarray(v), np.asarray(b.link_state[k])), k
    assert (a.totals, a.translation, a.events, a.now_ps) == (b.totals, b.translation, b.events, b.now_ps)


@st.composite
def grouped_graphs(draw, n_ranks: int):
    """Disjoint random groups of ranks, each exchanging stores and loads among its members (sometimes to no rank
    at all) with compute on one stream between them, the group's tasks chained by random dependencies, and, now and
    then, one dependency joining two groups' tasks. Tasks of the groups interleave in task order."""
    ranks = draw(st.permutations(range(n_ranks)))
    sizes = draw(st.lists(st.integers(1, 6), min_size=2, max_size=5))
    groups, at = [], 0
    for k in sizes:
        if at + k > n_ranks:
            break
        groups.append(ranks[at:at + k])
        at += k
    b = GraphBuilder(n_ranks)
    ids = [[] for _ in groups]
    for _ in range(draw(st.integers(4, 40))):
        g = draw(st.integers(0, len(groups) - 1))
        r = draw(st.sampled_from(groups[g]))
        if draw(st.booleans()):
            peer = draw(st.sampled_from(groups[g] + [n_ranks + 2]))
            t = b.add_tasks(TRANSFER, r, peer=peer, nbytes=draw(st.integers(1, 9000)),
                            op=draw(st.sampled_from([STORE, LOAD])))
        else:
            t = b.add_tasks(COMPUTE, r, stream=0, duration_ps=draw(st.integers(1, 200_000)))
        if ids[g] and draw(st.booleans()):
            b.add_edges(draw(st.sampled_from(ids[g])), t)
        ids[g].append(int(t[0]))
    busy = [i for i in ids if i]
    if len(busy) >= 2 and draw(st.integers(0, 4)) == 0:
        a, c = busy[0][0], busy[1][-1]
        b.add_edges(min(a, c), max(a, c))
    return b.build()


@given(st.data())
@settings(max_examples=40, deadline=None)
def test_parts_give_the_joint_runs_results(data):
    preset = data.draw(st.sampled_from(["sd200", "mesh-4x4x4", "dgx-h100"]))
    engine = data.draw(st.sampled_from(["packet", "analytic"]))
    ber = data.draw(st.sampled_from([0.0, 1e-6])) if engine == "packet" else 0.0
    cfg = load_config(preset=preset, overrides={"phy.ber": ber, "sim.seed": data.draw(st.integers(0, 99))})
    topo = build(cfg)
    graph = data.draw(grouped_graphs(topo.n_ranks))
    planned = parts.plan(sim.as_arrays(topo), sim.as_arrays(graph))
    event(f"{len(planned[0].tasks) if planned else 1} parts")
    joint = sim.run(cfg, topo, graph, engine=engine, transfers=False)
    split = sim.run(cfg, topo, graph, engine=engine, transfers=False, jobs=data.draw(st.integers(2, 3)))
    assert_same(joint, split)


def domain_graph(topo, order):
    """Stores inside host domains 0 and 1 of sd200 (8 ranks each, one switch each: two parts), issued in `order`
    (the domain of each transfer, in task order), so that each part numbers its transfers differently from the
    whole graph."""
    b = GraphBuilder(topo.n_ranks)
    k = [0, 0]
    for d in order:
        r = 8 * d + k[d] % 8
        b.add_tasks(TRANSFER, r, peer=8 * d + (k[d] * 3 + 1) % 8, nbytes=4096 + 64 * k[d], op=STORE)
        k[d] += 1
    return b.build()


def test_parts_keep_the_whole_runs_flow_ids():
    """Two candidate routes per pair (two ports per accelerator): a transfer's route follows its flow id, and
    here part 1's local numbering and the whole run's differ in parity, so a part that numbered its own transfers
    would route some of them differently."""
    cfg = load_config(preset="sd200")
    topo = build(cfg)
    graph = domain_graph(topo, [0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1])
    g = sim.as_arrays(graph)
    plan, _ = parts.plan(sim.as_arrays(topo), g)
    assert len(plan.tasks) == 2 and len(np.unique(np.diff(topo.pair_ptr))) > 1
    flows = plan.part_graph(g, 1)["xf_flow"]
    assert np.any(flows % 2 != np.arange(len(flows)) % 2)
    for engine in ("packet", "analytic"):
        assert_same(sim.run(cfg, topo, graph, engine=engine, transfers=False),
                    sim.run(cfg, topo, graph, engine=engine, transfers=False, jobs=2))


def test_node_parts_join_what_shares_a_node_or_a_dependency():
    cfg = load_config(preset="sd200")
    topo = build(cfg)
    t = sim.as_arrays(topo)
    g = sim.as_arrays(domain_graph(topo, [0, 1]))
    part_of_rank, part_of_node = parts.node_parts(t, g)
    # stores 0 -> 1 and 8 -> 9: two parts of two ranks, every other rank alone
    assert part_of_rank[0] == part_of_rank[1] != part_of_rank[8] == part_of_rank[9]
    assert len(np.unique(part_of_rank)) == 62
    assert part_of_node[t["ch_dst"][t["ch_src"] == 0][0]] == part_of_rank[0]     # rank 0's switch
    # a store from domain 0 into domain 1 crosses the mesh: one part
    b = GraphBuilder(topo.n_ranks)
    b.add_tasks(TRANSFER, [0, 8], peer=[9, 1], nbytes=64)
    assert parts.plan(t, sim.as_arrays(b.build())) is None
    # two domains' stores tied by a dependency: one part
    b = GraphBuilder(topo.n_ranks)
    ids = b.add_tasks(TRANSFER, [0, 8], peer=[1, 9], nbytes=64)
    b.add_edges(ids[0], ids[1])
    assert parts.plan(t, sim.as_arrays(b.build())) is None


def test_a_part_that_cannot_finish_reports_as_the_joint_run():
    """Part 1 waits on itself (a dependency cycle): the split run does the whole run again as one engine, and
    raises what the joint run raises."""
    cfg = load_config(preset="sd200")
    topo = build(cfg)
    b = GraphBuilder(topo.n_ranks)
    b.add_tasks(TRANSFER, 0, peer=1, nbytes=64)
    ids = b.add_tasks(TRANSFER, [8, 9], peer=[9, 8], nbytes=64)
    b.add_edges(ids, ids[::-1])
    graph = b.build()
    with pytest.raises(SimulationError) as joint:
        sim.run(cfg, topo, graph, transfers=False)
    with pytest.raises(SimulationError) as split:
        sim.run(cfg, topo, graph, transfers=False, jobs=2)
    assert str(joint.value) == str(split.value)


def test_a_split_run_refuses_what_the_joint_run_refuses():
    """The checks run alongside the split run's inputs (sim.run_parts): their error is the joint run's."""
    cfg = load_config(preset="sd200", overrides={"link.vcs": 1})
    topo = build(cfg)
    graph = domain_graph(topo, [0, 1, 0, 1])
    with pytest.raises(ConfigError) as joint:
        sim.run(cfg, topo, graph, transfers=False)
    with pytest.raises(ConfigError) as split:
        sim.run(cfg, topo, graph, transfers=False, jobs=2)
    assert "link.vcs" in str(split.value) and str(joint.value) == str(split.value)


def test_a_task_on_no_rank_of_the_topology_is_refused_either_way():
    """A task on rank 70 of sd200's 64: one line before any engine is made, joint or split (the engine, and the
    parts' C passes, index per-rank state by it: it crashed both)."""
    cfg = load_config(preset="sd200")
    topo = build(cfg)
    b = GraphBuilder(topo.n_ranks)
    b.add_tasks(TRANSFER, [0, 8], peer=[1, 9], nbytes=64)
    b.add_tasks(COMPUTE, 70, stream=0, duration_ps=5)
    graph = b.build()
    for jobs in (1, 2):
        with pytest.raises(ConfigError, match="task 2 is on rank 70, but the topology has ranks 0..63"):
            sim.run(cfg, topo, graph, transfers=False, jobs=jobs)
    with pytest.raises(ValueError, match="task 2 is on rank 70, outside 0..63"):
        parts.node_parts(sim.as_arrays(topo), sim.as_arrays(graph))


def test_a_run_with_a_transfer_table_or_faults_does_not_split(monkeypatch):
    cfg = load_config(preset="sd200")
    topo = build(cfg)
    graph = domain_graph(topo, [0, 1, 0, 1])
    monkeypatch.setattr(parts, "plan", lambda *a: pytest.fail("split"))
    sim.run(cfg, topo, graph, jobs=2)                                   # transfers=True: a per-transfer table
    sim.run(cfg, topo, graph, jobs=2, transfers=False, faults=[("corrupt_flit", 0, 1, 1)])


@pytest.mark.parametrize("engine", ["packet", "analytic"])
def test_fabric_replay_reports_the_same_with_parts(tmp_path, engine):
    """Two data-parallel replicas of a TP8 step, each in its own host domain of sd200: fabric-replay with one
    engine and with a thread per part writes the same report, wall times aside."""
    path = tmp_path / "dp2.h5"
    write(path, capture(model="llama-3-70b", tp=8, replicas=2, context=256))
    cfg = load_config(preset="sd200")
    topo = build(cfg)
    assert len(parts.plan(sim.as_arrays(topo), sim.as_arrays(lower(read(path), cfg)))[0].tasks) == 2
    reports = []
    for jobs in ("1", "2"):
        out = tmp_path / f"r{jobs}.json"
        res = CliRunner().invoke(main, [str(path), "--engine", engine, "--jobs", jobs, "--quiet", "--json", str(out)])
        assert res.exit_code == 0, res.output
        r = json.loads(out.read_text())
        reports.append({k: v for k, v in r.items() if k not in ("wall_s", "lower_s")})
    assert reports[0] == reports[1]
