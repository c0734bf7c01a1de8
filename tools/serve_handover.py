"""How much of TTFT is the KV hand-over: PD-disaggregated DeepSeek-R1 on sd200 against an HGX H100 InfiniBand
cluster of the same size (docs/serving.md), the same accelerator profile on both, so only the fabric differs.

    python tools/serve_handover.py [--requests 500] [--rate 4] [--chip h100] [--out docs/data/serve_handover.json]

64 ranks either way: prefill attn=tp8,ep=32 on ranks 0-31, decode attn=dp,ep=32 on ranks 32-63, FP8 weights; on
sd200 (8 host domains of 8 on the fabric switches) and on hgx-h100-ib with 8 hosts (8 GPUs a node on NVSwitch, one
NDR 400G NIC a GPU). The shipped Azure trace, its arrivals rescaled to --rate. A client of a PD deployment sees its
first token once the decode pool has the KV (the decode pool streams the response): TTFT seen = the prefill's first
token + the wait for the KV after it (the hand-over, and any wait for room in the decode pool); reported: its p50 /
mean / p99, the hand-over's share of it (mean over requests of wait / TTFT seen), the engine's hand-over time per
token and the bytes moved.
"""
from __future__ import annotations

import json

import click
import numpy as np

PD = dict(prefill="attn=tp8,ep=32,weights=fp8", decode="attn=dp,ep=32,weights=fp8")
FABRICS = {"sd200": ("sd200", {}), "HGX H100 + IB (8 nodes)": ("hgx-h100-ib", {"topology.scaleout.hosts": 8})}


@click.command()
@click.option("--requests", default=500, show_default=True)
@click.option("--rate", default=4.0, show_default=True, help="requests/s")
@click.option("--chip", default="h100", show_default=True, help="the accelerator profile on both fabrics")
@click.option("--out", default="docs/data/serve_handover.json", show_default=True)
def main(requests, rate, chip, out):
    from fabric.config import load_config, with_overrides
    from fabric.serve.disagg import Disaggregated
    rows = []
    click.echo("| fabric | TTFT seen p50 / mean / p99 (ms) | hand-over mean / p99 (ms) | hand-over share of TTFT seen "
               "| us a token | GB moved |\n|---|---:|---:|---:|---:|---:|")
    for name, (preset, sets) in FABRICS.items():
        cfg = with_overrides(load_config(preset), sets) if sets else load_config(preset)
        r = Disaggregated(model="deepseek-r1", preset=preset, cfg=cfg, chip=chip, **PD).serve(
            "azure-conv", requests=requests, rate=rate)
        pr = r["per_request"]
        ttft = np.array(pr["ttft_ms"])
        wait = np.array([0.0 if x is None else x for x in pr["kv_handover_ms"]])
        seen = ttft + wait
        h = r["kv_handover"]
        row = dict(fabric=name, preset=preset, sets=sets, chip=chip, rate_per_s=rate, requests=requests,
                   ttft_seen_ms=dict(p50=float(np.percentile(seen, 50)), mean=float(seen.mean()),
                                     p99=float(np.percentile(seen, 99))),
                   ttft_prefill_ms=r["ttft_ms"], handover_mean_ms=h["mean_ms"], handover_p99_ms=h["p99_ms"],
                   handover_share=float((wait / seen).mean()), us_per_token=h["us_per_token"],
                   fixed_us=h["fixed_us"], handover_gb=h["bytes"] / 1e9, tpot_ms=r["tpot_ms"], wall_s=r["wall_s"])
        rows.append(row)
        s = row["ttft_seen_ms"]
        click.echo(f"| {name} | {s['p50']:.1f} / {s['mean']:.1f} / {s['p99']:.1f} | {h['mean_ms']:.2f} / "
                   f"{h['p99_ms']:.2f} | {100 * row['handover_share']:.1f} % | {h['us_per_token']:.3f} | "
                   f"{row['handover_gb']:.1f} |")
    with open(out, "w") as fh:
        json.dump(dict(plan=PD, model="deepseek-r1", rows=rows), fh, indent=1)


if __name__ == "__main__":
    main()
