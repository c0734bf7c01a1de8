"""The benchmark suite behind `fabric-bench`: fixed cases, each run in its own subprocess, one row per case.

A row: case, packets (packets created at their sources), packet_hops (packets put on a channel, summed over
channels), events (kernel events), wall_s (the kernel run only: `sim.run`'s clock, not topology building or
lowering), events_per_s, packet_hops_per_s, peak_rss_mb (the child process's peak resident set, from `os.wait4`,
so cases do not pollute each other).

Cases (see docs/performance.md for figures):
- `link`: one saturated link (the link probe), 1M packets (200k in --quick).
- `oneshot-64`: 64 ranks of mesh-4x4x4, each storing 14,336 B to each of the 63 others, 256 B packets.
- `decode-sd200-packet`, `decode-sd200-analytic`: the shipped DeepSeek-R1 decode step on sd200.
- `ring-16MB-64`: one 16 MB ring AllReduce over the 64 ranks of sd200.
- `allreduce-1G-dgx-h100`: a 1 GiB AllReduce on the 8 GPUs of dgx-h100 as its nccl-like library runs it (the
  tuner's algorithm, protocol and channels): the size a user sweeps to in nccl-tests.
- `replay-sd200`, `replay-sd200-analytic`, `replay-1024-analytic`: `fabric-replay` end to end in the child, each
  stage timed (read or capture, topology, then fabric.replay.run_step's lower, engine (construction and set-up),
  run, report with the split by layer; printed under the table, `stages` in the JSON), and the child process's whole wall time (`process_s`: interpreter start,
  imports and exit too, what `time fabric-replay` shows): the shipped step on both engines, and its 16 DP replicas
  on sd200-1024 (workload deepseek-r1-dp16-tp64) on the analytic engine, so that time and memory outside the kernel
  show.
- `capture-1024`: the trace of a 1024-card deployment (workload kimi-k2-tp64-ep128-x8: 1024 distinct rank
  tables) captured, written to HDF5 and read back, each stage timed; no kernel (wall s: the three stages).
- `serve-10k`, `serve-10k-packet`, `serve-1024`, `serve-pd-10k` (by name only: minutes each): fabric-serve end to
  end (fabric.serve.Deployment, or Disaggregated), DeepSeek-R1 serving the shipped Azure conversation trace: 10,000
  requests on sd200 with tp=64 on either engine (the packet engine's with a token budget of 2,048 a step), 2,000
  requests at 160 requests/s on sd200-1024 (16 replicas of attn=dp,ep=64, fp8 weights), and 10,000 requests on
  sd200 disaggregated (prefill attn=tp8,ep=32 + decode attn=dp,ep=32, fp8; analytic); stages deployment, steps (the
  step model's grid), schedule (the serving loop and the report).
- `oneshot-N` (N = 128 .. 1024, presets sd200-N): the same one-shot traffic with 256 B packets; above 64 ranks
  the message shrinks as 64/N so that the total stays tractable (packets then grow linearly in N, not N^2), and
  the case name says the message size. The scaling exponent is fitted on wall time vs packets.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import numpy as np

ONESHOT_BYTES = 14336
PKT_B = 256
SMALL = {"txn.max_payload_bytes": PKT_B, "txn.max_read_request_bytes": PKT_B}
ROW_KEYS = ("case", "packets", "packet_hops", "events", "wall_s", "events_per_s", "packet_hops_per_s",
            "peak_rss_mb")


def oneshot_bytes(n: int) -> int:
    """Message per (src, dst) pair of oneshot-n: 14,336 B at 64 ranks, scaled by 64/n above (whole packets)."""
    if n <= 64:
        return ONESHOT_BYTES
    return max(PKT_B, (ONESHOT_BYTES * 64 // n) // PKT_B * PKT_B)


def oneshot_name(n: int) -> str:
    b = oneshot_bytes(n)
    return f"oneshot-{n}" if b == ONESHOT_BYTES else f"oneshot-{n}-{b}B"


FULL = ["link", "oneshot-64", "decode-sd200-packet", "decode-sd200-analytic", "ring-16MB-64",
        "allreduce-1G-dgx-h100"] + \
       [oneshot_name(n) for n in (128, 256, 512, 1024)] + \
       ["replay-sd200", "replay-sd200-analytic", "replay-1024-analytic", "capture-1024"]
QUICK = ["link-quick", "oneshot-64", "decode-sd200-analytic", "ring-1MB-64"]
# served workloads: minutes each, so only by name (--case); see serve_stages
SERVE = {"serve-10k": dict(plan="tp=64", requests=10_000, engine="analytic"),
         # the packet engine's grid steps stop at 2,048 prompt tokens a step: a step of 8,192 is ~2e9 events
         "serve-10k-packet": dict(plan="tp=64", requests=10_000, engine="packet", token_budget=2048),
         "serve-1024": dict(preset="sd200-1024", plan="attn=dp,ep=64,weights=fp8,replicas=16", requests=2000,
                            rate=160.0, engine="analytic"),
         "serve-pd-10k": dict(prefill="attn=tp8,ep=32,weights=fp8", decode="attn=dp,ep=32,weights=fp8",
                              requests=10_000, engine="analytic")}


def _replay_stages(case: str):
    """replay-sd200[-analytic] (the shipped DeepSeek-R1 step) or replay-1024[-analytic] (its 16 DP replicas on
    sd200-1024, workload deepseek-r1-dp16-tp64) end to end as fabric-replay runs it (fabric.replay.run_step, then
    the report's summaries), each stage timed: read (or capture), topology (build and route), then run_step's
    stages: lower, engine (sim.run outside the kernel's run), run (the kernel's run), report (critical path split
    by layer, and summaries). A step of independent parts (fabric.parts: the 16 replicas) runs them on every core as
    fabric-replay does: their shared inputs and plan are in "engine", each part's engine, built in its thread, in
    "run". Returns the RunResult with .stages = {stage: seconds}."""
    from fabric import trace as tracemod
    from fabric.config import load_config
    from fabric.network import shared
    from fabric.replay import run_step
    from fabric.report import collective_summary, link_summary
    from fabric.experiments.pool import default_jobs
    engine = "analytic" if case.endswith("-analytic") else "packet"
    big = case.startswith("replay-1024")
    st, t = {}, time.perf_counter()
    if big:
        from fabric.capture.workloads import capture_workload
        tr = capture_workload("deepseek-r1-dp16-tp64")
    else:
        tr = tracemod.read(str(tracemod.default_trace_path()))
    st["read"], t = time.perf_counter() - t, time.perf_counter()
    cfg = load_config(preset="sd200-1024" if big else "sd200")
    topo = shared(cfg)            # as fabric-replay: lowering's auto tiers and kernel_params reuse it
    st["topology"] = time.perf_counter() - t

    def timer(stage, seconds):
        st[stage] = st.get(stage, 0.0) + seconds
    step = run_step(tr, cfg, engine, topo=topo, jobs=default_jobs(), timer=timer, layers=True)   # as fabric-replay
    t = time.perf_counter()
    res = step.result
    collective_summary(step.graph, res.task_start_ps, res.task_end_ps)
    link_summary(topo, res, step.summary["step_ps"])
    st["report"] += time.perf_counter() - t
    res.stages = st
    return res


def capture_stages(workload: str = "kimi-k2-tp64-ep128-x8"):
    """capture-1024: capture a built-in workload (fabric.capture.workloads), write it and read it back, each stage
    timed. Returns what child() reads of a run (no packets, no events; wall_s: the three stages) with .stages."""
    import tempfile
    from types import SimpleNamespace

    from fabric import trace as tracemod
    from fabric.capture.workloads import capture_workload
    st, t = {}, time.perf_counter()
    tr = capture_workload(workload)
    st["capture"], t = time.perf_counter() - t, time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"{workload}.h5")
        tracemod.write(path, tr)
        st["write"], t = time.perf_counter() - t, time.perf_counter()
        back = tracemod.read(path)
        st["read"] = time.perf_counter() - t
    if back.n_ranks != tr.n_ranks:
        raise RuntimeError(f"{workload}: read back {back.n_ranks} ranks of {tr.n_ranks}")
    return SimpleNamespace(totals={"carved": 0}, counters={"packets": np.zeros(1, np.int64)}, events=0,
                           wall_s=sum(st.values()), outcome="done", stages=st)


def serve_stages(case: str):
    """serve-*: DeepSeek-R1 serving the shipped Azure conversation trace (fabric.serve) end to end, staged:
    deployment (plan checks, KV budget), steps (the step model's grid: captures and simulated steps, made on
    demand while serving), schedule (the rest of the serving loop and the report). No kernel counts (the steps
    run many engines); wall s: the three stages."""
    from types import SimpleNamespace

    from fabric.serve import Deployment
    from fabric.serve.disagg import Disaggregated
    args = dict(SERVE[case])
    t = time.perf_counter()
    common = dict(model="deepseek-r1", preset=args.pop("preset", "sd200"), engine=args.pop("engine"),
                  token_budget=args.pop("token_budget", 8192))
    if "prefill" in args:
        dep = Disaggregated(prefill=args.pop("prefill"), decode=args.pop("decode"), **common)
    else:
        dep = Deployment(plan=args.pop("plan"), **common)
    st = {"deployment": time.perf_counter() - t}
    t = time.perf_counter()
    r = dep.serve("azure-conv", **args)
    total = time.perf_counter() - t
    st["steps"] = r["step_model"]["simulate_s"]
    st["schedule"] = total - st["steps"]
    return SimpleNamespace(totals={"carved": 0}, counters={"packets": np.zeros(1, np.int64)}, events=0,
                           wall_s=sum(st.values()), outcome="done", stages=st)


def _run_case(case: str):
    """Build and run one case in this process; returns the sim.RunResult."""
    if case.startswith("serve-"):
        return serve_stages(case)
    if case.startswith("replay-"):
        return _replay_stages(case)
    if case == "capture-1024":
        return capture_stages()
    from fabric import sim
    from fabric.config import load_config
    from fabric.network import build
    from fabric.taskgraph import all_to_all_graph
    if case.startswith("link"):
        from fabric.experiments.probe_link import probe_link
        return probe_link(load_config(preset=None), None, 200000 if case == "link-quick" else 1000000)["_result"]
    if case.startswith("oneshot-"):
        n = int(case.split("-")[1])
        cfg = load_config(preset="mesh-4x4x4" if n == 64 else f"sd200-{n}", overrides=SMALL)
        topo = build(cfg)
        return sim.run(cfg, topo, all_to_all_graph(topo.n_ranks, oneshot_bytes(n)))
    if case.startswith("decode-"):
        from fabric import trace as tracemod
        from fabric.lower import lower
        preset, engine = case.split("-")[1:3]
        cfg = load_config(preset=preset)
        graph = lower(tracemod.read(str(tracemod.default_trace_path())), cfg)
        return sim.run(cfg, build(cfg), graph, engine=engine)
    if case.startswith("ring-"):
        from fabric import collectives
        size, n = case.split("-")[1:3]
        nbytes = int(size[:-2]) << 20
        cfg = load_config(preset="sd200")
        graph = collectives.build("allreduce", "ring", nbytes, int(n), cfg).to_graph(n_ranks=build(cfg).n_ranks)
        return sim.run(cfg, build(cfg), graph)
    if case.startswith("allreduce-"):
        from fabric import collectives
        size, preset = case.split("-", 2)[1:]
        cfg = load_config(preset=preset)
        topo = build(cfg)
        nbytes, n = int(size[:-1]) << 30, topo.n_ranks
        choice = collectives.choose("allreduce", nbytes, n, cfg, oracle=sim.analytic_times)
        frag = collectives.build("allreduce", choice.algorithm, nbytes, n, cfg, semantics=False, choice=choice)
        return sim.run(cfg, topo, frag.to_graph(n_ranks=n))
    raise ValueError(f"unknown case {case!r}")


def child(case: str) -> None:
    """Entry point of the per-case subprocess: tune the process as a command's (fabric._process: the time and peak
    RSS fabric-replay has), run, print one JSON line with the counts."""
    from fabric._process import tune_process
    tune_process()
    res = _run_case(case)
    print(json.dumps(dict(packets=int(res.totals["carved"]), packet_hops=int(res.counters["packets"].sum()),
                          events=int(res.events), wall_s=float(res.wall_s), outcome=res.outcome,
                          stages=getattr(res, "stages", None))))


def run_case(case: str) -> dict:
    """Run one case in a fresh interpreter; its peak RSS comes from the kernel's rusage of that child alone."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", f"from fabric.experiments.bench import child; child({case!r})"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    process_s = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"bench case {case} failed (exit {p.returncode}):\n{err[-2000:]}")
    r = json.loads(out.strip().splitlines()[-1])
    wall = max(r["wall_s"], 1e-9)
    rss_kb = ru.ru_maxrss if sys.platform != "darwin" else ru.ru_maxrss / 1024
    return dict(case=case, packets=r["packets"], packet_hops=r["packet_hops"], events=r["events"],
                wall_s=r["wall_s"], events_per_s=r["events"] / wall, packet_hops_per_s=r["packet_hops"] / wall,
                peak_rss_mb=rss_kb / 1024.0,
                **({"stages": r["stages"], "process_s": process_s} if r.get("stages") else {}))


def scaling_exponent(rows: list[dict], per: str = "packets", of: str = "wall_s") -> float | None:
    """Least-squares slope of log(rows[of]) on log(rows[per]) over the oneshot cases (1.0 = linear). Wall against
    packets includes the workload's growth in hops per packet (3.8 on the 64-rank mesh, 7.1 on sd200-1024); wall
    against packet_hops is the kernel's own; events against packets is the workload's alone, the exponent a kernel
    with a constant cost per event would reach."""
    pts = [(r[per], r[of]) for r in rows if r["case"].startswith("oneshot-") and r[per] > 0]
    if len(pts) < 2:
        return None
    x = np.log([p for p, _ in pts])
    y = np.log([max(v, 1e-9) for _, v in pts])
    return float(np.polyfit(x, y, 1)[0])


_PATTERNS = (r"link(-quick)?", r"oneshot-(?P<n>[0-9]+)(-[0-9]+B)?", r"decode-(?P<preset>[a-z0-9-]+)-(packet|analytic)",
             r"ring-[1-9][0-9]*MB-64", r"allreduce-[1-9][0-9]*G-(?P<preset2>[a-z0-9-]+)",
             r"replay-(sd200|1024)(-analytic)?", r"capture-1024", r"serve-10k(-packet)?|serve-1024|serve-pd-10k")


def check_cases(cases) -> None:
    """Refuse an unknown case name before any subprocess starts (one ConfigError line naming the known cases)."""
    import difflib
    import re

    from fabric.config import preset_names
    from fabric.errors import ConfigError
    known = list(dict.fromkeys(FULL + QUICK + list(SERVE)))
    for case in cases or ():
        for pat in _PATTERNS:
            m = re.fullmatch(pat, case)
            if not m:
                continue
            g = m.groupdict()
            n = g.get("n")
            preset = g.get("preset") or g.get("preset2")
            if n is not None and (case not in (oneshot_name(int(n)), f"oneshot-{int(n)}")
                                  or (int(n) != 64 and f"sd200-{int(n)}" not in preset_names())):
                continue
            if preset is not None and preset not in preset_names():
                continue
            break
        else:
            close = difflib.get_close_matches(case, known, n=2)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise ConfigError(f"unknown bench case {case!r}{hint} (cases: {', '.join(known)})")


def run_suite(quick: bool = False, cases=None, progress=None, repeat: int = 1, jobs: int = 1) -> list[dict]:
    """One row per case. With repeat > 1 each case runs that many times (each in a fresh process) and its row is
    the fastest run: on a shared machine other tenants only ever add time (the usual best-of-N of timeit). The
    runs must agree on every count, as the kernel is deterministic; peak RSS is the largest seen. `jobs` child
    processes run at once (default 1: cases that share cores time each other, so only counts stay exact); rows
    come back in case order whatever it is."""
    from concurrent.futures import ThreadPoolExecutor

    check_cases(cases)
    names = list(cases or (QUICK if quick else FULL))
    jobs = max(int(jobs or 1), 1)

    def one(case):
        if progress:
            progress(case)
        return [run_case(case) for _ in range(repeat)]

    with ThreadPoolExecutor(max_workers=max(min(jobs, len(names)), 1)) as ex:   # each case is a child process
        all_runs = list(ex.map(one, names))
    rows = []
    for case, runs in zip(names, all_runs):
        counts = {(r["packets"], r["packet_hops"], r["events"]) for r in runs}
        if len(counts) != 1:
            raise RuntimeError(f"bench case {case}: repeated runs disagree on packets/hops/events: {sorted(counts)}")
        best = min(runs, key=lambda r: r["wall_s"])
        best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
        rows.append(best)
    return rows


def render(rows: list[dict], repeat: int = 1) -> str:
    head = f"{'case':24s} {'packets':>10s} {'packet-hops':>12s} {'events':>11s} {'wall s':>8s} {'events/s':>10s} " \
           f"{'p-hops/s':>10s} {'peak RSS MB':>11s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['case']:24s} {r['packets']:10d} {r['packet_hops']:12d} {r['events']:11d} "
                     f"{r['wall_s']:8.3f} {_si(r['events_per_s']):>10s} {_si(r['packet_hops_per_s']):>10s} "
                     f"{r['peak_rss_mb']:11.0f}")
    for r in rows:
        if r.get("stages"):
            st = r["stages"]
            lines.append(f"{r['case']}: end to end {sum(st.values()):.2f} s in the child = "
                         + " + ".join(f"{k} {v:.2f}" for k, v in st.items())
                         + (" (wall s above: run)" if "run" in st else "") + "; process "
                         f"{r['process_s']:.2f} s with interpreter, imports and exit")
    if repeat > 1:
        lines.append(f"wall s: the fastest of {repeat} runs of each case")
    k = scaling_exponent(rows)
    if k is not None:
        k_hops = scaling_exponent(rows, "packet_hops")
        lines.append(f"oneshot scaling: wall ~ packets^{k:.2f}, ~ packet-hops^{k_hops:.2f}"
                     f" (fitted over {sum(r['case'].startswith('oneshot-') for r in rows)} oneshot cases; "
                     f"1.00 = linear)")
        lines.append(f"  workload: events ~ packets^{scaling_exponent(rows, of='events'):.2f} (hops per packet grow "
                     f"with the diameter; a constant cost per event gives this)")
    return "\n".join(lines)


def _si(v: float) -> str:
    return f"{v / 1e6:.2f} M" if v >= 1e5 else f"{v:.0f}" if not math.isnan(v) else "-"


if __name__ == "__main__":   # pragma: no cover
    t0 = time.perf_counter()
    print(render(run_suite(quick="--quick" in sys.argv)))
    print(f"{time.perf_counter() - t0:.1f} s")
