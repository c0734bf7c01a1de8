"""The fabric manager: shortest-path routes for every rank pair, per-switch tables, and a deadlock-freedom proof.

Algorithms (`route(topo, method=...)`):
- ``dor``: dimension-order (x, then y, then z) on the router mesh of `topo` (the domain switches of sd200, the
  accelerators of an accelerator mesh). On tori the shorter way round each ring is taken (both ways when they tie)
  and a dateline raises the VC level to 1 from the wrap-around channel on, until the next dimension starts
  (Dally & Seitz). Parallel ports and links give several equal candidates.
- ``updown``: the general fallback for arbitrary graphs (scale-out). Channels between two forwarding nodes are
  oriented "up" towards a root (BFS level, then node id); a legal route climbs zero or more up channels then
  descends zero or more down channels. Channels that touch a non-forwarding endpoint carry no dependency through
  that endpoint and are unrestricted. Every shortest *legal* path is a candidate (at most `max_candidates`).
- ``shortest``: every shortest path with no restriction. Not deadlock-free in general; it exists so that tests
  (and users) can see `check_deadlock_free` refuse a cyclic routing.
- ``auto``: ``dor`` where the builder made a mesh, else ``updown``.

Candidates of pair (s, d) are rotated by (s + d) so that flow 0 of different pairs starts on different ports and
links; the kernel takes candidate `flow % n`, so every flow stays on one path (in order) and flows spread
deterministically.
"""
from __future__ import annotations

from collections import Counter, deque

import numpy as np

from fabric._check_build import arrays
from fabric.errors import RoutingError
from fabric.taskgraph import csr_ranges
from fabric.topology import Topology

METHODS = ("auto", "dor", "updown", "shortest")


def route(topo: Topology, method: str = "auto", *, datelines: bool = True, max_candidates: int = 16) -> Topology:
    """Fill topo.pair_ptr/path_ptr/path_ch/path_vcl/vc_levels (in place; also returned).

    `datelines=False` on a torus gives plain dimension order without dateline VCs: cyclic, for tests.
    """
    if method not in METHODS:
        raise RoutingError(f"unknown routing method {method!r}; use one of {', '.join(METHODS)}")
    if method == "auto":
        method = "dor" if topo.mesh_dims else "updown"
    if method == "dor":
        if not topo.mesh_dims:
            raise RoutingError(f"dimension-order routing needs a mesh; {topo.name} is not one (use updown)")
        _route_dor(topo, datelines)
        torus = any(topo.mesh_wrap)
        topo.routing = "dor-dateline" if torus and datelines else "dor"
    else:
        _route_graph(topo, restrict=(method == "updown"), max_candidates=max_candidates)
        topo.routing = method
    topo.vc_levels = int(topo.path_vcl.max()) + 1 if len(topo.path_vcl) else 1
    return topo


# ---------------------------------------------------------------- dimension order on a router mesh

def mesh_lanes(topo: Topology) -> tuple[dict[tuple[int, int], list[int]], int]:
    """The parallel channels (lanes) from each mesh router to each neighbour, in lane order, and the most of them."""
    is_router = np.zeros(topo.n_nodes, dtype=bool)
    is_router[topo.mesh_nodes] = True
    between = np.nonzero(is_router[topo.ch_src] & is_router[topo.ch_dst])[0]
    lanes: dict[tuple[int, int], list[int]] = {}
    for c in between:  # channel ids ascend with lane index, so each list is in lane order
        lanes.setdefault((int(topo.ch_src[c]), int(topo.ch_dst[c])), []).append(int(c))
    return lanes, max((len(v) for v in lanes.values()), default=1)


def _router_candidates(topo: Topology, datelines: bool):
    """Candidate router-level paths for every router pair: (cnt[S*S], start[S*S], cand_ptr, cand_ch, cand_vcl)."""
    dims, wrap, nodes = topo.mesh_dims, topo.mesh_wrap, topo.mesh_nodes
    X, Y, Z = dims
    S = X * Y * Z
    lanes, width = mesh_lanes(topo)

    # per router and direction (2 * dim + (step < 0)) the lane channels to its neighbour there; the loop over
    # router pairs runs in the array passes' extension (route_tables.pxi), ~100x the pure-Python loop it replaces
    nb_n = np.zeros((S, 6), dtype=np.int32)
    nb_ch = np.full((S, 6, width), -1, dtype=np.int32)
    for r in range(S):
        cr = [r % X, (r // X) % Y, r // (X * Y)]
        for dim in range(3):
            for step in (1, -1):
                c = list(cr)
                c[dim] = (c[dim] + step) % dims[dim]
                chs = lanes.get((int(nodes[r]), int(nodes[c[0] + X * (c[1] + Y * c[2])])), [])
                nb_n[r, 2 * dim + (step < 0)] = len(chs)
                nb_ch[r, 2 * dim + (step < 0), :len(chs)] = chs
    return arrays.dor_router_candidates(X, Y, Z, tuple(bool(w) for w in wrap), bool(datelines), nb_ch, nb_n, width)


def _route_dor(topo: Topology, datelines: bool) -> None:
    R = topo.n_ranks
    S = len(topo.mesh_nodes)
    cnt, start, cptr, cch, cvcl = _router_candidates(topo, datelines)
    # pair (s, d) has lcm(m, N) paths (m router candidates, N port slots per rank; none when s == d); path j: router
    # candidate start[ab] + (j + s + d) % m between an up port (j + d) % N and a down port (j + s) % N, VC level 0
    # on those two hops (the loops over pairs and paths run in route_tables.pxi)
    up, down = _attach_ports(topo) if topo.rank_ports > 0 else (None, None)
    N = up.shape[1] if up is not None else 0
    pair_ptr, path_ptr, path_ch, path_vcl = arrays.dor_expand_paths(R, S, topo.rank_router, N, cnt, start, cptr, cch,
                                                                    cvcl, up, down)
    topo.pair_ptr, topo.path_ptr, topo.path_ch, topo.path_vcl = pair_ptr, path_ptr, path_ch, path_vcl


def _attach_ports(topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """int32[R, N] channels rank -> router (up) and router -> rank (down), in lane order. Accelerators have
    rank_ports ports, host-memory ranks their own count; N is the lcm of the counts and a rank with n ports repeats
    them N / n times, so port slot (j + d) % N is its port (j + d) % n and an accelerator pair's candidate j is the
    one it has without host memory (N = rank_ports then)."""
    R = topo.n_ranks
    router_nodes = topo.mesh_nodes[topo.rank_router]
    out = []
    for mine, other in ((topo.ch_src, topo.ch_dst), (topo.ch_dst, topo.ch_src)):
        sel = np.nonzero((mine < R) & (other >= R))[0]
        sel = sel[np.lexsort((topo.ch_lane[sel], mine[sel]))]
        count = np.bincount(mine[sel], minlength=R)
        want = np.full(R, topo.rank_ports)
        want[topo.n_ranks - topo.n_host_memory:] = np.maximum(count[topo.n_ranks - topo.n_host_memory:], 1)
        if np.any(count != want) or np.any(other[sel] != np.repeat(router_nodes, count)):
            raise RoutingError(f"{topo.name}: every accelerator must have exactly {topo.rank_ports} ports to its "
                               f"router, and every host-memory node at least one")
        N = int(np.lcm.reduce(np.unique(count)))
        first = np.concatenate(([0], np.cumsum(count)[:-1]))
        slot = first[:, None] + np.arange(N)[None, :] % count[:, None]
        out.append(sel[slot].astype(np.int32))
    return out[0], out[1]


# ---------------------------------------------------------------- general graphs: up*/down* or plain shortest

def _orientation(topo: Topology, alive: np.ndarray | None = None) -> np.ndarray:
    """int8[C]: +1 up, -1 down, 0 unrestricted (touches a non-forwarding endpoint). Roots: highest degree. alive:
    the channels that still work (default all); the BFS levels are taken over them."""
    fwd = topo.node_forwards
    inner = fwd[topo.ch_src] & fwd[topo.ch_dst]
    if alive is not None:
        inner = inner & alive
    n = topo.n_nodes
    adj: list[list[int]] = [[] for _ in range(n)]
    for c in np.nonzero(inner)[0]:
        adj[topo.ch_src[c]].append(int(topo.ch_dst[c]))
    level = np.full(n, -1, dtype=np.int64)
    degree = np.array([len(a) for a in adj])
    for root in sorted(np.nonzero(fwd)[0], key=lambda v: (-degree[v], v)):  # one root per component
        if level[root] >= 0:
            continue
        level[root] = 0
        q = deque([root])
        while q:
            u = q.popleft()
            for v in adj[u]:
                if level[v] < 0:
                    level[v] = level[u] + 1
                    q.append(v)
    key_src = level[topo.ch_src] * n + topo.ch_src
    key_dst = level[topo.ch_dst] * n + topo.ch_dst
    orient = np.where(key_dst < key_src, 1, -1).astype(np.int8)
    orient[~inner] = 0
    return orient


_ENUMERATION_LIMIT = 4096


def _select(found: list, k: int) -> list:
    """The candidates of one pair from its enumerated shortest legal paths.

    Kept as they are when there are at most k and every first hop (source port) and every last hop (destination
    port) is used equally often: then flows spread evenly over the ports already. Otherwise a greedy choice keeps
    the use of every channel even: each pick takes the path whose most-used channel is least used so far (then the
    smallest total use, then the first enumerated). It picks the largest multiple of lcm(F, L) (F source and L
    destination ports) up to max(k, F, L), so that every port is used the same number of times, or max(k, F, L)
    when lcm(F, L) is larger; every source port keeps a candidate even where it has more ports than k (18 NVLinks
    over 4 planes split 5,4,4,5: 18 candidates, one per link, instead of the 82 plane-local port pairs, which would
    load the 5-port planes 10% more than the 4-port ones).
    """
    n = len(found)
    cf = Counter(p[0] for p in found)
    cl = Counter(p[-1] for p in found)
    if n <= k and len(set(cf.values())) == 1 and len(set(cl.values())) == 1:
        return found
    m = np.array(found, dtype=np.int64)            # shortest paths: all of one length
    F, L = len(cf), len(cl)
    cap = max(k, F, L)
    want = F * L // int(np.gcd(F, L))
    K = min(n, (cap // want) * want if want <= cap else cap)
    ids, inv = np.unique(m, return_inverse=True)
    inv = inv.reshape(m.shape)
    use = np.zeros(len(ids), dtype=np.int64)
    free = np.ones(n, dtype=bool)
    out = []
    big = 4 * n * m.shape[1] + 1
    for _ in range(K):
        u = use[inv]
        score = u.max(axis=1) * big + u.sum(axis=1)
        score[~free] = np.iinfo(np.int64).max
        i = int(np.argmin(score))
        free[i] = False
        use[inv[i]] += 1
        out.append(found[i])
    return out


def _route_graph(topo: Topology, restrict: bool, max_candidates: int) -> None:
    R = topo.n_ranks
    by_pair = graph_paths(topo, restrict, max_candidates)
    counts = np.zeros(R * R, dtype=np.int64)
    for (s, d), found in by_pair.items():
        counts[s * R + d] = len(found)
    pair_ptr = np.zeros(R * R + 1, dtype=np.int64)
    np.cumsum(counts, out=pair_ptr[1:])
    flat: list[int] = []
    lens: list[int] = []
    for s in range(R):
        for d in range(R):
            for p in by_pair.get((s, d), ()):
                flat.extend(p)
                lens.append(len(p))
    path_ptr = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=path_ptr[1:])
    topo.pair_ptr, topo.path_ptr = pair_ptr, path_ptr
    topo.path_ch = np.array(flat, dtype=np.int32)
    topo.path_vcl = np.zeros(len(flat), dtype=np.int8)


def graph_paths(topo: Topology, restrict: bool, max_candidates: int, alive: np.ndarray | None = None,
                pairs=None, enumeration_limit: int = _ENUMERATION_LIMIT) -> dict[tuple[int, int], list[list[int]]]:
    """Candidate paths (lists of channels) of every rank pair, or of `pairs` only: the shortest paths (up*/down*
    legal when `restrict`; at most enumeration_limit enumerated per pair), `_select`ed down to max_candidates and
    rotated by (s + d). alive: bool[C], the channels that may be used (default all; the fabric manager's reroute
    passes the surviving ones)."""
    n, R = topo.n_nodes, topo.n_ranks
    orient = _orientation(topo, alive) if restrict else np.zeros(topo.n_channels, dtype=np.int8)
    fwd = topo.node_forwards
    into: list[list[int]] = [[] for _ in range(n)]
    out: list[list[int]] = [[] for _ in range(n)]
    for c in range(topo.n_channels):
        if alive is not None and not alive[c]:
            continue
        into[topo.ch_dst[c]].append(c)
        out[topo.ch_src[c]].append(c)
    src_l, dst_l = topo.ch_src.tolist(), topo.ch_dst.tolist()
    orient_l = orient.tolist()

    def step(phase: int, c: int) -> int:
        """Phase after taking channel c in `phase` (0 may still climb, 1 descending), -1 if illegal."""
        o = orient_l[c]
        if o == 0:
            return phase
        if o > 0:
            return 0 if phase == 0 else -1
        return 1

    wanted: dict[int, list[int]] | None = None
    if pairs is not None:
        wanted = {}
        for s, d in sorted(pairs):
            wanted.setdefault(d, []).append(s)
    by_pair: dict[tuple[int, int], list[list[int]]] = {}
    for d in (range(R) if wanted is None else sorted(wanted)):
        # reverse BFS over states (node, phase): dist[phase][node] = hops to d
        dist = [[-1] * n, [-1] * n]
        dist[0][d] = dist[1][d] = 0
        q = deque([(d, 0), (d, 1)])
        while q:
            v, pv = q.popleft()
            for c in into[v]:
                u = src_l[c]
                for pu in (0, 1):
                    if step(pu, c) == pv and dist[pu][u] < 0:
                        dist[pu][u] = dist[pv][v] + 1
                        if fwd[u]:          # non-forwarding nodes may start a path but never carry one
                            q.append((u, pu))
        for s in (range(R) if wanted is None else wanted[d]):
            if s == d:
                continue
            if dist[0][s] < 0:
                raise RoutingError(f"{topo.name}: no {'legal ' if restrict else ''}route from "
                                   f"{topo.node_names[s]} to {topo.node_names[d]}")
            found: list[list[int]] = []
            stack = [(s, 0, [])]
            while stack and len(found) < enumeration_limit:
                u, pu, acc = stack.pop()
                if u == d:
                    found.append(acc)
                    continue
                want = dist[pu][u] - 1
                nxt = []
                for c in out[u]:
                    v = dst_l[c]
                    pv = step(pu, c)
                    if pv >= 0 and dist[pv][v] == want and (v == d or fwd[v]):
                        nxt.append((v, pv, acc + [c]))
                stack.extend(reversed(nxt))   # depth first, lowest channel id first
            found = _select(found, max_candidates)
            rot = (s + d) % len(found)
            by_pair[(s, d)] = found[rot:] + found[:rot]
    return by_pair


# ---------------------------------------------------------------- deadlock freedom

def dependency_edges(topo: Topology) -> np.ndarray:
    """Unique channel dependencies as int64 pairs [E, 2] of virtual channels (channel * vc_levels + level), in
    ascending order: consecutive hops of every path (one pass in C over ~15 M route entries at 1024 ranks)."""
    L = max(topo.vc_levels, 1)
    nv = topo.n_channels * L
    key = arrays.route_dependencies(topo.path_ptr, topo.path_ch, topo.path_vcl, L, topo.n_channels)
    return np.stack(np.divmod(key, nv), axis=1)


def check_deadlock_free(topo: Topology) -> None:
    """Raise RoutingError naming a cycle if the channel-dependency graph of the routes has one.

    Vertices are virtual channels (channel, VC level); an edge joins consecutive hops of a path. The graph is the
    same for each traffic class (requests and responses use separate VCs with the same routes), so one check covers
    all of them. Kahn's algorithm removes sources; whatever remains holds a cycle, found by walking predecessors.
    """
    L = max(topo.vc_levels, 1)
    nv = topo.n_channels * L
    edges = dependency_edges(topo)
    if not len(edges):
        return
    a, b = edges[:, 0], edges[:, 1]
    indeg = np.bincount(b, minlength=nv)
    order = np.argsort(a, kind="stable")
    succ_ptr = np.zeros(nv + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=nv), out=succ_ptr[1:])
    succ = b[order].tolist()
    sp = succ_ptr.tolist()
    deg = indeg.tolist()
    stack = [u for u in range(nv) if deg[u] == 0]
    removed = 0
    while stack:
        u = stack.pop()
        removed += 1
        for w in succ[sp[u]:sp[u + 1]]:
            deg[w] -= 1
            if deg[w] == 0:
                stack.append(w)
    if removed == nv:
        return
    alive = np.array(deg) > 0
    pred: dict[int, int] = {}
    for x, y in zip(a.tolist(), b.tolist()):
        if alive[x] and alive[y] and y not in pred:
            pred[y] = x
    cur = int(np.nonzero(alive)[0][0])
    seen: dict[int, int] = {}
    walk: list[int] = []
    while cur not in seen:
        seen[cur] = len(walk)
        walk.append(cur)
        cur = pred[cur]
    cycle = walk[seen[cur]:][::-1]           # predecessors walked backwards: reverse into forward order
    names = [topo.channel_name(vc // L) + (f"@vc{vc % L}" if L > 1 else "") for vc in cycle]
    err = RoutingError(f"routing of {topo.name} ({topo.routing or 'custom'}) could deadlock: the channel-dependency "
                       f"graph has a cycle of {len(names)} channels: {' -> '.join(names + names[:1])}")
    err.cycle = names
    raise err


# ---------------------------------------------------------------- per-switch tables

def switch_tables(topo: Topology) -> dict[int, dict[int, tuple[int, ...]]]:
    """tables[node][dst rank] = output channels used by the routes at that forwarding node (for inspection).

    Every hop after the first of every candidate path contributes (node it leaves, destination, channel); the first
    hop is the source's own port choice (source routing), not a table entry.
    """
    R = topo.n_ranks
    n_paths = len(topo.path_ptr) - 1
    path_pair = np.repeat(np.arange(R * R, dtype=np.int64), np.diff(topo.pair_ptr))
    path_len = np.diff(topo.path_ptr)
    hop_path = np.repeat(np.arange(n_paths, dtype=np.int64), path_len)
    first = np.zeros(len(topo.path_ch), dtype=bool)
    first[topo.path_ptr[:-1][path_len > 0]] = True
    ch = topo.path_ch[~first].astype(np.int64)
    dst = path_pair[hop_path[~first]] % R
    node = topo.ch_src[ch].astype(np.int64)
    C = topo.n_channels
    key = np.unique((node * R + dst) * C + ch)
    nd, c = np.divmod(key, C)
    nodes, dsts = np.divmod(nd, R)
    tables: dict[int, dict[int, tuple[int, ...]]] = {}
    cut = np.nonzero(np.diff(nd))[0] + 1
    for grp_n, grp_d, grp_c in zip(np.split(nodes, cut), np.split(dsts, cut), np.split(c, cut)):
        if len(grp_n):
            tables.setdefault(int(grp_n[0]), {})[int(grp_d[0])] = tuple(int(x) for x in grp_c)
    return tables


# ---------------------------------------------------------------- the fabric manager's reaction to failed parts

def cut_off_ranks(topo: Topology, alive: np.ndarray) -> list[int]:
    """Ranks that cannot reach every other rank over the channels in `alive` (a link counts while both its
    directions work; only forwarding nodes carry a path): those outside the largest reachable group, else every
    rank that misses some peer. [] when the fabric is whole."""
    R, fwd = topo.n_ranks, topo.node_forwards
    parent = list(range(topo.n_nodes))

    def find(u: int) -> int:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    both = alive & alive[topo.ch_rev]
    src, dst = topo.ch_src.tolist(), topo.ch_dst.tolist()
    for c in np.flatnonzero(both & fwd[topo.ch_src] & fwd[topo.ch_dst]).tolist():
        parent[find(src[c])] = find(dst[c])
    comps: list[set] = [{find(r)} if fwd[r] else set() for r in range(R)]
    for c in np.flatnonzero(both).tolist():
        u, v = src[c], dst[c]
        if u < R and not fwd[u]:
            comps[u].add(find(v) if fwd[v] else ("link", min(u, v), max(u, v)))
    members: dict = {}
    for r in range(R):
        for k in comps[r]:
            members.setdefault(k, set()).add(r)
    reach = [set().union(*(members[k] for k in comps[r])) | {r} for r in range(R)]
    best = max(range(R), key=lambda r: (len(reach[r]), -r))
    cut = sorted(set(range(R)) - reach[best])
    return cut or [r for r in range(R) if len(reach[r]) < R]


def _with_paths(topo: Topology, pair_of: np.ndarray, start: np.ndarray, end: np.ndarray, hop_ch: np.ndarray,
                hop_vcl: np.ndarray, how: str) -> Topology:
    """A shallow copy of topo routed by the paths (pair_of[i], hops hop_ch/hop_vcl[start[i]:end[i]]), grouped by
    pair in a stable order."""
    import copy
    R = topo.n_ranks
    order = np.argsort(pair_of, kind="stable")
    lens = (end - start)[order]
    path_ptr = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lens, out=path_ptr[1:])
    hop = np.repeat(start[order] - path_ptr[:-1], lens) + np.arange(int(path_ptr[-1]), dtype=np.int64)
    out = copy.copy(topo)
    out.pair_ptr = np.zeros(R * R + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair_of, minlength=R * R), out=out.pair_ptr[1:])
    out.path_ptr, out.path_ch, out.path_vcl = path_ptr, hop_ch[hop].astype(np.int32), hop_vcl[hop].astype(np.int8)
    out.routing = how
    return out


def confined(topo: Topology, n: int) -> Topology:
    """A shallow copy of topo that routes only the pairs among ranks 0..n-1 (every other pair has no path): the
    same candidates in the same order, so a run among those ranks is the same run (bit for bit), while the
    kernel's set-up interns n^2 pairs' routes instead of R^2 (the auto tiers time 64-rank groups on 1024 ranks)."""
    R = topo.n_ranks
    pairs = (np.arange(n, dtype=np.int64)[:, None] * R + np.arange(n)).ravel()
    cnt = np.diff(topo.pair_ptr)[pairs]
    path = csr_ranges(topo.pair_ptr, pairs)
    return _with_paths(topo, np.repeat(pairs, cnt), topo.path_ptr[path], topo.path_ptr[path + 1], topo.path_ch,
                       topo.path_vcl, topo.routing)


def path_dead(topo: Topology, alive: np.ndarray) -> np.ndarray:
    """bool[paths]: the path crosses a channel not in `alive`."""
    dead = np.concatenate([[0], np.cumsum(~alive[topo.path_ch])])
    return dead[topo.path_ptr[1:]] > dead[topo.path_ptr[:-1]]


REROUTE_ENUMERATION = 64    # shortest paths enumerated per pair when rerouting mid-run (not 4096 as at build time):
                            # a 256-rank sd200 rerouted up*/down* in ~15 s instead of ~200 s; the spread over ports
                            # and links comes from _select among them


def reroute(topo: Topology, alive: np.ndarray, max_candidates: int = 16, exclude=()) -> tuple[Topology, int]:
    """The fabric manager's routes around failed channels (alive: bool[C]), as a copy of topo, and how many rank
    pairs lost every candidate. Pairs with a surviving candidate keep those; the others get every shortest path
    over the surviving channels, or up*/down* paths where those close a cycle in the channel-dependency graph of
    the whole set; if that too is cyclic, every pair is routed up*/down* over the surviving channels. The set
    returned is proven deadlock-free (check_deadlock_free). The caller checks cut_off_ranks first; `exclude`: ranks
    taken out of service (cut off, their work migrated: fabric.faults.migration), whose pairs get no path."""
    R, H = topo.n_ranks, len(topo.path_ch)
    pair_of = np.repeat(np.arange(R * R, dtype=np.int64), np.diff(topo.pair_ptr))
    out = np.zeros(R, bool)
    out[list(exclude)] = True
    served = ~(out[pair_of // R] | out[pair_of % R])
    dead = path_dead(topo, alive) | ~served
    surviving = np.bincount(pair_of[~dead], minlength=R * R)
    broken = [(s, d) for s, d in (divmod(int(i), R) for i in
                                  np.flatnonzero((np.diff(topo.pair_ptr) > 0) & (surviving == 0)))
              if not (out[s] or out[d])]
    keep = np.flatnonzero(~dead)
    base = topo.routing or "routes"
    every = None if not out.any() else [(s, d) for s in np.flatnonzero(~out).tolist()
                                        for d in np.flatnonzero(~out).tolist() if s != d]
    attempts = [(f"{base} + shortest", False, broken), (f"{base} + updown", True, broken), ("updown", True, every)]
    for i, (how, restrict, which) in enumerate(attempts if broken else [(base, False, [])]):
        new = graph_paths(topo, restrict, max_candidates, alive, which, REROUTE_ENUMERATION) if which != [] else {}
        kept = keep if i < 2 else keep[:0]
        flat = [(s * R + d, p) for (s, d), found in new.items() for p in found]
        n_ptr = np.zeros(len(flat) + 1, dtype=np.int64)
        np.cumsum([len(p) for _, p in flat], out=n_ptr[1:])
        cand = _with_paths(
            topo, np.concatenate([pair_of[kept], np.array([k for k, _ in flat], dtype=np.int64)]),
            np.concatenate([topo.path_ptr[:-1][kept], n_ptr[:-1] + H]),
            np.concatenate([topo.path_ptr[1:][kept], n_ptr[1:] + H]),
            np.concatenate([topo.path_ch, np.array([c for _, p in flat for c in p], dtype=np.int32)]),
            np.concatenate([topo.path_vcl, np.zeros(int(n_ptr[-1]), np.int8)]), how)
        try:
            check_deadlock_free(cand)
        except RoutingError:
            if i == 2:
                raise
            continue
        return cand, len(broken)
    raise AssertionError("not reached: the last attempt raises or returns")
