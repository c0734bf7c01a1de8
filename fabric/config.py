"""Every model parameter: unit, default, help text and the reason for the default.

A parameter is a field of a frozen dataclass section (fabric.params); its metadata carries the unit, the allowed
range and the help text, from which validation, `--set section.key=value` overrides and the CLI help are derived.
The sections are declared here, except the parameters of one topology kind, which its module in fabric/topologies/
declares with its builder: they form the sub-section [topology.<kind>] (`--set topology.hgx.switch_planes=4`). The
collective libraries' own parameters are the sub-sections [collectives.sd200] and [collectives.nccl_like]. Presets
are TOML files in fabric/presets/ that override defaults section by section.

A key that moved into a sub-section keeps its old flat name for one release (`was=` in its metadata): reading it
prints one deprecation line per key and process and sets the new key.

This file belongs to the distribution scaleup-fabric: fabric._check_build looks for that name here, since the SSH
tool Fabric's wheel ships a fabric/config.py of its own.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
import sys
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from fabric import topologies
from fabric.errors import ConfigError
from fabric.params import Section, check_value, param, range_text, subsection
from fabric.phy import packet_flits


@dataclass(frozen=True)
class PhyConfig(Section):
    """Physical layer, per unidirectional channel."""
    lanes: int = param(8, unit="lanes", lo=1, hi=64, help="SerDes lanes per port and direction",
                       reason="x8 ports at 64 Gb/s give 64 GB/s per direction, the bandwidth of the credit sizing "
                              "example in docs/sources.md §Protocol standards")
    lane_rate_gbps: float = param(64.0, unit="Gb/s", lo=0, lo_open=True, hi=1000,
                                  help="signalling rate of one lane",
                                  reason="PCIe-6-class 64 GT/s SerDes, the rate class of copper scale-up ports")
    line_code_efficiency: float = param(1.0, unit="fraction", lo=0, lo_open=True, hi=1,
                                        help="data bits per line bit of the lane code (128b/130b = 0.9846)",
                                        reason="flit-mode PHY: framing lives inside the flit (1b/1b), as in "
                                               "PCIe 6 flit mode")
    flit_bytes: int = param(256, unit="B", lo=16, hi=4096, help="flit size on the wire",
                            reason="256 B flits as in PCIe 6 flit mode and CXL 3 "
                                   "(docs/sources.md §Protocol standards)")
    flit_overhead_bytes: int = param(8, unit="B", lo=0, hi=1024,
                                     help="per-flit overhead: CRC plus data-link header (sequence, Ack, credits)",
                                     reason="4 B LCRC + 4 B DLP header, no FEC at BER 1e-12; 10 B (docs/sources.md "
                                            "§Protocol standards) would leave 95.7% with 16 B transaction headers "
                                            "at 4 KiB payloads")
    tx_latency_ns: float = param(8.0, unit="ns", lo=0, hi=1e6, help="transmit PHY latency (serialiser, TX FIFO)",
                                 reason="a few tens of UI-clock cycles of a 64G SerDes")
    rx_latency_ns: float = param(12.0, unit="ns", lo=0, hi=1e6,
                                 help="receive PHY latency (deserialiser, CDR, CRC check; no FEC)",
                                 reason="no RS-FEC at BER 1e-12 saves its 37-115 ns receive latency "
                                        "(docs/sources.md §Protocol standards)")
    cable_m: float = param(1.0, unit="m", lo=0, hi=1000, help="cable or trace length of a link",
                           reason="all-copper short-reach links inside one super-node cabinet")
    wire_ns_per_m: float = param(5.0, unit="ns/m", lo=0, hi=100, help="propagation delay per metre",
                                 reason="copper, docs/sources.md §Protocol standards")
    ber: float = param(1e-12, unit="errors/bit", lo=0, hi=1, hi_open=True,
                       help="raw bit error rate (of the good state with the burst model); a flit fails its CRC with "
                            "1-(1-ber)^(8*flit_bytes) without FEC",
                       reason="the SD200's published BER (docs/sources.md §SD200 link)")
    fec_n: int = param(0, unit="symbols", lo=0, hi=1 << 16,
                       help="FEC: Reed-Solomon codeword length n (0 = no FEC); it corrects (n-k)/2 symbols, costs "
                            "k/n of the rate and fec_latency_ns per hop, and the kernel draws flit errors at the "
                            "post-FEC rate (fabric/phy.py flit_error_rate); 544 with fec_k=514 is KP4",
                       reason="off: the SD200's BER 1e-12 needs none, and 96% payload efficiency leaves no room "
                              "for a 5.5% code (docs/sources.md §Protocol standards)")
    fec_k: int = param(514, unit="symbols", lo=1, hi=1 << 16, help="FEC: data symbols per codeword",
                       reason="KP4 RS(544,514), t = 15, as 100G-per-lane Ethernet and UALink-class PHYs use")
    fec_symbol_bits: int = param(10, unit="bits", lo=1, hi=16, help="FEC: bits per Reed-Solomon symbol",
                                 reason="KP4's 10-bit symbols")
    fec_latency_ns: float = param(60.0, unit="ns", lo=0, hi=1e6,
                                  help="FEC: encode + decode latency added to every hop when fec_n > 0",
                                  reason="RS-FEC receive latency 37-115 ns (docs/sources.md §Protocol standards); "
                                         "not published for this PHY [E]")
    ge_bad_ber: float = param(0.0, unit="errors/bit", lo=0, hi=1, hi_open=True,
                              help="burst errors (two-state Gilbert-Elliott): BER of the bad state (0 = off; the "
                                   "good state's is phy.ber)",
                              reason="off: the published figure is one BER (docs/sources.md §SD200 link)")
    ge_good_dwell_ns: float = param(1e6, unit="ns", lo=0, lo_open=True, hi=1e15,
                                    help="burst errors: mean time in the good state (exponential; counted while "
                                         "the link sends)",
                                    reason="not published [E]: rare bursts, one per ms of traffic")
    ge_bad_dwell_ns: float = param(100.0, unit="ns", lo=0, lo_open=True, hi=1e15,
                                   help="burst errors: mean time in the bad state (exponential; counted while the "
                                        "link sends)",
                                   reason="not published [E]: a burst of a few flits' length at 64 GB/s")


@dataclass(frozen=True)
class LinkConfig(Section):
    """Data-link layer: sequence numbers, Ack/Nak, go-back-N replay and credit-based flow control."""
    seq_bits: int = param(12, unit="bits", lo=2, hi=30, help="width of the wrapping sequence number",
                          reason="PCIe's 12-bit sequence numbers (docs/sources.md §Protocol standards)")
    replay_buffer_flits: int = param(0, unit="flits", lo=0, hi=1 << 20,
                                     help="replay buffer size; the sender stalls when unacknowledged packets fill "
                                          "it; 0 = auto: sized from the fabric so that every channel runs at its rate",
                                     reason="auto = max over channels of (ceil(1.25 x R / T) + 1) x F, R = Ack round "
                                            "trip (first flit + PHY/wire latency + Ack coalescing, min(ack_timer_ns, "
                                            "ack_every_packets x T) + one flit and PHY/wire latency back), T and F "
                                            "as for credit_pool_flits, 25% margin, + 1 packet the sender checks room "
                                            "for (fabric/phy.py replay_buffer_needs); an explicit value that caps a "
                                            "channel warns")
    ack_every_packets: int = param(8, unit="packets", lo=1, hi=4096,
                                   help="send a coalesced Ack after this many good packets",
                                   reason="amortises Acks while keeping the replay buffer small")
    ack_timer_ns: float = param(100.0, unit="ns", lo=0, lo_open=True, hi=1e9,
                                help="send a pending Ack at the latest this long after the first unacked packet",
                                reason="bounds Ack delay for trickle traffic well below the replay timer")
    replay_timer_ns: float = param(2000.0, unit="ns", lo=0, lo_open=True, hi=1e10,
                                   help="replay unacknowledged packets if no Ack arrives for this long",
                                   reason="about 2 us, docs/sources.md §SD200 link (retransmit latency of order 1 us)")
    replay_limit: int = param(4, unit="replays", lo=1, hi=1000,
                              help="replays without forward progress before the link retrains",
                              reason="PCIe retrains after the 4th failed replay")
    retrain_ns: float = param(5000.0, unit="ns", lo=0, hi=1e12,
                              help="link outage while retraining; units in flight are lost",
                              reason="a fast recovery of a short copper link takes microseconds")
    vcs: int = param(2, unit="VCs", lo=1, hi=8, help="virtual channels per link (requests, responses, ...)",
                     reason="requests and responses on separate VCs avoid protocol deadlock")
    credit_pool_flits: int = param(0, unit="flits", lo=0, hi=1 << 20, was="link.credit_flits",
                              help="receive buffer per VC, advertised as flit credits (one credit = one flit slot); "
                                   "0 = auto: sized from the fabric so that every channel runs at its rate and a "
                                   "switch input holds that for each output it feeds",
                              reason="auto = max over channels of ceil(1.25 x R / T) x F x outputs, R = credit round "
                                     "trip (packet on the wire + PHY/wire latency + forwarding node's latency and next "
                                     "flit + UpdateFC coalescing + one flit and PHY/wire latency back), T = wire "
                                     "time and F = flits of a max-payload packet, 25% margin (docs/sources.md "
                                     "§Protocol standards: credits cover bandwidth x credit round trip), outputs = "
                                     "the other ports of a forwarding receiver (1 at a rank): a round trip per "
                                     "output, as VOQ switches with per-output credit buffer, so packets for a busy "
                                     "output never take the credits packets for an idle one need (docs/sources.md "
                                     "§Switch buffers; on sd200 85 x 21 = 1785 flits, 446 KiB per VC per switch "
                                     "input; fabric/phy.py credit_pool_needs); an explicit value that caps a "
                                     "channel's rate warns")
    credit_update_flits: int = param(8, unit="flits", lo=1, hi=1 << 20,
                                     help="send an UpdateFC once this many credits have been freed",
                                     reason="coalesces credit returns to one per ~2 KiB")
    credit_update_ns: float = param(50.0, unit="ns", lo=0, lo_open=True, hi=1e9,
                                    help="send an UpdateFC at the latest this long after a credit is freed",
                                    reason="short against the 300 ns credit round trip the pool covers")
    control_wire_bytes: int = param(0, unit="B", lo=0, hi=4096,
                                    help="wire bytes an Ack, Nak or UpdateFC takes on the reverse channel (0 = it "
                                         "rides in the data-link bytes every flit carries); no credits (DLLPs "
                                         "take none)",
                                    reason="flit mode carries Ack/Nak and flow-control updates in each flit's "
                                           "data-link bytes, paid in phy.flit_overhead_bytes (docs/sources.md "
                                           "§Protocol standards: PCIe 6 flit mode); 8 = PCIe packet-mode DLLPs")
    credit_refresh_ns: float = param(1000.0, unit="ns", lo=0, lo_open=True, hi=1e10,
                                     help="resend the cumulative credit count this often while traffic is pending",
                                     reason="recovers lost UpdateFCs, as PCIe's periodic UpdateFC does")


@dataclass(frozen=True)
class TransactionConfig(Section):
    """Transaction layer: load/store packets."""
    header_bytes: int = param(16, unit="B", lo=0, hi=256, help="transaction header per packet",
                              reason="a 4-DW PCIe-class header with a 64-bit address")
    max_payload_bytes: int = param(4096, unit="B", lo=4, hi=1 << 16, help="largest store or completion payload",
                                   reason="PCIe's largest MPS; needed for >= 96% payload efficiency")
    max_read_request_bytes: int = param(4096, unit="B", lo=4, hi=1 << 16, help="largest read request",
                                        reason="PCIe's largest MRRS")
    read_tags: int = param(256, unit="tags", lo=1, hi=1 << 16, help="outstanding reads per requester",
                           reason="PCIe 8-bit tags")


@dataclass(frozen=True)
class SimConfig(Section):
    """Simulation control."""
    seed: int = param(1, unit="seed", lo=0, hi=2**63 - 1, help="seed of every random stream (per-link RNGs)",
                      reason="fixed so that runs are reproducible bit for bit")
    watchdog_ns: float = param(1e6, unit="ns", lo=0, lo_open=True, hi=1e15,
                               help="stop with a report if packets are in flight and nothing moves for this long",
                               reason="1 ms is far beyond any legitimate stall (replay timer 2 us, retrain 5 us); "
                                      "a value below the longest idle gap of a healthy run (idle_gap_ns: replay "
                                      "timer + retrain + credit refresh + Ack/UpdateFC timers + one crossing of "
                                      "the fabric) is refused")
    max_events: int = param(0, unit="events", lo=0, hi=2**62,
                            help="refuse a packet-engine run whose estimated kernel events (from the task graph's "
                                 "packets and the routes' hops, before the run) exceed this; 0 = auto",
                            reason="auto = 2e9 events, 1-3 minutes of kernel time at 10-30 M events/s (the "
                                   "largest bench case has 7.4e7): a time budget, since the kernel's memory does not "
                                   "grow with events (sim.max_memory_mb bounds that); raise it explicitly to run "
                                   "anyway")
    max_memory_mb: int = param(0, unit="MiB", lo=0, hi=1 << 40,
                               help="refuse a run (or a topology's routing) whose estimated memory exceeds this; "
                                    "0 = auto",
                               reason="auto = half of the machine's physical memory (os.sysconf), so that an "
                                      "oversized fabric is refused up front instead of dying in MemoryError or "
                                      "swapping the machine")


@dataclass(frozen=True)
class SwitchConfig(Section):
    """Fabric switches: virtual-output-queued, cut-through."""
    latency_ns: float = param(100.0, unit="ns", lo=0, hi=1e7,
                              help="port-to-port cut-through pipeline latency of a fabric switch",
                              reason="PCIe-class switches take 85-140 ns; UALink targets <= 150 ns "
                                     "(docs/sources.md §Protocol standards)")
    arbitration: str = param("round_robin", unit="choice", choices=("round_robin", "fixed_priority"),
                             help="output arbitration among input ports' virtual output queues",
                             reason="round robin is starvation-free and what switch ASICs ship")
    reduction: bool = param(False, unit="bool",
                            help="in-host (scale-up) switches reduce and multicast in the switch (NVLink SHARP / "
                                 "NVLS class): in-switch legs (task-graph ops SW_UP / SW_DOWN) and the nccl-like "
                                 "library's nvls algorithms may use them",
                            reason="off for a generic switch; NVSwitch gen3+ (H100/H200, B200) has it, NVIDIA NVLink "
                                   "SHARP (docs/sources.md §In-switch reduction); A100's NVSwitch gen2 does not")


@dataclass(frozen=True)
class EndpointConfig(Section):
    """Accelerator-side costs of a transaction, outside the links and switches."""
    issue_ns: float = param(60.0, unit="ns", lo=0, hi=1e7,
                            help="from a core's store or load to its first byte at the fabric port (on-chip NoC)",
                            reason="on-chip network crossing of a large accelerator die, tens of ns")
    completion_ns: float = param(80.0, unit="ns", lo=0, hi=1e7,
                                 help="from last byte at the destination port to data visible in its memory",
                                 reason="a write into HBM through the destination's NoC and memory controller")
    translation_ns: float = param(20.0, unit="ns", lo=0, hi=1e7,
                                  help="address translation at the ingress port (host -> global -> destination)",
                                  reason="one lookup in an on-chip translation table, a few clock cycles")
    e2e_window_bytes: int = param(0, unit="B", lo=0, hi=1 << 40,
                                  help="receive space each destination pre-grants each source (preventive "
                                       "end-to-end flow control: a store leaves only into granted space; drained "
                                       "space is granted back in quarters of the window or when a store ends); "
                                       "0 = auto: sized from the fabric so that every pair runs at its rate",
                                  reason="auto = max over source-destination pairs of 1.25 x 4/3 x (B x G + 2 "
                                         "max payloads), B = the pair's payload rate over its routes, G = data + "
                                         "grant round trip (zero-load packet latency there, grant latency back), "
                                         "4/3 for the quarter-window grants, 25% margin (fabric/phy.py "
                                         "e2e_window_needs); 248 KiB on sd200 (124 GB/s x 1.15 us); an explicit "
                                         "value that caps a pair warns")
    e2e_grants: bool = param(True, unit="bool",
                             help="whether destinations pre-grant receive space end to end (the window above); "
                                  "false = no end-to-end window: a store waits only for link-level credits",
                             reason="on: the generic fabric's preventive flow control (docs/kernel.md); NVLink and "
                                    "InfiniBand/RoCE RDMA writes have no end-to-end grant (link credits only; "
                                    "NCCL's own flow control is the library's slices_in_flight), so the hgx-* and "
                                    "dgx-* presets set false")
    p2p_forward_ns: float = param(30.0, unit="ns", lo=0, hi=1e7,
                                  help="extra cost when cross-host P2P traffic is forwarded through a shadow port",
                                  reason="one more table lookup and re-tagging in the forwarding port")
    shadow_windows: int = param(0, unit="windows", lo=0, hi=1 << 20,
                                help="entries of each host domain's shadow-window table at its ingress ports (local "
                                     "windows first, then shadow windows in ascending rank); an address in no "
                                     "entry completes as Unsupported Request; 0 = auto: one per accelerator",
                                reason="auto = the unified map's R windows per domain (64 on sd200: every "
                                       "accelerator visible, docs/sources.md §SD200 system: 8x address space); "
                                       "fewer entries leave accelerators unreachable, which the replay counts")
    xlate_cache_entries: int = param(64, unit="entries", lo=0, hi=1 << 20,
                                     help="translation cache of each ingress port (IOTLB-like: a page of a window "
                                          "per entry); a multiple of xlate_cache_ways, entries / ways a power of "
                                          "two; 0 = no cache, every translation walks the window table",
                                     reason="IOMMU IOTLBs hold tens to a few hundred entries; 64, one per "
                                            "accelerator of sd200's map at one page each; not published [E]")
    xlate_cache_ways: int = param(4, unit="ways", lo=1, hi=1 << 10,
                                  help="associativity of the translation cache (LRU within a set; sets indexed by a "
                                       "hash of the page number)",
                                  reason="4-way set-associative is the common IOTLB compromise; not published [E]")
    xlate_page_bytes: int = param(2 << 20, unit="B", lo=1, hi=1 << 40,
                                  help="bytes of address one translation-cache entry maps (a power of two)",
                                  reason="2 MiB: the huge page GPU runtimes map registered communication buffers "
                                         "with; not published for SD200 [E]")
    translation_miss_ns: float = param(40.0, unit="ns", lo=0, hi=1e7,
                                       help="extra cost of a translation-cache miss: the walk of the host domain's "
                                            "shadow-window table (a hit costs translation_ns alone)",
                                       reason="a binary search of a 64-entry table in switch SRAM: 6 dependent "
                                              "reads of a few ns each, plus the fill; not published [E]")


@dataclass(frozen=True)
class _TopologyShared(Section):
    """Which fabric to build, and the keys every kind reads; a kind's own parameters are its sub-section
    [topology.<kind>], declared with its builder in fabric/topologies/ (presets: fabric/presets/)."""
    kind: str = param("sd200", unit="choice", choices=tuple(topologies.KINDS),
                      help="topology builder, one module of fabric/topologies/ each: "
                           + "; ".join(f"{k.name}: {k.help}" for k in topologies.KINDS.values()),
                      reason="the SD200-class host-domain 3D mesh is the reference system")
    accels_per_domain: int = param(8, unit="accelerators", lo=1, hi=64,
                                   help="accelerators per host domain (behind one domain switch or in one host; "
                                        "on an accelerator mesh, the address map's domains)",
                                   reason="8 OAM modules per host, as in 8-way servers; 8 x 8 = 64 "
                                          "(docs/sources.md §SD200 system)")
    ports_per_accel: int = param(2, unit="ports", lo=1, hi=1024,
                                 help="parallel ports from each accelerator to its domain switch, where accelerators "
                                      "hang off switches (hgx: in all, spread over the switch planes)",
                                 reason="2 x8 ports give 128 GB/s per direction and survive one failed port "
                                        "(docs/sources.md §SD200 system: fault pre-isolation); not published [E]")
    accel_mem_gib: int = param(64, unit="GiB", lo=1, hi=1 << 20,
                               help="memory per accelerator = size of its window in the global address map",
                               reason="up to 4 TB accelerator memory over 64 accelerators "
                                      "(docs/sources.md §SD200 system)")


# the kinds' sub-sections join the shared keys: TopologyConfig is made from the registry of fabric/topologies/
TopologyConfig = dataclasses.make_dataclass(
    "TopologyConfig", [(name, cls, subsection(cls)) for name, cls in topologies.sections().items()],
    bases=(_TopologyShared,), frozen=True,
    namespace={"__module__": __name__, "__doc__": _TopologyShared.__doc__})


@dataclass(frozen=True)
class Sd200LibraryConfig(Section):
    """[collectives.sd200]: the sd200 library's size tiers (fabric/collectives/policy.py)."""
    oneshot_max_bytes: int = param(0, unit="B", lo=0, hi=1 << 40,
                                   help="AllReduce of at most this many bytes uses one-shot; 0 = auto "
                                        "(with twoshot_max_bytes = 0): per group size, the algorithm and path "
                                        "with the least analytic-engine time on this fabric (close candidates "
                                        "decided on the packet engine: tier_check_margin)",
                                   reason="the tier ceilings depend on the group size: on sd200 one-shot wins up to "
                                          "4 KiB over 8 ranks but only up to 256 B over 64 (packet engine, "
                                          "fabric/data/collective_paths_sd200.json, tools/collective_paths.py); "
                                          "a fixed 8 KiB gave a 9x cliff at 64 ranks",
                                   was="collectives.oneshot_max_bytes")
    twoshot_max_bytes: int = param(0, unit="B", lo=0, hi=1 << 40,
                                   help="larger AllReduce/AllGather/ReduceScatter use ring; 0 = auto "
                                        "(see oneshot_max_bytes)",
                                   reason="measured crossover on sd200 (packet engine, "
                                          "fabric/data/collective_paths_sd200.json): two-shot's all-to-all is "
                                          "bisection-bound on the 2x2x2 mesh; over 64 ranks ring wins from 2 MiB "
                                          "(147 vs 157 us, two-shot), over 8 ranks not below 4 MiB; the analytic "
                                          "engine puts the first at 4 MiB (it prices two-shot at 2 MiB 11% below "
                                          "the packet engine, docs/collectives.md §Both engines at 64 ranks), the "
                                          "second at the same size",
                                   was="collectives.twoshot_max_bytes")
    tier_check_margin: float = param(0.5, unit="ratio", lo=0, hi=10,
                                     help="auto tiers: the candidates whose analytic-engine time is within this "
                                          "fraction of the least are run again on the packet engine, which picks "
                                          "among them; 0 = the analytic engine alone",
                                     reason="the analytic engine has no finite switch buffers: where switch input "
                                            "pools fill it is optimistic, by up to 19 % on sd200 at 64 ranks "
                                            "(two-shot 140 vs 157 us at 2 MiB, where ring takes 147 on both) and "
                                            "by 1.47x for two-shot over the 4x4x4 accelerator mesh at 1 GiB "
                                            "(docs/collectives.md §Engine agreement to 1 GB); a candidate 1.5x "
                                            "the least on it has not won on the packet engine")
    tier_check_max_bytes: int = param(8 << 20, unit="B", lo=8, hi=1 << 40,
                                      help="largest size the tier check runs on the packet engine (rounded up to "
                                           "a power of two); a larger call scales each candidate's analytic time "
                                           "by its packet / analytic ratio at this size",
                                      reason="the check's cost grows with the bytes: two-shot over the 4x4x4 "
                                             "mesh takes 0.4 s of packet engine at 2 MiB and 126 s at 1 GiB; "
                                             "from a few MiB every candidate is bandwidth-bound and its ratio "
                                             "settles (1.44x at 16 MiB, 1.47x at 1 GiB)")


@dataclass(frozen=True)
class NcclLikeConfig(Section):
    """[collectives.nccl_like]: the nccl-like library's architecture facts and run mode (its fitted constants:
    fabric/collectives/library.py)."""
    protocol: str = param("auto", unit="choice", choices=("auto", "LL", "LL128", "Simple"),
                          help="protocol of every call (auto: the tuner picks per size); the sd200 library has "
                               "one protocol",
                          reason="NCCL picks LL / LL128 / Simple per size from its cost model (src/graph/tuning.cc)",
                          was="collectives.protocol")
    ll_max_bw_gbps: float = param(0.0, unit="GB/s", lo=0, hi=1e6,
                                  help="NCCL's llMaxBw of the GPU architecture (A100 87.7, H100/H200 141, "
                                       "B200 282); the LL per-GPU cap is k_LL x this; 0 = the profile's 141 (Hopper)",
                                  reason="an architecture fact of NCCL's tuner (src/graph/tuning.cc llMaxBws); a "
                                         "preset of another GPU sets it",
                                  was="collectives.ll_max_bw_gbps")
    max_channels: int = param(0, unit="channels", lo=0, hi=64,
                              help="most channels (rings) of a call; 0 = the profile's 32",
                              reason="NCCL builds 32 channels on NVSwitch H100/H200/B200 nodes, 24 on A100 "
                                     "(a topology fact of NCCL's graph search)",
                              was="collectives.max_channels")
    net_efficiency: float = param(0.0, unit="ratio", lo=0, hi=1,
                                  help="fraction of the NIC line rate Simple reaches, per NIC generation: the "
                                       "NIC's GPUDirect RDMA fraction x the library's share (HDR 0.752, NDR "
                                       "0.794, 400GbE RoCE 0.636); 0 = the profile's HDR 0.752",
                                  reason="RDMA fraction from perftest (HDR 0.90, NDR 0.95: Azure/azurehpc-health-"
                                         "checks); share fitted per transport on mscclpp_NDv4_NDmv4_A100_IB200G_"
                                         "latency.txt (IB), the H200 RoCE tables (RoCE) (docs/calibration.md)",
                                  was="collectives.net_efficiency")
    nvls_efficiency: float = param(0.0, unit="ratio", lo=0, hi=1,
                                   help="NCCL's nvlsEfficiency of the GPU architecture (Hopper 0.85, "
                                        "Blackwell 0.74); the NVLS rate is k_nvls x this x the scale-up rate; 0 = "
                                        "the profile's 0.85 (Hopper)",
                                   reason="an architecture fact of NCCL's tuner (src/graph/tuning.cc); a preset of "
                                          "another GPU sets it",
                                   was="collectives.nvls_efficiency")
    symmetric: bool = param(False, unit="bool",
                            help="run mode: NCCL 2.27 symmetric-memory kernels (registered windows: "
                                 "one-shot LL, two-shot with NVLS multicast where the switches reduce; launch "
                                 "launch_sym_ns instead of launch_ns)",
                            reason="off: a run must register its buffers with ncclCommWindowRegister to get them; "
                                   "the B200 calibration table ran them, so its validate row sets this",
                            was="collectives.symmetric")
    gpus_per_process: int = param(1, unit="GPUs", lo=1, hi=64,
                                  help="run mode: GPUs one host thread drives (nccl-tests -g N); each "
                                       "extra GPU adds host_launch_ns to every call",
                                  reason="one process per GPU is the default of nccl-tests and of frameworks",
                                  was="collectives.gpus_per_process")
    alltoall: str = param("direct", unit="choice", choices=("direct", "deepep_ll", "auto"),
                          help="the EP all-to-all the deployment runs: direct (NCCL's grouped send/recv), deepep_ll "
                               "(DeepEP's low-latency kernels: GPU-initiated RDMA writes to the destination's rail "
                               "peer, NVLink forwarding inside the destination node; on groups of >= 2 equal "
                               "NIC-joined host domains, direct elsewhere) or auto (the tuner picks the faster of "
                               "the two per call)",
                          reason="direct is what NCCL alone runs; DeepEP is a separate library a deployment "
                                 "installs (docs/sources.md §DeepEP), so the hgx-*-ib presets set auto")
    deepep_chunk_bytes: int = param(65536, unit="B", lo=1, hi=1 << 40,
                                    help="deepep_ll: a block for another node crosses the network in pieces of at "
                                         "most this many bytes (at most 8), sent one after the other; its rail "
                                         "peer forwards each piece over NVLink once it has landed",
                                    reason="[E] DeepEP sends and forwards a few tokens at a time: its internode "
                                           "dispatch configs chunk RDMA sends by 6-20 tokens (deep_ep/buffers/"
                                           "legacy.py), 8 at EP 32-64, ~59 KB of 7,408 B FP8 tokens: 64 KiB "
                                           "(docs/sources.md §DeepEP)")
    host_launch_ns: float = param(2554.0, unit="ns", lo=0, hi=1e9,
                                  help="run mode: launch cost per extra GPU of one host thread",
                                  reason="fitted on 1node_8xA100-SXM4-80GB_allreduce_8B-128MB.txt (-g 8 floor); "
                                         "2.53 us on the H200 2x8 table's host (docs/calibration.md)",
                                  was="collectives.host_launch_ns")


@dataclass(frozen=True)
class CollectivesConfig(Section):
    """Collective library: algorithm selection and local-reduction cost."""
    library: str = param("sd200", unit="choice", choices=("sd200", "nccl-like"),
                         help="collective library profile: sd200 (tiered optimised library: the keys of this "
                              "section and [collectives.sd200]) or nccl-like (algorithm x protocol x channels "
                              "chosen by a tuner: [collectives.nccl_like]; fitted constants in "
                              "fabric/collectives/library.py, docs/collectives.md)",
                         reason="the SD200 library is this fabric's own (docs/sources.md §SD200 library); "
                                "nccl-like is the generic library a cluster runs, fitted on the calibration "
                                "tables (docs/calibration.md)")
    policy: str = param("sd200", unit="choice",
                        choices=("sd200", "auto", "oneshot", "twoshot", "ring", "halving_doubling", "oneshot_load",
                                 "twoshot_load", "oneshot_cached", "twoshot_cached"),
                        help="algorithm selection: size-tiered (sd200), the nccl-like tuner (auto; sd200 means "
                             "the same under nccl-like) or one fixed algorithm",
                        reason="the SD200 library's size-tiered strategy (docs/sources.md §SD200 library)")
    channels: int = param(2, unit="flows", lo=1, hi=64,
                          help="flows a large store of a collective is striped over (NCCL-style channels)",
                          reason="one per accelerator port (topology.ports_per_accel = 2): a single flow keeps one "
                                 "route, so it would leave the other port idle")
    channel_min_bytes: int = param(65536, unit="B", lo=1, hi=1 << 40,
                                   help="stores shorter than this stay one flow",
                                   reason="below ~64 KiB a store is latency-bound: a second flow adds a flag and "
                                          "a JOIN but saves < 0.5 us of serialisation")
    reduce_gbps: float = param(1600.0, unit="GB/s", lo=0, lo_open=True, hi=1e6,
                               help="local reduction bandwidth in gigaBYTES/s over bytes touched "
                                    "(k operands read + 1 result written)",
                               reason="[E] a reduction streams its operands through HBM: the sd200-accelerator "
                                      "chip profile's 1.6 TB/s (fabric/capture/chips/sd200-accelerator.toml)")
    reduce_kernel_ns: float = param(300.0, unit="ns", lo=0, hi=1e9,
                                    help="fixed cost of one local reduction (or local copy) step",
                                    reason="[E] HBM load latency plus a block-wide sync inside an already running "
                                           "collective kernel; below the ~0.95 us of a separate tiny kernel "
                                           "(docs/sources.md §H200 GEMV)")
    flag_bytes: int = param(8, unit="B", lo=1, hi=4096,
                            help="size of a synchronisation flag store",
                            reason="one 64-bit epoch counter written with a single store")
    fold_flags: bool = param(True, unit="flag",
                             help="write each flag right after its data in the same ordered flow (one transfer of "
                                  "data+flag); false: a separate flag store issued after the data has landed",
                             reason="a transfer keeps one path and posted stores on a path stay in order, so a "
                                    "trailing flag cannot overtake its data (docs/contracts.md)")
    launch_ns: float = param(1000.0, unit="ns", lo=0, hi=1e9,
                             help="fixed start cost of a collective on each rank (kernel launch and prologue)",
                             reason="[E] ~0.95 us fixed cost of a tiny kernel on a current accelerator "
                                    "(docs/sources.md §H200 GEMV); for an NCCL-like library set collectives.library "
                                    "= nccl-like, not a larger launch_ns (NCCL's measured latencies include the "
                                    "fabric's hops, which the simulator adds again: docs/collectives.md)")
    step_ns: float = param(100.0, unit="ns", lo=0, hi=1e9,
                           help="software cost per algorithm step on each rank: poll the step's flags, then issue",
                           reason="[E] a local flag poll in a persistent fused kernel; for an NCCL-like library "
                                  "set collectives.library = nccl-like, not a larger step_ns (its per-hop 0.6 us "
                                  "includes the hop the simulator delivers itself: docs/collectives.md)")
    entry_barrier: bool = param(False, unit="flag",
                                help="before writing into a peer, wait for that peer's 'buffer free' flag",
                                reason="the SD200 library double-buffers its scratch with epoch-tagged flags "
                                       "('minimal synchronisation'); true models a library that handshakes every "
                                       "call (vLLM custom AllReduce's start barrier, NCCL's ready-to-receive)")
    sd200: Sd200LibraryConfig = subsection(Sd200LibraryConfig)
    nccl_like: NcclLikeConfig = subsection(NcclLikeConfig)


@dataclass(frozen=True)
class ReportConfig(Section):
    """What a run records besides its results (timelines: fabric/timeline.py, docs/timeline.md)."""
    sample_ns: float = param(4000.0, unit="ns", lo=1, hi=1e12,
                             help="interval at which the kernel samples every link's utilisation, queue depth, "
                                  "credit stall and replays for a --timeline (a bounded ring: when it fills, every "
                                  "other sample is dropped and the interval doubles)",
                             reason="the shipped DeepSeek-R1 decode step (8.9 ms) gives ~2,200 samples: fine "
                                    "enough to see each collective's burst, small enough for a timeline of a few "
                                    "tens of MB; sampling only reads counters and never changes a result")


@dataclass(frozen=True)
class ManagerConfig(Section):
    """The fabric manager's reaction to a part that fails for good (--fault, [[faults]]; docs/faults.md)."""
    detection_ns: float = param(10000.0, unit="ns", lo=0, hi=1e12,
                                help="from a link or switch failing to the fabric manager knowing it (the link "
                                     "partner's loss of lock and DL_Down, reported to the manager)",
                                reason="not published [E]: a PHY notices loss of signal in microseconds and the "
                                       "port's DL_Down/Surprise-Down report reaches the manager by interrupt; 10 us")
    route_update_ns: float = param(50000.0, unit="ns", lo=0, hi=1e12,
                                   help="from detection to the new routes being in every source's and switch's "
                                        "tables (recomputed around the failed parts and written to the fabric)",
                                   reason="not published [E]: a route computation over a few hundred nodes plus "
                                          "table writes to every switch over its management interface; 50 us")
    migrate: bool = param(False, unit="flag",
                          help="a serving rank whose accelerator a fault cuts off hands its unfinished work to a "
                               "spare (topology.spares) instead of stopping the run (fabric-replay --migrate; "
                               "docs/faults.md §Task migration)",
                          reason="off: a partition stops the run with one line, as without spares")
    migration_state_gb: float = param(10.5, unit="GB", lo=0, hi=1e6,
                                      help="state a migrated rank's spare must load before it takes over (weights "
                                           "shard, KV cache), copied over the spare's own ports",
                                      reason="DeepSeek-R1's 671 G parameters in FP8 over 64 ranks: 10.5 GB per rank; "
                                             "the KV cache of one 4096-token user is ~0.3 GB more and is left out "
                                             "[E]")
    migration_ns: float = param(0.0, unit="ns", lo=0, hi=1e15,
                                help="from the fabric manager's new routes to the spare taking over a cut-off rank's "
                                     "work (0 = auto: migration_state_gb over the spare's surviving ports at their "
                                     "data rate, ~85 ms for a sd200 spare's two x8 ports)",
                                reason="task migration time is not published [E]: the spare must hold the rank's "
                                       "state before it can run, and its ports are the narrowest part of the copy "
                                       "(the peers holding replicas send in parallel)")


SECTIONS = {
    "phy": PhyConfig,
    "link": LinkConfig,
    "txn": TransactionConfig,
    "switch": SwitchConfig,
    "endpoint": EndpointConfig,
    "topology": TopologyConfig,
    "collectives": CollectivesConfig,
    "sim": SimConfig,
    "report": ReportConfig,
    "manager": ManagerConfig,
}


@dataclass(frozen=True)
class FabricConfig:
    """All parameters. Build with `load_config`; every instance is validated."""
    phy: PhyConfig = field(default_factory=PhyConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    txn: TransactionConfig = field(default_factory=TransactionConfig)
    switch: SwitchConfig = field(default_factory=SwitchConfig)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    collectives: CollectivesConfig = field(default_factory=CollectivesConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    manager: ManagerConfig = field(default_factory=ManagerConfig)
    faults: tuple = ()       # permanent-fault specs (fabric.faults: [[faults]] spec = "..." tables, --fault)

    def __post_init__(self):
        for name in SECTIONS:
            getattr(self, name).validate(name)
        from fabric.faults import parse_all
        parse_all(self.faults)
        _cross_check(self)

    def to_dict(self) -> dict:
        """Sections as tables of their parameters, and `faults` (a list of specs) when there are any."""
        out = dataclasses.asdict(self)
        if not self.faults:
            del out["faults"]
        return out


def _subsections(section) -> list:
    """The sub-sections of a section, in field order."""
    return [getattr(section, f.name) for f in dataclasses.fields(section) if _is_sub(f)]


def idle_gap_ns(c: FabricConfig) -> float:
    """The longest a healthy run can go without progress (no unit accepted, packet delivered or task done), from
    the config alone: a lost unit waits for the replay timer, a failed replay ends in a retrain, a lost UpdateFC
    waits for the credit refresh, Acks and UpdateFCs wait for their timers, and a packet crosses the fabric (PHY,
    wire, switch, endpoint latencies and what each topology sub-section adds: embedded routers, NICs, Ethernet)
    before it counts. sim.watchdog_ns below this is refused."""
    p, lk, ep = c.phy, c.link, c.endpoint
    parts = [s.crossing() for s in _subsections(c.topology)]   # every kind's, whether or not it is the one built
    cable = max([p.cable_m] + [x for q in parts for x in q.cable_m])
    hop = p.tx_latency_ns + p.rx_latency_ns + cable * p.wire_ns_per_m
    crossing = 4 * hop + 2 * max([c.switch.latency_ns] + [x for q in parts for x in q.node_ns])
    for x in [x for q in parts for x in q.once_ns] + [ep.issue_ns, ep.completion_ns, ep.translation_ns,
                                                        ep.p2p_forward_ns]:
        crossing += x
    return (lk.replay_timer_ns + lk.retrain_ns + lk.credit_refresh_ns + lk.ack_timer_ns + lk.credit_update_ns
            + crossing)


def _machine_memory_mb() -> int:
    import os
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20)
    except (ValueError, OSError, AttributeError):     # not POSIX: assume a 16 GiB machine
        return 16 << 10


def machine_cores() -> int:
    """The cores this process may use (its CPU affinity), at least 1."""
    import os
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:          # pragma: no cover - macOS
        return max(os.cpu_count() or 1, 1)


AUTO_MAX_EVENTS = 2_000_000_000


def resource_limits(c: FabricConfig) -> tuple[int, int, str]:
    """(max_events, max_memory_mb, how): sim.max_events / sim.max_memory_mb with 0 resolved (events: AUTO_MAX_EVENTS,
    a time budget; memory: half of the machine's physical memory); `how` names the machine's memory."""
    mem = _machine_memory_mb()
    events = c.sim.max_events or AUTO_MAX_EVENTS
    memory = c.sim.max_memory_mb or max(256, mem // 2)
    return events, memory, f"machine memory {mem} MiB"


def check_memory(c: FabricConfig, need_mb: float, what: str, fix: str) -> None:
    """Refuse work that needs more than sim.max_memory_mb: one ConfigError line, `what` (the need, in words), the
    limit and where it came from, then `fix` or the --set that would admit it."""
    _, max_mb, how = resource_limits(c)
    if need_mb > max_mb:
        given = f"sim.max_memory_mb={c.sim.max_memory_mb}" if c.sim.max_memory_mb else \
            f"sim.max_memory_mb (auto {max_mb}, {how})"
        raise ConfigError(f"{what}, above {given}; {fix} or raise it with --set sim.max_memory_mb="
                          f"{int(need_mb * 1.1) + 1}")


def _cross_check(c: FabricConfig) -> None:
    for name in SECTIONS:
        for f in dataclasses.fields(getattr(c, name)):
            if _is_sub(f):
                getattr(getattr(c, name), f.name).check(c, f"{name}.{f.name}")
    ep = c.endpoint
    sets = ep.xlate_cache_entries // ep.xlate_cache_ways
    if ep.xlate_cache_entries % ep.xlate_cache_ways or sets & (sets - 1):
        raise ConfigError(f"endpoint.xlate_cache_entries={ep.xlate_cache_entries} must be endpoint.xlate_cache_ways="
                          f"{ep.xlate_cache_ways} x a power of two (e.g. {ep.xlate_cache_ways * 16})")
    if ep.xlate_page_bytes & (ep.xlate_page_bytes - 1):
        raise ConfigError(f"endpoint.xlate_page_bytes={ep.xlate_page_bytes} must be a power of two (e.g. 4096 or "
                          f"2097152)")
    if c.phy.fec_n and not (c.phy.fec_k < c.phy.fec_n < 1 << c.phy.fec_symbol_bits):
        raise ConfigError(f"phy.fec_n={c.phy.fec_n}, fec_k={c.phy.fec_k}, fec_symbol_bits={c.phy.fec_symbol_bits}: "
                          f"a Reed-Solomon code needs fec_k < fec_n < 2^fec_symbol_bits; use e.g. fec_n=544 "
                          f"fec_k=514 fec_symbol_bits=10 (KP4), or fec_n=0 for no FEC")
    if c.phy.flit_overhead_bytes >= c.phy.flit_bytes:
        raise ConfigError(f"phy.flit_overhead_bytes={c.phy.flit_overhead_bytes} must be smaller than "
                          f"phy.flit_bytes={c.phy.flit_bytes}")
    largest = max(c.txn.max_payload_bytes, c.txn.max_read_request_bytes)
    need = packet_flits(c, largest)
    if c.link.credit_pool_flits and need > c.link.credit_pool_flits:     # 0 = auto (fabric.sim.flow_control)
        raise ConfigError(f"txn.max_payload_bytes={largest} needs {need} flits of buffer but link.credit_pool_flits="
                          f"{c.link.credit_pool_flits}; raise link.credit_pool_flits to >= {need} or lower the payload")
    if c.endpoint.e2e_window_bytes and not c.endpoint.e2e_grants:
        raise ConfigError(f"endpoint.e2e_window_bytes={c.endpoint.e2e_window_bytes} with endpoint.e2e_grants=false "
                          f"(no end-to-end window); set endpoint.e2e_grants=true to use a window")
    if c.endpoint.e2e_window_bytes and c.endpoint.e2e_window_bytes < c.txn.max_payload_bytes:
        raise ConfigError(f"endpoint.e2e_window_bytes={c.endpoint.e2e_window_bytes} is smaller than one packet "
                          f"(txn.max_payload_bytes={c.txn.max_payload_bytes}); raise it to >= "
                          f"{c.txn.max_payload_bytes}")
    gap = idle_gap_ns(c)
    if c.sim.watchdog_ns < gap:
        raise ConfigError(f"sim.watchdog_ns={c.sim.watchdog_ns:g} is below the longest idle gap of a healthy run "
                          f"({gap:g} ns: replay timer + retrain + credit refresh + Ack/UpdateFC timers + one "
                          f"crossing of the fabric); use >= {math.ceil(gap):d}")
    if c.link.replay_buffer_flits and need > c.link.replay_buffer_flits:
        raise ConfigError(f"txn.max_payload_bytes={largest} needs {need} flits but link.replay_buffer_flits="
                          f"{c.link.replay_buffer_flits}; raise it to >= {need} or lower the payload")


# ---------------------------------------------------------------- loading, presets, overrides

def _is_sub(f) -> bool:
    """Whether a dataclass field holds a sub-section (fabric.params.subsection) rather than a parameter."""
    return isinstance(f.default_factory, type) and issubclass(f.default_factory, Section)


def _leaves(cls, prefix: str):
    """(key, field, the dataclass it belongs to) of every parameter under a section, sub-sections after its own."""
    subs = []
    for f in dataclasses.fields(cls):
        if _is_sub(f):
            subs.append(f)
        else:
            yield f"{prefix}.{f.name}", f, cls
    for f in subs:
        yield from _leaves(f.default_factory, f"{prefix}.{f.name}")


def _params():
    for s, cls in SECTIONS.items():
        yield from _leaves(cls, s)


def all_keys() -> list[str]:
    return [key for key, _, _ in _params()]


# a moved key's old flat name -> its new key(s) (one old key may feed the same parameter of several kinds)
DEPRECATED: dict[str, tuple[str, ...]] = {}
for _key, _f, _ in _params():
    for _old in _f.metadata["was"]:
        DEPRECATED[_old] = DEPRECATED.get(_old, ()) + (_key,)
_WARNED: set[str] = set()


def _renamed(key: str, source: str) -> tuple[str, ...]:
    """The key(s) a key sets: an old flat key's new keys, with one line on stderr per old key and process."""
    if key not in DEPRECATED:
        return (key,)
    new = DEPRECATED[key]
    if key not in _WARNED:
        _WARNED.add(key)
        print(f"deprecated: {key} ({source}) is now {' and '.join(new)}; the old key is read until the next "
              f"release", file=sys.stderr)
    return new


def _field(key: str):
    parts = key.split(".")
    cls = SECTIONS.get(parts[0])
    for i, name in enumerate(parts[1:], 1):
        f = {f.name: f for f in dataclasses.fields(cls)}.get(name) if cls else None
        if f is not None and i == len(parts) - 1 and not _is_sub(f):
            return f
        cls = f.default_factory if f is not None and _is_sub(f) else None
    close = difflib.get_close_matches(key, all_keys(), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(close)}?" if close else "; see `fabric-probe params` for the list"
    raise ConfigError(f"unknown parameter {key!r}{hint}")


def _coerce(key: str, f, value: Any, typed: bool = False):
    """value as the field's type. `typed`: value comes from a TOML file, whose numbers and booleans carry their
    type, so a string there is refused; --set values arrive as text and are parsed."""
    kind = type(f.default)
    if typed and isinstance(value, str) and kind is not str:
        bare = value.strip().lower() if kind is bool else value.strip()
        if kind is bool:
            written = bare if bare in ("true", "false") else "true or false"
        else:
            written = bare if _is_number(bare) and (kind is float or float(bare).is_integer()) else \
                f"a {'whole ' if kind is int else ''}number"
        what = "boolean" if kind is bool else "whole number" if kind is int else "number"
        raise ConfigError(f"{key}={value!r} is a TOML string where a {what} belongs; write "
                          f"{key.rpartition('.')[2]} = {written}, without quotes")
    try:
        # strict: a TOML bool is not a number, a number is not a bool or a text, a table or array is nothing;
        # --set values arrive as text and are parsed below
        import numbers
        is_bool = isinstance(value, bool) or (type(value).__module__ == "numpy"        # numpy's bool too
                                              and type(value).__name__ in ("bool", "bool_"))
        if is_bool and kind is not bool:
            raise TypeError
        if not (is_bool or isinstance(value, (numbers.Real, str))):
            raise TypeError
        if kind is bool and not (is_bool or isinstance(value, str)):
            raise TypeError
        if kind is str and not isinstance(value, str):
            raise TypeError
        if kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                return value.lower() in ("true", "1", "yes")
            return bool(value)
        if kind is int:
            if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
                raise ValueError
            v = float(value) if isinstance(value, str) and ("e" in value.lower() or "." in value) else value
            if isinstance(v, float) and not v.is_integer():
                raise ValueError
            return int(v)
        if kind is float:
            return float(value)
        return str(value) if kind is str else value
    except (TypeError, ValueError, OverflowError):
        got = "" if isinstance(value, str) else f", got a {type(value).__name__}"
        raise ConfigError(f"{key}={value!r} is not a valid {kind.__name__}{got} ({f.metadata['help']})") from None


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _replaced(obj, changes: dict):
    """obj with `changes` ({field: value, or {sub-section field: ...}}) applied at every level."""
    return dataclasses.replace(obj, **{k: _replaced(getattr(obj, k), v) if isinstance(v, dict) else v
                                       for k, v in changes.items()})


def _apply(base: FabricConfig, updates: dict[str, Any], source: str = "overrides", typed: bool = False,
           lines: dict[str, int] | None = None, errors: list | None = None) -> FabricConfig:
    """base with `updates` ({section.key: value}) applied and validated. Every key's error is collected (with its
    line in `lines`, a TOML file's) and all are raised together as one ConfigError naming `source`; `errors`:
    (line, message) pairs found before (the file's structure). `typed`: a TOML file's values (see _coerce)."""
    changes: dict[str, Any] = {}
    errors = list(errors or [])
    updates = dict(updates)
    if "faults" in updates:
        base = dataclasses.replace(base, faults=tuple(updates.pop("faults")))
    for key, value in updates.items():
        try:
            for new in _renamed(key, source):
                f = _field(new)
                *path, name = new.split(".")
                node = changes
                for part in path:
                    node = node.setdefault(part, {})
                node[name] = _coerce(new, f, value, typed)
                check_value(new, f.metadata, node[name])
        except ConfigError as exc:
            errors.append((_line_of(key, lines), str(exc)))
    if errors:
        raise ConfigError(_errors_text(source if lines is not None else None, errors))
    try:
        return _replaced(base, changes)
    except ConfigError as exc:            # a rule across keys (fabric.config._cross_check)
        if lines is None:
            raise
        raise ConfigError(f"{source}: {exc}") from None


def _line_of(key: str, lines: dict[str, int] | None) -> int | None:
    """The line of a TOML file that sets key, or else the line of its nearest table."""
    while lines and key:
        if key in lines:
            return lines[key]
        key = key.rpartition(".")[0]
    return None


def _errors_text(source: str | None, errors: list[tuple[int | None, str]]) -> str:
    """One line for every error: `source, line N: message`, or `source: K errors: line N: ...; line M: ...`."""
    said = [f"line {n}: {msg}" if n else msg for n, msg in errors]
    if source is None:
        return "; ".join(said)
    if len(errors) == 1:
        return f"{source}, {said[0]}" if errors[0][0] else f"{source}: {said[0]}"
    return f"{source}: {len(errors)} errors: " + "; ".join(said)


_TABLE = re.compile(r"^\s*\[\[?\s*([^\[\]#]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"^\s*([\w\-.\"' ]+?)\s*=")


def _key_lines(text: str) -> dict[str, int]:
    """section.key -> the line (from 1) of a TOML text that sets it, and each [table] -> its header's line: tomllib
    keeps no positions, and an error that names its line is found at once in a long file."""
    lines, table = {}, ""
    for n, line in enumerate(text.splitlines(), 1):
        m = _TABLE.match(line)
        if m:
            table = ".".join(part.strip().strip("\"'") for part in m[1].split("."))
            lines.setdefault(table, n)
            continue
        m = _KEY.match(line)
        if m:
            key = ".".join(part.strip().strip("\"'") for part in m[1].split("."))
            lines.setdefault(f"{table}.{key}" if table else key, n)
    return lines


def with_overrides(cfg: FabricConfig, overrides: dict[str, Any]) -> FabricConfig:
    """A copy of cfg with `section.key` (`section.sub.key`) overrides applied and validated."""
    return _apply(cfg, overrides)


def _flatten_table(prefix: str, values: dict, flat: dict) -> None:
    for k, v in values.items():
        if isinstance(v, dict):      # a sub-section, [topology.hgx]
            _flatten_table(f"{prefix}.{k}", v, flat)
        else:
            flat[f"{prefix}.{k}"] = v


def _flatten_toml(data: dict, source: str, errors: list | None = None,
                  lines: dict[str, int] | None = None) -> dict[str, Any]:
    """{section.key: value} of a parsed TOML config. A badly shaped table is an error: raised at once, or appended
    to `errors` as (line, message) when given."""
    flat = {}
    for section, values in data.items():
        problem = None
        if section == "preset":  # descriptive metadata of a preset file
            continue
        if section == "faults":  # [[faults]] tables, each spec = "link:sw0-sw1:down@100" (fabric.faults)
            if isinstance(values, list) and all(isinstance(v, dict) and set(v) == {"spec"} for v in values):
                flat["faults"] = tuple(str(v["spec"]) for v in values)
                continue
            problem = 'faults must be [[faults]] tables holding one key, spec = "link:sw0-sw1:down@100"'
        elif not isinstance(values, dict):
            problem = f"top-level key {section!r} must be a [section] table"
        if problem is None:
            _flatten_table(section, values, flat)
        elif errors is None:
            raise ConfigError(f"{source}: {problem}")
        else:
            errors.append((_line_of(section, lines), problem))
    return flat


def from_dict(data: dict, source: str = "a saved config") -> FabricConfig:
    """The config a `FabricConfig.to_dict()` describes (a result's meta.config; older, flat ones too)."""
    return _apply(FabricConfig(), _flatten_toml(data, source), source)


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("fabric.presets").iterdir() if p.name.endswith(".toml"))


def preset_text(name: str) -> str:
    if name not in preset_names():
        close = difflib.get_close_matches(name, preset_names(), n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise ConfigError(f"unknown preset {name!r}{hint} (available: {', '.join(preset_names())})")
    return resources.files("fabric.presets").joinpath(f"{name}.toml").read_text()


def preset_of(cfg: FabricConfig) -> str | None:
    """The preset cfg is (its seed and faults aside), or None: what a result calls a config built in Python."""
    plain = dataclasses.replace(cfg, sim=dataclasses.replace(cfg.sim, seed=SimConfig.seed), faults=())
    return next((name for name in preset_names() if _preset(name) == plain), None)


@functools.lru_cache(maxsize=None)
def _preset(name: str) -> FabricConfig:
    return load_config(name)


def read_text_file(path: str | Path, what: str = "file") -> str:
    """The text of a UTF-8 file; anything else (a binary, Latin-1, UTF-16 file) is one ConfigError line."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {str(path)!r} is not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r}"
                          f"); save it as UTF-8 TOML") from None


def _parse_toml(text: str, source: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source} is not valid TOML: {exc}") from None


def parse_set(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r} must look like section.key=value (e.g. phy.ber=1e-9)")
        out[key.strip()] = value.strip()
    return out


def load_config(preset: str | None = None, config_file: str | Path | None = None,
                overrides: dict[str, Any] | None = None) -> FabricConfig:
    """Defaults, then the preset, then a TOML file, then --set overrides; validated at every step."""
    cfg = FabricConfig()
    if preset:
        cfg = _apply_toml(cfg, preset_text(preset), f"preset {preset}")
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        cfg = _apply_toml(cfg, read_text_file(path, "config file"), f"config file {path}")
    if overrides:
        cfg = _apply(cfg, overrides, "--set or overrides")
    return cfg


def _apply_toml(cfg: FabricConfig, text: str, source: str) -> FabricConfig:
    """cfg with a TOML text's values applied: typed (a string is no number), every error at once with its line."""
    errors: list = []
    lines = _key_lines(text)
    flat = _flatten_toml(_parse_toml(text, source), source, errors, lines)
    return _apply(cfg, flat, source, typed=True, lines=lines, errors=errors)


def describe() -> list[dict]:
    """One row per parameter (key, its section, default, unit, range, help, reason, the old flat keys it replaces)
    for `fabric-probe params` and docs; sub-sections follow their section's own keys."""
    rows = []
    for key, f, _ in _params():
        m = f.metadata
        rows.append(dict(key=key, section=key.rpartition(".")[0], default=f.default, unit=m["unit"],
                         range=range_text(m, f.default), help=m["help"], reason=m["reason"], replaces=list(m["was"])))
    return rows


def describe_sections() -> list[dict]:
    """One row per section and sub-section (name, what it is, and for a topology sub-section the kinds that read
    it), in the order of `describe`."""
    out = []

    def walk(cls, name):
        subs = [f for f in dataclasses.fields(cls) if _is_sub(f)]
        doc = " ".join((cls.__doc__ or "").split()).removeprefix(f"[{name}]: ")
        doc = doc[:1].upper() + doc[1:]
        row = dict(section=name, doc=doc)
        if name.startswith("topology."):
            row["read_by"] = topologies.readers(name.partition(".")[2])
        out.append(row)
        for f in subs:
            walk(f.default_factory, f"{name}.{f.name}")

    for s, cls in SECTIONS.items():
        walk(cls, s)
    return out
