"""Fabric description: nodes, unidirectional channels and (after routing) candidate paths, as numpy arrays.

The builders' shared parts: the Topology arrays, the Builder that accumulates nodes and links and fills the
per-channel PHY arrays from the [phy] section, mesh links and dimensions. Each `topology.kind` is a module of
fabric/topologies/ that builds with them; `fabric.network.build(cfg)` runs the kind's builder and then the fabric
manager (fabric.routing). See docs/contracts.md for the array contract and docs/topology.md for every kind and
preset. Nothing here reads a config section by name but [phy] (the Builder's link defaults).

Numbering: ranks (endpoints) are nodes 0..R-1: the serving accelerators, then the spares (n_spares), then the
host-memory nodes (n_host_memory); switches, NICs and other nodes follow. Channel 2k and 2k+1 are the two
directions of link k.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from fabric.errors import ConfigError
from fabric.phy import GBps, data_gbps, effective_ber, link_latency_ps, ps_per_byte

ACCEL, SWITCH, NIC, HOST_MEMORY = 0, 1, 2, 3
KIND_NAMES = {ACCEL: "accelerator", SWITCH: "switch", NIC: "NIC", HOST_MEMORY: "host memory"}


@dataclass
class Topology:
    """Nodes, channels and routes of one fabric (docs/contracts.md). Arrays are read-only by convention."""
    # --- nodes ---
    name: str
    n_ranks: int
    node_names: list[str]
    node_kind: np.ndarray          # int8[n_nodes]: 0 accelerator, 1 switch, 2 NIC, 3 host memory
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
    n_spares: int = 0              # spare accelerators: the n_spares ranks after the serving ones
                                   # (topology.sd200.spares), idle until a serving rank migrates to one
                                   # (fabric.faults.migration)
    n_host_memory: int = 0         # host-memory nodes: the last n_host_memory ranks (topology.host_memory)
    host_memory_gib: int = 0       # capacity of each host-memory node (topology.host_memory.gib_per_node), GiB

    # ---------------------------------------------------------------- rank classes
    @property
    def n_serving(self) -> int:
        """Ranks that can run work: the accelerators 0..n_serving-1 (not the spares, not host memory)."""
        return self.n_ranks - self.n_spares - self.n_host_memory

    @property
    def spare_ranks(self) -> np.ndarray:
        """int64[n_spares]: the spare accelerators' ranks."""
        return np.arange(self.n_serving, self.n_serving + self.n_spares)

    @property
    def host_memory_ranks(self) -> np.ndarray:
        """int64[n_host_memory]: the host-memory ranks in domain order (node k of domain d at d*per_domain + k)."""
        return np.arange(self.n_ranks - self.n_host_memory, self.n_ranks)

    def host_memory_of(self, domain: int) -> np.ndarray:
        """int64[k]: the host-memory ranks of host domain `domain` (empty where it has none)."""
        hm = self.host_memory_ranks
        return hm[self.node_domain[hm] == domain]

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

class Builder:
    """Accumulates nodes and bidirectional links in Python lists, then freezes them into arrays."""

    def __init__(self, cfg):
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

    def link(self, u: int, v: int, ps_per_byte: float | None = None, latency_ps: int | None = None,
             latency_back_ps: int | None = None) -> None:
        """A bidirectional link u <-> v; latency_back_ps: the v -> u direction's latency when it differs."""
        rate = self.fabric_ps_per_byte if ps_per_byte is None else ps_per_byte
        lat = self.fabric_latency_ps if latency_ps is None else latency_ps
        back = lat if latency_back_ps is None else latency_back_ps
        key = (min(u, v), max(u, v))
        k = self._pair_count.get(key, 0)
        self._pair_count[key] = k + 1
        for a, b, t in ((u, v, lat), (v, u, back)):
            self.src.append(a)
            self.dst.append(b)
            self.rates.append(rate)
            self.chlat.append(t)
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


_DIMS = re.compile(r"[1-9][0-9]*([x*][1-9][0-9]*){0,2}")


def check_dims(text: str, key: str) -> None:
    """Refuse mesh dimensions that are not XxYxZ (one to three positive integers) when the config is loaded."""
    if not _DIMS.fullmatch(str(text).strip().lower()):
        raise ConfigError(f"{key}={text!r} must look like XxYxZ with positive integers, e.g. 4x4x4")


def parse_dims(text: str, key: str) -> tuple[int, int, int]:
    """'4x4x4' -> (4, 4, 4); one to three positive factors, missing ones are 1."""
    try:
        dims = tuple(int(t) for t in str(text).lower().replace("*", "x").split("x"))
    except ValueError:
        dims = ()
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise ConfigError(f"{key}={text!r} must look like XxYxZ with positive integers, e.g. 4x4x4")
    return dims + (1,) * (3 - len(dims))


def mesh_links(b: Builder, nodes: np.ndarray, dims, wrap, lanes: int) -> None:
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


def mesh_coord(idx: int, dims) -> tuple[int, int, int]:
    X, Y, _ = dims
    return idx % X, (idx // X) % Y, idx // (X * Y)


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
    kinds = np.bincount(topo.node_kind.astype(np.int64), minlength=len(KIND_NAMES))
    return {
        "name": topo.name,
        "kind": topo.kind,
        "description": topo.description,
        "nodes": topo.n_nodes,
        "ranks": R,
        "switches": int(kinds[SWITCH]),
        "nics": int(kinds[NIC]),
        "host_memory": int(kinds[HOST_MEMORY]),
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
