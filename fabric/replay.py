"""Replay a trace on a fabric: read + validate -> lower -> run (packet or analytic engine) -> report.

    run_step(trace, cfg, engine="packet", *, topo=None, progress=None, jobs=1, transfers=False, timer=None,
             layers=False, baseline=False, record=None) -> StepRun(graph, result, summary, topo, lower_s, ...)
    replay(trace, cfg, ...) -> dict           what fabric-replay reports (trace: a file, a shipped name or a Trace)

`run_step` is the step pipeline, written once: fabric-replay (replay), the serving experiments
(fabric.experiments.serving), fabric-bench's replay cases and fabric-serve's step model all run a step through it. The
report answers "what time per output token, and why": TPOT, the critical path split into compute and exposed
communication, collectives by kind and size, and how every link behaved (fabric.report).
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import numpy as np

from fabric import shipped, sim, trace as tracemod
from fabric.config import FabricConfig, preset_of
from fabric.errors import ConfigError, TraceError
from fabric.lower import lower
from fabric.network import shared
from fabric.report import collective_bytes, collective_summary, compute_totals, fault_summary, last_end_ps, \
    link_summary, step_summary, task_layers, transfer_summary, translation_summary
from fabric.taskgraph import COMPUTE, TaskGraph
from fabric.topology import Topology


@dataclass(frozen=True)
class StepRun:
    """One step through the pipeline (run_step)."""
    graph: TaskGraph              # the lowered step
    result: sim.RunResult         # the engine's run (a migrating step: its segments merged, fabric.faults.migration)
    summary: dict                 # fabric.report.step_summary: step_ps, step_us, compute_us, exposed_comm_us,
                                  # comm_fraction, critical_path_tasks (and layers, with run_step's layers=True)
    topo: Topology                # the fabric it ran on
    lower_s: float                # seconds lowering took
    baseline_us: float | None = None   # the step without cfg.faults (run_step's baseline=True and faults), us
    migration: dict | None = None      # what fabric.faults.migration moved (cfg.manager.migrate)
    recorded: dict | None = None       # what run_step's `record` yielded (fabric.timeline.to_file: its figures)

    def collective_bytes(self) -> dict:
        """Bytes the step's collectives move, by kind (fabric.report.collective_bytes)."""
        return collective_bytes(self.graph)


def run_step(trace, cfg: FabricConfig, engine: str = "packet", *, topo=None, progress=None, jobs: int = 1,
             transfers: bool = False, timer=None, layers: bool = False, baseline: bool = False,
             record=None) -> StepRun:
    """Lower `trace` (fabric.trace.Trace, or anything with its attributes) for the fabric `cfg` describes, run it
    on `engine` (fabric.sim.run: cfg's faults, `jobs` independent parts at a time, `transfers` tables; with
    cfg.manager.migrate, fabric.faults.migration.run) and split its critical path (fabric.report.step_summary).

    topo: the fabric (default fabric.network.shared(cfg): built once per config and process, as lowering's auto
    tiers see it). progress: fabric.sim.run's. layers: the split by model layer too (summary["layers"]).
    baseline: with cfg.faults, first run the step without them (StepRun.baseline_us, the TPOT they cost). record: a
    context manager entered around the step's run alone (fabric.timeline.to_file: that run's timeline); what it
    yields becomes StepRun.recorded. timer: called as timer(stage, seconds) once each stage ends, in order: "lower",
    "baseline" (only with one), "engine" (sim.run's time outside the kernel's run: checks, the engine's
    construction, the result's copies; a split step's shared inputs and plan, its parts' engines being built in
    their threads during the run), "run" (the kernel's run: RunResult.wall_s), "report"."""
    clock = _Stages(timer)
    topo = shared(cfg) if topo is None else topo
    graph = lower(trace, cfg)
    lower_s = clock.stage("lower")
    baseline_us = None
    if baseline and cfg.faults:   # the same step without the faults first, for the TPOT they cost
        base = sim.run(cfg, topo, graph, engine=engine, transfers=False, permanent=(), jobs=jobs)
        baseline_us = last_end_ps(base.task_end_ps) / 1e6     # its step only: no critical path asked
        clock.stage("baseline")
    moved = None
    with (record if record is not None else contextlib.nullcontext()) as recorded:
        if cfg.manager.migrate:
            from fabric.faults import migration
            res, moved = migration.run(cfg, topo, graph, engine=engine, progress=progress, transfers=transfers)
        else:
            res = sim.run(cfg, topo, graph, engine=engine, progress=progress, transfers=transfers, jobs=jobs)
    clock.split("engine", "run", res.wall_s)
    # the layers of the critical path's tasks only (a few thousand, not every task: 18 M at 1024 ranks)
    summary = step_summary(graph, res.task_start_ps, res.task_end_ps,
                           (lambda tasks: _layers_or_host(graph, trace, tasks)) if layers else None)
    clock.stage("report")
    return StepRun(graph=graph, result=res, summary=summary, topo=topo, lower_s=lower_s, baseline_us=baseline_us,
                   migration=moved, recorded=recorded)


HOST_GROUP = -2     # the critical path's "layer" of host tasks (compute ops on host streams: CPU operators)


def _layers_or_host(graph: TaskGraph, trace, tasks):
    """task_layers, with the tasks on host streams (tracemod.HOST_STREAM up) as HOST_GROUP: their time on the
    critical path is host time, told apart from accelerator compute."""
    groups = task_layers(graph, trace, tasks)
    groups[graph.stream[tasks] >= tracemod.HOST_STREAM] = HOST_GROUP
    return groups


def _host_time(tr, graph: TaskGraph, step: dict, per_rank_compute):
    """For a trace with host ops (a PyTorch trace's CPU operators): (host time on the critical path in us, the
    per-rank compute without them); None for any other trace."""
    if not any(np.any(t.stream >= tracemod.HOST_STREAM) for t in tr.ops):
        return None
    host = (graph.kind == COMPUTE) & (graph.coll < 0) & (graph.stream >= tracemod.HOST_STREAM)
    busy = np.bincount(graph.rank[host], weights=graph.duration_ps[host], minlength=tr.n_ranks)
    path_us = sum(g["compute_us"] for g in step["layers"] if g["layer"] == HOST_GROUP)
    return path_us, per_rank_compute - busy


class _Stages:
    """The seconds since the last stage ended, handed to run_step's timer as each stage ends."""

    def __init__(self, timer):
        self.timer, self.t = timer, time.perf_counter()

    def stage(self, name: str) -> float:
        now = time.perf_counter()
        seconds, self.t = now - self.t, now
        if self.timer is not None:
            self.timer(name, seconds)
        return seconds

    def split(self, first: str, second: str, second_s: float) -> None:
        """One span reported as two stages: `second` took second_s of it (measured inside), `first` the rest."""
        now = time.perf_counter()
        total, self.t = now - self.t, now
        if self.timer is not None:
            self.timer(first, total - second_s)
            self.timer(second, second_s)


def replay(trace: str | os.PathLike | tracemod.Trace | None, cfg: FabricConfig, *, engine: str = "packet",
           preset: str | None = None, progress=None, timeline: str | None = None, jobs: int = 1) -> dict:
    """Replay one decode step (run_step, with the layer split and, under faults, the fault-free baseline); returns
    the report (JSON-ready). trace: a trace file, a shipped trace's name (fabric.shipped) or an in-memory Trace
    (what fabric.capture.capture returns; its "trace" is then None); None: the shipped DeepSeek-R1 TP64 trace.
    preset: what the report calls the fabric (default: the preset cfg is, else "custom <kind> config";
    fabric.config.preset_of). progress, jobs: see fabric.sim.run. timeline: write the run's timeline there
    (fabric.timeline; FILE.json or FILE.json.gz) and add its figures as "timeline"."""
    if isinstance(trace, tracemod.Trace):
        path, tr = None, trace
        problems = tracemod._check_trace(tr)
        if problems:
            raise TraceError(tracemod._summary("the in-memory trace is not valid", problems))
    elif trace is None or isinstance(trace, (str, os.PathLike)):
        path = shipped.trace_path(os.fspath(trace)) if trace is not None else str(tracemod.default_trace_path())
        tr = tracemod.read(path)
    else:
        raise ConfigError(f"replay() takes a trace file, a shipped trace's name or a fabric.trace.Trace, not a "
                          f"{type(trace).__name__}")
    preset = preset or preset_of(cfg) or f"custom {cfg.topology.kind} config"
    topo = shared(cfg)
    if tr.n_ranks > topo.n_serving:
        raise ConfigError(f"the trace has {tr.n_ranks} ranks but preset {preset!r} has {topo.n_serving} "
                          f"serving accelerators; choose a preset with at least {tr.n_ranks} (sd200: 64, sd200-128 "
                          f"... sd200-1024)")
    if cfg.manager.migrate and timeline:
        raise ConfigError("--timeline cannot draw a step run with --migrate yet (its segments are separate engines "
                          "with their own clocks); drop one of them")
    if cfg.manager.migrate and not topo.n_spares:
        raise ConfigError("--migrate needs spare accelerators to migrate to; add some with "
                          "--set topology.sd200.spares=N (sd200)")
    if cfg.faults:            # their names and the manager's timing, before the (long) runs
        from fabric.faults.failover import check
        from fabric.faults import parse_all
        check(parse_all(cfg.faults), topo, cfg)
    record = None
    if timeline:
        from fabric import timeline as tl
        record = tl.to_file(timeline, tr, meta=dict(trace=path, preset=preset, engine=engine))
    run = run_step(tr, cfg, engine, topo=topo, progress=progress, jobs=jobs, layers=True, baseline=True,
                   record=record)
    graph, res, step, baseline = run.graph, run.result, run.summary, run.baseline_us
    start, end = res.task_start_ps, res.task_end_ps
    step_ps = step["step_ps"]
    per_rank_compute, reduce_ps = compute_totals(graph, tr.n_ranks)
    batch = int(tr.meta.get("batch", 1) or 1)
    host = _host_time(tr, graph, step, per_rank_compute)
    if host is not None:
        step = dict(step, compute_us=step["compute_us"] - host[0],
                    layers=[g for g in step["layers"] if g["layer"] != HOST_GROUP])
        per_rank_compute = host[1]
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
        links=link_summary(topo, res, step_ps), transfers=transfer_summary(graph, start, end),
        channel_utilisation=[round(float(u), 6) for u in res.counters["busy_ps"] / max(step_ps, 1)],  # per channel
        packets_delivered=int(t["delivered"]),
        packets_dropped=int(t["carved"] - t["delivered"] - res.faults.get("packets_reclaimed", 0)),
        packets_duplicated=int(t["duplicates"]), packets_out_of_order=int(t["out_of_order"]),
        e2e_holds=int(t["e2e_holds"]), translation=translation_summary(res.translation),
        tasks=int(graph.n_tasks), events=int(res.events), lower_s=run.lower_s, wall_s=res.wall_s,
    )
    if host is not None:
        out["host_us"] = host[0]          # CPU operators on the critical path: not in compute_us
    if not any(np.any(t.kind == tracemod.KIND_COMPUTE) for t in tr.ops):
        out["collectives_only"] = True    # a communication microbenchmark: no decode step, so no TPOT to speak of
    if res.faults:
        out["faults"] = fault_summary(topo, res, step_ps, baseline, step["step_us"])
    if run.migration is not None:
        out["migration"] = dict(run.migration, tpot_us=step["step_us"], tpot_no_fault_us=baseline,
                                packets_abandoned=res.faults.get("packets_abandoned", 0))
    if timeline:
        out["timeline"] = run.recorded
    return out
