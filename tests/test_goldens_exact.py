"""Exact golden numbers of the packet engine: the kernel is deterministic bit for bit, so these pin integers.

Network-bound cases only (a compute-bound step hides a network regression). A change that moves any of these
numbers changes the model: update them deliberately, with the reason in the commit message. (Last update: switch
inputs hold a credit round trip per output, and the analytic engine's rank ports interleave their transfers' heads,
issue 18 item 5.) The analytic engine is pinned on the toy step too, and the toy step is chosen so that the two
engines disagree (a 64 KiB one-shot over 64 ranks: the packet engine's shared input pools still fill there, the
analytic engine has no finite buffers: 177.3 vs 153.4 us), so a golden of one cannot pass for the other.
"""
import numpy as np
import pytest

from fabric import collectives, sim
from fabric.config import load_config, with_overrides
from fabric.network import build
from fabric.taskgraph import COMPUTE, GraphBuilder, all_to_all_graph, transfer_graph


def summary(res: sim.RunResult) -> dict:
    c = res.counters
    return dict(end_ps=int(res.task_end_ps.max()), events=int(res.events), packets=int(c["packets"].sum()),
                tlp_B=int(c["tlp_B"].sum()), replays=int(c["replays"].sum()),
                credit_stall_ps=int(c["credit_stall_ps"].sum()))


def toy_step(cfg) -> object:
    """2 us of compute on 64 ranks, a 64 KiB one-shot AllReduce across them, 2 us of compute."""
    b = GraphBuilder(64)
    ranks = np.arange(64)
    before = b.add_tasks(COMPUTE, ranks, stream=0, duration_ps=2_000_000)
    start, done, _ = b.add_fragment(collectives.template("allreduce", "oneshot", 65536, 64, cfg), ranks)
    after = b.add_tasks(COMPUTE, ranks, stream=0, duration_ps=2_000_000)
    b.add_edges(before, start)
    b.add_edges(done, after)
    return b.build()


def test_saturated_link():
    cfg = load_config("link")
    got = summary(sim.run(cfg, build(cfg), transfer_graph(0, 1, 4096 * 20000)))
    assert got == dict(end_ps=1_326_637_000, events=113_097, packets=20_000, tlp_B=82_240_000, replays=0,
                       credit_stall_ps=0)


def test_link_at_ber_1e_5_retransmits():
    cfg = with_overrides(load_config("link"), {"phy.ber": 1e-5})
    got = summary(sim.run(cfg, build(cfg), transfer_graph(0, 1, 4096 * 20000)))
    assert got == dict(end_ps=7_789_167_000, events=155_989, packets=20_000, tlp_B=141_662_512, replays=8_561,
                       credit_stall_ps=5_495_645_375)


def test_all_to_all_on_a_congested_mesh():
    cfg = load_config("mesh-4x4x4", overrides={"txn.max_payload_bytes": 256})
    got = summary(sim.run(cfg, build(cfg), all_to_all_graph(64, 4096)))
    assert got == dict(end_ps=5_584_000, events=764_982, packets=245_760, tlp_B=66_846_720, replays=0,
                       credit_stall_ps=0)


@pytest.fixture(scope="module")
def toy():
    cfg = load_config("sd200")
    topo, g = build(cfg), toy_step(cfg)
    return {e: summary(sim.run(cfg, topo, g, engine=e)) for e in ("packet", "analytic")}


def test_toy_step_packet_engine(toy):
    assert toy["packet"] == dict(end_ps=177_279_400, events=1_217_236, packets=255_744, tlp_B=935_454_720,
                                 replays=0, credit_stall_ps=9_997_733_500)


def test_toy_step_analytic_engine(toy):
    assert toy["analytic"] == dict(end_ps=153_393_650, events=36_800, packets=0, tlp_B=0, replays=0,
                                   credit_stall_ps=0)
    assert toy["packet"]["end_ps"] != toy["analytic"]["end_ps"]
