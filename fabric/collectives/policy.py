"""Algorithm selection: the SD200 library's size tiers, or one fixed algorithm (an unoptimised library); with
collectives.library = nccl-like, the tuner of fabric/collectives/library.py (`choose` returns its whole Choice;
given an oracle, the tuner simulates its shortlist on it and runs the fastest).

sd200 (docs/sources.md §SD200 library, docs/collectives.md §Selection policy): AllReduce tiers one-shot ->
two-shot -> ring, each on its store, load (cache-less) or cached path. The tier ceilings depend on the group size
and the fabric, so they are not constants: with oneshot_max_bytes = twoshot_max_bytes = 0 (auto, the default) a
call of M bytes over n ranks runs the algorithm whose time on the analytic engine (the cost oracle below, checked
on the packet engine where it is close) is least at G, the power of two >= M (at least 8 B), for a group of ranks 0..n-1 of the configured fabric (`fastest`).
Choosing at G keeps the time monotonic in M: every size in (G/2, G] takes the winner at G, which is no
faster at G/2 than the winner there. AllGather / ReduceScatter choose direct or ring the same way. Nonzero ceilings
fix the tiers instead (store path): M <= oneshot_max_bytes one-shot, <= twoshot_max_bytes two-shot (AllGather /
ReduceScatter direct), else ring. AllToAll, Broadcast, Send/Recv: direct (the only algorithm modelled).

The auto tiers time their candidates, but collectives never run an engine (this package is the workload layer and
imports no simulator): the pipeline passes a cost oracle, `oracle(cfg, fragments) -> [us, ...]`, each fragment's
time run alone over ranks 0..n-1 of the healthy fabric of the FabricConfig `cfg`. fabric.lower.lower passes
fabric.sim.analytic_times (the analytic engine on the group's confined routes) unless told otherwise, and so do the
tools that choose an algorithm (fabric-probe collective, fabric-bench); a call that needs an oracle and has none
raises TypeError. The times are cached per (kind, grid size, group size, config, oracle).

An oracle may carry `check`, a second oracle that decides among the candidates the first cannot tell apart: those
within collectives.sd200.tier_check_margin of its least time. fabric.sim.analytic_times carries the packet engine
(fabric.sim.packet_times), which has the finite switch buffers the analytic engine lacks: over 64 ranks at 2 MiB the
analytic engine prices two-shot 5 % below ring and the packet engine 7 % above it (docs/collectives.md §Engine
agreement to 1 GB), so the tier runs ring there on both engines and the time stays monotonic on both.

Every entry (select, choose, fastest, times; build and template in __init__) accepts a FabricConfig, a
CollectivesConfig (the default fabric with that section) or None (defaults) and turns it into a FabricConfig once
(`fabric_config`: a FabricConfig passes through, so lowering, which normalises once, pays nothing per call).

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

from fabric.collectives._frag import FragBuilder, is_pow2
from fabric.collectives.registry import ALGORITHMS, CORES, KINDS
from fabric.config import CollectivesConfig, FabricConfig
from fabric.errors import ConfigError


def fabric_config(cfg) -> FabricConfig:
    """The whole FabricConfig an entry works on: cfg itself, the defaults (None), or the default fabric with a
    [collectives] section alone (cached); the nccl-like library's costs depend on its fabric, so it needs the whole
    config (ConfigError)."""
    if cfg is None:
        return _with_section(CollectivesConfig())
    if hasattr(cfg, "topology"):
        return cfg
    if cfg.library == "nccl-like":
        raise ConfigError("the nccl-like library needs the whole FabricConfig (its fabric's latency and bandwidth), "
                          "not only the [collectives] section")
    return _with_section(cfg)


@functools.lru_cache(maxsize=64)
def _with_section(cc) -> FabricConfig:
    return dataclasses.replace(FabricConfig(), collectives=cc)


def select(kind: str, nbytes: int, n_ranks: int, cfg=None, *, oracle=None) -> str:
    """The algorithm the configured library uses for one collective of `nbytes` (fragment size convention) over
    `n_ranks` ranks (oracle: see the module's docstring; only the sd200 auto tiers ask it)."""
    if kind not in ALGORITHMS:
        raise ConfigError(f"unknown collective kind {kind!r}; known: {', '.join(KINDS)}")
    return _select(kind, nbytes, n_ranks, fabric_config(cfg), oracle)


def _select(kind: str, nbytes: int, n_ranks: int, cfg: FabricConfig, oracle) -> str:
    cc = cfg.collectives
    if cc.library == "nccl-like":
        from fabric.collectives.library import tune
        return tune(kind, nbytes, n_ranks, cfg, oracle=oracle).algorithm
    pol = cc.policy
    tiered = pol in ("sd200", "auto")
    if tiered and kind in CANDIDATES and not (cc.sd200.oneshot_max_bytes or cc.sd200.twoshot_max_bytes):
        return _fastest(kind, nbytes, n_ranks, cfg, oracle) if n_ranks > 1 else CANDIDATES[kind][0]
    if kind == "allreduce":
        if tiered:
            if nbytes <= cc.sd200.oneshot_max_bytes:
                return "oneshot"
            return "twoshot" if nbytes <= cc.sd200.twoshot_max_bytes else "ring"
        return pol
    if kind in ("allgather", "reduce_scatter"):
        if tiered:
            return "direct" if nbytes <= cc.sd200.twoshot_max_bytes else "ring"
        if pol.startswith(("oneshot", "twoshot")):
            return "direct"
        if pol == "halving_doubling":
            return "halving_doubling" if is_pow2(n_ranks) else "ring"
        return pol
    return "direct"


def choose(kind: str, nbytes: int, n_ranks: int, cfg=None, algorithm: str | None = None, *, oracle=None):
    """What the configured library runs for one call: a library.Choice (algorithm, protocol, channels). The sd200
    library has one protocol (protocol "", channels 0 = its own striping rule); nccl-like asks its tuner, which
    needs the whole FabricConfig. `algorithm` fixes the algorithm (the tuner still picks protocol and channels);
    oracle: as select's (the nccl-like tuner checks its shortlist on it: library.tune)."""
    from fabric.collectives.library import Choice, tune
    if kind not in ALGORITHMS:
        raise ConfigError(f"unknown collective kind {kind!r}; known: {', '.join(KINDS)}")
    cfg = fabric_config(cfg)
    if cfg.collectives.library == "nccl-like":
        return tune(kind, nbytes, n_ranks, cfg, algorithm=algorithm, oracle=oracle)
    return Choice(algorithm or _select(kind, nbytes, n_ranks, cfg, oracle))


# what the auto tiers choose among, per kind (ties go to the first: the store path, then the simpler tier)
CANDIDATES = {"allreduce": ("oneshot", "twoshot", "ring", "oneshot_load", "twoshot_load", "oneshot_cached",
                            "twoshot_cached"),
              "allgather": ("direct", "ring"), "reduce_scatter": ("direct", "ring")}
GRID_MIN_BYTES = 8


def grid_size(nbytes: int) -> int:
    """The power of two >= nbytes (at least GRID_MIN_BYTES) whose winner a call of nbytes runs."""
    return max(GRID_MIN_BYTES, 1 << max(int(nbytes) - 1, 0).bit_length())


def fastest(kind: str, nbytes: int, n_ranks: int, cfg=None, *, oracle=None) -> str:
    """The sd200 library's auto tier: the candidate the oracle times least at grid_size(nbytes) over ranks 0..n-1
    of the fabric `cfg` describes (a CollectivesConfig alone: the default fabric)."""
    return _fastest(kind, nbytes, n_ranks, fabric_config(cfg), oracle)


def _fastest(kind: str, nbytes: int, n_ranks: int, cfg: FabricConfig, oracle) -> str:
    g = grid_size(nbytes)
    t = _candidate_times(kind, g, n_ranks, cfg, oracle)
    best = min(t.items(), key=lambda kv: kv[1])[0]
    margin = cfg.collectives.sd200.tier_check_margin
    near = tuple(a for a in CANDIDATES[kind] if t[a] <= t[best] * (1 + margin))
    if getattr(oracle, "check", None) is None or len(near) < 2:
        return best
    return min(near, key=_checked_times(kind, g, int(n_ranks), cfg, oracle, near).get)


def _checked_times(kind: str, g: int, n: int, cfg: FabricConfig, oracle, near: tuple) -> dict:
    """The check's times of the candidates `near` at grid size g. Above collectives.sd200.tier_check_max_bytes
    each is the oracle's time at g times the check's / the oracle's at that size: every candidate is bandwidth-bound
    there, and the packet engine's slowdown from full switch buffers a throughput ratio (two-shot over the 4x4x4 mesh
    runs 1.44x, 1.47x and 1.47x its analytic time at 16 MiB, 128 MiB and 1 GiB; docs/collectives.md)."""
    cap = grid_size(cfg.collectives.sd200.tier_check_max_bytes)
    if g <= cap:
        return _times(kind, g, n, cfg, oracle.check, near)
    at_cap = _times(kind, cap, n, cfg, oracle.check, near)
    est_cap = _times(kind, cap, n, cfg, oracle)
    est = _times(kind, g, n, cfg, oracle)
    return {a: est[a] * at_cap[a] / est_cap[a] for a in near}


def times(kind: str, nbytes: int, n_ranks: int, cfg=None, *, oracle=None, names: tuple = ()) -> dict:
    """{algorithm: time in us} of every auto candidate (or of `names`) for one call, as the oracle times them
    (cached)."""
    return _candidate_times(kind, nbytes, n_ranks, fabric_config(cfg), oracle, tuple(names))


def _candidate_times(kind: str, nbytes: int, n: int, cfg: FabricConfig, oracle, names: tuple = ()) -> dict:
    if oracle is None:
        raise TypeError(f"the sd200 library's auto tier times its {kind} candidates: pass oracle= (e.g. "
                        f"fabric.sim.analytic_times, the analytic engine)")
    return _times(kind, int(nbytes), int(n), cfg, oracle, names)


@functools.lru_cache(maxsize=4096)
def _times(kind: str, nbytes: int, n: int, cfg: FabricConfig, oracle, names: tuple = ()) -> dict:
    # the sd200 library's fragment of each candidate (collectives.build without the library profiles)
    names = names or CANDIDATES[kind]
    frags = []
    for a in names:
        fb = FragBuilder(kind, a, n, nbytes, cfg.collectives, semantics=False)
        start, ready = fb.prologue()
        frags.append(fb.finish(start, CORES[kind][a](fb, ready, nbytes)))
    return dict(zip(names, oracle(cfg, frags)))
