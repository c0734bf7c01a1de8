"""Algorithm selection: the SD200 library's size tiers, or one fixed algorithm (an unoptimised library); with
collectives.library = nccl-like, the tuner of fabric/collectives/library.py (`choose` returns its whole Choice).

sd200 (docs/sources.md §SD200 library): AllReduce of M <= oneshot_max_bytes -> oneshot; <= twoshot_max_bytes ->
twoshot; larger -> ring. AllGather / ReduceScatter: direct up to twoshot_max_bytes, ring above. AllToAll, Broadcast,
Send/Recv: direct (the only algorithm modelled).

Fixed policies map each kind to its nearest algorithm:
    policy             allreduce         allgather / reduce_scatter          others
    oneshot            oneshot           direct                              direct
    twoshot            twoshot           direct                              direct
    ring               ring              ring                                direct
    halving_doubling   halving_doubling  halving_doubling (ring if n is not  direct
                       (pre/post step    a power of two)
                       if n is not a
                       power of two)
"""
from __future__ import annotations

from fabric.collectives._frag import is_pow2
from fabric.collectives.registry import ALGORITHMS, KINDS
from fabric.errors import ConfigError


def collectives_config(cfg):
    """Accept a FabricConfig, a CollectivesConfig, or None (defaults)."""
    if cfg is None:
        from fabric.config import CollectivesConfig
        return CollectivesConfig()
    return getattr(cfg, "collectives", cfg)


def select(kind: str, nbytes: int, n_ranks: int, cfg=None) -> str:
    """The algorithm the configured library uses for one collective of `nbytes` (fragment size convention) over
    `n_ranks` ranks."""
    if kind not in ALGORITHMS:
        raise ConfigError(f"unknown collective kind {kind!r}; known: {', '.join(KINDS)}")
    cc = collectives_config(cfg)
    if cc.library == "nccl-like":
        return choose(kind, nbytes, n_ranks, cfg).algorithm
    pol = cc.policy
    if kind == "allreduce":
        if pol in ("sd200", "auto"):
            if nbytes <= cc.oneshot_max_bytes:
                return "oneshot"
            return "twoshot" if nbytes <= cc.twoshot_max_bytes else "ring"
        return pol
    if kind in ("allgather", "reduce_scatter"):
        if pol in ("sd200", "auto"):
            return "direct" if nbytes <= cc.twoshot_max_bytes else "ring"
        if pol.startswith(("oneshot", "twoshot")):
            return "direct"
        if pol == "halving_doubling":
            return "halving_doubling" if is_pow2(n_ranks) else "ring"
        return pol
    return "direct"


def choose(kind: str, nbytes: int, n_ranks: int, cfg=None, algorithm: str | None = None):
    """What the configured library runs for one call: a library.Choice (algorithm, protocol, channels). The sd200
    library has one protocol (protocol "", channels 0 = its own striping rule); nccl-like asks its tuner, which
    needs the whole FabricConfig. `algorithm` fixes the algorithm (the tuner still picks protocol and channels)."""
    from fabric.collectives.library import Choice, tune
    if kind not in ALGORITHMS:
        raise ConfigError(f"unknown collective kind {kind!r}; known: {', '.join(KINDS)}")
    cc = collectives_config(cfg)
    if cc.library == "nccl-like":
        return tune(kind, nbytes, n_ranks, cfg, algorithm=algorithm)
    return Choice(algorithm or select(kind, nbytes, n_ranks, cfg))
