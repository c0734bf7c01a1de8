"""The watchdog: a fabric that cannot make progress stops with a report of what is stuck where, never hangs."""
import pytest

from fabric import sim
from fabric.config import load_config
from fabric.errors import SimulationError
from fabric.network import build
from fabric.taskgraph import transfer_graph


def test_hopeless_link_is_reported_not_hung():
    # every unit is corrupted with probability ~1: the link replays and retrains forever without progress
    cfg = load_config(preset="link", overrides={"phy.ber": 0.05, "sim.watchdog_ns": 20000,
                                                "txn.max_payload_bytes": 256})
    topo = build(cfg)
    with pytest.raises(SimulationError, match=r"no progress for 20000 ns .*acc0->acc1: \d+ unacked"):
        sim.run(cfg, topo, transfer_graph(0, 1, 256 * 100))


def test_stuck_run_can_be_inspected_without_raising():
    cfg = load_config(preset="link", overrides={"phy.ber": 0.05, "sim.watchdog_ns": 20000,
                                                "txn.max_payload_bytes": 256})
    r = sim.run(cfg, build(cfg), transfer_graph(0, 1, 256 * 100), raise_on_stuck=False)
    assert r.outcome == "stuck" and r.stuck and r.stuck[0]["unacked"] > 0
    assert r.counters["retrains"].sum() >= 1
