"""The PHY's countdown skips only looks that could not have found anything.

Each unit sent asks the physical layer whether it is corrupted (injected flit faults, bit errors placed by skip
sampling). Most units end before their channel's next fault and next errored bit, and a per-channel countdown of
bytes lets them skip the look (pyx/fabric/_kernel/phy.pxi, phy_unit and last_byte_before). Exact only if every
run gives identical results with the countdown off (every unit looked at): task times, counters (corrupted units
and flits), link state, transfers and event counts. High bit error rates put errors at unit boundaries often, so
a bound one byte off shows.
"""
import numpy as np
from hypothesis import given, settings

from fabric.config import load_config
from fabric.network import build
from fabric.taskgraph import all_to_all_graph, transfer_graph
from fabric.experiments.probe_link import two_node_topology

from strategies import fabric_case, link_configs, link_faults, link_traffic
from test_event_queue import assert_same, run_engine


@given(cfg=link_configs(), graph=link_traffic(), faults=link_faults())
@settings(max_examples=100, deadline=None)
def test_countdown_changes_nothing_on_a_link_with_errors_and_faults(cfg, graph, faults):
    topo = two_node_topology(cfg)
    assert_same(run_engine(cfg, topo, graph, faults), run_engine(cfg, topo, graph, faults, phy_countdown=False))


@given(fabric_case())
@settings(max_examples=30, deadline=None)
def test_countdown_changes_nothing_on_random_fabrics(case):
    cfg, topo, graph, faults = case
    assert_same(run_engine(cfg, topo, graph, faults), run_engine(cfg, topo, graph, faults, phy_countdown=False))


def test_countdown_changes_nothing_on_a_mesh_with_many_bit_errors():
    cfg = load_config(preset="mesh-4x4x4", overrides={"txn.max_payload_bytes": 256, "phy.ber": 2e-5})
    topo = build(cfg)
    faults = [("corrupt_flit", 3, 40, 3), ("corrupt_flit", 9, 1000, 7)]
    faults += [("corrupt_flit", 5, n, 1) for n in range(100, 3000, 7)]    # faulted flits at every offset in units
    graph = all_to_all_graph(topo.n_ranks, 2048)
    looked = run_engine(cfg, topo, graph, faults, phy_countdown=False)
    assert looked[1]["c_flits_corrupted"].sum() > 1000
    assert_same(run_engine(cfg, topo, graph, faults), looked)


def test_countdown_meets_faulted_flits_at_every_offset():
    """Units of every size from 17 to 416 bytes end at every offset into a flit; every 5th flit is faulted."""
    cfg = load_config(overrides={"txn.max_payload_bytes": 512})
    n = 400
    graph = transfer_graph(np.zeros(n, np.int32), np.ones(n, np.int32), np.arange(1, n + 1, dtype=np.int64),
                           np.zeros(n, np.int8))
    faults = [("corrupt_flit", 0, f, 1) for f in range(0, 600, 5)]
    looked = run_engine(cfg, two_node_topology(cfg), graph, faults, phy_countdown=False)
    assert looked[1]["c_corrupted"].sum() >= 100
    assert_same(run_engine(cfg, two_node_topology(cfg), graph, faults), looked)
