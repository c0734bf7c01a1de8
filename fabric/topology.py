"""Fabric description: nodes, unidirectional channels and (after routing) candidate paths, as numpy arrays.

One builder per `topology.kind` (BUILDERS) lays out nodes and links and fills the per-channel PHY arrays from the
[phy] section (or the Ethernet fields for scale-out NIC links); `fabric.network.build(cfg)` runs the builder and
then the fabric manager (fabric.routing). See docs/contracts.md for the array contract and docs/topology.md for
every builder and preset.

Numbering: ranks (accelerators) are nodes 0..R-1; switches, NICs and other nodes follow. Channel 2k and 2k+1 are
the two directions of link k.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabric.config import FabricConfig
from fabric.errors import ConfigError
from fabric.phy import GBps, data_gbps, effective_ber, link_latency_ps, ps, ps_per_byte

ACCEL, SWITCH, NIC = 0, 1, 2
KIND_NAMES = {ACCEL: "accelerator", SWITCH: "switch", NIC: "nic"}


@dataclass
class Topology:
    """Nodes, channels and routes of one fabric (docs/contracts.md). Arrays are read-only by convention."""
    # --- nodes ---
    name: str
    n_ranks: int
    node_names: list[str]
    node_kind: np.ndarray          # int8[n_nodes]: 0 accelerator, 1 switch, 2 NIC
    node_domain: np.ndarray        # int32[n_nodes]: host domain, -1 for none
    node_latency_ps: np.ndarray    # int64[n_nodes]: cost of crossing (being forwarded by) the node
    # --- channels (one direction of a link) ---
    ch_src: np.ndarray             # int32[C]
    ch_dst: np.ndarray             # int32[C]
    ch_rev: np.ndarray             # int32[C]: the opposite direction of the same link
    ch_ps_per_byte: np.ndarray     # float64[C]: serialisation time per byte
    ch_latency_ps: np.ndarray      # int64[C]: PHY tx + rx + wire
    ch_ber: np.ndarray             # float64[C]
    # --- routes (filled by fabric.routing.route) ---
    pair_ptr: np.ndarray = None    # int64[R*R+1]: candidates of pair (s, d) are paths pair_ptr[s*R+d]..[s*R+d+1]
    path_ptr: np.ndarray = None    # int64[P+1]: path p is path_ch[path_ptr[p]:path_ptr[p+1]]
    path_ch: np.ndarray = None     # int32[H]: channel of each hop
    path_vcl: np.ndarray = None    # int8[H]: VC level of each hop (dateline level on tori, else 0)
    vc_levels: int = 1             # max level + 1
    # --- extras (not needed by the kernel) ---
    kind: str = ""                 # builder that made it (topology.kind)
    description: str = ""
    node_forwards: np.ndarray = None  # bool[n_nodes]: may appear in the middle of a path
    node_coord: np.ndarray = None  # int32[n_nodes, 3]: mesh coordinate (accelerators inherit their switch's), -1
    ch_lane: np.ndarray = None     # int32[C]: index among parallel links joining the same two nodes
    mesh_dims: tuple = ()          # router mesh (X, Y, Z) for dimension-order routing; () if not a mesh
    mesh_wrap: tuple = ()          # per dimension: closed into a ring
    mesh_nodes: np.ndarray = None  # int32[X*Y*Z]: router node at x + X*(y + Y*z)
    rank_router: np.ndarray = None  # int32[R]: index into mesh_nodes of the router serving each rank
    rank_ports: int = 0            # parallel ports rank -> router; 0 when the rank is its own router
    routing: str = ""              # algorithm the fabric manager used (dor, dor-dateline, updown, shortest)
    node_reduce: np.ndarray = None  # bool[n_nodes]: switch reduces and multicasts in the switch (switch.reduction)
    n_spares: int = 0              # spare accelerators: the last n_spares ranks (topology.spares), idle until a
                                   # serving rank migrates to one (fabric.migration)

    # ---------------------------------------------------------------- conveniences
    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_channels(self) -> int:
        return len(self.ch_src)

    @property
    def n_links(self) -> int:
        return len(self.ch_src) // 2

    def channel_name(self, c: int) -> str:
        """`sw3->sw7`, with `#k` for the k-th (k > 0) of parallel links between the same two nodes."""
        base = f"{self.node_names[self.ch_src[c]]}->{self.node_names[self.ch_dst[c]]}"
        lane = 0 if self.ch_lane is None else int(self.ch_lane[c])
        return base if lane == 0 else f"{base}#{lane}"

    def n_candidates(self, s: int, d: int) -> int:
        i = s * self.n_ranks + d
        return int(self.pair_ptr[i + 1] - self.pair_ptr[i])

    def paths(self, s: int, d: int) -> list[np.ndarray]:
        """Candidate paths (channel arrays) of pair (s, d); flow f uses candidate f % len."""
        i = s * self.n_ranks + d
        return [self.path_ch[self.path_ptr[p]:self.path_ptr[p + 1]]
                for p in range(self.pair_ptr[i], self.pair_ptr[i + 1])]

    def path_for_flow(self, s: int, d: int, flow: int) -> tuple[np.ndarray, np.ndarray]:
        """(channels, VC levels) that flow `flow` from s to d takes, as the kernel picks it."""
        i = s * self.n_ranks + d
        n = int(self.pair_ptr[i + 1] - self.pair_ptr[i])
        if n == 0:
            raise IndexError(f"no path from rank {s} to rank {d}")
        p = int(self.pair_ptr[i]) + flow % n
        a, b = self.path_ptr[p], self.path_ptr[p + 1]
        return self.path_ch[a:b], self.path_vcl[a:b]


# ---------------------------------------------------------------- construction helper

class _Builder:
    """Accumulates nodes and bidirectional links in Python lists, then freezes them into arrays."""

    def __init__(self, cfg: FabricConfig):
        self.cfg = cfg
        self.fabric_ps_per_byte = ps_per_byte(data_gbps(cfg))
        self.fabric_latency_ps = link_latency_ps(cfg)
        self.names, self.kinds, self.domains, self.lat, self.fwd, self.coords = [], [], [], [], [], []
        self.src, self.dst, self.rates, self.chlat, self.lane = [], [], [], [], []
        self._pair_count: dict[tuple[int, int], int] = {}

    def node(self, name, kind, domain=-1, latency_ps=0, forwards=False, coord=(-1, -1, -1)) -> int:
        self.names.append(name)
        self.kinds.append(kind)
        self.domains.append(domain)
        self.lat.append(int(latency_ps))
        self.fwd.append(bool(forwards))
        self.coords.append(tuple(coord))
        return len(self.names) - 1

    def link(self, u: int, v: int, ps_per_byte: float | None = None, latency_ps: int | None = None) -> None:
        rate = self.fabric_ps_per_byte if ps_per_byte is None else ps_per_byte
        lat = self.fabric_latency_ps if latency_ps is None else latency_ps
        key = (min(u, v), max(u, v))
        k = self._pair_count.get(key, 0)
        self._pair_count[key] = k + 1
        for a, b in ((u, v), (v, u)):
            self.src.append(a)
            self.dst.append(b)
            self.rates.append(rate)
            self.chlat.append(lat)
            self.lane.append(k)

    def freeze(self, name: str, n_ranks: int, kind: str, description: str, reducing=(), **extra) -> Topology:
        """The arrays. `reducing`: the switches that reduce and multicast in the switch (only in-host switches of
        builders that honour switch.reduction; every other node is False)."""
        c = len(self.src)
        red = np.zeros(len(self.names), dtype=bool)
        red[list(reducing)] = True
        rev = np.arange(c, dtype=np.int32) ^ 1
        return Topology(
            name=name, n_ranks=n_ranks, node_names=self.names,
            node_kind=np.array(self.kinds, dtype=np.int8), node_domain=np.array(self.domains, dtype=np.int32),
            node_latency_ps=np.array(self.lat, dtype=np.int64),
            ch_src=np.array(self.src, dtype=np.int32), ch_dst=np.array(self.dst, dtype=np.int32), ch_rev=rev,
            ch_ps_per_byte=np.array(self.rates, dtype=np.float64), ch_latency_ps=np.array(self.chlat, dtype=np.int64),
            ch_ber=np.full(c, effective_ber(self.cfg, self.cfg.phy.ber), dtype=np.float64),
            kind=kind, description=description, node_forwards=np.array(self.fwd, dtype=bool),
            node_coord=np.array(self.coords, dtype=np.int32).reshape(-1, 3),
            ch_lane=np.array(self.lane, dtype=np.int32), node_reduce=red, **extra)


def parse_dims(text: str, key: str) -> tuple[int, int, int]:
    """'4x4x4' -> (4, 4, 4); one to three positive factors, missing ones are 1."""
    try:
        dims = tuple(int(t) for t in str(text).lower().replace("*", "x").split("x"))
    except ValueError:
        dims = ()
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise ConfigError(f"{key}={text!r} must look like XxYxZ with positive integers, e.g. 4x4x4")
    return dims + (1,) * (3 - len(dims))


def _mesh_links(b: _Builder, nodes: np.ndarray, dims, wrap, lanes: int) -> None:
    """Join router nodes (indexed x + X*(y + Y*z)) in a mesh/torus, `lanes` parallel links per neighbour pair."""
    X, Y, Z = dims
    for dim in range(3):
        k = dims[dim]
        for idx in range(X * Y * Z):
            c = [idx % X, (idx // X) % Y, idx // (X * Y)]
            if c[dim] + 1 < k or (wrap[dim] and c[dim] == k - 1):
                n = list(c)
                n[dim] = (c[dim] + 1) % k
                j = n[0] + X * (n[1] + Y * n[2])
                for _ in range(lanes):
                    b.link(int(nodes[idx]), int(nodes[j]))


def _coord(idx: int, dims) -> tuple[int, int, int]:
    X, Y, _ = dims
    return idx % X, (idx // X) % Y, idx // (X * Y)


# ---------------------------------------------------------------- builders

def build_sd200(cfg: FabricConfig) -> Topology:
    """Host domains of `accels_per_domain` accelerators, one fabric switch per domain, switches in a 3D mesh."""
    t = cfg.topology
    dims = parse_dims(t.switch_mesh_dims, "topology.switch_mesh_dims")
    n_dom = dims[0] * dims[1] * dims[2]
    A, N = t.accels_per_domain, t.ports_per_accel
    R = n_dom * A
    dom = np.concatenate([np.arange(R) // A, np.arange(t.spares) % n_dom]).astype(np.int32)  # spares round robin
    b = _Builder(cfg)
    for r in range(R):
        b.node(f"acc{r}", ACCEL, domain=r // A, coord=_coord(r // A, dims))
    for k in range(t.spares):
        b.node(f"spare{k}", ACCEL, domain=int(dom[R + k]), coord=_coord(int(dom[R + k]), dims))
    sw_lat = ps(cfg.switch.latency_ns)
    sw = np.array([b.node(f"sw{d}", SWITCH, domain=d, latency_ps=sw_lat, forwards=True, coord=_coord(d, dims))
                   for d in range(n_dom)], dtype=np.int32)
    for r in range(R + t.spares):
        for _ in range(N):
            b.link(r, int(sw[dom[r]]))
    _mesh_links(b, sw, dims, (False, False, False), t.links_per_neighbor)
    desc = (f"{n_dom} host domains of {A} accelerators; domain switches in a {'x'.join(map(str, dims))} mesh; "
            f"{N} ports per accelerator, {t.links_per_neighbor} links between neighbouring switches")
    if t.spares:
        desc += f"; {t.spares} spare accelerators"
    return b.freeze(f"sd200-{R}", R + t.spares, "sd200", desc, mesh_dims=dims, mesh_wrap=(False, False, False),
                    mesh_nodes=sw, rank_router=dom, rank_ports=N, n_spares=t.spares)


def build_accel_mesh(cfg: FabricConfig, torus: bool = False) -> Topology:
    """Accelerators themselves in a 3D mesh (or torus), each forwarding through its embedded router."""
    t = cfg.topology
    dims = parse_dims(t.mesh_dims, "topology.mesh_dims")
    wrap = tuple(bool(torus or t.wrap) and k >= 3 for k in dims)  # a ring of 2 would just double the link
    R = dims[0] * dims[1] * dims[2]
    b = _Builder(cfg)
    lat = ps(t.accel_router_ns)
    for r in range(R):
        b.node(f"acc{r}", ACCEL, domain=r // t.accels_per_domain, latency_ps=lat, forwards=True,
               coord=_coord(r, dims))
    nodes = np.arange(R, dtype=np.int32)
    _mesh_links(b, nodes, dims, wrap, t.links_per_neighbor)
    shape = "torus" if any(wrap) else "mesh"
    name = f"{shape}-{'x'.join(map(str, dims))}"
    desc = f"{R} accelerators in a {'x'.join(map(str, dims))} {shape}, {t.links_per_neighbor} link(s) per neighbour"
    return b.freeze(name, R, "accel_torus" if torus else "accel_mesh", desc, mesh_dims=dims, mesh_wrap=wrap,
                    mesh_nodes=nodes, rank_router=nodes.copy(), rank_ports=0)


def plane_split(cfg: FabricConfig) -> list[int]:
    """Ports of each accelerator on each switch plane (topology.plane_ports, or an even split)."""
    t = cfg.topology
    N, P = t.ports_per_accel, t.switch_planes
    text = str(t.plane_ports).strip()
    if not text:
        if P > N:
            raise ConfigError(f"topology.switch_planes={P} exceeds topology.ports_per_accel={N}: every plane needs "
                              f"at least one port of every accelerator")
        return [N // P + (1 if p < N % P else 0) for p in range(P)]
    try:
        split = [int(x) for x in text.replace(" ", "").split(",")]
    except ValueError:
        split = []
    if len(split) != P or any(k < 1 for k in split) or sum(split) != N:
        raise ConfigError(f"topology.plane_ports={text!r} must list {P} positive port counts (one per switch "
                          f"plane, topology.switch_planes) summing to topology.ports_per_accel={N}")
    return split


def _build_hosts(cfg: FabricConfig, kind: str) -> Topology:
    """Hosts of A accelerators on in-host switch plane(s), joined by NICs (shared by scaleout_roce and hgx).

    Node order: accelerators, in-host switches (host-major, then plane), NICs, then the scale-out switches (one
    Ethernet switch, or the rail switches followed by the spines). scaleout_roce with one plane and one switch
    keeps the node and link order it always had.
    """
    t = cfg.topology
    H, A, N, K = t.scaleout_hosts, t.accels_per_domain, t.ports_per_accel, t.nics_per_host
    hgx = kind == "hgx"
    P = t.switch_planes if hgx else 1
    split = plane_split(cfg) if hgx else [N]
    with_nics = not hgx or H > 1          # a single hgx host has no GPU traffic on its NICs: none are built
    if with_nics and K != A and A % K:
        raise ConfigError(f"topology.nics_per_host={K} must equal topology.accels_per_domain={A} (one NIC per "
                          f"accelerator) or divide it")
    rails = t.scaleout_switches == "rails"
    R = H * A
    b = _Builder(cfg)
    for r in range(R):
        b.node(f"acc{r}", ACCEL, domain=r // A)
    sw_lat = ps(cfg.switch.latency_ns)
    name = (lambda h, p: f"nvsw{h}.{p}" if P > 1 else f"nvsw{h}") if hgx else (lambda h, p: f"hsw{h}")
    hsw = [[b.node(name(h, p), SWITCH, domain=h, latency_ps=sw_lat, forwards=True) for p in range(P)]
           for h in range(H)]
    reducing = [x for row in hsw for x in row] if cfg.switch.reduction else []
    for r in range(R):
        for p in range(P):
            for _ in range(split[p]):
                b.link(r, hsw[r // A][p])
    desc = f"{H} host{'s' if H > 1 else ''} of {A} accelerators, {N} ports each"
    desc += f" over {P} switch planes ({','.join(map(str, split))})" if P > 1 else " to an in-host switch"
    if with_nics:
        nic_lat = ps(t.nic_latency_ns)
        nics = [b.node(f"nic{i}", NIC, domain=i // K, latency_ps=nic_lat, forwards=True) for i in range(H * K)]
        out_lat = ps(t.eth_switch_latency_ns)
        if rails:
            rail = [b.node(f"rail{k}", SWITCH, latency_ps=out_lat, forwards=True) for k in range(K)]
            spines = [b.node(f"spine{j}", SWITCH, latency_ps=out_lat, forwards=True) for j in range(t.rail_spines)]
        else:
            eth = b.node("eth0", SWITCH, latency_ps=out_lat, forwards=True)
        p_ = cfg.phy
        pcie_lat = ps(p_.tx_latency_ns + p_.rx_latency_ns)  # on-board PCIe trace, no cable
        eth_lat = ps(t.eth_phy_latency_ns + t.eth_cable_m * p_.wire_ns_per_m)
        net_rate = ps_per_byte(t.nic_gbps)
        for i, nic in enumerate(nics):
            h = i // K
            if K == A:   # one NIC per accelerator, attached to it directly (GPUDirect rail)
                b.link(h * A + i % K, nic, ps_per_byte(t.nic_host_gbps), pcie_lat)
            else:        # NICs shared by the host, reached through (one plane of) the in-host switch
                b.link(hsw[h][(i % K) % P], nic, ps_per_byte(t.nic_host_gbps), pcie_lat)
            b.link(nic, rail[i % K] if rails else eth, net_rate, eth_lat)
        if rails:
            up = max(1, H // max(1, len(spines)))
            for r_ in rail:
                for sp in spines:
                    for _ in range(up):
                        b.link(r_, sp, net_rate, eth_lat)
            desc += (f"; {K} NIC{'s' if K > 1 else ''} per host at {t.nic_gbps:g}G on {K} rail switches (NIC i "
                     f"of every host on rail i), {len(spines)} spine{'s' if len(spines) != 1 else ''}")
        else:
            desc += f"; {K} x {t.nic_gbps:g}G NIC(s) per host; one scale-out switch"
    if not hgx:
        desc = (f"{H} hosts of {A} accelerators with an in-host switch; {K} x {t.nic_gbps:g}G RoCE NIC(s) per host; "
                + ("rail switches" if rails else "one Ethernet switch"))
        return b.freeze(f"scaleout-roce-{R}", R, "scaleout_roce", desc, reducing=reducing)
    return b.freeze(f"hgx-{H}x{A}", R, "hgx", desc, reducing=reducing)


def build_scaleout_roce(cfg: FabricConfig) -> Topology:
    """8-accelerator hosts with an in-host switch; hosts joined by RoCE NICs through one Ethernet switch (or, with
    topology.scaleout_switches=rails, through rail switches and spines)."""
    return _build_hosts(cfg, "scaleout_roce")


def build_hgx(cfg: FabricConfig) -> Topology:
    """HGX/DGX-class hosts: every accelerator's ports spread over `switch_planes` parallel in-host switch chips;
    with more than one host, one NIC per accelerator on rail switches (or one switch)."""
    return _build_hosts(cfg, "hgx")


def build_link(cfg: FabricConfig) -> Topology:
    """Two accelerators joined by one link (the link probe)."""
    b = _Builder(cfg)
    b.node("acc0", ACCEL, domain=0)
    b.node("acc1", ACCEL, domain=0)
    b.link(0, 1)
    return b.freeze("link", 2, "link", "two accelerators joined by one link")


BUILDERS = {
    "sd200": build_sd200,
    "accel_mesh": build_accel_mesh,
    "accel_torus": lambda cfg: build_accel_mesh(cfg, torus=True),
    "scaleout_roce": build_scaleout_roce,
    "hgx": build_hgx,
    "link": build_link,
}


# ---------------------------------------------------------------- ring order (collectives)

def _snake_key(coord, dims) -> tuple[int, int, int]:
    """Boustrophedon position of a mesh coordinate: consecutive keys are mesh neighbours."""
    X, Y, _ = dims
    x, y, z = (int(v) for v in coord)
    yy = y if z % 2 == 0 else Y - 1 - y
    xx = x if (z * Y + yy) % 2 == 0 else X - 1 - x
    return z, yy, xx


def local_index(topo: Topology) -> np.ndarray:
    """int32[R]: position of every rank among the ranks of its host domain (= its rail where NICs are per GPU)."""
    R = topo.n_ranks
    dom = topo.node_domain[:R]
    out = np.zeros(R, dtype=np.int32)
    for d in np.unique(dom):
        members = np.nonzero(dom == d)[0]
        out[members] = np.arange(len(members), dtype=np.int32)
    return out


def domain_groups(topo: Topology, n: int, min_size: int = 1) -> list[list[int]] | None:
    """Ranks 0..n-1 by host domain (domains in id order, ranks ascending), or None unless they form >= 2 domains of
    one size, at least min_size each."""
    if n > topo.n_ranks:
        return None
    dom = topo.node_domain[:n]
    groups = [[r for r in range(n) if dom[r] == d] for d in sorted(set(int(x) for x in dom))]
    if len(groups) < 2 or len({len(g) for g in groups}) != 1 or len(groups[0]) < min_size:
        return None
    return groups


def ring_order(topo: Topology, ranks=None) -> list[int]:
    """Order a group of ranks (default: all) into a ring whose consecutive members are topologically close.

    - Ranks of one host domain stay together (one pass through the domain's switch or switch planes), in the order
      of their position in the domain.
    - Domains follow each other in domain order, or along a snake through the router mesh where there is one
      (consecutive domains are then mesh neighbours).
    - Between host domains the ring is rail-aligned: it leaves a domain from the GPU at position i and enters the
      next one at the GPU at position i, so with one NIC per GPU on rail switches every crossing stays on one rail
      (NCCL's rings do the same). With an even number of domains two rails are used alternately (entry = first
      position, exit = last); with an odd number (>= 3) a third rail closes the ring. Where the domains' positions
      differ or are too few, the domains are joined in position order without that guarantee.

    Returns the ranks as a list (a permutation of the input); the ring closes from the last back to the first.
    """
    R = topo.n_ranks
    group = list(range(R)) if ranks is None else [int(r) for r in ranks]
    if len(set(group)) != len(group):
        raise ValueError(f"ring_order: ranks must be distinct, got {group}")
    bad = [r for r in group if not 0 <= r < R]
    if bad:
        raise ValueError(f"ring_order: ranks {bad} are outside 0..{R - 1} of {topo.name}")
    if len(group) <= 2:
        return sorted(group)
    if topo.mesh_dims and topo.node_coord is not None and topo.rank_ports == 0:
        # accelerators are the routers: snake through the mesh (rank number breaks ties)
        return sorted(group, key=lambda r: (_snake_key(topo.node_coord[r], topo.mesh_dims), r))
    dom = topo.node_domain
    loc = local_index(topo)
    by_dom: dict[int, list[int]] = {}
    for r in group:
        by_dom.setdefault(int(dom[r]), []).append(r)
    if topo.mesh_dims and topo.node_coord is not None:
        order = sorted(by_dom, key=lambda d: (_snake_key(topo.node_coord[by_dom[d][0]], topo.mesh_dims), d))
    else:
        order = sorted(by_dom)
    groups = [sorted(by_dom[d], key=lambda r: (loc[r], r)) for d in order]
    N = len(groups)
    if N == 1:
        return groups[0]
    common = sorted(set.intersection(*(set(int(loc[r]) for r in g) for g in groups)))
    sizes = {len(g) for g in groups}
    cross = None                      # cross[n]: position of the GPU that leaves group n (enters group n+1)
    if sizes == {1}:
        cross = None                  # one rank per domain: nothing to choose
    elif min(sizes) >= 2 and len(common) >= (2 if N % 2 == 0 else 3):
        a, b = common[-1], common[0]
        cross = [a if n % 2 == 0 else b for n in range(N)]
        if N % 2:
            cross[-1] = common[1]
    out: list[int] = []
    for n, g in enumerate(groups):
        if cross is None:
            out.extend(g)
            continue
        enter, leave = cross[n - 1], cross[n]
        first = next(r for r in g if loc[r] == enter)
        last = next(r for r in g if loc[r] == leave)
        out.extend([first] + [r for r in g if r not in (first, last)] + [last])
    return out


# ---------------------------------------------------------------- metrics (fabric-probe topology)

def hop_matrix(topo: Topology) -> np.ndarray:
    """int32[R, R]: hops (channels) of the first candidate path of every pair; 0 on the diagonal."""
    R = topo.n_ranks
    first = topo.pair_ptr[:-1]
    has = topo.pair_ptr[1:] > first
    hops = np.zeros(R * R, dtype=np.int32)
    p = first[has]
    hops[has] = topo.path_ptr[p + 1] - topo.path_ptr[p]
    return hops.reshape(R, R)


def bisection(topo: Topology) -> tuple[float, str]:
    """Bisection bandwidth in GB/s (one direction) and how the cut was chosen.

    Meshes/tori: cut the router mesh across its longest dimension into two halves (coordinate < k/2); other
    topologies: ranks split by host domain (first half of the domains against the second; by rank when there is one
    domain); every other node sits with its domain, nodes without one on side A. The figure is the summed data rate
    of the channels from side A to side B (a balanced bisection of the ranks, not a minimised cut).
    """
    n = topo.n_nodes
    if topo.mesh_dims and max(topo.mesh_dims) > 1:
        dim = int(np.argmax(topo.mesh_dims))
        k = topo.mesh_dims[dim]
        side = topo.node_coord[:, dim] >= k // 2
        how = f"mesh dimension {'xyz'[dim]} cut at {k // 2}"
    else:
        doms = topo.node_domain
        nd = int(doms[:topo.n_ranks].max()) + 1
        if nd >= 2:
            side = doms >= (nd + 1) // 2
            how = f"host domains < {(nd + 1) // 2} against the rest"
        else:
            side = np.zeros(n, dtype=bool)
            side[topo.n_ranks // 2:topo.n_ranks] = True
            how = "ranks split in half"
    cross = ~side[topo.ch_src] & side[topo.ch_dst]
    gbytes = float(GBps(topo.ch_ps_per_byte[cross]).sum())
    return gbytes, how


def metrics(topo: Topology) -> dict:
    """Counts, diameter, average hops and bisection bandwidth, as `fabric-probe topology` prints them."""
    R = topo.n_ranks
    hops = hop_matrix(topo)
    off = ~np.eye(R, dtype=bool)
    n_cand = np.diff(topo.pair_ptr).reshape(R, R)[off]
    bis, how = bisection(topo)
    kinds = np.bincount(topo.node_kind.astype(np.int64), minlength=3)
    return {
        "name": topo.name,
        "kind": topo.kind,
        "description": topo.description,
        "nodes": topo.n_nodes,
        "ranks": R,
        "switches": int(kinds[SWITCH]),
        "nics": int(kinds[NIC]),
        "links": topo.n_links,
        "channels": topo.n_channels,
        "diameter": int(hops[off].max()) if R > 1 else 0,
        "average_hops": float(hops[off].mean()) if R > 1 else 0.0,
        "bisection_GBps": bis,
        "bisection_cut": how,
        "routing": topo.routing,
        "vc_levels": topo.vc_levels,
        "paths": int(len(topo.path_ptr) - 1),
        "max_candidates": int(n_cand.max()) if R > 1 else 0,
    }
