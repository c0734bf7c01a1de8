"""switch_torus: host domains whose switches form a 2D torus, every dimension of size >= 3 closed into a ring
(a k-ary 2-cube of switches: sd200's host domains with the wrap-around links a mesh lacks). Dimension-order routing
takes the shorter way round each ring, with a dateline VC level, so it needs link.vcs >= 4.

Added as the example of a topology kind in one file (docs/topology.md §Adding a topology kind)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabric.errors import ConfigError
from fabric.params import Section, param
from fabric.phy import ps
from fabric.topologies import Kind, Size, register
from fabric.topology import ACCEL, SWITCH, Builder, check_dims, mesh_coord, mesh_links, parse_dims


@dataclass(frozen=True)
class SwitchTorusParams(Section):
    """[topology.switch_torus]: the torus of domain switches."""
    dims: str = param("4x4", unit="switches", help="2D torus of host-domain switches, XxY (one switch per host "
                      "domain; host domains = X*Y); dimensions of size >= 3 wrap",
                      reason="a small torus: 4 is the shortest ring on which routes go two hops round it, so "
                             "the dateline VC level is used; not modelled on a published system [E]")
    links_per_neighbor: int = param(2, unit="links", lo=1, hi=16,
                                    help="parallel links between neighbouring switches",
                                    reason="as between sd200's domain switches (2 x8 links per edge), so the two "
                                           "compare edge for edge [E]")

    def check(self, cfg, prefix: str) -> None:
        check_dims(self.dims, f"{prefix}.dims")
        if str(self.dims).lower().replace("*", "x").count("x") > 1:
            raise ConfigError(f"{prefix}.dims={self.dims!r} must be a 2D torus, XxY (e.g. 4x4)")


def _dims(cfg) -> tuple[int, int, int]:
    return parse_dims(cfg.topology.switch_torus.dims, "topology.switch_torus.dims")


def build(cfg):
    """Host domains of accels_per_domain accelerators, ports_per_accel ports each to its domain's switch; the
    switches in an X x Y torus."""
    t, s = cfg.topology, cfg.topology.switch_torus
    dims = _dims(cfg)
    wrap = tuple(k >= 3 for k in dims)              # a ring of 2 would only double the link
    n_dom, A, N = dims[0] * dims[1], t.accels_per_domain, t.ports_per_accel
    R = n_dom * A
    dom = (np.arange(R) // A).astype(np.int32)
    b = Builder(cfg)
    for r in range(R):
        b.node(f"acc{r}", ACCEL, domain=r // A, coord=mesh_coord(r // A, dims))
    sw_lat = ps(cfg.switch.latency_ns)
    sw = np.array([b.node(f"sw{d}", SWITCH, domain=d, latency_ps=sw_lat, forwards=True, coord=mesh_coord(d, dims))
                   for d in range(n_dom)], dtype=np.int32)
    for r in range(R):
        for _ in range(N):
            b.link(r, int(sw[dom[r]]))
    mesh_links(b, sw, dims, wrap, s.links_per_neighbor)
    shape = f"{dims[0]}x{dims[1]}"
    desc = (f"{n_dom} host domains of {A} accelerators; domain switches in a {shape} torus; {N} ports per "
            f"accelerator, {s.links_per_neighbor} links between neighbouring switches")
    return b.freeze(f"switch-torus-{shape}", R, "switch_torus", desc, mesh_dims=dims, mesh_wrap=wrap, mesh_nodes=sw,
                    rank_router=dom, rank_ports=N)


def size(cfg) -> Size:
    dims = _dims(cfg)
    # a ring of k averages about k/4 hops; + 2 for the hops into and out of the switches
    return Size(dims[0] * dims[1] * cfg.topology.accels_per_domain, dims[0] * dims[1],
                sum(k / 4 for k in dims[:2]) + 2)


register(Kind("switch_torus", "host domains whose switches form a 2D torus (dateline VCs)", build, size,
              routing="dor", params=SwitchTorusParams))
