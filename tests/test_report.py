"""fabric.report on hand-made start/end times: the critical path follows streams by (rank, stream), whatever ids."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fabric.report import critical_path, step_summary
from fabric.taskgraph import COMPUTE, GraphBuilder


def test_streams_are_told_apart_by_rank_and_stream_whatever_their_ids():
    """Rank 0 stream 1024 and rank 1 stream 0 are different streams (a rank*1024+stream key once merged them):
    the last task, alone on its stream with no predecessor, waited from t = 0."""
    b = GraphBuilder(2)
    b.add_tasks(COMPUTE, [0, 1], stream=[1024, 0], duration_ps=[100, 10])
    g = b.build()
    start, end = np.array([0, 150]), np.array([100, 160])
    assert critical_path(g, start, end) == dict(compute_ps=10, comm_ps=150, tasks=1)
    same = GraphBuilder(2)
    same.add_tasks(COMPUTE, [1, 1], stream=[1024, 1024], duration_ps=[100, 10])
    assert critical_path(same.build(), start, end) == dict(compute_ps=110, comm_ps=50, tasks=2)


def test_step_summary_adds_up():
    b = GraphBuilder(1)
    b.add_tasks(COMPUTE, [0, 0], stream=0, duration_ps=[2_000_000, 1_000_000])
    s = step_summary(b.build(), np.array([0, 3_000_000]), np.array([2_000_000, 4_000_000]))
    assert s["step_us"] == 4.0 and s["compute_us"] == 3.0 and s["exposed_comm_us"] == 1.0
    assert s["comm_fraction"] == 0.25 and s["critical_path_tasks"] == 2


def test_split_by_group_follows_the_compiled_walk_through_ties():
    """With groups, critical_path splits the kernel's path (critical_path_walk's with_path): the same split as the
    reference's walk, also where ends tie (the lowest predecessor; the stream's previous task only if later)."""
    from fabric.report import critical_path_reference
    b = GraphBuilder(2)
    ids = b.add_tasks(COMPUTE, [0, 0, 1, 0, 0], stream=[0, 0, 0, 0, 1], duration_ps=[5, 5, 5, 0, 5])
    b.add_edges([ids[0], ids[2]], [ids[3], ids[3]])
    g = b.build()
    groups = np.array([0, 1, -1, 2, 3])
    for start, end in ((np.array([0, 5, 0, 10, 10]), np.array([5, 10, 10, 10, 15])),
                       (np.array([0, 0, 0, 10, 10]), np.array([5, 5, 5, 10, 15])),
                       (np.array([0, 2, 0, 12, 12]), np.array([12, 12, 12, 12, 17]))):
        got = critical_path(g, start, end, groups)
        assert got == critical_path_reference(g, start, end, groups)
        assert sum(c for c, _ in got["by_group"].values()) == got["compute_ps"]


def test_compiled_walk_matches_the_reference_on_replayed_steps():
    """The compiled walk (critical_path.pxi) and the numpy/Python definition agree on real runs, both engines."""
    from fabric import sim
    from fabric.config import load_config
    from fabric.lower import lower
    from fabric.network import build
    from fabric.report import critical_path_reference, task_layers
    from fabric.trace import read
    from pathlib import Path
    cfg = load_config(preset="dgx-h100")
    topo = build(cfg)
    tr = read(str(Path(__file__).resolve().parent.parent / "traces" / "toy-mla-tp8.h5"))
    g = lower(tr, cfg)
    layers = task_layers(g, tr)
    assert (layers >= 0).any()
    for engine in ("packet", "analytic"):
        r = sim.run(cfg, topo, g, engine=engine, transfers=False)
        assert critical_path(g, r.task_start_ps, r.task_end_ps) == \
            critical_path_reference(g, r.task_start_ps, r.task_end_ps)
        by = critical_path(g, r.task_start_ps, r.task_end_ps, layers)       # the split by layer: the kernel's path
        assert by == critical_path_reference(g, r.task_start_ps, r.task_end_ps, layers)
        assert sum(c for c, _ in by["by_group"].values()) == by["compute_ps"]
        assert sum(m for _, m in by["by_group"].values()) == by["comm_ps"]


def test_compiled_walk_breaks_ties_as_the_reference():
    """Equal ends: the lowest predecessor wins, and the stream's previous task only when it ended strictly later;
    equal starts on a stream are ordered by id."""
    from fabric.report import critical_path_reference
    b = GraphBuilder(2)
    ids = b.add_tasks(COMPUTE, [0, 0, 1, 0, 0], stream=[0, 0, 0, 0, 1], duration_ps=[5, 5, 5, 0, 5])
    b.add_edges([ids[0], ids[2]], [ids[3], ids[3]])
    g = b.build()
    for start, end in ((np.array([0, 5, 0, 10, 10]), np.array([5, 10, 10, 10, 15])),
                       (np.array([0, 0, 0, 10, 10]), np.array([5, 5, 5, 10, 15])),
                       (np.array([0, 2, 0, 12, 12]), np.array([12, 12, 12, 12, 17]))):
        assert critical_path(g, start, end) == critical_path_reference(g, start, end)


def test_task_layers_are_each_compute_task_s_trace_op_layer():
    """task_layers: a compute task lowered from op i of rank r has layer[i] of r's table; every other task -1."""
    from pathlib import Path

    from fabric.lower import lower
    from fabric.report import task_layers
    from fabric.trace import read
    tr = read(str(Path(__file__).resolve().parent.parent / "traces" / "toy-mla-tp8.h5"))
    g = lower(tr, None)
    got = task_layers(g, tr)
    some = np.arange(0, g.n_tasks, 7)
    assert task_layers(g, tr, some).tolist() == got[some].tolist()     # of some tasks only: the same layers
    own = g.src_op >= 0
    assert own.any() and (got[~own] == -1).all()
    for t in np.flatnonzero(own):
        assert got[t] == tr.ops[g.rank[t]].layer[g.src_op[t]]
    assert len(set(got[own].tolist())) > 2           # several layers, not one value


def _random_run(data):
    """A random graph (edges from lower to higher ids, ranks and streams, collective instances) with times a run
    could give: each task starts at or after its predecessors' ends. Small times, so ends and starts tie often."""
    from hypothesis import strategies as st
    n = data.draw(st.integers(1, 40))
    b = GraphBuilder(3)
    rank = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    stream = data.draw(st.lists(st.integers(-1, 1), min_size=n, max_size=n))
    kind = data.draw(st.lists(st.sampled_from([0, 1, 2, 3]), min_size=n, max_size=n))
    coll = data.draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n))
    dur = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    b.add_tasks(np.array(kind, np.int8), rank, stream=stream, duration_ps=dur, coll=coll)
    edges = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = [(u, v) for u, v in edges if u < v]
    if edges:
        b.add_edges([u for u, _ in edges], [v for _, v in edges])
    g = b.build()
    gap = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    start, end = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for t in range(n):
        ready = max([end[u] for u, v in edges if v == t], default=0)
        start[t] = ready + gap[t]
        end[t] = start[t] + dur[t]
    return g, start, end


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_compiled_walk_is_the_reference_walk_on_random_runs(data):
    """Any graph, any times a run could give (many ties): the compiled walk (each task's last predecessor from one
    pass over the edges) and the reference (the predecessor CSR) give the same path, totals and split by group."""
    from fabric.report import critical_path_reference
    g, start, end = _random_run(data)
    groups = np.array(data.draw(st.lists(st.integers(-1, 3), min_size=g.n_tasks, max_size=g.n_tasks)))
    got = critical_path(g, start, end, groups)
    assert got == critical_path_reference(g, start, end, groups)
    assert critical_path(g, start, end, lambda tasks: groups[tasks]) == got      # groups asked for the path only
    assert got["compute_ps"] + got["comm_ps"] == end.max()


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_collective_spans_and_compute_totals_are_the_numpy_definitions(data):
    """collective_summary's spans (first start, last end per instance) and replay's per-rank compute and reduce
    totals, each one C pass, equal np.minimum.at / np.maximum.at and np.bincount over masks, bit for bit."""
    from fabric._check_build import arrays
    from fabric.report import compute_totals
    from fabric.taskgraph import REDUCE
    g, start, end = _random_run(data)
    first, last = arrays.collective_spans(g.coll, start, end, 4)
    want_first, want_last = np.full(4, np.iinfo(np.int64).max), np.zeros(4, np.int64)
    m = g.coll >= 0
    np.minimum.at(want_first, g.coll[m], start[m])
    np.maximum.at(want_last, g.coll[m], end[m])
    assert first.tolist() == want_first.tolist() and last.tolist() == want_last.tolist()
    busy, reduce_ps = compute_totals(g, 3)
    comp = (g.kind == COMPUTE) & (g.coll < 0)
    assert busy.tolist() == np.bincount(g.rank[comp], weights=g.duration_ps[comp], minlength=3).tolist()
    assert reduce_ps == int(g.duration_ps[g.kind == REDUCE].sum())


def test_report_helpers_refuse_ids_out_of_range():
    """A collective instance or a rank beyond the tables is a ValueError, not a write outside them."""
    from fabric._check_build import arrays
    b = GraphBuilder(2)
    b.add_tasks(COMPUTE, [0, 1], stream=0, duration_ps=[1, 2], coll=[-1, 1])
    g = b.build()
    t = np.array([0, 1])
    with pytest.raises(ValueError, match="instance 1 of 1"):
        arrays.collective_spans(g.coll, t, t, 1)
    with pytest.raises(ValueError, match="rank 1"):
        arrays.compute_totals(g.kind, np.array([-1, -1], np.int32), g.rank, g.duration_ps, COMPUTE, 2, 1)
