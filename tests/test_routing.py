"""Fabric manager: shortest candidates, flow spreading, switch tables, and the deadlock-freedom proof."""
from collections import Counter, deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric import routing
from fabric._arrays import route_dependencies
from fabric._kernel import kernel
from fabric.config import load_config, preset_names
from fabric.errors import RoutingError
from fabric.network import build
from fabric.sim import as_arrays, kernel_params
from fabric.taskgraph import transfer_graph

_CACHE = {}
SMALL = [p for p in preset_names() if p not in ("sd200-512", "sd200-1024")]


def built(preset, **overrides):
    key = (preset, tuple(sorted(overrides.items())))
    if key not in _CACHE:
        _CACHE[key] = build(load_config(preset=preset, overrides=overrides or None))
    return _CACHE[key]


def bfs_hops(t, s):
    """Unrestricted shortest hop counts from node s, never forwarding through a non-forwarding node."""
    dist = np.full(t.n_nodes, -1)
    dist[s] = 0
    q = deque([s])
    while q:
        u = q.popleft()
        if u != s and not t.node_forwards[u]:
            continue
        for c in np.nonzero(t.ch_src == u)[0]:
            v = t.ch_dst[c]
            if dist[v] < 0:
                dist[v] = dist[u] + 1
                q.append(v)
    return dist


@pytest.mark.parametrize("preset", preset_names())
def test_every_shipped_preset_is_deadlock_free(preset):
    t = built(preset)
    routing.check_deadlock_free(t)           # build() already did; must be repeatable
    assert len(routing.dependency_edges(t)) > 0 or t.n_ranks == 2


@pytest.mark.parametrize("preset", SMALL)
def test_paths_are_walks_from_source_to_destination_and_all_shortest(preset):
    t = built(preset)
    R = t.n_ranks
    for s in range(R):
        dist = bfs_hops(t, s)
        for d in range(R):
            cands = t.paths(s, d)
            if s == d:
                assert cands == []
                continue
            assert cands, (s, d)
            seen = set()
            for p in cands:
                assert t.ch_src[p[0]] == s and t.ch_dst[p[-1]] == d
                assert (t.ch_dst[p[:-1]] == t.ch_src[p[1:]]).all()
                assert t.node_forwards[t.ch_dst[p[:-1]]].all()          # only forwarding nodes in the middle
                assert len(p) == dist[d], (s, d, len(p), dist[d])       # every candidate is a shortest path
                seen.add(tuple(p))
            assert len(seen) == len(cands)                               # candidates are distinct


def test_parallel_ports_and_links_are_spread_evenly():
    t = built("sd200")
    R = t.n_ranks
    # every flow of a pair stays on one path; flows 0..K-1 of rank 0 to rank 63 use both source ports
    k = t.n_candidates(0, 63)
    assert k == 2
    firsts = {int(t.path_for_flow(0, 63, f)[0][0]) for f in range(k)}
    assert len(firsts) == 2
    for f in range(6):
        assert (t.path_for_flow(0, 63, f)[0] == t.path_for_flow(0, 63, f + k)[0]).all()
    # flow 0 of all pairs: parallel channels are used equally often (within one: 63 destinations split 31/32)
    use = Counter()
    for s in range(R):
        for d in range(R):
            if s != d:
                use.update(t.path_for_flow(s, d, 0)[0].tolist())
    for c in range(0, t.n_channels, 2):
        same = np.nonzero((t.ch_src == t.ch_src[c]) & (t.ch_dst == t.ch_dst[c]))[0]
        counts = [use[x] for x in same]
        assert max(counts) - min(counts) <= 1, [t.channel_name(x) for x in same]


def test_routing_is_deterministic():
    a = build(load_config(preset="torus-4x4x4"))
    b = build(load_config(preset="torus-4x4x4"))
    for name in ("pair_ptr", "path_ptr", "path_ch", "path_vcl"):
        assert (getattr(a, name) == getattr(b, name)).all()


def test_mesh_routes_are_dimension_ordered():
    t = built("mesh-4x4x4")
    for s, d in [(0, 63), (63, 0), (5, 42), (17, 17 + 16 * 2 + 3)]:
        dims = []
        for c in t.paths(s, d)[0]:
            delta = int(t.ch_dst[c]) - int(t.ch_src[c])
            dims.append({1: 0, 4: 1, 16: 2}[abs(delta)])
        assert dims == sorted(dims)
    assert t.vc_levels == 1


def test_torus_datelines():
    t = built("torus-4x4x4")
    assert t.vc_levels == 2 and t.routing == "dor-dateline"
    wrap = np.abs(t.node_coord[t.ch_src] - t.node_coord[t.ch_dst]).max(axis=1) > 1
    # a wrap-around hop is always on level 1, and level 1 only follows a wrap in the same dimension
    assert (t.path_vcl[wrap[t.path_ch]] == 1).all()
    p, lv = t.path_for_flow(0, 3, 0)        # x: 0 -> 3 is one hop the short way round, over the dateline
    assert len(p) == 1 and lv.tolist() == [1]


def test_cyclic_routing_on_a_torus_without_datelines_is_refused_naming_a_cycle():
    t = build(load_config(preset="torus-4x4x4"), routing="dor", check=False)
    routing.route(t, "dor", datelines=False)
    assert t.vc_levels == 1
    with pytest.raises(RoutingError, match="could deadlock") as exc:
        routing.check_deadlock_free(t)
    cycle = exc.value.cycle
    assert len(cycle) >= 3 and all("->" in c for c in cycle)
    # the named channels really form a cycle: each one starts where the previous one ends
    ends = [(c.split("->")[0], c.split("->")[1].split("#")[0]) for c in cycle]
    for (a, b), (c, _) in zip(ends, ends[1:] + ends[:1]):
        assert b == c
    assert str(exc.value).count("->") >= len(cycle)


def test_ring_without_datelines_deadlocks_with_datelines_does_not():
    cfg = load_config(overrides={"topology.kind": "accel_torus", "topology.accel_mesh.mesh_dims": "5",
                                 "topology.accel_mesh.links_per_neighbor": 1})
    build(cfg)   # dateline VCs: fine
    t = build(cfg, check=False)
    routing.route(t, "dor", datelines=False)
    with pytest.raises(RoutingError) as exc:
        routing.check_deadlock_free(t)
    assert sorted(exc.value.cycle) == sorted(f"acc{i}->acc{(i + 1) % 5}" for i in range(5)) or \
        sorted(exc.value.cycle) == sorted(f"acc{(i + 1) % 5}->acc{i}" for i in range(5))


def test_unrestricted_shortest_paths_on_the_switch_mesh_are_refused_by_build():
    with pytest.raises(RoutingError, match=r"cycle of \d+ channels: sw\d+->sw\d+"):
        build(load_config(preset="sd200"), routing="shortest")


def test_updown_fallback_is_deadlock_free_on_every_small_preset():
    for preset in ("sd200", "mesh-4x4x4", "torus-4x4x4", "scaleout-roce"):
        t = build(load_config(preset=preset), routing="updown")
        assert t.routing == "updown" and t.vc_levels == 1
        assert all(t.n_candidates(s, d) >= 1 for s in range(0, 64, 7) for d in range(64) if s != d)


def test_switch_tables_are_consistent_with_paths():
    for preset in ("sd200", "scaleout-roce", "torus-4x4x4"):
        t = built(preset)
        tables = routing.switch_tables(t)
        R = t.n_ranks
        from_paths = set()
        for s in range(R):
            for d in range(R):
                for p in t.paths(s, d):
                    for c in p[1:]:
                        node = int(t.ch_src[c])
                        assert c in tables[node][d]
                        from_paths.add((node, d, int(c)))
        from_tables = {(n, d, c) for n, per in tables.items() for d, chs in per.items() for c in chs}
        assert from_tables == from_paths
        # a packet following the tables from any table node always gets one hop closer to its destination
        for n, per in tables.items():
            for d, chs in per.items():
                assert all(t.ch_src[c] == n for c in chs)
        for n, per in tables.items():
            for d, chs in per.items():
                for c in chs:
                    v = int(t.ch_dst[c])
                    assert v == d or d in tables.get(v, {}), (t.node_names[n], d)


def test_sd200_switch_table_uses_both_parallel_links_and_dimension_order():
    t = built("sd200")
    tables = routing.switch_tables(t)
    sw0 = t.node_names.index("sw0")
    out = tables[sw0][63]                  # rank 63 sits behind sw7 = (1,1,1): first hop goes +x to sw1
    assert {t.node_names[t.ch_dst[c]] for c in out} == {"sw1"} and len(out) == 2


@pytest.mark.parametrize("preset,method", [("sd200", "auto"), ("sd200-128", "auto"), ("torus-4x4x4", "auto"),
                                           ("mesh-4x4x4", "auto"), ("scaleout-roce", "auto"), ("sd200", "updown")])
def test_kernel_route_graph_walks_every_route_exactly(preset, method):
    """Packets walk a shared-suffix route graph, not the flat per-path table: from every path's second-hop node the
    walk must give that path's channels and VC levels, hop for hop, and end exactly at its last hop."""
    t = built(preset) if method == "auto" else build(load_config(preset=preset), routing=method)
    eng = kernel.Engine(kernel_params(load_config(preset=preset)), as_arrays(t),
                        as_arrays(transfer_graph(np.array([0]), np.array([1]), np.array([64]))))
    g = eng.route_graph()
    flat = (t.path_ch.astype(np.int64) << g["vcl_bits"]) | t.path_vcl
    pos = t.path_ptr[:-1] + 1                    # the first hop is the flow's (XferC.hv0)
    cur = g["at1"].astype(np.int64)
    assert len(cur) == len(pos)
    while (live := cur >= 0).any():
        assert np.all(pos[live] < t.path_ptr[1:][live])
        assert np.array_equal(g["hv"][cur[live]], flat[pos[live]])
        pos[live] += 1
        cur[live] = g["next"][cur[live]]
    assert np.array_equal(pos, np.maximum(t.path_ptr[1:], t.path_ptr[:-1] + 1))
    # every suffix is stored once: far fewer nodes than route entries wherever routes share destinations
    assert len(g["hv"]) == len(set(zip(g["hv"].tolist(), g["next"].tolist())))
    if t.n_ranks >= 64:
        assert len(g["hv"]) < 0.5 * len(flat)


@pytest.mark.parametrize("preset", ["sd200-128", "torus-4x4x4", "scaleout-roce"])
def test_confined_routes_keep_the_pairs_among_the_first_ranks_and_their_runs(preset):
    """routing.confined(t, n): pairs among ranks 0..n-1 keep their candidates in order, every other pair has none;
    the analytic engine runs an all-to-all among them to the same times on either (the auto tiers rely on it)."""
    t = built(preset)
    n = min(24, t.n_ranks - 1)
    c = routing.confined(t, n)
    R = t.n_ranks
    assert c.vc_levels == t.vc_levels and c.pair_ptr.shape == t.pair_ptr.shape
    for s in range(R):
        for d in range(R):
            k = s * R + d
            got = [c.path_ch[c.path_ptr[p]:c.path_ptr[p + 1]].tolist() for p in range(c.pair_ptr[k], c.pair_ptr[k + 1])]
            if s < n and d < n:
                assert got == [t.path_ch[t.path_ptr[p]:t.path_ptr[p + 1]].tolist()
                               for p in range(t.pair_ptr[k], t.pair_ptr[k + 1])]
            else:
                assert got == []
    cfg = load_config(preset=preset)
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    graph = as_arrays(transfer_graph(src, dst, 9000 + 4096 * (src % 3)))
    runs = []
    for topo in (t, c):
        eng = kernel.Engine(kernel_params(cfg, engine="analytic"), as_arrays(topo), graph, True)
        eng.run()
        runs.append((eng.events, *eng.task_times()))
    assert runs[0][0] == runs[1][0] and all((a == b).all() for a, b in zip(runs[0][1:], runs[1][1:]))
    assert (runs[1][2] > 0).all()


@pytest.mark.parametrize("preset", ["sd200", "torus-4x4x4", "scaleout-roce"])
def test_dependency_edges_are_the_consecutive_hops_of_every_path(preset):
    """dependency_edges (one pass in C) is the set of (hop, next hop) virtual-channel pairs of every path, sorted."""
    t = built(preset)
    L = max(t.vc_levels, 1)
    want = set()
    for p in range(len(t.path_ptr) - 1):
        v = [int(t.path_ch[h]) * L + int(t.path_vcl[h]) for h in range(t.path_ptr[p], t.path_ptr[p + 1])]
        want.update(zip(v, v[1:]))
    got = routing.dependency_edges(t)
    assert [tuple(e) for e in got.tolist()] == sorted(want) and len(want) > 0


def test_bad_method_names():
    t = built("scaleout-roce")
    with pytest.raises(RoutingError, match="unknown routing method"):
        routing.route(t, "magic")
    with pytest.raises(RoutingError, match="needs a mesh"):
        routing.route(build(load_config(preset="scaleout-roce")), "dor")


# ---------------------------------------------------------------- compiled dimension order vs its Python definition

def reference_router_candidates(topo, datelines: bool):
    """The pure-Python loop routing._router_candidates ran before it moved into C (route_tables.pxi, fabric._arrays):
    the definition the compiled tables are checked against."""
    dims, wrap, nodes = topo.mesh_dims, topo.mesh_wrap, topo.mesh_nodes
    X, Y, Z = dims
    S = X * Y * Z
    lanes, width = routing.mesh_lanes(topo)

    cnt = np.zeros(S * S, dtype=np.int64)
    start = np.zeros(S * S, dtype=np.int64)
    cand_ptr, cand_ch, cand_vcl = [0], [], []
    for a in range(S):
        ca = (a % X, (a // X) % Y, a // (X * Y))
        for b in range(S):
            cb = (b % X, (b // X) % Y, b // (X * Y))
            # per dimension: list of (step, n_steps) alternatives
            options = []
            for dim in range(3):
                k, delta = dims[dim], cb[dim] - ca[dim]
                if delta == 0:
                    options.append([(0, 0)])
                elif not wrap[dim]:
                    options.append([(1 if delta > 0 else -1, abs(delta))])
                else:
                    fwd = delta % k
                    back = k - fwd
                    alt = []
                    if fwd <= back:
                        alt.append((1, fwd))
                    if back <= fwd:
                        alt.append((-1, back))
                    options.append(alt)
            start[a * S + b] = len(cand_ptr) - 1
            n = 0
            for lane in range(width if a != b else 1):
                for ox in options[0]:
                    for oy in options[1]:
                        for oz in options[2]:
                            c = list(ca)
                            for dim, (step, steps) in enumerate((ox, oy, oz)):
                                level = 0
                                for _ in range(steps):
                                    u = nodes[c[0] + X * (c[1] + Y * c[2])]
                                    nxt = (c[dim] + step) % dims[dim]
                                    if wrap[dim] and datelines and abs(nxt - c[dim]) != 1:
                                        level = 1        # the wrap-around channel is the dateline
                                    c[dim] = nxt
                                    v = nodes[c[0] + X * (c[1] + Y * c[2])]
                                    chs = lanes[(int(u), int(v))]
                                    cand_ch.append(chs[lane % len(chs)])
                                    cand_vcl.append(level)
                            cand_ptr.append(len(cand_ch))
                            n += 1
            cnt[a * S + b] = n
    return (cnt, start, np.array(cand_ptr, dtype=np.int64), np.array(cand_ch, dtype=np.int32),
            np.array(cand_vcl, dtype=np.int8))


@pytest.mark.parametrize("preset,dims", [("mesh-4x4x4", "3x4x2"), ("torus-4x4x4", None), ("torus-4x4x4", "3x4x2"),
                                         ("torus-4x4x4", "2x5x1"), ("sd200", None), ("sd200-128", None)])
@pytest.mark.parametrize("datelines", [True, False])
def test_compiled_router_candidates_match_the_python_definition(preset, dims, datelines):
    """route_tables.pxi's loop over router pairs gives the tables of the Python loop it replaced, ties and datelines
    included."""
    cfg = load_config(preset=preset, overrides={"topology.accel_mesh.mesh_dims": dims} if dims else None)
    from fabric import topologies
    topo = topologies.get(cfg.topology.kind).build(cfg)
    got = routing._router_candidates(topo, datelines)
    want = reference_router_candidates(topo, datelines)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 99), st.integers(0, 1)), max_size=6), max_size=30),
       st.sampled_from([100, 40_000]), st.integers(1, 2))
def test_route_dependencies_marked_or_sorted_are_the_distinct_hop_pairs(paths, n_ch, levels):
    """route_dependencies gives every distinct (hop, next hop) key, ascending, whether it marks bits (nv^2 <=
    2^30) or sorts the keys (40,000 channels: nv^2 > 2^30); channel ids spread over the whole range."""
    scale = n_ch // 100
    ch = np.array([c * scale for p in paths for c, _ in p], np.int32)
    vcl = np.array([v % levels for p in paths for _, v in p], np.int8)
    ptr = np.r_[0, np.cumsum([len(p) for p in paths])].astype(np.int64)
    nv = n_ch * levels
    keys = {(int(ch[h]) * levels + int(vcl[h])) * nv + int(ch[h + 1]) * levels + int(vcl[h + 1])
            for p in range(len(paths)) for h in range(ptr[p], ptr[p + 1] - 1)}
    assert route_dependencies(ptr, ch, vcl, levels, n_ch).tolist() == sorted(keys)
