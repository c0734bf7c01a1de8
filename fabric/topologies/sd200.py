"""sd200: host domains of accelerators, one fabric switch per domain, the domain switches in a 3D mesh (the
SD200-class super-node, the reference system); spare accelerators hang off the domain switches round robin."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabric.errors import ConfigError
from fabric.params import Section, param
from fabric.phy import ps
from fabric.topologies import Kind, Size, register
from fabric.topology import ACCEL, SWITCH, Builder, check_dims, mesh_coord, mesh_links, parse_dims


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


def build(cfg):
    """Host domains of `accels_per_domain` accelerators, one fabric switch per domain, switches in a 3D mesh."""
    t, s = cfg.topology, cfg.topology.sd200
    dims = parse_dims(s.switch_mesh_dims, "topology.sd200.switch_mesh_dims")
    n_dom = dims[0] * dims[1] * dims[2]
    A, N = t.accels_per_domain, t.ports_per_accel
    R = n_dom * A
    dom = np.concatenate([np.arange(R) // A, np.arange(s.spares) % n_dom]).astype(np.int32)  # spares round robin
    b = Builder(cfg)
    for r in range(R):
        b.node(f"acc{r}", ACCEL, domain=r // A, coord=mesh_coord(r // A, dims))
    for k in range(s.spares):
        b.node(f"spare{k}", ACCEL, domain=int(dom[R + k]), coord=mesh_coord(int(dom[R + k]), dims))
    sw_lat = ps(cfg.switch.latency_ns)
    sw = np.array([b.node(f"sw{d}", SWITCH, domain=d, latency_ps=sw_lat, forwards=True, coord=mesh_coord(d, dims))
                   for d in range(n_dom)], dtype=np.int32)
    for r in range(R + s.spares):
        for _ in range(N):
            b.link(r, int(sw[dom[r]]))
    mesh_links(b, sw, dims, (False, False, False), s.links_per_neighbor)
    desc = (f"{n_dom} host domains of {A} accelerators; domain switches in a {'x'.join(map(str, dims))} mesh; "
            f"{N} ports per accelerator, {s.links_per_neighbor} links between neighbouring switches")
    if s.spares:
        desc += f"; {s.spares} spare accelerators"
    return b.freeze(f"sd200-{R}", R + s.spares, "sd200", desc, mesh_dims=dims, mesh_wrap=(False, False, False),
                    mesh_nodes=sw, rank_router=dom, rank_ports=N, n_spares=s.spares)


def size(cfg) -> Size:
    dims = parse_dims(cfg.topology.sd200.switch_mesh_dims, "topology.sd200.switch_mesh_dims")
    n_dom = dims[0] * dims[1] * dims[2]
    return Size(n_dom * cfg.topology.accels_per_domain, n_dom, sum(d - 1 for d in dims) / 3 + 2)


register(Kind("sd200", "host domains whose switches form a 3D mesh (the SD200-class super-node)", build, size,
              routing="dor", params=Sd200Params))
