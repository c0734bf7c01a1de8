"""`fabric-serve`: a served workload (requests, continuous batching, a parallel plan) on a fabric: throughput,
TTFT / TPOT / end-to-end latency, goodput under SLOs, and what the fabric carried (fabric.serve)."""
from __future__ import annotations

import click

import contextlib
import sys
import time

from fabric.cli.common import (Command, check_writable, config_options, friendly, json_option, load, provenance,
                               timeline_option, write_json)


@contextlib.contextmanager
def _bar(enabled: bool):
    """(progress(done, total), on_point(steps, seconds)) drawing one line on stderr once a run has taken a second
    (a terminal only): requests finished, and the step model's simulated steps while it builds its grid."""
    t0 = time.perf_counter()
    state = dict(shown=False, points="")
    live = enabled and sys.stderr.isatty()

    def draw(text):
        if live and time.perf_counter() - t0 >= 1.0:
            sys.stderr.write(f"\r{text}{state['points']}   ")
            sys.stderr.flush()
            state["shown"] = True

    def progress(done, total):
        frac = done / max(total, 1)
        draw(f"[{'#' * int(30 * frac):<30s}] {done}/{total} requests  {time.perf_counter() - t0:6.1f} s")

    def on_point(n, s):
        state["points"] = f"  step model: {n} steps simulated ({s:.0f} s)"
        draw("")
    try:
        yield progress, on_point
    finally:
        if state["shown"]:
            sys.stderr.write("\n")


def _ms(d: dict) -> str:
    return "  ".join(f"{k} {v:9.1f}" if v is not None else f"{k}      n/a" for k, v in d.items()
                     if k in ("p50", "p90", "p99", "mean"))


_HANDOVER = {"after": "after the prefill", "layered": "layer by layer during the prefill"}


def render(r: dict) -> str:
    mem = r["memory"]
    slo = r["slo"]
    lines = [
        f"{r['model']} on {r['preset']}: {r['plan_described']}, {r['engine']} engine, seed {r['seed']}",
        f"  workload             {r['workload']}: {r['requests']} requests, {r['finished']} finished, "
        f"{r['rejected']} rejected, over {r['duration_s']:.1f} s",
        f"  KV cache             {mem['kv_tokens_per_group']} tokens per attention group "
        f"({mem['kv_gib']:.1f} GiB a rank next to {mem['weights_gib']:.1f} GiB of weights), "
        f"{r['attention_groups']} groups",
        f"  throughput           {r['output_tokens_per_s']:10.1f} output tokens/s  "
        f"({r['output_tokens_per_s_per_accelerator']:.2f} per accelerator, "
        f"{r['output_tokens_per_s_per_node']:.1f} per node), {r['input_tokens_per_s']:.1f} input tokens/s",
        f"  TTFT (ms)            {_ms(r['ttft_ms'])}",
        f"  TPOT (ms)            {_ms(r['tpot_ms'])}",
        f"  inter-token (ms)     {_ms(r['itl_ms'])}",
        f"  end to end (ms)      {_ms(r['e2e_ms'])}",
    ]
    if slo["ttft_ms"] is not None or slo["tpot_ms"] is not None:
        lines.append(f"  goodput              {r['goodput_requests_per_s']:.3f} requests/s meet TTFT <= "
                     f"{slo['ttft_ms']} ms and TPOT <= {slo['tpot_ms']} ms ({100 * slo['met_fraction']:.1f} %)")
    b = r["fabric_bytes"]
    if "kv_handover" in r:
        h, pools = r["kv_handover"], r["pools"]
        lines.append(f"  KV hand-over         {h['requests']} prompts ({_HANDOVER[h['mode']]}), mean {h['mean_ms']:.2f} ms "
                     f"after it, p99 "
                     f"{h['p99_ms']:.2f} ms, {h['bytes'] / 1e9:.2f} GB ({h['us_per_token']:.3f} us a token + "
                     f"{h['fixed_us']:.1f} us)")
        busiest = ", ".join(f"{x['channel']} {x['gb']:.2f} GB" for x in h.get("links", [])[:4])
        if busiest:
            lines.append(f"  hand-over links      {busiest} (busiest of {len(h['links'])}, the first groups' path)")
        for name in ("prefill", "decode"):
            p = pools[name]
            lines.append(f"  {name + ' pool':20s} {p['plan_described']}: {p['steps']} steps in {p['busy_s']:.1f} s "
                         f"busy, {100 * p['exposed_comm_fraction']:.1f} % exposed communication, "
                         f"{p['preemptions']} preemptions")
    lines += [
        f"  batch                mean {r['batch_mean']:.1f}, max {r['batch_max']} sequences a step; KV use mean "
        f"{100 * r['kv_use_mean']:.1f} %, max {100 * r['kv_use_max']:.1f} %; queue max {r['queue_max']}",
        f"  preemptions          {r['preemptions']} ({r['requests_preempted']} requests recomputed)",
    ]
    if "prefix_cache" in r:
        c = r["prefix_cache"]
        lines.append(f"  prefix cache         {c['hit_tokens']} prompt tokens read from {c['prefixes']} cached prefixes "
                     f"({100 * c['hit_fraction_of_prompts']:.1f} % of the prompts), {c['host_hits']} reloaded from "
                     f"host memory")
    if "host_tier" in r:
        h = r["host_tier"]
        lines.append(f"  host KV tier         {h['swaps']} swaps ({h['requests_swapped']} requests), "
                     f"{h['offload_bytes'] / 1e9:.2f} GB offloaded, {h['reload_bytes'] / 1e9:.2f} GB reloaded, "
                     f"steps waited {h['wait_s'] * 1e3:.1f} ms; {h['tokens_per_group']} tokens per attention group")
    imb = r.get("imbalance") or {}
    if imb:
        what = {"tokens_max_over_mean": "tokens", "kv_max_over_mean": "KV held", "batch_max_over_mean": "batch"}
        lines.append(f"  balance              {r['balance']}: busiest attention group "
                     + ", ".join(f"{v:.2f}x the mean {what[k]}" for k, v in imb.items()))
    lines += [
        f"  fabric bytes         {b['tp_collectives'] / 1e9:.2f} GB TP collectives, {b['expert_alltoall'] / 1e9:.2f} "
        f"GB expert all-to-all, {b['other'] / 1e9:.2f} GB other"
        + (f", {b['kv_handover'] / 1e9:.2f} GB KV hand-over" if "kv_handover" in b else ""),
        f"  steps                {r['steps']} in {r['busy_s']:.1f} s busy, {100 * r['exposed_comm_fraction']:.1f} % of "
        f"it exposed communication; step model: "
        f"{r['step_model']['grid_steps_simulated']} steps simulated in {r['step_model']['simulate_s']:.1f} s; "
        f"{r['wall_s']:.1f} s wall",
    ]
    return "\n".join(lines)


@click.command(cls=Command, help="Serve a workload of requests on a fabric with continuous batching and report "
                                 "throughput, TTFT, TPOT and goodput (docs/serving.md).")
@click.option("--model", default=None, help="built-in model (fabric-capture --help lists them) [default: deepseek-r1]")
@click.option("--hf-config", type=click.Path(dir_okay=False), default=None,
              help="a Hugging Face config.json instead of --model")
@click.option("--chip", default="sd200-accelerator", show_default=True, help="chip profile of every accelerator")
@config_options()
@click.option("--plan", default="tp=64", show_default=True,
              help="how the ranks are used: tp=64 | attn=dp,ep=64 | attn=tp8,ep=64, with replicas=N, tbo=on, "
                   "weights=fp8")
@click.option("--prefill", default=None, metavar="PLAN",
              help="disaggregated: the prefill pool's plan (ranks from 0), with --decode (instead of --plan)")
@click.option("--decode", default=None, metavar="PLAN", help="disaggregated: the decode pool's plan (the next ranks)")
@click.option("--workload", default="azure-conv", show_default=True,
              help="FILE.csv (Azure trace format) | azure-conv | poisson:rate=R,in=N,out=M | "
                   "closed:users=U,in=N,out=M (in/out: N, uniform:A-B, lognormal:MEAN,SIGMA, empirical:FILE.csv)")
@click.option("--requests", type=int, default=None, metavar="N", help="serve the first N requests")
@click.option("--duration", "duration_s", type=float, default=None, metavar="S",
              help="serve the requests arriving in the first S seconds")
@click.option("--rate", type=float, default=None, metavar="R",
              help="rescale a trace's arrivals to R requests/s (Poisson: its rate)")
@click.option("--slo-ttft-ms", type=float, default=None, help="time-to-first-token target for goodput (ms)")
@click.option("--slo-tpot-ms", type=float, default=None, help="time-per-output-token target for goodput (ms)")
@click.option("--engine", type=click.Choice(("analytic", "packet")), default="analytic", show_default=True,
              help="engine of the step model's simulated steps")
@click.option("--token-budget", type=int, default=8192, show_default=True,
              help="tokens per step per attention group (decode first, then prefill chunks)")
@click.option("--max-seqs", type=int, default=None,
              help="running sequences per attention group [default: 1024, at most --token-budget]")
@click.option("--balance", type=click.Choice(("least_tokens", "round_robin", "kv_aware")), default="least_tokens",
              show_default=True, help="how arriving requests are spread over attention groups: the least outstanding "
                                      "tokens, in turn, or the most KV room (capacity - KV held - outstanding)")
@click.option("--shared-prefix", default=None, metavar="F[:K]",
              help="prompts start with one of K shared prefixes (default 1) making up the share F of each prompt (a "
                   "system prompt): a prefix cache per attention group reuses their KV")
@click.option("--kv-tier", type=click.Choice(("hbm", "host")), default="hbm", show_default=True,
              help="where KV may live: hbm (a preempted sequence is recomputed) or host (its KV is offloaded to "
                   "its host domain's host memory over the fabric and reloaded: topology.host_memory)")
@json_option("write the results as JSON")
@timeline_option()
@click.option("--quiet", is_flag=True, help="no progress bar; print one line")
@friendly
def main(model, hf_config, chip, preset, config_file, sets, seed, plan, prefill, decode, workload, requests,
         duration_s, rate,
         slo_ttft_ms, slo_tpot_ms, engine, token_budget, max_seqs, balance, shared_prefix, kv_tier, json_path,
         timeline_path, quiet):
    check_writable(json_path)
    check_writable(timeline_path, "--timeline")
    if requests is not None and duration_s is not None:
        raise click.UsageError("give --requests or --duration, not both")
    from fabric.serve import serve
    if not model and not hf_config:
        model = "deepseek-r1"
    cfg = load(preset, config_file, sets, seed)
    with _bar(not quiet) as (progress, on_point):
        r = serve(model=model, hf_config=hf_config, preset=preset, cfg=cfg, plan=plan, workload=workload,
                  requests=requests, duration_s=duration_s, rate=rate, slo_ttft_ms=slo_ttft_ms,
                  slo_tpot_ms=slo_tpot_ms, engine=engine, seed=cfg.sim.seed, chip=chip, token_budget=token_budget,
                  max_seqs=max_seqs, balance=balance, timeline=timeline_path, progress=progress, on_point=on_point,
                  prefill=prefill, decode=decode, kv_tier=kv_tier, shared_prefix=shared_prefix)
    if quiet:
        click.echo(f"{r['output_tokens_per_s']:.1f} output tokens/s, TTFT p50 {r['ttft_ms']['p50']:.1f} ms, "
                   f"TPOT p50 {r['tpot_ms']['p50'] or 0:.1f} ms, {r['finished']} of {r['requests']} requests")
    else:
        click.echo(render(r))
        if r.get("timeline"):
            t = r["timeline"]
            click.echo(f"  timeline             {t['path']}: {t['slices']} slices, {t['counter_events']} counter "
                       f"events")
    write_json(json_path, r, provenance(cfg, preset, config_file, sets, seed))
