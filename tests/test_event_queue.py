"""The kernel's event queue: delay lanes beside the heap pop exactly the heap's sequence.

Events created a fixed delay before they fire wait in FIFO lanes (pyx/fabric/_kernel/events.pxi, "delay lanes").
That is a speed-up only if it changes nothing: the same run with every event in the heap (event_lanes=0) must give
identical task times, counters, link state, transfers and event counts, also when run() is paused and resumed.
"""
import numpy as np
from hypothesis import given, settings

from fabric import sim
from fabric._kernel import kernel
from fabric.config import load_config
from fabric.network import build
from fabric.taskgraph import all_to_all_graph

from strategies import fabric_case


def run_engine(cfg, topo, graph, faults=(), event_lanes=16, lane_min_heap=0, slice_events=2**62, skip_settled=True,
               replay_ring_slots=16, phy_countdown=True):
    """lane_min_heap=0: events use their lanes from the start (the default, 64, keeps small runs in the heap)."""
    options = kernel.EngineOptions(event_lanes, lane_min_heap, skip_settled, replay_ring_slots, phy_countdown)
    eng = kernel.Engine(sim.kernel_params(cfg), sim.as_arrays(topo), sim.as_arrays(graph), False, options=options)
    for kind, ch, n, k in faults:
        eng.add_fault(sim.FAULTS[kind], int(ch), int(n), int(k))
    while eng.run(max_events=slice_events) == kernel.PAUSED:
        pass
    state = dict(totals=eng.totals(), now=eng.now_ps, events=eng.events)
    start, end = eng.task_times()
    arrays = dict(start=start.copy(), end=end.copy())
    arrays.update({"c_" + k: v.copy() for k, v in eng.counters().items()})
    arrays.update({"l_" + k: np.asarray(v) for k, v in eng.link_state().items()})
    arrays.update({"x_" + k: v for k, v in eng.transfers().items()})
    return state, arrays


def assert_same(a, b):
    assert a[0] == b[0]
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        assert np.array_equal(a[1][k], b[1][k]), k


@given(fabric_case())
@settings(max_examples=60, deadline=None)
def test_lanes_pop_the_heaps_sequence_on_random_fabrics_with_errors(case):
    cfg, topo, graph, faults = case
    heap_only = run_engine(cfg, topo, graph, faults, event_lanes=0)
    assert_same(run_engine(cfg, topo, graph, faults), heap_only)
    assert_same(run_engine(cfg, topo, graph, faults, slice_events=97), heap_only)
    assert_same(run_engine(cfg, topo, graph, faults, lane_min_heap=8), heap_only)   # events move between both


def test_lanes_pop_the_heaps_sequence_on_a_busy_mesh():
    cfg = load_config(preset="mesh-4x4x4", overrides={"txn.max_payload_bytes": 256, "phy.ber": 1e-6})
    topo = build(cfg)
    graph = all_to_all_graph(topo.n_ranks, 2048)
    heap_only = run_engine(cfg, topo, graph, event_lanes=0)
    assert heap_only[0]["events"] > 100_000
    assert_same(run_engine(cfg, topo, graph), heap_only)
    assert_same(run_engine(cfg, topo, graph, lane_min_heap=64), heap_only)
    # the lanes' winner tree is reshaped to their pop counts at 16 k, 64 k, 256 k lane events: also across pauses
    assert_same(run_engine(cfg, topo, graph, slice_events=4099), heap_only)


def test_lane_rings_shrink_back_after_a_burst():
    """The 4,032 transfers of a 64-rank all-to-all are issued at once: their lane's ring grows to hold them all,
    then lanes_trim halves it as it drains. (Storage only: the busy-mesh test above runs the same traffic, trims
    included, against the heap alone.)"""
    cfg = load_config(preset="mesh-4x4x4", overrides={"txn.max_payload_bytes": 256})
    topo = build(cfg)
    eng = kernel.Engine(sim.kernel_params(cfg), sim.as_arrays(topo), sim.as_arrays(all_to_all_graph(64, 256)),
                        False, options=kernel.EngineOptions(event_lanes=16, lane_min_heap=0))
    eng.run(max_events=1)
    burst = eng.lane_slots
    assert burst >= 4096 + 256 and eng.pending_events >= 4032
    assert eng.run() == kernel.DONE and eng.pending_events == 0
    assert eng.lane_slots < burst // 2
