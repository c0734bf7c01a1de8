"""Replay a trace on a fabric: read + validate -> lower -> run (packet or analytic engine) -> report.

The report answers "what time per output token, and why": TPOT, the critical path split into compute and exposed
communication, collectives by kind and size, and how every link behaved (fabric.report).
"""
from __future__ import annotations

import contextlib
import time

from fabric import sim, trace as tracemod
from fabric.config import FabricConfig
from fabric.errors import ConfigError
from fabric.lower import lower
from fabric.network import shared
from fabric.report import collective_summary, compute_totals, fault_summary, last_end_ps, link_summary, \
    step_summary, task_layers, translation_summary


def replay(trace_path: str | None, cfg: FabricConfig, *, engine: str = "packet", preset: str = "sd200",
           progress=None, timeline: str | None = None, jobs: int = 1) -> dict:
    """Replay one decode step; returns the report (JSON-ready). progress, jobs: see fabric.sim.run. timeline: write
    the run's timeline there (fabric.timeline; FILE.json or FILE.json.gz) and add its figures as "timeline"."""
    path = trace_path or str(tracemod.default_trace_path())
    tr = tracemod.read(path)
    topo = shared(cfg)
    if tr.n_ranks > topo.n_ranks - topo.n_spares:
        raise ConfigError(f"the trace has {tr.n_ranks} ranks but preset {preset!r} has {topo.n_ranks - topo.n_spares} "
                          f"serving accelerators; choose a preset with at least {tr.n_ranks} (sd200: 64, sd200-128 "
                          f"... sd200-1024)")
    if cfg.manager.migrate and timeline:
        raise ConfigError("--timeline cannot draw a step run with --migrate yet (its segments are separate engines "
                          "with their own clocks); drop one of them")
    if cfg.manager.migrate and not topo.n_spares:
        raise ConfigError("--migrate needs spare accelerators to migrate to; add some with --set topology.spares=N "
                          "(sd200)")
    if cfg.faults:            # their names and the manager's timing, before the (long) runs
        from fabric.failover import check
        from fabric.faults import parse_all
        check(parse_all(cfg.faults), topo, cfg)
    t0 = time.perf_counter()
    graph = lower(tr, cfg)
    lower_s = time.perf_counter() - t0
    baseline = None
    if cfg.faults:            # the same step without the faults first, for the TPOT they cost
        base = sim.run(cfg, topo, graph, engine=engine, transfers=False, permanent=(), jobs=jobs)
        baseline = last_end_ps(base.task_end_ps) / 1e6     # its step only: no critical path asked
    if timeline:
        from fabric import timeline as tl
        recorded = tl.to_file(timeline, tr, meta=dict(trace=path, preset=preset, engine=engine))
    else:
        recorded = contextlib.nullcontext()
    with recorded as tl_info:
        if cfg.manager.migrate:
            from fabric import migration
            res, moved = migration.run(cfg, topo, graph, engine=engine, progress=progress)
        else:
            res, moved = sim.run(cfg, topo, graph, engine=engine, progress=progress, transfers=False,
                                 jobs=jobs), None
    start, end = res.task_start_ps, res.task_end_ps
    # the layers of the critical path's tasks only (a few thousand, not every task: 18 M at 1024 ranks)
    step = step_summary(graph, start, end, lambda tasks: task_layers(graph, tr, tasks))
    step_ps = step["step_ps"]
    per_rank_compute, reduce_ps = compute_totals(graph, tr.n_ranks)
    batch = int(tr.meta.get("batch", 1) or 1)
    t = res.totals
    out = dict(
        trace=path, model=tr.meta.get("model", ""), engine=engine, preset=preset, seed=cfg.sim.seed,
        ranks=tr.n_ranks, batch=batch,
        tpot_us=step["step_us"], tokens_per_s=batch / (step_ps / 1e12) if step_ps else 0.0,
        step_time_us=step["step_us"], compute_us=step["compute_us"], exposed_comm_us=step["exposed_comm_us"],
        comm_fraction=step["comm_fraction"],
        compute_busy_us_max_rank=float(per_rank_compute.max() / 1e6),
        reduce_us_total=float(reduce_ps / 1e6),
        critical_path_tasks=step["critical_path_tasks"], layers=step["layers"],
        collectives=collective_summary(graph, start, end),
        links=link_summary(topo, res, step_ps),
        channel_utilisation=[round(float(u), 6) for u in res.counters["busy_ps"] / max(step_ps, 1)],  # per channel
        packets_delivered=int(t["delivered"]),
        packets_dropped=int(t["carved"] - t["delivered"] - res.faults.get("packets_reclaimed", 0)),
        packets_duplicated=int(t["duplicates"]), packets_out_of_order=int(t["out_of_order"]),
        e2e_holds=int(t["e2e_holds"]), translation=translation_summary(res.translation),
        tasks=int(graph.n_tasks), events=int(res.events), lower_s=lower_s, wall_s=res.wall_s,
    )
    if res.faults:
        out["faults"] = fault_summary(topo, res, step_ps, baseline, step["step_us"])
    if moved is not None:
        out["migration"] = dict(moved, tpot_us=step["step_us"], tpot_no_fault_us=baseline,
                                packets_abandoned=res.faults.get("packets_abandoned", 0))
    if timeline:
        out["timeline"] = tl_info
    return out
