"""Multi-plane host domains, rail-aligned scale-out NICs, ring order and the hardware-spec presets (hgx builder)."""
from collections import Counter

import numpy as np
import pytest

from fabric import routing
from fabric.config import load_config
from fabric.errors import ConfigError
from fabric.network import build
from fabric.phy import GBps
from fabric.topologies.hgx import plane_split
from fabric.topology import ACCEL, NIC, SWITCH, local_index, ring_order

_CACHE = {}


def built(preset=None, **overrides):
    key = (preset, tuple(sorted(overrides.items())))
    if key not in _CACHE:
        _CACHE[key] = build(load_config(preset=preset, overrides=overrides or None))
    return _CACHE[key]


HGX = {"topology.kind": "hgx", "topology.ports_per_accel": 18, "topology.hgx.switch_planes": 4,
       "topology.hgx.plane_ports": "5,4,4,5"}

# preset: (GPUs per node, links per GPU, planes, per-plane split, per-GPU GB/s per direction from the spec)
SPECS = {
    "dgx-a100": (8, 12, 6, [2] * 6, 300.0),     # 12 x 25 GB/s NVLink3
    "dgx-h100": (8, 18, 4, [5, 4, 4, 5], 450.0),  # 18 x 25 GB/s NVLink4
    "dgx-b200": (8, 18, 2, [9, 9], 900.0),      # 18 x 50 GB/s NVLink5
    "hgx-h100-2x8-ib": (8, 18, 4, [5, 4, 4, 5], 450.0),
    "hgx-h200-2x8-roce": (8, 18, 4, [5, 4, 4, 5], 450.0),
}
MULTI = {"hgx-h100-2x8-ib": (2, 400.0), "hgx-h200-2x8-roce": (2, 400.0)}   # hosts, NIC Gb/s


def _neighbours(t, u, kind=None):
    out = t.ch_dst[t.ch_src == u]
    return out if kind is None else out[t.node_kind[out] == kind]


def test_ports_per_accelerator_may_exceed_sixteen():
    cfg = load_config(overrides={"topology.kind": "hgx", "topology.ports_per_accel": 18})
    assert cfg.topology.ports_per_accel == 18
    with pytest.raises(ConfigError, match="ports_per_accel"):
        load_config(overrides={"topology.ports_per_accel": 0})


@pytest.mark.parametrize("preset", sorted(SPECS))
def test_port_counts_per_accelerator_and_per_plane(preset):
    A, N, P, split, _ = SPECS[preset]
    t = built(preset)
    planes_of_host = {}
    for r in range(t.n_ranks):
        sw = _neighbours(t, r, SWITCH)
        assert len(sw) == N                                   # every port ends on an in-host switch plane
        per_plane = Counter(sw.tolist())
        planes = sorted(per_plane)
        assert len(planes) == P
        assert [per_plane[p] for p in planes] == split
        assert all(t.node_domain[p] == t.node_domain[r] for p in planes)
        planes_of_host.setdefault(int(t.node_domain[r]), set()).update(planes)
    for h, planes in planes_of_host.items():
        assert len(planes) == P
        for i, p in enumerate(sorted(planes)):                # a plane serves exactly the GPUs of its host
            acc = _neighbours(t, p, ACCEL)
            assert len(acc) == A * split[i]
            assert set(int(x) // A for x in acc) == {h}
            assert len(set(acc.tolist())) == A


def test_even_split_and_explicit_split_are_checked():
    assert plane_split(load_config(overrides={**HGX, "topology.hgx.plane_ports": ""})) == [5, 5, 4, 4]
    cfg = load_config(overrides={**HGX, "topology.hgx.plane_ports": "5,5,5"})
    with pytest.raises(ConfigError, match="plane_ports"):
        build(cfg)
    with pytest.raises(ConfigError, match="switch_planes"):
        build(load_config(overrides={**HGX, "topology.hgx.plane_ports": "", "topology.hgx.switch_planes": 20}))


@pytest.mark.parametrize("preset", sorted(SPECS))
def test_per_accelerator_bandwidth_equals_the_spec(preset):
    A, N, P, split, gbps = SPECS[preset]
    t = built(preset)
    for r in range(t.n_ranks):
        out = np.nonzero((t.ch_src == r) & (t.node_kind[t.ch_dst] == SWITCH))[0]
        assert float(GBps(t.ch_ps_per_byte[out]).sum()) == pytest.approx(gbps, rel=1e-9)
        back = t.ch_rev[out]
        assert float(GBps(t.ch_ps_per_byte[back]).sum()) == pytest.approx(gbps, rel=1e-9)


@pytest.mark.parametrize("preset", sorted(MULTI))
def test_rails_nic_i_reaches_only_rail_switch_i(preset):
    hosts, nic_gbps = MULTI[preset]
    t = built(preset)
    A = SPECS[preset][0]
    assert t.n_ranks == hosts * A
    nics = np.nonzero(t.node_kind == NIC)[0]
    assert len(nics) == hosts * A
    rail_of = {}
    for r in range(t.n_ranks):
        mine = _neighbours(t, r, NIC)
        assert len(mine) == 1                                  # one NIC per GPU, attached to it
        nic = int(mine[0])
        sw = _neighbours(t, nic, SWITCH)
        assert len(sw) == 1                                    # the NIC reaches one switch only: its rail
        rail = int(sw[0])
        assert t.node_names[rail] == f"rail{r % A}"
        rail_of.setdefault(r % A, set()).add(rail)
        c = np.nonzero((t.ch_src == nic) & (t.ch_dst == rail))[0]
        assert GBps(t.ch_ps_per_byte[c[0]]) * 8 == pytest.approx(nic_gbps)
    assert all(len(v) == 1 for v in rail_of.values()) and len(rail_of) == A
    for k in range(A):                                        # a rail switch holds NIC k of every host
        rail = t.node_names.index(f"rail{k}")
        nic_nbrs = _neighbours(t, rail, NIC)
        assert sorted(int(_neighbours(t, n, ACCEL)[0]) for n in nic_nbrs) == [h * A + k for h in range(hosts)]


@pytest.mark.parametrize("preset", sorted(SPECS))
def test_routes_exist_for_every_pair_and_are_deadlock_free(preset):
    t = built(preset)
    routing.check_deadlock_free(t)
    R = t.n_ranks
    A = SPECS[preset][0]
    for s in range(R):
        for d in range(R):
            if s == d:
                continue
            paths = t.paths(s, d)
            assert paths
            for p in paths:
                assert t.ch_src[p[0]] == s and t.ch_dst[p[-1]] == d
                assert (t.ch_dst[p[:-1]] == t.ch_src[p[1:]]).all()
            if s // A == d // A:
                assert all(len(p) == 2 for p in paths)         # through one plane
            elif s % A == d % A:
                assert all(len(p) == 4 for p in paths)         # GPU -> NIC -> rail -> NIC -> GPU
                assert all(t.node_names[t.ch_dst[p[1]]] == f"rail{s % A}" for p in paths)


@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-a100", "dgx-b200"])
def test_flows_spread_over_every_plane_and_port(preset):
    A, N, P, split, _ = SPECS[preset]
    t = built(preset)
    use = Counter()
    for s in range(t.n_ranks):
        for d in range(t.n_ranks):
            if s == d:
                continue
            firsts = [int(p[0]) for p in t.paths(s, d)]
            assert len(firsts) == len(set(firsts)) == N       # one candidate per source link
            planes = Counter(int(t.ch_dst[c]) for c in firsts)
            assert sorted(planes.values()) == sorted(split)   # in proportion to the plane's links
            for p in t.paths(s, d):
                use.update(p.tolist())
    assert len(set(use.values())) == 1                         # every channel carries the same number of routes


def test_routing_stays_fast_on_many_hosts():
    import time
    t0 = time.perf_counter()
    t = build(load_config(overrides={**HGX, "topology.scaleout.hosts": 8, "topology.scaleout.switches": "rails"}))
    assert time.perf_counter() - t0 < 10
    assert t.n_ranks == 64 and t.n_candidates(0, 1) == 18


def test_scaleout_roce_can_be_rail_aligned_and_stays_unchanged_by_default():
    t = built("scaleout-roce")
    assert "eth0" in t.node_names and not any(n.startswith("rail") for n in t.node_names)
    t = built("scaleout-roce", **{"topology.scaleout.switches": "rails"})
    for r in range(t.n_ranks):
        nic = int(_neighbours(t, r, NIC)[0])
        assert [t.node_names[x] for x in _neighbours(t, nic, SWITCH)] == [f"rail{r % 8}"]
    routing.check_deadlock_free(t)


def test_rail_only_fabric_has_no_cross_rail_route():
    from fabric.errors import RoutingError
    with pytest.raises(RoutingError, match="no legal route"):
        build(load_config(overrides={**HGX, "topology.scaleout.hosts": 2, "topology.scaleout.switches": "rails",
                                     "topology.scaleout.rail_spines": 0}))


def _crossings(t, order):
    ring = list(order) + [order[0]]
    return [(a, b) for a, b in zip(ring, ring[1:]) if t.node_domain[a] != t.node_domain[b]]


@pytest.mark.parametrize("hosts", [2, 3, 4])
def test_ring_order_is_a_rail_aligned_permutation(hosts):
    t = built(None, **{**HGX, "topology.scaleout.hosts": hosts, "topology.scaleout.switches": "rails"})
    loc = local_index(t)
    order = ring_order(t)
    assert sorted(order) == list(range(t.n_ranks))
    cross = _crossings(t, order)
    assert len(cross) == hosts                                  # each host is visited in one contiguous run
    for a, b in cross:
        assert loc[a] == loc[b]                                 # same rail on both sides
        na, nb = (int(_neighbours(t, x, NIC)[0]) for x in (a, b))
        assert (_neighbours(t, na, SWITCH) == _neighbours(t, nb, SWITCH)).all()
        assert len(t.paths(a, b)[0]) == 4                       # the crossing never climbs to the spine


def test_ring_order_of_a_subgroup_and_of_single_node_and_mesh():
    t = built("hgx-h100-2x8-ib")
    group = [9, 2, 1, 10, 0, 8]
    order = ring_order(t, group)
    assert sorted(order) == sorted(group)
    loc = local_index(t)
    assert all(loc[a] == loc[b] for a, b in _crossings(t, order))
    assert ring_order(built("dgx-h100")) == list(range(8))
    m = built("mesh-4x4x4")
    order = ring_order(m)
    assert sorted(order) == list(range(64))
    hops = [len(m.paths(a, b)[0]) for a, b in zip(order, order[1:])]
    assert max(hops) == 1                                       # snake through the mesh: neighbours only
    with pytest.raises(ValueError):
        ring_order(t, [0, 0, 1])
    with pytest.raises(ValueError):
        ring_order(t, [99])


@pytest.mark.parametrize("preset", sorted(SPECS))
def test_spec_presets_cite_their_sources(preset):
    from fabric.config import preset_text
    text = preset_text(preset)
    assert "http" in text and "[E]" in text and "nccl-like" in text
