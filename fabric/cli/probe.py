"""`fabric-probe`: measure one piece of the fabric at a time (link, topology, latency, collective)."""
from __future__ import annotations

import click

from fabric.cli.common import (
    SIZE,
    Group,
    check_writable,
    config_options,
    friendly,
    json_option,
    load,
    provenance,
    write_json,
)
from fabric.cli.common import echo_timeline, timeline_option
from fabric.cli.probe_collective import collective_cmd
from fabric.cli.probe_kernel import kernel_cmd
from fabric.cli.probe_topology import topology_cmd
from fabric.config import describe, describe_sections


@click.group(cls=Group, help="Measure one piece of the fabric: a link, the topology, a latency, a collective, a compute kernel.")
def main():
    pass


main.add_command(topology_cmd, "topology")
main.add_command(collective_cmd, "collective")
main.add_command(kernel_cmd, "kernel")


@main.command("link", help="Simulate a saturated link and report payload efficiency and data-link counters.")
@click.option("--payload-bytes", type=SIZE, default=None,
              help="payload per packet in B [default: txn.max_payload_bytes]")
@click.option("--ber", type=float, default=None, help="bit error rate [default: phy.ber = 1e-12]")
@click.option("--packets", type=SIZE, default=20000, show_default=True, help="packets to send")
@config_options(preset=None)
@json_option()
@timeline_option()
@friendly
def link(payload_bytes, ber, packets, preset, config_file, sets, seed, json_path, timeline_path):
    check_writable(json_path)
    check_writable(timeline_path, "--timeline")
    from fabric import timeline
    from fabric.experiments.probe_link import probe_link
    cfg = load(preset, config_file, sets, seed, {} if ber is None else {"phy.ber": ber})
    with timeline.to_file(timeline_path, meta=dict(probe="link")) as tl:
        r = probe_link(cfg, payload_bytes, packets)
    r.pop("_result")
    click.echo(f"link probe: {r['packets']} x {r['payload_bytes']} B at BER {r['ber']:g} "
               f"({cfg.phy.lanes} x {cfg.phy.lane_rate_gbps:g} Gb/s, {cfg.phy.flit_bytes} B flits)")
    click.echo(f"  payload efficiency   {100 * r['payload_efficiency']:.2f} % measured, "
               f"{100 * r['payload_efficiency_model']:.2f} % from framing (packets back to back)")
    click.echo(f"{'':23s}{100 * r['payload_efficiency_alone']:.2f} % measured, "
               f"{100 * r['payload_efficiency_alone_model']:.2f} % from framing (one packet alone)")
    fec = (f"{r['pre_fec_flit_error']:.3g} before {r['fec']}, {r['post_fec_flit_error']:.3g} after (kernel draws at "
           f"BER {r['effective_ber']:.3g})" if cfg.phy.fec_n else f"{r['post_fec_flit_error']:.3g} (no FEC)")
    click.echo(f"  error rates          BER {r['raw_ber']:g}, flit error {fec}")
    if "burst_bad_fraction" in r:
        click.echo(f"  burst errors         bad state {100 * r['burst_bad_fraction']:.3g} % of the time at BER "
                   f"{r['burst_bad_ber']:g} (mean {cfg.phy.ge_bad_dwell_ns:g} ns per {cfg.phy.ge_good_dwell_ns:g} ns "
                   f"good); flit error above is the long-run mean")
    click.echo(f"  goodput              {r['goodput_gbps']:.1f} Gb/s of {r['raw_gbps']:.1f} Gb/s raw")
    click.echo(f"  packets              {r['packets_sent']} sent, {r['packets_delivered']} delivered, "
               f"{r['packets_dropped']} dropped, {r['duplicates']} duplicated, {r['out_of_order']} out of order")
    click.echo(f"  errors and recovery  {r['flits_corrupted']} flits corrupted, {r['naks']} Naks, "
               f"{r['replays']} replays ({r['replay_timeouts']} by timeout), {r['retrains']} retrains, "
               f"retransmission overhead {100 * r['retransmission_overhead']:.3f} %")
    click.echo(f"  flow control         {r['credit_stall_ns']:.1f} ns credit stall, {r['updatefc']} UpdateFCs")
    click.echo(f"  simulated            {r['duration_ns'] / 1000:.2f} us in {r['events']} events, "
               f"{r['wall_s']:.3f} s wall ({r['events_per_s'] / 1e6:.1f} M events/s)")
    echo_timeline(tl)
    write_json(json_path, r, provenance(cfg, preset, config_file, sets, seed, {} if ber is None else {"phy.ber": ber}))


@main.command("params", help="List every model parameter with its unit, default, range and reason, by section "
                             "and sub-section ([topology.<kind>], [collectives.<library>]), grouped by unit.")
@click.option("--json", "as_json", is_flag=True,
              help="print the list as JSON (key, section, default, unit, range, help, reason, replaces)")
@friendly
def params(as_json):
    if as_json:
        import json
        click.echo(json.dumps(describe(), indent=2, default=str))
        return
    rows = describe()
    for sec in describe_sections():
        mine = [r for r in rows if r["section"] == sec["section"]]
        readers = f" (read by topology.kind {', '.join(sec['read_by'])})" if sec.get("read_by") else ""
        click.echo(f"[{sec['section']}]  {sec['doc']}{readers}")
        units = list(dict.fromkeys(r["unit"] for r in mine))     # in the order the section declares them
        for unit in units:
            click.echo(f"  {unit}")
            for row in (r for r in mine if r["unit"] == unit):
                was = f" (was {', '.join(row['replaces'])})" if row["replaces"] else ""
                click.echo(f"    {row['key']:40s} {row['default']!s:>12}  {row['range']:22s} {row['help']}{was}")
                click.echo(f"      reason: {row['reason']}")


@main.command("latency", help="Latency of one store or load between two accelerators on an idle fabric.")
@click.option("--src", type=int, required=True, help="source accelerator (rank)")
@click.option("--dst", type=int, default=None, help="destination accelerator (rank)")
@click.option("--addr", type=str, default=None,
              help="instead of --dst: a host address (e.g. 0x100000000000) in the source's host domain")
@click.option("--op", type=click.Choice(["store", "load"]), default="store", show_default=True)
@click.option("--bytes", "nbytes", type=SIZE, default=64, show_default=True,
              help="bytes moved (suffixes: 4K, 16KiB, 1M)")
@config_options()
@json_option()
@timeline_option()
@friendly
def latency(src, dst, addr, op, nbytes, preset, config_file, sets, seed, json_path, timeline_path):
    check_writable(json_path)
    check_writable(timeline_path, "--timeline")
    from fabric import timeline
    from fabric.errors import ConfigError
    from fabric.experiments.probe_latency import probe_latency
    cfg = load(preset, config_file, sets, seed)
    try:
        address = None if addr is None else int(addr, 0)
    except ValueError:
        raise ConfigError(f"--addr={addr!r} is not an address; write it in decimal or 0x hex") from None
    with timeline.to_file(timeline_path, meta=dict(probe="latency", preset=preset)) as tl:
        r = probe_latency(cfg, src, dst, op, nbytes, addr=address)
    dst = r["dst"]
    if r["status"] != "OK":
        click.echo(f"{r['op']} of {r['bytes']} B from accelerator {src} to {r['addr']} completed as Unsupported "
                   f"Request after {r['latency_ns']:.1f} ns: {r['error']}")
        echo_timeline(tl)
        write_json(json_path, r, provenance(cfg, preset, config_file, sets, seed))
        return
    click.echo(f"{r['op']} of {r['bytes']} B, accelerator {src} -> {dst} on {r['preset']}: "
               f"{r['latency_ns']:.1f} ns over {r['hops']} hops")
    click.echo(f"  path  {' -> '.join(r['path'])}")
    for k, v in r["breakdown"].items():
        label = "queueing (rest)" if k == "queueing_ns" else k[:-3]
        click.echo(f"  {label:15s} {v:9.1f} ns")
    echo_timeline(tl)
    write_json(json_path, r, provenance(cfg, preset, config_file, sets, seed))


@main.command("presets", help="List the fabric presets, one line each: name, accelerators, description.")
@friendly
def presets():
    import tomllib

    from fabric.config import load_config, preset_names, preset_text
    for name in preset_names():
        meta = tomllib.loads(preset_text(name)).get("preset", {})
        desc = meta.get("description", "")
        try:
            from fabric.network import size_estimate
            n = size_estimate(load_config(preset=name))["ranks"]
        except Exception:   # noqa: BLE001 - the count is a convenience; the description is the line
            n = None
        click.echo(f"{name:20s} {'' if n is None else f'{n:5d} accel':11s} {desc}")
