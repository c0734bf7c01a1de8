"""accel_mesh and accel_torus: the accelerators themselves in a 3D mesh or torus, each forwarding through its
embedded router; no switches. The torus is the mesh with every dimension of size >= 3 closed into a ring, so the two
kinds share one builder and one sub-section, [topology.accel_mesh]."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabric.params import Crossing, Section, param
from fabric.phy import ps
from fabric.topologies import Kind, Size, register
from fabric.topology import ACCEL, Builder, check_dims, mesh_coord, mesh_links, parse_dims


@dataclass(frozen=True)
class AccelMeshParams(Section):
    """[topology.accel_mesh]: the accelerator mesh or torus."""
    mesh_dims: str = param("4x4x4", unit="accelerators", help="accelerator mesh XxYxZ",
                           reason="64 accelerators in a 4x4x4 mesh, the other reading of the SD200's 3D mesh "
                                  "(docs/sources.md §SD200 system)",
                           was="topology.mesh_dims")
    links_per_neighbor: int = param(2, unit="links", lo=1, hi=16,
                                    help="parallel links between neighbouring accelerators",
                                    reason="as between sd200's domain switches, so that switching topology.kind "
                                           "alone keeps the link count; the mesh and torus presets set 1, the "
                                           "plain k-ary n-cube [E]",
                                    was="topology.links_per_neighbor")
    wrap: bool = param(False, unit="flag", help="accel_mesh: close every dimension of size >= 3 into a ring "
                                                "(torus); accel_torus always wraps",
                       reason="the SD200 is described as a mesh, not a torus (docs/sources.md §SD200 system)",
                       was="topology.wrap")
    router_ns: float = param(100.0, unit="ns", lo=0, hi=1e7,
                             help="cost of crossing an accelerator's embedded router (its node_latency_ps; paid "
                                  "only where a packet is forwarded)",
                             reason="an embedded router costs what a fabric switch pipeline does (100 ns)",
                             was="topology.accel_router_ns")

    def check(self, cfg, prefix: str) -> None:
        check_dims(self.mesh_dims, f"{prefix}.mesh_dims")

    def crossing(self) -> Crossing:
        return Crossing(node_ns=(self.router_ns,))


def build(cfg, torus: bool = False):
    """Accelerators themselves in a 3D mesh (or torus), each forwarding through its embedded router."""
    t, m = cfg.topology, cfg.topology.accel_mesh
    dims = parse_dims(m.mesh_dims, "topology.accel_mesh.mesh_dims")
    wrap = tuple(bool(torus or m.wrap) and k >= 3 for k in dims)  # a ring of 2 would just double the link
    R = dims[0] * dims[1] * dims[2]
    b = Builder(cfg)
    lat = ps(m.router_ns)
    for r in range(R):
        b.node(f"acc{r}", ACCEL, domain=r // t.accels_per_domain, latency_ps=lat, forwards=True,
               coord=mesh_coord(r, dims))
    nodes = np.arange(R, dtype=np.int32)
    mesh_links(b, nodes, dims, wrap, m.links_per_neighbor)
    shape = "torus" if any(wrap) else "mesh"
    name = f"{shape}-{'x'.join(map(str, dims))}"
    desc = f"{R} accelerators in a {'x'.join(map(str, dims))} {shape}, {m.links_per_neighbor} link(s) per neighbour"
    return b.freeze(name, R, "accel_torus" if torus else "accel_mesh", desc, mesh_dims=dims, mesh_wrap=wrap,
                    mesh_nodes=nodes, rank_router=nodes.copy(), rank_ports=0)


def build_torus(cfg):
    return build(cfg, torus=True)


def size(cfg) -> Size:
    dims = parse_dims(cfg.topology.accel_mesh.mesh_dims, "topology.accel_mesh.mesh_dims")
    return Size(dims[0] * dims[1] * dims[2], 0, max(1.0, sum(d - 1 for d in dims) / 3))


register(Kind("accel_mesh", "accelerators in a 3D mesh, forwarding through embedded routers", build, size,
              routing="dor", params=AccelMeshParams))
register(Kind("accel_torus", "accel_mesh with every dimension of size >= 3 wrapped (dateline VCs)", build_torus,
              size, routing="dor", params=AccelMeshParams, section="accel_mesh"))
