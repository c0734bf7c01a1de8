"""`fabric-validate`: the published SD200 figures against the emulator (fabric/experiments/validate.py,
docs/calibration.md)."""
from __future__ import annotations

import time

import click

from fabric.cli.common import ENGINES, Command, check_writable, count_bar, friendly, json_option, write_json


@click.command(cls=Command, help="Run the validation experiments and print figure, published, emulated, ratio, "
                                 "tolerance, verdict; then one row per calibration table (the nccl-like library on "
                                 "the matching preset vs published nccl-tests measurements: geomean error and "
                                 "tolerance), the AllReduce sweep and the sensitivity table.")
@json_option("write the validation rows (name, published, emulated, unit, tolerance, within_tolerance, ...), then "
             "the calibration rows (kind=calibration: geomean_error, tolerance, within_tolerance, engine, detail)")
@click.option("--sweep-engine", type=click.Choice(ENGINES), default="packet", show_default=True,
              help="engine of the 16 KB..16 MB AllReduce sweeps (figures 4 and 5)")
@click.option("--calibration-engine", type=click.Choice(ENGINES), default="analytic", show_default=True,
              help="engine of the calibration rows (every size of each published table, 8 B..16 GB)")
@click.option("--sensitivity/--no-sensitivity", default=True, show_default=True,
              help="also print how TPOT and the 14 KB AllReduce move with +-50% of five parameters")
@click.option("--serving/--no-serving", default=True, show_default=True,
              help="also run the serving experiments (16 vs 64 cards, TPOT over 1024 tokens, batch 1..64; "
                   "analytic engine, ~15 s)")
@click.option("--jobs", type=click.IntRange(1, 256), default=None, metavar="N",
              help="processes that run the independent experiments  [default: the cores available; 1: serial; the "
                   "results are identical]")
@click.option("--quiet", is_flag=True, help="no progress bar")
@friendly
def main(json_path, sweep_engine, calibration_engine, sensitivity, serving, jobs, quiet):
    check_writable(json_path)
    from fabric.experiments import validate as V
    t0 = time.perf_counter()
    n = len(V.runs(sweep_engine, calibration_engine, serving=serving, sensitivity=sensitivity))
    with count_bar(n, "runs", not quiet, tick=True) as step:
        r = V.validate(sweep_engine, calibration_engine, serving=serving, sensitivity=sensitivity, jobs=jobs,
                       progress=step)
    sens = r["sensitivity"]
    click.echo(V.format_rows(r["rows"]))
    click.echo("")
    click.echo(f"calibration tables (fabric/data/calibration/, docs/calibration.md): nccl-like library on the "
               f"preset of the measured system, geomean error exp(mean |ln(pred/meas)|) - 1 over the table's sizes")
    click.echo(V.format_calibration(r["calibration"]))
    click.echo("")
    click.echo(f"AllReduce 16 KB..16 MB on 64 ranks ({sweep_engine} engine): opt = sd200 library, unopt = nccl-like "
               f"library, hd = nccl-like forced to halving-doubling, roce = scaleout-roce + nccl-like")
    click.echo(V.format_sweep(r["sweep"]))
    if serving:
        click.echo("")
        click.echo("batch 1..64, DeepSeek-R1 TP64 on sd200 (analytic engine; no published figure to judge)")
        click.echo(V.format_batch_sweep(r["serving"]["batch"]))
    if sensitivity:
        click.echo("")
        click.echo("sensitivity (TPOT: packet engine; AllReduce 14,336 B: packet engine; each parameter alone)")
        click.echo(V.format_sensitivity(sens))
    passed = sum(x["within_tolerance"] for x in r["rows"])
    cal = sum(x["within_tolerance"] for x in r["calibration"])
    click.echo(f"\n{passed} of {len(r['rows'])} figures and {cal} of {len(r['calibration'])} calibration tables "
               f"within tolerance; wall {time.perf_counter() - t0:.1f} s")
    write_json(json_path, r["rows"] + r["calibration"])
