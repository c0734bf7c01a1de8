# ================================================================== routes: route entries and the route graph
# Where packets go: source routes from the fabric manager (fabric/routing.py), each hop an entry channel << vcl_bits
# | VC level. Set-up interns every route suffix once (the route graph); a transfer holds its first hop and the node
# of its second, a packet walks one node per hop. Contract: HopC, XferC.hv0/at1, PacketC.hop_at, SimC's topology.
cdef inline int32_t path_len(SimC* s, int32_t p) noexcept nogil:
    return <int32_t>(s.path_ptr[p + 1] - s.path_ptr[p])

cdef inline int32_t hv_ch(SimC* s, int32_t hv) noexcept nogil:
    """The channel of a route entry (channel << vcl_bits | VC level)."""
    return hv >> s.vcl_bits

cdef inline int32_t hv_vc(SimC* s, int32_t hv, int32_t cls) noexcept nogil:
    """The VC a packet of traffic class cls takes on a route entry: its class's VCs, at the entry's level."""
    return cls * s.levels + (hv & ((1 << s.vcl_bits) - 1))

cdef inline int32_t path_hop_ch(SimC* s, int32_t p, int32_t hop) noexcept nogil:
    return hv_ch(s, s.path_hv[s.path_ptr[p] + hop])

cdef inline int64_t hop_slot(HopC* hop, int32_t* slot, int64_t bits, int32_t hv, int32_t nxt) noexcept nogil:
    """Where suffix (hv, nxt) sits in the open-addressing table over hop[], or the empty slot where it would go."""
    cdef uint64_t key = (<uint64_t><uint32_t>hv << 32) | <uint32_t>nxt
    cdef int64_t i = <int64_t>((key * <uint64_t>0x9E3779B97F4A7C15) >> (64 - bits))
    while slot[i] >= 0 and not (hop[slot[i]].hv == hv and hop[slot[i]].next == nxt):
        i = (i + 1) & ((<int64_t>1 << bits) - 1)
    return i

cdef int build_route_graph(SimC* s, int64_t n_paths, int32_t* at1) except -1 nogil:
    """Intern every route suffix from the second hop on as a node (hop, node of the rest): routes to one
    destination share their tails, so ~15 M route entries at 1024 ranks become ~0.3 M nodes (2 MB, cache-resident
    where the flat table was 60 MB and missed once per hop). at1[p] = node of path p's second hop (-1: one hop).
    Hash-consing, the table kept at most half full; the walk a packet makes is exactly the flat route's."""
    cdef RouteGraphB b
    cdef int64_t p
    rg_open(&b)
    for p in range(n_paths):
        at1[p] = rg_path(s, &b, p)
    return rg_close(s, &b)

cdef void rg_open(RouteGraphB* b) noexcept nogil:
    """An empty route graph to intern paths into (rg_path), in the order they come."""
    b.n = 0
    b.cap = 1024
    b.bits = 12
    b.slot = <int32_t*>malloc((<size_t>1 << b.bits) * sizeof(int32_t))
    b.hop = <HopC*>malloc(<size_t>b.cap * sizeof(HopC))
    b.failed = b.slot == NULL or b.hop == NULL
    if not b.failed:
        memset(b.slot, 0xff, (<size_t>1 << b.bits) * sizeof(int32_t))

cdef int32_t rg_path(SimC* s, RouteGraphB* b, int64_t p) noexcept nogil:
    """Intern path p's suffixes, last hop first: the node of its second hop (-1: one hop, or out of memory)."""
    cdef int64_t h = s.path_ptr[p + 1] - 1, i, j
    cdef int32_t node = -1
    cdef void* grown
    while h > s.path_ptr[p] and not b.failed:
        i = hop_slot(b.hop, b.slot, b.bits, s.path_hv[h], node)
        if b.slot[i] >= 0:
            node = b.slot[i]
        else:                                                   # a new suffix
            if b.n == b.cap:
                grown = realloc(b.hop, <size_t>(2 * b.cap) * sizeof(HopC))
                b.failed = grown == NULL
                if b.failed:
                    break
                b.cap *= 2
                b.hop = <HopC*>grown
            b.hop[b.n].hv = s.path_hv[h]
            b.hop[b.n].next = node
            b.slot[i] = <int32_t>b.n
            node = <int32_t>b.n
            b.n += 1
            if 2 * b.n > (<int64_t>1 << b.bits):                # rehash into a table twice the size
                b.bits += 1
                free(b.slot)
                b.slot = <int32_t*>malloc((<size_t>1 << b.bits) * sizeof(int32_t))
                b.failed = b.slot == NULL
                if b.failed:
                    break
                memset(b.slot, 0xff, (<size_t>1 << b.bits) * sizeof(int32_t))
                for j in range(b.n):
                    b.slot[hop_slot(b.hop, b.slot, b.bits, b.hop[j].hv, b.hop[j].next)] = <int32_t>j
        h -= 1
    return node

cdef int rg_close(SimC* s, RouteGraphB* b) except -1 nogil:
    """The graph built becomes the engine's (s.hop, s.n_hop); MemoryError if it ran out of memory."""
    free(b.slot)
    b.slot = NULL
    s.hop = b.hop
    s.n_hop = b.n
    if b.failed:
        with gil:
            raise MemoryError("route graph")
    return 0

cdef inline int32_t choose_path(SimC* s, int32_t src, int32_t dst, int32_t flow) noexcept nogil:
    cdef int64_t a = s.pair_ptr[<int64_t>src * s.n_ranks + dst]
    cdef int64_t n = s.pair_ptr[<int64_t>src * s.n_ranks + dst + 1] - a
    if n <= 0:
        return -1
    return <int32_t>(a + flow % n)


def shared_routes(dict topo, bint graph):
    """What every engine on topo's routes would make alike, made once for several (the parts of a split run,
    fabric.parts): {"path_hv": the route entries (60 MB at 1024 ranks)} and, with graph, the route graph of every
    path (build_route_graph: "route_hop" int32[n, 2], each node's hop and next node; "path_at1" int32[paths]).
    Engines given them in topo read the entries where they are and copy the graph (0.2 s less each at 1024 ranks)."""
    cdef SimC s
    keep = {}
    memset(&s, 0, sizeof(SimC))
    s.n_ch = len(topo["ch_src"])
    s.analytic = not graph         # (the analytic engine's set-up leaves the graph to its transfers: none here)
    setup_routes(&s, keep, dict(topo, route_hop=None, path_hv=None))
    out = {"path_hv": keep["path_hv"]}
    if graph:
        hop = np.empty((s.n_hop, 2), np.int32)
        if s.n_hop:
            memcpy(cnp.PyArray_DATA(hop), s.hop, <size_t>s.n_hop * sizeof(HopC))
        out.update(route_hop=hop, path_at1=keep["path_at1"])
    free(s.hop)
    return out
