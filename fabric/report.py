"""What a run's results mean: the critical path of a step, per-collective and per-link summaries.

Pure functions of a task graph, its task start/end times and the run's counters (fabric.sim.RunResult), shared by
replay, validation and anything else that explains a run. Times come in ps and leave in us unless named _ps.
"""
from __future__ import annotations

import numpy as np

from fabric.taskgraph import COMPUTE, REDUCE, TRANSFER, TaskGraph


def critical_path(graph: TaskGraph, start: np.ndarray, end: np.ndarray, groups=None) -> dict:
    """Walk back from the last task to finish, always to the constraint that released it (the predecessor that
    finished last, or the task before it on the same stream). Time on the model's compute tasks is compute;
    everything else on the path (transfers, local reductions, flags, a collective's launch and wait points, and
    waiting) is exposed communication. The two add up to the step.

    groups (int per task, -1 = none; e.g. the model layer of each compute task) adds "by_group": {group:
    [compute_ps, comm_ps]}, a split of the same totals. A compute task's time goes to its group; communication and
    waiting go to the group of the last grouped compute task before them on the path (the layer whose output is
    being communicated), or to the first one after them when none precedes. groups may also be a function of task
    ids (int64 array) returning their groups: only the path's few thousand tasks are asked (task_layers' `tasks`).

    The walk runs in C (fabric._arrays, critical_path.pxi: each task's last predecessor to end in one pass over the
    edges, each stream sorted when the walk first reaches it), which also hands back the path for the split by
    group; critical_path_reference below is the same walk in numpy and Python."""
    from fabric._check_build import arrays
    if graph.n_tasks == 0:
        return dict(compute_ps=0, comm_ps=0, tasks=0, **({"by_group": {}} if groups is not None else {}))
    got = arrays.critical_path_walk(graph.succ_ptr, graph.succ_idx, start, end, graph.kind, graph.coll, graph.rank,
                                    graph.stream, COMPUTE, groups is not None)
    out = dict(compute_ps=int(got[0]), comm_ps=int(got[1]), tasks=int(got[2]))
    if groups is not None:
        p = got[3]
        seg = np.zeros(len(p), np.int64)             # when the constraint that released each path task ended
        seg[:-1] = end[p[1:]]
        comp = (graph.kind[p] == COMPUTE) & (graph.coll[p] < 0)
        g = np.where(comp, groups(p) if callable(groups) else groups[p], -1)
        busy = np.where(comp, end[p] - start[p], 0)
        wait = np.where(comp, start[p], end[p]) - seg
        out["by_group"] = _by_group(list(zip(g[::-1].tolist(), busy[::-1].tolist(), wait[::-1].tolist())))
    return out


def _by_group(path: list[tuple[int, int, int]]) -> dict:
    """{group: [compute_ps, comm_ps]} from the path in time order, as (group or -1, compute ps, other ps) per task
    (see critical_path)."""
    current = next((g for g, c, _ in path if g >= 0 and c), -1)
    by: dict[int, list[int]] = {}
    for g, comp, comm in path:
        by.setdefault(current, [0, 0])[1] += comm   # waiting / communication: the layer before it
        if g >= 0:
            current = g
        if comp:
            by.setdefault(g, [0, 0])[0] += comp
    return dict(sorted(by.items()))


def critical_path_reference(graph: TaskGraph, start: np.ndarray, end: np.ndarray,
                            groups: np.ndarray | None = None) -> dict:
    """critical_path in numpy and Python (the definition the compiled walk is tested against), with groups."""
    ptr, pred = graph.predecessors_csr()
    stream_prev = np.full(graph.n_tasks, -1, np.int64)
    on_stream = np.flatnonzero(graph.stream >= 0)
    if len(on_stream):   # the stream's previous task in start order
        rank, stream = graph.rank[on_stream], graph.stream[on_stream]
        o = np.lexsort((start[on_stream], stream, rank))
        same = (rank[o[1:]] == rank[o[:-1]]) & (stream[o[1:]] == stream[o[:-1]])
        order = on_stream[o]
        stream_prev[order[1:][same]] = order[:-1][same]
    t = int(np.argmax(end))
    compute_ps = comm_ps = 0
    length = 0
    path = [] if groups is not None else None
    while t >= 0:
        cands = list(pred[ptr[t]:ptr[t + 1]])
        if stream_prev[t] >= 0:
            cands.append(stream_prev[t])
        prev = max(cands, key=lambda u: end[u]) if cands else -1
        seg_start = end[prev] if prev >= 0 else 0
        if graph.kind[t] == COMPUTE and graph.coll[t] < 0:     # coll >= 0: collective library overhead
            compute_ps += end[t] - start[t]
            comm_ps += start[t] - seg_start      # waiting before a kernel may start
            if path is not None:
                path.append((int(groups[t]), int(end[t] - start[t]), int(start[t] - seg_start)))
        else:
            comm_ps += end[t] - seg_start
            if path is not None:
                path.append((-1, 0, int(end[t] - seg_start)))
        length += 1
        t = prev
    out = dict(compute_ps=int(compute_ps), comm_ps=int(comm_ps), tasks=length)
    if path is not None:
        out["by_group"] = _by_group(path[::-1])   # time order
    return out


def last_end_ps(end: np.ndarray) -> int:
    """The step: when its last task ends (0 for no task)."""
    return int(end.max()) if len(end) else 0


def step_summary(graph: TaskGraph, start: np.ndarray, end: np.ndarray, layers=None) -> dict:
    """The step (last task's end) and its critical path split into compute and exposed communication; with
    `layers` (model layer per task, -1 none, or a function of task ids: see critical_path's groups) also
    "layers": that split per layer (layer -1 holds what precedes or follows every layer, e.g. the embedding and the
    LM head)."""
    step_ps = last_end_ps(end)
    cp = critical_path(graph, start, end, layers)
    out = dict(step_ps=step_ps, step_us=step_ps / 1e6, compute_us=cp["compute_ps"] / 1e6,
               exposed_comm_us=cp["comm_ps"] / 1e6, comm_fraction=cp["comm_ps"] / step_ps if step_ps else 0.0,
               critical_path_tasks=cp["tasks"])
    if layers is not None:
        out["layers"] = [dict(layer=g, compute_us=c / 1e6, exposed_comm_us=m / 1e6)
                         for g, (c, m) in cp["by_group"].items()]
    return out


def task_layers(graph: TaskGraph, trace, tasks: np.ndarray | None = None) -> np.ndarray:
    """The model layer of each task (or of `tasks`, ids): that of its trace op (compute tasks), -1 for tasks inside
    collectives. One gather over every rank's layer column at once (a pass per rank took 30 s at 1024 ranks)."""
    n_out = graph.n_tasks if tasks is None else len(tasks)
    out = np.full(n_out, -1, np.int64)
    if graph.src_op is None:
        return out
    src_op, rank = (graph.src_op, graph.rank) if tasks is None else (graph.src_op[tasks], graph.rank[tasks])
    layers = [getattr(t, "layer", None) for t in trace.ops]
    n = np.array([len(v) if v is not None else 0 for v in layers], np.int64)
    off = np.concatenate([[0], np.cumsum(n)])
    has = np.zeros(max(graph.n_ranks, len(layers)), bool)
    has[:len(layers)] = [v is not None for v in layers]
    t = np.flatnonzero((src_op >= 0) & has[rank])
    if len(t):
        out[t] = np.concatenate([np.asarray(v, np.int64) for v in layers if v is not None])[
            off[rank[t]] + src_op[t]]
    return out


def compute_totals(graph: TaskGraph, n_ranks: int) -> tuple[np.ndarray, int]:
    """(busy_ps, reduce_ps): per rank, the time its model compute tasks (outside collectives) take, float64 (as
    np.bincount's weights would add them); and the time of every local reduction, int. One pass over the tasks."""
    from fabric._check_build import arrays
    return arrays.compute_totals(graph.kind, graph.coll, graph.rank, graph.duration_ps, COMPUTE, REDUCE, n_ranks)


def collective_summary(graph: TaskGraph, start: np.ndarray, end: np.ndarray) -> list[dict]:
    """One row per (kind, bytes, algorithm, group size): count and mean/p50/p99/total latency, first task of an
    instance starting to its last task ending."""
    if not graph.coll_meta:
        return []
    from fabric._check_build import arrays
    first, last = arrays.collective_spans(graph.coll, start, end, len(graph.coll_meta))
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


def collective_bytes(graph: TaskGraph) -> dict:
    """{kind: bytes} the step's collectives move ("allreduce", "alltoall", ...; send/recv pairs as "sendrecv"),
    summed over instances: every transfer inside an instance (a store, a load, an in-switch leg) counted once at the
    bytes it puts on the fabric (its nbytes: the payload with the flag folded in, or the nccl-like protocol's
    lines). A kind with instances but no transfer (groups of one) is 0; one without instances is absent. A pure
    function of the graph: either engine moves the same bytes."""
    if not graph.coll_meta:
        return {}
    kinds = sorted({m.kind for m in graph.coll_meta})
    index = {k: i for i, k in enumerate(kinds)}
    kind_of = np.array([index[m.kind] for m in graph.coll_meta], np.int64)     # per collective instance
    t = np.flatnonzero((graph.kind == TRANSFER) & (graph.coll >= 0))
    of, nb = kind_of[graph.coll[t]], graph.nbytes[t]
    return {k: int(nb[of == i].sum()) for i, k in enumerate(kinds)}    # int64 sums: exact, unlike bincount's


def transfer_summary(graph: TaskGraph, start: np.ndarray, end: np.ndarray) -> dict:
    """The step's transfers as either engine timed them: count, bytes (their nbytes, as collective_bytes counts),
    and the time from each one's start to its end (mean, max, and summed over transfers). What the analytic engine
    measures of the fabric (it times each transfer alpha-beta, without packets or link occupancy)."""
    t = np.flatnonzero(graph.kind == TRANSFER)
    took = (end[t] - start[t]) / 1e6
    return dict(count=int(len(t)), bytes=int(graph.nbytes[t].sum()), mean_us=float(took.mean()) if len(t) else 0.0,
                max_us=float(took.max()) if len(t) else 0.0, total_us=float(took.sum()))


def link_summary(topo, res, step_ps: int) -> dict:
    """How the channels behaved over a step: utilisation, retransmission and recovery counts, credit stalls."""
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


def translation_summary(counts: dict) -> dict:
    """Ingress address translation over a run (fabric.sim.RunResult.translation): translations, translation-cache
    misses and the miss rate, shadow forwards (translated transfers sent on to another host domain) and their
    bytes, Unsupported Request completions (addresses in no window)."""
    n = int(counts.get("translations", 0))
    out = {k: int(counts.get(k, 0)) for k in ("translations", "cache_misses", "shadow_forwards",
                                              "cross_domain_bytes", "unsupported_requests")}
    out["miss_rate"] = out["cache_misses"] / n if n else 0.0
    return out


def fault_summary(topo, res, step_ps: int, tpot_no_fault_us: float | None, tpot_us: float) -> dict:
    """What the permanent faults of a run did (fabric.faults): each fault with its detection and reroute times,
    the packets they cost (reclaimed and sent again end to end; lost must be 0), the TPOT with and without them,
    and the faulted links' table: state, data rate now, bytes carried and utilisation."""
    f = res.faults
    c = res.counters
    names = {topo.channel_name(i): i for i in range(topo.n_channels)}
    dead = set(f["dead_channels"])
    links = []
    for rec in f["applied"]:
        after = rec.get("gbps_after")
        for j, name in enumerate(rec["channels"]):
            i = names[name]
            gbps = 1e3 / float(topo.ch_ps_per_byte[i])
            links.append(dict(channel=name, fault=rec["spec"], state="down" if name in dead else
                              ("degraded" if after else "up"), gbps=after[j] if after else gbps, gbps_nominal=gbps,
                              payload_B=int(c["payload_B"][i]), utilisation=float(c["busy_ps"][i] / max(step_ps, 1))))
    return dict(applied=f["applied"], packets_reclaimed=f["packets_reclaimed"],
                packets_stale_dropped=f["stale_dropped"],
                flows_rerouted=f["flows_moved"], flows_rewound=f["flows_rewound"], packets_lost=f["packets_lost"],
                packets_duplicated=int(res.totals["duplicates"]), links=links,
                tpot_us=tpot_us, tpot_no_fault_us=tpot_no_fault_us,
                tpot_change_us=None if tpot_no_fault_us is None else tpot_us - tpot_no_fault_us)
