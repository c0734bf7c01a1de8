"""Algorithm selection: the SD200 library's size tiers, or one fixed algorithm (an unoptimised library); with
collectives.library = nccl-like, the tuner of fabric/collectives/library.py (`choose` returns its whole Choice).

sd200 (docs/sources.md §SD200 library, docs/collectives.md §Selection policy): AllReduce tiers one-shot ->
two-shot -> ring, each on its store, load (cache-less) or cached path. The tier ceilings depend on the group size
and the fabric, so they are not constants: with oneshot_max_bytes = twoshot_max_bytes = 0 (auto, the default) a
call of M bytes over n ranks runs the algorithm whose time on the analytic engine is least at G, the power of two
>= M (at least 8 B), for a group of ranks 0..n-1 of the configured fabric (`fastest`; cached per (kind, G, n,
config)). Choosing at G keeps the time monotonic in M: every size in (G/2, G] takes the winner at G, which is no
faster at G/2 than the winner there. AllGather / ReduceScatter choose direct or ring the same way. Nonzero ceilings
fix the tiers instead (store path): M <= oneshot_max_bytes one-shot, <= twoshot_max_bytes two-shot (AllGather /
ReduceScatter direct), else ring. AllToAll, Broadcast, Send/Recv: direct (the only algorithm modelled).

Fixed policies map each kind to its nearest algorithm:
    policy             allreduce         allgather / reduce_scatter          others
    oneshot[_load|_cached] that one      direct                              direct
    twoshot[_load|_cached] that one      direct                              direct
    ring               ring              ring                                direct
    halving_doubling   halving_doubling  halving_doubling (ring if n is not  direct
                       (pre/post step    a power of two)
                       if n is not a
                       power of two)
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from fabric.collectives._frag import FragBuilder, is_pow2
from fabric.collectives.registry import ALGORITHMS, CORES, KINDS
from fabric.errors import ConfigError
from fabric.taskgraph import JOIN, GraphBuilder


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
    tiered = pol in ("sd200", "auto")
    if tiered and kind in CANDIDATES and not (cc.oneshot_max_bytes or cc.twoshot_max_bytes):
        return fastest(kind, nbytes, n_ranks, cfg) if n_ranks > 1 else CANDIDATES[kind][0]
    if kind == "allreduce":
        if tiered:
            if nbytes <= cc.oneshot_max_bytes:
                return "oneshot"
            return "twoshot" if nbytes <= cc.twoshot_max_bytes else "ring"
        return pol
    if kind in ("allgather", "reduce_scatter"):
        if tiered:
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


# what the auto tiers choose among, per kind (ties go to the first: the store path, then the simpler tier)
CANDIDATES = {"allreduce": ("oneshot", "twoshot", "ring", "oneshot_load", "twoshot_load", "oneshot_cached",
                            "twoshot_cached"),
              "allgather": ("direct", "ring"), "reduce_scatter": ("direct", "ring")}
GRID_MIN_BYTES = 8


def grid_size(nbytes: int) -> int:
    """The power of two >= nbytes (at least GRID_MIN_BYTES) whose winner a call of nbytes runs."""
    return max(GRID_MIN_BYTES, 1 << max(int(nbytes) - 1, 0).bit_length())


def fastest(kind: str, nbytes: int, n_ranks: int, cfg=None) -> str:
    """The sd200 library's auto tier: the candidate with the least analytic-engine time at grid_size(nbytes) over
    ranks 0..n-1 of the fabric `cfg` describes (a CollectivesConfig alone: the default fabric)."""
    return min(times(kind, grid_size(nbytes), n_ranks, cfg).items(), key=lambda kv: kv[1])[0]


def times(kind: str, nbytes: int, n_ranks: int, cfg=None) -> dict:
    """{algorithm: time in us} of every auto candidate for one call, on the analytic engine (cached)."""
    if not hasattr(cfg, "topology"):
        from fabric.config import FabricConfig
        cfg = dataclasses.replace(FabricConfig(), collectives=collectives_config(cfg))
    return _times(kind, int(nbytes), int(n_ranks), cfg)


@functools.lru_cache(maxsize=4096)
def _times(kind: str, nbytes: int, n: int, cfg) -> dict:
    from fabric import sim
    from fabric.network import shared
    from fabric.routing import confined
    topo = shared(cfg)
    if n > topo.n_ranks:
        raise ConfigError(f"a {kind} over {n} ranks does not fit this fabric of {topo.n_ranks} accelerators")
    # One engine for every candidate, on the routes among the group's ranks alone (routing.confined: the same run;
    # a decision on 1024 ranks 0.36 -> 0.07 s CPU): each runs alone, after a barrier on every task of the
    # previous one (flags may still fly after a rank's output is ready), so it finds every channel idle as a run of
    # its own would (released by one barrier: equal start times break ties in the barrier's order, so a time may
    # differ from a lone run's by a few hundred ps).
    b = GraphBuilder(topo.n_ranks)
    ranks = np.arange(n)
    spans, prev = [], None
    for a in CANDIDATES[kind]:
        # the sd200 library's fragment of that algorithm (collectives.build without the library profiles)
        fb = FragBuilder(kind, a, n, nbytes, cfg.collectives, semantics=False)
        start, ready = fb.prologue()
        frag = fb.finish(start, CORES[kind][a](fb, ready, nbytes))
        lo = b.n_tasks
        first, done, _ = b.add_fragment(frag, ranks)
        if prev is not None:
            barrier = b.add_tasks(JOIN, 0)
            b.add_edges(prev, barrier)
            b.add_edges(barrier, first)
        spans.append((a, first, done))
        prev = np.arange(lo, lo + frag.n_tasks)
    res = sim.run(cfg, confined(topo, n), b.build(), engine="analytic", transfers=False,
                  permanent=())   # the healthy fabric
    return {a: float(res.task_end_ps[done].max() - res.task_start_ps[first].min()) / 1e6 for a, first, done in spans}
