"""The collective probe: one collective over n ranks on an idle fabric, timed like nccl-tests.

    probe_collective(cfg, "allreduce", 14336) -> {bytes, time_us, algbw_gbps, busbw_gbps, algorithm, ...}

The graph is the collective's fragment alone (fabric.collectives.build), stamped over ranks 0..n-1 and run by
fabric.sim on fabric.network.build(cfg). Time is from the first task of the collective starting (t = 0: every rank
calls it at once) to the last rank's output being ready, the latency nccl-tests reports for one call.

Sizes follow nccl-tests (docs/collectives.md): the buffer for allreduce, the gathered output for allgather, the
whole input for reduce_scatter, each rank's total send for alltoall. algbw = bytes / time; busbw = algbw x the
nccl-tests bus factor: allreduce 2(n-1)/n; allgather, reduce_scatter and alltoall (n-1)/n.
"""
from __future__ import annotations

import numpy as np

from fabric import collectives, sim
from fabric.config import FabricConfig
from fabric.errors import ConfigError
from fabric.network import build as build_network

OPS = ("allreduce", "allgather", "alltoall", "reduce_scatter")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw factor."""
    if n <= 1:
        return 1.0
    return 2.0 * (n - 1) / n if op == "allreduce" else (n - 1) / n


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """min, 2 min, 4 min, ... up to max (inclusive when max = min x 2^k)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ConfigError(f"need 1 <= --min-bytes <= --max-bytes, got {min_bytes} and {max_bytes}")
    out, s = [], int(min_bytes)
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out


def probe_collective(cfg: FabricConfig, op: str, nbytes: int, *, algorithm: str | None = None,
                     ranks: int | None = None, engine: str = "packet", topo=None) -> dict:
    """Time one collective of `nbytes` (nccl-tests convention) over ranks 0..ranks-1 of the fabric."""
    if op not in OPS:
        raise ConfigError(f"--op={op!r} is not allowed; use one of {', '.join(OPS)}")
    topo = build_network(cfg) if topo is None else topo
    n = topo.n_ranks if ranks is None else int(ranks)
    if not 2 <= n <= topo.n_ranks:
        raise ConfigError(f"--ranks={n} is out of range; a collective needs 2..{topo.n_ranks} accelerators here")
    if nbytes < 1:
        raise ConfigError(f"--bytes={nbytes} is out of range; allowed >= 1")
    algo = algorithm or collectives.select(op, nbytes, n, cfg)
    frag = collectives.build(op, algo, int(nbytes), n, cfg, semantics=False)
    graph = frag.to_graph(n_ranks=topo.n_ranks, label=f"{op} {nbytes} B")
    res = sim.run(cfg, topo, graph, engine=engine)
    t_ps = int(res.task_end_ps[np.asarray(frag.done)].max() - res.task_start_ps.min())
    time_us = t_ps / 1e6
    algbw = nbytes / (t_ps / 1e3) if t_ps > 0 else 0.0     # B/ns == GB/s
    return dict(op=op, bytes=int(nbytes), ranks=n, algorithm=algo, engine=engine, time_us=time_us,
                algbw_gbps=algbw, busbw_gbps=algbw * bus_factor(op, n), events=int(res.events), wall_s=res.wall_s)


def sweep(cfg: FabricConfig, op: str, byte_sizes, **kw) -> list[dict]:
    topo = build_network(cfg)
    return [probe_collective(cfg, op, b, topo=topo, **kw) for b in byte_sizes]


def table(rows: list[dict]) -> str:
    """nccl-tests style: size, time, algbw, busbw, algorithm."""
    lines = [f"{'size (B)':>12s} {'time (us)':>11s} {'algbw (GB/s)':>13s} {'busbw (GB/s)':>13s}  algorithm"]
    for r in rows:
        lines.append(f"{r['bytes']:12d} {r['time_us']:11.2f} {r['algbw_gbps']:13.2f} {r['busbw_gbps']:13.2f}  "
                     f"{r['algorithm']}")
    return "\n".join(lines)
