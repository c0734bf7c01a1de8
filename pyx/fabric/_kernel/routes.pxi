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
    cdef int64_t p, h, i, j, cap = 1024, n = 0, bits = 12
    cdef int32_t node
    cdef int32_t* slot = <int32_t*>malloc((<size_t>1 << bits) * sizeof(int32_t))
    cdef HopC* hop = <HopC*>malloc(<size_t>cap * sizeof(HopC))
    cdef void* grown
    cdef bint failed = slot == NULL or hop == NULL
    if not failed:
        memset(slot, 0xff, (<size_t>1 << bits) * sizeof(int32_t))
    p = 0
    while p < n_paths and not failed:
        node = -1
        h = s.path_ptr[p + 1] - 1
        while h > s.path_ptr[p] and not failed:
            i = hop_slot(hop, slot, bits, s.path_hv[h], node)
            if slot[i] >= 0:
                node = slot[i]
            else:                                               # a new suffix
                if n == cap:
                    cap *= 2
                    grown = realloc(hop, <size_t>cap * sizeof(HopC))
                    failed = grown == NULL
                    if failed:
                        break
                    hop = <HopC*>grown
                hop[n].hv = s.path_hv[h]
                hop[n].next = node
                slot[i] = <int32_t>n
                node = <int32_t>n
                n += 1
                if 2 * n > (<int64_t>1 << bits):                # rehash into a table twice the size
                    bits += 1
                    free(slot)
                    slot = <int32_t*>malloc((<size_t>1 << bits) * sizeof(int32_t))
                    failed = slot == NULL
                    if failed:
                        break
                    memset(slot, 0xff, (<size_t>1 << bits) * sizeof(int32_t))
                    for j in range(n):
                        slot[hop_slot(hop, slot, bits, hop[j].hv, hop[j].next)] = <int32_t>j
            h -= 1
        at1[p] = node
        p += 1
    free(slot)
    s.hop = hop
    s.n_hop = n
    if failed:
        with gil:
            raise MemoryError("route graph")
    return 0

cdef inline int32_t choose_path(SimC* s, int32_t src, int32_t dst, int32_t flow) noexcept nogil:
    cdef int64_t a = s.pair_ptr[<int64_t>src * s.n_ranks + dst]
    cdef int64_t n = s.pair_ptr[<int64_t>src * s.n_ranks + dst + 1] - a
    if n <= 0:
        return -1
    return <int32_t>(a + flow % n)


def route_graph_of(dict topo):
    """The route graph of topo's routes (build_route_graph) as arrays: (route_hop int32[n, 2]: each node's hop and
    next node; path_at1 int32[paths]). Engines given them in topo (keys route_hop, path_at1) copy them instead of
    building their own (0.2 s at 1024 ranks): a run split into parts (fabric.parts) builds it once for them all."""
    cdef SimC s
    keep = {}
    memset(&s, 0, sizeof(SimC))
    s.n_ch = len(topo["ch_src"])
    setup_routes(&s, keep, dict(topo, route_hop=None))
    hop = np.empty((s.n_hop, 2), np.int32)
    if s.n_hop:
        memcpy(cnp.PyArray_DATA(hop), s.hop, <size_t>s.n_hop * sizeof(HopC))
    free(s.hop)
    return hop, keep["path_at1"]
