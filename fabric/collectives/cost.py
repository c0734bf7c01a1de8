"""Analytic alpha-beta cost of each algorithm (docs/sources.md §Communication measurements), for sanity checks
and docs.

n ranks, M bytes (fragment size convention), alpha = per-step latency, beta = ns per byte of one rank's injection
bandwidth. `steps` is the number of data transfers in sequence on the longest chain of the fragment; `alpha_count`
follows docs/sources.md §Communication measurements (one-shot 2, two-shot 3: the extra latencies are
synchronisation); `bytes_total` the data bytes all ranks send (exact for the fragments built here); `bytes_max` the
busiest sender's share.
"""
from __future__ import annotations

from dataclasses import dataclass

from fabric.errors import ConfigError


@dataclass(frozen=True)
class Cost:
    steps: int
    alpha_count: float
    bytes_total: float
    bytes_max: float
    time_ns: float


def _allreduce_hd(n: int, M: float) -> tuple:
    """Rabenseifner: halving + doubling over p = 2^floor(log2 n) ranks, a pre and a post step for the rest."""
    lg = n.bit_length() - 1
    p = 1 << lg
    e = n - p
    steps = 2 * lg + (2 if e else 0)
    return steps, steps, 2 * (p - 1) * M + 2 * e * M, 2 * (p - 1) * M / p + (M if e else 0)


def _gather_hd(n: int, M: float) -> tuple:
    if n & (n - 1):
        raise ConfigError(f"recursive halving/doubling needs a power-of-two n, got {n}")
    lg = n.bit_length() - 1
    return lg, lg, (n - 1) * M, (n - 1) * M / n


# (kind, algorithm) -> (n, M) -> (steps, alpha count, bytes all ranks send, bytes of the busiest sender)
MODELS = {
    ("allreduce", "oneshot"): lambda n, M: (1, 2, n * (n - 1) * M, (n - 1) * M),
    ("allreduce", "twoshot"): lambda n, M: (2, 3, 2 * (n - 1) * M, 2 * (n - 1) * M / n),
    ("allreduce", "ring"): lambda n, M: (2 * (n - 1), 2 * (n - 1), 2 * (n - 1) * M, 2 * (n - 1) * M / n),
    ("allreduce", "halving_doubling"): _allreduce_hd,
    # loads: a ready flag, then the request and the data (3 latencies); one-shot's owners also wait for a done flag
    ("allreduce", "oneshot_load"): lambda n, M: (1, 4, n * (n - 1) * M, (n - 1) * M),
    ("allreduce", "twoshot_load"): lambda n, M: (2, 4, 2 * (n - 1) * M, 2 * (n - 1) * M / n),
    # cached: the local staging copies are not transfers (their cost is memory bandwidth, not alpha or beta)
    ("allreduce", "oneshot_cached"): lambda n, M: (1, 2, n * (n - 1) * M, (n - 1) * M),
    ("allreduce", "twoshot_cached"): lambda n, M: (2, 3, 2 * (n - 1) * M, 2 * (n - 1) * M / n),
    ("allgather", "direct"): lambda n, M: (1, 2, (n - 1) * M, (n - 1) * M / n),
    ("allgather", "ring"): lambda n, M: (n - 1, n - 1, (n - 1) * M, (n - 1) * M / n),
    ("allgather", "halving_doubling"): _gather_hd,
    ("reduce_scatter", "direct"): lambda n, M: (1, 2, (n - 1) * M, (n - 1) * M / n),
    ("reduce_scatter", "ring"): lambda n, M: (n - 1, n - 1, (n - 1) * M, (n - 1) * M / n),
    ("reduce_scatter", "halving_doubling"): _gather_hd,
    ("alltoall", "direct"): lambda n, M: (1, 2, (n - 1) * M, (n - 1) * M / n),
    ("broadcast", "direct"): lambda n, M: (1, 2, (n - 1) * M, (n - 1) * M),
    ("sendrecv", "direct"): lambda n, M: (1, 1, M, M),
}


def cost_model(kind: str, algorithm: str, nbytes: int, n: int, alpha_ns: float, beta_ns_per_byte: float) -> Cost:
    """time = alpha_count x alpha + bytes_max x beta; a group of one costs nothing. Raises ConfigError for an
    algorithm the model does not know."""
    model = MODELS.get((kind, algorithm))
    if model is None:
        known = ", ".join(a for k, a in MODELS if k == kind) or "none"
        raise ConfigError(f"the cost model has no {kind} algorithm {algorithm!r}; known: {known}")
    if n < 1:
        raise ConfigError(f"need n >= 1, got {n}")
    steps, alpha, total, mx = model(n, float(nbytes))
    if n == 1:
        steps, alpha, total, mx = 0, 0, 0.0, 0.0
    return Cost(steps=steps, alpha_count=alpha, bytes_total=total, bytes_max=mx,
                time_ns=alpha * alpha_ns + mx * beta_ns_per_byte)
