"""Builders, per-channel PHY arrays, metrics and the `fabric-probe topology` command."""
import json
import time

import numpy as np
import pytest
from click.testing import CliRunner

from fabric import phy
from fabric.config import load_config, preset_names
from fabric.errors import ConfigError
from fabric.network import build
from fabric.topology import ACCEL, NIC, SWITCH, hop_matrix, metrics

_CACHE = {}


def built(preset, **overrides):
    key = (preset, tuple(sorted(overrides.items())))
    if key not in _CACHE:
        _CACHE[key] = build(load_config(preset=preset, overrides=overrides or None))
    return _CACHE[key]


# preset: (ranks, switches, NICs, links)
COUNTS = {
    "sd200": (64, 8, 0, 64 * 2 + 12 * 2),             # 2 ports per accel; 12 cube edges x 2 links
    "sd200-128": (128, 16, 0, 128 * 2 + 28 * 2),       # 4x2x2 mesh: 3*2*2 + 4*1*2 + 4*2*1 = 28 edges
    "sd200-256": (256, 32, 0, 256 * 2 + 64 * 2),       # 4x4x2: 3*4*2 + 4*3*2 + 4*4*1 = 64
    "sd200-512": (512, 64, 0, 512 * 2 + 144 * 2),      # 4x4x4: 3 * 3*16 = 144
    "sd200-1024": (1024, 128, 0, 1024 * 2 + 304 * 2),  # 8x4x4: 7*16 + 3*32 + 3*32 = 304
    "sd200-accel-mesh": (64, 0, 0, 144),               # 4x4x4 mesh: 144 edges, one link each
    "mesh-4x4x4": (64, 0, 0, 144),
    "torus-4x4x4": (64, 0, 0, 192),                    # 3 * 64 ring edges
    "switch-torus-4x4": (64, 16, 0, 64 * 2 + 32 * 2),  # 4x4 torus of switches: 2 * 16 ring edges x 2 links
    "scaleout-roce": (64, 9, 64, 64 * 2 + 64 + 64),    # accel-hsw x2, accel-NIC, NIC-eth
    "link": (2, 0, 0, 1),
    "dgx-a100": (8, 6, 0, 8 * 12),                     # 12 NVLink3 per GPU over 6 NVSwitch planes, no NICs
    "dgx-h100": (8, 4, 0, 8 * 18),                     # 18 NVLink4 per GPU over 4 planes
    "dgx-b200": (8, 2, 0, 8 * 18),                     # 18 NVLink5 per GPU over 2 planes
    # 2 x 4 planes + 8 rail switches + 1 spine; 18 NVLinks, GPU-NIC, NIC-rail per GPU; 8 rails x 2 uplinks
    "hgx-h100-2x8-ib": (16, 17, 16, 16 * (18 + 2) + 8 * 2),
    "hgx-h200-2x8-roce": (16, 17, 16, 16 * (18 + 2) + 8 * 2),
    # 2 x 4 planes + 8 rail switches + 8 spines; per GPU its NVLinks, GPU-NIC, NIC-rail; 8 rails x 8 spines x 1 uplink
    "hgx-h100-ib": (16, 24, 16, 16 * (18 + 2) + 8 * 8),
    "hgx-h800-ib": (16, 24, 16, 16 * (8 + 2) + 8 * 8),   # 8 NVLinks per H800
}


def test_every_shipped_preset_has_expected_counts():
    assert set(COUNTS) == set(preset_names())


@pytest.mark.parametrize("preset", sorted(COUNTS))
def test_builder_counts_and_contract(preset):
    t = built(preset)
    ranks, switches, nics, links = COUNTS[preset]
    assert t.n_ranks == ranks
    assert (t.node_kind[:ranks] == ACCEL).all() and (t.node_kind[ranks:] != ACCEL).all()  # ranks are nodes 0..R-1
    assert int((t.node_kind == SWITCH).sum()) == switches and int((t.node_kind == NIC).sum()) == nics
    assert t.n_links == links and t.n_channels == 2 * links
    assert t.n_nodes == len(t.node_names) == len(set(t.node_names))
    for name, dtype in [("node_kind", np.int8), ("node_domain", np.int32), ("node_latency_ps", np.int64),
                        ("ch_src", np.int32), ("ch_dst", np.int32), ("ch_rev", np.int32),
                        ("ch_ps_per_byte", np.float64), ("ch_latency_ps", np.int64), ("ch_ber", np.float64),
                        ("pair_ptr", np.int64), ("path_ptr", np.int64), ("path_ch", np.int32), ("path_vcl", np.int8)]:
        assert getattr(t, name).dtype == dtype, name
    assert len(t.pair_ptr) == ranks * ranks + 1 and t.pair_ptr[0] == 0 and t.pair_ptr[-1] == len(t.path_ptr) - 1
    assert t.path_ptr[-1] == len(t.path_ch) == len(t.path_vcl)
    assert (t.ch_rev[t.ch_rev] == np.arange(t.n_channels)).all()
    assert (t.ch_src[t.ch_rev] == t.ch_dst).all() and (t.ch_dst[t.ch_rev] == t.ch_src).all()
    assert (t.ch_src != t.ch_dst).all()
    assert (t.node_domain[:ranks] >= 0).all()
    assert isinstance(t.vc_levels, int) and t.vc_levels == int(t.path_vcl.max()) + 1


def test_channel_phy_arrays_follow_config():
    cfg = load_config(overrides={"phy.lanes": 16, "phy.lane_rate_gbps": 32, "phy.line_code_efficiency": 0.5,
                                 "phy.tx_latency_ns": 1.5, "phy.rx_latency_ns": 2.25, "phy.cable_m": 2,
                                 "phy.wire_ns_per_m": 4.9, "phy.ber": 1e-9, "switch.latency_ns": 123.4})
    t = build(cfg)
    assert np.allclose(t.ch_ps_per_byte, 8000 / (16 * 32 * 0.5))
    assert (t.ch_latency_ps == round(1000 * (1.5 + 2.25 + 2 * 4.9))).all()
    assert (t.ch_ber == 1e-9).all()
    assert (t.node_latency_ps[t.node_kind == SWITCH] == 123400).all()
    assert (t.node_latency_ps[:t.n_ranks] == 0).all()   # accelerators behind switches are never crossed


def test_default_config_is_the_sd200_preset():
    a, b = build(load_config()), built("sd200")
    assert a.node_names == b.node_names
    for name in ("ch_src", "ch_dst", "pair_ptr", "path_ch"):
        assert (getattr(a, name) == getattr(b, name)).all()


def test_sd200_structure():
    t = built("sd200")
    sw = np.nonzero(t.node_kind == SWITCH)[0]
    for r in range(64):   # each accelerator: 2 ports, both to its own domain's switch
        out = t.ch_dst[t.ch_src == r]
        assert len(out) == 2 and set(out) == {sw[r // 8]} and t.node_domain[r] == r // 8
    # mesh degree of a 2x2x2 switch: 3 neighbours x 2 links
    for s in sw:
        out = t.ch_dst[t.ch_src == s]
        assert len(out[out >= 64]) == 6 and len(set(out[out >= 64])) == 3


def test_scaleout_per_channel_rates_and_node_latencies():
    t = built("scaleout-roce")
    cfg = load_config(preset="scaleout-roce")
    nic = np.nonzero(t.node_kind == NIC)[0]
    eth = t.node_names.index("eth0")
    to_eth = (t.ch_dst == eth)
    assert to_eth.sum() == 64 and np.allclose(t.ch_ps_per_byte[to_eth], 8000 / 200)
    accel_nic = (t.ch_src < 64) & np.isin(t.ch_dst, nic)
    assert accel_nic.sum() == 64 and np.allclose(t.ch_ps_per_byte[accel_nic], 8000 / 504)
    accel_sw = (t.ch_src < 64) & (t.node_kind[t.ch_dst] == SWITCH)
    assert np.allclose(t.ch_ps_per_byte[accel_sw], 8000 / phy.data_gbps(cfg))
    assert (t.node_latency_ps[nic] == 1_000_000).all() and t.node_latency_ps[eth] == 600_000
    # cross-host: acc -> its NIC -> eth -> NIC -> acc; same host: acc -> in-host switch -> acc
    assert [t.node_names[t.ch_dst[c]] for c in t.paths(0, 9)[0]] == ["nic0", "eth0", "nic9", "acc9"]
    assert [t.node_names[t.ch_dst[c]] for c in t.paths(0, 1)[0]] == ["hsw0", "acc1"]


def test_scaleout_with_one_nic_per_host_routes_through_the_host_switch():
    t = built("scaleout-roce", **{"topology.scaleout.nics_per_host": 1})
    assert [t.node_names[t.ch_dst[c]] for c in t.paths(0, 9)[0]] == ["hsw0", "nic0", "eth0", "nic1", "hsw1", "acc9"]


def test_link_builder():
    t = built("link")
    assert t.n_ranks == 2 and t.n_links == 1
    assert list(t.paths(0, 1)[0]) == [0] and list(t.paths(1, 0)[0]) == [1]


def test_metrics_of_meshes():
    m = metrics(built("mesh-4x4x4"))
    assert m["diameter"] == 9
    # per dimension, sum over all 16 ordered pairs of |x - y| for k=4 is 20; 3 dims x 20 x 16 x 16 / 4032 pairs
    assert m["average_hops"] == pytest.approx(3 * 20 * 256 / (64 * 63))
    assert m["bisection_GBps"] == pytest.approx(16 * 64.0)      # 16 links cross the x cut, 64 GB/s each way
    assert metrics(built("torus-4x4x4"))["diameter"] == 6
    assert metrics(built("torus-4x4x4"))["bisection_GBps"] == pytest.approx(32 * 64.0)  # wrap links double it
    s = metrics(built("sd200"))
    assert s["diameter"] == 5                                    # acc -> sw -> 3 mesh hops -> sw -> acc
    assert s["bisection_GBps"] == pytest.approx(4 * 2 * 64.0)    # 4 cube edges x 2 links
    assert metrics(built("sd200-1024"))["diameter"] == 2 + 7 + 3 + 3


def test_hop_matrix_symmetric_and_zero_diagonal():
    h = hop_matrix(built("sd200"))
    assert (np.diag(h) == 0).all() and (h == h.T).all()
    assert (h[np.arange(64)[:, None] // 8 == np.arange(64)[None, :] // 8] <= 2).all()


def test_1024_accelerators_build_and_route_fast():
    t0 = time.perf_counter()
    t = build(load_config(preset="sd200-1024"))
    elapsed = time.perf_counter() - t0
    assert t.n_ranks == 1024 and t.pair_ptr[-1] == 1024 * 1023 * 2
    assert elapsed < 15, f"sd200-1024 took {elapsed:.1f} s to build, route and check"


@pytest.mark.parametrize("overrides, match", [
    ({"topology.kind": "accel_mesh", "topology.accel_mesh.mesh_dims": "4xq"}, "mesh_dims"),
    ({"topology.sd200.switch_mesh_dims": "0x2x2"}, "switch_mesh_dims"),
    ({"topology.kind": "scaleout_roce", "topology.scaleout.nics_per_host": 3}, "nics_per_host"),
])
def test_bad_topology_config_is_a_clear_config_error(overrides, match):
    with pytest.raises(ConfigError, match=match):
        build(load_config(overrides=overrides))


def test_probe_topology_command(tmp_path):
    from fabric.cli.probe_topology import topology_cmd
    out = tmp_path / "t.json"
    res = CliRunner().invoke(topology_cmd, ["--preset", "mesh-4x4x4", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "diameter         9 hops" in res.output
    data = json.loads(out.read_text())
    for key in ("nodes", "links", "diameter", "average_hops", "bisection_GBps"):
        assert key in data
    assert data["diameter"] == 9 and data["nodes"] == 64 and data["links"] == 144
    res = CliRunner().invoke(topology_cmd, ["--set", "topology.kind=accel_torus",
                                            "--set", "topology.accel_mesh.mesh_dims=5"])
    assert res.exit_code == 0 and "diameter         2 hops" in res.output
    res = CliRunner().invoke(topology_cmd, ["--preset", "no-such"])
    assert res.exit_code == 2 and "unknown preset" in res.output
