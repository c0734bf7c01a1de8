"""Packet vs analytic engine: the same collective on both, per preset, op and size (issue 16 item 9).

    python tools/engine_agreement.py                      # the issue-16 presets, allreduce/allgather/reduce_scatter
    python tools/engine_agreement.py -p dgx-h100 --ops allreduce --min-bytes 8 --max-bytes 16M --factor 4
    python tools/engine_agreement.py --ops allreduce --algorithms ring,hierarchical,tree,nvls,nvls_tree \
        --min-bytes 16M --max-bytes 1G --json forced.json     # forced algorithms up to 1 GB (issue 32 item 3)

docs/data/engine_agreement_forced.json holds that run's rows, the sd200 tiers' at 64 ranks and the 2x8 presets'
with a 64 MiB end-to-end window (docs/collectives.md §Engine agreement to 1 GB).

Runs `fabric.experiments.probe_collective.probe_collective` with each preset's own library (the nccl-like profile on
every issue-16 preset) at sizes min, min x factor, ... and max, on the packet and on the analytic engine, over
every accelerator of the preset (--ranks: the first N), and prints per size the algorithm the tuner picked (or the
one --algorithms forces; an algorithm a preset's library or fabric does not have is left out for that preset) and
the ratio analytic / packet, then the worst |ratio - 1| per preset. Exit status 1 when the worst is above --tolerance (default 5 %:
"the packet and analytic engines agree within 5 % on every preset above for 8 B .. 16 MB").
docs/calibration.md §Engine agreement quotes the committed output.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import warnings

import click

from fabric.cli.common import Command, friendly
from fabric.config import load_config
from fabric.errors import ConfigError
from fabric.network import build
from fabric.experiments import nccl_tests, pool
from fabric.experiments.probe_collective import probe_collective

PRESETS = ("dgx-a100", "dgx-h100", "dgx-b200", "hgx-h100-2x8-ib", "hgx-h200-2x8-roce", "hgx-h100-ib", "hgx-h800-ib")
OPS = ("allreduce", "allgather", "reduce_scatter")       # the default; alltoall on request (--ops)
ALL_OPS = OPS + ("alltoall",)


def size_steps(lo: int, hi: int, factor: int) -> list[int]:
    """lo, lo x factor, ... below hi, and hi itself (the sweep always ends on its largest size)."""
    out, s = [], lo
    while s < hi:
        out.append(s)
        s *= factor
    return out + [hi]


def agreement(preset: str, op: str, nbytes: int, algorithm: str | None = None, ranks: int | None = None) -> dict:
    """One size on both engines: times, what the library ran (`algorithm` forces one), and analytic / packet."""
    cfg = load_config(preset)
    topo = build(cfg)
    with warnings.catch_warnings():     # nccl-like's clamp notice where a fabric hop exceeds a fitted step
        warnings.simplefilter("ignore", UserWarning)
        got = {e: probe_collective(cfg, op, nbytes, engine=e, topo=topo, algorithm=algorithm, ranks=ranks)
               for e in ("packet", "analytic")}
    p, a = got["packet"], got["analytic"]
    return dict(preset=preset, op=op, bytes=nbytes, ranks=p["ranks"], algorithm=p["algorithm"],
                forced=algorithm is not None, protocol=p.get("protocol"), channels=p.get("channels"),
                packet_us=p["time_us"], analytic_us=a["time_us"], ratio=a["time_us"] / p["time_us"])


def runs_on(preset: str, op: str, algorithm: str | None, ranks: int | None = None) -> bool:
    """Whether the preset's library and fabric have `algorithm` for `op` (None: the library's own choice)."""
    if algorithm is None:
        return True
    from fabric.collectives import library, policy
    cfg = load_config(preset)
    if cfg.collectives.library == "sd200":
        return algorithm in policy.CANDIDATES.get(op, ("direct",))
    view = library.fabric_view(cfg)
    n = ranks or view.topo.n_ranks
    cc = dataclasses.replace(cfg.collectives, policy="auto")
    return algorithm in {a for a, _ in library.candidates(op, 1, n, cc, view)}


def run(presets, ops, byte_sizes, jobs: int | None = None, progress=None, algorithms=(None,),
        ranks: int | None = None) -> list[dict]:
    pts = [(p, o, s, a, ranks) for p in presets for o in ops for a in algorithms if runs_on(p, o, a, ranks)
           for s in byte_sizes]
    return pool.pmap(agreement, pts, jobs, progress)


def worst(rows: list[dict]) -> dict:
    return max(rows, key=lambda r: abs(r["ratio"] - 1))


def table(rows: list[dict]) -> str:
    lines = [f"{'preset':18s} {'op':14s} {'bytes':>9s} {'packet us':>10s} {'analytic us':>11s} {'ana/pkt':>7s}  "
             f"chosen"]
    for r in rows:
        lines.append(f"{r['preset']:18s} {r['op']:14s} {r['bytes']:9d} {r['packet_us']:10.2f} {r['analytic_us']:11.2f} "
                     f"{r['ratio']:7.3f}  {r['algorithm']}/{r['protocol']}/{r['channels']}"
                     f"{' (forced)' if r.get('forced') else ''}")
    lines.append("")
    for p in dict.fromkeys(r["preset"] for r in rows):
        mine = [r for r in rows if r["preset"] == p]
        if not mine:
            continue
        w = worst(mine)
        lines.append(f"worst {p:18s} {100 * (w['ratio'] - 1):+6.2f}%  ({w['op']} {w['bytes']} B, "
                     f"{w['algorithm']}/{w['protocol']})")
    return "\n".join(lines)


@click.command(cls=Command)
@click.option("--preset", "-p", "presets", multiple=True, help=f"repeatable [default: {', '.join(PRESETS)}]")
@click.option("--ops", default=",".join(OPS), show_default=True, help="comma separated")
@click.option("--min-bytes", default="8", show_default=True)
@click.option("--max-bytes", default="16M", show_default=True)
@click.option("--factor", default=4, show_default=True, type=click.IntRange(2, 1024))
@click.option("--tolerance", default=0.05, show_default=True, type=click.FloatRange(0, 10),
              help="exit 1 when some |analytic/packet - 1| is above this")
@click.option("--algorithms", default="auto", show_default=True,
              help="comma separated; auto = the library's choice, a name forces that algorithm where the preset has "
                   "it (e.g. ring,tree,nvls_tree; sd200: oneshot,twoshot,ring)")
@click.option("--ranks", default=None, type=click.IntRange(2, 1 << 20), help="group: ranks 0..N-1 [default: all]")
@click.option("--jobs", default=None, type=click.IntRange(1, 256), help="processes [default: the cores]")
@click.option("--json", "json_path", default=None, help="write the rows as JSON")
@friendly
def main(presets, ops, min_bytes, max_bytes, factor, tolerance, algorithms, ranks, jobs, json_path):
    lo = nccl_tests.parse_size(min_bytes, "--min-bytes")
    hi = nccl_tests.parse_size(max_bytes, "--max-bytes")
    if hi < lo:
        raise ConfigError(f"need --min-bytes <= --max-bytes, got {lo} and {hi}")
    ops = tuple(o.strip() for o in ops.split(",") if o.strip())
    bad = [o for o in ops if o not in ALL_OPS]
    if bad or not ops:
        raise ConfigError(f"--ops={','.join(bad)!r} is not allowed; use a comma-separated list of {', '.join(ALL_OPS)}")
    for p in presets:
        load_config(p)          # an unknown preset: one line before any run
    algs = tuple(None if a.strip() == "auto" else a.strip() for a in algorithms.split(",") if a.strip())
    if not algs:
        raise ConfigError("--algorithms is empty; give auto or algorithm names, comma separated")
    rows = run(presets or PRESETS, ops, size_steps(lo, hi, factor), jobs, algorithms=algs, ranks=ranks)
    if not rows:
        raise ConfigError(f"no preset given has --algorithms={algorithms} for --ops={','.join(ops)}")
    print(table(rows))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    sys.exit(1 if abs(worst(rows)["ratio"] - 1) > tolerance else 0)


if __name__ == "__main__":
    main()
