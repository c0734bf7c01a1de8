"""Property tests: a symbolic executor proves every fragment computes its collective, with no duplicate
contribution, no unwritten read and no race, for random group sizes, sizes and library settings."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric import collectives
from fabric.collectives.symbolic import SemanticError, check
from fabric.config import CollectivesConfig
from fabric.taskgraph import BUF_TMP, REDUCE, TRANSFER, GraphBuilder

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

configs = st.builds(CollectivesConfig, fold_flags=st.booleans(), entry_barrier=st.booleans(),
                    step_ns=st.sampled_from([0.0, 100.0]), launch_ns=st.sampled_from([0.0, 1000.0]),
                    channels=st.integers(1, 3), channel_min_bytes=st.sampled_from([1, 16, 1 << 16]))
sizes = st.one_of(st.integers(0, 40), st.integers(41, 600))


@st.composite
def cases(draw, kind, algorithm):
    if algorithm == "halving_doubling" and kind != "allreduce":
        n = draw(st.sampled_from([2, 4, 8, 16]))
    else:
        n = 2 if kind == "sendrecv" else draw(st.integers(2, 17))
    root = draw(st.integers(0, n - 1)) if kind == "broadcast" else 0
    return n, draw(sizes), root, draw(configs)


def prove(kind, alg, n, M, root, cc):
    frag = collectives.build(kind, alg, M, n, cc, root=root)
    ranks = np.random.default_rng(n * 1000 + M).permutation(n + 3)[:n]  # any global ranks
    g = frag.to_graph(ranks=ranks, n_ranks=n + 3)
    g.validate()
    check(g)


@pytest.mark.parametrize("alg", ["oneshot", "twoshot", "ring", "halving_doubling"])
@SETTINGS
@given(data=st.data())
def test_allreduce(alg, data):
    prove("allreduce", alg, *data.draw(cases("allreduce", alg)))


@pytest.mark.parametrize("kind, alg", [("reduce_scatter", "direct"), ("reduce_scatter", "ring"),
                                       ("reduce_scatter", "halving_doubling"), ("allgather", "direct"),
                                       ("allgather", "ring"), ("allgather", "halving_doubling"),
                                       ("alltoall", "direct"), ("broadcast", "direct"), ("sendrecv", "direct")])
@SETTINGS
@given(data=st.data())
def test_other_collectives(kind, alg, data):
    prove(kind, alg, *data.draw(cases(kind, alg)))


def test_several_collectives_in_one_graph_keep_separate_buffers():
    b = GraphBuilder(9, semantics=True)
    f1 = collectives.build("allreduce", "ring", 300, 4)
    f2 = collectives.build("alltoall", "direct", 90, 3)
    _, d1, _ = b.add_fragment(f1, [0, 2, 4, 6])
    s2, _, _ = b.add_fragment(f2, [6, 7, 8])
    b.add_edges(d1[3], s2[0])
    check(b.build(validate=True))


# ---------------------------------------------------------------- the checker itself must catch broken fragments

def _mutated(frag, **changes):
    return dataclasses.replace(frag, **changes)


def _graph(frag):
    return frag.to_graph()


def test_checker_catches_a_duplicate_contribution():
    f = collectives.build("allreduce", "oneshot", 64, 4)
    s = f.sem
    # make rank 0's reduce read its own input twice instead of rank 1's slot
    red = np.flatnonzero((f.task_kind == REDUCE) & (f.rank == 0))[0]
    src_buf, src_off = s.src_buf.copy(), s.src_off.copy()
    j = s.src_ptr[red] + 1
    src_buf[j], src_off[j] = 0, 0
    bad = _mutated(f, sem=dataclasses.replace(s, src_buf=src_buf, src_off=src_off))
    with pytest.raises(SemanticError, match=r"contributions \{0: 2"):
        check(_graph(bad))


def test_checker_catches_a_missing_dependency_race():
    f = collectives.build("allreduce", "twoshot", 64, 4)
    g = f.to_graph()
    # drop the edges from the reduce-scatter stores to their receivers' wait: reduces may read unwritten slots
    xf = np.flatnonzero((f.task_kind == TRANSFER) & (f.sem.dst_buf == BUF_TMP))
    keep = ~np.isin(f.edge_src, xf)
    bad = _mutated(f, edge_src=f.edge_src[keep], edge_dst=f.edge_dst[keep])
    with pytest.raises(SemanticError, match="race|nobody wrote"):
        check(_graph(bad))
    check(g)


def test_checker_catches_a_shifted_chunk():
    f = collectives.build("allgather", "direct", 64, 4)
    s = f.sem
    dst_off = s.dst_off.copy()
    t = np.flatnonzero(f.task_kind == TRANSFER)[0]
    dst_off[t] += 1
    with pytest.raises(SemanticError):
        check(_graph(_mutated(f, sem=dataclasses.replace(s, dst_off=dst_off))))


def test_checker_catches_write_after_read_race():
    # ring AllGather where rank 1 forwards before it has received: the forwarded chunk is unwritten or racy
    f = collectives.build("allgather", "ring", 40, 3, CollectivesConfig(step_ns=0, launch_ns=0))
    xf = np.flatnonzero(f.task_kind == TRANSFER)
    second = xf[(f.rank[xf] == 1)][1]
    keep = f.edge_dst != second
    with pytest.raises(SemanticError):
        check(_graph(_mutated(f, edge_src=f.edge_src[keep], edge_dst=f.edge_dst[keep])))
