"""sd200: host domains of accelerators, one fabric switch per domain, the domain switches in a 3D mesh (the
SD200-class super-node, the reference system); spare accelerators hang off the domain switches round robin, and
each domain's host memory, when asked for ([topology.host_memory]), hangs off its domain switch as endpoint ranks."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabric.errors import ConfigError
from fabric.params import Crossing, Section, param
from fabric.phy import link_latency_ps, ps, ps_per_byte
from fabric.topologies import Kind, Size, register, register_section
from fabric.topology import ACCEL, HOST_MEMORY, SWITCH, Builder, check_dims, mesh_coord, mesh_links, parse_dims


@dataclass(frozen=True)
class Sd200Params(Section):
    """[topology.sd200]: the mesh of domain switches and the spares."""
    switch_mesh_dims: str = param("2x2x2", unit="switches", help="3D mesh of host-domain switches, XxYxZ (one "
                                  "fabric switch per host domain; host domains = X*Y*Z)",
                                  reason="8 host domains (docs/sources.md §SD200 system: 8x address space) joined in "
                                         "a 3D mesh form a 2x2x2 cube",
                                  was="topology.switch_mesh_dims")
    links_per_neighbor: int = param(2, unit="links", lo=1, hi=16,
                                    help="parallel links between neighbouring domain switches",
                                    reason="2 links between neighbouring domain switches: 8x2 accelerator ports + "
                                           "6x2 mesh ports = 28 ports fit a 32-port x8 switch; not published [E]",
                                    was="topology.links_per_neighbor")
    spares: int = param(0, unit="accelerators", lo=0, hi=1024,
                        help="spare accelerators beyond the X*Y*Z*accels_per_domain that serve, spread round "
                             "robin over the domain switches (spare k on sw(k mod domains), ranks after the serving "
                             "ones); they run nothing until a serving rank is cut off and migrated (--migrate)",
                        reason="the SD200 keeps serving through failures by task migration (docs/sources.md §SD200 "
                               "system), which needs somewhere to migrate to; how many spares it keeps is not "
                               "published [E], so none unless asked",
                        was="topology.spares")

    def check(self, cfg, prefix: str) -> None:
        check_dims(self.switch_mesh_dims, f"{prefix}.switch_mesh_dims")
        if self.spares and cfg.topology.kind != "sd200":
            raise ConfigError(f"{prefix}.spares={self.spares}: spare accelerators hang off the domain switches of "
                              f"the sd200 builder only; use topology.kind = \"sd200\" or {prefix}.spares = 0")


@dataclass(frozen=True)
class HostMemoryParams(Section):
    """[topology.host_memory]: each host domain's DRAM as fabric endpoints (host-memory nodes) that accelerators of
    every domain reach by load/store through the unified address space (a KV tier); sd200 builder only."""
    nodes_per_domain: int = param(0, unit="nodes", lo=0, hi=64,
                                  help="host-memory nodes per host domain, each an endpoint rank linked to its "
                                       "domain switch (ranks after the serving accelerators and the spares, node k "
                                       "of domain d at host-memory index d*nodes_per_domain + k)",
                                  reason="0: a step replay never touches host memory, and adding nodes changes every "
                                         "link and route table; fabric-serve's host KV tier turns it on")
    gib_per_node: int = param(8192, unit="GiB", lo=1, hi=1 << 30,
                              help="capacity of one host-memory node (its KV tier capacity); the window it exposes "
                                   "in the address map is an aperture of topology.accel_mem_gib (docs/topology.md "
                                   "§Host memory)",
                              reason="64 TB of host memory over 8 host domains: 8 TB each, one node per domain, "
                                     "taken as 8 TiB (docs/sources.md §SD200 system)")
    links_per_node: int = param(2, unit="links", lo=1, hi=64,
                                help="parallel links from a host-memory node to its domain switch (the host CPU's "
                                     "root ports into the fabric)",
                                reason="the 32-port x8 domain switch has 4 ports left after 8x2 accelerator and 6x2 "
                                       "mesh ports (topology.sd200.links_per_neighbor): two x16 root ports, one per "
                                       "socket of a 2-socket host; not published [E]")
    gbps_per_link: float = param(504.0, unit="Gb/s", lo=0, lo_open=True, hi=100000,
                                 help="data rate of one host-memory link per direction, before the fabric's packet "
                                      "and flit overheads (what phy lanes x lane rate x line code give a fabric link)",
                                 reason="a PCIe 5.0 x16 root port: 16 lanes x 32 GT/s x 128b/130b = 504 Gb/s = 63 GB/s "
                                        "per direction (PCI Express Base Specification 5.0); the host's DDR5 (8-12 "
                                        "channels x 4800 MT/s x 8 B = 307-461 GB/s per socket) is faster, so the "
                                        "root ports bound it [E]")
    latency_ns: float = param(100.0, unit="ns", lo=0, hi=1e6,
                              help="DRAM access latency, added to the PHY latency of a host-memory node's outbound "
                                   "channels (node -> switch): a load's data leaves after it; a store is posted "
                                   "(the root complex's write buffers take it) and does not wait for it",
                              reason="Intel Memory Latency Checker on a Xeon Scalable with DDR4-2666 gives 82 ns idle "
                                     "and 130 ns at full bandwidth (community.intel.com, MLC v3.5 thread); 100 ns "
                                     "between the two; not published for the SD200 host [E]")

    def check(self, cfg, prefix: str) -> None:
        if self.nodes_per_domain and cfg.topology.kind != "sd200":
            raise ConfigError(f"{prefix}.nodes_per_domain={self.nodes_per_domain}: host-memory nodes hang off the "
                              f"domain switches of the sd200 builder only; use topology.kind = \"sd200\" or "
                              f"{prefix}.nodes_per_domain = 0")

    def crossing(self) -> Crossing:
        # a crossing may end in host memory, whose DRAM latency its link adds
        return Crossing(once_ns=(self.latency_ns,) if self.nodes_per_domain else ())


def build(cfg):
    """Host domains of `accels_per_domain` accelerators, one fabric switch per domain, switches in a 3D mesh."""
    t, s, h = cfg.topology, cfg.topology.sd200, cfg.topology.host_memory
    dims = parse_dims(s.switch_mesh_dims, "topology.sd200.switch_mesh_dims")
    n_dom = dims[0] * dims[1] * dims[2]
    A, N, H = t.accels_per_domain, t.ports_per_accel, h.nodes_per_domain
    R = n_dom * A
    first_hmem = R + s.spares
    dom = np.concatenate([np.arange(R) // A, np.arange(s.spares) % n_dom,               # spares round robin
                          np.arange(n_dom * H) // max(H, 1)]).astype(np.int32)       # host memory in domain order
    b = Builder(cfg)
    for r in range(R):
        b.node(f"acc{r}", ACCEL, domain=r // A, coord=mesh_coord(r // A, dims))
    for k in range(s.spares):
        b.node(f"spare{k}", ACCEL, domain=int(dom[R + k]), coord=mesh_coord(int(dom[R + k]), dims))
    for k in range(n_dom * H):
        d = int(dom[first_hmem + k])
        b.node(f"hmem{k}", HOST_MEMORY, domain=d, coord=mesh_coord(d, dims))
    sw_lat = ps(cfg.switch.latency_ns)
    sw = np.array([b.node(f"sw{d}", SWITCH, domain=d, latency_ps=sw_lat, forwards=True, coord=mesh_coord(d, dims))
                   for d in range(n_dom)], dtype=np.int32)
    for r in range(R + s.spares):
        for _ in range(N):
            b.link(r, int(sw[dom[r]]))
    # the DRAM access holds what a node sends (a load's data); a store into it is posted
    hmem_rate, phy_lat = ps_per_byte(h.gbps_per_link), link_latency_ps(cfg)
    for r in range(first_hmem, first_hmem + n_dom * H):
        for _ in range(h.links_per_node):
            b.link(r, int(sw[dom[r]]), hmem_rate, phy_lat + ps(h.latency_ns), phy_lat)
    mesh_links(b, sw, dims, (False, False, False), s.links_per_neighbor)
    desc = (f"{n_dom} host domains of {A} accelerators; domain switches in a {'x'.join(map(str, dims))} mesh; "
            f"{N} ports per accelerator, {s.links_per_neighbor} links between neighbouring switches")
    if s.spares:
        desc += f"; {s.spares} spare accelerators"
    if H:
        desc += (f"; {H} host-memory node(s) of {h.gib_per_node} GiB per domain, {h.links_per_node} links of "
                 f"{h.gbps_per_link:g} Gb/s each")
    return b.freeze(f"sd200-{R}", first_hmem + n_dom * H, "sd200", desc, mesh_dims=dims,
                    mesh_wrap=(False, False, False), mesh_nodes=sw, rank_router=dom, rank_ports=N, n_spares=s.spares,
                    n_host_memory=n_dom * H, host_memory_gib=h.gib_per_node if H else 0)


def size(cfg) -> Size:
    dims = parse_dims(cfg.topology.sd200.switch_mesh_dims, "topology.sd200.switch_mesh_dims")
    n_dom = dims[0] * dims[1] * dims[2]
    t = cfg.topology
    return Size(n_dom * (t.accels_per_domain + t.host_memory.nodes_per_domain) + t.sd200.spares, n_dom,
                sum(d - 1 for d in dims) / 3 + 2)


register_section("host_memory", HostMemoryParams)
register(Kind("sd200", "host domains whose switches form a 3D mesh (the SD200-class super-node)", build, size,
              routing="dor", params=Sd200Params, reads=("host_memory",)))
