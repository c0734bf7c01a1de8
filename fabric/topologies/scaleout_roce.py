"""scaleout_roce: hosts of accelerators behind an in-host switch, joined by RoCE NICs through one Ethernet switch or
rail switches and spines (the scale-out baseline the SD200 is compared with).

The scale-out network (hosts, NICs, Ethernet switches) is declared here as [topology.scaleout] with the builder of
hosts on it, `host_fabric`, which the hgx kind uses too."""
from __future__ import annotations

from dataclasses import dataclass

from fabric.errors import ConfigError
from fabric.params import Crossing, Section, param
from fabric.phy import ps, ps_per_byte
from fabric.topologies import Kind, Size, register
from fabric.topology import ACCEL, NIC, SWITCH, Builder


@dataclass(frozen=True)
class ScaleoutParams(Section):
    """[topology.scaleout]: the hosts and the scale-out network that joins them."""
    hosts: int = param(8, unit="hosts", lo=1, hi=1024, help="hosts of accels_per_domain accelerators",
                       reason="64 accelerators, the same count as the SD200 it is compared with",
                       was="topology.scaleout_hosts")
    nics_per_host: int = param(8, unit="NICs", lo=1, hi=64,
                               help="NICs per host; equal to accels_per_domain = one NIC per accelerator (rail), "
                                    "fewer = NICs hang off the in-host switch",
                               reason="8-GPU servers ship one 200/400G NIC per GPU (GPUDirect RDMA per rail)",
                               was="topology.nics_per_host")
    nic_gbps: float = param(200.0, unit="Gb/s", lo=0, lo_open=True, hi=10000,
                            help="Ethernet rate of one NIC port and direction",
                            reason="the 2-node 200G RoCE measurement of docs/sources.md "
                                   "§Communication measurements",
                            was="topology.nic_gbps")
    nic_host_gbps: float = param(504.0, unit="Gb/s", lo=0, lo_open=True, hi=10000,
                                 help="accelerator-to-NIC (PCIe) data rate per direction",
                                 reason="PCIe 5 x16: 16 x 32 GT/s x 128/130 = 504 Gb/s",
                                 was="topology.nic_host_gbps")
    nic_latency_ns: float = param(1000.0, unit="ns", lo=0, hi=1e8,
                                  help="cost of crossing a NIC (doorbell, WQE fetch, PCIe DMA, completion), paid at "
                                       "the sending and at the receiving NIC",
                                  reason="2 x 1000 + 600 ns Ethernet switch ~ NCCL's 2.7 us network per-hop cost "
                                         "(docs/sources.md §Communication measurements)",
                                  was="topology.nic_latency_ns")
    eth_switch_latency_ns: float = param(600.0, unit="ns", lo=0, hi=1e8,
                                         help="port-to-port latency of a scale-out (Ethernet, rail, spine) switch",
                                         reason="Ethernet-class data-centre switch, 0.6-1 us port to port",
                                         was="topology.eth_switch_latency_ns")
    eth_phy_latency_ns: float = param(120.0, unit="ns", lo=0, hi=1e8,
                                      help="PHY latency (tx + rx, PCS + RS-FEC) of a scale-out link",
                                      reason="PAM4 Ethernet needs RS-FEC: 37-115 ns receive "
                                             "(docs/sources.md §Protocol standards)",
                                      was="topology.eth_phy_latency_ns")
    eth_cable_m: float = param(3.0, unit="m", lo=0, hi=1000, help="NIC-to-switch cable length",
                               reason="in-rack or adjacent-rack DAC/AOC", was="topology.eth_cable_m")
    switches: str = param("single", unit="choice", choices=("single", "rails"),
                          help="one scale-out switch for all NICs (single), or one switch per rail: NIC i of every "
                               "host on rail switch i (rails), the rail switches joined by rail_spines spine "
                               "switches",
                          reason="single keeps the scaleout-roce baseline unchanged; 8-GPU clusters are cabled "
                                 "rail-optimised (presets set rails)",
                          was="topology.scaleout_switches")
    rail_spines: int = param(1, unit="switches", lo=0, hi=64,
                             help="switches=rails: spine switches above the rail switches (each rail switch has "
                                  "max(1, hosts / spines) links to every spine; 0 = rail-only, so GPUs of different "
                                  "rails on different hosts have no network path)",
                             reason="a rail-optimised leaf/spine fabric: cross-rail traffic crosses a spine; one "
                                    "spine with as many uplinks per rail as hosts keeps it non-blocking",
                             was="topology.rail_spines")

    def crossing(self) -> Crossing:
        # a crossing may leave through a NIC, a scale-out switch and back through a NIC
        return Crossing(node_ns=(self.eth_switch_latency_ns,), cable_m=(self.eth_cable_m,),
                        once_ns=(2 * self.nic_latency_ns, self.eth_phy_latency_ns))


def host_fabric(cfg, split: list[int], switch_name, with_nics: bool) -> tuple[Builder, list[int], str]:
    """Hosts of accels_per_domain accelerators on in-host switch planes, joined by NICs: (the Builder holding them,
    the switches that reduce in the switch, a description of the NIC part). `split`: every accelerator's ports on
    each plane (one entry: one in-host switch); `switch_name(h, p)` names plane p of host h; `with_nics`: build the
    NICs and scale-out switches.

    Node order: accelerators, in-host switches (host-major, then plane), NICs, then the scale-out switches (one
    Ethernet switch, or the rail switches followed by the spines).
    """
    t, s = cfg.topology, cfg.topology.scaleout
    H, A, K, P = s.hosts, t.accels_per_domain, s.nics_per_host, len(split)
    if with_nics and K != A and A % K:
        raise ConfigError(f"topology.scaleout.nics_per_host={K} must equal topology.accels_per_domain={A} (one NIC "
                          f"per accelerator) or divide it")
    rails = s.switches == "rails"
    R = H * A
    b = Builder(cfg)
    for r in range(R):
        b.node(f"acc{r}", ACCEL, domain=r // A)
    sw_lat = ps(cfg.switch.latency_ns)
    hsw = [[b.node(switch_name(h, p), SWITCH, domain=h, latency_ps=sw_lat, forwards=True) for p in range(P)]
           for h in range(H)]
    reducing = [x for row in hsw for x in row] if cfg.switch.reduction else []
    for r in range(R):
        for p in range(P):
            for _ in range(split[p]):
                b.link(r, hsw[r // A][p])
    desc = ""
    if with_nics:
        nic_lat = ps(s.nic_latency_ns)
        nics = [b.node(f"nic{i}", NIC, domain=i // K, latency_ps=nic_lat, forwards=True) for i in range(H * K)]
        out_lat = ps(s.eth_switch_latency_ns)
        if rails:
            rail = [b.node(f"rail{k}", SWITCH, latency_ps=out_lat, forwards=True) for k in range(K)]
            spines = [b.node(f"spine{j}", SWITCH, latency_ps=out_lat, forwards=True) for j in range(s.rail_spines)]
        else:
            eth = b.node("eth0", SWITCH, latency_ps=out_lat, forwards=True)
        p_ = cfg.phy
        pcie_lat = ps(p_.tx_latency_ns + p_.rx_latency_ns)  # on-board PCIe trace, no cable
        eth_lat = ps(s.eth_phy_latency_ns + s.eth_cable_m * p_.wire_ns_per_m)
        net_rate = ps_per_byte(s.nic_gbps)
        for i, nic in enumerate(nics):
            h = i // K
            if K == A:   # one NIC per accelerator, attached to it directly (GPUDirect rail)
                b.link(h * A + i % K, nic, ps_per_byte(s.nic_host_gbps), pcie_lat)
            else:        # NICs shared by the host, reached through (one plane of) the in-host switch
                b.link(hsw[h][(i % K) % P], nic, ps_per_byte(s.nic_host_gbps), pcie_lat)
            b.link(nic, rail[i % K] if rails else eth, net_rate, eth_lat)
        if rails:
            up = max(1, H // max(1, len(spines)))
            for r_ in rail:
                for sp in spines:
                    for _ in range(up):
                        b.link(r_, sp, net_rate, eth_lat)
            desc = (f"; {K} NIC{'s' if K > 1 else ''} per host at {s.nic_gbps:g}G on {K} rail switches (NIC i "
                    f"of every host on rail i), {len(spines)} spine{'s' if len(spines) != 1 else ''}")
        else:
            desc = f"; {K} x {s.nic_gbps:g}G NIC(s) per host; one scale-out switch"
    return b, reducing, desc


def build(cfg):
    """Hosts with an in-host switch; hosts joined by RoCE NICs through one Ethernet switch (or, with
    topology.scaleout.switches = rails, through rail switches and spines)."""
    t, s = cfg.topology, cfg.topology.scaleout
    b, reducing, _ = host_fabric(cfg, [t.ports_per_accel], lambda h, p: f"hsw{h}", with_nics=True)
    H, A, R = s.hosts, t.accels_per_domain, s.hosts * t.accels_per_domain
    desc = (f"{H} hosts of {A} accelerators with an in-host switch; {s.nics_per_host} x {s.nic_gbps:g}G RoCE "
            f"NIC(s) per host; " + ("rail switches" if s.switches == "rails" else "one Ethernet switch"))
    return b.freeze(f"scaleout-roce-{R}", R, "scaleout_roce", desc, reducing=reducing)


def size(cfg) -> Size:
    s = cfg.topology.scaleout
    return Size(s.hosts * cfg.topology.accels_per_domain, s.hosts + 1, 2.0)


register(Kind("scaleout_roce", "hosts with an in-host switch joined by RoCE NICs and Ethernet switches", build, size,
              routing="updown", params=ScaleoutParams, section="scaleout"))
