"""PHY error options: the FEC's post-FEC error rate, its rate and latency cost, and Gilbert-Elliott bursts."""
import math

import pytest

from fabric import phy, sim
from fabric.config import load_config
from fabric.errors import ConfigError
from fabric.taskgraph import transfer_graph
from fabric.experiments.probe_link import probe_link, two_node_topology

KP4 = {"phy.fec_n": 544, "phy.fec_k": 514, "phy.fec_symbol_bits": 10}
LIGHT = {"phy.fec_n": 272, "phy.fec_k": 258, "phy.fec_symbol_bits": 10}


def exact_tail(n, t, q):
    return sum(math.comb(n, j) * q ** j * (1 - q) ** (n - j) for j in range(t + 1, n + 1))


@pytest.mark.parametrize("code", [KP4, LIGHT])
@pytest.mark.parametrize("ber", [1e-5, 1e-4, 1e-3])
def test_codeword_failure_is_the_binomial_tail_of_symbol_errors(code, ber):
    cfg = load_config(overrides=code)
    n, k, m = code["phy.fec_n"], code["phy.fec_k"], code["phy.fec_symbol_bits"]
    q = 1 - (1 - ber) ** m
    want = exact_tail(n, (n - k) // 2, q)
    assert phy.codeword_failure(cfg, ber) == pytest.approx(want, rel=1e-6, abs=1e-300)
    # a flit fails when a codeword it touches does; the kernel's BER reproduces that flit error rate
    pf = phy.flit_error_rate(cfg, ber)
    assert pf == pytest.approx(-math.expm1(phy.codewords_per_flit(cfg) * math.log1p(-want)), rel=1e-6, abs=1e-300)
    b = phy.effective_ber(cfg, ber)
    assert -math.expm1(8 * cfg.phy.flit_bytes * math.log1p(-b)) == pytest.approx(pf, rel=1e-6, abs=1e-300)


def test_fec_corrects_what_it_should():
    off, kp4 = load_config(), load_config(overrides=KP4)
    for ber in (1e-8, 1e-6, 1e-4):
        assert phy.flit_error_rate(kp4, ber) < 1e-6 * phy.flit_error_rate(off, ber)
    assert phy.flit_error_rate(kp4, 1e-12) < 1e-100
    rates = [phy.flit_error_rate(kp4, b) for b in (1e-4, 3e-4, 1e-3, 3e-3)]
    assert rates == sorted(rates) and rates[-1] > 1e-3          # strength has a limit


def test_fec_costs_its_rate_and_latency():
    base, fec = load_config(overrides={"phy.ber": 0.0}), load_config(overrides={"phy.ber": 0.0, **KP4})
    assert phy.data_gbps(fec) == pytest.approx(phy.data_gbps(base) * 514 / 544)
    assert phy.link_latency_ps(fec) - phy.link_latency_ps(base) == phy.ps(fec.phy.fec_latency_ns)
    r0, r1 = probe_link(base, packets=2000), probe_link(fec, packets=2000)
    assert r1["payload_efficiency"] == pytest.approx(r0["payload_efficiency"] * 514 / 544, abs=0.003)
    # a single small store: one more hop latency of FEC, and its flit at the slower rate
    g = transfer_graph(0, 1, 64)
    t0 = sim.run(base, two_node_topology(base), g).task_end_ps[0]
    t1 = sim.run(fec, two_node_topology(fec), g).task_end_ps[0]
    flit = fec.phy.flit_bytes * (phy.ps_per_byte(phy.data_gbps(fec)) - phy.ps_per_byte(phy.data_gbps(base)))
    assert t1 - t0 == pytest.approx(phy.ps(fec.phy.fec_latency_ns) + flit, abs=2)


def test_post_fec_corruption_follows_the_computed_rate():
    """A light code at a raw BER it cannot always correct: errored flits ~ Binomial(flits, post-FEC rate)."""
    cfg = load_config(overrides={**LIGHT, "phy.ber": 1.2e-3, "sim.seed": 5})
    r = probe_link(cfg, payload_bytes=1024, packets=3000)
    p = phy.flit_error_rate(cfg, 1.2e-3)
    assert 1e-4 < p < 0.05
    n = r["_result"].counters["flits"][0]
    got = r["_result"].counters["flits_corrupted"][0]
    assert abs(got - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1, (got, n * p)
    assert r["packets_delivered"] == r["packets_sent"] and r["duplicates"] == 0 and r["out_of_order"] == 0
    assert r["pre_fec_flit_error"] > 10 * r["post_fec_flit_error"]


def test_bad_fec_code_is_refused():
    with pytest.raises(ConfigError, match="fec_k < fec_n"):
        load_config(overrides={"phy.fec_n": 500, "phy.fec_k": 514})
    with pytest.raises(ConfigError, match="2\\^fec_symbol_bits"):
        load_config(overrides={"phy.fec_n": 544, "phy.fec_k": 514, "phy.fec_symbol_bits": 8})


BURST = {"phy.ber": 0.0, "phy.ge_bad_ber": 1e-4, "phy.ge_good_dwell_ns": 2000.0, "phy.ge_bad_dwell_ns": 50.0}


def test_bursts_hit_at_the_long_run_rate_and_are_recovered():
    cfg = load_config(overrides={**BURST, "sim.seed": 11})
    r = probe_link(cfg, payload_bytes=4096, packets=6000)
    c = r["_result"].counters
    pb = 50.0 / 2050.0
    assert r["burst_bad_fraction"] == pytest.approx(pb)
    p_bad = -math.expm1(8 * cfg.phy.flit_bytes * math.log1p(-1e-4))
    assert r["post_fec_flit_error"] == pytest.approx(pb * p_bad)
    want = c["flits"][0] * pb * p_bad
    assert abs(c["flits_corrupted"][0] - want) <= 0.35 * want, (c["flits_corrupted"][0], want)
    assert r["packets_delivered"] == r["packets_sent"] and r["duplicates"] == 0 and r["out_of_order"] == 0
    assert r["replays"] > 0


def test_bursts_cluster_errors():
    """At the same long-run flit error rate, bursts put several errored flits into one replay: fewer Naks per
    errored flit than independent errors."""
    burst = load_config(overrides={**BURST, "sim.seed": 3})
    pf = (50.0 / 2050.0) * -math.expm1(8 * burst.phy.flit_bytes * math.log1p(-1e-4))
    ber = -math.expm1(math.log1p(-pf) / (8 * burst.phy.flit_bytes))
    flat = load_config(overrides={"phy.ber": ber, "sim.seed": 3})
    rb, rf = probe_link(burst, payload_bytes=4096, packets=6000), probe_link(flat, payload_bytes=4096, packets=6000)
    assert rb["naks"] / rb["flits_corrupted"] < 0.8 * rf["naks"] / rf["flits_corrupted"]


def test_bursts_are_deterministic_from_the_seed():
    cfg = load_config(overrides={**BURST, "sim.seed": 9})
    a = probe_link(cfg, payload_bytes=1024, packets=3000)["_result"]
    b = probe_link(cfg, payload_bytes=1024, packets=3000)["_result"]
    for k in a.counters:
        assert (a.counters[k] == b.counters[k]).all(), k
    assert a.now_ps == b.now_ps


def test_options_off_change_nothing():
    """Defaults keep FEC and bursts off: setting their other parameters moves no number."""
    a = probe_link(load_config(overrides={"phy.ber": 1e-6, "sim.seed": 2}), payload_bytes=512, packets=2000)
    b = probe_link(load_config(overrides={"phy.ber": 1e-6, "sim.seed": 2, "phy.fec_k": 200,
                                          "phy.ge_good_dwell_ns": 5.0}), payload_bytes=512, packets=2000)
    for k in a["_result"].counters:
        assert (a["_result"].counters[k] == b["_result"].counters[k]).all(), k


def test_control_messages_with_wire_bytes_take_reverse_bandwidth():
    """Ack/UpdateFC bytes on the reverse channel delay its own data; in the flits' data-link bytes they do not."""
    g = transfer_graph([0, 1], [1, 0], 64 * 3000)
    times = {}
    for b in (0, 64):
        cfg = load_config(overrides={"phy.ber": 0.0, "txn.max_payload_bytes": 64, "link.control_wire_bytes": b,
                                     "link.ack_every_packets": 1})
        res = sim.run(cfg, two_node_topology(cfg), g)
        assert res.totals["delivered"] == res.counters["packets"].sum() and res.totals["out_of_order"] == 0
        times[b] = res.now_ps
    assert times[64] > 1.2 * times[0]
