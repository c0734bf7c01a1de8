"""Collective algorithms as task-graph fragments, the selection policy, and an alpha-beta cost model.

    select(kind, nbytes, n_ranks, cfg, oracle=None) -> algorithm name
    choose(kind, nbytes, n_ranks, cfg, oracle=None) -> Choice(algorithm, protocol, channels)   (library-aware)
    build(kind, algorithm, nbytes, n, cfg=None, root=0, semantics=True) -> Fragment   (fresh)
    template(kind, algorithm, nbytes, n, cfg=None, root=0, semantics=False) -> Fragment   (cached, read-only)
    cost_model(kind, algorithm, nbytes, n, alpha_ns, beta_ns_per_byte) -> Cost
    symbolic.check(graph)   proves every collective of a graph (built with semantics) correct

`nbytes` follows nccl-tests: the buffer for allreduce and broadcast, the whole gathered buffer for allgather, the
whole input for reduce_scatter, each rank's total send for alltoall, the message for sendrecv. Modules: one per
family (allreduce, reduce_scatter, allgather, alltoall, broadcast, p2p), registry (the kinds and algorithms),
policy, cost, symbolic. Every fragment shares one structure (see _frag.FragBuilder): start JOIN -> launch -> the
algorithm -> done JOIN per rank. Bad arguments raise fabric.errors.ConfigError.

A pure workload layer: nothing here runs an engine. The sd200 library's auto tiers time their candidates through a
cost oracle the pipeline passes in (policy's docstring); `cfg` is a FabricConfig, a CollectivesConfig or None,
turned into a FabricConfig once per entry (policy.fabric_config; lowering normalises it once for all its calls).
"""
from __future__ import annotations

import functools

from fabric.collectives import alltoall, nvls, sliced, tree
from fabric.collectives._frag import FragBuilder, bounds, is_pow2
from fabric.collectives.cost import Cost, cost_model
from fabric.collectives.library import LIBRARIES, PROFILES, PROTOCOLS, Choice, fabric_view, register_builder, tune
from fabric.collectives.policy import choose, fabric_config, select
from fabric.collectives.registry import ALGORITHMS, CORES, KINDS, LIBRARY_ALGORITHMS
from fabric.errors import ConfigError
from fabric.taskgraph import Fragment

# a group of one rank runs the single-phase algorithm whatever was asked (ring/halving loops would be empty)
_SINGLE = {"allreduce": "oneshot", "reduce_scatter": "direct", "allgather": "direct", "alltoall": "direct"}


def build(kind: str, algorithm: str, nbytes: int, n: int, cfg=None, root: int = 0,
          semantics: bool = True, choice: Choice | None = None) -> Fragment:
    """A fresh fragment of one collective over group positions 0..n-1 (root: broadcast only).

    With collectives.library = nccl-like, `cfg` must be the whole FabricConfig (the per-step software cost is the
    fitted step time less the fabric's own hop latency); `choice` fixes the protocol and channels (default: the
    tuner's, for this algorithm)."""
    if kind not in CORES:
        raise ConfigError(f"unknown collective kind {kind!r}; known: {', '.join(KINDS)}")
    return _build(kind, algorithm, nbytes, n, fabric_config(cfg), root, semantics, choice)


def _build(kind, algorithm, nbytes, n, cfg, root, semantics, choice) -> Fragment:
    cc = cfg.collectives
    extra = LIBRARY_ALGORITHMS.get(cc.library, {}).get(kind, ())
    if algorithm not in CORES[kind] and algorithm not in extra:
        raise ConfigError(f"{kind} has no algorithm {algorithm!r}; known: {', '.join(ALGORITHMS[kind] + extra)}")
    n, nbytes = int(n), int(nbytes)
    if n < 1 or nbytes < 0:
        raise ConfigError(f"need n >= 1 and nbytes >= 0, got n={n}, nbytes={nbytes}")
    if kind == "sendrecv" and n != 2:
        raise ConfigError(f"sendrecv is a fragment over 2 ranks, got {n}")
    if kind in ("allgather", "reduce_scatter") and algorithm == "halving_doubling" and not is_pow2(n):
        raise ConfigError(f"halving_doubling {kind} needs a power-of-two group, got {n} ranks "
                          f"(the selection policy falls back to ring)")
    if kind == "broadcast" and not 0 <= root < n:
        raise ConfigError(f"broadcast root {root} is outside the group of {n}")
    view = None
    if cc.library == "nccl-like":
        view = fabric_view(cfg)
        if choice is None or not choice.protocol:
            choice = tune(kind, nbytes, n, cfg, view, algorithm=algorithm)
    else:
        choice = None
    fb = FragBuilder(kind, algorithm, n, nbytes, cc, semantics=semantics,
                     root=root if kind == "broadcast" else (0 if kind == "sendrecv" else -1), choice=choice,
                     view=view)
    start, ready = fb.prologue()
    if algorithm in extra:
        lib = dict(nvls.CORES if kind == "allreduce" else {})
        if kind in sliced.HIERARCHICAL:
            lib["hierarchical"] = sliced.HIERARCHICAL[kind]
        if kind == "allreduce":
            lib.update(tree.CORES)
        if kind == "alltoall":
            lib.update(alltoall.LIBRARY_CORES)
        core = lib[algorithm] if n > 1 else CORES[kind][_SINGLE[kind]]
    else:
        core = CORES[kind][_SINGLE.get(kind, algorithm) if n == 1 else algorithm]
    if choice is not None and algorithm == "ring" and n > 1 and kind in sliced.CORES:
        core = sliced.CORES[kind]
    out = core(fb, ready, nbytes)
    return fb.finish(start, out)


def template(kind: str, algorithm: str, nbytes: int, n: int, cfg=None, root: int = 0,
             semantics: bool = False, choice: Choice | None = None) -> Fragment:
    """Cached `build` (key: kind, algorithm, nbytes, group size, root, the collectives config -- the whole config
    for the nccl-like library, whose costs depend on the fabric --, semantics, choice)."""
    if kind not in CORES:
        raise ConfigError(f"unknown collective kind {kind!r}; known: {', '.join(KINDS)}")
    cfg = fabric_config(cfg)
    # the sd200 library's fragments read the [collectives] section alone: one template for every fabric
    key = cfg if cfg.collectives.library == "nccl-like" else cfg.collectives
    return _template(kind, algorithm, nbytes, n, key, root, semantics, choice)


@functools.lru_cache(maxsize=512)
def _template(kind, algorithm, nbytes, n, key, root, semantics, choice) -> Fragment:
    return _build(kind, algorithm, nbytes, n, fabric_config(key), root, semantics, choice)


register_builder(template)      # the nccl-like tuner's oracle check builds its candidates with it


__all__ = ["ALGORITHMS", "KINDS", "LIBRARIES", "PROFILES", "PROTOCOLS", "Choice", "Cost", "FragBuilder", "bounds",
           "build", "choose", "cost_model", "fabric_config", "select", "template"]
