"""The serving experiments of docs/serving.md: DeepSeek-R1 on sd200 serving the shipped Azure trace.

    python tools/serve_experiments.py [--requests 1000] [--out docs/data/serve_experiments.json]

1. One user, prompt 4096 and 1024 output tokens, tp=64: the served TPOT against the decode step's and the
   published 8.9 ms (a finding, never a fit).
2. Throughput and latency against load (the trace's arrivals rescaled to each rate), tp=64 against
   attn=dp,ep=64 (both BF16 weights), on the sd200 fabric as it is and with its link bandwidth x0.5 and x2 and its
   link latency (PHY, FEC and wire) x2: where along the curve the fabric starts to matter, and by how much.
3. (--pd) PD disaggregation against co-located serving at the same SLOs, 64 ranks and FP8 weights either way:
   prefill attn=tp8,ep=32 + decode attn=dp,ep=32 against attn=dp,ep=64.
Every point is a fabric.serve.Deployment (one per plan and fabric: its step model is shared by the rates) serving
the first --requests requests. Prints a markdown table per plan; --out writes every row as JSON.
"""
from __future__ import annotations

import json
import time

import click

PLANS = {"tp=64": (1, 2, 4, 6, 8, 10), "attn=dp,ep=64": (4, 8, 16, 32, 48, 64)}
SLO = dict(slo_ttft_ms=3000.0, slo_tpot_ms=100.0)   # the experiment's own targets (an interactive chat), not fitted


def variants(base) -> dict:
    """The fabric variants as --set overrides, scaled from the preset's own values."""
    p = base.phy
    return {"sd200": {},
            "bandwidth x0.5": {"phy.lane_rate_gbps": p.lane_rate_gbps * 0.5},
            "bandwidth x2": {"phy.lane_rate_gbps": p.lane_rate_gbps * 2},
            "link latency x2": {"phy.tx_latency_ns": p.tx_latency_ns * 2, "phy.rx_latency_ns": p.rx_latency_ns * 2,
                                "phy.fec_latency_ns": p.fec_latency_ns * 2, "phy.wire_ns_per_m": p.wire_ns_per_m * 2}}


def one_user() -> dict:
    import fabric.serve
    from fabric.capture import capture
    from fabric.config import load_config
    from fabric.replay import run_step
    r = fabric.serve(model="deepseek-r1", plan="tp=64", workload="closed:users=1,in=4096,out=1024", requests=1)
    step = run_step(capture("deepseek-r1", tp=64, batch=1, context=4096 + 512), load_config("sd200"),
                    engine="analytic").summary["step_us"]
    return dict(tpot_ms=r["tpot_ms"]["mean"], ttft_ms=r["ttft_ms"]["mean"], step_at_4608_ms=step / 1e3,
                published_tpot_ms=8.9, tokens_per_s=1e3 / r["tpot_ms"]["mean"])


PD = dict(prefill="attn=tp8,ep=32,weights=fp8", decode="attn=dp,ep=32,weights=fp8")
COLOCATED = "attn=dp,ep=64,weights=fp8"


def pd_vs_colocated(rates, requests) -> list[dict]:
    from fabric.serve import Deployment
    from fabric.serve.disagg import Disaggregated
    keys = ("output_tokens_per_s_per_accelerator", "ttft_ms", "tpot_ms", "goodput_requests_per_s",
            "exposed_comm_fraction")
    click.echo("| serving | rate (req/s) | output tok/s per acc | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | goodput "
               "(req/s) | KV hand-over mean (ms) |\n|---|---:|---:|---:|---:|---:|---:|")
    deps = {"co-located": Deployment(model="deepseek-r1", plan=COLOCATED),
            "PD": Disaggregated(model="deepseek-r1", **PD)}          # each made once for every rate
    rows = []
    for rate in rates:
        for name, dep in deps.items():
            r = dep.serve("azure-conv", requests=requests, rate=rate, **SLO)
            hand = r.get("kv_handover", {}).get("mean_ms")
            rows.append(dict(serving=name, rate=rate, plan=r["plan"], kv_handover_ms=hand, **{k: r[k] for k in keys}))
            click.echo(f"| {name} | {rate:g} | {r['output_tokens_per_s_per_accelerator']:.1f} | "
                       f"{r['ttft_ms']['p50']:.0f} / {r['ttft_ms']['p99']:.0f} | {r['tpot_ms']['p50']:.1f} / "
                       f"{r['tpot_ms']['p99']:.1f} | {r['goodput_requests_per_s']:.2f} | "
                       f"{'' if hand is None else f'{hand:.2f}'} |")
    return rows


@click.command()
@click.option("--requests", default=1000, show_default=True)
@click.option("--plan", "plans", multiple=True, type=click.Choice(list(PLANS)), default=tuple(PLANS),
              help="plans to run (repeatable) [default: all]")
@click.option("--pd", "pd_rates", default=None, help="run only experiment 3 at these rates (comma-separated)")
@click.option("--out", default=None, help="write every row as JSON")
def main(requests, plans, pd_rates, out):
    from fabric.config import load_config
    from fabric.serve import Deployment
    t0 = time.perf_counter()
    if pd_rates:
        rows = pd_vs_colocated([float(x) for x in pd_rates.split(",")], requests)
        if out:
            with open(out, "w") as fh:
                json.dump(dict(slo=SLO, rows=rows), fh, indent=1)
                fh.write("\n")
        click.echo(f"\n{time.perf_counter() - t0:.0f} s")
        return
    u = one_user()
    click.echo(f"one user, 4096 in / 1024 out, tp=64: TPOT {u['tpot_ms']:.2f} ms ({u['tokens_per_s']:.1f} tokens/s), "
               f"TTFT {u['ttft_ms']:.0f} ms; the decode step at context 4608 {u['step_at_4608_ms']:.2f} ms; "
               f"published 8.9 ms")
    rows = []
    base = load_config("sd200")
    for plan in plans:
        click.echo(f"\n{plan}\n| fabric | rate (req/s) | output tok/s per acc | TTFT p50 / p99 (ms) | "
                   f"TPOT p50 / p99 (ms) | goodput (req/s) | exposed comm | batch mean |\n"
                   f"|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, sets in variants(base).items():
            dep = Deployment(model="deepseek-r1", cfg=load_config("sd200", overrides=sets or None), plan=plan)
            for rate in PLANS[plan]:
                r = dep.serve("azure-conv", requests=requests, rate=float(rate), **SLO)
                row = dict(plan=plan, fabric=name, sets=sets, rate=rate, requests=requests,
                           **{k: r[k] for k in ("output_tokens_per_s", "output_tokens_per_s_per_accelerator",
                                                "input_tokens_per_s", "ttft_ms", "tpot_ms", "e2e_ms", "itl_ms",
                                                "goodput_requests_per_s", "exposed_comm_fraction", "batch_mean",
                                                "kv_use_mean", "preemptions", "duration_s", "fabric_bytes")})
                rows.append(row)
                click.echo(f"| {name} | {rate} | {r['output_tokens_per_s_per_accelerator']:.1f} | "
                           f"{r['ttft_ms']['p50']:.0f} / {r['ttft_ms']['p99']:.0f} | "
                           f"{r['tpot_ms']['p50']:.1f} / {r['tpot_ms']['p99']:.1f} | "
                           f"{r['goodput_requests_per_s']:.2f} | {100 * r['exposed_comm_fraction']:.1f} % | "
                           f"{r['batch_mean']:.1f} |")
    click.echo(f"\n{time.perf_counter() - t0:.0f} s")
    if out:
        with open(out, "w") as fh:
            json.dump(dict(one_user=u, slo=SLO, rows=rows), fh, indent=1)
            fh.write("\n")


if __name__ == "__main__":
    main()
