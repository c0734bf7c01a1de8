"""`fabric-sweep GRID.toml --out results.csv|.parquet`: replay (or serve a workload at) every point of a grid in
parallel on Dask distributed (fabric/experiments/sweep.py; docs/sweep-and-plots.md)."""
from __future__ import annotations

import click

from fabric.cli.common import Command, check_writable, count_bar, friendly


@click.command(cls=Command, help="Replay every point of a grid (TOML: [sweep] trace, preset, engine, seed, mode; "
                                 "[set] fixed overrides; [grid] swept keys with lists of values), or serve a "
                                 "workload at every point ([serve]: fabric-serve's arguments, swept as serve.KEY), "
                                 "in parallel on Dask distributed and write one row per point to CSV or Parquet. "
                                 "Points already in the output (same effective configuration) are skipped, so a "
                                 "stopped sweep resumes; a point that fails is reported (exit code 1) and the "
                                 "others are kept.")
@click.argument("grid", type=click.Path(dir_okay=False))
@click.option("--out", "-o", "out", required=True, type=click.Path(dir_okay=False),
              help="results file: .csv, or .parquet (needs pyarrow)")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="an existing Dask scheduler (e.g. tcp://10.0.0.1:8786) [default: a LocalCluster on this machine]")
@click.option("--workers", type=click.IntRange(1), default=None,
              help="worker processes of the LocalCluster [default: one per core]")
@click.option("--serial", is_flag=True, help="run the points one by one in this process (no Dask), for comparison")
@click.option("--dry-run", is_flag=True, help="print the points and their hashes, run nothing")
@click.option("--quiet", is_flag=True, help="no progress bar")
@friendly
def main(grid, out, scheduler, workers, serial, dry_run, quiet):
    import sys

    from fabric.experiments import sweep as S
    check_writable(out, "--out")
    S.check_output(out)
    points = S.load_grid(grid)
    if dry_run:
        for p in points:
            click.echo(f"{p.key()}  {_values(p)}")
        click.echo(f"{len(points)} points")
        return
    with count_bar(len(points), "points", not quiet, tick=True) as step:
        info = S.run_sweep(points, out, scheduler=scheduler, workers=workers, progress=step, serial=serial)
    where = "serial" if serial else (f"scheduler {scheduler}" if scheduler else "LocalCluster")
    failed = info["failed"]
    click.echo(f"{info['points']} points: {info['run']} run{f' ({len(failed)} failed)' if failed else ''}, "
               f"{info['skipped']} already in {out}; {info['wall_s']:.1f} s wall on {info['workers']} worker(s) "
               f"({where})")
    for p, why in failed:
        click.echo(f"error: point {p.key()} ({_values(p)}): {why}", err=True)
    if failed:      # the rows of the others are written; running the sweep again retries only these
        sys.exit(1)


def _values(p) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.swept.items()) or "(no swept keys)"
