"""`fabric-probe topology`: build a fabric, route it, and print its size, diameter, hops and bisection bandwidth."""
from __future__ import annotations

import click

from fabric.cli.common import (
    Command,
    check_writable,
    config_options,
    friendly,
    json_option,
    load,
    provenance,
    write_json,
)


@click.command("topology", cls=Command)
@config_options(preset=None)
@json_option("also write the figures here")
@click.option("--nodes", is_flag=True, help="also list every node and the links it has (the names --fault takes)")
@friendly
def topology_cmd(preset, config_file, sets, seed, json_path, nodes):
    """Nodes, links, diameter (hops between ranks), average hops and bisection bandwidth of a fabric.

    Hops count channels on the routed path between two ranks (accelerator -> switch -> ... -> accelerator).
    Bisection bandwidth: summed one-direction data rate of the channels crossing a balanced cut of the ranks (the
    router mesh halved across its longest dimension, otherwise the host domains halved).
    """
    check_writable(json_path)
    from fabric.network import build
    from fabric.topology import metrics

    cfg = load(preset, config_file, sets, seed)
    topo = build(cfg)
    m = metrics(topo)
    m["preset"] = preset
    click.echo(f"{m['name']}: {m['description']}")
    hmem = f", {m['host_memory']} host-memory nodes" if m["host_memory"] else ""
    click.echo(f"  nodes            {m['nodes']} ({m['ranks'] - m['host_memory']} accelerators{hmem}, "
               f"{m['switches']} switches, {m['nics']} NICs)")
    click.echo(f"  links            {m['links']} ({m['channels']} channels)")
    click.echo(f"  routing          {m['routing']}, {m['vc_levels']} VC level(s), up to {m['max_candidates']} "
               f"candidate path(s) per pair")
    click.echo(f"  diameter         {m['diameter']} hops")
    click.echo(f"  average hops     {m['average_hops']:.3f}")
    click.echo(f"  bisection        {m['bisection_GBps']:.1f} GB/s per direction ({m['bisection_cut']})")
    if nodes:
        from collections import Counter
        from fabric.topology import KIND_NAMES
        for n, name in enumerate(topo.node_names):
            peers = Counter(topo.node_names[v] for v in topo.ch_dst[topo.ch_src == n])
            links = ", ".join(f"{name}-{p}" + (f" (x{k}: #0..#{k - 1})" if k > 1 else "") for p, k in peers.items())
            click.echo(f"  {name:10s} {KIND_NAMES[int(topo.node_kind[n])]:12s} {links}")
    write_json(json_path, m, provenance(cfg, preset, config_file, sets, seed))
