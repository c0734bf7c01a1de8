"""Collective algorithms as task-graph fragments, the selection policy, and an alpha-beta cost model.

    select(kind, nbytes, n_ranks, cfg) -> algorithm name
    build(kind, algorithm, nbytes, n, cfg=None, root=0, semantics=True) -> Fragment   (fresh)
    template(kind, algorithm, nbytes, n, cfg=None, root=0, semantics=False) -> Fragment   (cached, read-only)
    cost_model(kind, algorithm, nbytes, n, alpha_ns, beta_ns_per_byte) -> Cost
    symbolic.check(graph)   proves every collective of a graph (built with semantics) correct

`nbytes` follows nccl-tests: the buffer for allreduce and broadcast, the whole gathered buffer for allgather, the
whole input for reduce_scatter, each rank's total send for alltoall, the message for sendrecv. Modules: one per
family (allreduce, reduce_scatter, allgather, alltoall, broadcast, p2p), registry (the kinds and algorithms),
policy, cost, symbolic. Every fragment shares one structure (see _frag.FragBuilder): start JOIN -> launch -> the
algorithm -> done JOIN per rank. Bad arguments raise fabric.errors.ConfigError.
"""
from __future__ import annotations

import functools

from fabric.collectives._frag import FragBuilder, bounds, is_pow2
from fabric.collectives.cost import Cost, cost_model
from fabric.collectives.policy import collectives_config, select
from fabric.collectives.registry import ALGORITHMS, CORES, KINDS
from fabric.errors import ConfigError
from fabric.taskgraph import Fragment

# a group of one rank runs the single-phase algorithm whatever was asked (ring/halving loops would be empty)
_SINGLE = {"allreduce": "oneshot", "reduce_scatter": "direct", "allgather": "direct"}


def build(kind: str, algorithm: str, nbytes: int, n: int, cfg=None, root: int = 0,
          semantics: bool = True) -> Fragment:
    """A fresh fragment of one collective over group positions 0..n-1 (root: broadcast only)."""
    if kind not in CORES:
        raise ConfigError(f"unknown collective kind {kind!r}; known: {', '.join(KINDS)}")
    if algorithm not in CORES[kind]:
        raise ConfigError(f"{kind} has no algorithm {algorithm!r}; known: {', '.join(ALGORITHMS[kind])}")
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
    cc = collectives_config(cfg)
    fb = FragBuilder(kind, algorithm, n, nbytes, cc, semantics=semantics,
                     root=root if kind == "broadcast" else (0 if kind == "sendrecv" else -1))
    start, ready = fb.prologue()
    core = CORES[kind][_SINGLE.get(kind, algorithm) if n == 1 else algorithm]
    out = core(fb, ready, nbytes)
    return fb.finish(start, out)


@functools.lru_cache(maxsize=512)
def template(kind: str, algorithm: str, nbytes: int, n: int, cfg=None, root: int = 0,
             semantics: bool = False) -> Fragment:
    """Cached `build` (key: kind, algorithm, nbytes, group size, root, the collectives config, semantics)."""
    return build(kind, algorithm, nbytes, n, collectives_config(cfg), root=root, semantics=semantics)


__all__ = ["ALGORITHMS", "KINDS", "Cost", "FragBuilder", "bounds", "build", "cost_model", "select", "template"]
