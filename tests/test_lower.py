"""Lowering Trace -> TaskGraph, on synthetic traces (no dependency on fabric.trace)."""
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric import collectives, sim
from fabric.collectives.symbolic import check
from fabric.config import load_config
from fabric.errors import TraceError
from fabric.lower import lower
from fabric.taskgraph import COMPUTE, JOIN, TRANSFER

COLS = {"kind": np.int8, "stream": np.int32, "duration_ns": np.float64, "flops": np.float64, "bytes": np.float64,
            "coll_kind": np.int8, "coll_bytes": np.int64, "group": np.int32, "peer": np.int32, "layer": np.int32}
AR, AG, RS, A2A, BC = 1, 2, 3, 4, 5


def table(rows):
    """rows: dicts with op fields plus 'deps' (indices of earlier ops on the same rank)."""
    d = {"kind": 0, "stream": 0, "duration_ns": 0.0, "flops": 0.0, "bytes": 0.0, "coll_kind": 0, "coll_bytes": 0,
         "group": -1, "peer": -1, "layer": -1}
    cols = {c: np.array([r.get(c, d[c]) for r in rows], dt) for c, dt in COLS.items()}
    cols["op_id"] = np.arange(len(rows), dtype=np.int64)
    cols["name"] = np.array([r.get("name", f"op{i}") for i, r in enumerate(rows)], object)
    cols["module"] = np.array([r.get("module", "") for r in rows], object)
    deps = [r.get("deps", []) for r in rows]
    cols["dep_ptr"] = np.concatenate([[0], np.cumsum([len(x) for x in deps])]).astype(np.int64)
    cols["dep_idx"] = np.array([j for x in deps for j in x], np.int64)
    return SimpleNamespace(**cols)


def trace(tables, groups):
    return SimpleNamespace(meta={}, n_ranks=len(tables), groups=groups, ops=tables)


def simple(n=3, nbytes=3000, kind=AR):
    rows = [{"name": "matmul", "duration_ns": 1500.5, "bytes": 1e6},
            {"name": "ar", "kind": 1, "coll_kind": kind, "coll_bytes": nbytes, "group": 0, "deps": [0]},
            {"name": "norm", "duration_ns": 700.0, "deps": [1]},
            {"name": "side", "stream": 1, "duration_ns": 50.0, "deps": [0]}]
    return trace([table(rows) for _ in range(n)], [list(range(n))])


def preds_of(g, t):
    pred, succ = g.edges()
    return set(pred[succ == t].tolist())


def test_compute_and_collective_wiring():
    tr = simple()
    g = lower(tr, validate=True)
    comp = np.flatnonzero(g.kind == COMPUTE)
    ops = comp[g.src_op[comp] >= 0]
    assert len(ops) == 9
    mm = ops[g.src_op[ops] == 0]
    assert (g.duration_ps[mm] == 1_500_500).all() and (g.nbytes[mm] == 1_000_000).all()
    assert g.stream[ops[g.src_op[ops] == 3]].tolist() == [1, 1, 1]
    assert len(g.coll_meta) == 1
    m = g.coll_meta[0]
    assert (m.kind, m.nbytes, m.ranks) == ("allreduce", 3000, (0, 1, 2))
    assert m.algorithm == collectives.select("allreduce", 3000, 3, None, oracle=sim.analytic_times)
    assert m.label == "ar"
    # norm on rank r waits for rank r's done JOIN of the collective; the collective's start JOIN waits for matmul
    for r in range(3):
        norm = ops[(g.rank[ops] == r) & (g.src_op[ops] == 2)][0]
        (done,) = preds_of(g, norm)
        assert g.kind[done] == JOIN and g.coll[done] == 0 and g.rank[done] == r
        mmr = mm[g.rank[mm] == r][0]
        starts = [s for s in g.successors(mmr) if g.coll[s] == 0]
        assert len(starts) == 1 and g.kind[starts[0]] == JOIN and g.n_deps[starts[0]] == 1


def test_policy_override_reaches_the_graph():
    g = lower(simple(n=4), load_config(overrides={"collectives.policy": "ring"}))
    assert g.coll_meta[0].algorithm == "ring"
    assert (g.kind == TRANSFER).sum() == 2 * 3 * 4


def test_stream_order():
    rows = [{"duration_ns": 1.0}, {"duration_ns": 2.0}, {"duration_ns": 3.0, "stream": 1}]
    tr = trace([table(rows)], [[0]])
    g = lower(tr)
    assert g.n_edges == 1 and preds_of(g, 1) == {0}
    assert lower(tr, stream_order=False).n_edges == 0


def _edges_by_sort(n_ops, dep_cnt, dep_idx, stream, stream_order):
    """The dependency edges between ops as the lowering defined them before arrays.op_dependencies: the trace's
    edges plus program order per (rank, stream) from a lexsort, merged by np.unique of pred * G + succ."""
    G = len(stream)
    off = np.r_[0, np.cumsum(n_ops)]
    op_rank = np.repeat(np.arange(len(n_ops)), n_ops)
    succ = np.repeat(np.arange(G), dep_cnt)
    pred = dep_idx + off[op_rank[succ]]
    if stream_order and G:
        o = np.lexsort((np.arange(G), stream, op_rank))
        same = (op_rank[o[1:]] == op_rank[o[:-1]]) & (stream[o[1:]] == stream[o[:-1]])
        pred, succ = np.r_[pred, o[:-1][same]], np.r_[succ, o[1:][same]]
    key = np.unique(pred.astype(np.int64) * G + succ)
    return key // G, key % G


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from([-1, 0, 1, 7, 2 ** 31 - 1, -2 ** 31]),
                                   st.lists(st.integers(0, 12), max_size=4)), max_size=12), min_size=1, max_size=5),
       st.booleans(), st.sampled_from([False, False, True]))
def test_op_dependencies_merge_as_a_sort_would(ranks, stream_order, spill):
    """arrays.op_dependencies (the trace's dependencies and program order per stream, each edge once, by predecessor
    then successor) gives exactly the edges of a lexsort and np.unique, and names the first op whose dependency
    falls outside its rank's table (spill: dependencies may name an op past the table's end)."""
    from fabric._check_build import arrays
    n_ops = np.array([len(r) for r in ranks], np.int64)
    stream = np.array([s for r in ranks for s, _ in r], np.int32)
    dep_cnt = np.array([len(d) for r in ranks for _, d in r], np.int64)
    dep_idx = np.array([j if spill else j % len(r) for r in ranks for _, d in r for j in d], np.int64)
    G = len(stream)
    exit_, entry = np.arange(G) * 3 + 1, np.arange(G) * 3 + 2           # ops' own task ids
    pred, succ, bad = arrays.op_dependencies(n_ops, dep_cnt, dep_idx, stream, stream_order, exit_, entry)
    own = np.repeat(n_ops, n_ops)
    outside = np.repeat(np.arange(G), dep_cnt)[dep_idx >= np.repeat(own, dep_cnt)]
    if len(outside):
        assert (pred, succ, bad) == (None, None, outside[0])
        return
    p, s = _edges_by_sort(n_ops, dep_cnt, dep_idx, stream, stream_order)
    assert bad == -1 and pred.tolist() == exit_[p].tolist() and succ.tolist() == entry[s].tolist()


def test_semantics_of_a_mixed_trace():
    n = 4
    rows = [{"duration_ns": 10.0},
            {"kind": 1, "coll_kind": AR, "coll_bytes": 1000, "group": 0, "deps": [0]},
            {"kind": 1, "coll_kind": AG, "coll_bytes": 101, "group": 0, "deps": [1]},
            {"kind": 1, "coll_kind": A2A, "coll_bytes": 37, "group": -1, "deps": [2]},
            {"kind": 1, "coll_kind": BC, "coll_bytes": 77, "group": 0, "peer": 2, "deps": [3]},
            {"kind": 1, "coll_kind": RS, "coll_bytes": 99, "group": 0, "deps": [4]}]
    tabs = []
    for r in range(n):
        rows[3]["group"] = 1 if r in (1, 3) else 2
        tabs.append(table(rows))
    tr = trace(tabs, [list(range(n)), [3, 1], [0, 2]])
    for pol in ("sd200", "ring", "halving_doubling", "oneshot"):
        g = lower(tr, load_config(overrides={"collectives.policy": pol}), semantics=True, validate=True)
        assert sorted(m.kind for m in g.coll_meta) == sorted(["allreduce", "allgather", "alltoall", "alltoall",
                                                              "broadcast", "reduce_scatter"])
        # trace sizes are per-rank (allgather, reduce_scatter) or per-peer (alltoall) chunks
        sizes = {m.kind: m.nbytes for m in g.coll_meta}
        assert (sizes["allgather"], sizes["reduce_scatter"], sizes["alltoall"]) == (404, 396, 74)
        bc = next(m for m in g.coll_meta if m.kind == "broadcast")
        assert bc.ranks[bc.root] == 2
        check(g)


def test_send_recv_pairs_in_order():
    r0 = [{"duration_ns": 5.0}, {"kind": 2, "coll_kind": 6, "coll_bytes": 100, "peer": 1, "deps": [0]},
          {"kind": 2, "coll_kind": 6, "coll_bytes": 200, "peer": 1, "deps": [1]}]
    r1 = [{"kind": 3, "coll_kind": 6, "coll_bytes": 100, "peer": 0},
          {"kind": 3, "coll_kind": 6, "coll_bytes": 200, "peer": 0}, {"duration_ns": 5.0, "deps": [1]}]
    g = lower(trace([table(r0), table(r1)], []), semantics=True, validate=True)
    assert [(m.kind, m.nbytes, m.ranks) for m in g.coll_meta] == [("sendrecv", 100, (0, 1)),
                                                                  ("sendrecv", 200, (0, 1))]
    xf = np.flatnonzero(g.kind == TRANSFER)
    assert g.rank[xf].tolist() == [0, 0] and g.peer[xf].tolist() == [1, 1]
    check(g)
    bad = [{"kind": 3, "coll_kind": 6, "coll_bytes": 100, "peer": 0}]
    with pytest.raises(TraceError, match="do not pair"):
        lower(trace([table(r0), table(bad)], []))


@pytest.mark.parametrize("change, msg", [
    ({"coll_kind": AG}, "does not match"),
    ({"coll_bytes": 14}, "does not match"),
    ({"group": 1}, "not a member"),
    ({"group": 7}, "unknown group"),
])
def test_mismatched_collectives_are_refused(change, msg):
    tr = simple()
    t = tr.ops[2]
    fixed = {c: getattr(t, c).copy() for c in ("coll_kind", "coll_bytes", "group")}
    for c, v in change.items():
        fixed[c][1] = v
    tr.ops[2] = SimpleNamespace(**{**t.__dict__, **fixed})
    tr.groups.append([0, 1])
    with pytest.raises(TraceError, match=msg):
        lower(tr)


def test_missing_collective_on_one_member():
    tr = simple()
    t = tr.ops[1]
    tr.ops[1] = SimpleNamespace(**{**t.__dict__, "kind": np.zeros_like(t.kind)})
    with pytest.raises(TraceError, match="issues"):
        lower(tr)


def decode_trace(n_ranks=64, layers=61, ar_bytes=14336):
    """DeepSeek-R1-like decode step at TP=64: 123 AllReduce, ~1,100 compute ops per rank, two streams."""
    rows = [{"name": "embed", "duration_ns": 2000.0}]
    rows.append({"name": "embed_ar", "kind": 1, "coll_kind": AR, "coll_bytes": ar_bytes, "group": 0, "deps": [0]})
    for L in range(layers):
        for k in range(8):
            rows.append({"name": f"attn{k}", "duration_ns": 3000.0, "layer": L, "deps": [len(rows) - 1]})
        rows.append({"name": "o_proj_ar", "kind": 1, "coll_kind": AR, "coll_bytes": ar_bytes, "group": 0, "layer": L,
                         "deps": [len(rows) - 1]})
        base = len(rows) - 1
        rows.append({"name": "shared_expert", "stream": 1, "duration_ns": 2000.0, "layer": L, "deps": [base]})
        side = len(rows) - 1
        for k in range(7):
            rows.append({"name": f"moe{k}", "duration_ns": 2500.0, "layer": L, "deps": [len(rows) - 1 if k else base]})
        rows.append({"name": "moe_ar", "kind": 1, "coll_kind": AR, "coll_bytes": ar_bytes, "group": 0, "layer": L,
                         "deps": [len(rows) - 1, side]})
    rows.append({"name": "lm_head", "duration_ns": 9000.0, "deps": [len(rows) - 1]})
    t = table(rows)
    return trace([t] * n_ranks, [list(range(n_ranks))])


def test_decode_step_lowers_fast():
    tr = decode_trace()
    cfg = load_config()
    assert (tr.ops[0].kind == 1).sum() == 123
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        g = lower(tr, cfg)
        best = min(best, time.perf_counter() - t0)
    assert best < 0.5, f"lowering took {best:.3f} s"
    s = g.summary()
    assert s["collectives"] == 123 and all(m.algorithm == "twoshot" for m in g.coll_meta)
    assert s["transfer"] == 123 * 2 * 64 * 63
    assert s["compute"] == 64 * (len(tr.ops[0].kind) - 123) + 123 * 64 * 3  # ops + launch + 2 waits per rank


TRACES = Path(__file__).resolve().parents[1] / "traces"


def test_real_toy_trace_is_lowered_correctly():
    trace_mod = pytest.importorskip("fabric.trace")
    path = TRACES / "toy-mla-tp8.h5"
    if not path.exists():
        pytest.skip("traces/toy-mla-tp8.h5 not present")
    tr = trace_mod.read(path)
    g = lower(tr, semantics=True, validate=True)
    assert len(g.coll_meta) == sum(int((t.kind == 1).sum()) for t in tr.ops) // tr.n_ranks
    check(g)


def test_real_deepseek_tp64_trace():
    trace_mod = pytest.importorskip("fabric.trace")
    tr = trace_mod.read(trace_mod.default_trace_path())
    g = lower(tr, validate=True)
    ar = [m for m in g.coll_meta if m.kind == "allreduce"]
    assert len(ar) == 123 and {(m.algorithm, m.nbytes, len(m.ranks)) for m in ar} == {("twoshot", 14336, 64)}
