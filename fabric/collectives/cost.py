"""Analytic alpha-beta cost of each algorithm (REFERENCE.md s4), for sanity checks and docs.

n ranks, M bytes (fragment size convention), alpha = per-step latency, beta = ns per byte of one rank's injection
bandwidth. `steps` is the number of data transfers in sequence on the longest chain of the fragment; `alpha_count`
follows REFERENCE s4 (one-shot 2, two-shot 3: the extra latencies are synchronisation); `bytes_total` the data bytes
all ranks send (exact for the fragments built here); `bytes_max` the busiest sender's share.
"""
from __future__ import annotations

from dataclasses import dataclass

from fabric.collectives.policy import ALGORITHMS


@dataclass(frozen=True)
class Cost:
    steps: int
    alpha_count: float
    bytes_total: float
    bytes_max: float
    time_ns: float


def cost_model(kind: str, algorithm: str, nbytes: int, n: int, alpha_ns: float, beta_ns_per_byte: float) -> Cost:
    if algorithm not in ALGORITHMS.get(kind, ()):
        raise ValueError(f"no algorithm {algorithm!r} for {kind!r}")
    M = float(nbytes)
    lg = (n.bit_length() - 1) if n >= 1 else 0
    pow2 = n >= 1 and n & (n - 1) == 0
    if kind == "allreduce":
        if algorithm == "oneshot":
            steps, alpha, total, mx = 1, 2, n * (n - 1) * M, (n - 1) * M
        elif algorithm == "twoshot":
            steps, alpha, total, mx = 2, 3, 2 * (n - 1) * M, 2 * (n - 1) * M / n
        elif algorithm == "ring":
            steps, alpha, total, mx = 2 * (n - 1), 2 * (n - 1), 2 * (n - 1) * M, 2 * (n - 1) * M / n
        else:
            p = 1 << lg
            e = n - p
            extra = 2 if e else 0
            steps = alpha = 2 * lg + extra
            total = 2 * (p - 1) * M + 2 * e * M
            mx = 2 * (p - 1) * M / p + (M if e else 0)
    elif kind in ("allgather", "reduce_scatter"):
        total, mx = (n - 1) * M, (n - 1) * M / n
        if algorithm == "direct":
            steps, alpha = 1, 2
        elif algorithm == "ring":
            steps = alpha = n - 1
        else:
            if not pow2:
                raise ValueError(f"halving_doubling {kind} needs a power-of-two n, got {n}")
            steps = alpha = lg
    elif kind == "alltoall":
        steps, alpha, total, mx = 1, 2, (n - 1) * M, (n - 1) * M / n
    elif kind == "broadcast":
        steps, alpha, total, mx = 1, 2, (n - 1) * M, (n - 1) * M
    else:  # sendrecv
        steps, alpha, total, mx = 1, 1, M, M
    if n == 1:
        steps, alpha, total, mx = 0, 0, 0.0, 0.0
    return Cost(steps=steps, alpha_count=alpha, bytes_total=total, bytes_max=mx,
                time_ns=alpha * alpha_ns + mx * beta_ns_per_byte)
