"""deepep_ll (issue 31 part 5): DeepEP's low-latency all-to-all over NVLink + InfiniBand, as the nccl-like library's
algorithm (fabric/collectives/alltoall.py): every block delivered once, bytes conserved, every RDMA write
rail-aligned, both engines within the bound docs/serving.md §HGX deployments states, and faster than NCCL's direct
all-to-all at decode sizes."""
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from fabric import collectives
from fabric.collectives import library as lib
from fabric.collectives.alltoall import block_sizes
from fabric.collectives.symbolic import check
from fabric.config import load_config
from fabric.errors import ConfigError
from fabric.experiments.probe_collective import probe_collective
from fabric.lower import lower
from fabric.network import build
from fabric.taskgraph import BUF_OUT, BUF_TMP, TRANSFER

# |analytic / packet - 1| at decode sizes, <= 1 MiB a rank (docs/serving.md §HGX deployments: measured up to 0.11,
# at 4 nodes, where the forwarding GPUs' NVLink ports queue in the packet engine)
ENGINE_BOUND = 0.15


def h800(hosts=2, mode="auto"):
    return load_config("hgx-h800-ib", overrides={"topology.scaleout.hosts": hosts,
                                                  "collectives.nccl_like.alltoall": mode})


def _transfers(frag):
    t = np.flatnonzero(frag.task_kind == TRANSFER)
    return (frag.rank[t].astype(np.int64), frag.peer[t].astype(np.int64), frag.sem.dst_buf[t],
            frag.sem.dst_off[t], frag.sem.length[t])


@pytest.mark.parametrize("hosts, nbytes", [(2, 16 * 1000 + 5), (3, 24 * 64 + 23), (2, 0)])
def test_every_pair_delivered_once_and_bytes_conserved(hosts, nbytes):
    cfg = h800(hosts)
    n = 8 * hosts
    frag = collectives.build("alltoall", "deepep_ll", nbytes, n, cfg)
    check(frag.to_graph())            # every output byte holds its source's block exactly once, no races
    sizes, _ = block_sizes(nbytes, n)
    src, dst, buf, off, length = _transfers(frag)
    out = buf == BUF_OUT
    # one store into every (destination, source slot) of the output, none twice
    slots = dst[out] * n + off[out] // np.maximum(sizes[dst[out]], 1)
    if nbytes:
        assert len(np.unique(slots)) == len(slots) == n * (n - 1)
    # bytes into the outputs = every block but each rank's own; staging bytes = exactly the blocks forwarded
    assert length[out].sum() == sum((n - 1) * int(sizes[j]) for j in range(n))
    node, loc = np.arange(n) // 8, np.arange(n) % 8
    fwd = sum(int(sizes[j]) for i in range(n) for j in range(n) if node[i] != node[j] and loc[i] != loc[j])
    assert length[buf == BUF_TMP].sum() == fwd
    assert length[out & (node[src] != node[dst])].sum() == sum(
        int(sizes[j]) for i in range(n) for j in range(n) if node[i] != node[j] and loc[i] == loc[j])


@pytest.mark.parametrize("chunk, pieces", [(300, 4), (100, 8), (1 << 20, 1)])
def test_pieces_are_sent_in_turn_and_forwarded_as_they_land(chunk, pieces):
    """A 1,000 B block in pieces of at most `chunk` (at most 8): as many staging writes per forwarded block, the
    same bytes, still every block once (symbolic check), each piece after the one before it has landed."""
    cfg = load_config("hgx-h800-ib", overrides={"collectives.nccl_like.deepep_chunk_bytes": chunk})
    n = 16
    frag = collectives.build("alltoall", "deepep_ll", n * 1000, n, cfg)
    check(frag.to_graph())
    _, _, buf, _, length = _transfers(frag)
    staged = buf == BUF_TMP
    forwarded = n * 7      # per source: the 7 GPUs of the other node off its rail
    assert staged.sum() == forwarded * pieces and length[staged].sum() == forwarded * 1000
    ids = np.flatnonzero(frag.task_kind == TRANSFER)[staged]
    chained = np.isin(frag.edge_src, ids) & np.isin(frag.edge_dst, ids)
    assert chained.sum() == forwarded * (pieces - 1)     # piece q + 1 issued when piece q has landed


def test_rdma_writes_stay_on_their_rail_and_forwards_stay_in_the_node():
    cfg = h800(3)
    n = 24
    frag = collectives.build("alltoall", "deepep_ll", n * 4096, n, cfg, semantics=True)
    src, dst, buf, _, _ = _transfers(frag)
    view = lib.fabric_view(cfg)
    net = np.array([view.crosses_nic(int(s), int(d)) for s, d in zip(src, dst)])
    assert net.any()
    assert (src[net] % 8 == dst[net] % 8).all()            # rail peer: the same position in the other node
    assert (src[buf == BUF_TMP] // 8 != dst[buf == BUF_TMP] // 8).all()   # staging only across nodes
    assert not net[buf == BUF_OUT][(src[buf == BUF_OUT] % 8 != dst[buf == BUF_OUT] % 8)].any()


def test_one_node_runs_direct_and_the_tuner_offers_it_only_across_nodes():
    cfg = h800(2)
    one = collectives.build("alltoall", "deepep_ll", 8 * 512, 8, cfg)
    assert not (one.sem.dst_buf == BUF_TMP).any()
    view = lib.fabric_view(cfg)
    assert [a for a, _ in lib.candidates("alltoall", 8 * 512, 8, cfg.collectives, view)] == ["direct"]
    assert [a for a, _ in lib.candidates("alltoall", 16 * 512, 16, cfg.collectives, view)] == ["direct", "deepep_ll"]
    off = h800(2, "direct")          # the default: NCCL's direct only, results as before
    assert collectives.choose("alltoall", 16 * 512, 16, off).algorithm == "direct"
    assert load_config("hgx-h100-2x8-ib").collectives.nccl_like.alltoall == "direct"


@pytest.mark.parametrize("hosts, nbytes", [(2, 64 << 10), (2, 1 << 20), (4, 1 << 20)])
def test_engines_agree_within_the_documented_bound(hosts, nbytes):
    cfg = h800(hosts)
    topo = build(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        t = {e: probe_collective(cfg, "alltoall", nbytes, algorithm="deepep_ll", engine=e, topo=topo)["time_us"]
             for e in ("analytic", "packet")}
    assert abs(t["analytic"] / t["packet"] - 1) <= ENGINE_BOUND, t


@pytest.mark.parametrize("preset", ["hgx-h800-ib", "hgx-h100-ib"])
def test_low_latency_path_beats_direct_at_decode_sizes(preset):
    """A decode step's dispatch: 32 tokens x 7168 B (FP8 hidden) x 8 experts per rank over 16 ranks; and 64 KiB.
    NCCL's direct posts each remote send through its proxy one after the other (o_p2p_ns); DeepEP writes from the
    GPU. The tuner (auto) picks it there, and its estimate is within 2x of the engine."""
    cfg = load_config(preset)
    topo = build(cfg)
    view = lib.fabric_view(cfg)
    for nbytes in (64 << 10, 32 * 7168 * 8):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            t = {a: probe_collective(cfg, "alltoall", nbytes, algorithm=a, engine="packet", topo=topo)["time_us"]
                 for a in ("direct", "deepep_ll")}
        assert t["deepep_ll"] < 0.5 * t["direct"], t
        assert collectives.choose("alltoall", nbytes, 16, cfg).algorithm == "deepep_ll"
        est = lib.deepep_ll_ns(view, nbytes, 16, cfg.collectives) / 1000
        assert 0.5 < est / t["deepep_ll"] < 2, (est, t)


def test_an_unknown_alltoall_mode_is_one_clear_error():
    with pytest.raises(ConfigError, match="collectives.nccl_like.alltoall"):
        load_config("hgx-h800-ib", overrides={"collectives.nccl_like.alltoall": "deepep"})


def _alltoall_trace(n_ranks, group, per_peer_bytes):
    """Members of `group` run one alltoall (coll_bytes: the chunk to each peer), the other ranks one empty compute."""
    cols = (("kind", np.int8), ("stream", np.int32), ("duration_ns", np.float64), ("flops", np.float64),
            ("bytes", np.float64), ("coll_kind", np.int8), ("coll_bytes", np.int64), ("group", np.int32),
            ("peer", np.int32), ("layer", np.int32))

    def table(member):
        op = {"kind": 1, "coll_kind": 4, "coll_bytes": per_peer_bytes, "group": 0} if member else {"group": -1}
        op.update(peer=-1, layer=-1)
        return SimpleNamespace(**{c: np.array([op.get(c, 0)], dt) for c, dt in cols}, op_id=np.arange(1),
                               name=np.array(["a2a"], object), module=np.array([""], object),
                               dep_ptr=np.zeros(2, np.int64), dep_idx=np.zeros(0, np.int64))
    return SimpleNamespace(meta={}, n_ranks=n_ranks, groups=[list(group)],
                           ops=[table(r in group) for r in range(n_ranks)])


@pytest.mark.parametrize("mode, algorithm", [("auto", "deepep_ll"), ("direct", "direct")])
def test_lowering_picks_it_for_a_decode_pool_on_two_other_nodes(mode, algorithm):
    """A decode pool's dispatch (ranks 16..31 = nodes 2 and 3 of 4): the lowering asks the tuner, which runs DeepEP's
    route where the deployment has it."""
    tr = _alltoall_trace(32, range(16, 32), 7168 * 8)
    g = lower(tr, h800(4, mode))
    assert [(m.kind, m.algorithm, m.ranks) for m in g.coll_meta] == [("alltoall", algorithm, tuple(range(16, 32)))]
