"""`fabric-bench [--quick] [--json FILE]`: run the fixed benchmark suite (each case in its own process)."""
from __future__ import annotations

import click

from fabric.cli.common import Command, check_writable, friendly, json_option, write_json


@click.command(cls=Command, help="Run the fixed benchmark suite and print one table: packets, packet-hops, events, "
                                 "kernel wall time, events/s, packet-hops/s and peak RSS per case (each case runs in "
                                 "a fresh process). --quick runs only the small cases (the CI smoke test, < 20 s).")
@click.option("--quick", is_flag=True, help="small cases only (link-quick, oneshot-64, decode analytic, ring-1MB-64)")
@click.option("--case", "cases", multiple=True, metavar="NAME", help="run only this case (repeatable)")
@json_option("write the rows as a JSON list")
@click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True, metavar="N",
              help="run each case N times (fresh processes) and report the fastest: other jobs on a shared "
                   "machine only add time")
@click.option("--jobs", type=click.IntRange(1, 256), default=1, show_default=True, metavar="N",
              help="cases run at once, each in its own process; counts are the same whatever N, but cases that "
                   "share cores slow each other, so timings are only clean with 1")
@friendly
def main(quick, cases, json_path, repeat, jobs):
    check_writable(json_path)
    from fabric.experiments.bench import render, run_suite
    rows = run_suite(quick=quick, cases=list(cases) or None, repeat=repeat, jobs=jobs,
                     progress=lambda c: click.echo(f"running {c} ...", err=True))
    click.echo(render(rows, repeat))
    write_json(json_path, rows)
