"""`fabric-plot KIND RESULT... -o OUT.png|.svg`: draw the results the commands write (fabric/experiments/plot.py;
docs/sweep-and-plots.md). Needs matplotlib: pip install 'scaleup-fabric[plot]'."""
from __future__ import annotations

from pathlib import Path

import click

from fabric.cli.common import Command, check_writable, friendly

KINDS = ("collective", "links", "tpot", "sweep", "serve")   # experiments.plot.KINDS, without matplotlib


@click.command(cls=Command, help="Draw results as PNG or SVG. KIND: collective (time and bus bandwidth vs size of "
                                 "`fabric-probe collective --json` results, several on one chart; --measured "
                                 "overlays an nccl-tests file), links (link utilisation of a `fabric-replay --json` "
                                 "result laid out on its topology), tpot (TPOT breakdown of `fabric-replay --json` "
                                 "results), sweep (a field of a `fabric-sweep` output vs a swept key), serve (latency "
                                 "CDFs of `fabric-serve --json` results, or throughput and latency vs load of a "
                                 "`fabric-sweep` over served workloads).")
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="image to write: .png or .svg")
@click.option("--measured", type=click.Path(dir_okay=False, exists=True), default=None,
              help="collective: an nccl-tests output file to overlay")
@click.option("--label", "labels", multiple=True,
              help="legend label of each RESULT, in order [default: preset, library and overrides from its meta]")
@click.option("--x", "x", default=None,
              help="sweep, serve: the swept key on the x axis [default: serve.rate if swept, else the first]")
@click.option("--y", "y", default=None, help="sweep: the result field on the y axis [default: tpot_us]")
@click.option("--hue", default=None,
              help="sweep, serve: one line per value of this column [default: the other swept keys]")
@click.option("--title", default=None, help="chart title")
@friendly
def main(kind, results, output, measured, labels, x, y, hue, title):
    from fabric.errors import ConfigError
    from fabric.experiments import plot as P
    check_writable(output, "-o")
    P.check_output(output)
    if labels and len(labels) != len(results):
        raise ConfigError(f"--label given {len(labels)} times for {len(results)} results")
    if measured and kind != "collective":
        raise ConfigError("--measured applies to `fabric-plot collective` only")
    if y is not None and kind != "sweep":
        raise ConfigError("--y applies to `fabric-plot sweep` only")
    if kind == "sweep":
        rows = [r for path in results for r in P.read_table(path)]
        P.sweep(rows, output, x=x, y=y or "tpot_us", hue=hue, title=title)
    elif kind == "serve" and all(Path(p).suffix in (".csv", ".parquet") for p in results):
        P.serve_sweep([(p, P.read_table(p)) for p in results], output, x=x, hue=hue, title=title)
    elif kind == "serve":
        if any(Path(p).suffix in (".csv", ".parquet") for p in results):
            raise ConfigError("serve: give fabric-serve --json files or fabric-sweep outputs, not both")
        if x or hue:
            raise ConfigError("--x and --hue apply to a fabric-sweep output, not to fabric-serve --json files")
        data = [P.check_serve_result(P.load_json(p), p) for p in results]
        names = list(labels) if labels else [P.serve_label(d) for d in data]
        if not labels and len(set(names)) < len(names):      # results alike but for what meta omits: file names
            names = [Path(p).stem for p in results]
        P.serve_latency(list(zip(names, data)), output, title=title)
    else:
        data = [P.load_json(p) for p in results]
        if kind == "collective":        # each file named in its own one-line error, before any drawing
            for p, d in zip(results, data):
                P.collective_rows(d, p)
        named = [(labels[i] if labels else P.label_of(d, p), d) for i, (p, d) in enumerate(zip(results, data))]
        if kind == "collective":
            P.collective(named, output, measured=measured, title=title)
        elif kind == "tpot":
            P.tpot(named, output, title=title)
        else:
            if len(named) != 1:
                raise ConfigError("links: give one replay result")
            P.links(named[0][1], output, title=title)
    click.echo(f"wrote {output}")
