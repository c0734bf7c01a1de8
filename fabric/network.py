"""Building a network: the topology builder named by `topology.kind`, then the fabric manager's routes and their
deadlock-freedom proof. The one place where fabric.topology (layout) and fabric.routing (paths) meet."""
from __future__ import annotations

from fabric.config import FabricConfig
from fabric.errors import ConfigError
from fabric.routing import check_deadlock_free, route
from fabric.topology import BUILDERS, Topology


def build(cfg: FabricConfig, *, routing: str = "auto", check: bool = True) -> Topology:
    """Build the fabric named by cfg.topology.kind, route it and prove the routes deadlock-free.

    `routing` selects the fabric manager's algorithm (see fabric.routing.route); `check=False` skips the
    channel-dependency proof (for tests that inject a deliberately cyclic routing and check it themselves).
    """
    try:
        builder = BUILDERS[cfg.topology.kind]
    except KeyError:
        raise ConfigError(f"topology.kind={cfg.topology.kind!r} has no builder; use one of "
                          f"{', '.join(BUILDERS)}") from None
    topo = builder(cfg)
    route(topo, method=routing)
    if check:
        check_deadlock_free(topo)
    return topo
