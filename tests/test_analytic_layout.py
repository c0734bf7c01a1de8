"""The analytic engine's own records (AnXC per transfer, AnC per channel; docs/kernel.md §Task-graph executor): it
keeps no XferC, so what it reports of its transfers must be what the packet engine's set-up builds, and the calls
that need packets (permanent faults) must refuse it."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric import sim
from fabric._check_build import kernel
from fabric.config import load_config
from fabric.network import build
from fabric.taskgraph import transfer_graph

CFG = load_config(preset="torus-4x4x4")
TOPO = build(CFG)
R = TOPO.n_ranks


def engine(graph, analytic):
    return kernel.Engine(sim.kernel_params(CFG, TOPO), sim.as_arrays(TOPO), graph, analytic)


@st.composite
def transfers(draw):
    n = draw(st.integers(1, 40))
    ends = st.integers(-1, R)                      # -1 and R: no accelerator there (an Unsupported Request)
    src = np.array(draw(st.lists(ends, min_size=n, max_size=n)))
    dst = np.array(draw(st.lists(ends, min_size=n, max_size=n)))
    nbytes = np.array(draw(st.lists(st.integers(1, 1 << 20), min_size=n, max_size=n)))
    op = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))  # store, load, UP leg, DOWN leg
    return transfer_graph(src, dst, nbytes, op)


@settings(max_examples=30, deadline=None)
@given(transfers())
def test_analytic_transfer_records_match_the_packet_engines_set_up(graph):
    a, p = engine(graph, True).transfers(), engine(graph, False).transfers()
    for col in ("src", "dst", "total_B", "status", "kind", "path"):
        np.testing.assert_array_equal(a[col], p[col], err_msg=col)


@settings(max_examples=30, deadline=None)
@given(transfers())
def test_analytic_route_graph_holds_exactly_the_paths_taken(graph):
    """The analytic engine interns only the paths its transfers take (an in-switch leg crosses its one hop and takes
    none past it; every other path stays kernel.PATH_UNBUILT), each once, and from each the walk gives its route's
    hops from the second on, as the packet engine's graph of every path does."""
    eng = engine(graph, True)
    g, xf = eng.route_graph(), eng.transfers()
    taken = np.unique(xf["path"][(xf["path"] >= 0) & (xf["kind"] != 3)])
    built = np.flatnonzero(g["at1"] != kernel.PATH_UNBUILT)
    np.testing.assert_array_equal(built, taken)
    flat = (TOPO.path_ch.astype(np.int64) << g["vcl_bits"]) | TOPO.path_vcl
    for p in taken:
        walk, node = [], g["at1"][p]
        while node >= 0:
            walk.append(g["hv"][node])
            node = g["next"][node]
        assert walk == flat[TOPO.path_ptr[p] + 1:TOPO.path_ptr[p + 1]].tolist()
    assert len(g["hv"]) == len(set(zip(g["hv"].tolist(), g["next"].tolist())))


@settings(max_examples=30, deadline=None)
@given(transfers())
def test_analytic_engine_completes_every_task_no_earlier_than_issued(graph):
    eng = engine(graph, True)
    assert eng.run() == kernel.DONE
    start, end = eng.task_times()
    assert (start >= 0).all() and (end >= start).all()


def test_permanent_faults_refuse_the_analytic_engine():
    eng = engine(transfer_graph(0, 1, 4096), True)
    for call in (lambda: eng.kill_channel(0), lambda: eng.revive_channel(0),
                 lambda: eng.set_channel_rate(0, 1.0)):
        with pytest.raises(ValueError, match="packet engine"):
            call()
