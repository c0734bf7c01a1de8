"""The link probe: framing efficiency, BER statistics, determinism."""
import math

import numpy as np
import pytest

from fabric import phy, sim
from fabric.config import load_config
from fabric.taskgraph import transfer_graph
from fabric.experiments.probe_link import probe_link, two_node_topology


def test_measured_efficiency_matches_framing_at_ber_zero():
    cfg = load_config(overrides={"phy.ber": 0.0})
    r = probe_link(cfg, packets=5000)
    assert r["payload_efficiency_model"] >= 0.96
    assert abs(r["payload_efficiency"] - r["payload_efficiency_model"]) <= 0.005
    assert r["packets_delivered"] == r["packets_sent"] == 5000
    assert r["replays"] == 0 and r["credit_stall_ns"] == 0


def test_efficiency_model_is_computed_from_framing():
    cfg = load_config()
    p, h, f, o = 4096, cfg.txn.header_bytes, cfg.phy.flit_bytes, cfg.phy.flit_overhead_bytes
    assert phy.payload_efficiency(cfg) == pytest.approx(p / (p + h) * (f - o) / f)
    assert phy.payload_efficiency(cfg, p, alone=True) == pytest.approx(p / (math.ceil((p + h) / (f - o)) * f))
    small = load_config(overrides={"txn.header_bytes": 64})
    assert phy.payload_efficiency(small) < phy.payload_efficiency(cfg)


@pytest.mark.parametrize("over", [{}, {"phy.fec_n": 544}, {"phy.flit_bytes": 128, "txn.header_bytes": 24}])
@pytest.mark.parametrize("payload", [64, 224, 256, 1024, 4096])
def test_kernel_framing_matches_the_formula_at_every_size(over, payload):
    """Back to back (packets share flits) and alone (whole flits, the last padded): the kernel's flits and times
    against fabric.phy, also at a rate that is no whole number of ps per byte (FEC on)."""
    cfg = load_config(overrides={"phy.ber": 0.0, **over})
    r = probe_link(cfg, payload_bytes=payload, packets=1500)
    assert r["payload_efficiency"] == pytest.approx(r["payload_efficiency_model"], abs=0.003)
    assert r["payload_efficiency_alone"] == pytest.approx(r["payload_efficiency_alone_model"], rel=1e-12)
    assert r["payload_efficiency_alone"] <= r["payload_efficiency"] + 1e-9
    assert r["packets_delivered"] == r["packets_sent"] and r["out_of_order"] == 0 and r["duplicates"] == 0


def test_a_lone_packet_takes_the_flits_its_credits_count():
    """The wire time of a unit agrees with the flits it is charged for credits and the replay buffer."""
    cfg = load_config(overrides={"phy.ber": 0.0})
    for payload in (1, 64, 232, 233, 1000, 4096):
        n = 8
        g = transfer_graph([0] * n, 1, payload)
        g.update(succ_ptr=np.r_[np.arange(n), n - 1].astype(np.int64), succ_idx=np.arange(1, n, dtype=np.int32),
                 n_deps=np.r_[0, np.ones(n - 1)].astype(np.int32))
        res = sim.run(cfg, two_node_topology(cfg), g)
        assert res.counters["flits"][0] == n * phy.packet_flits(cfg, payload), payload
        flit_ps = cfg.phy.flit_bytes * phy.ps_per_byte(phy.data_gbps(cfg))
        assert res.counters["busy_ps"][0] <= n * phy.packet_flits(cfg, payload) * flit_ps + n


def test_a_flit_shared_by_packets_corrupts_them_all():
    """80 B packets back to back: three fill flit 0 and the fourth straddles into flit 1, so a fault on flit 0
    corrupts four units, and all are recovered."""
    cfg = load_config(overrides={"phy.ber": 0.0, "txn.max_payload_bytes": 64})
    r = probe_link(cfg, payload_bytes=64, packets=40, faults=[("corrupt_flit", 0, 0, 1)])
    assert r["units_corrupted"] == 4
    assert r["packets_delivered"] == 40 and r["duplicates"] == 0 and r["out_of_order"] == 0


@pytest.mark.parametrize("ber", [1e-6, 1e-5])
def test_corrupted_flits_follow_the_binomial_expectation(ber):
    """Errored flits ~ Binomial(flits sent, p_flit); the count must lie within 5 standard deviations."""
    cfg = load_config(overrides={"phy.ber": ber, "sim.seed": 7})
    r = probe_link(cfg, payload_bytes=1024, packets=4000)
    flits_sent = r["_result"].counters["flits"][0]
    p = -math.expm1(8 * cfg.phy.flit_bytes * math.log1p(-ber))
    mean, sd = flits_sent * p, math.sqrt(flits_sent * p * (1 - p))
    data_dir = r["_result"].counters["flits_corrupted"][0]
    assert abs(data_dir - mean) <= 5 * sd + 1, (data_dir, mean, sd)
    assert r["packets_delivered"] == r["packets_sent"] and r["duplicates"] == 0 and r["out_of_order"] == 0


def test_same_seed_same_counters_other_seed_differs():
    cfg = load_config(overrides={"phy.ber": 1e-6, "sim.seed": 3})
    a = probe_link(cfg, payload_bytes=512, packets=3000)["_result"]
    b = probe_link(cfg, payload_bytes=512, packets=3000)["_result"]
    for k in a.counters:
        assert (a.counters[k] == b.counters[k]).all(), k
    assert a.now_ps == b.now_ps and a.events == b.events
    c = probe_link(load_config(overrides={"phy.ber": 1e-6, "sim.seed": 4}), payload_bytes=512, packets=3000)
    assert c["_result"].counters["flits_corrupted"][0] != a.counters["flits_corrupted"][0] or \
        c["_result"].now_ps != a.now_ps


def test_default_ber_replays_are_rare():
    r = probe_link(load_config(), packets=2000)
    assert r["retrains"] == 0 and r["replays"] <= 1
