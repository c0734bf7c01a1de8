"""The link probe: one saturated unidirectional channel between two accelerators, measured end to end.

The traffic is one store of `packets` x `payload_bytes` from rank 0 to rank 1, which the endpoint carves into
max-payload packets back to back; the reverse channel carries only Acks, Naks and UpdateFCs. A second, short run
sends packets of the same size alone (each store waits for the one before): the flits each takes on an idle link.
"""
from __future__ import annotations

import numpy as np

from fabric import phy, sim
from fabric.config import FabricConfig, with_overrides
from fabric.errors import ConfigError
from fabric.network import build
from fabric.taskgraph import transfer_graph

ALONE_PACKETS = 64
"""Packets of the lone-packet run: every one costs the same whole flits, so a few measure it."""


def two_node_topology(cfg: FabricConfig):
    """Two accelerators joined by one link (the `link` builder): channel 0 is 0 -> 1, channel 1 is 1 -> 0."""
    return build(with_overrides(cfg, {"topology.kind": "link"}))


def probe_link(cfg: FabricConfig, payload_bytes: int | None = None, packets: int = 20000, faults=()) -> dict:
    """Saturate channel 0 and report efficiency, goodput and every data-link counter."""
    p = cfg.txn.max_payload_bytes if payload_bytes is None else payload_bytes
    if not 1 <= p <= cfg.txn.max_payload_bytes:
        raise ConfigError(f"--payload-bytes={p} is out of range; allowed [1, {cfg.txn.max_payload_bytes}] B "
                          f"(txn.max_payload_bytes)")
    if packets < 1:
        raise ConfigError(f"--packets={packets} is out of range; allowed >= 1")
    if p != cfg.txn.max_payload_bytes:   # the endpoint carves max-payload packets: make that the probe's size
        cfg = with_overrides(cfg, {"txn.max_payload_bytes": p})
    res = sim.run(cfg, two_node_topology(cfg), transfer_graph(0, 1, p * packets), faults=faults)
    c = {k: v[0] for k, v in res.counters.items()}          # the data direction
    rev = {k: v[1] for k, v in res.counters.items()}
    # streaming time: first byte issued -> last byte at the receiver, less one pipeline fill of the channel
    start = res.transfers["start_ps"][0]
    end = res.task_end_ps[0] - phy.ps(cfg.endpoint.completion_ns)
    fill = phy.link_latency_ps(cfg)
    stream_ps = max(end - start - fill, 1)
    delivered = res.totals["delivered"]
    goodput = 8.0 * p * delivered / phy.ns(stream_ps)
    wire_B = c["flits"] * cfg.phy.flit_bytes
    raw_gbps = phy.line_gbps(cfg)
    return dict(
        payload_bytes=p, packets=packets, ber=cfg.phy.ber, seed=cfg.sim.seed,
        payload_efficiency=goodput / raw_gbps,
        payload_efficiency_model=phy.payload_efficiency(cfg, p),
        payload_efficiency_alone=_alone_efficiency(cfg, p),
        payload_efficiency_alone_model=phy.payload_efficiency(cfg, p, alone=True),
        **phy.error_rates(cfg),
        wire_efficiency=p * delivered / wire_B * phy.fec_rate(cfg) if wire_B else 0.0,
        retransmission_overhead=(c["units"] - c["packets"]) / max(c["packets"], 1),
        goodput_gbps=goodput, raw_gbps=raw_gbps,
        packets_sent=int(c["packets"]), packets_delivered=int(delivered),
        packets_dropped=int(c["packets"] - delivered), duplicates=int(res.totals["duplicates"]),
        out_of_order=int(res.totals["out_of_order"]), units_sent=int(c["units"]),
        flits_corrupted=int(c["flits_corrupted"] + rev["flits_corrupted"]),
        units_corrupted=int(c["corrupted"]), naks=int(c["naks"]), acks=int(c["acks"]),
        replays=int(c["replays"]), replay_timeouts=int(c["replay_timeouts"]), retrains=int(c["retrains"]),
        ctrl_lost=int(c["ctrl_lost"]), updatefc=int(c["updatefc"]), credit_errors=int(c["credit_errors"] +
                                                                                      rev["credit_errors"]),
        credit_stall_ns=phy.ns(c["credit_stall_ps"]), duration_ns=phy.ns(res.now_ps),
        events=int(res.events), wall_s=res.wall_s, events_per_s=res.events / max(res.wall_s, 1e-9),
        _result=res,
    )


def _alone_efficiency(cfg: FabricConfig, p: int) -> float:
    """Payload per wire byte of packets of p bytes sent one at a time on an idle link, from the flits the kernel
    opened for them (error-free: replays would add flits)."""
    cfg = with_overrides(cfg, {"phy.ber": 0.0, "phy.ge_bad_ber": 0.0})
    n = ALONE_PACKETS
    g = transfer_graph(0, 1, p, 0) if n == 1 else transfer_graph([0] * n, 1, p)
    g.update(succ_ptr=np.r_[np.arange(n), n - 1].astype(np.int64), succ_idx=np.arange(1, n, dtype=np.int32),
             n_deps=np.r_[0, np.ones(n - 1)].astype(np.int32))              # a chain: each waits for the last
    res = sim.run(cfg, two_node_topology(cfg), g)
    return p * n / (res.counters["flits"][0] * cfg.phy.flit_bytes) * phy.fec_rate(cfg)
