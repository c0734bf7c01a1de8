"""`fabric-probe collective`: time one collective on an idle fabric, nccl-tests style
(fabric/experiments/probe_collective.py)."""
from __future__ import annotations

import click

from fabric.cli.common import (
    Command,
    check_writable,
    config_options,
    engine_option,
    fault_option,
    friendly,
    json_option,
    count_bar,
    load,
    provenance,
    write_json,
)
from fabric.cli.common import CALIBRATION_TABLE, config_label, echo_timeline, timeline_option

OPS = ("allreduce", "allgather", "alltoall", "reduce_scatter")   # fabric.experiments.probe_collective.OPS, kernel-free
TYPES = ("int8", "uint8", "half", "bfloat16", "float", "int32", "double", "int64")   # probe_collective.TYPES


@click.command("collective", cls=Command)
@click.option("--op", type=click.Choice(OPS), required=True)
@click.option("--bytes", "nbytes", default=None, help="one size in B; K/M/G suffixes are powers of 1024 (nccl-tests)")
@click.option("--min-bytes", default=None,
              help="smallest size of a sweep (e.g. 8); sizes double up to --max-bytes; K/M/G suffixes allowed")
@click.option("--max-bytes", default=None, help="largest size of a sweep (e.g. 1G)")
@click.option("--compare", "compare_path", type=CALIBRATION_TABLE, default=None,
              help="nccl-tests output file, or the name of a table fabric ships (e.g. a100-8x; a wrong name lists "
                   "them): print predicted/measured per size and the geomean error; without sizes, sweep the sizes "
                   "the file has")
@click.option("--table", "table_no", type=int, default=None, metavar="N",
              help="which run of a --compare file holding several (1-based; such a file without --table lists "
                   "them)")
@click.option("--type", "dtype", type=click.Choice(TYPES), default="float", show_default=True,
              help="data type of the count column (nccl-tests -d)")
@click.option("--algorithm", default=None, help="force an algorithm [default: the configured library's choice]")
@click.option("--quiet", is_flag=True, help="no progress bar")
@click.option("--ranks", type=int, default=None, help="group size: ranks 0..N-1 [default: every accelerator]")
@click.option("--jobs", type=click.IntRange(1, 256), default=None, metavar="N",
              help="processes that run the sweep's sizes  [default: the cores available; 1: serial; the rows are "
                   "identical]")
@engine_option()
@config_options()
@json_option("write the rows as JSON")
@timeline_option()
@fault_option()
@friendly
def collective_cmd(op, nbytes, min_bytes, max_bytes, compare_path, table_no, dtype, algorithm, quiet, ranks, jobs, engine,
                   preset, config_file, sets, seed, json_path, timeline_path, faults):
    """Time one collective (all ranks start at t = 0; time = until the last rank's output is ready).

    Prints nccl-tests columns (size, count, type, redop, time, algbw, busbw) and the library's algorithm, protocol
    and channels. algbw = bytes / time; busbw = algbw x 2(n-1)/n for allreduce, (n-1)/n for allgather,
    reduce_scatter, alltoall.
    """
    check_writable(json_path)
    check_writable(timeline_path, "--timeline")
    from fabric import timeline
    from fabric.errors import ConfigError
    from fabric.experiments import nccl_tests
    from fabric.experiments.probe_collective import compare, compare_table, probe_sizes, sweep, table

    if table_no is not None and not compare_path:
        raise ConfigError("--table picks a run of a --compare file; give --compare FILE too")
    measured = nccl_tests.read(compare_path, table_no) if compare_path else None
    if measured is not None and measured.op and measured.op != op:
        raise ConfigError(f"--compare file {compare_path} is a {measured.op} table but --op is {op}")
    byte_sizes = probe_sizes(nbytes, min_bytes, max_bytes, measured)
    cfg = load(preset, config_file, sets, seed, faults=faults)
    if timeline_path:
        jobs = 1              # the runs are recorded in this process; the timeline is the last size's
    with timeline.to_file(timeline_path, meta=dict(probe="collective", op=op, preset=preset)) as tl, \
            count_bar(len(byte_sizes), "sizes", not quiet, tick=True) as step:
        rows = sweep(cfg, op, byte_sizes, jobs=jobs, progress=step, algorithm=algorithm, ranks=ranks, engine=engine)
    library = getattr(cfg.collectives, "library", None) or cfg.collectives.policy
    click.echo(f"{op} on {config_label(preset, config_file)}, {rows[0]['ranks']} ranks, {engine} engine, "
               f"library {library}")
    click.echo(table(rows, dtype))
    for r in rows:
        if r.get("faults"):
            f = r["faults"]
            click.echo(f"faults at {r['bytes']} B: {', '.join(f['applied']) or 'none within the collective'}; "
                       f"{f['reroutes']} reroute(s), {f['flows_rewound']} flows rewound, {f['packets_reclaimed']} "
                       f"packets sent again, {f['packets_lost']} lost, {f['packets_duplicated']} duplicated")
    echo_timeline(tl)
    meta = {**provenance(cfg, preset, config_file, sets, seed), "op": op, "engine": engine, "library": library,
            "ranks": rows[0]["ranks"]}
    out = [{k: r.get(k) for k in ("bytes", "time_us", "algbw_gbps", "busbw_gbps", "algorithm", "protocol",
                                  "channels") + (("faults",) if cfg.faults else ())} for r in rows]
    if measured is not None:
        cmp = compare(rows, measured)
        if measured.ranks and measured.ranks != rows[0]["ranks"]:
            click.echo(f"note: {compare_path} was measured on {measured.ranks} ranks, the prediction is for "
                       f"{rows[0]['ranks']} (--ranks, --preset)")
        click.echo("")
        click.echo(compare_table(cmp))
        by_size = {c["bytes"]: c for c in cmp["rows"]}
        for o in out:
            if o["bytes"] in by_size:
                o["measured_us"] = by_size[o["bytes"]]["measured_us"]
                o["ratio"] = by_size[o["bytes"]]["ratio"]
        write_json(json_path, dict(rows=out, compare=dict(source=cmp["source"], geomean_error=cmp["geomean_error"],
                                                          measured_ranks=cmp["ranks"], table=cmp["table"])),
                   meta)
    else:
        write_json(json_path, dict(rows=out), meta)
