"""Replay rings are storage: how many slots a channel's ring starts with never shows in the results.

Rings start small and double (all channels at once) when a channel's unacknowledged units fill its ring
(pyx/fabric/_kernel/datalink.pxi, ring_grow), so units must keep their order and contents across every growth,
also while a go-back-N replay is reading them. Exact only if runs starting from one slot per channel (growing
at the first two units in flight, and again and again) and from rings sized for the whole window (never growing)
give identical task times, counters, link state, transfers and event counts.
"""
from hypothesis import given, settings

from fabric.config import load_config
from fabric.network import build
from fabric.taskgraph import all_to_all_graph

from strategies import fabric_case
from test_event_queue import assert_same, run_engine

WHOLE_WINDOW = 1 << 20      # more than any window: the ring is sized for the window at the start


def without_storage(run):
    state, arrays = run
    return dict(state, totals={k: v for k, v in state["totals"].items() if k != "replay_ring_slots"}), arrays


@given(fabric_case())
@settings(max_examples=40, deadline=None)
def test_ring_growth_changes_nothing_on_random_fabrics_with_errors(case):
    cfg, topo, graph, faults = case
    grown = run_engine(cfg, topo, graph, faults, replay_ring_slots=1)
    whole = run_engine(cfg, topo, graph, faults, replay_ring_slots=WHOLE_WINDOW)
    assert_same(without_storage(grown), without_storage(whole))


def test_rings_grow_during_replays_on_a_busy_mesh_and_change_nothing():
    """Bit errors and lost Acks make replays; Acks every 64 packets let up to 64 units wait unacknowledged."""
    cfg = load_config(preset="mesh-4x4x4", overrides={
        "txn.max_payload_bytes": 256, "phy.ber": 1e-6, "link.ack_every_packets": 64, "link.ack_timer_ns": 2000.0})
    topo = build(cfg)
    faults = [("corrupt_flit", 3, 40, 3), ("lose_ack", 7, 5, 2), ("retrain", 5, 400_000, 1)]
    graph = all_to_all_graph(topo.n_ranks, 2048)
    grown = run_engine(cfg, topo, graph, faults, replay_ring_slots=1)
    whole = run_engine(cfg, topo, graph, faults, replay_ring_slots=WHOLE_WINDOW)
    assert 1 < grown[0]["totals"]["replay_ring_slots"] < whole[0]["totals"]["replay_ring_slots"]
    assert grown[1]["c_replays"].sum() > 0 and grown[0]["events"] > 100_000
    assert_same(without_storage(grown), without_storage(whole))
