"""NCCL's double binary tree AllReduce in the nccl-like library (fabric/collectives/tree.py): the two trees, the
fragment's correctness (symbolic), its cost (the tuner's closed form; nothing counted twice), the tuner's use of it
across nodes, and packet / analytic agreement."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from fabric import collectives
from fabric.collectives import library as lib
from fabric.collectives.symbolic import check
from fabric.collectives.tree import btree_parent, dtree_parents, n_chunks
from fabric.config import load_config
from fabric.errors import ConfigError
from fabric.network import build
from fabric.experiments.probe_collective import probe_collective

IB = load_config("hgx-h100-2x8-ib", overrides={"collectives.library": "nccl-like"})


def _depth(par, r):
    d = 0
    while par[r] >= 0:
        r, d = par[r], d + 1
    return d


@pytest.mark.parametrize("N", [2, 3, 4, 5, 7, 8, 16])
def test_double_binary_tree_shape(N):
    """NCCL's trees: each is a binary tree over the nodes of depth <= ceil(log2 N); the two are complementary (a
    node inner in one is a leaf in the other, up to the roots) so that both halves of the data load every node."""
    for par in dtree_parents(N):
        assert sorted(par).count(-1) == 1
        kids = [par.count(r) for r in range(N)]
        assert max(kids) <= 2
        assert max(_depth(par, r) for r in range(N)) <= max(1, math.ceil(math.log2(N)))
    t0, t1 = dtree_parents(N)
    inner0 = {p for p in t0 if p >= 0}
    inner1 = {p for p in t1 if p >= 0}
    if N > 2:
        assert len(inner0 & inner1) <= 1
    assert btree_parent(2) == [-1, 0] and dtree_parents(2)[1] == [1, -1]


@pytest.mark.parametrize("preset,ov,n", [("hgx-h100-2x8-ib", {}, 16),
                                         ("hgx-h200-2x8-roce", {"topology.accels_per_domain": 1,
                                                                "topology.scaleout.nics_per_host": 1}, 2),
                                         ("scaleout-roce", {}, 24)])
def test_fragment_is_correct(preset, ov, n):
    """Uneven sizes, every protocol, one to many channels (both trees), 2 and 3 nodes, one GPU per node."""
    cfg = load_config(preset, overrides=dict({"collectives.library": "nccl-like"}, **ov))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for M, ch, p in [(0, 1, "LL"), (7, 3, "Simple"), (1000, 2, "LL128"), (4099, 5, "LL"),
                         (300000, 8, "Simple")]:
            frag = collectives.build("allreduce", "tree", M, n, cfg, choice=lib.Choice("tree", p, ch))
            g = frag.to_graph(ranks=np.arange(n), n_ranks=max(n, 16))
            g.validate()
            check(g)


def test_nccl_like_only_and_multi_node_only():
    with pytest.raises(ConfigError):
        collectives.build("allreduce", "tree", 64, 16,
                          load_config("hgx-h100-2x8-ib", overrides={"collectives.library": "sd200"}))
    one = load_config("dgx-h100", overrides={"collectives.library": "nccl-like"})
    assert lib.tree_domains(lib.fabric_view(one), 8) is None
    assert "tree" not in {lib.tune("allreduce", nb, 8, one).algorithm for nb in (8, 1 << 20, 1 << 26)}
    assert lib.estimate_ns("allreduce", "tree", "LL", 8, 8, lib.fabric_view(one)) == math.inf


def test_chunks_pipeline_the_tree():
    """NCCL halves a tree chunk until a channel has 8 x depth of them (>= 8 KiB here, <= 64 chunks)."""
    assert n_chunks(8, "LL", 1, 8) == 1
    assert n_chunks(1 << 30, "Simple", 32, 8) == 64
    assert 1 < n_chunks(4 << 20, "LL128", 32, 8) <= 64


def test_small_call_is_latency_without_double_counting():
    """8 B over 2 x 8 GPUs: launch + 2((g-1) h_LL + log2(N) hn_LL) (the fitted step times, which include the hop;
    the fragment subtracts the fabric's own hop once per step); the tree halves the ring's 2(n-1) step chain."""
    view = lib.fabric_view(IB)
    est = lib.estimate_ns("allreduce", "tree", "LL", 8, 16, view)
    h, hn = lib.value("h_LL_ns"), lib.value("h_LL_ns") + lib.value("d_net_ns")
    assert est == pytest.approx(lib.launch_ns(IB.collectives) + 2 * (7 * h + hn) + 2 * 8 / 32.0, rel=1e-3)
    got = probe_collective(IB, "allreduce", 8, ranks=16, engine="analytic", algorithm="tree")
    assert got["protocol"] == "LL"
    assert got["time_us"] * 1e3 == pytest.approx(est, rel=0.03)
    ring = probe_collective(IB, "allreduce", 8, ranks=16, engine="analytic", algorithm="ring")
    assert got["time_us"] < 0.7 * ring["time_us"]


@pytest.mark.parametrize("nb", [4 << 20, 16 << 20])
def test_bandwidth_follows_the_closed_form(nb):
    """Pipelined in chunks, the simulated tree follows the tuner's max(2M / Rintra, M / Rnode) + latency."""
    view = lib.fabric_view(IB)
    got = probe_collective(IB, "allreduce", nb, ranks=16, engine="analytic", algorithm="tree")
    est = lib.estimate_ns("allreduce", "tree", got["protocol"], nb, 16, view) / 1e3
    assert abs(got["time_us"] / est - 1) < 0.1


def test_tuner_uses_the_tree_across_nodes():
    """On 2 x 8 H100 the tuner runs the tree from mid sizes up to where NVLS tree takes over, and the tree is
    faster than the ring there; with two nodes of one GPU the tree ties the ring (same steps, same bytes)."""
    algs = {nb: collectives.choose("allreduce", nb, 16, IB).algorithm for nb in (64 << 10, 1 << 20, 4 << 20)}
    assert set(algs.values()) == {"tree"}
    view = lib.fabric_view(IB)
    for nb, p in ((1 << 20, "LL"), (16 << 20, "LL128")):
        assert lib.estimate_ns("allreduce", "tree", p, nb, 16, view) < lib.estimate_ns("allreduce", "ring", p, nb,
                                                                                        16, view)


SIZES = [8, 1 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20]


def test_engines_agree():
    """Packet and analytic engines within 5 % on the tree fragment, 8 B .. 16 MB, hgx-h100-2x8-ib."""
    topo = build(IB)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for nb in SIZES:
            a = probe_collective(IB, "allreduce", nb, ranks=16, engine="analytic", topo=topo, algorithm="tree")
            p = probe_collective(IB, "allreduce", nb, ranks=16, engine="packet", topo=topo, algorithm="tree")
            assert a["algorithm"] == p["algorithm"] == "tree"
            assert abs(p["time_us"] / a["time_us"] - 1) < 0.05, (nb, a["protocol"], a["time_us"], p["time_us"])
