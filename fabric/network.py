"""Building a network: the builder of the kind `topology.kind` names (fabric/topologies/), then the fabric
manager's routes and their deadlock-freedom proof. The one place where fabric.topology (layout) and fabric.routing
(paths) meet."""
from __future__ import annotations

import functools

from fabric import topologies
from fabric.config import FabricConfig
from fabric.routing import check_deadlock_free, route
from fabric.topology import Topology


def size_estimate(cfg: FabricConfig) -> dict:
    """Ranks, switches and a lower bound of the routing's memory (every rank pair's route: pair and path pointers,
    channels and VC levels of at least one shortest path, x2 for the temporaries of its construction), from the
    config alone (the kind's size estimate), before anything is built."""
    ranks, switches, hops = topologies.get(cfg.topology.kind).size(cfg)
    route_B = 2.0 * ranks * ranks * (8 + 8 + 5 * hops)
    return dict(ranks=ranks, switches=switches, memory_mb=route_B / 2**20)


def check_size(cfg: FabricConfig) -> dict:
    """Refuse a fabric whose routing alone would exceed sim.max_memory_mb, before building it."""
    from fabric.config import check_memory
    est = size_estimate(cfg)
    check_memory(cfg, est["memory_mb"], f"topology {cfg.topology.kind} with {est['ranks']} accelerators would need "
                 f"at least {est['memory_mb']:.0f} MiB for its routes ({est['ranks']}^2 rank pairs)",
                 "use a smaller fabric")
    return est


def build(cfg: FabricConfig, *, routing: str = "auto", check: bool = True) -> Topology:
    """Build the fabric named by cfg.topology.kind, route it and prove the routes deadlock-free.

    `routing` selects the fabric manager's algorithm (see fabric.routing.route; auto: the kind's default);
    `check=False` skips the channel-dependency proof (for tests that inject a deliberately cyclic routing and check
    it themselves).
    """
    kind = topologies.get(cfg.topology.kind)
    check_size(cfg)
    topo = kind.build(cfg)
    route(topo, method=kind.routing if routing == "auto" else routing)
    if check:
        check_deadlock_free(topo)
    return topo


@functools.lru_cache(maxsize=8)
def shared(cfg: FabricConfig) -> Topology:
    """The network cfg describes, built and checked once per config (frozen, hashable) and shared by every user
    that has no topology of its own: the replay, the library tuner, the auto tiers, kernel_params (whose flow-control
    cache is keyed on the topology object, so it hits too). Read it; never modify it."""
    return build(cfg)
