"""HBM-only against HBM + host-memory KV tier as load grows (docs/serving.md): DeepSeek-R1, tp=64 on sd200 (the
plan with the least KV per rank: 0.55 M tokens for the whole deployment), serving the shipped Azure trace with its
arrivals rescaled to each rate.

    python tools/serve_tier_experiment.py [--requests 1000] [--out docs/data/serve_tier.json]

Per rate, three deployments: HBM only (a preempted sequence is recomputed), HBM + host tier (it is swapped to its
host domain's host memory over the fabric and back), and HBM + host tier with a prefix cache on prompts that share
half their tokens with one of 8 prefixes (--shared-prefix 0.5:8: a system prompt / few-shot template; a property
of the workload we assume, the trace does not say). Every deployment is made once and serves every rate.
"""
from __future__ import annotations

import json

import click

RATES = (6.0, 10.0, 14.0)
SLO = dict(slo_ttft_ms=3000.0, slo_tpot_ms=100.0)   # the serving experiments' own targets (docs/serving.md)
CASES = (("HBM only", "hbm", None), ("HBM + host", "host", None), ("HBM + host, prefix cache", "host", "0.5:8"))


@click.command()
@click.option("--requests", default=1000, show_default=True)
@click.option("--out", default="docs/data/serve_tier.json", show_default=True)
def main(requests, out):
    from fabric.serve import Deployment
    deps = {tier: Deployment(model="deepseek-r1", plan="tp=64", kv_tier=tier) for tier in ("hbm", "host")}
    rows = []
    click.echo("| KV | rate (req/s) | output tok/s per acc | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | goodput (req/s) "
               "| preemptions (recompute) | swaps | prefix hit (% of prompt tokens) | offload + reload (GB) |\n"
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rate in RATES:
        for name, tier, prefix in CASES:
            r = deps[tier].serve("azure-conv", requests=requests, rate=rate, shared_prefix=prefix, **SLO)
            h = r.get("host_tier", {})
            c = r.get("prefix_cache", {})
            row = dict(kv=name, rate_per_s=rate, tokens_per_s_per_accelerator=r["output_tokens_per_s_per_accelerator"],
                       ttft_ms=r["ttft_ms"], tpot_ms=r["tpot_ms"], goodput_requests_per_s=r["goodput_requests_per_s"],
                       preemptions=r["preemptions"], swaps=h.get("swaps", 0),
                       prefix_hit_fraction=c.get("hit_fraction_of_prompts", 0.0),
                       tier_gb=(h.get("offload_bytes", 0.0) + h.get("reload_bytes", 0.0)) / 1e9,
                       tier_wait_s=h.get("wait_s", 0.0), kv_use_max=r["kv_use_max"], wall_s=r["wall_s"])
            rows.append(row)
            click.echo(f"| {name} | {rate:g} | {row['tokens_per_s_per_accelerator']:.1f} | "
                       f"{r['ttft_ms']['p50']:.0f} / {r['ttft_ms']['p99']:.0f} | "
                       f"{r['tpot_ms']['p50']:.1f} / {r['tpot_ms']['p99']:.1f} | {row['goodput_requests_per_s']:.2f} | "
                       f"{row['preemptions']} | {row['swaps']} | {100 * row['prefix_hit_fraction']:.1f} | "
                       f"{row['tier_gb']:.2f} |")
    with open(out, "w") as fh:
        json.dump(dict(requests=requests, slo=SLO, plan="tp=64", model="deepseek-r1", preset="sd200", rows=rows), fh,
                  indent=1)


if __name__ == "__main__":
    main()
