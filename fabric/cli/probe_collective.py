"""`fabric-probe collective`: time one collective on an idle fabric, nccl-tests style (fabric/collective_probe.py)."""
from __future__ import annotations

import click

from fabric.cli.common import Command, check_writable, friendly, write_json
from fabric.config import load_config, parse_set


@click.command("collective", cls=Command)
@click.option("--preset", "-p", default="sd200", show_default=True, help="fabric preset")
@click.option("--config", "config_file", default=None, type=click.Path(dir_okay=False),
              help="TOML file applied after the preset")
@click.option("--op", type=click.Choice(["allreduce", "allgather", "alltoall", "reduce_scatter"]), required=True)
@click.option("--bytes", "nbytes", type=int, default=None, help="one size in B (nccl-tests convention)")
@click.option("--min-bytes", type=int, default=None, help="smallest size of a sweep; sizes double up to --max-bytes")
@click.option("--max-bytes", type=int, default=None, help="largest size of a sweep")
@click.option("--algorithm", default=None, help="force an algorithm [default: the configured policy's choice]")
@click.option("--ranks", type=int, default=None, help="group size: ranks 0..N-1 [default: every accelerator]")
@click.option("--engine", type=click.Choice(["packet", "analytic"]), default="packet", show_default=True)
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE", help="override one parameter (repeatable)")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False), help="write the rows as JSON")
@friendly
def collective_cmd(preset, config_file, op, nbytes, min_bytes, max_bytes, algorithm, ranks, engine, sets, json_path):
    check_writable(json_path)
    """Time one collective (all ranks start at t = 0; time = until the last rank's output is ready).

    algbw = bytes / time; busbw = algbw x 2(n-1)/n for allreduce, (n-1)/n for allgather, reduce_scatter, alltoall.
    """
    from fabric.collective_probe import sizes, sweep, table
    from fabric.errors import ConfigError

    if nbytes is not None and (min_bytes is not None or max_bytes is not None):
        raise ConfigError("give either --bytes or --min-bytes/--max-bytes, not both")
    if nbytes is None:
        if min_bytes is None or max_bytes is None:
            raise ConfigError("give --bytes N or both --min-bytes A and --max-bytes B")
        byte_sizes = sizes(min_bytes, max_bytes)
    else:
        byte_sizes = [nbytes]
    cfg = load_config(preset=preset, config_file=config_file, overrides=parse_set(sets))
    rows = sweep(cfg, op, byte_sizes, algorithm=algorithm, ranks=ranks, engine=engine)
    click.echo(f"{op} on {preset}, {rows[0]['ranks']} ranks, {engine} engine, policy {cfg.collectives.policy}")
    click.echo(table(rows))
    write_json(json_path, [{k: r[k] for k in ("bytes", "time_us", "algbw_gbps", "busbw_gbps", "algorithm")}
                           for r in rows])
