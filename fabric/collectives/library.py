"""Named collective-library profiles, protocols, the fabric's own per-hop latency, and the nccl-like tuner.

`collectives.library` selects a profile:
- `sd200`: the tiered optimised library (policy sd200 size tiers, launch_ns / step_ns of [collectives]); nothing in
  this module changes what it builds.
- `nccl-like`: the generic library a cluster runs: algorithm x protocol x channels, chosen per call by `tune` from
  an analytic cost model fed with the fabric's bandwidth and zero-load latency, as NCCL's tuner does.

Software vs fabric (nothing counted twice). The constants of the nccl-like profile were fitted (issue 16, model and
fit in docs/calibration.md) as per-step times h_p that INCLUDE the one-way delivery over the hop. The packet and
analytic engines simulate that delivery themselves, so a wait point of protocol p after a hop s -> d costs

    software(p, s, d) = h_p [+ d_net (+ F_S for Simple) if the hop crosses a NIC] - t_fab(s, d),   clamped >= 0

where t_fab is the fabric's own zero-load one-way latency of a small store s -> d (issue, translation, path,
completion: the latency probe's model, fabric.phy.path_terms). Inside a domain it is a wait on the rank's channel;
through a NIC a delay on the data path (the proxy's latency: pipelined steps do not queue behind it). Launch
(`launch_ns`, plus host_launch_ns per extra GPU of a `-g N` run) is pure software. A negative
software cost means the simulated fabric is slower than the measured per-step time by itself: it is clamped at 0
and a warning names the protocol and both figures.

Protocols (NCCL's, src/include/device.h): LL moves 8 B lines of 4 B data + 4 B flag (wire efficiency 0.5), LL128
128 B lines of 120 B data (120/128), Simple raw data plus a trailing flag (1.0). The flag of LL/LL128 is inside the
lines, so their transfers carry no extra flag bytes.
"""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np

from fabric.errors import ConfigError
from fabric.topology import domain_groups

LIBRARIES = ("sd200", "nccl-like")
PROTOCOLS = ("LL", "LL128", "Simple")
WIRE_EFF = {"LL": 0.5, "LL128": 120.0 / 128.0, "Simple": 1.0}


@dataclass(frozen=True)
class Const:
    """One profile value: what it is, its unit, why it has this value, and the data it was fitted on."""
    value: float
    unit: str
    help: str
    reason: str
    source: str = ""


_FIT = "fitted (issue 16: log-space least squares over all calibration tables, each table weighted equally)"

# The nccl-like profile. Fitted constants name the calibration file(s) that determine them (docs/calibration.md);
# NCCL facts name NCCL's source; no H100 measurement was used.
NCCL_LIKE = {
    "launch_ns": Const(8527.0, "ns", "per-call launch + kernel prologue + completion, one GPU per host thread; "
                       "pure software, no fabric time", _FIT,
                       "mscclpp_NDv4_NDmv4_A100_IB200G_latency.txt (1x8 and 2x1, 1 KB), "
                       "2node_1xH200_RoCE_gke_dranet.txt (8 B-8 KB)"),
    "h_LL_ns": Const(682.0, "ns", "per ring/tree step, LL, intra-node, INCLUDING the hop's one-way delivery "
                     "(the simulator subtracts its own)", _FIT,
                     "1node_8xA100-SXM4-80GB_allreduce_8B-128MB.txt (floor), mscclpp (AR/AG/A2A 1 KB), "
                     "1node_8xB200_nccl227_symmetric_allreduce_issue333.txt"),
    "h_LL128_ns": Const(2740.0, "ns", "per step, LL128, intra-node, including the hop's delivery", _FIT,
                        "1node_8xA100-SXM4-80GB_allreduce_8B-128MB.txt (1M-8M)"),
    "h_Simple_ns": Const(3219.0, "ns", "per step, Simple (slice handshake: wait credit, write, fence, post), "
                         "including the hop's delivery", _FIT,
                         "1node_8xB200_nccl227_symmetric_allreduce_issue333.txt (64K-1M), "
                         "1node_8xA100-SXM4-80GB_allreduce_8B-128MB.txt (16M+)"),
    "d_net_ns": Const(7807.0, "ns", "extra per network step (proxy poll + RDMA post + NIC/switch/wire) over the "
                      "protocol's NVLink step", _FIT,
                      "mscclpp_NDv4_NDmv4_A100_IB200G_latency.txt (2x1, 2x8 1 KB), "
                      "2node_8xH200_RoCE400G_spectrumx_openshift.txt"),
    "F_Simple_net_ns": Const(86925.0, "ns", "extra per network step of a Simple schedule, once per call "
                             "(proxy chunk-pipeline start-up)", _FIT + "; weakly identified (two optima)",
                             "2node_1xH200_RoCE_gke_dranet.txt (>=64M), "
                             "2node_8xH200_RoCE400G_spectrumx_openshift.txt (>=64M)"),
    "k_LL": Const(0.454, "ratio", "LL per-GPU payload cap = k_LL x llMaxBw[arch] (SM-bound); tuner only", _FIT,
                  "1node_8xA100-SXM4-80GB_allreduce_8B-128MB.txt (128K-512K), B200 table (8K-32K)"),
    "ll_max_bw_gbps": Const(141.0, "GB/s", "NCCL llMaxBw of the architecture (Hopper 141; A100 87.7, B200 282); "
                            "only k_LL x this is used", "NCCL src/graph/tuning.cc llMaxBws (ratio between arches)"),
    "eta_nvl": Const(0.746, "ratio", "fraction of the scale-up link rate Simple reaches (tuner only)", _FIT,
                     "1node_8xA100-SXM4-80GB_allreduce_8B-128MB.txt (16M-128M), mscclpp 1x8 1 GiB"),
    "eta_net": Const(0.752, "ratio", "fraction of the NIC line rate Simple reaches, HDR InfiniBand: 0.90 GPUDirect "
                     "RDMA (perftest) x 0.8356 library share; presets set their NIC generation's (NDR 0.794, "
                     "400GbE RoCE 0.636)", _FIT, "mscclpp_NDv4_NDmv4_A100_IB200G_latency.txt (2x1, 2x8, 1G/4G)"),
    "g_nLL": Const(0.285, "ratio", "LL rate over a NIC relative to Simple's (tuner only)",
                   _FIT + "; bound >= 0.1 is a prior", "2node_1xH200_RoCE_gke_dranet.txt (8K-32K), "
                   "2node_8xH200_RoCE400G_spectrumx_openshift.txt (16K-1M)"),
    "g_nLL128": Const(0.664, "ratio", "LL128 rate over a NIC relative to Simple's (tuner only)", _FIT,
                      "2node_1xH200_RoCE_gke_dranet.txt (64K-8M), 2node_8xH200_RoCE400G_spectrumx_openshift.txt"),
    "max_channels": Const(32, "channels", "most channels (rings) a call uses; NCCL's rule drops channels for "
                          "small calls", "NCCL on NVSwitch H100/H200/B200 nodes builds 32 (A100: 24); the H200 2x8 "
                          "table ran NCCL_MIN_NCHANNELS=32"),
    "slice_LL_bytes": Const(65536, "B", "payload per channel per pipelined slice, LL",
                            "NCCL: LL buffer 512 KiB of 16 B lines / NCCL_STEPS 8 = 32 KiB payload per step, "
                            "2 steps per slice (ALLREDUCE_SLICESTEPS)"),
    "slice_LL128_bytes": Const(1152000, "B", "payload per channel per slice, LL128",
                               "NCCL: LL128 buffer 120 x 640 x 8 x 8 B / 8 steps = 600 KiB of lines, 120/128 "
                               "payload, 2 steps per slice"),
    "slice_Simple_bytes": Const(1 << 20, "B", "payload per channel per slice, Simple",
                                "NCCL: 4 MiB buffer / 8 steps = 512 KiB per step, 2 steps per slice"),
    "slices_in_flight": Const(8, "slices", "sends a rank keeps in flight along its ring (a send waits for the "
                              "landing of the send this many places earlier)",
                              "NCCL keeps up to NCCL_STEPS = 8 steps in flight per connection (src/include/"
                              "device.h)"),
    "o_p2p_ns": Const(4981.0, "ns", "alltoall: the proxy's post of one send to a peer through a NIC (a rank's "
                      "remote sends are posted one after the other)", _FIT,
                      "mscclpp_NDv4_NDmv4_A100_IB200G_latency.txt (alltoall 1 KB, 2x1 and 2x8)"),
    "nvls_lat_ns": Const(25000.0, "ns", "NVLS / NVLS-tree algorithm latency (the in-switch reduce + multicast "
                         "kernel's per-call synchronisation), INCLUDING its fabric crossings (the simulator "
                         "subtracts its own)", "NCCL src/graph/tuning.cc: NVLS base latency 25 us"),
    "k_nvls": Const(0.759, "ratio", "NVLS per-GPU payload rate = k_nvls x nvls_efficiency[arch] x scale-up rate "
                    "(Hopper 0.645, Blackwell 0.562 of the link rate)", _FIT,
                    "1node_8xB200_nccl227_symmetric_allreduce_issue333.txt (>= 4M)"),
    "nvls_efficiency": Const(0.85, "ratio", "NCCL nvlsEfficiency of the architecture (Hopper 0.85, Blackwell 0.74); "
                             "only k_nvls x this is used", "NCCL src/graph/tuning.cc (ratio between arches)"),
    "launch_sym_ns": Const(2610.0, "ns",
                           "NCCL 2.27 symmetric-kernel launch + prologue (collectives.nccl_like.symmetric)", _FIT,
                           "1node_8xB200_nccl227_symmetric_allreduce_issue333.txt (8 B-8 KB)"),
    "tuner_check_margin": Const(1.5, "ratio", "with a cost oracle, the candidates whose estimate is within this "
                                "factor of the least are simulated, with each algorithm's best-estimated protocol, "
                                "and the fastest runs (tune)",
                                "between protocols of one algorithm the estimate's worst optimism about the "
                                "simulated winner, over the nccl-like presets x allreduce/allgather/reduce_scatter "
                                "x 8 B-1 GiB (every power of 2, analytic engine), is 1.12 (hgx-h800-ib, 128 MiB "
                                "rings); 1.5 leaves about four times that excess (docs/collectives.md)"),
    "p2p_ll_max_bytes": Const(16384, "B", "alltoall / broadcast use LL when the bytes per peer are at most this",
                              "NCCL P2P_LL_THRESHOLD (src/enqueue.cc)"),
}

# NCCL enqueue.cc: drop channels while nBytes < nc * nthreads * threshold (thresholds per protocol; ring LL x n)
_NT_MAX = {"LL": 512, "LL128": 640, "Simple": 512}
_THREAD_THR = {"LL": 8, "LL128": 8, "Simple": 64}

# What `collectives.library = sd200` means: today's [collectives] defaults (fabric/config.py carries each reason).
SD200 = {"policy": "sd200 (tiers oneshot < twoshot < ring on the store, load or cached path: per group size, the "
                   "least analytic time, close ones checked on the packet engine; or fixed oneshot_max_bytes / twoshot_max_bytes)",
         "protocol": "one (raw stores + a folded flag)", "launch_ns": "collectives.launch_ns",
         "step_ns": "collectives.step_ns", "channels": "collectives.channels (>= channel_min_bytes)"}
PROFILES = {"sd200": SD200, "nccl-like": NCCL_LIKE}


# profile values a [collectives.nccl_like] key may override (architecture / fabric / run facts; 0 = keep the profile's)
_CONFIG_KEYS = {"ll_max_bw_gbps": "ll_max_bw_gbps", "max_channels": "max_channels", "eta_net": "net_efficiency",
                "nvls_efficiency": "nvls_efficiency"}


def value(key: str, cc=None) -> float:
    """A profile value; with a CollectivesConfig `cc`, its non-zero override where one exists."""
    if cc is not None and key in _CONFIG_KEYS:
        v = getattr(cc.nccl_like, _CONFIG_KEYS[key])
        if v:
            return v
    return NCCL_LIKE[key].value


def launch_ns(cc) -> float:
    """Per-call launch: the fitted software launch (symmetric kernels: launch_sym_ns), plus the host's cost per
    extra GPU of a -g N run."""
    run = cc.nccl_like
    base = value("launch_sym_ns") if run.symmetric else value("launch_ns")
    return base + (run.gpus_per_process - 1) * run.host_launch_ns


@dataclass(frozen=True)
class Choice:
    """What the library runs for one call."""
    algorithm: str
    protocol: str = ""     # "" for the sd200 library (one protocol)
    channels: int = 0      # flows per store; 0 = the sd200 rule (collectives.channels above channel_min_bytes)


def wire_nbytes(protocol: str, length, flag_bytes: int):
    """Bytes a transfer of `length` payload puts on the fabric under `protocol` (numpy or int)."""
    if protocol == "LL":      # 8 B lines of 4 B data + 4 B flag; a transfer of nothing still sends one flagged line
        return np.maximum(-(-np.asarray(length) // 4), 1) * 8
    if protocol == "LL128":   # 128 B lines of 120 B data (the flag rides in the line's last 8 B)
        return np.maximum(-(-np.asarray(length) // 120), 1) * 128
    return np.asarray(length) + flag_bytes


# ---------------------------------------------------------------- the fabric's own latency and bandwidth

class FabricView:
    """Zero-load per-hop latency and per-rank bandwidth of the configured fabric, for positions 0..n-1 = ranks."""

    def __init__(self, cfg, topo=None):
        self.cfg = cfg
        from fabric.network import shared
        self.topo = shared(cfg) if topo is None else topo
        self._hop: dict = {}
        self._memo: dict = {}

    def memo(self, key: tuple, make):
        """make(), once per key for this view (rings and domain groups are asked per call, channel and slice)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def hop_ps(self, s: int, d: int, payload: int = 64) -> int:
        """Zero-load one-way latency of a `payload`-byte store s -> d (issue .. completion), as the latency probe
        models it (first route candidate)."""
        key = (s, d, payload)
        if key not in self._hop:
            from fabric.phy import path_terms, ps
            cfg, t = self.cfg, self.topo
            chans = t.paths(s, d)[0]
            pk = max(1, -(-payload // cfg.txn.max_payload_bytes))
            ep = cfg.endpoint
            cross = t.node_domain[s] != t.node_domain[d]
            tot = ps(ep.issue_ns) + ps(ep.translation_ns) + (ps(ep.p2p_forward_ns) if cross else 0)
            tot += sum(path_terms(cfg, t, chans, payload, pk).values()) + ps(ep.completion_ns)
            self._hop[key] = int(round(tot))
        return self._hop[key]

    def crosses_nic(self, s: int, d: int) -> bool:
        return self.memo(("nic", s, d), lambda: self._crosses_nic(s, d))

    def _crosses_nic(self, s: int, d: int) -> bool:
        from fabric.topology import NIC
        t = self.topo
        chans = t.paths(s, d)[0]
        return bool((t.node_kind[t.ch_dst[chans]] == NIC).any())

    def rank_gbps(self, r: int = 0) -> float:
        """Payload GB/s rank r can inject over its scale-up ports (NIC links excluded)."""
        from fabric.phy import GBps
        from fabric.topology import NIC
        t = self.topo
        out = (t.ch_src == r) & (t.node_kind[t.ch_dst] != NIC)
        if not out.any():
            out = t.ch_src == r
        return float(GBps(t.ch_ps_per_byte[out]).sum())

    def nic_gbps(self, r: int = 0) -> float:
        """GB/s of rank r's path out of its node (the slowest channel of a route to a rank across a NIC), 0 if
        none."""
        from fabric.phy import GBps
        t = self.topo
        for d in range(t.n_ranks):
            if d != r and self.crosses_nic(r, d):
                return float(GBps(t.ch_ps_per_byte[t.paths(r, d)[0]].max()))
        return 0.0


def step_software_ns(view: FabricView, protocol: str, s: int, d: int, payload: int = 64) -> float:
    """Per-step software time of `protocol` after the hop s -> d: fitted step time minus the fabric's own."""
    h = value(f"h_{protocol}_ns")
    if view.crosses_nic(s, d):
        h += value("d_net_ns") + (value("F_Simple_net_ns") if protocol == "Simple" else 0.0)
    fab = view.hop_ps(s, d, payload) / 1000.0
    sw = h - fab
    if sw < 0:
        warnings.warn(f"nccl-like {protocol}: the fabric's own one-way latency {fab:.0f} ns (rank {s} -> {d}) "
                      f"exceeds the measured per-step time {h:.0f} ns; per-step software clamped to 0",
                      stacklevel=2)
        sw = 0.0
    return sw


def inject_gbps(view: FabricView, protocol: str, s: int, d: int) -> float:
    """Payload GB/s one GPU's copy loop can push on hop s -> d with `protocol`, all channels together: the fitted
    fraction of the link (or NIC) rate the GPU/proxy side reaches. It paces the library's stores; links keep their
    spec rate (a wire-format loss is already in the inflated wire bytes)."""
    if view.crosses_nic(s, d):
        r = view.nic_gbps(s) * value("eta_net", view.cfg.collectives)
        return r if protocol == "Simple" else r * value(f"g_n{protocol}")
    B = view.rank_gbps(s) * value("eta_nvl")
    if protocol == "LL":
        return min(0.5 * B, value("k_LL") * value("ll_max_bw_gbps", view.cfg.collectives))
    return B * WIRE_EFF[protocol]


# ---------------------------------------------------------------- tuner

def nccl_channels(nbytes: int, protocol: str, n: int, algorithm: str = "ring", cc=None) -> int:
    """NCCL's rule (enqueue.cc): drop channels while nBytes < nc * nthreads * threshold."""
    nc = int(value("max_channels", cc))
    thr = _THREAD_THR[protocol] * (n if protocol == "LL" and algorithm == "ring" else 1)
    while nc > 1 and nbytes < nc * _NT_MAX[protocol] * thr:
        nc -= 1
    return nc


def ring(view: FabricView | None, n: int, channel: int = 0) -> list[int]:
    """The ring of one channel over positions 0..n-1 (= ranks 0..n-1 of the fabric): fabric.topology.ring_order
    (domains kept together, rail-aligned crossings), or rank order without a fabric view. Channel c shifts every
    rank to the rank c places further in its domain (same domain sizes only), so that the rings of different
    channels cross between domains on different rails, as NCCL's channels do."""
    if view is None or n > view.topo.n_ranks or n <= 2:
        return list(range(n))
    return list(view.memo(("ring", n, channel), lambda: _ring(view, n, channel)))


def _ring(view: FabricView, n: int, channel: int) -> list[int]:
    from fabric.topology import ring_order
    base = [int(r) for r in ring_order(view.topo, list(range(n)))]
    if channel == 0 or _domains(view, n) is None:   # shift only where NIC rails join the domains
        return base
    dom = view.topo.node_domain[:n]
    members = {int(d): [r for r in range(n) if dom[r] == d] for d in np.unique(dom)}
    if len({len(m) for m in members.values()}) != 1 or len(members) == 1:
        return base
    shift = {}
    for m in members.values():
        for i, r in enumerate(m):
            shift[r] = m[(i + channel) % len(m)]
    return [shift[r] for r in base]


def _ring_hops(view: FabricView, n: int):
    o = ring(view, n)
    return [(o[i], o[(i + 1) % n]) for i in range(n)]


def _domains(view: FabricView, n: int):
    """(domains N, ranks per domain g) when ranks 0..n-1 form >= 2 equal domains of >= 2 that a NIC joins."""
    def make():
        groups = _nic_joined(view, domain_groups(view.topo, n, 2))
        return None if groups is None else (len(groups), len(groups[0]))
    return view.memo(("domains", n), make)


def tree_groups(view: FabricView, n: int):
    """The nodes of a double binary tree call (fabric/collectives/tree.py): ranks 0..n-1 by host domain, or None
    unless they form >= 2 equal domains (of >= 1 rank) joined by a NIC."""
    return _nic_joined(view, domain_groups(view.topo, n, 1))


def _nic_joined(view: FabricView, groups):
    """groups, when a NIC joins the first two (the domains are hosts of a scale-out fabric), else None."""
    return groups if groups is not None and view.crosses_nic(groups[0][0], groups[1][0]) else None


def tree_domains(view: FabricView, n: int):
    """(nodes N, ranks per node g) of tree_groups, or None."""
    groups = tree_groups(view, n)
    return None if groups is None else (len(groups), len(groups[0]))


def estimate_ns(kind: str, algorithm: str, protocol: str, nbytes: int, n: int, view: FabricView) -> float:
    """Analytic time of one call (the tuner's cost model): launch + steps x per-step time + bytes / rate.
    Per-step time is the fitted h_p (it already includes the hop); rates are the fabric's link and NIC rates times
    the fitted efficiencies and the protocol's wire efficiency."""
    M = float(nbytes)
    cc = view.cfg.collectives
    if algorithm == "deepep_ll":
        return deepep_ll_ns(view, nbytes, n, cc)
    L = launch_ns(cc)
    if n <= 1:
        return L
    hops = _ring_hops(view, n)
    net = [view.crosses_nic(s, d) for s, d in hops]
    h = value(f"h_{protocol}_ns")
    hn = h + value("d_net_ns") + (value("F_Simple_net_ns") if protocol == "Simple" else 0.0)
    mean_h = sum(hn if x else h for x in net) / n
    B = view.rank_gbps(0) * value("eta_nvl")
    if protocol == "LL":
        B = min(0.5 * B, value("k_LL") * value("ll_max_bw_gbps", cc))
    else:
        B *= WIRE_EFF[protocol]
    R_net = view.nic_gbps(0) * value("eta_net", cc)
    if protocol != "Simple":
        R_net *= value(f"g_n{protocol}")
    if algorithm in ("nvls", "nvls_tree", "sym_nvls", "sym_oneshot"):
        return L + _nvls_family_ns(algorithm, M, n, view, B, R_net)
    if algorithm == "tree":
        doms = tree_domains(view, n)
        if doms is None:
            return math.inf
        N, g = doms
        rails = g if protocol == "Simple" else min(g, nccl_channels(nbytes, protocol, n, "tree", cc=cc))
        t = max(2 * M / B if g > 1 else 0.0, M / max(R_net * rails, 1e-9))
        return L + 2 * ((g - 1) * h + math.log2(N) * hn) + t
    if algorithm == "hierarchical":
        doms = _domains(view, n)
        if doms is None:
            return math.inf
        N, g = doms
        h_lat = 2 * (g - 1) * h + 2 * (N - 1) * hn
        t = 2 * (g - 1) / g * M / B + 2 * (N - 1) / N * (M / g) / max(R_net, 1e-9)
        return L + h_lat + t
    if kind in ("allreduce", "allgather", "reduce_scatter"):
        S = 2 * (n - 1) if kind == "allreduce" else n - 1
        f = S / n
        t = f * M / B
        if any(net):   # the channels' rings cross between domains on min(channels, ranks per domain) rails
            doms = _domains(view, n)
            rails = min(nccl_channels(nbytes, protocol, n, cc=cc), doms[1] if doms else 1)
            t = max(t, f * M / max(R_net * rails, 1e-9))
        return L + S * mean_h + t
    # direct kinds: one step, every peer at once
    per = M if kind in ("broadcast", "sendrecv") else M / n
    peers = n - 1
    t = per * peers / B if kind != "sendrecv" else per / B
    if any(net):
        t = max(t, per * peers / max(R_net, 1e-9))
    return L + (hn if any(net) else h) + t


def deepep_ll_ns(view, nbytes: int, n: int, cc) -> float:
    """The tuner's estimate of deepep_ll (fabric/collectives/alltoall.py; inf where it runs direct): launch, the
    RDMA leg (one rail-aligned NIC hop, the blocks for other nodes at the NIC rate), the node's own NVLink stores and
    the forwarding leg (a poll, one NVLink hop, the forwarded blocks at the scale-up rate) overlapped but for one
    piece of the shorter of the network and forwarding legs, then the final poll."""
    groups = tree_groups(view, n)
    if groups is None:
        return math.inf
    N, g = len(groups), len(groups[0])
    s = nbytes / n
    pieces = min(8, max(1, math.ceil(math.ceil(s) / cc.nccl_like.deepep_chunk_bytes)))
    a, b, c = groups[0][0], groups[1][0], groups[0][1 % g]
    nvl = view.rank_gbps(a)
    net = view.hop_ps(a, b, int(s)) / 1000.0 + (N - 1) * g * s / view.nic_gbps(a)
    local = view.hop_ps(a, c, int(s)) / 1000.0 + (g - 1) * s / nvl
    fwd = cc.step_ns + view.hop_ps(a, c, int(s)) / 1000.0 + (N - 1) * (g - 1) * s / nvl
    return cc.launch_ns + max(net, local, fwd) + min(net, fwd) / pieces + cc.step_ns


def capable(view, ranks) -> bool:
    """Every rank's scale-up ports end on switches that reduce and multicast (topology node_reduce)."""
    from fabric.topology import SWITCH
    t = view.topo
    red = getattr(t, "node_reduce", None)
    if red is None or not np.asarray(red).any():
        return False
    for r in ranks:
        sw = t.ch_dst[t.ch_src == r]
        sw = sw[t.node_kind[sw] == SWITCH]
        if not len(sw) or not np.asarray(red)[sw].all():
            return False
    return True


def nvls_gbps(view) -> float:
    """Payload GB/s of one GPU's NVLS traffic: k_nvls x nvls_efficiency[arch] x its scale-up rate."""
    cc = view.cfg.collectives
    return view.rank_gbps(0) * value("k_nvls") * value("nvls_efficiency", cc)


def _nvls_family_ns(algorithm: str, M: float, n: int, view: FabricView, B_p: float, R_net_p: float) -> float:
    """Latency + wire time (no launch) of the in-switch and symmetric algorithms (docs/collectives.md §NVLS):
    nvls: nvls_lat + M(1+1/n)/R_nvls; nvls_tree: nvls_lat + 2 log2(N) network Simple steps + max(M(1+1/g)/R_nvls,
    M/(g R_net)); sym_nvls: 2 h_Simple + M(1+1/n)/R_nvls; sym_oneshot (LL): h_LL + (n-1)M/R_LL."""
    if algorithm == "sym_oneshot":
        return value("h_LL_ns") + (n - 1) * M / B_p
    R = nvls_gbps(view)
    if algorithm == "nvls":
        return value("nvls_lat_ns") + M * (1 + 1 / n) / R
    if algorithm == "sym_nvls":
        return 2 * value("h_Simple_ns") + M * (1 + 1 / n) / R
    doms = _domains(view, n)
    if doms is None:
        return math.inf
    N, g = doms
    hn = value("h_Simple_ns") + value("d_net_ns") + value("F_Simple_net_ns")
    return (value("nvls_lat_ns") + 2 * math.log2(N) * hn
            + max(M * (1 + 1 / g) / R, M / max(g * R_net_p, 1e-9)))


_ALG_PROTOCOL = {"nvls": "Simple", "nvls_tree": "Simple", "sym_nvls": "Simple", "sym_oneshot": "LL", "deepep_ll": ""}


def nvls_candidates(view: FabricView, n: int, cc) -> list[str]:
    """AllReduce algorithms of the in-switch family the fabric and run mode allow: nvls (one domain) / nvls_tree
    (several) where every rank's switches reduce (switch.reduction), and with collectives.nccl_like.symmetric the
    NCCL 2.27 symmetric kernels of one domain (sym_oneshot; sym_nvls where the switches reduce)."""
    if n < 2 or n > view.topo.n_ranks:
        return []
    one = len(set(view.topo.node_domain[:n].tolist())) == 1
    cap = capable(view, range(n))
    out = []
    if cc.nccl_like.symmetric and one:
        out += ["sym_oneshot"] + (["sym_nvls"] if cap else [])
    if cap:
        out += ["nvls"] if one else (["nvls_tree"] if _domains(view, n) else [])
    return out


def candidates(kind: str, nbytes: int, n: int, cc, view: FabricView, algorithm: str | None = None) -> list:
    """The (algorithm, protocol) pairs the tuner ranks for one call: every algorithm the fabric allows (or the
    forced one of `algorithm` / collectives.policy) with every protocol it runs (or collectives.nccl_like.protocol;
    a forced algorithm the forced protocol excludes keeps its own protocol)."""
    if algorithm is not None:
        algs = [algorithm]
    elif kind in ("allreduce", "allgather", "reduce_scatter"):
        algs = ["ring"] + (["hierarchical"] if kind == "allreduce" and _domains(view, n) else [])
        if kind == "allreduce" and tree_domains(view, n):
            algs.append("tree")
        if kind == "allreduce":
            algs += nvls_candidates(view, n, cc)
        if cc.policy not in ("sd200", "auto"):
            algs = [cc.policy if kind == "allreduce" else ("ring" if cc.policy in ("ring", "halving_doubling")
                                                           else "direct")]
    elif kind == "alltoall":   # DeepEP's kernels where the deployment has them (collectives.nccl_like.alltoall)
        mode = cc.nccl_like.alltoall
        ep = mode != "direct" and tree_groups(view, n) is not None
        algs = (["deepep_ll"] if mode == "deepep_ll" else ["direct", "deepep_ll"]) if ep else ["direct"]
    else:
        algs = ["direct"]
    if kind in ("alltoall", "broadcast", "sendrecv"):
        per = nbytes / max(n, 1) if kind == "alltoall" else nbytes
        protos = ["LL" if per <= value("p2p_ll_max_bytes") else "Simple"]
    else:
        protos = list(PROTOCOLS)
    if cc.nccl_like.protocol != "auto":
        protos = [cc.nccl_like.protocol]
    pairs = [(a, p) for a in algs for p in protos if a not in _ALG_PROTOCOL or p == _ALG_PROTOCOL[a]]
    pairs += [(a, "") for a in algs if a == "deepep_ll"]     # not NCCL's: no protocol of NCCL's
    return pairs or [(algs[0], _ALG_PROTOCOL.get(algs[0], protos[0]))]


def channels_for(nbytes: int, protocol: str, n: int, algorithm: str, cc) -> int:
    """Channels of a call (NCCL's rule; ring and hierarchical drop them as a ring does; 0 for deepep_ll, which
    stripes as the plain library does, collectives.channels)."""
    if not protocol:
        return 0
    return nccl_channels(nbytes, protocol, n, "ring" if algorithm in ("ring", "hierarchical") else algorithm, cc=cc)


def tune(kind: str, nbytes: int, n: int, cfg, view: FabricView | None = None,
         algorithm: str | None = None, *, oracle=None) -> Choice:
    """(algorithm, protocol, channels) for one call of the nccl-like library: the candidate of least estimated
    time (NCCL's tuner), or the forced algorithm/protocol of collectives.policy / collectives.nccl_like.protocol
    (or of `algorithm`).

    With a cost oracle (fabric.collectives.policy: `oracle(cfg, fragments) -> [us, ...]`, the analytic engine
    where the pipeline runs one) the estimate only shortlists: every candidate within tuner_check_margin of the
    least estimate is simulated and the fastest runs, so the tuner never picks what its engine runs slower
    (memoised per call shape)."""
    cc = getattr(cfg, "collectives", cfg)
    view = view if view is not None else fabric_view(cfg)
    pairs = candidates(kind, nbytes, n, cc, view, algorithm)
    est = [estimate_ns(kind, a, p, nbytes, n, view) for a, p in pairs]
    least = min(est)
    a, p = pairs[est.index(least)]
    if oracle is not None and n > 1 and math.isfinite(least):
        # the estimate ranks an algorithm's protocols well, algorithms against each other less (nvls_tree over tree
        # at 64 MiB on the 2x8 presets; direct all-to-all 1.9x too slow at 1 GiB on hgx-h800-ib): each algorithm's
        # best protocol is simulated, and every candidate within the margin
        best_of = {}
        for i, (alg, _) in enumerate(pairs):
            if math.isfinite(est[i]) and (alg not in best_of or est[i] < est[best_of[alg]]):
                best_of[alg] = i
        near = sorted((e, i) for i, e in enumerate(est)
                      if e <= least * value("tuner_check_margin") or i in best_of.values())
        if len(near) > 1:     # in estimate order: a tie in simulated time keeps the estimate's pick
            a, p = _fastest_simulated(kind, int(nbytes), int(n), view.cfg, tuple(pairs[i] for _, i in near), oracle)
    return Choice(a, p, channels_for(nbytes, p, n, a, cc))


_BUILDER: list = []     # fabric.collectives.template, registered by the package (which imports this module)


def register_builder(template) -> None:
    """The package's cached fragment builder, which the oracle check builds its candidates with (lowering then
    finds the winner's fragment built)."""
    _BUILDER[:] = [template]


@functools.lru_cache(maxsize=4096)
def _fastest_simulated(kind: str, nbytes: int, n: int, cfg, pairs: tuple, oracle) -> tuple:
    """The pair of `pairs` whose fragment the oracle times least (the first of equal times)."""
    template, cc = _BUILDER[0], cfg.collectives
    frags = [template(kind, a, nbytes, n, cfg, choice=Choice(a, p, channels_for(nbytes, p, n, a, cc)))
             for a, p in pairs]
    t = oracle(cfg, frags)
    return pairs[min(range(len(pairs)), key=t.__getitem__)]


# NVLink generations an hgx node's links identify (phy lanes x lane rate per link), and whether their NVSwitch
# reduces in the switch (NVLink SHARP, the nccl-like library's nvls algorithms): NVLink3 (A100, 4 x 50 Gb/s,
# NVSwitch gen2: no SHARP), NVLink4 (H100/H200, 2 x 100 Gb/s, NVSwitch gen3: SHARP), NVLink5 (B200, 2 x 200 Gb/s,
# NVLink Switch gen4: SHARP). Sources: the dgx-a100 / dgx-h100 / dgx-b200 presets' [SHARP], [NVS3] notes.
NVLINK_GENERATIONS = {(4, 50.0): ("NVLink3 (A100, NVSwitch gen2)", False),
                      (2, 100.0): ("NVLink4 (H100/H200, NVSwitch gen3)", True),
                      (2, 200.0): ("NVLink5 (B200, NVLink Switch gen4)", True)}


def config_warnings(cfg) -> list[str]:
    """Slips in a config that runs but is probably not what was meant, one line each naming the key and the fix:
    an NVSwitch node (topology.kind = hgx) running the SD200 fabric's own library, and an NVSwitch generation that
    reduces in the switch with switch.reduction off (the nccl-like library then never runs NVLS)."""
    out = []
    if cfg.topology.kind != "hgx":
        return out
    if cfg.collectives.library == "sd200":
        out.append("topology.kind = hgx is an NVSwitch node, but collectives.library = sd200 runs the "
                   "SD200 fabric's own tiered library on it; set collectives.library = nccl-like for the library "
                   "such a node runs (or keep sd200 on purpose)")
    gen = NVLINK_GENERATIONS.get((cfg.phy.lanes, float(cfg.phy.lane_rate_gbps)))
    if gen is not None and gen[1] and not cfg.switch.reduction:
        out.append(f"the links ({cfg.phy.lanes} x {cfg.phy.lane_rate_gbps:g} Gb/s) are {gen[0]}, whose switches "
                   f"reduce in the switch (NVLink SHARP), but switch.reduction = false: no nvls algorithm will run; "
                   f"set switch.reduction = true (or keep it off for a switch without SHARP)")
    return out


def fabric_view(cfg) -> FabricView:
    """The FabricView of a FabricConfig (cached per config)."""
    if not hasattr(cfg, "topology"):
        raise ConfigError("the nccl-like library needs the whole FabricConfig (its fabric's latency and bandwidth), "
                          "not only the [collectives] section")
    return _view(cfg)


@functools.lru_cache(maxsize=8)
def _view(cfg) -> FabricView:
    return FabricView(cfg)


def n_slices(chunk: int, protocol: str, channels: int) -> int:
    """Slices a ring step's chunk is pipelined in (at most 64, to bound the graph)."""
    per = value(f"slice_{protocol}_bytes") * max(channels, 1)
    return int(min(64, max(1, math.ceil(chunk / per))))
