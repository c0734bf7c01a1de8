"""Tests that a broken recovery fails (issue 20, item 2), on what the kernel exposes (link_state, counters, totals,
transfers): recovery latency (a replay, not a timeout or a retrain), reads larger than one packet and one request
under a tag limit, end-to-end grants returned, and every pool back where it started, in the link and the fabric
suites alike. Hypothesis runs replay from the seed tests/conftest.py prints."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric import phy, sim
from fabric.config import load_config
from fabric.network import build
from fabric.taskgraph import transfer_graph
from fabric.experiments.probe_link import two_node_topology

from strategies import fabric_case, link_configs, link_faults, link_traffic


# ---------------------------------------------------------------- end-of-run accounting, shared by both suites

def check_accounting(cfg, graph, r):
    """Every delivery property and every pool the kernel exposes, at the end of a run."""
    t, c, ls, xf = r.totals, r.counters, r.link_state, r.transfers
    assert r.outcome == "done" and t["tasks_left"] == 0
    # no drop, no duplicate, in order
    assert t["delivered"] == t["carved"], "every packet carved at a source was delivered once"
    assert t["duplicates"] == 0 and t["out_of_order"] == 0
    assert t["packets_live"] == 0
    assert (xf["delivered_B"] == xf["total_B"]).all(), "no byte dropped"
    data = xf["kind"] != 1                      # stores and read completions carry data; read requests do not
    for i in np.flatnonzero(data):
        expect = sim.expected_csum(int(xf["dst"][i]), int(xf["src"][i]), int(xf["total_B"][i]),
                                   cfg.txn.max_payload_bytes)
        assert int(xf["csum"][i]) == expect, f"transfer {i}: bytes landed wrong"
    # link credits: all returned, never negative nor above the pool
    assert (ls["credits_available"] == ls["credit_pool_flits"]).all(), "credits end where they started"
    assert (ls["buffer_occupancy"] == 0).all(), "receive buffers drained"
    assert c["credit_errors"].sum() == 0
    # replay buffers: empty, every unit sent was accepted and acknowledged
    assert (ls["replay_count"] == 0).all(), "replay buffers empty"
    assert (ls["next_seq"] == ls["expected_seq"]).all(), "receivers expect exactly the next unsent sequence number"
    assert (ls["down_until_ps"] <= r.now_ps).all(), "no link left down"
    # channel queues empty
    assert (c["queue_len"] == 0).all()
    # every packet went on the wire at least once (replays only add units)
    assert (c["units"] >= c["packets"]).all()


@given(cfg=link_configs(), graph=link_traffic(), faults=link_faults())
@settings(max_examples=150)
def test_link_suite_accounting(cfg, graph, faults):
    r = sim.run(cfg, two_node_topology(cfg), graph, faults=faults)
    check_accounting(cfg, graph, r)


@given(fabric_case())
@settings(max_examples=80)
def test_fabric_suite_accounting(case):
    cfg, topo, graph, faults = case
    r = sim.run(cfg, topo, graph, faults=faults)
    check_accounting(cfg, graph, r)


@given(node=st.integers(0, 4095), src=st.integers(0, 4095), offset=st.integers(0, 2**40),
       nbytes=st.integers(1, 1 << 16))
def test_a_damaged_range_changes_its_checksum(node, src, offset, nbytes):
    """A unit accepted although corrupted (a broken CRC check) marks its packet's bytes damaged (datalink.pxi on_arrive:
    offset bit DAMAGED_BIT), and the checksum of its range at delivery differs from the clean one, always (c_mix is
    a bijection): check_accounting's checksums then fail, not only a counter."""
    from fabric._kernel.kernel import DAMAGED_BIT
    assert offset < 1 << DAMAGED_BIT
    assert sim.content_sum(node, src, offset | 1 << DAMAGED_BIT, nbytes) != sim.content_sum(node, src, offset, nbytes)


# ---------------------------------------------------------------- recovery latency: one replay per error

def _replay_cost_bound_ps(cfg, topo) -> float:
    """What one corrupted unit may cost when go-back-N works: the Nak's round trip and Ack coalescing, plus resending
    at most a full replay buffer; far below one replay timer."""
    fc = sim.flow_control(cfg, topo, warn=False)
    flit_ps = cfg.phy.flit_bytes * 8 * 1000 / phy.data_gbps(cfg)
    return (fc["replay_buffer_flits"] * flit_ps + 2 * phy.link_latency_ps(cfg) + phy.ps(cfg.link.ack_timer_ns)
            + phy.ps(cfg.link.credit_update_ns) + 2 * flit_ps)


@pytest.mark.parametrize("flits", [[100], [100, 500, 900, 1300, 1700], [10, 400, 401, 1999]])
def test_each_injected_error_costs_about_one_replay(flits):
    cfg = load_config(preset="link")
    topo = two_node_topology(cfg)
    g = transfer_graph(0, 1, 4096 * 2000)
    clean = sim.run(cfg, topo, g)
    r = sim.run(cfg, topo, g, faults=[("corrupt_flit", 0, n, 1) for n in flits])
    check_accounting(cfg, g, r)
    c = {k: int(v[0]) for k, v in r.counters.items()}
    assert c["retrains"] == 0, "a replay suffices: no retrain"
    assert c["replay_timeouts"] == 0, "the Nak starts the replay, not the timer"
    assert 1 <= c["replays"] <= len(flits) and c["units"] > c["packets"], "the lost units were resent"
    extra = int(r.task_end_ps.max() - clean.task_end_ps.max())
    per_error = extra / len(flits)
    bound = _replay_cost_bound_ps(cfg, topo)
    assert 0 <= per_error <= bound, f"{per_error / 1e3:.0f} ns per error, bound {bound / 1e3:.0f} ns"
    assert bound < 0.5 * phy.ps(cfg.link.replay_timer_ns), "the bound itself is below a replay timeout"


@given(ber=st.floats(2e-8, 4e-7), seed=st.integers(0, 2**31 - 1), payload=st.sampled_from([1024, 4096]))
@settings(max_examples=25)
def test_random_errors_recover_by_replay_not_retrain(ber, seed, payload):
    """At a BER where replays suffice: no retrain, and the time lost per corrupted unit is about one replay
    (microseconds, not a replay timeout of 2 us plus a retrain of 5 us)."""
    base = {"sim.seed": seed, "txn.max_payload_bytes": payload, "txn.max_read_request_bytes": payload}
    clean_cfg = load_config(preset="link", overrides=base)
    cfg = load_config(preset="link", overrides={**base, "phy.ber": ber})
    topo = two_node_topology(cfg)
    g = transfer_graph(0, 1, payload * 1500)
    clean = sim.run(clean_cfg, two_node_topology(clean_cfg), g)
    r = sim.run(cfg, topo, g)
    check_accounting(cfg, g, r)
    c = r.counters
    assert c["retrains"].sum() == 0
    errors = int(c["flits_corrupted"].sum() + c["ctrl_lost"].sum())
    extra = int(r.task_end_ps.max() - clean.task_end_ps.max())
    if errors == 0:
        assert extra == 0
        return
    if c["corrupted"][0] > 0:       # a corrupted data unit (channel 0 carries the data) is only ever replayed
        assert c["replays"][0] >= 1  # (a lost Ack or UpdateFC alone needs no replay)
    # a corrupted Ack/Nak may leave the replay to the timer; everything else costs one replay
    timeouts = int(c["replay_timeouts"].sum())
    bound = errors * _replay_cost_bound_ps(cfg, topo) + timeouts * phy.ps(cfg.link.replay_timer_ns)
    assert extra <= bound, f"{extra / 1e3:.0f} ns lost to {errors} errors ({timeouts} timeouts), bound " \
                           f"{bound / 1e3:.0f} ns"


def test_fabric_error_costs_one_replay_on_a_multi_hop_path():
    cfg = load_config(preset="sd200")
    topo = build(cfg)
    g = transfer_graph(0, 63, 4096 * 300)
    clean = sim.run(cfg, topo, g)
    busy = np.flatnonzero(clean.counters["packets"] > 100)
    assert len(busy) >= 3
    faults = [("corrupt_flit", int(ch), 50, 1) for ch in busy]
    r = sim.run(cfg, topo, g, faults=faults)
    check_accounting(cfg, g, r)
    assert r.counters["retrains"].sum() == 0 and r.counters["replay_timeouts"].sum() == 0
    extra = int(r.task_end_ps.max() - clean.task_end_ps.max())
    assert 0 <= extra <= len(busy) * _replay_cost_bound_ps(cfg, topo)


# ---------------------------------------------------------------- reads larger than a packet, under a tag limit

@pytest.mark.parametrize("tags", [1, 2, 3, 256])
@pytest.mark.parametrize("payload,mrrs", [(1024, 4096), (256, 4096), (4096, 4096), (512, 1024)])
def test_reads_larger_than_max_payload(tags, payload, mrrs):
    cfg = load_config(preset="link", overrides={"txn.read_tags": tags, "txn.max_payload_bytes": payload,
                                                "txn.max_read_request_bytes": mrrs})
    topo = two_node_topology(cfg)
    sizes = [mrrs * 9 + 100, payload + 1, 3 * mrrs]
    for n in sizes:
        g = transfer_graph(0, 1, n, 1)
        r = sim.run(cfg, topo, g)
        check_accounting(cfg, g, r)
        comp = r.transfers["kind"] == 2
        assert r.transfers["total_B"][comp].sum() >= n
    # several reads at once compete for the tags
    g = transfer_graph([0, 0, 0, 1], [1, 1, 1, 0], [mrrs * 5 + 7, mrrs * 3, payload * 2 + 1, mrrs * 4], 1)
    check_accounting(cfg, g, sim.run(cfg, topo, g))


def test_one_tag_serialises_requests():
    """With one read tag the next request leaves only after the previous request's last completion arrived: each
    request costs at least a round trip plus its data on the wire. A tag freed early overlaps them."""
    payload, mrrs = 1024, 4096
    cfg = load_config(preset="link", overrides={"txn.read_tags": 1, "txn.max_payload_bytes": payload,
                                                "txn.max_read_request_bytes": mrrs})
    topo = two_node_topology(cfg)

    def end(q):
        return int(sim.run(cfg, topo, transfer_graph(0, 1, mrrs * q, 1)).task_end_ps.max())

    per_request = (end(9) - end(1)) / 8
    floor = 2 * phy.link_latency_ps(cfg) + mrrs * 8 * 1000 / phy.data_gbps(cfg)
    assert per_request >= floor, f"{per_request / 1e3:.1f} ns per request, a round trip is {floor / 1e3:.1f} ns"
    # and two tags are faster: the tag limit is what serialised them
    cfg2 = load_config(preset="link", overrides={"txn.read_tags": 2, "txn.max_payload_bytes": payload,
                                                 "txn.max_read_request_bytes": mrrs})
    two = int(sim.run(cfg2, topo, transfer_graph(0, 1, mrrs * 9, 1)).task_end_ps.max())
    assert two < end(9)


@given(tags=st.integers(1, 4), q=st.integers(1, 12), extra=st.integers(0, 4095),
       ber=st.sampled_from([0.0, 1e-7, 1e-6]), seed=st.integers(0, 10_000))
@settings(max_examples=40)
def test_reads_with_errors_land_every_byte_once(tags, q, extra, ber, seed):
    cfg = load_config(preset="link", overrides={"txn.read_tags": tags, "txn.max_payload_bytes": 512,
                                                "txn.max_read_request_bytes": 2048, "phy.ber": ber,
                                                "sim.seed": seed})
    g = transfer_graph([0, 1], [1, 0], [2048 * q + extra, 2048 * (q // 2 + 1)], 1)
    check_accounting(cfg, g, sim.run(cfg, two_node_topology(cfg), g))


# ---------------------------------------------------------------- end-to-end grants all come back

def _chain(src, dst, n, nbytes, op=0):
    """n transfers src -> dst, each starting when the previous has completed."""
    g = transfer_graph(np.full(n, src), dst, nbytes, op)
    g["succ_ptr"] = np.concatenate([np.arange(n), [n - 1]]).astype(np.int64)
    g["succ_idx"] = np.arange(1, n, dtype=np.int32)
    g["n_deps"] = np.r_[0, np.ones(n - 1)].astype(np.int32)
    return g


@pytest.mark.parametrize("preset,src,dst", [("link", 0, 1), ("sd200", 0, 63), ("mesh-4x4x4", 5, 42)])
@pytest.mark.parametrize("window_packets,nbytes", [(1, 10_000), (2, 4096 * 3 + 1), (4, 50_000)])
def test_every_grant_returns(preset, src, dst, window_packets, nbytes):
    """A run of back-to-back transfers through a small end-to-end window: if any grant of a transfer were never
    returned, the window would shrink transfer after transfer (later ones slower, then stuck)."""
    import warnings
    cfg = load_config(preset=preset, overrides={"endpoint.e2e_window_bytes": 4096 * window_packets,
                                                "sim.watchdog_ns": 200_000})
    topo = build(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = _chain(src, dst, 16, nbytes)
        r = sim.run(cfg, topo, g)
    check_accounting(cfg, g, r)
    took = np.diff(np.r_[0, r.task_end_ps])
    assert (took[1:] == took[1]).all(), f"transfer times drift: {took.tolist()}"
    if window_packets == 1:
        assert r.totals["e2e_holds"] > 0, "the window was what limited the transfers"
