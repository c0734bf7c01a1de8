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
from fabric.experiments import nccl_tests

OPS = ("allreduce", "allgather", "alltoall", "reduce_scatter")


# nccl-tests' data types (-d) and their sizes; `count` in the table is size / this (per rank for the ops below)
TYPES = {"int8": 1, "uint8": 1, "half": 2, "bfloat16": 2, "float": 4, "int32": 4, "double": 8, "int64": 8}
_PER_RANK_COUNT = ("allgather", "reduce_scatter", "alltoall")     # nccl-tests prints the per-rank count for these


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw factor."""
    return nccl_tests.bus_factor(op, n)


def sizes(min_bytes, max_bytes, factor: int = 2) -> list[int]:
    """min, 2 min, 4 min, ... up to max (inclusive when max = min x 2^k); sizes may carry K/M/G suffixes
    (powers of 1024, as nccl-tests -b/-e)."""
    lo = nccl_tests.parse_size(min_bytes, "--min-bytes")
    hi = nccl_tests.parse_size(max_bytes, "--max-bytes")
    if hi < lo:
        raise ConfigError(f"need --min-bytes <= --max-bytes, got {lo} and {hi}")
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def probe_sizes(nbytes=None, min_bytes=None, max_bytes=None, measured=None) -> list[int]:
    """The sizes to run: --bytes, or the doubling sweep --min-bytes..--max-bytes, or (neither given, a --compare
    table) the sizes of the table. Suffixes K/M/G (powers of 1024) are allowed everywhere."""
    if nbytes is not None and (min_bytes is not None or max_bytes is not None):
        raise ConfigError("give either --bytes or --min-bytes/--max-bytes, not both")
    if nbytes is not None:
        return [nccl_tests.parse_size(nbytes, "--bytes")]
    if min_bytes is None and max_bytes is None:
        if measured is not None:
            return sorted(set(measured.sizes))
        raise ConfigError("give --bytes N, both --min-bytes A and --max-bytes B, or --compare FILE")
    if min_bytes is None or max_bytes is None:
        if measured is None:
            raise ConfigError("give both --min-bytes and --max-bytes")
        lo = nccl_tests.parse_size(min_bytes, "--min-bytes") if min_bytes is not None else 1
        hi = nccl_tests.parse_size(max_bytes, "--max-bytes") if max_bytes is not None else 1 << 62
        return sorted(s for s in set(measured.sizes) if lo <= s <= hi)
    return sizes(min_bytes, max_bytes)


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
    # (algorithm, protocol, channels) of the library; a given algorithm keeps the tuner's protocol and channels;
    # the sd200 auto tiers timed on the analytic engine, as lowering times them
    choice = collectives.choose(op, int(nbytes), n, cfg, algorithm=algorithm, oracle=sim.analytic_times)
    algo = choice.algorithm
    frag = collectives.build(op, algo, int(nbytes), n, cfg, semantics=False,
                             **({"choice": choice} if choice is not None else {}))
    graph = frag.to_graph(n_ranks=topo.n_ranks, label=f"{op} {nbytes} B")
    res = sim.run(cfg, topo, graph, engine=engine, transfers=False)     # no per-transfer table: only task times
    t_ps = int(res.task_end_ps[np.asarray(frag.done)].max() - res.task_start_ps.min())
    time_us = t_ps / 1e6
    algbw = nbytes / (t_ps / 1e3) if t_ps > 0 else 0.0     # B/ns == GB/s
    protocol = getattr(choice, "protocol", "") or getattr(frag, "protocol", "") or None
    channels = getattr(choice, "channels", 0) or getattr(frag, "channels", 0) or None
    out = dict(op=op, bytes=int(nbytes), ranks=n, algorithm=algo, protocol=protocol, channels=channels,
               engine=engine, time_us=time_us, algbw_gbps=algbw, busbw_gbps=algbw * bus_factor(op, n),
               events=int(res.events), wall_s=res.wall_s)
    if res.faults:            # permanent faults (--fault): what they cost this size (fabric.faults)
        f = res.faults
        out["faults"] = dict(applied=[a["spec"] for a in f["applied"] if a["applied"]],
                             reroutes=sum(("rerouted" in a) + ("rerouted_back" in a) for a in f["applied"]),
                             flows_rewound=f["flows_rewound"], packets_reclaimed=f["packets_reclaimed"],
                             packets_lost=f["packets_lost"], packets_duplicated=int(res.totals["duplicates"]))
    return out


_SWEEP_TOPO: dict = {}      # the running sweep's topology: forked workers inherit it instead of rebuilding it


def _sweep_point(cfg: FabricConfig, op: str, nbytes: int, kw: dict) -> dict:
    topo = _SWEEP_TOPO.get("topo")
    return probe_collective(cfg, op, nbytes, topo=topo if topo is not None else build_network(cfg), **kw)


def sweep(cfg: FabricConfig, op: str, byte_sizes, jobs: int | None = None, progress=None, **kw) -> list[dict]:
    """probe_collective at each size; the sizes are independent, so `jobs` processes run them (default: the cores
    available; 1: serial), largest first, rows in the order of byte_sizes, identical to a serial sweep.
    `progress()` is called once per finished size."""
    from fabric.experiments import pool
    _SWEEP_TOPO.clear()
    _SWEEP_TOPO["topo"] = build_network(cfg)
    try:
        sizes_ = list(byte_sizes)
        order = sorted(range(len(sizes_)), key=lambda i: -sizes_[i])
        got = pool.pmap(_sweep_point, [(cfg, op, sizes_[i], kw) for i in order], jobs, progress)
        rows = [None] * len(sizes_)
        for i, r in zip(order, got):
            rows[i] = r
        return rows
    finally:
        _SWEEP_TOPO.clear()


def count(op: str, nbytes: int, n: int, dtype: str = "float") -> int:
    """nccl-tests' `count` column: elements of the call (per rank for allgather, reduce_scatter, alltoall)."""
    c = nbytes // TYPES[dtype]
    return c // n if op in _PER_RANK_COUNT else c


def _dash(v) -> str:
    return "-" if v in (None, "", 0) else str(v)


def table(rows: list[dict], dtype: str = "float") -> str:
    """nccl-tests columns (size, count, type, redop, time, algbw, busbw) plus what the library chose."""
    lines = [f"{'size':>12s} {'count':>12s} {'type':>8s} {'redop':>6s} {'time':>10s} {'algbw':>7s} {'busbw':>7s}"
             f"  {'algorithm':16s} {'protocol':8s} {'channels':>8s}",
             f"{'(B)':>12s} {'(elements)':>12s} {'':8s} {'':6s} {'(us)':>10s} {'(GB/s)':>7s} {'(GB/s)':>7s}"]
    for r in rows:
        redop = "sum" if r["op"] in ("allreduce", "reduce_scatter") else "none"
        lines.append(f"{r['bytes']:12d} {count(r['op'], r['bytes'], r['ranks'], dtype):12d} {dtype:>8s} "
                     f"{redop:>6s} {r['time_us']:10.2f} {r['algbw_gbps']:7.2f} {r['busbw_gbps']:7.2f}  "
                     f"{r['algorithm']:16s} {_dash(r.get('protocol')):8s} {_dash(r.get('channels')):>8s}")
    return "\n".join(lines)


def compare(rows: list[dict], measured: "nccl_tests.NcclTable") -> dict:
    """Per size: predicted and measured time (the smaller of out-of-place and in-place) and their ratio, over the
    sizes both have; and the geomean error exp(mean |ln(pred/meas)|) - 1."""
    meas = {r.size: r.measured_us for r in measured.rows}
    out = [dict(bytes=r["bytes"], predicted_us=r["time_us"], measured_us=meas[r["bytes"]],
                ratio=r["time_us"] / meas[r["bytes"]] if meas[r["bytes"]] > 0 else float("nan"))
           for r in rows if r["bytes"] in meas]
    if not out:
        raise ConfigError(f"no size of the sweep is in {measured.source} (it has {min(meas)}..{max(meas)} B)")
    err = nccl_tests.geomean_error([o["predicted_us"] for o in out], [o["measured_us"] for o in out])
    return dict(source=measured.source, op=measured.op, ranks=measured.ranks, rows=out, geomean_error=err,
                table=measured.table, tables=measured.tables)


def compare_table(cmp: dict) -> str:
    lines = [f"{'size (B)':>12s} {'predicted (us)':>15s} {'measured (us)':>14s} {'pred/meas':>10s}"]
    for o in cmp["rows"]:
        lines.append(f"{o['bytes']:12d} {o['predicted_us']:15.2f} {o['measured_us']:14.2f} {o['ratio']:10.3f}")
    lines.append(f"geomean error {100 * cmp['geomean_error']:.1f}% over {len(cmp['rows'])} sizes "
                 f"(exp(mean |ln(pred/meas)|) - 1) vs {cmp['source']}"
                + (f", run {cmp['table']} of {cmp['tables']}" if cmp.get("tables", 1) > 1 else ""))
    return "\n".join(lines)
