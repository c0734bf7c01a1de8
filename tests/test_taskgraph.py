"""TaskGraph / GraphBuilder: contract arrays, CSR, validation, fragment stamping."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fabric import collectives
from fabric.config import CollectivesConfig
from fabric.taskgraph import (
    COMPUTE,
    JOIN,
    TRANSFER,
    GraphBuilder,
    GraphError,
    TaskGraph,
)


def chain_graph():
    b = GraphBuilder(2)
    t = b.add_tasks(COMPUTE, [0, 0, 1], stream=0, duration_ps=[10, 20, 30])
    x = b.add_tasks(TRANSFER, 0, peer=1, nbytes=64)
    b.add_edges(t[0], t[1])
    b.add_edges([t[1], t[1]], [x[0], t[2]])
    b.add_edges(x, t[2])
    return b.build(validate=True)


def test_contract_dtypes_and_csr():
    g = chain_graph()
    assert g.n_tasks == 4 and g.n_edges == 4
    for name, dt in {"kind": np.int8, "rank": np.int32, "peer": np.int32, "stream": np.int32, "nbytes": np.int64,
                     "duration_ps": np.int64, "op": np.int8, "coll": np.int32, "succ_ptr": np.int64,
                     "succ_idx": np.int32, "n_deps": np.int32}.items():
        assert getattr(g, name).dtype == dt, name
    assert sorted(g.successors(1).tolist()) == [2, 3]
    assert g.n_deps.tolist() == [0, 1, 2, 1]
    pred, succ = g.edges()
    assert sorted(zip(pred.tolist(), succ.tolist())) == [(0, 1), (1, 2), (1, 3), (3, 2)]
    ptr, idx = g.predecessors_csr()
    assert sorted(idx[ptr[2]:ptr[3]].tolist()) == [1, 3]
    assert g.topo_levels().tolist() == [0, 1, 3, 2]
    order = g.topo_order().tolist()
    assert order.index(3) < order.index(2)


def test_cycle_is_rejected():
    b = GraphBuilder(1)
    t = b.add_tasks(JOIN, [0, 0, 0])
    b.add_edges(t, np.roll(t, 1))
    with pytest.raises(GraphError, match="cycle"):
        b.build(validate=True)


@pytest.mark.parametrize("mutate, msg", [
    ({"rank": 5}, "rank outside"),
    ({"peer": 0}, "valid peer"),
    ({"nbytes": 0}, "no bytes"),
])
def test_validate_ranges(mutate, msg):
    b = GraphBuilder(2)
    args = {"rank": 0, "peer": 1, "nbytes": 8}
    args.update(mutate)
    b.add_tasks(TRANSFER, args.pop("rank"), **args)
    with pytest.raises(GraphError, match=msg):
        b.build(validate=True)


def test_bad_edge_and_n_deps():
    b = GraphBuilder(1)
    b.add_tasks(JOIN, 0)
    b.add_edges(0, 3)
    with pytest.raises(GraphError, match="outside"):
        b.build()
    g = chain_graph()
    bad = TaskGraph(**{**g.__dict__, "n_deps": np.zeros(4, np.int32)})
    with pytest.raises(GraphError, match="n_deps"):
        bad.validate()


def test_fragments_are_offset_and_relabelled():
    frag = collectives.build("allreduce", "twoshot", 1024, 4, semantics=False)
    b = GraphBuilder(8)
    b.add_tasks(JOIN, 0, count=5)
    ranks = np.array([[7, 5, 3, 1], [0, 2, 4, 6]])
    start, done, cids = b.add_fragments(frag, ranks, streams=[[2, 2, 2, 2], [1, 1, 1, 1]], labels=["a", "b"])
    g = b.build(validate=True)
    nt = frag.n_tasks
    assert g.n_tasks == 5 + 2 * nt
    assert cids.tolist() == [0, 1] and [m.label for m in g.coll_meta] == ["a", "b"]
    assert g.coll_meta[0].ranks == (7, 5, 3, 1)
    assert (start[0] == frag.start + 5).all() and (done[1] == frag.done + 5 + nt).all()
    second = slice(5 + nt, 5 + 2 * nt)
    assert np.array_equal(g.rank[second], ranks[1][frag.rank])
    xf = g.kind[second] == TRANSFER
    assert np.array_equal(g.peer[second][xf], ranks[1][frag.peer[xf]])
    assert set(g.stream[second][g.stream[second] >= 0].tolist()) == {1}
    assert (g.coll[:5] == -1).all() and (g.coll[second] == 1).all()
    assert g.rank[start[0][0]] == 7 and g.rank[done[1][3]] == 6


def test_fragment_templates_are_cached_and_read_only():
    cc = CollectivesConfig()
    a = collectives.template("allreduce", "ring", 4096, 8, cc)
    assert collectives.template("allreduce", "ring", 4096, 8, cc) is a
    assert collectives.template("allreduce", "ring", 4096, 8, CollectivesConfig(step_ns=0)) is not a
    with pytest.raises(ValueError):
        a.rank[0] = 3


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=200))))
def test_csr_by_source_is_a_stable_sort_by_predecessor(case):
    """GraphBuilder.build's counting sort in C gives what np.argsort(pred, kind="stable") gives."""
    from fabric._check_build import arrays
    n, edges = case
    pred = np.array([p for p, _ in edges], np.int32)
    succ = np.array([s for _, s in edges], np.int32)
    ptr, idx, deps = arrays.csr_by_source(pred, succ, n)
    assert np.array_equal(idx, succ[np.argsort(pred, kind="stable")])
    assert np.array_equal(ptr, np.r_[0, np.cumsum(np.bincount(pred, minlength=n))])
    assert np.array_equal(deps, np.bincount(succ, minlength=n))


def _reference_graph(ops, n_ranks, window):
    """What the builder must give for `ops`, element by element: each block's tasks in call order, each fragment
    copy's tasks with its ranks, streams and collective substituted, the edges as a stable sort by predecessor."""
    from fabric.address import global_addresses
    from fabric.taskgraph import LOAD, STORE
    cols = {k: [] for k in ("kind", "rank", "peer", "stream", "nbytes", "duration_ps", "op", "coll", "src_op",
                            "addr")}
    pred, succ, n, cid = [], [], 0, 0
    for op in ops:
        if op[0] == "tasks":
            _, kind, rank, dur = op
            for r, d in zip(rank, dur):
                for k, v in zip(cols, (kind, r, -1, -1, 0, d, 0, -1, -1, -1)):
                    cols[k].append(v)
            n += len(rank)
        elif op[0] == "edges":
            pred += op[1]
            succ += op[2]
        else:
            _, frag, ranks, streams = op
            for row, srow in zip(ranks, streams):
                for j in range(frag.n_tasks):
                    p = int(frag.peer[j])
                    moves = frag.task_kind[j] == TRANSFER and frag.op[j] in (STORE, LOAD)
                    a = global_addresses(row[p], frag.addr_buf[j], frag.addr_off[j], frag.rank[j], window) \
                        if window is not None and moves else -1
                    for k, v in zip(cols, (frag.task_kind[j], row[frag.rank[j]], row[p] if p >= 0 else -1,
                                           srow[frag.rank[j]] if frag.stream[j] >= 0 else -1, frag.task_nbytes[j],
                                           frag.duration_ps[j], frag.op[j], cid, -1, a)):
                        cols[k].append(int(v))
                pred += (frag.edge_src + n).tolist()
                succ += (frag.edge_dst + n).tolist()
                n += frag.n_tasks
                cid += 1
    order = np.argsort(np.array(pred, np.int64), kind="stable")
    return cols, np.array(succ, np.int64)[order], np.bincount(np.array(pred, np.int64), minlength=n)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("tasks"), st.lists(st.tuples(st.integers(0, 7), st.integers(0, 99)), min_size=1, max_size=5)),
    st.tuples(st.just("frag"), st.sampled_from([("allreduce", "twoshot", 4), ("allgather", "ring", 3),
                                                ("alltoall", "direct", 2)]),
              st.lists(st.permutations(range(8)), min_size=1, max_size=3), st.integers(0, 3)),
    st.tuples(st.just("edges"), st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 10 ** 6)), max_size=6))),
    min_size=1, max_size=8), st.sampled_from([None, 1 << 30]), st.sampled_from([1, 3]))
def test_builder_writes_what_the_blocks_say(script, window, threads):
    """Any mix of add_tasks, add_fragments and add_edges calls builds, column by column and edge by edge, the graph
    the calls describe (the builder writes stamped fragments straight into the graph's arrays at build), whether
    one thread writes the blocks or several (threads=3: each a run of them, however few tasks)."""
    b = GraphBuilder(8, window_bytes=window)
    ops = []
    for step in script:
        if step[0] == "tasks":
            rank, dur = [r for r, _ in step[1]], [d for _, d in step[1]]
            b.add_tasks(COMPUTE, rank, duration_ps=dur)
            ops.append(("tasks", COMPUTE, rank, dur))
        elif step[0] == "frag":
            (kind, alg, n), perms, stream = step[1:]
            frag = collectives.build(kind, alg, 4096, n, semantics=False)
            ranks = np.array([p[:n] for p in perms])
            streams = np.full(ranks.shape, stream)
            b.add_fragments(frag, ranks, streams=streams)
            ops.append(("frag", frag, ranks, streams))
        elif b.n_tasks and step[1]:       # edges among the tasks so far
            p = [x % b.n_tasks for x, _ in step[1]]
            s = [y % b.n_tasks for _, y in step[1]]
            b.add_edges(p, s)
            ops.append(("edges", p, s))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("fabric.taskgraph._FILL_THREAD_TASKS", 1 if threads > 1 else 1 << 40)
        mp.setattr("fabric.config.machine_cores", lambda: threads)
        g = b.build()
    cols, succ_idx, out_deg = _reference_graph(ops, 8, window)
    for k, v in cols.items():
        assert getattr(g, k).tolist() == v, k
    assert g.succ_idx.tolist() == succ_idx.tolist()
    assert np.diff(g.succ_ptr).tolist() == out_deg.tolist()
    pred = np.repeat(np.arange(g.n_tasks), np.diff(g.succ_ptr))        # and the predecessor CSR: a stable sort
    ptr, idx = g.predecessors_csr()
    assert idx.tolist() == pred[np.argsort(g.succ_idx, kind="stable")].tolist()
    assert ptr.tolist() == np.r_[0, np.cumsum(np.bincount(g.succ_idx, minlength=g.n_tasks))].tolist()


def test_stamping_refuses_positions_outside_the_group_and_short_columns():
    """arrays.stamp_fragment checks what it is given before writing (no write outside the graph's columns)."""
    from fabric._check_build import arrays
    from fabric.taskgraph import _TASK_COLUMNS
    cols = tuple(np.empty(4, dt) for dt, _ in _TASK_COLUMNS.values())
    one = np.zeros(2, np.int64)
    ranks, streams = np.array([[5, 6]], np.int32), np.zeros((1, 2), np.int32)
    frag = dict(f_kind=one, f_rank=np.array([0, 2]), f_peer=-one, f_stream=one, f_nbytes=one, f_dur=one, f_op=one,
                f_apeer=-one, f_aoff=one)
    args = lambda **kw: tuple({**frag, **kw}.values())  # noqa: E731
    with pytest.raises(ValueError, match="group position"):
        arrays.stamp_fragment(cols, 0, *args(), ranks, streams, 0, 0)
    with pytest.raises(ValueError, match="do not fit"):
        arrays.stamp_fragment(cols, 3, *args(f_rank=one), ranks, streams, 0, 0)
    arrays.stamp_fragment(cols, 2, *args(f_rank=np.array([1, 0]), f_peer=np.array([0, -1])), ranks, streams, 7, 0)
    assert cols[1][2:].tolist() == [6, 5] and cols[2][2:].tolist() == [5, -1] and cols[7][2:].tolist() == [7, 7]
