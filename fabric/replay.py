"""Replay a trace on a fabric: read + validate -> lower -> run (packet or analytic engine) -> report.

The report answers "what time per output token, and why": TPOT, the critical path split into compute and exposed
communication, collectives by kind and size, and how every link behaved.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from fabric import sim, trace as tracemod
from fabric.config import FabricConfig
from fabric.lower import lower
from fabric.taskgraph import COMPUTE, REDUCE, TaskGraph
from fabric.topology import build


def critical_path(graph: TaskGraph, start: np.ndarray, end: np.ndarray) -> dict:
    """Walk back from the last task to finish, always to the constraint that released it (the predecessor that
    finished last, or the task before it on the same stream). Time on the model's compute tasks is compute;
    everything else on the path (transfers, local reductions, flags, a collective's launch and wait points, and
    waiting) is exposed communication. The two add up to the step."""
    ptr, pred = graph.predecessors_csr()
    stream_prev = np.full(graph.n_tasks, -1, np.int64)
    on_stream = np.flatnonzero(graph.stream >= 0)
    if len(on_stream):   # the stream's previous task in start order
        key = graph.rank[on_stream].astype(np.int64) * 1024 + graph.stream[on_stream]
        order = on_stream[np.lexsort((start[on_stream], key))]
        same = key[np.searchsorted(on_stream, order)]
        prev_same = np.r_[False, same[1:] == same[:-1]]
        stream_prev[order[1:][prev_same[1:]]] = order[:-1][prev_same[1:]]
    t = int(np.argmax(end))
    compute_ps = comm_ps = 0
    length = 0
    while t >= 0:
        cands = list(pred[ptr[t]:ptr[t + 1]])
        if stream_prev[t] >= 0:
            cands.append(stream_prev[t])
        prev = max(cands, key=lambda u: end[u]) if cands else -1
        seg_start = end[prev] if prev >= 0 else 0
        if graph.kind[t] == COMPUTE and graph.coll[t] < 0:     # coll >= 0: collective library overhead
            compute_ps += end[t] - start[t]
            comm_ps += start[t] - seg_start      # waiting before a kernel may start
        else:
            comm_ps += end[t] - seg_start
        length += 1
        t = prev
    return dict(compute_ps=int(compute_ps), comm_ps=int(comm_ps), tasks=length)


def _collectives(graph: TaskGraph, start: np.ndarray, end: np.ndarray) -> list[dict]:
    if not graph.coll_meta:
        return []
    mask = graph.coll >= 0
    c = graph.coll[mask]
    n = len(graph.coll_meta)
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.zeros(n, np.int64)
    np.minimum.at(first, c, start[mask])
    np.maximum.at(last, c, end[mask])
    lat_us = (last - first) / 1e6
    groups: dict[tuple, list[float]] = {}
    for i, m in enumerate(graph.coll_meta):
        groups.setdefault((m.kind, m.nbytes, m.algorithm, len(m.ranks)), []).append(lat_us[i])
    rows = []
    for (kind, nbytes, algo, ranks), lats in sorted(groups.items()):
        a = np.array(lats)
        rows.append(dict(kind=kind, bytes=int(nbytes), ranks=ranks, algorithm=algo, count=len(a),
                         mean_us=float(a.mean()), p50_us=float(np.percentile(a, 50)),
                         p99_us=float(np.percentile(a, 99)), total_us=float(a.sum())))
    return rows


def _links(topo, res: sim.RunResult, step_ps: int) -> dict:
    c = res.counters
    util = c["busy_ps"] / max(step_ps, 1)
    used = c["packets"] > 0
    worst = int(np.argmax(util)) if len(util) else 0
    return dict(channels=int(len(util)), channels_used=int(used.sum()),
                max_utilisation=float(util.max()) if len(util) else 0.0,
                max_utilisation_channel=topo.channel_name(worst) if len(util) else "",
                mean_utilisation=float(util.mean()) if len(util) else 0.0,
                mean_utilisation_used=float(util[used].mean()) if used.any() else 0.0,
                retransmissions=int((c["units"] - c["packets"]).sum()), replays=int(c["replays"].sum()),
                replay_timeouts=int(c["replay_timeouts"].sum()), retrains=int(c["retrains"].sum()),
                flits_corrupted=int(c["flits_corrupted"].sum()),
                credit_stall_us=float(c["credit_stall_ps"].sum() / 1e6),
                max_queue_packets=int(c["queue_max"].max()) if len(util) else 0)


def _progress_printer(total_tasks: int, quiet: bool):
    t0 = time.perf_counter()
    shown = [False]

    def show(events, now_ps, tasks_left):
        if quiet or not sys.stderr.isatty() or time.perf_counter() - t0 < 1.0:
            return
        done = 1.0 - tasks_left / max(total_tasks, 1)
        bar = "#" * int(30 * done)
        sys.stderr.write(f"\r[{bar:<30s}] {100 * done:5.1f}% tasks  {now_ps / 1e6:9.1f} us simulated  "
                         f"{events / 1e6:7.1f} M events")
        sys.stderr.flush()
        shown[0] = True

    def close():
        if shown[0]:
            sys.stderr.write("\n")
    return show, close


def replay(trace_path: str | None, cfg: FabricConfig, *, engine: str = "packet", preset: str = "sd200",
           quiet: bool = True) -> dict:
    """Replay one decode step; returns the report (JSON-ready)."""
    path = trace_path or str(tracemod.default_trace_path())
    tr = tracemod.read(path)
    topo = build(cfg)
    if tr.n_ranks > topo.n_ranks:
        from fabric.errors import ConfigError
        raise ConfigError(f"the trace has {tr.n_ranks} ranks but preset {preset!r} has {topo.n_ranks} "
                          f"accelerators; choose a preset with at least {tr.n_ranks} (sd200: 64, sd200-128 ... "
                          f"sd200-1024)")
    t0 = time.perf_counter()
    graph = lower(tr, cfg)
    lower_s = time.perf_counter() - t0
    show, close = _progress_printer(graph.n_tasks, quiet)
    try:
        res = sim.run(cfg, topo, graph, engine=engine, progress=show)
    finally:
        close()
    start, end = res.task_start_ps, res.task_end_ps
    step_ps = int(end.max()) if len(end) else 0
    cp = critical_path(graph, start, end)
    comp_mask = (graph.kind == COMPUTE) & (graph.coll < 0)
    per_rank_compute = np.bincount(graph.rank[comp_mask], weights=graph.duration_ps[comp_mask],
                                   minlength=tr.n_ranks)
    batch = int(tr.meta.get("batch", 1) or 1)
    t = res.totals
    return dict(
        trace=path, model=tr.meta.get("model", ""), engine=engine, preset=preset, seed=cfg.sim.seed,
        ranks=tr.n_ranks, batch=batch,
        tpot_us=step_ps / 1e6, tokens_per_s=batch / (step_ps / 1e12) if step_ps else 0.0,
        step_time_us=step_ps / 1e6, compute_us=cp["compute_ps"] / 1e6, exposed_comm_us=cp["comm_ps"] / 1e6,
        comm_fraction=cp["comm_ps"] / step_ps if step_ps else 0.0,
        compute_busy_us_max_rank=float(per_rank_compute.max() / 1e6),
        reduce_us_total=float(graph.duration_ps[graph.kind == REDUCE].sum() / 1e6),
        critical_path_tasks=cp["tasks"], collectives=_collectives(graph, start, end),
        links=_links(topo, res, step_ps),
        packets_delivered=int(t["delivered"]), packets_dropped=int(t["carved"] - t["delivered"]),
        packets_duplicated=int(t["duplicates"]), packets_out_of_order=int(t["out_of_order"]),
        e2e_holds=int(t["e2e_holds"]),
        tasks=int(graph.n_tasks), events=int(res.events), lower_s=lower_s, wall_s=res.wall_s,
    )
