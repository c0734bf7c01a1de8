"""hgx: HGX/DGX-class hosts, every accelerator's ports spread over parallel in-host switch chips (planes); with
more than one host (any number: topology.scaleout.hosts), NICs on the scale-out network of [topology.scaleout]
(fabric.topologies.scaleout_roce)."""
from __future__ import annotations

from dataclasses import dataclass

from fabric.errors import ConfigError
from fabric.params import Section, param
from fabric.topologies import Kind, Size, register
from fabric.topologies.scaleout_roce import host_fabric


@dataclass(frozen=True)
class HgxParams(Section):
    """[topology.hgx]: the switch planes of a host."""
    switch_planes: int = param(1, unit="switches", lo=1, hi=64,
                               help="parallel switch chips (planes) per host domain; an accelerator's ports are "
                                    "spread over them (plane_ports)",
                               reason="one switch per domain unless a preset describes a multi-chip baseboard "
                                      "(an HGX H100 board has 4 NVSwitch chips)",
                               was="topology.switch_planes")
    plane_ports: str = param("", unit="ports",
                             help="ports of each accelerator on each plane, comma-separated (e.g. 5,4,4,5), "
                                  "summing to topology.ports_per_accel; empty = as even as possible, the first "
                                  "planes taking one more",
                             reason="an even split unless the hardware documentation says otherwise",
                             was="topology.plane_ports")


def plane_split(cfg) -> list[int]:
    """Ports of each accelerator on each switch plane (topology.hgx.plane_ports, or an even split)."""
    N, P = cfg.topology.ports_per_accel, cfg.topology.hgx.switch_planes
    text = str(cfg.topology.hgx.plane_ports).strip()
    if not text:
        if P > N:
            raise ConfigError(f"topology.hgx.switch_planes={P} exceeds topology.ports_per_accel={N}: every plane "
                              f"needs at least one port of every accelerator")
        return [N // P + (1 if p < N % P else 0) for p in range(P)]
    try:
        split = [int(x) for x in text.replace(" ", "").split(",")]
    except ValueError:
        split = []
    if len(split) != P or any(k < 1 for k in split) or sum(split) != N:
        raise ConfigError(f"topology.hgx.plane_ports={text!r} must list {P} positive port counts (one per switch "
                          f"plane, topology.hgx.switch_planes) summing to topology.ports_per_accel={N}")
    return split


def build(cfg):
    """HGX/DGX-class hosts: every accelerator's ports spread over `switch_planes` parallel in-host switch chips;
    with more than one host, one NIC per accelerator on rail switches (or one switch)."""
    t, s = cfg.topology, cfg.topology.scaleout
    split = plane_split(cfg)
    P, H, A, N = len(split), s.hosts, t.accels_per_domain, t.ports_per_accel
    # a single host has no GPU traffic on its NICs: none are built
    b, reducing, nic_desc = host_fabric(cfg, split, lambda h, p: f"nvsw{h}.{p}" if P > 1 else f"nvsw{h}",
                                        with_nics=H > 1)
    desc = f"{H} host{'s' if H > 1 else ''} of {A} accelerators, {N} ports each"
    desc += f" over {P} switch planes ({','.join(map(str, split))})" if P > 1 else " to an in-host switch"
    return b.freeze(f"hgx-{H}x{A}", H * A, "hgx", desc + nic_desc, reducing=reducing)


def size(cfg) -> Size:
    """Any number of hosts: the switch planes of every host plus the scale-out switches (none for one host), and
    the mean of each route's fewest channels: 2 inside a host (GPU, switch, GPU), 4 between hosts (GPU, NIC, rail
    switch, NIC, GPU)."""
    t, s = cfg.topology, cfg.topology.scaleout
    H, A = s.hosts, t.accels_per_domain
    R = H * A
    net = 0 if H == 1 else (s.nics_per_host + s.rail_spines if s.switches == "rails" else 1)
    hops = (2.0 * (A - 1) + 4.0 * (R - A)) / (R - 1) if R > 1 else 2.0
    return Size(R, H * t.hgx.switch_planes + net, hops)


register(Kind("hgx", "hosts with parallel switch planes and rail-aligned NICs (HGX/DGX class)", build, size,
              routing="updown", params=HgxParams, reads=("scaleout",)))
