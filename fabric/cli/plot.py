"""`fabric-plot KIND RESULT... -o OUT.png|.svg`: draw the results the commands write (fabric/tools/plot.py;
docs/sweep-and-plots.md). Needs matplotlib: pip install 'scaleup-fabric[plot]'."""
from __future__ import annotations

import click

from fabric.cli.common import Command, check_writable, friendly

KINDS = ("collective", "links", "tpot", "sweep")   # fabric.tools.plot.KINDS, without importing matplotlib


@click.command(cls=Command, help="Draw results as PNG or SVG. KIND: collective (time and bus bandwidth vs size of "
                                 "`fabric-probe collective --json` results, several on one chart; --measured "
                                 "overlays an nccl-tests file), links (link utilisation of a `fabric-replay --json` "
                                 "result laid out on its topology), tpot (TPOT breakdown of `fabric-replay --json` "
                                 "results), sweep (a field of a `fabric-sweep` output vs a swept key).")
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="image to write: .png or .svg")
@click.option("--measured", type=click.Path(dir_okay=False, exists=True), default=None,
              help="collective: an nccl-tests output file to overlay")
@click.option("--label", "labels", multiple=True,
              help="legend label of each RESULT, in order [default: preset, library and overrides from its meta]")
@click.option("--x", "x", default=None, help="sweep: the swept key on the x axis [default: the first]")
@click.option("--y", "y", default="tpot_us", show_default=True, help="sweep: the result field on the y axis")
@click.option("--hue", default=None, help="sweep: one line per value of this column [default: the other swept keys]")
@click.option("--title", default=None, help="chart title")
@friendly
def main(kind, results, output, measured, labels, x, y, hue, title):
    from fabric.errors import ConfigError
    from fabric.tools import plot as P
    check_writable(output, "-o")
    P.check_output(output)
    if labels and len(labels) != len(results):
        raise ConfigError(f"--label given {len(labels)} times for {len(results)} results")
    if measured and kind != "collective":
        raise ConfigError("--measured applies to `fabric-plot collective` only")
    if kind == "sweep":
        from fabric.tools.sweep import read_rows
        rows = [r for path in results for r in read_rows(path)]
        P.sweep(rows, output, x=x, y=y, hue=hue, title=title)
    else:
        data = [P.load_json(p) for p in results]
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
