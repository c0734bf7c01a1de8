"""HGX H100 / H800 nodes on 400G InfiniBand, any number of nodes (issue 31 part 5): the hgx-h100-ib and hgx-h800-ib
presets build N nodes from topology.scaleout.hosts, with their published per-GPU NVLink and NIC rates, rail-aligned
routes between nodes, and one clear line for a bad node count."""
import pytest
from click.testing import CliRunner

from fabric.cli.probe import main as probe
from fabric.collectives import library as lib
from fabric.config import load_config
from fabric.network import build, size_estimate
from fabric.topology import NIC, SWITCH


def topo(preset, hosts):
    return build(load_config(preset, overrides={"topology.scaleout.hosts": hosts}))


@pytest.mark.parametrize("preset, nvlink_gbps", [("hgx-h100-ib", 450.0), ("hgx-h800-ib", 200.0)])
def test_published_rates_per_gpu(preset, nvlink_gbps):
    """Per direction: H100 SXM 900 GB/s and H800 400 GB/s bidirectional NVLink; ConnectX-7 NDR 400 Gb/s = 50 GB/s."""
    cfg = load_config(preset)
    assert cfg.topology.scaleout.hosts == 2
    view = lib.FabricView(cfg)
    assert view.rank_gbps(0) == pytest.approx(nvlink_gbps)
    assert view.nic_gbps(0) == pytest.approx(50.0)


@pytest.mark.parametrize("hosts", [1, 3, 5])
def test_any_number_of_nodes(hosts):
    t = topo("hgx-h800-ib", hosts)
    assert t.n_ranks == 8 * hosts
    assert sorted(set(t.node_domain[:t.n_ranks].tolist())) == list(range(hosts))
    nics = int((t.node_kind == NIC).sum())
    assert nics == (8 * hosts if hosts > 1 else 0)          # one ConnectX-7 per GPU; a single node has none on
    # 4 NVSwitch planes per node, plus 8 rails and 8 spines once there is a network
    assert int((t.node_kind == SWITCH).sum()) == 4 * hosts + (16 if hosts > 1 else 0)
    est = size_estimate(load_config("hgx-h800-ib", overrides={"topology.scaleout.hosts": hosts}))
    assert (est["ranks"], est["switches"]) == (t.n_ranks, int((t.node_kind == SWITCH).sum()))


def test_routes_between_nodes_stay_on_the_rail_unless_they_change_rail():
    t = topo("hgx-h100-ib", 3)
    names = t.node_names

    def hops(s, d):
        return [names[int(t.ch_dst[c])] for c in t.paths(s, d)[0]]

    same_rail = hops(2, 2 + 16)          # GPU 2 of node 0 -> GPU 2 of node 2: NIC, rail 2, NIC
    assert same_rail == ["nic2", "rail2", "nic18", "acc18"]
    cross = hops(2, 5 + 8)               # GPU 2 of node 0 -> GPU 5 of node 1: up through a spine
    assert cross[:2] == ["nic2", "rail2"] and cross[2].startswith("spine") and cross[3:] == ["rail5", "nic13", "acc13"]
    inside = hops(0, 7)
    assert len(inside) == 2 and inside[0].startswith("nvsw0.")


@pytest.mark.parametrize("bad", ["topology.scaleout.hosts=0", "topology.scaleout.hosts=two"])
def test_a_bad_node_count_is_one_line_exit_2(bad):
    r = CliRunner().invoke(probe, ["topology", "-p", "hgx-h800-ib", "--set", bad])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "topology.scaleout.hosts" in r.output
