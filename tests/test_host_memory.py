"""Host-memory nodes ([topology.host_memory], sd200): their ranks, links and windows, transfers to and from them on
both engines against the zero-load bound, nothing placed on them, and bad parameters refused in one line."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from fabric import phy, sim
from fabric.address import STATUS_UR, build_address_map
from fabric.config import load_config
from fabric.network import shared
from fabric.taskgraph import transfer_graph
from fabric.topology import ACCEL, HOST_MEMORY

HM = "topology.host_memory"


def _cfg(**hm):
    return load_config("sd200", overrides={f"{HM}.{k}": v for k, v in hm.items()})


def test_ranks_names_and_links_of_the_host_memory_nodes():
    cfg = _cfg(nodes_per_domain=2, links_per_node=3)
    t = shared(cfg)
    assert (t.n_ranks, t.n_serving, t.n_host_memory, t.n_spares) == (80, 64, 16, 0)
    assert t.host_memory_ranks.tolist() == list(range(64, 80))
    assert t.host_memory_of(3).tolist() == [70, 71]                     # node k of domain d at d*2 + k
    assert t.node_domain[t.host_memory_ranks].tolist() == np.repeat(np.arange(8), 2).tolist()
    assert t.node_names[70] == "hmem6" and t.node_kind[70] == HOST_MEMORY and t.node_kind[63] == ACCEL
    assert t.host_memory_gib == 8192
    up = np.flatnonzero(t.ch_src == 70)
    assert [t.channel_name(c) for c in up] == ["hmem6->sw3", "hmem6->sw3#1", "hmem6->sw3#2"]
    assert t.ch_ps_per_byte[up] == pytest.approx(phy.ps_per_byte(cfg.topology.host_memory.gbps_per_link))
    assert np.all(t.ch_latency_ps[up] == phy.link_latency_ps(cfg) + phy.ps(cfg.topology.host_memory.latency_ns))
    assert np.all(t.ch_latency_ps[t.ch_rev[up]] == phy.link_latency_ps(cfg))         # stores in are posted


@pytest.mark.parametrize("engine", ["analytic", "packet"])
def test_a_load_from_host_memory_pays_the_dram_latency_once_and_a_store_none(engine):
    """64 B from acc0 to hmem0 against the same to acc1 (both one switch away): a load takes latency_ns longer
    (plus under a ns of the slower link's serialisation), a store under a ns longer."""
    cfg = _cfg(nodes_per_domain=1, latency_ns=250.0)
    t = shared(cfg)

    def took(peer, op):
        return float(sim.run(cfg, t, transfer_graph(np.array([0]), np.array([peer]), np.array([64]), op=op),
                             engine=engine, transfers=False).task_end_ps.max())
    assert phy.ps(250.0) <= took(64, 1) - took(1, 1) <= phy.ps(251.0)
    assert 0 <= took(64, 0) - took(1, 0) <= phy.ps(1.0)


def test_spares_come_before_host_memory_and_are_not_it():
    t = shared(load_config("sd200", overrides={f"{HM}.nodes_per_domain": 1, "topology.sd200.spares": 3}))
    assert (t.n_serving, t.spare_ranks.tolist(), t.host_memory_ranks.tolist()) == (64, [64, 65, 66],
                                                                                  list(range(67, 75)))
    assert [t.node_names[r] for r in (64, 67)] == ["spare0", "hmem0"]


def test_without_host_memory_the_fabric_is_as_before():
    """nodes_per_domain = 0 (the default) builds the very arrays of the plain sd200 (the goldens check results)."""
    a, b = shared(load_config("sd200")), shared(_cfg(nodes_per_domain=0, links_per_node=5, gbps_per_link=1.0))
    assert b.n_host_memory == 0 and b.n_serving == b.n_ranks == 64 and len(b.host_memory_of(0)) == 0
    for name in ("node_names", "ch_src", "ch_dst", "ch_ps_per_byte", "ch_latency_ps", "pair_ptr", "path_ch"):
        assert np.array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name))), name


@pytest.mark.parametrize("src, dst", [(0, 64), (0, 71), (71, 0), (64, 8)])
def test_transfer_to_and_from_host_memory_meets_the_zero_load_bound(src, dst):
    """32 MiB split over the node's links, accelerator <-> host memory (own domain and across the mesh) on the idle
    fabric: wire bytes over the slowest channel's rate plus the path's channel and switch latencies, within 10 %,
    and the two engines agree."""
    cfg = _cfg(nodes_per_domain=1)
    t = shared(cfg)
    L = cfg.topology.host_memory.links_per_node
    per = (32 << 20) // L
    path, _ = t.path_for_flow(src, dst, 0)
    bound_ps = (phy.wire_bytes(cfg, per) * t.ch_ps_per_byte[path].max() + t.ch_latency_ps[path].sum()
                + t.node_latency_ps[t.ch_dst[path[:-1]]].sum())
    g = transfer_graph(np.full(L, src), np.full(L, dst), np.full(L, per))
    got = [float(sim.run(cfg, t, g, engine=e, transfers=False).task_end_ps.max()) for e in ("analytic", "packet")]
    assert all(bound_ps <= x <= 1.1 * bound_ps for x in got), (bound_ps, got)
    assert got[0] == pytest.approx(got[1], rel=1e-3)
    # the host link, not the accelerator's, bounds it
    assert t.ch_ps_per_byte[path].max() == pytest.approx(phy.ps_per_byte(cfg.topology.host_memory.gbps_per_link))


def test_host_memory_windows_translate_and_outside_is_unsupported_request():
    cfg = _cfg(nodes_per_domain=1)
    t = shared(cfg)
    amap = build_address_map(t, cfg)
    W = amap.window_bytes
    for domain, hm in ((0, 64), (0, 71), (5, 64)):            # local and shadow windows
        addr = amap.host_addr(domain, hm, W - 8)
        tr = amap.translate(domain, addr, 8)
        assert tr.ok and tr.dst_rank == hm and tr.is_shadow == (domain != t.node_domain[hm])
        assert tr.global_addr == amap.global_addr(hm, W - 8)
    last = amap.host_addr(0, 71, W - 8)
    assert amap.translate(0, last, 16).status == STATUS_UR    # runs past the last window
    assert amap.translate(0, amap.host_base - 64, 8).status == STATUS_UR   # the host's own DRAM
    assert amap.locate(amap.global_addr(71, W), 1) == (-1, -1)


def test_the_kernel_translates_host_memory_windows_like_the_address_map():
    """Stores and loads addressed by host address (the peer left to the kernel's ingress port): into a host-memory
    node's local and shadow windows they reach that node; past its window's end they complete as UR."""
    cfg = _cfg(nodes_per_domain=1)
    t = shared(cfg)
    amap = build_address_map(t, cfg)
    W = amap.window_bytes
    rows = [(0, amap.host_addr(0, 64, 4096), 0), (0, amap.host_addr(0, 71, 0), 1), (9, amap.host_addr(1, 64, 0), 1),
            (0, amap.host_addr(0, 71, W - 32), 0), (9, amap.host_addr(1, 71, W - 32), 1)]
    src, addr, op = (np.array(c) for c in zip(*rows))
    g = transfer_graph(src, -1, 64, op)
    g["host_addr"] = addr.astype(np.int64)
    res = sim.run(cfg, t, g)
    assert res.transfers["status"][:5].tolist() == [0, 0, 0, STATUS_UR, STATUS_UR]
    assert res.transfers["dst"][:3].tolist() == [64, 71, 64]
    assert res.translation["unsupported_requests"] == 2 and res.translation["shadow_forwards"] == 2


def test_a_trace_cannot_run_on_host_memory_ranks():
    """4 domains of 8 accelerators and 8 host-memory nodes each: 64 ranks, 32 of them serving; the 64-rank trace
    is refused."""
    from fabric.errors import ConfigError
    from fabric.replay import replay
    cfg = load_config("sd200", overrides={"topology.sd200.switch_mesh_dims": "2x2x1", f"{HM}.nodes_per_domain": 8})
    assert shared(cfg).n_ranks == 64 and shared(cfg).n_serving == 32
    with pytest.raises(ConfigError, match="has 32 serving accelerators"):
        replay(None, cfg, engine="analytic")


@pytest.mark.parametrize("sets, message", [
    ([f"{HM}.nodes_per_domain=-1"], f"{HM}.nodes_per_domain=-1 is out of range"),
    ([f"{HM}.gbps_per_link=0"], f"{HM}.gbps_per_link=0.0 is out of range"),
    ([f"{HM}.links_per_node=0"], f"{HM}.links_per_node=0 is out of range"),
    (["topology.kind=link", f"{HM}.nodes_per_domain=1"], "sd200 builder only"),
])
def test_bad_host_memory_parameters_are_one_line(sets, message):
    from fabric.cli.replay import main
    args = [a for s in sets for a in ("--set", s)] + ["--engine", "analytic"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.output
