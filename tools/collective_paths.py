"""Measure the sd200 library's AllReduce paths across sizes and derive where each one wins.

    python tools/collective_paths.py --ranks 8,64 --max-bytes 4M --json fabric/data/collective_paths_sd200.json

Runs every AllReduce algorithm of the sd200 library (store: oneshot, twoshot, ring; cache-less loads:
oneshot_load, twoshot_load; cached: oneshot_cached, twoshot_cached) at doubling sizes on a preset (default sd200)
with the packet engine (fabric.experiments.probe_collective, ranks 0..n-1), then prints per group size the time of each
and the fastest, and the crossovers: the largest size at which each path (and each tier: one-shot family vs
two-shot family vs ring) is still the fastest. docs/collectives.md §Paths quotes the committed output.
"""
from __future__ import annotations

import json
import sys

import click

from fabric.config import load_config
from fabric.network import build
from fabric.experiments.probe_collective import probe_collective, sizes

ALGS = ("oneshot", "oneshot_load", "oneshot_cached", "twoshot", "twoshot_load", "twoshot_cached", "ring")
TIER = {a: a.split("_")[0] for a in ALGS}
PATH = {a: ("load" if a.endswith("_load") else "cached" if a.endswith("_cached") else "store") for a in ALGS}


def measure(preset: str, ranks: list[int], byte_sizes: list[int], engine: str, oneshot_max: int) -> dict:
    cfg = load_config(preset)
    topo = build(cfg)
    out = {"preset": preset, "engine": engine, "ranks": {}}
    for n in ranks:
        rows = []
        for m in byte_sizes:
            t = {a: probe_collective(cfg, "allreduce", m, algorithm=a, ranks=n, engine=engine, topo=topo)["time_us"]
                 for a in ALGS if not (TIER[a] == "oneshot" and m > oneshot_max)}
            best = min(t, key=t.get)
            rows.append({"bytes": m, "time_us": {a: round(v, 3) for a, v in t.items()}, "best": best})
            print(f"n={n:4d} {m:>10d} B  best {best:15s} " + " ".join(f"{a}={v:.2f}" for a, v in t.items()),
                  file=sys.stderr, flush=True)
        out["ranks"][str(n)] = {"rows": rows, "crossovers": crossovers(rows)}
    return out


def crossovers(rows: list[dict]) -> dict:
    """The largest measured size at which each tier and each path was the fastest (None: never)."""
    last_tier: dict = {}
    last_path: dict = {}
    for r in rows:
        last_tier[TIER[r["best"]]] = r["bytes"]
        # the fastest path within the tier that wins this size
        tier = TIER[r["best"]]
        ts = {a: v for a, v in r["time_us"].items() if TIER[a] == tier}
        last_path[f"{tier}_{PATH[min(ts, key=ts.get)]}"] = r["bytes"]
    return {"tier_max_bytes": last_tier, "path_max_bytes": last_path}


@click.command()
@click.option("--preset", "-p", default="sd200", show_default=True)
@click.option("--ranks", default="8,64", show_default=True, help="group sizes, comma separated")
@click.option("--min-bytes", default="8", show_default=True)
@click.option("--max-bytes", default="4M", show_default=True)
@click.option("--oneshot-max-bytes", default="1M", show_default=True,
              help="skip the one-shot family above this (n(n-1)M bytes on the fabric: hopeless and slow)")
@click.option("--engine", type=click.Choice(["packet", "analytic"]), default="packet", show_default=True)
@click.option("--json", "json_path", default=None, help="write the measurement here")
def main(preset, ranks, min_bytes, max_bytes, oneshot_max_bytes, engine, json_path):
    from fabric.experiments import nccl_tests
    rk = [int(x) for x in ranks.split(",")]
    res = measure(preset, rk, sizes(min_bytes, max_bytes), engine,
                  nccl_tests.parse_size(oneshot_max_bytes, "--oneshot-max-bytes"))
    for n, v in res["ranks"].items():
        print(f"n={n}: tiers {v['crossovers']['tier_max_bytes']}  paths {v['crossovers']['path_max_bytes']}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
