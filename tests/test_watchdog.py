"""The watchdog: a fabric that cannot make progress stops with a report of what is stuck where, never hangs; a credit
deadlock is reported with the cycle of channels whose heads wait for each other's credits."""
import json

import numpy as np
import pytest

from fabric import routing, sim
from fabric.config import load_config
from fabric.errors import SimulationError
from fabric.network import build
from fabric.taskgraph import transfer_graph

RING = {"topology.kind": "accel_torus", "topology.accel_mesh.mesh_dims": "5",
        "topology.accel_mesh.links_per_neighbor": 1, "link.credit_pool_flits": 40, "txn.max_payload_bytes": 256}


def ring_two_hops_each(cfg, topo, **kw):
    """Every accelerator of the 5-ring stores 1 MiB to the one two hops away."""
    src = np.arange(5)
    return sim.run(cfg, topo, transfer_graph(src, (src + 2) % 5, 1 << 20), **kw)


def test_hopeless_link_is_reported_not_hung():
    # every unit is corrupted with probability ~1: the link replays and retrains forever without progress
    cfg = load_config(preset="link", overrides={"phy.ber": 0.05, "sim.watchdog_ns": 20000,
                                                "txn.max_payload_bytes": 256})
    topo = build(cfg)
    with pytest.raises(SimulationError, match=r"(?s)no progress for 20000 ns .*no cycle of credit waits.*"
                                              r"acc0->acc1: \d+ unacked") as exc:
        sim.run(cfg, topo, transfer_graph(0, 1, 256 * 100))
    assert exc.value.stuck["channels"][0]["unacked"] > 0


def test_stuck_run_can_be_inspected_without_raising():
    cfg = load_config(preset="link", overrides={"phy.ber": 0.05, "sim.watchdog_ns": 20000,
                                                "txn.max_payload_bytes": 256})
    r = sim.run(cfg, build(cfg), transfer_graph(0, 1, 256 * 100), raise_on_stuck=False)
    assert r.outcome == "stuck" and r.stuck["channels"][0]["unacked"] > 0 and r.stuck["cycle"] == []
    assert r.counters["retrains"].sum() >= 1


def test_stuck_command_writes_its_report_to_json(tmp_path):
    from click.testing import CliRunner

    from fabric.cli.probe import main
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["link", "--ber", "0.05", "--packets", "100", "--set", "sim.watchdog_ns=20000",
                                    "--set", "txn.max_payload_bytes=256", "--json", str(out)])
    assert res.exit_code == 2 and res.stderr.startswith("error: no progress") and "Traceback" not in res.output
    data = json.loads(out.read_text())
    assert data["stuck"]["channels"][0]["name"] == "acc0->acc1" and data["stuck"]["cycle"] == []
    assert data["error"] == res.stderr.strip()[len("error: "):]


def test_forced_cyclic_routing_reports_its_credit_cycle():
    """Dimension order on a ring without dateline VCs (refused by build, forced here) deadlocks once every buffer
    of the ring is full: the report names a cycle of channels, each one's head short of credits on the next."""
    cfg = load_config(overrides=RING)
    topo = build(cfg, check=False)
    routing.route(topo, "dor", datelines=False)
    r = ring_two_hops_each(cfg, topo, raise_on_stuck=False)
    assert r.outcome == "stuck" and r.totals["tasks_left"] == 5 and r.totals["packets_live"] > 0
    cycle, state = r.stuck["cycle"], r.link_state
    assert len(cycle) >= 2
    assert len({(q["in_ch"], q["in_vc"]) for q in cycle}) == len(cycle)          # a simple cycle
    for q, nxt in zip(cycle, cycle[1:] + cycle[:1]):
        assert topo.ch_dst[q["in_ch"]] == topo.ch_src[q["channel"]]               # a path of real channels,
        assert (q["channel"], q["vc"]) == (nxt["in_ch"], nxt["in_vc"])            # closing on itself,
        assert q["credits"] == state["credits_available"][q["channel"], q["vc"]] < q["needed"]   # each one short
        assert state["buffer_occupancy"][q["in_ch"], q["in_vc"]] >= q["queued"] * q["needed"] > 0
    # the deadlock is the ring in one direction: each channel of it is in the cycle
    assert sorted(q["channel"] for q in cycle) == sorted(topo.path_for_flow(i, (i + 1) % 5, 0)[0][0] for i in range(5))
    json.dumps(r.stuck)                                                           # for a command's --json


def test_credit_deadlock_message_is_one_block_naming_the_cycle():
    cfg = load_config(overrides=RING)
    topo = build(cfg, check=False)
    routing.route(topo, "dor", datelines=False)
    with pytest.raises(SimulationError) as exc:
        ring_two_hops_each(cfg, topo)
    head, *rest = str(exc.value).splitlines()
    assert "credit deadlock, a cycle of 5 channels" in head
    names = [q["from_name"] for q in exc.value.stuck["cycle"]]
    assert head.endswith(" -> ".join(f"{n} VC0" for n in names + names[:1]))
    assert all(any(line.lstrip().startswith(f"{n} VC0:") for line in rest) for n in names)


def test_a_chain_of_credit_waits_behind_a_dead_link_is_not_a_cycle():
    """Deadlock-free routes (datelines) with one link that corrupts every flit: heads upstream of it wait for its
    credits, a chain, not a cycle."""
    cfg = load_config(overrides={**RING, "sim.watchdog_ns": 1e5, "link.vcs": 4})
    topo = build(cfg)
    dead = int(topo.path_for_flow(1, 2, 0)[0][0])
    r = ring_two_hops_each(cfg, topo, raise_on_stuck=False, faults=[("corrupt_flit", dead, 0, 1 << 40)])
    assert r.outcome == "stuck" and r.stuck["cycle"] == []
    waits = [q for q in r.stuck["queues"] if q["in_ch"] >= 0 and q["credits"] < q["needed"]]
    assert any(q["channel"] == dead for q in waits)                               # something waits for it


@pytest.mark.parametrize("watchdog_ns", [1e5, 1e6])
def test_the_watchdog_fires_on_a_forced_livelock_within_its_bound(watchdog_ns):
    """Issue 33 item 8: a link that corrupts every unit replays and retrains forever, events never stop, nothing
    progresses (no unit accepted from t=0). The watchdog must stop the run after watchdog_ns without progress, at
    its first check past that (every 1024 events), never before: an event budget 20x that long makes a watchdog
    that never fires a failure here, not a hang."""
    from fabric._check_build import kernel
    cfg = load_config(preset="link", overrides={"phy.ber": 0.05, "sim.watchdog_ns": watchdog_ns,
                                                "txn.max_payload_bytes": 256})
    graph = transfer_graph(0, 1, 256 * 100)
    twin = sim.make_engine(cfg, build(cfg), graph)          # the same run, stopped where the bound lies
    assert twin.run(max_events=10**7, until_ps=int(watchdog_ns * 1000)) == kernel.PAUSED
    first_check_past = (twin.events // 1024 + 1) * 1024
    eng = sim.make_engine(cfg, build(cfg), graph)
    assert eng.run(max_events=20 * first_check_past) == kernel.STUCK
    assert eng.totals()["delivered"] == 0 and eng.totals()["tasks_left"] == 1
    assert eng.now_ps > watchdog_ns * 1000 and eng.events <= first_check_past
