"""Arbitration is skipped where it cannot change anything, and skipping changes nothing.

An idle output is arbitrated after every event that may let one of its queue heads go. Most such events cannot on
the channel they touch (a packet entering a switch pipeline, an Ack that relieved no limit, a credit return with no
head short of credits, a grant that released no store), and the kernel skips those arbitrations when the channel is
settled (pyx/fabric/_kernel/switch.pxi, settled()). Exact only if the run with skip_settled=False, which arbitrates
at every such event, gives identical task times, counters, link state, transfers and event counts.
"""
import pytest
from hypothesis import given, settings

from fabric.config import load_config
from fabric.network import build
from fabric.taskgraph import all_to_all_graph

from strategies import fabric_case
from test_event_queue import assert_same, run_engine


def without_cost(run):
    """The arbitration count is the cost being cut, not a result."""
    state, arrays = run
    state = dict(state, totals={k: v for k, v in state["totals"].items() if k != "arbitrations"})
    return state, arrays


@given(fabric_case())
@settings(max_examples=60, deadline=None)
def test_skipping_settled_arbitrations_changes_nothing_on_random_fabrics_with_errors(case):
    cfg, topo, graph, faults = case
    every = run_engine(cfg, topo, graph, faults, skip_settled=False)
    skip = run_engine(cfg, topo, graph, faults)
    assert skip[0]["totals"]["arbitrations"] <= every[0]["totals"]["arbitrations"]
    assert_same(without_cost(skip), without_cost(every))


@pytest.mark.parametrize("arbitration", ["round_robin", "fixed_priority"])
def test_a_busy_mesh_skips_arbitrations_and_changes_nothing(arbitration):
    """Grants short (stores held), a replay buffer that limits, bit errors, and every fault kind on some links."""
    cfg = load_config(preset="mesh-4x4x4", overrides={
        "txn.max_payload_bytes": 256, "txn.max_read_request_bytes": 256, "phy.ber": 1e-6,
        "endpoint.e2e_window_bytes": 1024,
        "link.replay_buffer_flits": 6, "switch.arbitration": arbitration})
    topo = build(cfg)
    faults = [("corrupt_flit", 3, 40, 3), ("lose_ack", 7, 5, 2), ("lose_credit", 11, 9, 2), ("retrain", 5, 400_000, 1)]
    every = run_engine(cfg, topo, all_to_all_graph(topo.n_ranks, 2048), faults, skip_settled=False)
    skip = run_engine(cfg, topo, all_to_all_graph(topo.n_ranks, 2048), faults)
    assert every[0]["totals"]["e2e_holds"] > 0 and every[0]["totals"]["events"] > 100_000
    assert skip[0]["totals"]["arbitrations"] < 0.9 * every[0]["totals"]["arbitrations"]
    assert_same(without_cost(skip), without_cost(every))
