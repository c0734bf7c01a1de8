"""fabric-trace: inspect and validate trace files (docs/trace-format.md)."""
from __future__ import annotations

import sys

import click

from fabric.cli.common import TRACE, Group, check_writable, friendly, json_option, write_json


@click.group(cls=Group, help="Inspect and validate fabric trace files (HDF5, format v1).")
def main():
    pass


def _fmt_bytes(n: int) -> str:
    return f"{n:,} B"


@main.command(help="Print ranks, ops by kind, collectives by kind and size, and compute time per rank.")
@click.argument("file", type=TRACE)
@json_option("also write the summary as JSON to this file")
@friendly
def info(file, json_path):
    check_writable(json_path)
    from fabric import trace as T
    tr = T.read(file)
    s = T.summary(tr)
    plan = s["plan"] or {}
    click.echo(f"{file}: schema v{s['schema_version']}, model {s['model']}, {s['ranks']} ranks, "
               f"{s['groups']} communicator groups")
    click.echo(f"  plan tp={plan.get('tp')} ep={plan.get('ep')}, batch {s['batch']}, context {s['context']}, "
               f"chip {s['chip']}, tool {tr.meta.get('tool')} {tr.meta.get('tool_version')}")
    click.echo("ops by kind (min / max per rank):")
    for k, counts in s["ops_by_kind"].items():
        if any(counts):
            click.echo(f"  {k:<12} {min(counts):>7} / {max(counts)}")
    click.echo("collectives by kind and size (count per rank, min / max):")
    if not s["collectives"]:
        click.echo("  none")
    for c in s["collectives"]:
        cnt = c["count_per_rank"]
        click.echo(f"  {c['kind']:<15} {_fmt_bytes(c['bytes']):>16}  {min(cnt):>5} / {max(cnt)}")
    us = s["compute_us_per_rank"]
    click.echo(f"compute time per rank: min {min(us):.1f} us, mean {sum(us) / len(us):.1f} us, max {max(us):.1f} us")
    write_json(json_path, s)


@main.command(help="Check a trace file; exit 1 listing every problem, 0 if it is valid.")
@click.argument("file", type=TRACE)
@friendly
def validate(file):
    from fabric import trace as T
    problems = T.validate(file)
    if problems:
        click.echo(f"{file}: {len(problems)} problem{'s' if len(problems) != 1 else ''}", err=True)
        for p in problems:
            click.echo(f"  - {p}", err=True)
        sys.exit(1)
    click.echo(f"{file}: valid (trace format v{T.SCHEMA_VERSION})")


@main.command("export-chakra", help="Write a trace as Chakra execution traces (one <prefix>.<rank>.et file per rank, "
                                    "as ASTRA-sim reads them) into a directory.")
@click.argument("file", type=TRACE)
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="directory to write into (created if missing)")
@click.option("--prefix", default="fabric", show_default=True, help="file name prefix: <prefix>.<rank>.et")
@friendly
def export_chakra(file, out_dir, prefix):
    from fabric import chakra, trace as T
    tr = T.read(file)
    paths = chakra.export_trace(tr, out_dir, prefix)
    total = sum(p.stat().st_size for p in paths)
    click.echo(f"{file}: {tr.n_ranks} ranks -> {len(paths)} Chakra files in {out_dir} ({total:,} B)")


@main.command("import-chakra", help="Read a directory of Chakra execution traces (one <prefix>.<rank>.et per rank) "
                                    "into a fabric trace file.")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("-o", "--out", "out_file", required=True, type=click.Path(dir_okay=False),
              help="trace file to write (HDF5)")
@click.option("--cpu-ops", type=click.Choice(["host", "drop"]), default="host", show_default=True,
              help="a PyTorch trace's CPU operators (is_cpu_op): host time on host streams (they delay the kernels "
                   "that wait for them; replay reports them apart from compute), or left out")
@friendly
def import_chakra(directory, out_file, cpu_ops):
    check_writable(out_file, "-o")
    from fabric import chakra, trace as T
    tr = chakra.import_trace(directory, cpu_ops=cpu_ops)
    T.write(out_file, tr)
    n_ops = sum(len(t) for t in tr.ops)
    click.echo(f"{directory}: {tr.n_ranks} ranks, {n_ops:,} ops, {len(tr.groups)} communicator groups -> {out_file}")
    c = tr.meta.get("chakra_import")
    if c and any(c[k] for k in chakra.IMPORT_COUNTS):
        fate = "kept as host time" if cpu_ops == "host" else "dropped"
        click.echo(f"  control dependencies dropped (Chakra's feeder reads data dependencies only): "
                   f"{c['ctrl_deps_absent']:,} on nodes not in the file or on themselves, "
                   f"{c['ctrl_deps_cyclic']:,} closing a cycle; collectives without a type: {c['comm_by_name']} "
                   f"typed by their name, {c['comm_skipped']} skipped; {c['cpu_ops']:,} CPU operators "
                   f"({c['host_us'] / 1e3:,.1f} ms) {fate}")
