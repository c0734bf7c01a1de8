"""`fabric-replay [TRACE]`: the main job. Replays a decode step and reports TPOT and where the time went."""
from __future__ import annotations

import click

from fabric.cli.common import (
    Command,
    check_writable,
    config_options,
    engine_option,
    fault_option,
    friendly,
    json_option,
    load,
    progress_bar,
    provenance,
    write_json,
)
from fabric.cli.common import TRACE, config_label, echo_timeline, timeline_option


def headline(r: dict) -> str:
    """TPOT for a decode step; the time alone for a trace of collectives only (a microbenchmark has no tokens)."""
    if r.get("collectives_only"):
        return f"  time                 {r['step_time_us']:10.1f} us   (collectives only: no decode step, no TPOT)"
    return f"  TPOT                 {r['tpot_us']:10.1f} us   ({r['tokens_per_s']:.1f} tokens/s)"


def render(r: dict) -> str:
    lines = [
        f"{r['model']} on {r['preset']} ({r['ranks']} ranks, batch {r['batch']}), {r['engine']} engine, "
        f"seed {r['seed']}",
        headline(r),
        f"  step time            {r['step_time_us']:10.1f} us",
        f"  compute              {r['compute_us']:10.1f} us   (critical path)",
        *([f"  host                 {r['host_us']:10.1f} us   (CPU operators on the critical path, not in "
            f"compute)"] if "host_us" in r else []),
        f"  exposed comm         {r['exposed_comm_us']:10.1f} us   ({100 * r['comm_fraction']:.1f} % of the step)",
        "  collectives          kind            bytes  ranks  count  algorithm        mean us   p50 us   p99 us",
    ]
    for c in r["collectives"]:
        lines.append(f"                       {c['kind']:14s} {c['bytes']:7d} {c['ranks']:6d} {c['count']:6d}  "
                     f"{c['algorithm']:14s} {c['mean_us']:8.2f} {c['p50_us']:8.2f} {c['p99_us']:8.2f}")
    x = r["translation"]
    lines += links_lines(r) + [
        f"  translation          {x['translations']} at ingress ports, {x['cache_misses']} cache misses "
        f"({100 * x['miss_rate']:.1f} %), {x['unsupported_requests']} unsupported requests",
        f"                       {x['shadow_forwards']} shadow forwards, {x['cross_domain_bytes']} B across host "
        f"domains",
        *([] if r["engine"] == "analytic" else [
            f"  packets              {r['packets_delivered']} delivered, {r['packets_dropped']} dropped, "
            f"{r['packets_duplicated']} duplicated"]),
        f"  events               {r['events']} in {r['wall_s']:.2f} s wall (+{r['lower_s']:.2f} s lowering)",
    ]
    if r.get("faults"):
        lines += render_faults(r["faults"])
    if r.get("migration"):
        lines += render_migration(r["migration"])
    return "\n".join(lines)


def links_lines(r: dict) -> list[str]:
    """The fabric's lines: links (utilisation, retries, credit stalls) from the packet engine; from the analytic
    one, which times each transfer alpha-beta and has no packets or link state, its transfers instead."""
    if r["engine"] == "analytic":
        x = r["transfers"]
        return [f"  transfers            {x['count']} timed alpha-beta: {x['bytes']:,} B, mean {x['mean_us']:.2f} us, "
                f"max {x['max_us']:.2f} us each",
                "                       no packets or link state on this engine (--engine packet measures links)"]
    k = r["links"]
    return [f"  links                max util {100 * k['max_utilisation']:.2f} % ({k['max_utilisation_channel']}), "
            f"mean {100 * k['mean_utilisation']:.3f} % over {k['channels']} channels",
            f"                       {k['retransmissions']} retransmissions, {k['replays']} replays, "
            f"{k['retrains']} retrains, {k['credit_stall_us']:.2f} us credit stall (all channels)"]


def render_faults(f: dict) -> list[str]:
    """The fault section of a report (fabric.report.fault_summary)."""
    lines = [f"  faults               TPOT {f['tpot_us']:.1f} us with, {f['tpot_no_fault_us']:.1f} us without "
             f"({f['tpot_change_us']:+.1f} us)",
             f"                       {f['flows_rerouted']} flows rerouted, {f['flows_rewound']} of them rewound "
             f"with {f['packets_reclaimed']} packets reclaimed and sent again end to end; {f['packets_lost']} lost, "
             f"{f['packets_duplicated']} duplicated"]
    for a in f["applied"]:
        if not a["applied"]:
            lines.append(f"                       {a['spec']}: after the step ended, not applied")
            continue
        text = f"{a['spec']}: at {a['at_us']:.1f} us"
        if "detected_us" in a:
            text += f", detected {a['detected_us']:.1f} us"
        for key, label in (("rerouted", "rerouted"), ("rerouted_back", "routes restored")):
            if key in a:
                r = a[key]
                text += (f", {label} {r['at_us']:.1f} us ({r['routing']}, {r['pairs_rerouted']} pairs without a "
                         f"path, {r['flows_moved']} flows rerouted"
                         + (f"; {', '.join(r['cut_off'])} cut off, migrated)" if "cut_off" in r else ")"))
        if "up_us" in a:
            text += f", up {a['up_us']:.1f} us"
        lines.append(f"                       {text}")
    lines.append("  faulted links        channel            state        GB/s  nominal   payload MB  util %")
    for k in f["links"]:
        lines.append(f"                       {k['channel']:18s} {k['state']:9s} {k['gbps']:8.1f} "
                     f"{k['gbps_nominal']:8.1f} {k['payload_B'] / 1e6:12.3f} {100 * k['utilisation']:7.3f}")
    return lines


def render_migration(m: dict) -> list[str]:
    """The task-migration section of a report (fabric.faults.migration)."""
    if not m["events"]:
        return ["  migration            no serving rank was cut off: nothing migrated"]
    lines = [f"  migration            TPOT {m['tpot_us']:.1f} us with, {m['tpot_no_fault_us']:.1f} us without; "
             f"degraded {m['degraded_us']:.1f} us (a rank cut off until its spare took over), "
             f"{m['fault_to_end_us']:.1f} us from the fault to the step's end"]
    for e in m["events"]:
        moves = ", ".join(f"{a} -> {b}" for a, b in e["moves"].items())
        lines.append(f"                       {e['fault']}: cut off at {e['fault_us']:.1f} us, found "
                     f"{e['partition_us']:.1f} us; {moves}; took over {e['takeover_us']:.1f} us "
                     f"({e['migration_us']:.1f} us migration), {e['tasks_kept']} tasks kept, "
                     f"{e['tasks_restarted']} restarted")
    lines.append(f"                       {m['packets_abandoned']} packets in flight abandoned at a takeover (their "
                 f"transfers sent again)")
    return lines


@click.command(cls=Command, help="Replay an HDF5 op trace of one decode step on a fabric and report time per output "
                                 "token. TRACE: a file or a shipped trace's name (e.g. toy-mla-tp8); with none, "
                                 "replays the shipped DeepSeek-R1 TP64 trace on sd200.")
@click.argument("trace", required=False, type=TRACE)
@config_options()
@engine_option()
@json_option("write the report as JSON")
@click.option("--quiet", is_flag=True, help="no progress bar, print only the TPOT line")
@timeline_option()
@fault_option()
@click.option("--jobs", type=click.IntRange(1, 256), default=None, metavar="N",
              help="threads that run the step's independent parts, e.g. data-parallel replicas (fabric.parts)  "
                   "[default: the cores available; 1: one engine; the report is identical]")
@click.option("--migrate", is_flag=True, default=False,
              help="a rank a fault cuts off hands its work to a spare (topology.sd200.spares) and the step finishes "
                   "(manager.migrate; docs/faults.md)")
@friendly
def main(trace, preset, config_file, sets, seed, engine, json_path, quiet, timeline_path, faults, jobs, migrate):
    check_writable(json_path)
    check_writable(timeline_path, "--timeline")
    from fabric.replay import replay
    from fabric.experiments.pool import default_jobs
    cfg = load(preset, config_file, sets, seed, overrides={"manager.migrate": True} if migrate else None,
               faults=faults)
    with progress_bar(not quiet) as progress:
        r = replay(trace, cfg, engine=engine, preset=config_label(preset, config_file), progress=progress,
                   timeline=timeline_path,
                   jobs=jobs or default_jobs())
    if quiet:
        click.echo(f"time {r['step_time_us']:.1f} us (collectives only)" if r.get("collectives_only")
                   else f"TPOT {r['tpot_us']:.1f} us ({r['tokens_per_s']:.1f} tokens/s)")
    else:
        click.echo(render(r))
    echo_timeline(r.get("timeline"))
    write_json(json_path, r, provenance(cfg, preset, config_file, sets, seed))
