"""fabric.report on hand-made start/end times: the critical path follows streams by (rank, stream), whatever ids."""
import numpy as np

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
    """The kernel extension's walk (report.pxi) and the numpy/Python definition agree on real runs, both engines."""
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
    own = g.src_op >= 0
    assert own.any() and (got[~own] == -1).all()
    for t in np.flatnonzero(own):
        assert got[t] == tr.ops[g.rank[t]].layer[g.src_op[t]]
    assert len(set(got[own].tolist())) > 2           # several layers, not one value
