"""The link probe: framing efficiency, BER statistics, determinism."""
import math

import pytest

from fabric import phy
from fabric.config import load_config
from fabric.tools.link_probe import probe_link


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
    small = load_config(overrides={"txn.header_bytes": 64})
    assert phy.payload_efficiency(small) < phy.payload_efficiency(cfg)


@pytest.mark.parametrize("ber", [1e-6, 1e-5])
def test_corrupted_flits_follow_the_binomial_expectation(ber):
    """Errored flits ~ Binomial(flits sent, p_flit); the count must lie within 5 standard deviations."""
    cfg = load_config(overrides={"phy.ber": ber, "sim.seed": 7})
    r = probe_link(cfg, payload_bytes=1024, packets=4000)
    flits_sent = r["_result"].counters["tlp_B"][0] / phy.flit_payload_bytes(cfg)
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
