"""In-switch reduction and multicast (NVLS class): the switch capability, the kernel's in-switch legs (docs/kernel.md
§In-switch reduction and multicast; pyx/fabric/_kernel/transfers.pxi switch_leg, executor.pxi analytic_oneway) and the
nccl-like library's nvls / nvls_tree / symmetric algorithms (fabric/collectives/nvls.py)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from fabric import sim
from fabric.collectives import build as cbuild
from fabric.collectives.library import fabric_view, tune
from fabric.config import load_config
from fabric.errors import ConfigError
from fabric.network import build
from fabric.taskgraph import SW_DOWN, SW_UP, TRANSFER, GraphBuilder, transfer_graph
from fabric.topology import ACCEL, SWITCH
from fabric.experiments.probe_collective import probe_collective


def _cfg(preset, **ov):
    return load_config(preset, overrides=dict({"collectives.library": "nccl-like"}, **ov))


def test_capability_flag_per_preset():
    """NVSwitch gen3+ presets declare in-switch reduction on their NVSwitch chips only; A100 (gen2) does not."""
    for preset, want in (("dgx-h100", True), ("dgx-b200", True), ("hgx-h200-2x8-roce", True),
                         ("hgx-h100-2x8-ib", True), ("dgx-a100", False)):
        t = build(load_config(preset))
        red = np.asarray(t.node_reduce, bool)
        assert red.shape == (t.n_nodes,)
        nvsw = np.array([n.startswith("nvsw") for n in t.node_names])
        assert red[nvsw].all() == want and not red[~nvsw].any()
        assert not red[t.node_kind == ACCEL].any()


def _link_bytes(topo, res):
    """Payload bytes per (rank, up/down) over the rank <-> in-host switch links."""
    b = res.counters["payload_B"]
    up = np.zeros(topo.n_ranks, np.int64)
    down = np.zeros(topo.n_ranks, np.int64)
    sw = topo.node_kind == SWITCH
    for c in range(topo.n_channels):
        s, d = int(topo.ch_src[c]), int(topo.ch_dst[c])
        if s < topo.n_ranks and sw[d]:
            up[s] += b[c]
        elif d < topo.n_ranks and sw[s]:
            down[d] += b[c]
    return up, down


@pytest.mark.parametrize("engine", ["packet", "analytic"])
def test_legs_cross_one_hop(engine):
    """An UP leg loads only the rank's uplink, a DOWN leg only the switch's downlink; both engines time them."""
    cfg = load_config("dgx-h100")
    topo = build(cfg)
    g = transfer_graph([0, 1], [1, 2], [1 << 16, 1 << 16], [SW_UP, SW_DOWN])
    r = sim.run(cfg, topo, g, engine=engine)
    assert r.outcome == "done"
    if engine == "packet":
        up, down = _link_bytes(topo, r)
        assert up.tolist() == [1 << 16] + [0] * 7
        assert down.tolist() == [0, 0, 1 << 16] + [0] * 5
    assert (r.task_end_ps > 0).all()


def test_no_legs_without_capability():
    """A topology whose switches do not reduce refuses in-switch legs with one ConfigError line."""
    cfg = load_config("dgx-a100")
    topo = build(cfg)
    g = transfer_graph([0], [1], [4096], [SW_UP])
    with pytest.raises(ConfigError, match="without in-switch reduction") as e:
        sim.run(cfg, topo, g)
    assert "\n" not in str(e.value)


def test_tuner_considers_nvls_only_with_capability():
    """The tuner picks nvls for large AllReduce where the switches reduce, never on A100."""
    for preset, cap in (("dgx-h100", True), ("dgx-a100", False)):
        cfg = _cfg(preset)
        ch = tune("allreduce", 256 << 20, 8, cfg, fabric_view(cfg))
        assert (ch.algorithm == "nvls") == cap
    cfg = _cfg("hgx-h200-2x8-roce")
    assert tune("allreduce", 1 << 30, 16, cfg, fabric_view(cfg)).algorithm == "nvls_tree"
    cfg = _cfg("dgx-b200", **{"collectives.nccl_like.symmetric": True})
    assert tune("allreduce", 8, 8, cfg, fabric_view(cfg)).algorithm == "sym_oneshot"
    assert tune("allreduce", 64 << 20, 8, cfg, fabric_view(cfg)).algorithm == "sym_nvls"


def test_nvls_conservation():
    """NVLS AllReduce of M over n: every GPU's uplink and downlink carry exactly M (1 + 1/n) (reduce-load: M up,
    M/n down; multicast: M/n up, M down), on the packet engine's link counters."""
    cfg = _cfg("dgx-h100")
    topo = build(cfg)
    n, M = 8, 8 << 20
    frag = cbuild("allreduce", "nvls", M, n, cfg, semantics=False)
    gb = GraphBuilder(n)
    gb.add_fragment(frag, np.arange(n))
    g = gb.build(validate=True)
    legs = (np.asarray(g.kind) == TRANSFER) & np.isin(np.asarray(g.op), (SW_UP, SW_DOWN))
    assert legs.any() and (np.asarray(g.kind) == TRANSFER)[~legs].sum() == 0
    r = sim.run(cfg, topo, g, engine="packet")
    up, down = _link_bytes(topo, r)
    want = M + M // n
    assert up.tolist() == [want] * n
    assert down.tolist() == [want] * n


@pytest.mark.parametrize("preset,ov,ranks,sizes", [
    ("dgx-h100", {}, 8, (8, 1 << 20, 16 << 20)),
    ("dgx-b200", {"collectives.nccl_like.symmetric": True}, 8, (8, 64 << 10, 1 << 20, 16 << 20)),
    ("hgx-h200-2x8-roce", {}, 16, (16 << 20,)),
])
def test_engines_agree(preset, ov, ranks, sizes):
    """Packet and analytic engines within 5 % on the nvls family (8 B .. 16 MB)."""
    cfg = _cfg(preset, **ov)
    topo = build(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for nb in sizes:
            alg = None
            if preset == "hgx-h200-2x8-roce":
                alg = "nvls_tree"
            a = probe_collective(cfg, "allreduce", nb, ranks=ranks, engine="analytic", topo=topo, algorithm=alg)
            p = probe_collective(cfg, "allreduce", nb, ranks=ranks, engine="packet", topo=topo, algorithm=alg)
            assert a["algorithm"] == p["algorithm"]
            assert abs(p["time_us"] / a["time_us"] - 1) < 0.05, (nb, a["algorithm"], a["time_us"], p["time_us"])


def test_nvls_matches_its_cost_model():
    """The simulated nvls AllReduce follows the tuner's closed form nvls_lat + launch + M(1+1/n)/R_nvls (H100)."""
    from fabric.collectives.library import estimate_ns
    cfg = _cfg("dgx-h100")
    topo = build(cfg)
    view = fabric_view(cfg)
    for nb in (4 << 20, 64 << 20):
        est = estimate_ns("allreduce", "nvls", "Simple", nb, 8, view) / 1000.0
        got = probe_collective(cfg, "allreduce", nb, ranks=8, engine="analytic", topo=topo,
                               algorithm="nvls")["time_us"]
        assert abs(got / est - 1) < 0.06, (nb, est, got)
