"""Time and rate arithmetic of the fabric, in one place: ns -> ps, serialisation, flit framing, zero-load latency.

The kernel parameters (fabric.sim), the topology's channel arrays, the probes and the collective fragments' local
costs all convert through here, so that a rounding or framing rule has one definition. Plain arithmetic: `topo`
arguments are anything with the Topology arrays, `cfg` a FabricConfig.
"""
from __future__ import annotations

PS_PER_NS = 1000.0


def ps(t_ns: float) -> int:
    """A time in ns as the kernel's integer ps (rounded half to even)."""
    return int(round(t_ns * PS_PER_NS))


def ns(t_ps):
    """A kernel time in ps as ns (float), for reports."""
    return t_ps / PS_PER_NS


def ps_per_byte(gbps: float) -> float:
    """Serialisation time of one byte at `gbps` gigaBITS per second."""
    return 8000.0 / gbps


def ps_per_byte_GBps(gbytes_per_s: float) -> float:
    """Time per byte at `gbytes_per_s` gigaBYTES per second (local reductions, memory)."""
    return PS_PER_NS / gbytes_per_s


def GBps(ps_per_B):
    """The data rate in gigaBYTES per second of a channel taking `ps_per_B` ps per byte (scalar or array)."""
    return PS_PER_NS / ps_per_B


def data_gbps(cfg) -> float:
    """Raw data rate of one direction of a fabric link in Gb/s (lanes x lane rate x line code)."""
    return cfg.phy.lanes * cfg.phy.lane_rate_gbps * cfg.phy.line_code_efficiency


def link_latency_ps(cfg) -> int:
    """PHY transmit + receive + wire time of a fabric link, the head latency of one channel."""
    p = cfg.phy
    return ps(p.tx_latency_ns + p.rx_latency_ns + p.cable_m * p.wire_ns_per_m)


# ---------------------------------------------------------------- flit framing

def flit_payload_bytes(cfg) -> int:
    """Bytes of transaction-layer packets one flit carries (the flit less its CRC and data-link header)."""
    return cfg.phy.flit_bytes - cfg.phy.flit_overhead_bytes


def framed(cfg, packet_bytes):
    """Bytes on the wire that carry `packet_bytes` of transaction-layer packets (packets may share flits)."""
    return packet_bytes * cfg.phy.flit_bytes / flit_payload_bytes(cfg)


def wire_bytes(cfg, payload_bytes: int) -> float:
    """Bytes on the wire for one packet: header + payload packed into flits."""
    return framed(cfg, payload_bytes + cfg.txn.header_bytes)


def payload_efficiency(cfg, payload_bytes: int | None = None) -> float:
    """Payload bytes delivered per byte on the wire, from the framing alone."""
    p = cfg.txn.max_payload_bytes if payload_bytes is None else payload_bytes
    return p / wire_bytes(cfg, p)


def packet_flits(cfg, payload_bytes: int) -> int:
    """Flit slots a packet occupies in a receive or replay buffer (its credit cost)."""
    return -(-(payload_bytes + cfg.txn.header_bytes) // flit_payload_bytes(cfg))


# ---------------------------------------------------------------- zero-load latency

def path_terms(cfg, topo, chans, payload_B: int, packets: int) -> dict:
    """Zero-load cost in ps of moving `packets` packets (payload_B in all) along the channel array `chans`:
    serialisation on the slowest channel, plus per later hop the flit (or shorter last packet) that cut-through
    waits for; PHY, wire, and the nodes crossed. The latency probe's breakdown."""
    wire = ps(cfg.phy.cable_m * cfg.phy.wire_ns_per_m)
    rate = topo.ch_ps_per_byte[chans]
    tlp_total = payload_B + packets * cfg.txn.header_bytes
    per_tlpB = framed(cfg, rate)
    flit = (rate * cfg.phy.flit_bytes).round().clip(1)
    last_pkt = min(payload_B, cfg.txn.max_payload_bytes) + cfg.txn.header_bytes
    ser = max(tlp_total * per_tlpB.max(), 1) + (last_pkt * per_tlpB[1:]).clip(None, flit[1:]).sum()
    return dict(serialisation=ser, phy=float((topo.ch_latency_ps[chans] - wire).sum()), wire=wire * len(chans),
                switch=float(topo.node_latency_ps[topo.ch_dst[chans[:-1]]].sum()))
