"""`fabric-probe collective`: time one collective on an idle fabric, nccl-tests style
(fabric/tools/collective_probe.py)."""
from __future__ import annotations

import click

from fabric.cli.common import (
    Command,
    check_writable,
    config_options,
    engine_option,
    friendly,
    json_option,
    load,
    write_json,
)

OPS = ("allreduce", "allgather", "alltoall", "reduce_scatter")   # fabric.tools.collective_probe.OPS, kernel-free


@click.command("collective", cls=Command)
@click.option("--op", type=click.Choice(OPS), required=True)
@click.option("--bytes", "nbytes", type=int, default=None, help="one size in B (nccl-tests convention)")
@click.option("--min-bytes", type=int, default=None, help="smallest size of a sweep; sizes double up to --max-bytes")
@click.option("--max-bytes", type=int, default=None, help="largest size of a sweep")
@click.option("--algorithm", default=None, help="force an algorithm [default: the configured policy's choice]")
@click.option("--ranks", type=int, default=None, help="group size: ranks 0..N-1 [default: every accelerator]")
@engine_option()
@config_options()
@json_option("write the rows as JSON")
@friendly
def collective_cmd(op, nbytes, min_bytes, max_bytes, algorithm, ranks, engine, preset, config_file, sets, seed,
                   json_path):
    """Time one collective (all ranks start at t = 0; time = until the last rank's output is ready).

    algbw = bytes / time; busbw = algbw x 2(n-1)/n for allreduce, (n-1)/n for allgather, reduce_scatter, alltoall.
    """
    check_writable(json_path)
    from fabric.errors import ConfigError
    from fabric.tools.collective_probe import sizes, sweep, table

    if nbytes is not None and (min_bytes is not None or max_bytes is not None):
        raise ConfigError("give either --bytes or --min-bytes/--max-bytes, not both")
    if nbytes is None:
        if min_bytes is None or max_bytes is None:
            raise ConfigError("give --bytes N or both --min-bytes A and --max-bytes B")
        byte_sizes = sizes(min_bytes, max_bytes)
    else:
        byte_sizes = [nbytes]
    cfg = load(preset, config_file, sets, seed)
    rows = sweep(cfg, op, byte_sizes, algorithm=algorithm, ranks=ranks, engine=engine)
    click.echo(f"{op} on {preset}, {rows[0]['ranks']} ranks, {engine} engine, policy {cfg.collectives.policy}")
    click.echo(table(rows))
    write_json(json_path, [{k: r[k] for k in ("bytes", "time_us", "algbw_gbps", "busbw_gbps", "algorithm")}
                           for r in rows])
