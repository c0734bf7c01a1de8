"""The step model's interpolation error against direct simulation (docs/serving.md).

    python tools/serve_step_error.py [--model deepseek-r1] [--plan tp=64] [--points 12] [--seed 0] [--out FILE]

Draws steps a served workload makes (decode sequences and their mean context; for a third of them a prefill chunk
with its prefix), asks fabric.serve.stepmodel.StepModel for each (grid + interpolation) and simulates the same step
captured as it is (StepModel.direct), and prints one row per step and the largest and mean relative error. --out
writes the rows as JSON (docs/data/serve_step_error_*.json).
"""
from __future__ import annotations

import json
import time

import click
import numpy as np


@click.command()
@click.option("--model", default="deepseek-r1", show_default=True)
@click.option("--preset", default="sd200", show_default=True)
@click.option("--plan", default="tp=64", show_default=True)
@click.option("--engine", default="analytic", show_default=True)
@click.option("--points", default=12, show_default=True)
@click.option("--max-decode", default=512, show_default=True, help="largest decode batch per group drawn")
@click.option("--seed", default=0, show_default=True)
@click.option("--out", default=None, help="write the rows as JSON")
def main(model, preset, plan, engine, points, max_decode, seed, out):
    from fabric.capture import load_chip, resolve_model
    from fabric.capture.spec import spec_from_config
    from fabric.config import load_config
    from fabric.serve.plan import parse_plan
    from fabric.serve.stepmodel import StepModel
    spec = spec_from_config(resolve_model(model)[1], model)
    sm = StepModel(model, None, spec, parse_plan(plan), load_chip("sd200-accelerator"), load_config(preset),
                   engine=engine)
    rng = np.random.default_rng(seed)
    rows = []
    t0 = time.perf_counter()
    for i in range(points):
        dec = int(np.exp(rng.uniform(0, np.log(max_decode))))
        ctx = int(rng.uniform(100, 8000))
        pre = int(rng.uniform(16, 2048)) if i % 3 == 2 else 0
        prefix = int(rng.uniform(0, 4096)) if pre else 0
        pairs = pre * prefix + pre * (pre + 1) / 2
        got = sm.step(dec + pre, dec * ctx, pairs, prefill=pre, prompts=1 if pre else 0)[0]
        want = sm.direct(dec, ctx, pre, prefix + (pre + 1) / 2, prefix + pre)
        rows.append(dict(decode=dec, context=ctx, prefill=pre, prefix=prefix, interpolated_us=got,
                         simulated_us=want, error=got / want - 1))
        click.echo(f"decode {dec:5d} at context {ctx:5d}, prefill {pre:5d} after {prefix:5d}: interpolated "
                   f"{got:11.1f} us, simulated {want:11.1f} us, error {100 * (got / want - 1):+6.2f} %")
    err = np.abs([r["error"] for r in rows])
    click.echo(f"{model} {plan} on {preset} ({engine}): max |error| {100 * err.max():.2f} %, mean "
               f"{100 * err.mean():.2f} % over {len(rows)} steps; {sm.simulated} grid steps simulated; "
               f"{time.perf_counter() - t0:.0f} s")
    if out:
        with open(out, "w") as fh:
            json.dump(dict(model=model, plan=plan, preset=preset, engine=engine, seed=seed, rows=rows,
                           max_abs_error=float(err.max()), mean_abs_error=float(err.mean())), fh, indent=1)
            fh.write("\n")


if __name__ == "__main__":
    main()
