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


def line_gbps(cfg) -> float:
    """Line rate of one direction of a fabric link in Gb/s (lanes x lane rate x line code): what efficiencies are
    measured against."""
    return cfg.phy.lanes * cfg.phy.lane_rate_gbps * cfg.phy.line_code_efficiency


def fec_rate(cfg) -> float:
    """Fraction of the line rate left to flits by the FEC code (k/n; 1 without FEC)."""
    return cfg.phy.fec_k / cfg.phy.fec_n if cfg.phy.fec_n else 1.0


def data_gbps(cfg) -> float:
    """Data rate of one direction of a fabric link in Gb/s: the flit stream's (line rate x FEC code rate)."""
    return line_gbps(cfg) * fec_rate(cfg)


def link_latency_ps(cfg) -> int:
    """PHY transmit + receive (+ FEC decode when on) + wire time of a fabric link, the head latency of a channel."""
    p = cfg.phy
    return ps(p.tx_latency_ns + p.rx_latency_ns + (p.fec_latency_ns if p.fec_n else 0.0)
              + p.cable_m * p.wire_ns_per_m)


# ---------------------------------------------------------------- errors: FEC and bursts

def flit_error_rate(cfg, ber: float) -> float:
    """Probability that a flit of phy.flit_bytes fails its CRC at raw bit error rate `ber`, after the FEC.

    Without FEC: 1 - (1 - ber)^(8 flit). With an RS(n, k) code over m-bit symbols correcting t = (n - k) / 2
    symbols: a symbol is wrong with q = 1 - (1 - ber)^m, a codeword is uncorrectable when more than t of its n
    symbols are (binomial tail), and a flit fails when a codeword it touches does: 1 + 8 flit / (k m) of them on
    average (flits and codewords are not aligned)."""
    import math
    p = cfg.phy
    if ber <= 0.0:
        return 0.0
    if not p.fec_n:
        return -math.expm1(8.0 * p.flit_bytes * math.log1p(-ber))
    return -math.expm1(codewords_per_flit(cfg) * math.log1p(-codeword_failure(cfg, ber)))


def codeword_failure(cfg, ber: float) -> float:
    """Probability that an FEC codeword is uncorrectable (> t symbol errors) at raw bit error rate `ber`."""
    import math
    p = cfg.phy
    n, t = p.fec_n, (p.fec_n - p.fec_k) // 2
    q = -math.expm1(p.fec_symbol_bits * math.log1p(-ber))
    if q <= 0.0:
        return 0.0
    # the binomial tail summed from its first term up (terms fall fast when n q << t; lgamma keeps them finite)
    lq, l1q = math.log(q), math.log1p(-q)
    tail = 0.0
    for j in range(t + 1, n + 1):
        term = math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lq + (n - j) * l1q)
        tail += term
        if term < tail * 1e-17:
            break
    return min(tail, 1.0)


def codewords_per_flit(cfg) -> float:
    """FEC codewords a flit touches on average (1 + flit bits / codeword data bits)."""
    p = cfg.phy
    return 1.0 + 8.0 * p.flit_bytes / (p.fec_k * p.fec_symbol_bits)


def effective_ber(cfg, ber: float) -> float:
    """The bit error rate the kernel's flit corruption draws with: the rate whose flit error probability
    (1 - (1 - b)^(8 flit)) is flit_error_rate(cfg, ber); `ber` itself without FEC."""
    import math
    if not cfg.phy.fec_n or ber <= 0.0:
        return ber
    pf = flit_error_rate(cfg, ber)
    return -math.expm1(math.log1p(-pf) / (8.0 * cfg.phy.flit_bytes)) if pf > 0.0 else 0.0


def burst_params(cfg) -> dict | None:
    """The Gilbert-Elliott burst model for the kernel (None when phy.ge_bad_ber is 0): per state (good, bad) the
    bit error rate it draws with (after the FEC) and the mean dwell in stream bits (dwell ns x data rate)."""
    p = cfg.phy
    if p.ge_bad_ber <= 0.0:
        return None
    rate = data_gbps(cfg)                                  # bits per ns of the flit stream
    return dict(ber=(effective_ber(cfg, p.ber), effective_ber(cfg, p.ge_bad_ber)),
                dwell_bits=(p.ge_good_dwell_ns * rate, p.ge_bad_dwell_ns * rate))


def error_rates(cfg) -> dict:
    """Pre- and post-FEC error rates of a fabric link (the link probe's report): raw BER, flit error probability
    without and with the FEC, the BER the kernel draws with, and with the burst model the long-run averages."""
    p = cfg.phy
    out = dict(fec=f"RS({p.fec_n},{p.fec_k}) m={p.fec_symbol_bits} t={(p.fec_n - p.fec_k) // 2}" if p.fec_n
               else "none", raw_ber=p.ber, pre_fec_flit_error=_raw_flit_error(cfg, p.ber),
               post_fec_flit_error=flit_error_rate(cfg, p.ber), effective_ber=effective_ber(cfg, p.ber))
    ge = burst_params(cfg)
    if ge:
        pb = p.ge_bad_dwell_ns / (p.ge_good_dwell_ns + p.ge_bad_dwell_ns)
        out.update(burst_bad_fraction=pb, burst_bad_ber=p.ge_bad_ber,
                   pre_fec_flit_error=(1 - pb) * _raw_flit_error(cfg, p.ber) + pb * _raw_flit_error(cfg, p.ge_bad_ber),
                   post_fec_flit_error=(1 - pb) * flit_error_rate(cfg, p.ber) + pb * flit_error_rate(cfg, p.ge_bad_ber))
    return out


def _raw_flit_error(cfg, ber: float) -> float:
    import math
    return -math.expm1(8.0 * cfg.phy.flit_bytes * math.log1p(-ber)) if ber > 0.0 else 0.0


# ---------------------------------------------------------------- flit framing
#
# Packets (header + payload) are packed back to back into the payload areas of flits, as PCIe 6 flit mode and CXL
# 256 B flits pack TLPs (a packet may share a flit with the one before and straddle flits): each packet pays its
# header, each flit its CRC and data-link bytes. A flit left open when no packet follows at once is padded out,
# and a packet is usable at the receiver only once the flit holding its last byte is in (its CRC). So a stream of
# packets costs (header + payload) x flit / (flit - overhead) bytes of wire time (the back-to-back efficiency); a
# packet alone costs whole flits (the kernel's phy.pxi frame_unit does both).

def flit_payload_bytes(cfg) -> int:
    """Bytes of transaction-layer packets one flit carries (the flit less its CRC and data-link header)."""
    return cfg.phy.flit_bytes - cfg.phy.flit_overhead_bytes


def framed(cfg, packet_bytes):
    """Wire bytes of `packet_bytes` of transaction-layer packets sent back to back (sharing flits)."""
    return packet_bytes * cfg.phy.flit_bytes / flit_payload_bytes(cfg)


def stream_flits(cfg, packet_bytes: int) -> int:
    """Flits a burst of `packet_bytes` of packets sent back to back from a flit boundary occupies, its last padded."""
    return -(-int(packet_bytes) // flit_payload_bytes(cfg))


def wire_bytes(cfg, payload_bytes: int, alone: bool = False) -> float:
    """Wire bytes of one packet: its share of a back-to-back stream, or (alone) the whole flits it occupies."""
    tlp = payload_bytes + cfg.txn.header_bytes
    return stream_flits(cfg, tlp) * cfg.phy.flit_bytes if alone else framed(cfg, tlp)


def payload_efficiency(cfg, payload_bytes: int | None = None, alone: bool = False) -> float:
    """Payload bytes delivered per byte of line rate, from the framing (and the FEC code rate): packets of
    `payload_bytes` (default the max payload) back to back, or one alone on an idle link."""
    p = cfg.txn.max_payload_bytes if payload_bytes is None else payload_bytes
    return p / wire_bytes(cfg, p, alone) * fec_rate(cfg)


def packet_flits(cfg, payload_bytes: int) -> int:
    """Flit slots a packet occupies in a receive or replay buffer (its credit cost): the flits it spans when it
    starts one (packed behind another packet it may straddle one more; buffers hold packets, not flits)."""
    return stream_flits(cfg, payload_bytes + cfg.txn.header_bytes)


# ---------------------------------------------------------------- zero-load latency

def path_terms(cfg, topo, chans, payload_B: int, packets: int) -> dict:
    """Zero-load cost in ps of moving `packets` packets (payload_B in all) along the channel array `chans`:
    serialisation on the slowest channel (the packets back to back in whole flits, the last one padded: its CRC
    comes at the flit's end), plus per later hop the first flit, which each hop checks before it goes on; PHY,
    wire, and the nodes crossed. The latency probe's breakdown; the analytic engine (executor.pxi) is the same."""
    wire = ps(cfg.phy.cable_m * cfg.phy.wire_ns_per_m)
    rate = topo.ch_ps_per_byte[chans]
    tlp_total = payload_B + packets * cfg.txn.header_bytes
    flit = (rate * cfg.phy.flit_bytes).round().clip(1)
    ser = max(round(stream_flits(cfg, tlp_total) * cfg.phy.flit_bytes * rate.max()), 1) + flit[1:].sum()
    return dict(serialisation=ser, phy=float((topo.ch_latency_ps[chans] - wire).sum()), wire=wire * len(chans),
                switch=float(topo.node_latency_ps[topo.ch_dst[chans[:-1]]].sum()))


# ---------------------------------------------------------------- flow control sized from the fabric
#
# The kernel takes one credit pool (flits per VC of every channel) and one end-to-end window (bytes per source-
# destination pair). `link.credit_pool_flits = 0` and `endpoint.e2e_window_bytes = 0` mean "auto": the value that lets
# every channel and every pair of this topology run at its rate, from the round trips below, which follow the
# kernel's events (pyx/fabric/_kernel/datalink.pxi, endpoint.pxi) at zero load.

FC_MARGIN = 1.25
"""Stated margin of both derived values: 25 % over the zero-load round trip, so that a round trip stretched by a
quarter (an UpdateFC or grant queued behind traffic, a replay) still does not throttle a channel or pair."""


def _arr(topo, name, default=None):
    """A Topology field, from the dataclass or its as_arrays dict."""
    return topo.get(name, default) if isinstance(topo, dict) else getattr(topo, name, default)


def _channel_timing(cfg, topo):
    """Per channel: ps per byte of transaction-layer packet, flit time, and wire time of one max-payload packet."""
    import numpy as np
    ppb = np.asarray(_arr(topo, "ch_ps_per_byte"), np.float64)
    per_tlpB = framed(cfg, ppb)                                      # as the kernel: ppb x flit_B / flit payload
    flit = np.maximum(np.rint(ppb * cfg.phy.flit_bytes), 1)
    pkt = np.maximum(np.rint((cfg.txn.max_payload_bytes + cfg.txn.header_bytes) * per_tlpB), 1)
    return per_tlpB, flit, pkt


def credit_round_trips(cfg, topo):
    """Per channel c, the credit round trip R (ps) of a max-payload packet and its wire time T (ps).

    Credits are spent when the packet starts on c; the receiver frees them when the packet's tail has left its
    buffer: at a rank, on delivery (tail arrival, T + latency); at a forwarding node, when the next channel c' has
    sent it (head + node latency + T', or tail + flit of c' under cut-through; the slowest c' out of the node). The
    UpdateFC goes at once if the packet frees >= link.credit_update_flits, else after the coalescing that takes
    (the next packets' frees, at most link.credit_update_ns), and rides the next flit of the reverse channel
    (flit + PHY/wire latency)."""
    import numpy as np
    src, dst = np.asarray(_arr(topo, "ch_src")), np.asarray(_arr(topo, "ch_dst"))
    rev = np.asarray(_arr(topo, "ch_rev"))
    lat = np.asarray(_arr(topo, "ch_latency_ps"), np.float64)
    node_lat = np.asarray(_arr(topo, "node_latency_ps"), np.float64)
    n_ranks = int(_arr(topo, "n_ranks", 0))
    _, flit, T = _channel_timing(cfg, topo)
    first = np.minimum(T, flit)
    n_nodes = len(node_lat)
    # the slowest onward channel of each node: latest free time of a packet it forwards
    worst_T = np.zeros(n_nodes)
    worst_first = np.zeros(n_nodes)
    np.maximum.at(worst_T, src, T)
    np.maximum.at(worst_first, src, first)
    forwarded = np.maximum(first + lat + node_lat[dst] + worst_T[dst], T + lat + worst_first[dst])
    delivered = T + lat
    forwards = _arr(topo, "node_forwards")
    fwd = np.ones(n_nodes, bool) if forwards is None else np.asarray(forwards, bool)
    is_rank = np.arange(n_nodes) < n_ranks
    free = np.where(fwd[dst], forwarded, 0.0)
    free = np.maximum(free, np.where(is_rank[dst] | ~fwd[dst], delivered, 0.0))
    P = packet_flits(cfg, cfg.txn.max_payload_bytes)
    upd = cfg.link.credit_update_flits
    coalesce = 0.0 if P >= upd else np.minimum(ps(cfg.link.credit_update_ns), (-(-upd // P) - 1) * T)
    R = free + coalesce + flit[rev] + lat[rev]
    return R, T


def buffer_outputs(topo):
    """Per channel, the output ports its receive buffer feeds: every channel out of a node that forwards but the
    way back (a packet leaves by one of them), 1 at a node that only takes packets in."""
    import numpy as np
    src, dst = np.asarray(_arr(topo, "ch_src")), np.asarray(_arr(topo, "ch_dst"))
    n_nodes = len(np.asarray(_arr(topo, "node_latency_ps")))
    forwards = _arr(topo, "node_forwards")
    fwd = np.ones(n_nodes, bool) if forwards is None else np.asarray(forwards, bool)
    out = np.bincount(src, minlength=n_nodes)[dst] - 1
    return np.where(fwd[dst], np.maximum(out, 1), 1).astype(np.int64)


def credit_pool_needs(cfg, topo, margin: float = FC_MARGIN):
    """Per channel, the credit pool (flits) of its receive buffer: R / T max packets in flight keep the channel at
    its rate (rounded up to whole packets of packet_flits(max payload) credits each, times `margin`; 1 = the bare
    need), and a forwarding node's buffer holds that for every output it feeds (buffer_outputs), as a switch with
    per-output credit does: packets waiting for a busy output then never hold the credits that packets for an idle
    one need (no head-of-line blocking of a shared input buffer; docs/kernel.md §Switches)."""
    import numpy as np
    R, T = credit_round_trips(cfg, topo)
    P = packet_flits(cfg, cfg.txn.max_payload_bytes)
    return P * np.ceil(margin * R / T - 1e-9).astype(np.int64) * buffer_outputs(topo)


def credit_rate_fraction(cfg, topo, credit_pool_flits: int):
    """Per channel, the fraction of its rate a pool of `credit_pool_flits` allows (1 = not capped)."""
    import numpy as np
    R, T = credit_round_trips(cfg, topo)
    P = packet_flits(cfg, cfg.txn.max_payload_bytes)
    return np.minimum(1.0, (credit_pool_flits // P) * T / R)


def ack_round_trips(cfg, topo):
    """Per channel c, the replay-buffer round trip R (ps) of a max-payload packet and its wire time T (ps).

    A unit takes replay-buffer space when it starts on c and frees it when an Ack covering it returns: the receiver
    counts it at head arrival (first flit + PHY/wire latency), Acks after link.ack_every_packets units or
    link.ack_timer_ns, whichever comes first (the first unit of a group waits for the rest), and the Ack rides
    the next flit of the reverse channel."""
    import numpy as np
    rev = np.asarray(_arr(topo, "ch_rev"))
    lat = np.asarray(_arr(topo, "ch_latency_ps"), np.float64)
    _, flit, T = _channel_timing(cfg, topo)
    wait = np.minimum(ps(cfg.link.ack_timer_ns), cfg.link.ack_every_packets * T)
    return np.minimum(T, flit) + lat + wait + flit[rev] + lat[rev], T


def replay_buffer_needs(cfg, topo, margin: float = FC_MARGIN):
    """Per channel, the replay buffer (flits) that keeps it at its rate: `margin` x R / T max packets unacknowledged
    plus the one the sender checks room for (the kernel sends only while the buffer can take a whole unit)."""
    import numpy as np
    R, T = ack_round_trips(cfg, topo)
    P = packet_flits(cfg, cfg.txn.max_payload_bytes)
    return P * (np.ceil(margin * R / T - 1e-9).astype(np.int64) + 1)


def replay_rate_fraction(cfg, topo, replay_flits: int):
    """Per channel, the fraction of its rate a replay buffer of `replay_flits` allows (1 = not capped)."""
    import numpy as np
    R, T = ack_round_trips(cfg, topo)
    P = packet_flits(cfg, cfg.txn.max_payload_bytes)
    return np.minimum(1.0, (replay_flits // P) * T / R)


def e2e_round_trips(cfg, topo):
    """Per source-destination pair (R x R arrays): the payload rate B (B/ps) its flows can reach together and the
    round trip G (ps) of a byte of end-to-end window, 0 where no path joins the pair.

    A store spends window when a packet is carved at the source; the destination owes it back once the packet's
    tail is delivered (zero-load latency of one max-payload packet along the route, `path_terms`), and the grant
    comes back after the kernel's return latency (per hop: PHY/wire latency + one flit; the nodes crossed). The
    pair's window is shared by all its flows (collective channels take different candidate routes), so B is the
    payload rate of its distinct first channels or of its distinct last channels, whichever is less."""
    import numpy as np

    from fabric._check_build import arrays
    R_ = int(_arr(topo, "n_ranks"))
    pair_ptr = np.asarray(_arr(topo, "pair_ptr"), np.int64)
    _, flit, T = _channel_timing(cfg, topo)
    rate = cfg.txn.max_payload_bytes / T                 # payload B/ps of each channel at full wire rate
    # per path D = the packet on its slowest hop + a flit per later hop (cut-through) + latencies + nodes crossed,
    # G = latencies + a flit per hop + nodes crossed; per pair the largest over its candidates (one pass in C)
    Dp, Gp, B = arrays.pair_round_trips(pair_ptr, _arr(topo, "path_ptr"), _arr(topo, "path_ch"),
                                        np.asarray(_arr(topo, "ch_latency_ps"), np.float64),
                                        np.asarray(_arr(topo, "node_latency_ps"), np.float64), _arr(topo, "ch_dst"),
                                        flit, T, rate)
    has = np.diff(pair_ptr) > 0
    Gp = Gp.reshape(R_, R_).T.ravel()                    # the grant of (s, d) travels d -> s
    B[~np.isfinite(B)] = 0.0
    return B * has, (Dp + Gp) * has


def e2e_window_needs(cfg, topo, margin: float = FC_MARGIN):
    """Per pair, the window (B) that keeps it at its rate: in flight B x G, plus what the destination holds back
    (grants go in quarters of the window: up to W/4 + one packet owed) and the packet the source waits to fit,
    so W = 4/3 (B G + 2 max payload); times `margin`, rounded up to whole max payloads (0 where no path)."""
    import numpy as np
    B, G = e2e_round_trips(cfg, topo)
    maxp = cfg.txn.max_payload_bytes
    need = 4.0 / 3.0 * (B * G + 2 * maxp) * margin
    return np.where(G > 0, maxp * np.ceil(need / maxp - 1e-9), 0).astype(np.int64), B, G


def e2e_rate_fraction(cfg, topo, window_bytes: int):
    """Per pair, the fraction of its rate a window of `window_bytes` allows (1 = not capped)."""
    import numpy as np
    B, G = e2e_round_trips(cfg, topo)
    maxp = cfg.txn.max_payload_bytes
    usable = np.maximum(0.75 * window_bytes - 2 * maxp, 0)     # inverse of the need formula above
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(B * G > 0, usable / (B * G), 1.0)
    return np.minimum(frac, 1.0)
