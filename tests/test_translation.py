"""Address translation in the kernel: the ingress port of the issuing host domain translates every addressed
transfer through its shadow-window table and a per-port translation cache (endpoint.pxi: window_find, translate).
The kernel agrees with fabric.address on every address, in a window or not; the cache is LRU; its cost is what
the config says; the lowering addresses every store of a collective; a replay counts it all."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric import sim
from fabric._check_build import kernel
from fabric.address import GIB, HOST_BASE, build_address_map
from fabric.config import load_config
from fabric.lower import lower
from fabric.network import build
from fabric.taskgraph import TRANSFER, transfer_graph
from fabric.trace import read

CFG = load_config(preset="sd200")
TOPO = build(CFG)
AMAP = build_address_map(TOPO, CFG)
W = CFG.topology.accel_mem_gib * GIB
R = TOPO.n_ranks


def addressed(src, addr, nbytes, op=0, **edges) -> dict:
    """Independent transfers from src, each to the host address addr (its peer left to the translation)."""
    addr = np.atleast_1d(np.asarray(addr, np.int64))
    g = transfer_graph(np.broadcast_to(src, addr.shape), -1, nbytes, op)
    g["host_addr"] = addr
    g.update(edges)
    return g


def chain(n: int) -> dict:
    """Dependencies 0 -> 1 -> ... -> n-1: the transfers are issued one after another."""
    return dict(succ_ptr=np.r_[np.arange(n), n - 1].astype(np.int64), succ_idx=np.arange(1, n, dtype=np.int32),
                n_deps=np.r_[0, np.ones(n - 1)].astype(np.int32))


# an address: inside a window (near either end, so that some accesses straddle its end), or anywhere at all
window_addr = st.builds(lambda d, r, off: AMAP.host_addr(d, r, 0) + off, st.integers(0, 7), st.integers(0, R - 1),
                        st.one_of(st.integers(0, 4096), st.integers(W - 4096, W - 1)))
any_addr = st.integers(0, (1 << 63) - (1 << 20))
accesses = st.lists(st.tuples(st.integers(0, R - 1), st.one_of(window_addr, any_addr), st.integers(1, 4096),
                              st.sampled_from([0, 1])), min_size=1, max_size=40)


@settings(max_examples=25, deadline=None)
@given(accesses)
def test_kernel_translation_agrees_with_the_address_map(rows):
    """Python's AddressMap.translate and the kernel's ingress port agree on destination and status for random
    addresses, in and out of every window, stores and loads; the counters add up."""
    src, addr, nbytes, op = (np.array(c) for c in zip(*rows))
    res = sim.run(CFG, TOPO, addressed(src, addr, nbytes, op))
    n = len(rows)
    want = [AMAP.translate(int(TOPO.node_domain[s]), int(a), int(b)) for s, a, b in zip(src, addr, nbytes)]
    ok = np.array([t.ok for t in want])
    assert (res.transfers["status"][:n] == np.where(ok, 0, 1)).all()
    assert (res.transfers["dst"][:n] == np.array([t.dst_rank for t in want])).all()
    shadow = np.array([t.is_shadow for t in want])
    x = res.translation
    assert x["translations"] == n and x["unsupported_requests"] == int((~ok).sum())
    assert x["shadow_forwards"] == int(shadow.sum())
    assert x["cross_domain_bytes"] == int(nbytes[shadow].sum())
    assert 1 <= x["cache_misses"] <= n
    assert res.totals["tasks_left"] == 0


def cache_cfg(entries, ways, **more):
    return load_config(preset="sd200", overrides={"endpoint.xlate_cache_entries": entries,
                                                  "endpoint.xlate_cache_ways": ways, **more})


@pytest.mark.parametrize("pages,ways,misses", [(4, 4, 4), (5, 4, 5 * 3), (1, 1, 1), (2, 1, 2 * 3)])
def test_fully_associative_cache_is_lru(pages, ways, misses):
    """One set of `ways` entries, `pages` pages touched round robin three times: every page misses once when they
    fit, every access misses when one more than the ways cycles through (LRU's worst case)."""
    cfg = cache_cfg(ways, ways)
    page = cfg.endpoint.xlate_page_bytes
    addr = [AMAP.host_addr(0, 9, (i % pages) * page) for i in range(3 * pages)]
    res = sim.run(cfg, TOPO, addressed(0, addr, 64, **chain(len(addr))))
    assert res.translation["cache_misses"] == misses and res.translation["translations"] == 3 * pages


def test_no_cache_walks_the_table_every_time():
    cfg = cache_cfg(0, 1)
    addr = [AMAP.host_addr(0, 9, 0)] * 5
    assert sim.run(cfg, TOPO, addressed(0, addr, 64)).translation["cache_misses"] == 5


def test_a_miss_costs_the_table_walk_and_a_hit_the_flat_translation():
    """Two dependent stores to one page: the first (cold) takes translation_miss_ns longer than a rank-addressed
    store, the second exactly as long; with a free walk the addressed replay is the rank-addressed one."""
    miss_ns = CFG.endpoint.translation_miss_ns
    assert miss_ns > 0
    addr = [AMAP.host_addr(0, 63, 0)] * 2
    a = sim.run(CFG, TOPO, addressed(0, addr, 64, **chain(2)))
    b = sim.run(CFG, TOPO, dict(transfer_graph([0, 0], 63, 64), **chain(2)))
    took = lambda r: r.task_end_ps - r.task_start_ps
    assert took(a)[0] - took(b)[0] == round(miss_ns * 1000) and took(a)[1] == took(b)[1]
    assert a.translation["shadow_forwards"] == 2 and b.translation["translations"] == 0


def test_bounded_window_table_answers_unsupported_request_beyond_it():
    """A table of 8 entries holds domain 0's local windows only: shadow accesses become Unsupported Requests."""
    cfg = load_config(preset="sd200", overrides={"endpoint.shadow_windows": 8})
    addr = [AMAP.host_addr(0, r, 128) for r in (1, 7, 8, 63)]
    res = sim.run(cfg, TOPO, addressed(0, addr, 64))
    assert res.transfers["status"][:4].tolist() == [0, 0, 1, 1]
    assert res.translation["unsupported_requests"] == 2 and res.translation["shadow_forwards"] == 0


def test_lowering_addresses_every_store_in_the_peer_window():
    """Every store and load of a lowered trace carries a global address inside its peer's window; the host
    address its issuer sees translates back to it, to that peer."""
    cfg = load_config(preset="sd200")
    g = lower(read("traces/toy-mla-tp8.h5"), cfg)
    xf = (g.kind == TRANSFER) & (g.op <= 1)
    assert xf.any() and (g.addr[xf] >= 0).all() and (g.addr[~xf] == -1).all()
    assert ((g.addr[xf] // W) == g.peer[xf]).all()
    graph, tables = sim.kernel_inputs(cfg, TOPO, g)
    host = graph["host_addr"][xf]
    assert tables is not None and (host >= HOST_BASE).all()
    for t in np.flatnonzero(xf)[:200]:
        tr = AMAP.translate(int(TOPO.node_domain[g.rank[t]]), int(graph["host_addr"][t]), int(g.nbytes[t]))
        assert tr.ok and tr.dst_rank == g.peer[t] and tr.global_addr == g.addr[t]


@pytest.mark.parametrize("analytic", [False, True])
def test_engine_packing_addresses_into_kernel_inputs_array_changes_nothing(analytic):
    """sim.make_engine lets the Engine pack its transfers' addresses into the host_addr array kernel_inputs made
    (own_addresses); the run is the one a copy gives, and a host_addr the caller passed in is left as it was."""
    cfg = load_config(preset="sd200")
    g = lower(read("traces/toy-mla-tp8.h5"), cfg)
    graph, tables = sim.kernel_inputs(cfg, TOPO, g)
    given = graph["host_addr"].copy()
    ends = []
    for own in (False, True):
        eng = kernel.Engine(sim.kernel_params(cfg, TOPO), sim.as_arrays(TOPO), dict(graph), analytic, xlate=tables,
                            options=kernel.EngineOptions(own_addresses=own))
        while eng.run() == kernel.PAUSED:
            pass
        ends.append((eng.task_times()[1].copy(), eng.translations()))
        assert (graph["host_addr"] == given).all() != own          # packed in place: transfers come first
    assert (ends[0][0] == ends[1][0]).all() and ends[0][1] == ends[1][1]
    kept = dict(sim.as_arrays(g), host_addr=given.copy())
    sim.run(cfg, TOPO, kept, engine="analytic" if analytic else "packet")
    assert (kept["host_addr"] == given).all()


def test_free_translation_walk_reproduces_the_rank_addressed_replay():
    """The default model equals the flat cost it replaced whenever the cache hits: with a free table walk the
    addressed toy step's task times equal those of the same graph addressed by rank."""
    cfg = load_config(preset="sd200", overrides={"endpoint.translation_miss_ns": 0.0})
    g = lower(read("traces/toy-mla-tp8.h5"), cfg)
    a = sim.run(cfg, TOPO, g)
    b = sim.run(cfg, TOPO, {k: v for k, v in vars(g).items() if k != "addr"})
    assert a.translation["translations"] == int(((g.kind == TRANSFER) & (g.op <= 1)).sum())
    assert (a.task_end_ps == b.task_end_ps).all() and b.translation["translations"] == 0


def test_replay_reports_translation():
    from fabric.replay import replay
    r = replay("traces/toy-mla-tp8.h5", CFG)
    x = r["translation"]
    assert x["translations"] > 0 and x["cache_misses"] > 0 and x["unsupported_requests"] == 0
    assert 0 < x["miss_rate"] <= 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.one_of(st.integers(0, R * W - 1), st.integers(R * W, 1 << 62))),
                min_size=1, max_size=30))
def test_to_host_array_matches_to_host(rows):
    dom, g = (np.array(c, np.int64) for c in zip(*rows))
    got = AMAP.to_host_array(dom, g)
    for d, a, h in zip(dom, g, got):
        want = AMAP.to_host(int(d), int(a))
        assert h == (want.host_addr if want.ok else 0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, R + 2), st.one_of(st.integers(-(1 << 62), R * W - 1),
                                                            st.integers(R * W, (1 << 63) - 1))),
                min_size=1, max_size=30))
def test_issuer_host_array_is_to_host_in_the_issuers_domain(rows):
    """What sim.kernel_inputs hands the kernel: each address as its issuing rank's domain sees it (the rank clipped
    into range), a negative one -1 (addressed by rank), one past the global map 0 (an Unsupported Request)."""
    rank, g = (np.array(c, np.int64) for c in zip(*rows))
    got = AMAP.issuer_host_array(rank, g)
    for r, a, h in zip(rank, g, got):
        want = AMAP.to_host(int(TOPO.node_domain[min(max(r, 0), R - 1)]), int(a))
        assert h == (-1 if a < 0 else want.host_addr if want.ok else 0)


@pytest.mark.parametrize("sets,fix", [({"endpoint.xlate_cache_entries": 6}, "x a power of two"),
                                      ({"endpoint.xlate_page_bytes": 3000}, "must be a power of two")])
def test_bad_translation_cache_geometry_is_one_config_error(sets, fix):
    from fabric.errors import ConfigError
    with pytest.raises(ConfigError, match=fix):
        load_config(preset="sd200", overrides=sets)
