"""Compact analytic model of an NCCL-like collective library (prototype for fabric issue 16).

time(op, bytes, system) = min over candidates (algorithm x protocol, channels chosen by NCCL's rule) of
      T_launch(run mode)                                   software, per call
    + sum over the dependency chain of per-step latencies  software + fabric one-way latency (see NOTES.md)
    + bytes on the bottleneck resource / achievable rate   fabric bandwidth x fraction, or an SM-bound protocol cap

Hardware facts (HW, NIC) come from specifications; NCCL facts (thresholds, thread counts, chunk sizes, channel counts,
LL/LL128 line formats) from NCCL's source; everything in PARAMS is a fitted software constant (fit.py).
"""
import math
from dataclasses import dataclass

# ---------------------------------------------------------------- hardware facts (specifications)
HW = {
    # nvl: NVLink GB/s per GPU per direction.
    #  A100 SXM4: NVLink3, 12 links x 25 GB/s = 300 GB/s/dir (600 GB/s total)  [NVIDIA A100 datasheet / A100 whitepaper]
    #  H100 SXM5 / H200 SXM: NVLink4, 18 links x 25 GB/s = 450 GB/s/dir (900 GB/s total) [H100 datasheet, H200 datasheet]
    #  B200: NVLink5, 18 links x 50 GB/s = 900 GB/s/dir (1.8 TB/s total)           [DGX B200 / HGX B200 datasheet]
    # nvls: NVSwitch gen3+ (NVLink SHARP: in-switch reduction + multicast)            [H100 whitepaper "NVLink SHARP"]
    # Per-generation figures of NCCL's tuner (src/graph/tuning.cc, ncclTunerConstantsDefaults, indexed by compute
    # capability: Ampere / Hopper / Blackwell, one node): nvls_ref = nvlsEfficiency, ll_ref = llMaxBws[arch][N1]
    # (GB/s per GPU), ll128_ref = perChMaxRingLL128Bws[arch][N1] (GB/s per channel). The fit scales each by one
    # factor shared by all generations (k_nvls, k_LL, k_LL128): the generation enters only through NCCL's figures.
    # NCCL's latencies (baseLat, hwLat) are the same for every generation, so per-step and launch constants are
    # shared too (a per-generation step factor fitted to 1.00 for Hopper and Blackwell: README section 2).
    # nvl_ref: NCCL's per-link NVLink rate (src/graph/topo.h SM80/SM90/SM100_NVLINK_BW 20.0 / 20.6 / 40.1 GB/s) over
    # the spec's per-link rate (25 / 25 / 50): used only by fit.py --nvlink-arch (eta_nvl = k_nvl x nvl_ref).
    "A100": dict(nvl=300.0, nvls=False, nvls_ref=0.0, ll_ref=87.7, ll128_ref=20.0, nvl_ref=0.800, arch=80),
    "H100": dict(nvl=450.0, nvls=True, nvls_ref=0.85, ll_ref=141.0, ll128_ref=36.7, nvl_ref=0.824, arch=90),
    "H200": dict(nvl=450.0, nvls=True, nvls_ref=0.85, ll_ref=141.0, ll128_ref=36.7, nvl_ref=0.824, arch=90),
    "B200": dict(nvl=900.0, nvls=True, nvls_ref=0.74, ll_ref=282.0, ll128_ref=40.0, nvl_ref=0.802, arch=100),
}
# NIC generations: line rate (GB/s per direction, spec) and the fraction of it GPUDirect RDMA writes reach
# (perftest ib_write_bw --use_cuda, the pass thresholds of Azure/azurehpc-health-checks conf/nd96asr_v4.conf
# "check_ib_bw_gdr 180.0" Gb/s on NDv4's HDR and conf/nd96isr_h100_v5.conf "check_ib_bw_gdr 380" Gb/s on NDv5's
# NDR ConnectX-7). The library's fraction of that RDMA rate (s_ib, s_roce) is software, fitted per transport.
#   HDR 200 Gb/s (ConnectX-6) = 25 GB/s; NDR 400 Gb/s (ConnectX-7) = 50 GB/s; 400GbE (BlueField-3 SuperNIC, the
#   ConnectX-7 generation's NIC engine) = 50 GB/s, RDMA fraction taken as NDR's (no public RoCE perftest figure).
NIC = {"200G": dict(gbps=25.0, rdma=180.0 / 200.0), "400G": dict(gbps=50.0, rdma=380.0 / 400.0)}

# ---------------------------------------------------------------- NCCL facts (source: src/include/device.h, enqueue.cc)
PROTOS = ("LL", "LL128", "Simple")
WIRE_EFF = {"LL": 0.5, "LL128": 120.0 / 128.0, "Simple": 1.0}  # payload / bytes on the wire (LL 4B of 8B line)
NT_MAX = {"LL": 512, "LL128": 640, "Simple": 512}                # NCCL_{LL,LL128,SIMPLE}_MAX_NTHREADS
THREAD_THR = {"LL": 8, "LL128": 8, "Simple": 64}                 # NCCL_*_THREAD_THRESHOLD (ring LL: x nRanks)
NVLS_CH = {90: 16, 100: 24}                                      # NVLS_NCHANNELS_SM90 / SM100_NVL
SYM_NVLS_BLOCKS = lambda n: -(-32 // n)                          # nMaxBlocksNvls on sm100 (sym_kernels.cc)
SYM_MAX_BLOCKS = 64                                              # ncclSymkMaxBlocks


@dataclass
class System:
    name: str
    gpu: str                # key of HW
    nodes: int = 1
    ppn: int = 8
    nic: str = ""           # key of NIC, one NIC per GPU (rail-aligned) when nodes > 1
    gpus_per_proc: int = 1  # nccl-tests -g N (one host thread launching N kernels per call)
    graph: bool = False     # CUDA-graph launch (-G); documentation only: the fit found no stream/graph difference
    lib: str = "classic"    # "classic" NCCL kernels, or "symmetric" (NCCL >= 2.27 registered-window kernels)
    nch: int = 32           # ring/tree channels NCCL builds (topology fact; NCCL_MIN_NCHANNELS overrides)
    net: str = "ib"         # "ib" or "roce" (selects the fitted library fraction of the NIC's RDMA rate)
    fabric_lat: str = ""    # name of a fitted extra network latency (only "gke")
    host: str = ""          # host whose -g N launch cost applies (only for gpus_per_proc > 1; "" = Lx, the
                            # NVLink hosts' shared value: 2.554 and 2.526 us when fitted apart)
    fabric: str = "nvswitch"  # or "pcie": no NVLS, no LL128 (NCCL enables LL128 only up to NVB paths)
    pcie_bw: float = 0.0    # GB/s measured unidirectional P2P rate (p2pBandwidthLatencyTest) when fabric == "pcie"

    @property
    def n(self):
        return self.nodes * self.ppn


# ---------------------------------------------------------------- fitted software constants (values from fit.py)
PARAMS = dict(
    L=8.527,           # us   per-call launch + kernel prologue + completion, classic kernels, one GPU per host thread
                       #      (stream or CUDA graph: back-to-back nccl-tests iterations hide the host enqueue)
    Lx=2.554,          # us   extra per additional GPU launched by one host thread (nccl-tests -g N): a host-CPU /
                       #      driver property, not library or fabric; one value for the A100 and H200 hosts
    L_sym=2.614,       # us   symmetric-kernel launch + prologue (graph)
    h_LL=0.682,        # us   per ring/tree step, LL, intra-node (includes the NVLink one-way latency)
    h_LL128=2.74,      # us   per step, LL128
    h_S=3.219,         # us   per step, Simple (slice handshake: wait credit, write, fence, post tail)
    d_net=7.807,       # us   extra per network step over the same protocol's NVLink step (proxy poll + RDMA post +
                       #      NIC/switch/wire); network step = h_proto + d_net
    F_S=86.925,        # us   extra per network step of a Simple (large-chunk) schedule, paid once per call: pipeline
                       #      start-up of the proxy chunk pipeline (see NOTES)
    k_LL=0.454,        # LL per-GPU payload rate cap = k_LL x llMaxBw[arch] (GB/s)   (SM-bound)
    k_LL128=1.0,       # LL128 per-GPU payload rate cap = k_LL128 x perChMaxRingLL128Bw[arch] x channels
    eta_nvl=0.746,     # fraction of NVLink rate reached by Simple
    k_nvls=0.759,      # NVLS achievable fraction = k_nvls x nvlsEfficiency[arch]
    s_ib=0.8356,       # fraction of the NIC's GPUDirect RDMA rate (NIC[..]["rdma"] x line rate) Simple reaches, IB:
                       #      x 0.90 (HDR) = 0.752 of line rate; x 0.95 (NDR) = 0.794
    s_roce=0.6695,     # same, RoCE: x 0.95 (400GbE) = 0.636 of line rate
    lat_gke=6.002,     # us   extra one-way network latency of the GKE (gIB) RoCE fabric vs a single-switch IB/Spectrum-X
                       #      fabric; a FABRIC property fitted only because it is not published
    g_nLL=0.285,       # LL   payload rate over a NIC relative to Simple's (eta_net x line rate)
    g_nLL128=0.664,    # LL128 payload rate over a NIC relative to Simple's
    o_p2p=4.981,       # us   per remote peer of a p2p (alltoall) call: one proxy send/recv op each
)
NVLS_LAT = 25.0   # us  classic NVLS / NVLS-tree intra-node latency, NCCL tuning.cc hwLat[NVLINK][NVLS][Simple]
                  #     (not fitted: no calibration table runs classic NVLS on one node)


def _channels(M, proto, nch_max, thr):
    """NCCL enqueue.cc rule: drop channels, then threads, while nBytes < nc*nt*threshold."""
    nc, nt = nch_max, NT_MAX[proto]
    while M < nc * nt * thr and nc > 1:
        nc -= 1
    while M < nc * nt * thr and nt % 128 == 0 and nt > 64:
        nt //= 2
    return nc, nt


def intra_rate(P, sys, hw, proto, nc, nt):
    """Payload GB/s one GPU can push per direction over NVLink (or PCIe) with this protocol."""
    eta = P["k_nvl"] * hw["nvl_ref"] if "k_nvl" in P else P["eta_nvl"]
    Rn = eta * hw["nvl"] if sys.fabric == "nvswitch" else sys.pcie_bw  # PCIe: measured P2P rate
    if proto == "LL":
        return min(0.5 * Rn, P["k_LL"] * hw["ll_ref"])
    if proto == "LL128" and sys.fabric == "nvswitch":
        return min(WIRE_EFF[proto] * Rn, P["k_LL128"] * hw["ll128_ref"] * sys.nch)
    return WIRE_EFF[proto] * Rn


def nic_rate(P, sys, proto, nc):
    """Payload GB/s one node can push per direction over its NICs (rail-aligned, one channel per NIC)."""
    per_nic = net_efficiency(P, sys) * NIC[sys.nic]["gbps"]
    if proto == "Simple":
        return sys.ppn * per_nic
    return min(sys.ppn, nc) * per_nic * P["g_n" + proto]


def net_efficiency(P, sys):
    """Fraction of the NIC line rate Simple reaches: the NIC generation's RDMA fraction x the library's share."""
    return P["s_" + sys.net] * NIC[sys.nic]["rdma"]


def launch(sys, P, sym=False):
    if sym:
        return P["L_sym"]
    lx = P["Lx_" + sys.host] if sys.host else P["Lx"]
    L = P["L"] * P.get("r_L_%d" % HW[sys.gpu]["arch"], 1.0)   # per-generation launch factor: fit.py --gen-steps only
    return L + ((sys.gpus_per_proc - 1) * lx if sys.gpus_per_proc > 1 else 0.0)


PCI_LAT_RATIO = {"LL": 1.0 / 0.6, "LL128": 2.5 / 1.9, "Simple": 5.7 / 3.4}  # NCCL hwLat[PCI]/hwLat[NVLINK], ring


def _h(P, proto, sys):
    h = {"LL": P["h_LL"], "LL128": P["h_LL128"], "Simple": P["h_S"]}[proto]
    h *= P.get("r_h_%d" % HW[sys.gpu]["arch"], 1.0)   # per-generation step factor: fit.py --gen-steps only
    return h * PCI_LAT_RATIO[proto] if sys.fabric == "pcie" else h


def _hn(P, proto, sys):
    extra = P["lat_" + sys.fabric_lat] if sys.fabric_lat else 0.0
    return _h(P, proto, sys) + P["d_net"] + (P["F_S"] if proto == "Simple" else 0.0) + extra


def candidates(op, M, sys, P=PARAMS):
    """All (algorithm, protocol) candidates with their time decomposition (us)."""
    hw = HW[sys.gpu]
    n, N, g = sys.n, sys.nodes, sys.ppn
    B = hw["nvl"]
    eta_nvls = P["k_nvls"] * hw["nvls_ref"]
    out = []

    def add(alg, proto, nc, L, lat, wire):
        out.append(dict(alg=alg, proto=proto, nc=nc, t=L + lat + wire, parts=dict(launch=L, lat=lat, wire=wire)))

    L = launch(sys, P)
    if op in ("allreduce", "allgather", "reducescatter"):
        ar = op == "allreduce"
        S = 2 * (n - 1) if ar else n - 1
        f = S / n
        S_net = 0 if N == 1 else (2 * (N - 1) if ar else N - 1)
        for p in PROTOS:
            if p == "LL128" and sys.fabric == "pcie":
                continue
            nc, nt = _channels(M, p, sys.nch, THREAD_THR[p] * (n if p == "LL" else 1))
            lat = (S - S_net) * _h(P, p, sys) + S_net * _hn(P, p, sys)
            t = 0.0
            if g > 1:
                t = max(t, f * M / intra_rate(P, sys, hw, p, nc, nt))
            if N > 1:
                t = max(t, f * M / nic_rate(P, sys, p, nc))   # the node's NICs carry f*M per node
            add("ring", p, nc, L, lat, t / 1e3)
        if ar and N > 1:
            for p in PROTOS:  # NCCL double binary tree: intra-node chain + inter-node tree
                nc, nt = _channels(M, p, sys.nch, THREAD_THR[p])
                lat = 2 * ((g - 1) * _h(P, p, sys) + math.log2(N) * _hn(P, p, sys))
                t_intra = 2 * M / intra_rate(P, sys, hw, p, nc, nt) if g > 1 else 0.0
                t_net = M / nic_rate(P, sys, p, nc)
                add("tree", p, nc, L, lat, max(t_intra, t_net) / 1e3)
        if ar and hw["nvls"] and g > 2 and sys.fabric == "nvswitch":
            if N == 1:
                add("nvls", "Simple", NVLS_CH[hw["arch"]], L, NVLS_LAT, M * (1 + 1.0 / n) / (eta_nvls * B) / 1e3)
            else:  # NVLS tree: in-switch reduce/multicast inside the node, tree between nodes over the NICs
                nc = NVLS_CH[90] if hw["arch"] < 100 else 32
                lat = NVLS_LAT + 2 * math.log2(N) * _hn(P, "Simple", sys)
                wire = max(M * (1 + 1.0 / g) / (eta_nvls * B), M / nic_rate(P, sys, "Simple", nc)) / 1e3
                add("nvlstree", "Simple", nc, L, lat, wire)

    if op == "alltoall":
        # p2p: every rank sends M/n to each peer at once; LL when bytes/peer <= P2P_LL_THRESHOLD (16 KB)
        for p in ("LL", "Simple"):
            if p == "LL" and M / n > 16384:
                continue
            lat = _h(P, p, sys) if N == 1 else _h(P, p, sys) + P["d_net"] + (n - g) * P["o_p2p"]
            nc, nt = _channels(M, p, sys.nch, THREAD_THR[p])
            t_intra = (g - 1) / n * M / intra_rate(P, sys, hw, p, nc, nt) if g > 1 else 0.0
            t_net = (n - g) / n * M * g / nic_rate(P, sys, p, nc) if N > 1 else 0.0
            add("p2p", p, nc, L, lat, max(t_intra, t_net) / 1e3)

    if sys.lib == "symmetric" and op == "allreduce" and N == 1:
        Ls = launch(sys, P, sym=True)
        # one-shot LL: each rank writes its M (LL lines) into every peer, each reduces locally
        add("sym_oneshot", "LL", SYM_MAX_BLOCKS, Ls, _h(P, "LL", sys),
            (n - 1) * M / intra_rate(P, sys, hw, "LL", SYM_MAX_BLOCKS, 512) / 1e3)
        # two-shot: reduce-scatter by multimem.ld_reduce + all-gather by multimem.st (in-switch)
        if hw["nvls"]:
            add("sym_nvls", "Simple", SYM_NVLS_BLOCKS(n), Ls, 2 * _h(P, "Simple", sys),
                M * (1 + 1.0 / n) / (eta_nvls * B) / 1e3)
        add("sym_twoshot", "Simple", SYM_MAX_BLOCKS, Ls, 2 * _h(P, "Simple", sys), 2 * (n - 1) / n * M / intra_rate(
            P, sys, hw, "Simple", 1, 1) / 1e3)
    return out


def predict(op, M, sys, P=PARAMS):
    return min(candidates(op, M, sys, P), key=lambda d: d["t"])


def time_us(op, M, sys, P=PARAMS):
    return predict(op, M, sys, P)["t"]


# ---------------------------------------------------------------- the calibration systems (facts from file headers)
SYSTEMS = {
    "a100_1x8_g8": System("a100_1x8_g8", "A100", 1, 8, gpus_per_proc=8, graph=False, nch=24),
    "b200_1x8_sym": System("b200_1x8_sym", "B200", 1, 8, graph=True, lib="symmetric", nch=32),
    "h200_2x8_roce": System("h200_2x8_roce", "H200", 2, 8, nic="400G", gpus_per_proc=8, nch=32, net="roce"),
    "h200_2x1_roce": System("h200_2x1_roce", "H200", 2, 1, nic="400G", nch=32, net="roce", fabric_lat="gke"),
    "a100ib_1x8_graph": System("a100ib_1x8_graph", "A100", 1, 8, graph=True, nch=24),
    "a100ib_2x1_graph": System("a100ib_2x1_graph", "A100", 2, 1, nic="200G", graph=True, nch=24),
    "a100ib_2x8_graph": System("a100ib_2x8_graph", "A100", 2, 8, nic="200G", graph=True, nch=24),
}
# PCIe systems (p2pBandwidthLatencyTest_PCIe_systems.txt): only the -g N host launch cost is fitted for them.
#  4x A100-PCIE-40GB on CPU root ports (SYS): measured P2P 7.7-10.3 GB/s -> 9.0;  8x RTX 5090 PCIe Gen5: 55.6-56.6 -> 56.
HW["RTX5090"] = dict(nvl=0.0, nvls=False, nvls_ref=0.0, ll_ref=282.0, arch=100)
HW["A100PCIE"] = dict(HW["A100"], nvl=0.0)
PCIE_SYSTEMS = {
    "a100pcie_1x4_g4": System("a100pcie_1x4_g4", "A100PCIE", 1, 4, gpus_per_proc=4, nch=2, host="a100pciehost",
                              fabric="pcie", pcie_bw=9.0),
    "rtx5090_1x8_g8": System("rtx5090_1x8_g8", "RTX5090", 1, 8, gpus_per_proc=8, nch=2, host="rtx5090host",
                             fabric="pcie", pcie_bw=56.0),
}
# Never fitted: predicted from specs + fitted constants.
PREDICT = {
    # DGX/HGX H100: 8x H100 SXM5, 18 NVLink4 links each spread over 4 NVSwitch chips (5+4+4+5), NVLink SHARP.
    # nccl-tests default: one process per GPU, no graph.
    "h100_1x8": System("h100_1x8", "H100", 1, 8, nch=32),
    # two such nodes, 8x ConnectX-7 400 Gb/s NDR InfiniBand, one per GPU, rail-aligned.
    "h100_2x8_ib": System("h100_2x8_ib", "H100", 2, 8, nic="400G", nch=32),
}
