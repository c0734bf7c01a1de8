"""The switch_torus kind, the example of a topology kind added as one module (fabric/topologies/switch_torus.py) and
one preset (switch-torus-4x4): it registers, builds, routes deadlock-free (only with its dateline) and replays a
collective on both engines."""
import numpy as np
import pytest

from fabric import collectives, sim, topologies
from fabric.collectives.symbolic import check
from fabric.config import describe, load_config
from fabric.errors import ConfigError, RoutingError
from fabric.network import build, size_estimate
from fabric.routing import check_deadlock_free, route
from fabric.topology import ACCEL, SWITCH, hop_matrix

TORUS = load_config(preset="switch-torus-4x4")


@pytest.fixture(scope="module")
def topo():
    return build(TORUS)


def test_registered_with_its_own_section():
    kind = topologies.get("switch_torus")
    assert kind.routing == "dor" and kind.section_name == "switch_torus"
    keys = {r["key"] for r in describe()}
    assert {"topology.switch_torus.dims", "topology.switch_torus.links_per_neighbor"} <= keys
    assert "switch_torus" in next(r["range"] for r in describe() if r["key"] == "topology.kind")


def test_builds_domains_on_a_torus_of_switches(topo):
    assert topo.kind == "switch_torus" and topo.n_ranks == 64
    assert (topo.node_kind == ACCEL).sum() == 64 and (topo.node_kind == SWITCH).sum() == 16
    assert topo.mesh_dims == (4, 4, 1) and topo.mesh_wrap == (True, True, False)
    sw = np.flatnonzero(topo.node_kind == SWITCH)
    for s in sw:       # 4 accelerators x 2 ports, 4 torus neighbours x 2 links
        out = topo.ch_dst[topo.ch_src == s]
        assert (topo.node_kind[out] == ACCEL).sum() == 8 and len(set(out[topo.node_kind[out] == SWITCH])) == 4
        assert (topo.node_kind[out] == SWITCH).sum() == 8
    est = size_estimate(TORUS)
    assert (est["ranks"], est["switches"]) == (64, 16)


def test_routes_are_shortest_on_the_torus_and_need_the_dateline(topo):
    assert topo.routing == "dor-dateline" and topo.vc_levels == 2
    dom = np.arange(64) // 4
    x, y = dom % 4, dom // 4
    ring = lambda a, b: np.minimum(np.abs(a - b), 4 - np.abs(a - b))         # noqa: E731
    want = 2 + ring(x[:, None], x[None, :]) + ring(y[:, None], y[None, :])
    np.fill_diagonal(want, 0)
    assert (hop_matrix(topo) == want).all()
    plain = route(build(TORUS, check=False), "dor", datelines=False)
    with pytest.raises(RoutingError) as err:
        check_deadlock_free(plain)
    assert err.value.cycle and all(c.startswith("sw") for c in err.value.cycle)


def test_a_collective_replays_on_both_engines(topo):
    frag = collectives.build("allreduce", "ring", 64 << 10, 64, TORUS, semantics=True)
    graph = frag.to_graph(n_ranks=64)
    check(graph)                      # every rank ends with the sum of every rank's data
    packet = sim.run(TORUS, topo, graph, engine="packet")
    assert packet.outcome == "done" and packet.totals["tasks_left"] == 0
    assert packet.totals["delivered"] == packet.totals["carved"] > 0 and packet.totals["duplicates"] == 0
    analytic = sim.run(TORUS, topo, graph, engine="analytic")
    assert analytic.outcome == "done"
    assert analytic.now_ps == pytest.approx(packet.now_ps, rel=0.1)


def test_the_dateline_needs_four_vcs(topo):
    cfg = load_config(preset="switch-torus-4x4", overrides={"link.vcs": 2})
    graph = collectives.build("allreduce", "ring", 4096, 64, cfg).to_graph(n_ranks=64)
    with pytest.raises(ConfigError, match="link.vcs >= 4"):
        sim.run(cfg, topo, graph)


def test_dims_must_be_two_dimensional():
    with pytest.raises(ConfigError, match="2D torus"):
        load_config(preset="switch-torus-4x4", overrides={"topology.switch_torus.dims": "4x4x2"})
    with pytest.raises(ConfigError, match="XxYxZ"):
        load_config(overrides={"topology.switch_torus.dims": "4xq"})
