"""FragBuilder's storage: task columns kept as one scalar per call or a copy of the call's array, edges sorted by one
int64 key. Checked against the plain construction (each call's columns broadcast and concatenated, edges
lexsorted) on random call sequences."""
import numpy as np
from hypothesis import given, settings, strategies as st

from fabric.collectives._frag import FragBuilder
from fabric.config import CollectivesConfig
from fabric.taskgraph import COMPUTE, JOIN, LOAD, STORE, TRANSFER

N = 4
# column -> (FragBuilder._add argument, Fragment field or None (semantics), dtype, values drawn)
COLUMNS = {"kind": ("kind", "task_kind", np.int8, st.sampled_from([JOIN, COMPUTE, TRANSFER])),
           "peer": ("peer", "peer", np.int32, st.integers(-1, N - 1)),
           "stream": ("stream", "stream", np.int32, st.integers(-1, 3)),
           "nbytes": ("nbytes", "task_nbytes", np.int64, st.integers(0, 2**40)),
           "dur": ("dur", "duration_ps", np.int64, st.integers(0, 2**40)),
           "op": ("op", "op", np.int8, st.sampled_from([STORE, LOAD])),
           "dst_off": ("dst_off", None, np.int64, st.integers(0, 2**40)),
           "length": ("length", None, np.int64, st.integers(0, 2**40))}


@st.composite
def calls(draw):
    """A sequence of _add calls (each column a scalar, a numpy scalar or an array of the call's length) and edges
    (int pairs, arrays, or a scalar against an array) among the tasks made so far."""
    out, m = [], 0
    for _ in range(draw(st.integers(1, 8))):
        size = draw(st.integers(1, 5))
        kw = {}
        for col, (arg, _, _, values) in COLUMNS.items():
            form = draw(st.sampled_from(["scalar", "numpy", "array"]))
            if form == "array":
                kw[arg] = np.array(draw(st.lists(values, min_size=size, max_size=size)), np.int64)
            else:
                v = draw(values)
                kw[arg] = np.int64(v) if form == "numpy" else v
        out.append(("add", draw(st.lists(st.integers(0, N - 1), min_size=size, max_size=size)), kw))
        m += size
        for _ in range(draw(st.integers(0, 3))):
            k = draw(st.integers(1, 4))
            p = draw(st.lists(st.integers(0, m - 1), min_size=k, max_size=k))
            s = draw(st.lists(st.integers(0, m - 1), min_size=k, max_size=k))
            form = draw(st.sampled_from(["ints", "arrays", "broadcast"]))
            if form == "ints":
                out.append(("edge", p[0], s[0]))
            elif form == "arrays":
                out.append(("edge", np.array(p), np.array(s)))
            else:
                out.append(("edge", p[0], np.array(s)))
    return out


@given(calls())
@settings(max_examples=150, deadline=None)
def test_columns_and_edges_equal_the_plain_construction(seq):
    fb = FragBuilder("allreduce", "ring", N, 1024, CollectivesConfig(), semantics=True)
    cols = {c: [] for c in COLUMNS}
    pairs = []
    for item in seq:
        if item[0] == "add":
            _, rank, kw = item
            fb._add(rank=np.array(rank), **kw)
            for c, (arg, _, dt, _) in COLUMNS.items():
                cols[c].append(np.broadcast_to(np.asarray(kw[arg]), len(rank)).astype(dt))
            for v in kw.values():       # the builder copied the arrays: changing them now changes nothing
                if isinstance(v, np.ndarray) and v.ndim:
                    v[:] = 7
        else:
            _, p, s = item
            fb.edge(p, s)
            bp, bs = np.broadcast_arrays(np.asarray(p, np.int64), np.asarray(s, np.int64))
            pairs += list(zip(bp.ravel().tolist(), bs.ravel().tolist()))
    ids = np.arange(fb.m)
    frag = fb._fragment(ids[:1], ids[-1:])
    for c, (_, field, dt, _) in COLUMNS.items():
        got = getattr(frag, field) if field else getattr(frag.sem, c)
        want = np.concatenate(cols[c])
        assert got.dtype == dt and np.array_equal(got, want), c
    want = sorted(pairs)
    assert [(int(a), int(b)) for a, b in zip(frag.edge_src, frag.edge_dst)] == want
    assert frag.edge_src.dtype == frag.edge_dst.dtype == np.int64
