# The packet kernel: one event loop for links (PHY + data-link layer), switches, endpoints and the task-graph
# executor. Everything below `Engine.run` is nogil C; Python only builds the arrays before and reads them after.
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memset, memcpy
from libc.math cimport log, log1p, expm1, ceil
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, INT64_MAX

cdef extern from "<stdlib.h>" nogil:
    void* aligned_alloc(size_t alignment, size_t size)     # C11: ChanC and XferC records start on cache lines

cdef extern from *:
    """
    /* Prefetches as volatile asm on x86-64. GCC treats __builtin_prefetch as free of side effects, so a function
       that only computes addresses and prefetches them counts as pure and a call to it is deleted as dead: the
       lane look-ahead (prefetch_ahead) compiled to nothing. A volatile asm is never deleted. Elsewhere the builtin
       stays (results are the same either way; only the look-ahead may be lost). */
    #if defined(__x86_64__) && defined(__GNUC__)
    static inline void fabric_prefetch(const void *p) { __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p)); }
    #else
    static inline void fabric_prefetch(const void *p) { __builtin_prefetch(p); }
    #endif
    """
    void prefetch "fabric_prefetch"(const void* addr) nogil
cimport numpy as cnp
import numpy as np

from fabric._kernel.types cimport *

cnp.import_array()

KERNEL_VERSION = "0.1.0"

cdef enum Outcome:
    R_DONE = 0        # the heap drained: every event processed
    R_PAUSED = 1      # stopped at the event or time budget of this call; call run() again
    R_STUCK = 2       # the watchdog fired: work pending, no progress

DONE, PAUSED, STUCK = R_DONE, R_PAUSED, R_STUCK

cdef enum:
    # task kinds (docs/contracts.md)
    T_COMPUTE = 0
    T_TRANSFER = 1
    T_REDUCE = 2
    T_JOIN = 3
    # control messages
    C_ACK = 0
    C_NAK = 1
    C_UPDATEFC = 2
    # per-channel fault lists
    F_FLIT = 0
    F_ACK = 1
    F_CREDIT = 2

# fault kinds
FAULT_CORRUPT_FLIT = 0   # corrupt flits n .. n+k-1 sent on a channel
FAULT_LOSE_ACK = 1       # lose the n-th Ack/Nak sent for a channel
FAULT_LOSE_CREDIT = 2    # lose the n-th UpdateFC sent for a channel
FAULT_RETRAIN = 3        # retrain the channel's link at time n ps


# ================================================================== RNG (splitmix64, state passed by pointer)
cdef inline uint64_t c_rand(uint64_t* s) noexcept nogil:
    s[0] += <uint64_t>0x9E3779B97F4A7C15
    cdef uint64_t z = s[0]
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EB
    return z ^ (z >> 31)

cdef inline uint64_t c_mix(uint64_t a) noexcept nogil:
    a = (a ^ (a >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    a = (a ^ (a >> 27)) * <uint64_t>0x94D049BB133111EB
    return a ^ (a >> 31)

cdef inline uint64_t content_sum(int32_t node, int32_t src, int64_t offset, int32_t nbytes) noexcept nogil:
    """Checksum of a byte range as it lands in `node`'s memory (fabric.sim.content_sum mirrors it)."""
    return c_mix(c_mix(c_mix(<uint64_t>node * 1000003 + <uint64_t>src) ^ <uint64_t>offset) ^ <uint64_t>nbytes)

cdef inline double c_uniform(uint64_t* s) noexcept nogil:
    # in (0, 1]: safe for log()
    return ((c_rand(s) >> 11) + 1) * (1.0 / 9007199254740992.0)


# ================================================================== event heap ordered by (time, order)
# A 4-ary implicit heap of 32-byte events: half the levels of a binary heap. The array is placed so that the four
# children of any node (4i+1 .. 4i+4) fill exactly two cache lines. (time, order) is a total order (order is
# unique), so the pop sequence is exactly that of any other correct priority queue: the heap's shape never shows in
# the results.
cdef enum:
    MAX_LANES = 16
    LANE_MIN_CAP = 256         # events a lane's ring holds at least (8 KB)

cdef struct LaneC:             # a FIFO of events that all fire `delay` after they were created (see lanes below)
    EventC* e                  # ring of cap events (a power of two, 64 B aligned: two events per cache line)
    int64_t head               # oldest
    int64_t n
    int64_t cap
    ps_t delay

cdef struct HeapC:
    EventC* ev                 # = raw + 1: &ev[1] on a 64-byte boundary
    EventC* raw                # the allocation (64-byte aligned)
    int64_t n
    int64_t cap
    int64_t order              # events created so far: the tie-break of equal times, shared by heap and lanes
    LaneC lane[16]             # MAX_LANES
    int64_t lh_time[16]        # (time, key) of each lane's head; (INT64_MAX, ~0) when empty
    uint64_t lh_key[16]
    int32_t win[32]            # winner tree over the lanes: win[i] = earliest lane under node i (1 the root); the
                               # leaves are nodes tp .. 2 tp - 1, lane k's at leaf[k], win[leaf[k]] = k
    int8_t left[16]            # children and parent of each node: the shape is free (any binary tree gives the
    int8_t right[16]           # minimum), so it is a Huffman tree over the lanes' pop counts: the busiest lanes
    int8_t up[32]              # sit next to the root and most pops replay one or two levels, not log2(lanes)
    int8_t leaf[16]
    int64_t pops[16]           # events taken from each lane (weights of the shape)
    int64_t pops_all
    int64_t reshape_at         # pops_all at which the shape is next fitted to the counts (geometric: a few per run)
    int32_t tp                 # leaves in the tree (= n_lanes)
    int32_t n_lanes
    int32_t max_lanes          # lanes allowed (MAX_LANES; 0 puts every event in the heap, for equivalence tests)
    int64_t lane_min_heap      # events use their lane only while the heap holds at least this many (a small heap
                               # is cheaper than a lane; where an event waits never changes the pop sequence)

cdef extern from *:
    """
    #include <stdint.h>
    /* (time, key) < (time, key) as one 128-bit unsigned compare (cmp + sbb): no branch, few instructions.
       Times are never negative, so comparing them unsigned is comparing them. */
    static inline int fabric_tk_lt(int64_t at, uint64_t ak, int64_t bt, uint64_t bk) {
        return (((unsigned __int128)(uint64_t)at << 64) | ak) < (((unsigned __int128)(uint64_t)bt << 64) | bk);
    }
    """
    int fabric_tk_lt(int64_t at, uint64_t ak, int64_t bt, uint64_t bk) nogil

cdef inline int64_t ev_lt(EventC* a, EventC* b) noexcept nogil:
    """1 if a fires before b, else 0, without a branch: which child is smaller is a coin toss the predictor would
    lose half the time."""
    return fabric_tk_lt(a.time, a.key, b.time, b.key)

cdef inline int ev_type(EventC* e) noexcept nogil:
    return <int>(e.key & 0xff)

cdef inline int16_t ev_flag(EventC* e) noexcept nogil:
    return <int16_t>((e.key >> 8) & 0xffff)

cdef int heap_alloc(HeapC* h, int64_t cap) except -1 nogil:
    """(Re)allocate room for cap events, keeping the ones held."""
    cdef EventC* raw = <EventC*>aligned_alloc(64, <size_t>(cap + 2) * sizeof(EventC))
    if raw == NULL:
        with gil:
            raise MemoryError("event heap")
    if h.raw != NULL:
        memcpy(raw + 1, h.ev, <size_t>h.n * sizeof(EventC))
        free(h.raw)
    h.raw = raw
    h.ev = raw + 1
    h.cap = cap
    return 0

cdef int c_push(HeapC* h, ps_t t, int16_t typ, int32_t ch, int32_t x, int64_t y, int16_t flag) except -1 nogil:
    cdef int64_t i, p
    cdef EventC e
    if h.n == h.cap:
        heap_alloc(h, 2 * h.cap)
    e.time = t
    e.key = ((<uint64_t>h.order) << 24) | ((<uint64_t>(<uint16_t>flag)) << 8) | <uint64_t>(<uint8_t>typ)
    e.y = y; e.ch = ch; e.x = x
    h.order += 1
    i = h.n
    h.n += 1
    while i > 0:
        p = (i - 1) >> 2
        if not ev_lt(&e, &h.ev[p]):
            break
        h.ev[i] = h.ev[p]
        i = p
    h.ev[i] = e
    return 0

cdef inline void c_pop(HeapC* h, EventC* out) noexcept nogil:
    """Remove the earliest event. Bottom-up (Floyd): the hole at the root walks down to a leaf along the
    smallest child (3 branch-free compares per level among 4 children, none against the moved element), then the
    last element sifts up from there, which is short because it came from the bottom."""
    cdef int64_t i = 0, c, m, m2, j, n, p
    cdef EventC* ev = h.ev
    cdef EventC last
    out[0] = ev[0]
    h.n -= 1
    n = h.n
    if n == 0:
        return
    last = ev[n]
    while True:
        c = 4 * i + 1
        if c + 4 <= n:                        # all four children: two pairs, then the pair winners
            m = c + ev_lt(&ev[c + 1], &ev[c])
            m2 = c + 2 + ev_lt(&ev[c + 3], &ev[c + 2])
            m ^= (m ^ m2) & -ev_lt(&ev[m2], &ev[m])
        elif c < n:
            m = c
            for j in range(c + 1, n):
                if ev_lt(&ev[j], &ev[m]):
                    m = j
        else:
            break
        ev[i] = ev[m]
        i = m
    while i > 0:
        p = (i - 1) >> 2
        if not ev_lt(&last, &ev[p]):
            break
        ev[i] = ev[p]
        i = p
    ev[i] = last


# ================================================================== delay lanes: FIFOs beside the heap
# Most events fire a fixed delay after they are created: a unit's head reaches the receiver, its transmitter is free
# and its tail arrives fixed times after it starts (per kind of link and packet size), an Ack or UpdateFC crosses the
# reverse channel in its flit_ps + ch_lat, timers are armed for ack_ps, update_ps, refresh_ps or replay_ps, a
# transfer is issued after issue_ps + xlate_ps (+ p2p_ps). `now` never goes back, so the events of one delay are
# created in (time, order) order: each such delay gets a FIFO ring (a lane, set up with the engine), and the loop
# takes whichever is earliest of the heap's top and the lane heads (a winner tree over the lanes). Order numbers
# come from one counter, so the pop sequence is exactly that of the heap alone, while most events skip the sift.
# Any event may wait in the heap instead of its lane without changing that (lane_min_heap, lanes all taken).
cdef int32_t lane_for(HeapC* h, ps_t delay) except -2:
    """The lane of events created `delay` before they fire (set up before the run); -1 (the heap) when all
    MAX_LANES are taken by other delays."""
    cdef int32_t k
    for k in range(h.n_lanes):
        if h.lane[k].delay == delay:
            return k
    if h.n_lanes >= h.max_lanes:
        return -1
    k = h.n_lanes
    h.lane[k].e = <EventC*>aligned_alloc(64, LANE_MIN_CAP * sizeof(EventC))
    if h.lane[k].e == NULL:
        raise MemoryError("event lanes")
    h.lane[k].cap = LANE_MIN_CAP
    h.lane[k].head = 0
    h.lane[k].n = 0
    h.lane[k].delay = delay
    h.n_lanes += 1
    lanes_tree(h)
    return k

cdef void lanes_tree(HeapC* h) noexcept nogil:
    """(Re)build the winner tree over the lanes: at set-up (lanes are registered before the run) and when its shape
    is refitted. Huffman's construction over the weights pops + k + 1 (before any pop: the lanes registered last,
    the packet and control lanes of the data path, count as the busiest); nodes are numbered breadth first from
    the root, so each node's children come after it and one pass from the back fills the winners."""
    cdef int32_t k, i, j, a, b, n, m, head, tail
    cdef int64_t wt[32]
    cdef int32_t kid_l[32]
    cdef int32_t kid_r[32]
    cdef int32_t alive[16]
    cdef int32_t order[32]
    cdef int32_t slot[32]
    n = h.tp = max(h.n_lanes, 1)                # leaves: any count works for a minimum (no padding)
    for k in range(n):
        if k >= h.n_lanes or h.lane[k].n == 0:
            h.lh_time[k] = INT64_MAX
            h.lh_key[k] = ~(<uint64_t>0)
        wt[k] = h.pops[k] + k + 1               # temporary nodes 0 .. n-1: the leaves; n ..: merged pairs
        alive[k] = k
    m = n
    for j in range(n - 1):                      # merge the two lightest (n <= 16: quadratic is nothing)
        a = 0
        for i in range(n - j):
            if wt[alive[i]] < wt[alive[a]]:
                a = i
        alive[a], alive[n - j - 1] = alive[n - j - 1], alive[a]
        b = 0
        for i in range(n - j - 1):
            if wt[alive[i]] < wt[alive[b]]:
                b = i
        kid_l[m] = alive[n - j - 1]
        kid_r[m] = alive[b]
        wt[m] = wt[kid_l[m]] + wt[kid_r[m]]
        alive[b] = m
        m += 1
    order[0] = alive[0]                         # breadth first from the root: internal nodes get 1 .. n-1, leaves n ..
    head = 0
    tail = 1
    a = 1
    b = n
    while head < tail:
        k = order[head]
        head += 1
        if k >= n:
            slot[k] = a
            a += 1
            order[tail] = kid_l[k]
            order[tail + 1] = kid_r[k]
            tail += 2
        else:
            slot[k] = b
            b += 1
    h.up[1] = 0
    for k in range(m):
        if k >= n:
            h.left[slot[k]] = slot[kid_l[k]]
            h.right[slot[k]] = slot[kid_r[k]]
            h.up[slot[kid_l[k]]] = slot[k]
            h.up[slot[kid_r[k]]] = slot[k]
        else:
            h.leaf[k] = slot[k]
            h.win[slot[k]] = k
    for i in range(n - 1, 0, -1):
        h.win[i] = win_of(h, h.win[h.left[i]], h.win[h.right[i]])

cdef inline int32_t win_of(HeapC* h, int32_t a, int32_t b) noexcept nogil:
    """The lane whose head fires first of lanes a and b (branch-free)."""
    return a ^ ((a ^ b) & -fabric_tk_lt(h.lh_time[b], h.lh_key[b], h.lh_time[a], h.lh_key[a]))

cdef inline void lane_fix(HeapC* h, int32_t k) noexcept nogil:
    """Lane k's head changed: replay its path to the root (its depth in compares, not one per lane)."""
    cdef int32_t i = h.up[h.leaf[k]]
    while i >= 1:
        h.win[i] = win_of(h, h.win[h.left[i]], h.win[h.right[i]])
        i = h.up[i]

cdef bint lane_resize(LaneC* L, int64_t cap) noexcept nogil:
    """Move lane L's events, oldest first, into a ring of cap slots (a power of two >= L.n): only storage moves.
    False (nothing changed) when memory is short."""
    cdef EventC* ring = <EventC*>aligned_alloc(64, <size_t>cap * sizeof(EventC))
    cdef int64_t i
    if ring == NULL:
        return False
    for i in range(L.n):
        ring[i] = L.e[(L.head + i) & (L.cap - 1)]
    free(L.e)
    L.e = ring
    L.head = 0
    L.cap = cap
    return True

cdef void lanes_trim(HeapC* h) noexcept nogil:
    """Halve each lane's ring that is less than 1/4 full (growing doubles at full, so the count must halve between
    a growth and a trim: no back and forth). A ring keeps the size of its busiest moment and its tail sweeps all of
    it: at 1024 ranks the lanes held 2.7 MB of ring for 0.5 MB of events, so each write met a line read out long
    before (a cache miss). Called every 1024 events, off the per-event path; over oneshot-1024 it resizes 210 times
    and copies 1.7 M events (of 74 M)."""
    cdef int32_t k
    for k in range(h.n_lanes):
        if h.lane[k].cap > LANE_MIN_CAP and h.lane[k].n < h.lane[k].cap >> 2:
            lane_resize(&h.lane[k], h.lane[k].cap >> 1)

cdef int lane_grow(LaneC* L) except -1 nogil:
    if not lane_resize(L, 2 * L.cap):
        with gil:
            raise MemoryError("event lane")
    return 0

cdef inline int c_push_lane(HeapC* h, int32_t k, ps_t t, int16_t typ, int32_t ch, int32_t x, int64_t y,
                            int16_t flag) except -1 nogil:
    """Queue an event created now that fires at t = now + lane k's delay; k < 0: the heap."""
    cdef LaneC* L
    cdef EventC* e
    if k < 0 or h.n < h.lane_min_heap:
        return c_push(h, t, typ, ch, x, y, flag)
    L = &h.lane[k]
    if L.n == L.cap:
        lane_grow(L)
    e = &L.e[(L.head + L.n) & (L.cap - 1)]
    e.time = t
    e.key = ((<uint64_t>h.order) << 24) | ((<uint64_t>(<uint16_t>flag)) << 8) | <uint64_t>(<uint8_t>typ)
    e.y = y; e.ch = ch; e.x = x
    h.order += 1
    L.n += 1
    prefetch(&L.e[(L.head + L.n + 16) & (L.cap - 1)])   # the ring's tail runs into lines read out long ago
    if L.n == 1:
        h.lh_time[k] = t
        h.lh_key[k] = e.key
        lane_fix(h, k)
    return 0

cdef inline int32_t lane_pick(HeapC* h, int32_t k, ps_t delay) noexcept nogil:
    """The lane of events `delay` ahead: k (the one a channel used last) if its delay fits, else any lane of that
    delay, else -1 (the heap). For events whose delay depends on the packet's size."""
    if k >= 0 and h.lane[k].delay == delay:
        return k
    for k in range(h.n_lanes):
        if h.lane[k].delay == delay:
            return k
    return -1

cdef inline int32_t q_first(HeapC* h) noexcept nogil:
    """Where the earliest pending event waits: -1 the heap's top, k the head of lane k, -2 nothing is pending."""
    cdef int32_t w
    if h.n_lanes == 0:
        return -1 if h.n > 0 else -2
    w = h.win[1]
    if h.lane[w].n == 0:
        return -1 if h.n > 0 else -2
    if h.n > 0 and fabric_tk_lt(h.ev[0].time, h.ev[0].key, h.lh_time[w], h.lh_key[w]):
        return -1
    return w

cdef inline EventC* q_peek(HeapC* h, int32_t src) noexcept nogil:
    if src < 0:
        return &h.ev[0]
    return &h.lane[src].e[h.lane[src].head]

cdef inline void q_take(HeapC* h, int32_t src, EventC* out) noexcept nogil:
    cdef LaneC* L
    if src < 0:
        c_pop(h, out)
        return
    L = &h.lane[src]
    out[0] = L.e[L.head]
    prefetch(&L.e[(L.head + 16) & (L.cap - 1)])         # and its head into lines written long ago
    L.head = (L.head + 1) & (L.cap - 1)
    L.n -= 1
    if L.n > 0:
        h.lh_time[src] = L.e[L.head].time
        h.lh_key[src] = L.e[L.head].key
    else:
        h.lh_time[src] = INT64_MAX
        h.lh_key[src] = ~(<uint64_t>0)
    h.pops[src] += 1
    h.pops_all += 1
    if h.pops_all == h.reshape_at:              # fit the shape to the counts so far (no effect on the order)
        h.reshape_at *= 4
        lanes_tree(h)
    else:
        lane_fix(h, src)

cdef void q_free(HeapC* h) noexcept nogil:
    cdef int32_t k
    free(h.raw)
    for k in range(h.n_lanes):
        free(h.lane[k].e)

cdef int64_t q_pending(HeapC* h) noexcept nogil:
    cdef int64_t n = h.n
    cdef int32_t k
    for k in range(h.n_lanes):
        n += h.lane[k].n
    return n


# ================================================================== the whole simulation state
cdef struct SimC:
    HeapC heap
    ps_t now
    int64_t events
    ps_t last_progress
    int64_t tasks_left
    int64_t pkts_live
    int32_t analytic
    # ---- parameters (ps, bytes, flits)
    int32_t nvc                    # VCs per channel = 2 traffic classes x vc_levels
    int32_t levels
    int32_t seq_mod
    int32_t seq_mask               # seq_mod - 1 (seq_mod is a power of two: a mask, not a division)
    int32_t window                 # max unacknowledged packets (<= seq_mod / 2)
    int32_t replay_cap_flits
    int32_t max_unit_flits         # flits of the largest unit a queue can offer (a full data packet)
    bint skip_settled              # skip arbitrations that cannot change anything (off: arbitrate every time)
    bint phy_countdown             # let units that cannot meet a PHY event skip phy_corrupt (off: it looks at all)
    int32_t ack_every
    ps_t ack_ps
    ps_t replay_ps
    int32_t replay_limit
    ps_t retrain_ps
    int64_t pool_flits
    int32_t update_flits
    ps_t update_ps
    ps_t refresh_ps
    int32_t hdr_B
    int32_t maxp_B
    int32_t mrrs_B
    int32_t flit_B
    int32_t flitpay_B
    ps_t issue_ps
    ps_t complete_ps
    ps_t xlate_ps
    ps_t p2p_ps
    ps_t watchdog_ps
    int32_t ln_ack                 # lanes (or -1: the heap) of the fixed-delay timers and transfer completions
    int32_t ln_upd
    int32_t ln_refresh
    int32_t ln_replay
    int32_t ln_complete
    int32_t ln_inject              # a transfer's issue + address translation (+ P2P forwarding across hosts)
    int32_t ln_inject_p2p
    int32_t fixed_priority         # 1: serve queues in fixed order (lowest VC and port first), not round robin
    # ---- topology
    int32_t n_nodes
    int32_t n_ranks
    int32_t n_ch
    ps_t* node_lat
    int32_t* node_domain
    int32_t* n_slots               # per node: inputs + 1 injection slot
    int64_t* node_out_ptr          # CSR: channels leaving each node
    int32_t* node_out
    int64_t* pair_ptr
    int64_t* path_ptr
    int32_t* path_hv               # per hop: channel << vcl_bits | VC level (set-up and the analytic engine)
    int32_t vcl_bits
    HopC* hop                      # the route graph: every route suffix once (build_route_graph); packets walk it
    int64_t n_hop
    int32_t* path_at1              # per path: route-graph node of its second hop (-1: one hop)
    # ---- per channel (types.pxd): state, counters, per (channel, VC) credits
    ChanC* c                       # [ch]
    CntC* k                        # [ch]
    CvC* cvs                       # [ch*nvc+vc]
    # ---- queues (VOQ per output channel x VC x input slot; the injection slot holds transfers)
    QueueC* q                      # [q_base + idx]: head and tail of each queue, side by side (one line, not two)
    uint64_t* q_bits               # per ch: bitmap of its non-empty queues (bit idx = vc * n_slots + slot)
    ReplayC* ring                  # [ch * ring_cap + slot], 64 B aligned
    int32_t ring_cap               # replay ring slots per channel: a power of two, grown up to >= window (ring_grow)
    int32_t ring_mask              # ring_cap - 1
    # ---- faults: per channel sorted lists (CSR; cursors in ChanC)
    int64_t* f_n
    int64_t* f_k
    # ---- packets and transfers
    PacketC* pk
    int32_t pk_cap
    int32_t pk_free
    XferC* xf
    int32_t n_xf
    int32_t* tags_free             # per rank
    int64_t* e2e_avail             # [src*R+dst] receive space dst has granted src and src has not used (B)
    int64_t* e2e_owed              # [src*R+dst] space dst has drained but not yet granted back (B)
    int64_t e2e_quantum            # grants go back in quarters of the window (or when a transfer completes)
    int64_t e2e_holds              # times a ready store waited for end-to-end grants
    int64_t arbitrations           # idle channels arbitrated (a cost, not a result: skip_settled lowers it)
    # ---- delivery checks
    int64_t carved                 # packets created at sources
    int64_t delivered
    int64_t dup_delivered
    int64_t ooo_delivered
    # ---- tasks
    int32_t n_tasks
    int8_t* t_kind
    int32_t* t_rank
    int32_t* t_stream
    ps_t* t_dur
    int32_t* t_xfer
    int64_t* t_succ_ptr
    int32_t* t_succ
    int32_t* t_deps
    ps_t* t_start
    ps_t* t_end
    int32_t n_streams
    int8_t* s_busy
    int32_t* s_head
    int32_t* s_tail
    int32_t* t_next
    int32_t* work                  # stack of tasks that became ready
    ps_t* an_free                  # analytic engine: when each channel's port is free


# ================================================================== helpers
cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil

cdef inline int32_t next_bit(uint64_t* bits, int32_t pos, int32_t nq) noexcept nogil:
    """Smallest set bit >= pos in a bitmap of nq bits (bits >= nq are never set), or -1."""
    cdef int32_t w, last_w
    cdef uint64_t word
    if pos >= nq:
        return -1
    w = pos >> 6
    word = bits[w] & ((~<uint64_t>0) << (pos & 63))
    last_w = (nq - 1) >> 6
    while word == 0:
        w += 1
        if w > last_w:
            return -1
        word = bits[w]
    return (w << 6) + __builtin_ctzll(word)

cdef inline void q_mark(SimC* s, int32_t ch, int32_t idx) noexcept nogil:
    s.q_bits[s.c[ch].qb_base + (idx >> 6)] |= (<uint64_t>1) << (idx & 63)

cdef inline void q_unmark(SimC* s, int32_t ch, int32_t idx) noexcept nogil:
    s.q_bits[s.c[ch].qb_base + (idx >> 6)] &= ~((<uint64_t>1) << (idx & 63))

cdef inline int64_t cv(SimC* s, int32_t ch, int32_t vc) noexcept nogil:
    return <int64_t>ch * s.nvc + vc

cdef inline int32_t pkt_flits(SimC* s, int32_t tlp) noexcept nogil:
    return (tlp + s.flitpay_B - 1) // s.flitpay_B

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

cdef inline void q_account(SimC* s, int32_t ch, int32_t delta) noexcept nogil:
    s.k[ch].queue_area += s.k[ch].queue_len * (s.now - s.k[ch].qlast)
    s.k[ch].qlast = s.now
    s.k[ch].queue_len += delta
    if delta > 0 and s.k[ch].queue_len > s.k[ch].queue_max:
        s.k[ch].queue_max = s.k[ch].queue_len


cdef ReplayC* ring_alloc(int64_t n) noexcept nogil:
    """n zeroed ring slots on a cache-line boundary (NULL if out of memory)."""
    cdef size_t size = (<size_t>n * sizeof(ReplayC) + 63) & ~(<size_t>63)
    cdef ReplayC* ring = <ReplayC*>aligned_alloc(64, size)
    if ring != NULL:
        memset(ring, 0, size)
    return ring


cdef int ring_grow(SimC* s) except -1 nogil:
    """Double every channel's replay ring (a channel's unacknowledged units filled its ring).

    Rings start small (Engine's replay_ring_slots, 16) rather than at the window: a channel rarely has more than a
    few dozen units unacknowledged, and a ring sized for the window (4 KiB at 256 units) spreads each channel's
    units over lines last touched hundreds of units ago (22 MB of rings at 1024 ranks, a cache miss per 4 units).
    Unit j of a channel sits at slot (r_head + j) & ring_mask under either mask, so only the slots move."""
    cdef int32_t cap = 2 * s.ring_cap, ch, j
    cdef int64_t n = <int64_t>s.n_ch * cap
    cdef ReplayC* grown = ring_alloc(n)
    if grown == NULL:
        with gil:
            raise MemoryError("replay buffers")
    for ch in range(s.n_ch):
        for j in range(s.c[ch].r_count):
            grown[<int64_t>ch * cap + ((s.c[ch].r_head + j) & (cap - 1))] = \
                s.ring[<int64_t>ch * s.ring_cap + ((s.c[ch].r_head + j) & s.ring_mask)]
    free(s.ring)
    s.ring = grown
    s.ring_cap = cap
    s.ring_mask = cap - 1
    return 0


cdef int32_t pkt_alloc(SimC* s) except -1 nogil:
    cdef int32_t i, old
    cdef PacketC* grown
    if s.pk_free < 0:
        old = s.pk_cap
        grown = <PacketC*>aligned_alloc(64, 2 * <size_t>old * sizeof(PacketC))   # one packet = one cache line
        if grown == NULL:
            with gil:
                raise MemoryError("packet pool")
        memcpy(grown, s.pk, <size_t>old * sizeof(PacketC))
        free(s.pk)
        s.pk = grown
        s.pk_cap = 2 * old
        for i in range(old, 2 * old - 1):
            s.pk[i].next = i + 1
        s.pk[2 * old - 1].next = -1
        s.pk_free = old
    i = s.pk_free
    s.pk_free = s.pk[i].next
    s.pkts_live += 1
    return i

cdef inline void pkt_release(SimC* s, int32_t i) noexcept nogil:
    s.pk[i].next = s.pk_free
    s.pk_free = i
    s.pkts_live -= 1


# ================================================================== physical layer: corruption of a unit
cdef inline int64_t last_byte_before(double err_bit, double flit_bits, int64_t flitpay_B) noexcept nogil:
    """The largest stream position e (bytes) with e * flit_bits / flitpay_B <= err_bit, in phy_corrupt's own
    arithmetic (monotone in e), so that the countdown and the test it stands for agree to the last byte."""
    cdef int64_t e = <int64_t>(err_bit * flitpay_B / flit_bits)
    while e > 0 and e * flit_bits / flitpay_B > err_bit:
        e -= 1
    while (e + 1) * flit_bits / flitpay_B <= err_bit:
        e += 1
    return e


cdef inline bint phy_unit(SimC* s, int32_t ch, int32_t tlp_B) noexcept nogil:
    """Whether a unit of tlp_B bytes is corrupted. Most units end before the channel's next injected flit fault and
    its next bit error: a countdown on the transmitter's line says so, and phy_corrupt (the third line, a division)
    runs only for the others. The countdown only skips calls that would have changed nothing but the position."""
    s.c[ch].phy_left_B -= tlp_B
    if s.c[ch].phy_left_B >= 0:
        return False
    return phy_corrupt(s, ch, tlp_B)


cdef bint phy_corrupt(SimC* s, int32_t ch, int32_t tlp_B) noexcept nogil:
    """Decide whether a unit of tlp_B bytes (framed into flits) is corrupted: injected flit faults and BER.

    The channel's flit stream is numbered from 0; the unit covers flits [f0, f1]. Random bit errors are placed by
    skip sampling (the gap to the next errored bit is geometric), and every errored flit is counted once. Then it
    sets the countdown to the last byte position that the next look could not change anything before (phy_unit).
    """
    cdef bint bad = False
    cdef double flit_bits = 8.0 * s.flit_B, start_bit, end_bit, f
    cdef int64_t f0 = 0, f1 = 0, i, lo, hi, n_end, last
    # the units that phy_unit let through since the last look moved the position on
    cdef int64_t cum0 = s.c[ch].cum_tlp_B + s.c[ch].phy_run_B - (s.c[ch].phy_left_B + tlp_B)
    s.c[ch].cum_tlp_B = cum0 + tlp_B
    i = s.c[ch].f_cur[F_FLIT]
    n_end = s.c[ch].f_end[F_FLIT]
    if i < n_end:                              # injected faults pending on this channel (divisions only then)
        f0 = cum0 // s.flitpay_B
        f1 = (s.c[ch].cum_tlp_B - 1) // s.flitpay_B
    while i < n_end and s.f_n[i] <= f1:
        lo = s.f_n[i] if s.f_n[i] > f0 else f0
        hi = s.f_n[i] + s.f_k[i] - 1
        if hi > f1:
            hi = f1
        if hi >= lo:
            bad = True
            s.k[ch].flits_corrupted += hi - lo + 1
        if s.f_n[i] + s.f_k[i] - 1 > f1:     # the burst goes on into the next unit
            break
        i += 1
    s.c[ch].f_cur[F_FLIT] = i
    if s.c[ch].log1m_ber < 0.0:
        end_bit = s.c[ch].cum_tlp_B * flit_bits / s.flitpay_B
        # first use: errors are placed from the current position on. Later, next_err_bit is at or past the
        # previous unit's end, which is this unit's start, so only the first use can see it negative (-1).
        if s.c[ch].next_err_bit < 0.0:
            start_bit = cum0 * flit_bits / s.flitpay_B
            s.c[ch].next_err_bit = start_bit + log(c_uniform(&s.c[ch].rng)) / s.c[ch].log1m_ber
        while s.c[ch].next_err_bit < end_bit:
            bad = True
            s.k[ch].flits_corrupted += 1
            f = <double>(<int64_t>(s.c[ch].next_err_bit / flit_bits) + 1)
            s.c[ch].next_err_bit = f * flit_bits + log(c_uniform(&s.c[ch].rng)) / s.c[ch].log1m_ber
    # the next look is due for the first unit that ends past `last`: a unit ending at e needs one when a pending
    # fault's first flit is at or before (e - 1) // flitpay_B, or when next_err_bit < e * flit_bits / flitpay_B
    last = INT64_MAX
    if i < n_end and s.f_n[i] < INT64_MAX // s.flitpay_B:
        last = s.f_n[i] * s.flitpay_B
    if s.c[ch].log1m_ber < 0.0:                 # (capped: 1e18 bits is past any run, and int64 holds the bytes)
        last = min(last, last_byte_before(min(s.c[ch].next_err_bit, 1e18), flit_bits, s.flitpay_B))
    last -= s.c[ch].cum_tlp_B
    if not s.phy_countdown:
        last = -1
    s.c[ch].phy_left_B = <int32_t>(-1 if last < 0 else min(last, <int64_t>0x7fffffff))
    s.c[ch].phy_run_B = s.c[ch].phy_left_B
    return bad


cdef bint fault_take(SimC* s, int32_t ch, int kind, int64_t count) noexcept nogil:
    """True if the count-th message of this kind for ch is to be lost (injected fault)."""
    cdef int64_t i = s.c[ch].f_cur[kind]
    while i < s.c[ch].f_end[kind] and s.f_n[i] < count:
        i += 1
    s.c[ch].f_cur[kind] = i
    return i < s.c[ch].f_end[kind] and s.f_n[i] == count


# ================================================================== data-link layer: control messages
cdef int send_ctrl(SimC* s, int32_t ch, int kind, int32_t vc, int64_t value) except -1 nogil:
    """Ack/Nak/UpdateFC about data channel ch, carried in the DLP bytes of the next flit on the reverse channel."""
    cdef int32_t rev = s.c[ch].ch_rev
    cdef int32_t k = s.c[ch].lane_ctrl
    cdef ps_t delay
    cdef bint lost = False
    if kind == C_UPDATEFC:
        s.c[ch].upd_sent_n += 1
        lost = s.c[ch].ctrl_faults and fault_take(s, ch, F_CREDIT, s.c[ch].upd_sent_n)
    else:
        s.c[ch].ack_sent_n += 1
        if kind == C_NAK:
            s.k[ch].naks += 1
        lost = s.c[ch].ctrl_faults and fault_take(s, ch, F_ACK, s.c[ch].ack_sent_n)
    if s.c[rev].down_until > s.now:
        lost = True
    if not lost and s.c[rev].p_flit > 0.0 and c_uniform(&s.c[rev].rng) <= s.c[rev].p_flit:
        lost = True
    if lost:
        s.k[ch].ctrl_lost += 1
        return 0
    delay = s.heap.lane[k].delay if k >= 0 else s.c[rev].flit_ps + s.c[rev].ch_lat    # the same value
    c_push_lane(&s.heap, k, s.now + delay, EV_CTRL_ARRIVE, ch, kind | (vc << 8), value, s.c[ch].epoch)
    return 0


cdef int send_ack(SimC* s, int32_t ch) except -1 nogil:
    s.c[ch].ack_pending = 0
    s.c[ch].ack_armed = 0
    s.c[ch].ack_gen += 1
    return send_ctrl(s, ch, C_ACK, 0, (s.c[ch].expected - 1) & s.seq_mask)


cdef int note_ack_due(SimC* s, int32_t ch) except -1 nogil:
    s.c[ch].ack_pending += 1
    if s.c[ch].ack_pending >= s.ack_every:
        return send_ack(s, ch)
    if not s.c[ch].ack_armed:
        s.c[ch].ack_armed = 1
        c_push_lane(&s.heap, s.ln_ack, s.now + s.ack_ps, EV_ACK_TIMER, ch, 0, s.c[ch].ack_gen, 0)
    return 0


cdef int send_update(SimC* s, int32_t ch, int32_t vc) except -1 nogil:
    s.cvs[cv(s, ch, vc)].freed_sent = s.cvs[cv(s, ch, vc)].freed
    s.c[ch].cr_dirty &= ~(1 << vc)
    send_ctrl(s, ch, C_UPDATEFC, vc, s.cvs[cv(s, ch, vc)].freed)
    if not s.c[ch].refresh_armed:
        s.c[ch].refresh_armed = 1
        c_push_lane(&s.heap, s.ln_refresh, s.now + s.refresh_ps, EV_REFRESH, ch, 0, 0, 0)
    return 0


cdef int free_buffer(SimC* s, int32_t ch, int32_t vc, int32_t flits) except -1 nogil:
    """The receiver of ch frees buffer space: credits go back by UpdateFC (coalesced by count and timer)."""
    cdef int64_t i = cv(s, ch, vc)
    s.cvs[i].occ -= flits
    if s.cvs[i].occ < 0:
        s.k[ch].credit_errors += 1
    s.cvs[i].freed += flits
    if s.cvs[i].freed - s.cvs[i].freed_sent >= s.update_flits:
        return send_update(s, ch, vc)
    s.c[ch].cr_dirty |= 1 << vc
    if not s.c[ch].cr_armed:
        s.c[ch].cr_armed = 1
        c_push_lane(&s.heap, s.ln_upd, s.now + s.update_ps, EV_CREDIT_TIMER, ch, 0, s.c[ch].cr_gen, 0)
    return 0


# ================================================================== data-link layer: transmitter
cdef int arm_replay_timer(SimC* s, int32_t ch) except -1 nogil:
    s.c[ch].rt_armed = 1
    s.c[ch].rt_deadline = s.now + s.replay_ps
    if s.c[ch].rt_pending:           # the pending event re-schedules itself at the new deadline
        return 0
    s.c[ch].rt_pending = 1
    return c_push_lane(&s.heap, s.ln_replay, s.c[ch].rt_deadline, EV_REPLAY_TIMER, ch, 0, 0, 0)   # = now + replay_ps


cdef int retrain(SimC* s, int32_t ch) except -1 nogil:
    """Both directions of the link go down; units and messages in flight are lost; replay resumes after."""
    cdef int32_t c, k
    s.k[ch].retrains += 1
    for k in range(2):
        c = ch if k == 0 else s.c[ch].ch_rev
        s.c[c].down_until = s.now + s.retrain_ps
        s.c[c].epoch = <int16_t>(s.c[c].epoch + 1)
        s.c[c].r_sent = 0
        s.c[c].replay_num = 0
        s.c[c].rt_armed = 0
    return c_push(&s.heap, s.now + s.retrain_ps, EV_RETRAIN_DONE, ch, 0, 0, 0)


cdef int start_replay(SimC* s, int32_t ch, bint timeout) except -1 nogil:
    s.c[ch].r_sent = 0
    s.k[ch].replays += 1
    if timeout:
        s.k[ch].replay_timeouts += 1
    s.c[ch].replay_num += 1
    if s.c[ch].replay_num > s.replay_limit:
        return retrain(s, ch)
    arm_replay_timer(s, ch)
    return try_send(s, ch)


cdef int send_unit(SimC* s, int32_t ch, ReplayC* r, ps_t tail_in) except -1 nogil:
    """Serialise one unit on ch and schedule its arrival (head) at the receiver."""
    cdef ps_t ser = <ps_t>(r.tlp_B * s.c[ch].ps_per_tlpB + 0.5)
    cdef ps_t fin = s.now + ser
    cdef ps_t head, first
    cdef bint bad
    if ser < 1:
        ser = 1
        fin = s.now + 1
    first = ser if ser < s.c[ch].flit_ps else s.c[ch].flit_ps
    if tail_in + first > fin:          # cut-through: cannot finish before the tail has arrived
        fin = tail_in + first
    if s.c[ch].cr_short:                 # a credit stall ends when the output sends anything (replays included)
        s.k[ch].credit_stall_ps += s.now - s.c[ch].stall_since
        s.c[ch].stall_since = -1
        s.c[ch].cr_short = 0
    s.c[ch].tx_busy = 1
    s.k[ch].busy_ps += fin - s.now
    s.k[ch].units += 1
    s.k[ch].tlp_B += r.tlp_B
    bad = phy_unit(s, ch, r.tlp_B)
    head = s.now + first + s.c[ch].ch_lat
    s.c[ch].lane_txd = <int8_t>lane_pick(&s.heap, s.c[ch].lane_txd, fin - s.now)
    c_push_lane(&s.heap, s.c[ch].lane_txd, fin, EV_TX_DONE, ch, 0, 0, 0)
    s.c[ch].lane_arr = <int8_t>lane_pick(&s.heap, s.c[ch].lane_arr, head - s.now)
    c_push_lane(&s.heap, s.c[ch].lane_arr, head, EV_PKT_ARRIVE, ch, r.pkt,
                (<int64_t>r.seq) | ((<int64_t>bad) << 32) | ((fin - s.now - first) << 33), s.c[ch].epoch)
    if not s.c[ch].rt_armed:
        arm_replay_timer(s, ch)
    return 0


cdef inline int try_send(SimC* s, int32_t ch) except -1 nogil:
    """Put the next unit on ch if it is idle. A third of the calls find it busy: they return without a call."""
    if s.c[ch].tx_busy or s.c[ch].down_until > s.now:
        return 0
    return arbitrate(s, ch)


cdef inline bint settled(SimC* s, int32_t ch) noexcept nogil:
    """ch is idle and its last arbitration still stands: it ran to the end (no replay pending, neither the window nor
    the replay buffer can stop it early), and no queue head has come out of the switch pipeline at this instant (a
    head that did has its EV_WAKE at now, not yet taken). Every event that can make a head sendable calls try_send,
    and every head that becomes ready later has its EV_WAKE, so arbitrating such a channel again, after an event
    that made nothing sendable on it, would send nothing and schedule nothing: the caller may skip it. Not settled
    either while a store may be held for grants (each scan counts it in e2e_holds; see unsettle_node), nor with
    skip_settled off."""
    return (s.skip_settled and s.c[ch].r_sent >= s.c[ch].r_count and s.c[ch].r_count < s.window
            and s.c[ch].wake_at != s.now and not s.c[ch].e2e_held
            and s.c[ch].r_flits + s.max_unit_flits <= s.replay_cap_flits)


cdef void unsettle_node(SimC* s, int32_t node) noexcept nogil:
    """A pair's granted window fell below one packet: a store of that pair at the head of any of node's injection
    queues may be held now, and an arbitration would count it (e2e_holds); none of node's ports is settled until
    its next full scan says so."""
    cdef int64_t i
    for i in range(s.node_out_ptr[node], s.node_out_ptr[node + 1]):
        s.c[s.node_out[i]].e2e_held = 1


cdef inline int try_send_if_unsettled(SimC* s, int32_t ch) except -1 nogil:
    """try_send after an event that made nothing sendable on ch (a credit return with no head short of credits, an
    Ack that relieved no limit, a grant that released no store): a third of all arbitrations at 1024 ranks."""
    if s.c[ch].tx_busy or s.c[ch].down_until > s.now or settled(s, ch):
        return 0
    return arbitrate(s, ch)


cdef int arbitrate(SimC* s, int32_t ch) except -1 nogil:
    """Put the next unit on idle channel ch: pending replays first, then round robin over its queues."""
    cdef int32_t node, nslots, nq, k, idx, vc, slot, p, x, tlp, flits, payload, covers, i, seen, start
    cdef int64_t qi, c
    cdef bint credit_blocked = False
    cdef ps_t next_ready = INT64_MAX
    cdef ReplayC* r
    cdef PacketC* pk
    cdef XferC* xf
    cdef uint64_t* bits
    s.arbitrations += 1
    if s.c[ch].r_sent < s.c[ch].r_count:                                   # go-back-N replay in progress
        r = &s.ring[<int64_t>ch * s.ring_cap + ((s.c[ch].r_head + s.c[ch].r_sent) & s.ring_mask)]
        s.c[ch].r_sent += 1
        return send_unit(s, ch, r, 0)
    if s.c[ch].r_count >= s.window or s.c[ch].q_busy == 0:
        return 0
    node = s.c[ch].ch_src
    nslots = s.n_slots[node]
    nq = s.nvc * nslots
    seen = 0
    start = s.c[ch].rr + 1                  # rr in [-1, nq): start in [0, nq]
    if start >= nq:
        start -= nq
    bits = &s.q_bits[s.c[ch].qb_base]
    s.c[ch].e2e_held = 0
    k = start                             # next bit to look at; the non-empty queues are visited in the
    while seen < s.c[ch].q_busy:            # order (rr + 1 + j) % nq, j = 0 .. nq-1, as a scan would
        idx = next_bit(bits, k, nq)
        if idx < 0:                       # wrap around once (seen stops the scan before start again)
            idx = next_bit(bits, 0, nq)
            if idx < 0:
                break
        k = idx + 1
        qi = s.c[ch].q_base + idx
        seen += 1
        vc = 0                            # idx = vc * nslots + slot; nvc is small: subtract, no division
        slot = idx
        while slot >= nslots:
            slot -= nslots
            vc += 1
        c = cv(s, ch, vc)
        if slot == nslots - 1:                                          # injection: carve from a transfer
            x = s.q[qi].head
            xf = &s.xf[x]
            if xf.kind == 1:
                if s.tags_free[xf.src] <= 0:
                    continue
                covers = <int32_t>min(<int64_t>s.mrrs_B, xf.avail_B - xf.carved_B)
                payload = 0
            else:
                covers = 0
                payload = <int32_t>min(<int64_t>s.maxp_B, xf.avail_B - xf.carved_B)
                # preventive flow control: a store leaves only into space its destination has granted
                # (completions land in space the requester reserved with its read tag)
                if xf.kind == 0 and s.e2e_avail[<int64_t>xf.src * s.n_ranks + xf.dst] < payload:
                    s.e2e_holds += 1
                    s.c[ch].e2e_held = 1
                    continue
            tlp = payload + s.hdr_B
            flits = pkt_flits(s, tlp)
            if s.cvs[c].cr_limit - s.cvs[c].cr_used < flits:
                credit_blocked = True
                continue
            if s.c[ch].r_flits + flits > s.replay_cap_flits:
                return 0
            p = pkt_alloc(s)
            pk = &s.pk[p]
            pk.xfer = x; pk.fseq = xf.fseq_next; pk.payload_B = payload; pk.covers_B = covers
            pk.tlp_B = tlp; pk.flits = flits; pk.in_ch = -1
            pk.hop_at = xf.at1; pk.hops_left = xf.hops; pk.cls = xf.cls
            pk.tail_ps = 0
            pk.ready_ps = 0
            pk.offset_B = xf.carved_B
            xf.fseq_next += 1
            s.carved += 1
            if xf.kind == 1:
                xf.carved_B += covers
                s.tags_free[xf.src] -= 1
            else:
                xf.carved_B += payload
                s.k[ch].payload_B += payload
                if xf.kind == 0:
                    s.e2e_avail[<int64_t>xf.src * s.n_ranks + xf.dst] -= payload
                    if s.e2e_avail[<int64_t>xf.src * s.n_ranks + xf.dst] < s.maxp_B:
                        unsettle_node(s, node)          # a store of this pair may now be held at any of its ports
            s.q[qi].head = xf.next                                      # rotate or retire the transfer
            if xf.next >= 0:                        # the transfer this port carves from next: fetch its line now
                prefetch(&s.xf[xf.next])
            if s.q[qi].head < 0:
                s.q[qi].tail = -1
            if xf.carved_B < xf.avail_B:
                xf.next = -1
                if s.q[qi].tail >= 0:
                    s.xf[s.q[qi].tail].next = x
                else:
                    s.q[qi].head = x
                s.q[qi].tail = x
            else:
                xf.queued = 0
                xf.next = -1
                if s.q[qi].head < 0:
                    s.c[ch].q_busy -= 1
                    q_unmark(s, ch, idx)
            s.c[ch].tx_free_ch = -1
        else:                                                           # a packet waiting in a VOQ
            p = s.q[qi].head
            pk = &s.pk[p]
            if pk.ready_ps > s.now:                                     # still in the switch pipeline
                if pk.ready_ps < next_ready:
                    next_ready = pk.ready_ps
                continue
            flits = pk.flits
            if s.cvs[c].cr_limit - s.cvs[c].cr_used < flits:
                credit_blocked = True
                continue
            if s.c[ch].r_flits + flits > s.replay_cap_flits:
                return 0
            s.q[qi].head = pk.next
            if pk.next >= 0:                        # the packet this queue offers next: fetch its line now
                prefetch(&s.pk[pk.next])
            else:
                s.q[qi].tail = -1
                s.c[ch].q_busy -= 1
                q_unmark(s, ch, idx)
            q_account(s, ch, -1)
            s.c[ch].tx_free_ch = pk.in_ch
            s.c[ch].tx_free_vc = pk.vc
            s.c[ch].tx_free_flits = flits
            s.k[ch].payload_B += pk.payload_B
        if not s.fixed_priority:
            s.c[ch].rr = idx
        pk.vc = <int8_t>vc
        pk.next = -1
        s.cvs[c].cr_used += flits
        s.k[ch].packets += 1
        if s.c[ch].r_count == s.ring_cap:       # (< window here, and window <= the largest ring)
            ring_grow(s)
        i = (s.c[ch].r_head + s.c[ch].r_count) & s.ring_mask
        r = &s.ring[<int64_t>ch * s.ring_cap + i]
        r.pkt = p; r.seq = s.c[ch].next_seq; r.tlp_B = pk.tlp_B; r.flits = flits
        s.c[ch].next_seq = (s.c[ch].next_seq + 1) & s.seq_mask
        s.c[ch].r_count += 1
        s.c[ch].r_sent += 1
        s.c[ch].r_flits += flits
        return send_unit(s, ch, r, pk.tail_ps)
    if credit_blocked and s.c[ch].stall_since < 0:
        s.c[ch].stall_since = s.now
        s.c[ch].cr_short = 1
    if next_ready < INT64_MAX and not (s.now < s.c[ch].wake_at <= next_ready):
        s.c[ch].wake_at = next_ready
        c_push(&s.heap, next_ready, EV_WAKE, ch, 0, 0, 0)
    return 0


cdef int on_ctrl(SimC* s, EventC* e) except -1 nogil:
    cdef int32_t ch = e.ch
    cdef int kind = e.x & 0xff
    cdef int32_t vc = e.x >> 8
    cdef int32_t n, i
    cdef int64_t lim
    cdef ReplayC* r
    cdef bint limited
    if ev_flag(e) != s.c[ch].epoch:
        s.k[ch].ctrl_lost += 1
        return 0
    if kind == C_UPDATEFC:
        lim = e.y + s.pool_flits
        if lim > s.cvs[cv(s, ch, vc)].cr_limit:
            s.cvs[cv(s, ch, vc)].cr_limit = lim
        if s.cvs[cv(s, ch, vc)].cr_limit - s.cvs[cv(s, ch, vc)].cr_used > s.pool_flits:
            s.k[ch].credit_errors += 1
        if not s.c[ch].cr_short:                # no head of idle ch was short of credits at its last arbitration
            return try_send_if_unsettled(s, ch)
        return try_send(s, ch)
    # Ack or Nak: purge every unit up to and including sequence e.y
    limited = s.c[ch].r_count >= s.window or s.c[ch].r_flits + s.max_unit_flits > s.replay_cap_flits
    if s.c[ch].r_count > 0:
        n = <int32_t>((e.y - s.ring[<int64_t>ch * s.ring_cap + s.c[ch].r_head].seq) & s.seq_mask) + 1
        if n <= s.c[ch].r_count:
            for i in range(n):
                r = &s.ring[<int64_t>ch * s.ring_cap + ((s.c[ch].r_head + i) & s.ring_mask)]
                s.c[ch].r_flits -= r.flits
            s.c[ch].r_head = (s.c[ch].r_head + n) & s.ring_mask
            s.c[ch].r_count -= n
            s.c[ch].r_sent = s.c[ch].r_sent - n if s.c[ch].r_sent > n else 0
            s.c[ch].replay_num = 0
            s.last_progress = s.now
            if s.c[ch].r_count > 0:
                arm_replay_timer(s, ch)
            else:
                s.c[ch].rt_armed = 0
    if kind == C_NAK and s.c[ch].r_count > 0 and s.c[ch].down_until <= s.now:
        return start_replay(s, ch, False)
    if kind == C_ACK and not limited:           # the window and replay buffer were not what held ch back
        return try_send_if_unsettled(s, ch)
    return try_send(s, ch)


# ================================================================== receiver, switches and endpoints
cdef int on_arrive(SimC* s, EventC* e) except -1 nogil:
    cdef int32_t ch = e.ch
    cdef int32_t seq = <int32_t>(e.y & <int64_t>0xffffffff)
    cdef bint bad = (e.y >> 32) & 1
    cdef ps_t tail = s.now + (e.y >> 33)
    cdef int32_t d, node, p
    cdef PacketC* pk
    if ev_flag(e) != s.c[ch].epoch:              # lost in a retrain
        return 0
    if bad:
        s.k[ch].corrupted += 1
        if not s.c[ch].nak_sched:
            s.c[ch].nak_sched = 1
            send_ctrl(s, ch, C_NAK, 0, (s.c[ch].expected - 1) & s.seq_mask)
        return 0
    d = (s.c[ch].expected - seq) & s.seq_mask
    if d != 0:
        if d <= s.seq_mod // 2:                # already received: discard, acknowledge again
            s.k[ch].dups_discarded += 1
            return note_ack_due(s, ch)
        if not s.c[ch].nak_sched:                # a unit went missing before this one
            s.c[ch].nak_sched = 1
            send_ctrl(s, ch, C_NAK, 0, (s.c[ch].expected - 1) & s.seq_mask)
        return 0
    s.c[ch].expected = (s.c[ch].expected + 1) & s.seq_mask
    s.c[ch].nak_sched = 0
    s.last_progress = s.now
    note_ack_due(s, ch)
    p = e.x
    pk = &s.pk[p]
    s.cvs[cv(s, ch, pk.vc)].occ += pk.flits
    if s.cvs[cv(s, ch, pk.vc)].occ > s.pool_flits:
        s.k[ch].credit_errors += 1
    pk.in_ch = ch
    pk.tail_ps = tail
    pk.hops_left -= 1
    node = s.c[ch].ch_dst
    if pk.hops_left <= 0:
        s.c[ch].lane_dlv = <int8_t>lane_pick(&s.heap, s.c[ch].lane_dlv, tail - s.now)
        return c_push_lane(&s.heap, s.c[ch].lane_dlv, tail, EV_DELIVER, ch, p, 0, 0)
    pk.ready_ps = s.now + s.node_lat[node]
    return enqueue_packet(s, p)


cdef int enqueue_packet(SimC* s, int32_t p) except -1 nogil:
    """Queue a packet at its output now; it becomes eligible when it leaves the switch pipeline (ready_ps), and
    the output is woken then if nothing else wakes it (no event per packet for the pipeline)."""
    cdef PacketC* pk = &s.pk[p]
    cdef int32_t hv = s.hop[pk.hop_at].hv
    cdef int32_t out = hv_ch(s, hv)
    cdef int32_t vc = hv_vc(s, hv, pk.cls)
    cdef int32_t idx = vc * s.n_slots[s.c[out].ch_src] + s.c[pk.in_ch].ch_slot
    cdef int64_t qi = s.c[out].q_base + idx
    pk.hop_at = s.hop[pk.hop_at].next
    pk.next = -1
    if s.q[qi].tail >= 0:
        s.pk[s.q[qi].tail].next = p
    else:
        s.q[qi].head = p
        s.c[out].q_busy += 1
        q_mark(s, out, idx)
    s.q[qi].tail = p
    q_account(s, out, 1)
    if s.c[out].tx_busy or s.c[out].down_until > s.now:
        return 0
    if pk.ready_ps > s.now and settled(s, out):     # it cannot go now, and nothing else can: only its wake-up is due
        if s.q[qi].head == p and not (s.now < s.c[out].wake_at <= pk.ready_ps):
            s.c[out].wake_at = pk.ready_ps
            c_push(&s.heap, pk.ready_ps, EV_WAKE, out, 0, 0, 0)
        return 0
    return arbitrate(s, out)


cdef int enqueue_xfer(SimC* s, int32_t x) except -1 nogil:
    """Put a transfer into the injection queue of its first channel."""
    cdef XferC* xf = &s.xf[x]
    cdef int32_t ch = hv_ch(s, xf.hv0)
    cdef int32_t vc = hv_vc(s, xf.hv0, xf.cls)
    cdef int32_t nslots = s.n_slots[s.c[ch].ch_src]
    cdef int64_t qi = s.c[ch].q_base + vc * nslots + nslots - 1
    xf.queued = 1
    xf.next = -1
    if s.q[qi].tail >= 0:
        s.xf[s.q[qi].tail].next = x
    else:
        s.q[qi].head = x
        s.c[ch].q_busy += 1
        q_mark(s, ch, vc * nslots + nslots - 1)
    s.q[qi].tail = x
    return try_send(s, ch)


cdef int wake_node(SimC* s, int32_t node) except -1 nogil:
    cdef int64_t i
    for i in range(s.node_out_ptr[node], s.node_out_ptr[node + 1]):
        try_send(s, s.node_out[i])
    return 0


cdef int finish_xfer(SimC* s, int32_t x) except -1 nogil:
    cdef int32_t t = s.xf[x].task
    if t >= 0:
        c_push_lane(&s.heap, s.ln_complete, s.now + s.complete_ps, EV_TASK_DONE, -1, t, 0, 0)
    return 0


cdef int on_deliver(SimC* s, EventC* e) except -1 nogil:
    cdef int32_t p = e.x
    cdef PacketC* pk = &s.pk[p]
    cdef XferC* xf = &s.xf[pk.xfer]
    cdef XferC* rx
    cdef int32_t done
    cdef int64_t i
    free_buffer(s, e.ch, pk.vc, pk.flits)
    if xf.d_kind != 1:             # data: the bytes land in the memory of the node the packet actually reached
        xf.csum += content_sum(s.c[e.ch].ch_dst, xf.d_src, pk.offset_B, pk.payload_B)
    if pk.fseq == xf.fseq_expect:
        xf.fseq_expect += 1
        s.delivered += 1
    elif pk.fseq < xf.fseq_expect:
        s.dup_delivered += 1
    else:
        s.ooo_delivered += 1
        xf.fseq_expect = pk.fseq + 1
    s.last_progress = s.now
    if xf.d_kind == 1:                         # read request: the owner answers with completions on the response VC
        xf.delivered_B += pk.covers_B
        rx = &s.xf[xf.partner]
        rx.avail_B += pk.covers_B
        if not rx.queued and rx.carved_B < rx.avail_B:
            enqueue_xfer(s, xf.partner)
    else:
        xf.delivered_B += pk.payload_B
        if xf.d_kind == 0:                     # the space is drained to memory: grant it back to the source
            i = <int64_t>xf.d_src * s.n_ranks + xf.d_dst
            s.e2e_owed[i] += pk.payload_B
            if s.e2e_owed[i] >= s.e2e_quantum or xf.delivered_B == xf.total_B:
                c_push(&s.heap, s.now + xf.grant_ps, EV_E2E_GRANT, xf.d_src, xf.d_dst, s.e2e_owed[i], 0)
                s.e2e_owed[i] = 0
        if xf.d_kind == 2:                     # completions free read tags in request order
            done = <int32_t>(xf.delivered_B // s.mrrs_B)
            if xf.delivered_B == xf.total_B:
                done = <int32_t>((xf.total_B + s.mrrs_B - 1) // s.mrrs_B)
            if done > xf.reqs_done:
                s.tags_free[xf.d_dst] += done - xf.reqs_done
                xf.reqs_done = done
                wake_node(s, xf.d_dst)
        if xf.delivered_B == xf.total_B:
            finish_xfer(s, pk.xfer)
    pkt_release(s, p)
    return 0


# ================================================================== task-graph executor
cdef inline int32_t choose_path(SimC* s, int32_t src, int32_t dst, int32_t flow) noexcept nogil:
    cdef int64_t a = s.pair_ptr[<int64_t>src * s.n_ranks + dst]
    cdef int64_t n = s.pair_ptr[<int64_t>src * s.n_ranks + dst + 1] - a
    if n <= 0:
        return -1
    return <int32_t>(a + flow % n)


cdef ps_t analytic_oneway(SimC* s, int32_t p, int64_t nbytes, int32_t npk, ps_t start, bint occupy) noexcept nogil:
    """Alpha-beta over the route: latencies + pipelined serialisation on the slowest hop, queued behind earlier
    transfers on the source port (injection is where a rank's own transfers contend; the network is not modelled)."""
    cdef int32_t h, n = path_len(s, p), ch, first_ch = path_hop_ch(s, p, 0)
    cdef double worst = 0.0
    cdef ps_t lat = 0, pkt_ser, ser, t, f
    cdef int64_t tlp = nbytes + <int64_t>npk * s.hdr_B
    for h in range(n):
        ch = path_hop_ch(s, p, h)
        lat += s.c[ch].ch_lat
        if h + 1 < n:
            lat += s.node_lat[s.c[ch].ch_dst]
        if s.c[ch].ps_per_tlpB > worst:
            worst = s.c[ch].ps_per_tlpB
    ser = <ps_t>(tlp * worst + 0.5)
    pkt_ser = <ps_t>(min(<int64_t>s.maxp_B + s.hdr_B, tlp) * worst + 0.5)
    f = s.c[first_ch].flit_ps
    t = start
    if occupy and s.an_free[first_ch] > t:
        t = s.an_free[first_ch]
    if occupy:
        s.an_free[first_ch] = t + ser
    return t + lat + ser + (n - 1) * (pkt_ser if pkt_ser < f else f)


cdef int start_task(SimC* s, int32_t t) except -1 nogil:
    cdef int32_t key, x, p, k
    cdef int8_t kind = s.t_kind[t]
    cdef XferC* xf
    cdef ps_t when
    s.t_start[t] = s.now
    if kind == T_JOIN:                         # zero cost: completes in place via the work stack
        s.work[0] += 1
        s.work[s.work[0]] = t
        return 0
    if kind == T_TRANSFER:
        x = s.t_xfer[t]
        xf = &s.xf[x]
        when = s.now + s.issue_ps + s.xlate_ps
        if xf.src == xf.dst or xf.status != 0:     # local, or Unsupported Request answered by the ingress port
            return c_push(&s.heap, when, EV_TASK_DONE, -1, t, 0, 0)
        k = s.ln_inject
        if s.node_domain[xf.src] != s.node_domain[xf.dst]:
            when += s.p2p_ps
            k = s.ln_inject_p2p
        if s.analytic:
            if xf.kind == 1:
                p = xf.path
                when = analytic_oneway(s, p, 0, <int32_t>((xf.total_B + s.mrrs_B - 1) // s.mrrs_B), when, False)
                xf = &s.xf[xf.partner]
            when = analytic_oneway(s, xf.path, xf.total_B,
                                   <int32_t>((xf.total_B + s.maxp_B - 1) // s.maxp_B), when, True)
            return c_push(&s.heap, when + s.complete_ps, EV_TASK_DONE, -1, t, 0, 0)
        return c_push_lane(&s.heap, k, when, EV_XFER_INJECT, -1, x, 0, 0)
    if s.t_stream[t] >= 0:
        key = s.t_rank[t] * s.n_streams + s.t_stream[t]
        if s.s_busy[key]:
            s.t_next[t] = -1
            if s.s_tail[key] >= 0:
                s.t_next[s.s_tail[key]] = t
            else:
                s.s_head[key] = t
            s.s_tail[key] = t
            return 0
        s.s_busy[key] = 1
    return c_push(&s.heap, s.now + s.t_dur[t], EV_TASK_DONE, -1, t, 0, 0)


cdef int complete_task(SimC* s, int32_t t) except -1 nogil:
    s.work[0] += 1
    s.work[s.work[0]] = t
    return drain(s)


cdef int drain(SimC* s) except -1 nogil:
    """Complete every task on the work stack at s.now and start what they unblock."""
    cdef int32_t key, nxt, u, v
    cdef int64_t i
    while s.work[0] > 0:
        u = s.work[s.work[0]]
        s.work[0] -= 1
        s.t_end[u] = s.now
        s.tasks_left -= 1
        s.last_progress = s.now
        if s.t_kind[u] != T_TRANSFER and s.t_kind[u] != T_JOIN and s.t_stream[u] >= 0:
            key = s.t_rank[u] * s.n_streams + s.t_stream[u]
            nxt = s.s_head[key]
            if nxt >= 0:
                s.s_head[key] = s.t_next[nxt]
                if s.s_head[key] < 0:
                    s.s_tail[key] = -1
                s.t_start[nxt] = s.now
                c_push(&s.heap, s.now + s.t_dur[nxt], EV_TASK_DONE, -1, nxt, 0, 0)
            else:
                s.s_busy[key] = 0
        for i in range(s.t_succ_ptr[u], s.t_succ_ptr[u + 1]):
            v = s.t_succ[i]
            s.t_deps[v] -= 1
            if s.t_deps[v] == 0:
                start_task(s, v)
    return 0


cdef int on_inject(SimC* s, int32_t x) except -1 nogil:
    cdef XferC* xf = &s.xf[x]
    xf.start_ps = s.now
    if xf.path < 0:
        return 0
    return enqueue_xfer(s, x)


# ================================================================== the loop
cdef inline void prefetch_next_head(SimC* s, int32_t ch) noexcept nogil:
    """Fetch what ch's next arbitration will most likely read first: the head (packet, or transfer to carve from) of
    its first non-empty queue after the round-robin pointer, among its first 64 queues. A guess: it may be wrong
    (a replay, a head not ready, more queues), never harmful."""
    cdef uint64_t word = s.q_bits[s.c[ch].qb_base]
    cdef int32_t start = s.c[ch].rr + 1
    cdef int32_t nslots, idx, x
    if word == 0:
        return
    if start < 64 and word >> start:
        idx = start + __builtin_ctzll(word >> start)
    else:
        idx = __builtin_ctzll(word)
    x = s.q[s.c[ch].q_base + idx].head
    nslots = s.n_slots[s.c[ch].ch_src]
    while idx >= nslots:
        idx -= nslots
    if idx == nslots - 1:
        prefetch(&s.xf[x])
    else:
        prefetch(&s.pk[x])


cdef inline void prefetch_ahead(SimC* s, LaneC* L) noexcept nogil:
    """Lanes are FIFOs, so the events a few places behind a lane's head are known to come soon: fetch what they will
    touch while the current one runs (no effect on results). An arrival or delivery 8 places back: its packet;
    4 places back (its packet fetched by now): the next route-graph node, or the transfer's delivery line; a
    transmitter-free event 4 places back: the head its channel's arbitration will most likely read."""
    cdef EventC* e
    cdef PacketC* pk
    cdef int ty
    if L.n > 8:
        e = &L.e[(L.head + 8) & (L.cap - 1)]
        ty = ev_type(e)
        if ty == EV_PKT_ARRIVE or ty == EV_DELIVER:
            prefetch(&s.pk[e.x])
    if L.n > 4:
        e = &L.e[(L.head + 4) & (L.cap - 1)]
        ty = ev_type(e)
        if ty == EV_PKT_ARRIVE:
            pk = &s.pk[e.x]
            if pk.hops_left > 1:
                prefetch(&s.hop[pk.hop_at])
        elif ty == EV_DELIVER:
            prefetch(<char*>&s.xf[s.pk[e.x].xfer] + 64)
        elif ty == EV_TX_DONE:
            prefetch_next_head(s, e.ch)


cdef int c_run(SimC* s, int64_t max_events, ps_t until_ps, int* outcome) except -1 nogil:
    cdef EventC e
    cdef int32_t ch
    cdef int64_t i, j
    cdef uint64_t dirty
    cdef bint held
    cdef int64_t budget_end = s.events + max_events
    cdef bint bounded = until_ps < INT64_MAX             # a time limit was given (else skip its check per event)
    cdef int vc, typ
    cdef int32_t src
    while True:
        src = q_first(&s.heap)
        if src == -2:
            break
        if s.events >= budget_end or (bounded and q_peek(&s.heap, src).time > until_ps):
            outcome[0] = R_PAUSED
            return 0
        if (s.events & 1023) == 0:
            if s.now - s.last_progress > s.watchdog_ps and (s.tasks_left > 0 or s.pkts_live > 0):
                outcome[0] = R_STUCK
                return 0
            lanes_trim(&s.heap)
        q_take(&s.heap, src, &e)
        if src >= 0:
            prefetch_ahead(s, &s.heap.lane[src])
        s.now = e.time
        s.events += 1
        ch = e.ch
        typ = ev_type(&e)
        if typ == EV_PKT_ARRIVE:
            on_arrive(s, &e)
        elif typ == EV_TX_DONE:
            s.c[ch].tx_busy = 0
            if s.c[ch].tx_free_ch >= 0:
                free_buffer(s, s.c[ch].tx_free_ch, s.c[ch].tx_free_vc, s.c[ch].tx_free_flits)
                s.c[ch].tx_free_ch = -1
            try_send(s, ch)
        elif typ == EV_CTRL_ARRIVE:
            on_ctrl(s, &e)
        elif typ == EV_WAKE:
            if s.c[ch].wake_at == s.now:
                s.c[ch].wake_at = -1
                try_send(s, ch)
        elif typ == EV_DELIVER:
            on_deliver(s, &e)
        elif typ == EV_TASK_DONE:
            complete_task(s, e.x)
        elif typ == EV_E2E_GRANT:
            i = <int64_t>ch * s.n_ranks + e.x
            held = s.e2e_avail[i] < s.maxp_B    # a store of this pair may have been held (else none could be)
            s.e2e_avail[i] += e.y
            if held:
                wake_node(s, ch)
            else:
                for j in range(s.node_out_ptr[ch], s.node_out_ptr[ch + 1]):
                    try_send_if_unsettled(s, s.node_out[j])
        elif typ == EV_XFER_INJECT:
            on_inject(s, e.x)
        elif typ == EV_ACK_TIMER:
            if s.c[ch].ack_armed and e.y == s.c[ch].ack_gen:
                s.c[ch].ack_armed = 0
                if s.c[ch].ack_pending > 0:
                    send_ack(s, ch)
        elif typ == EV_REPLAY_TIMER:
            s.c[ch].rt_pending = 0
            if s.c[ch].rt_armed and s.now < s.c[ch].rt_deadline:
                s.c[ch].rt_pending = 1
                c_push(&s.heap, s.c[ch].rt_deadline, EV_REPLAY_TIMER, ch, 0, 0, 0)
            elif s.c[ch].rt_armed:
                s.c[ch].rt_armed = 0
                if s.c[ch].r_count > 0 and s.c[ch].down_until <= s.now:
                    start_replay(s, ch, True)
        elif typ == EV_CREDIT_TIMER:
            if s.c[ch].cr_armed and e.y == s.c[ch].cr_gen:
                s.c[ch].cr_armed = 0
                dirty = s.c[ch].cr_dirty                # the VCs with freed != freed_sent, in VC order: their
                while dirty:                            # records only (one line, not all nvc of them)
                    send_update(s, ch, __builtin_ctzll(dirty))
                    dirty &= dirty - 1
        elif typ == EV_REFRESH:
            # periodic UpdateFC; skipped (and not re-armed) when it could not change the sender's view
            s.c[ch].refresh_armed = 0
            for vc in range(s.nvc):
                if s.cvs[cv(s, ch, vc)].cr_limit < s.cvs[cv(s, ch, vc)].freed + s.pool_flits:
                    send_update(s, ch, vc)
        elif typ == EV_RETRAIN_DONE:
            for vc in range(2):
                ch = e.ch if vc == 0 else s.c[e.ch].ch_rev
                if s.c[ch].down_until <= s.now:
                    if s.c[ch].r_count > 0:
                        arm_replay_timer(s, ch)
                    try_send(s, ch)
        elif typ == EV_FORCE_RETRAIN:
            retrain(s, ch)
    outcome[0] = R_DONE
    return 0


# ================================================================== Python-facing owner of the state
cdef class Engine:
    """Owns the simulation state (C arrays) and runs the event loop without the GIL.

    Build it with `fabric.sim` (which turns a config, a topology and a task graph into the arrays below);
    counters come back as zero-copy numpy views (`counters()`), per-task start/end times as `task_times()`.
    """
    cdef SimC s
    cdef dict _keep          # numpy arrays whose buffers the C state points into
    cdef list _faults
    cdef bint _started

    def __cinit__(self):
        memset(&self.s, 0, sizeof(SimC))
        self._keep = {}
        self._faults = []
        self._started = False

    def __dealloc__(self):
        q_free(&self.s.heap)
        free(self.s.pk)
        free(self.s.xf)
        free(self.s.ring)
        free(self.s.c)
        free(self.s.hop)

    # ---- array plumbing: keep a contiguous copy alive and hand its pointer to C
    cdef void* _arr(self, str name, object values, object dtype):
        a = np.array(values, dtype=dtype, order="C", copy=True)   # the kernel writes into some: never alias
        if a.size == 0:
            a = np.zeros(1, dtype=dtype)
        self._keep[name] = a
        return cnp.PyArray_DATA(a)

    cdef void* _zeros(self, str name, Py_ssize_t n, object dtype, object fill=0):
        a = np.full(max(int(n), 1), fill, dtype=dtype)
        self._keep[name] = a
        return cnp.PyArray_DATA(a)

    def __init__(self, dict p, dict topo, dict graph, bint analytic=False, int event_lanes=MAX_LANES,
                 int64_t lane_min_heap=64, bint skip_settled=True, int32_t replay_ring_slots=16,
                 bint phy_countdown=True):
        """p: scalar parameters (ps, bytes, flits); topo: docs/contracts.md arrays; graph: TaskGraph arrays.
        event_lanes: how many fixed-delay FIFOs may hold events beside the heap (0: the heap alone);
        lane_min_heap: events go to their lane only while the heap holds at least this many. Neither changes
        results (tests/test_event_queue.py checks), only speed: lanes pay off once the heap is deep.
        skip_settled: skip arbitrating channels that cannot send (see settled()); off, every event that may enable
        a send arbitrates. It changes nothing either (tests/test_arbitration.py checks), only speed.
        replay_ring_slots: replay ring slots per channel at the start (a power of two; they double when a channel's
        unacknowledged units fill them, up to the window): storage, not a result (tests/test_replay_ring.py).
        phy_countdown: units that end before their channel's next injected flit fault and bit error skip the PHY's
        look (phy_unit); off, every unit gets it. Results are the same (tests/test_phy_countdown.py checks)."""
        cdef SimC* s = &self.s
        cdef int32_t C, N, R, V, n, i
        cdef ChanC* cc
        cdef int64_t tlp
        cdef ps_t ser, first
        s.analytic = analytic
        s.skip_settled = skip_settled
        s.phy_countdown = phy_countdown
        s.levels = int(topo["vc_levels"])
        s.nvc = 2 * s.levels
        if s.nvc > 16:                  # ChanC.cr_dirty has a bit per VC
            raise ValueError(f"{s.nvc} VCs per channel; the kernel supports up to 16")
        s.seq_mod = 1 << int(p["seq_bits"])
        s.window = s.seq_mod // 2
        s.replay_cap_flits = int(p["replay_buffer_flits"])
        if s.window > s.replay_cap_flits:
            s.window = s.replay_cap_flits
        s.seq_mask = s.seq_mod - 1
        if replay_ring_slots < 1 or replay_ring_slots & (replay_ring_slots - 1):
            raise ValueError(f"replay_ring_slots={replay_ring_slots}: a power of two >= 1, please")
        s.ring_cap = 1
        while s.ring_cap < s.window and s.ring_cap < replay_ring_slots:
            s.ring_cap *= 2
        s.ring_mask = s.ring_cap - 1
        s.ack_every = int(p["ack_every"]); s.ack_ps = int(p["ack_ps"]); s.replay_ps = int(p["replay_ps"])
        s.replay_limit = int(p["replay_limit"]); s.retrain_ps = int(p["retrain_ps"])
        s.pool_flits = int(p["credit_flits"]); s.update_flits = int(p["update_flits"])
        s.update_ps = int(p["update_ps"]); s.refresh_ps = int(p["refresh_ps"])
        s.hdr_B = int(p["header_B"]); s.maxp_B = int(p["max_payload_B"]); s.mrrs_B = int(p["mrrs_B"])
        s.flit_B = int(p["flit_B"]); s.flitpay_B = int(p["flit_B"]) - int(p["flit_overhead_B"])
        s.max_unit_flits = pkt_flits(s, s.maxp_B + s.hdr_B)
        s.issue_ps = int(p["issue_ps"]); s.complete_ps = int(p["complete_ps"])
        s.xlate_ps = int(p["xlate_ps"]); s.p2p_ps = int(p["p2p_ps"]); s.watchdog_ps = int(p["watchdog_ps"])
        s.fixed_priority = int(p.get("fixed_priority", 0))
        seed = int(p["seed"])

        # ---- topology
        ch_src = np.asarray(topo["ch_src"], np.int32)
        ch_dst = np.asarray(topo["ch_dst"], np.int32)
        C = s.n_ch = len(ch_src)
        N = s.n_nodes = len(topo["node_latency_ps"])
        R = s.n_ranks = int(topo["n_ranks"])
        V = s.nvc
        s.c = <ChanC*>aligned_alloc(64, <size_t>max(C, 1) * sizeof(ChanC))
        if s.c == NULL:
            raise MemoryError("channel state")
        memset(s.c, 0, <size_t>max(C, 1) * sizeof(ChanC))
        ch_rev = np.asarray(topo["ch_rev"], np.int32)
        ppb = np.asarray(topo["ch_ps_per_byte"], np.float64)
        ps_per_tlpB = ppb * s.flit_B / s.flitpay_B
        ch_lat = np.asarray(topo["ch_latency_ps"], np.int64)
        flit_ps = np.maximum(np.rint(ppb * s.flit_B), 1).astype(np.int64)
        ber = np.asarray(topo["ch_ber"], np.float64)
        log1m_ber = np.log1p(-ber)
        p_flit = -np.expm1(8.0 * s.flit_B * np.log1p(-ber))
        s.node_lat = <ps_t*>self._arr("node_lat", topo["node_latency_ps"], np.int64)
        s.node_domain = <int32_t*>self._arr("node_domain", topo.get("node_domain", np.zeros(N)), np.int32)
        # input slots: each channel's index among its destination's incoming channels; one extra injection slot
        n_in = np.bincount(ch_dst, minlength=N).astype(np.int32)
        order = np.argsort(ch_dst, kind="stable")
        slot = np.empty(C, np.int32)
        starts = np.cumsum(n_in) - n_in
        slot[order] = np.arange(C, dtype=np.int32) - np.repeat(starts, n_in).astype(np.int32)
        nslots = n_in + 1
        s.n_slots = <int32_t*>self._arr("n_slots", nslots, np.int32)
        qsize = V * nslots[ch_src].astype(np.int64)
        qbase = (np.cumsum(qsize) - qsize).astype(np.int64)
        s.q = <QueueC*>self._zeros("q", 2 * qsize.sum(), np.int32, -1)
        qwords = (qsize + 63) // 64
        qb_base = (np.cumsum(qwords) - qwords).astype(np.int64)
        if 2 * qsize.sum() >= 2**31:
            raise ValueError("too many virtual output queues for int32 queue offsets")
        s.q_bits = <uint64_t*>self._zeros("q_bits", qwords.sum(), np.uint64)
        n_out = np.bincount(ch_src, minlength=N)
        s.node_out_ptr = <int64_t*>self._arr("node_out_ptr", np.concatenate([[0], np.cumsum(n_out)]), np.int64)
        s.node_out = <int32_t*>self._arr("node_out", np.argsort(ch_src, kind="stable"), np.int32)
        s.pair_ptr = <int64_t*>self._arr("pair_ptr", topo["pair_ptr"], np.int64)
        s.path_ptr = <int64_t*>self._arr("path_ptr", topo["path_ptr"], np.int64)
        pp = np.asarray(topo["path_ptr"], np.int64)
        if pp.size and (int(pp[pp.size - 1]) >= (1 << 31) - 1 or int(np.diff(pp).max(initial=0)) >= (1 << 15)):
            raise ValueError("routes too large for int32 packet route offsets / int16 hop counts")
        path_vcl = np.asarray(topo["path_vcl"], np.int8)
        vmax = int(path_vcl.max()) if path_vcl.size else 0
        if path_vcl.size and int(path_vcl.min()) < 0:
            raise ValueError("negative VC level in a route")
        s.vcl_bits = max(vmax.bit_length(), 1)
        if (max(C, 1) << s.vcl_bits) >= (1 << 31):
            raise ValueError("too many channels to pack routes into int32")
        hv = np.left_shift(np.asarray(topo["path_ch"], np.int32), s.vcl_bits)   # int32 throughout: no int64 temporaries
        np.bitwise_or(hv, path_vcl, out=hv)
        if hv.size == 0:
            hv = np.zeros(1, np.int32)
        self._keep["path_hv"] = np.ascontiguousarray(hv, dtype=np.int32)
        s.path_hv = <int32_t*>cnp.PyArray_DATA(self._keep["path_hv"])
        n_paths = pp.size - 1 if pp.size else 0
        s.path_at1 = <int32_t*>self._zeros("path_at1", n_paths, np.int32, -1)
        build_route_graph(s, n_paths, s.path_at1)

        # ---- per-channel state (ChanC records; counters and per-VC credits as int64 tables viewed as structs)
        # one splitmix stream per channel, derived from the seed and the channel id
        rng = [(seed * 0x9E3779B97F4A7C15 + (c + 1) * 0xD1B54A32D192ED03) & 0xFFFFFFFFFFFFFFFF for c in range(C)]
        for i in range(C):
            cc = &s.c[i]
            cc.wake_at = -1; cc.stall_since = -1; cc.rr = -1; cc.tx_free_ch = -1; cc.next_err_bit = -1.0
            cc.q_base = qbase[i]; cc.qb_base = qb_base[i]
            cc.ch_src = ch_src[i]; cc.ch_dst = ch_dst[i]; cc.ch_rev = ch_rev[i]; cc.ch_slot = slot[i]
            cc.ps_per_tlpB = ps_per_tlpB[i]; cc.flit_ps = flit_ps[i]; cc.ch_lat = ch_lat[i]
            cc.log1m_ber = log1m_ber[i]; cc.p_flit = p_flit[i]; cc.rng = <uint64_t>rng[i]
        s.ring = ring_alloc(<int64_t>C * s.ring_cap)
        if s.ring == NULL:
            raise MemoryError("replay buffers")
        assert sizeof(ChanC) == 256 and sizeof(XferC) == 128 and sizeof(PacketC) == 64
        assert sizeof(CntC) == 8 * 24 and sizeof(CvC) == 8 * len(CV_COLS)
        cvt = line_aligned_zeros(max(C * V, 1), sizeof(CvC) // 8)
        cvt[:, CV_COLS.index("cr_limit")] = s.pool_flits
        self._keep["cv"] = cvt
        s.cvs = <CvC*>cnp.PyArray_DATA(cvt)
        self._keep["k"] = line_aligned_zeros(max(C, 1), sizeof(CntC) // 8)
        s.k = <CntC*>cnp.PyArray_DATA(self._keep["k"])

        # ---- packets
        s.pk_cap = 1024
        s.pk = <PacketC*>aligned_alloc(64, s.pk_cap * sizeof(PacketC))
        if s.pk == NULL:
            raise MemoryError("packet pool")
        for i in range(s.pk_cap - 1):
            s.pk[i].next = i + 1
        s.pk[s.pk_cap - 1].next = -1
        s.pk_free = 0
        heap_alloc(&s.heap, 1024)
        s.heap.max_lanes = min(max(event_lanes, 0), MAX_LANES)
        s.heap.lane_min_heap = max(lane_min_heap, 0)
        s.heap.reshape_at = 1 << 14             # first refit of the winner tree after 16 k lane events
        s.ln_ack = lane_for(&s.heap, s.ack_ps)
        s.ln_upd = lane_for(&s.heap, s.update_ps)
        s.ln_refresh = lane_for(&s.heap, s.refresh_ps)
        s.ln_replay = lane_for(&s.heap, s.replay_ps)
        s.ln_complete = lane_for(&s.heap, s.complete_ps)
        s.ln_inject = lane_for(&s.heap, s.issue_ps + s.xlate_ps)
        s.ln_inject_p2p = lane_for(&s.heap, s.issue_ps + s.xlate_ps + s.p2p_ps)
        for i in range(C):      # Acks and UpdateFCs about a channel cross its reverse: one delay per link kind
            s.c[i].lane_ctrl = <int8_t>lane_for(&s.heap, s.c[s.c[i].ch_rev].flit_ps + s.c[s.c[i].ch_rev].ch_lat)
            s.c[i].lane_arr = s.c[i].lane_txd = s.c[i].lane_dlv = -1
        # A unit of tlp bytes keeps its transmitter busy ser = tlp x ps_per_tlpB, its head arrives first + ch_lat
        # later (first = one flit or ser if shorter) and its tail ser - first after its head: lanes for the
        # packet sizes the transfers will mostly produce (full packets, then the commonest remainders)
        for tlp in self._common_packet_sizes(p, graph):
            for i in range(C):
                ser = max(<ps_t>(tlp * s.c[i].ps_per_tlpB + 0.5), 1)
                first = ser if ser < s.c[i].flit_ps else s.c[i].flit_ps
                lane_for(&s.heap, first + s.c[i].ch_lat)
                lane_for(&s.heap, ser)
                lane_for(&s.heap, ser - first)

        # ---- tasks and the transfers they start
        kind = np.asarray(graph["kind"], np.int8)
        n = s.n_tasks = len(kind)
        s.t_kind = <int8_t*>self._arr("t_kind", kind, np.int8)
        s.t_rank = <int32_t*>self._arr("t_rank", graph["rank"], np.int32)
        stream = np.asarray(graph["stream"], np.int32)
        s.t_stream = <int32_t*>self._arr("t_stream", stream, np.int32)
        s.t_dur = <ps_t*>self._arr("t_dur", graph["duration_ps"], np.int64)
        s.t_succ_ptr = <int64_t*>self._arr("t_succ_ptr", graph["succ_ptr"], np.int64)
        s.t_succ = <int32_t*>self._arr("t_succ", graph["succ_idx"], np.int32)
        s.t_deps = <int32_t*>self._arr("t_deps", graph["n_deps"], np.int32)
        s.t_start = <ps_t*>self._zeros("t_start", n, np.int64, -1)
        s.t_end = <ps_t*>self._zeros("t_end", n, np.int64, -1)
        s.t_next = <int32_t*>self._zeros("t_next", n, np.int32, -1)
        s.work = <int32_t*>self._zeros("work", n + 2, np.int32)
        s.n_streams = int(stream.max()) + 1 if n and stream.max() >= 0 else 1
        s.s_busy = <int8_t*>self._zeros("s_busy", R * s.n_streams, np.int8)
        s.s_head = <int32_t*>self._zeros("s_head", R * s.n_streams, np.int32, -1)
        s.s_tail = <int32_t*>self._zeros("s_tail", R * s.n_streams, np.int32, -1)
        s.tags_free = <int32_t*>self._zeros("tags_free", R, np.int32, int(p["read_tags"]))
        s.e2e_avail = <int64_t*>self._zeros("e2e_avail", <int64_t>R * R, np.int64, int(p["e2e_window_B"]))
        s.e2e_owed = <int64_t*>self._zeros("e2e_owed", <int64_t>R * R, np.int64)
        s.e2e_quantum = max(int(p["e2e_window_B"]) // 4, 1)
        s.an_free = <ps_t*>self._zeros("an_free", C, np.int64)
        s.tasks_left = n
        self._build_transfers(graph)

    def _common_packet_sizes(self, dict p, dict graph, int top=3):
        """Header + payload sizes of the packets the graph's transfers produce, commonest first (at most top):
        full packets of max_payload_B, each transfer's remainder, header-only read requests."""
        kind = np.asarray(graph["kind"], np.int8)
        is_x = kind == T_TRANSFER
        nbytes = np.asarray(graph["nbytes"], np.int64)[is_x]
        load = np.asarray(graph["op"], np.int8)[is_x] == 1
        maxp, hdr, mrrs = int(p["max_payload_B"]), int(p["header_B"]), int(p["mrrs_B"])
        sizes = np.concatenate([[maxp + hdr], nbytes % maxp + hdr, [hdr]])
        counts = np.concatenate([[int((nbytes // maxp).sum())], (nbytes % maxp > 0).astype(np.int64),
                                 [int(((nbytes[load] + mrrs - 1) // mrrs).sum())]])
        uniq, inv = np.unique(sizes, return_inverse=True)
        tot = np.bincount(inv, weights=counts)
        order = np.argsort(-tot, kind="stable")
        return [int(uniq[j]) for j in order[:top] if tot[j] > 0]

    cdef int64_t* _ptr(self, str name):
        return <int64_t*>cnp.PyArray_DATA(self._keep[name])

    def _build_transfers(self, dict graph):
        cdef SimC* s = &self.s
        cdef int32_t t, x, r, q, n_xf, extra
        cdef Py_ssize_t i
        cdef bint load
        kind = self._keep["t_kind"]
        tasks_a = np.flatnonzero(kind == T_TRANSFER).astype(np.int32)
        op_a = np.ascontiguousarray(np.asarray(graph["op"], np.int8)[tasks_a])
        # typed views: the loop below runs once per transfer (~1 M in a decode step), in C
        cdef const int32_t[::1] tasks = tasks_a
        cdef const int8_t[::1] op = op_a
        cdef const int32_t[::1] rank = np.ascontiguousarray(np.asarray(graph["rank"], np.int32)[tasks_a])
        cdef const int32_t[::1] peer = np.ascontiguousarray(np.asarray(graph["peer"], np.int32)[tasks_a])
        cdef const int64_t[::1] nbytes = np.ascontiguousarray(np.asarray(graph["nbytes"], np.int64)[tasks_a])
        n_xf = len(tasks_a) + int((op_a == 1).sum())
        s.n_xf = n_xf
        s.xf = <XferC*>aligned_alloc(64, <size_t>max(n_xf, 1) * sizeof(XferC))    # one record = two cache lines
        if s.xf == NULL:
            raise MemoryError("transfers")
        memset(s.xf, 0, <size_t>max(n_xf, 1) * sizeof(XferC))
        t_xfer = np.full(s.n_tasks, -1, np.int32)
        cdef int32_t[::1] t_xfer_v = t_xfer
        x = 0
        extra = <int32_t>tasks.shape[0]
        for i in range(tasks.shape[0]):
            t = tasks[i]
            r = rank[i]
            q = peer[i]
            load = op[i] == 1
            t_xfer_v[t] = x
            self._init_xfer(x, r, q, nbytes[i], t, 1 if load else 0, 0, extra if load else -1)
            if load:    # the response flow: data from the owner back to the requester
                self._init_xfer(extra, q, r, nbytes[i], -1, 2, 1, x)
                s.xf[x].task = -1
                s.xf[extra].task = t
                extra += 1
            x += 1
        s.t_xfer = <int32_t*>self._arr("t_xfer", t_xfer, np.int32)

    cdef void _init_xfer(self, int32_t x, int32_t src, int32_t dst, int64_t nbytes, int32_t task, int8_t kind,
                         int8_t cls, int32_t partner):
        cdef XferC* xf = &self.s.xf[x]
        xf.total_B = nbytes
        xf.avail_B = 0 if kind == 2 else nbytes
        xf.src = src; xf.dst = dst; xf.task = task; xf.kind = kind; xf.cls = cls; xf.partner = partner
        xf.d_src = src; xf.d_dst = dst; xf.d_kind = kind
        xf.next = -1
        if src < 0 or dst < 0 or src >= self.s.n_ranks or dst >= self.s.n_ranks:
            xf.status = 1            # Unsupported Request: no accelerator there
            xf.path = -1
            return
        xf.path = choose_path(&self.s, src, dst, x) if src != dst else -1
        if src != dst and xf.path < 0:
            xf.status = 1
        if xf.path >= 0:
            xf.grant_ps = self._return_latency(dst, src, x)
            xf.hv0 = self.s.path_hv[self.s.path_ptr[xf.path]]
            xf.at1 = self.s.path_at1[xf.path]
            xf.hops = <int16_t>path_len(&self.s, xf.path)

    cdef ps_t _return_latency(self, int32_t src, int32_t dst, int32_t flow):
        """Zero-load latency of a small message along the route src -> dst (an end-to-end grant)."""
        cdef SimC* s = &self.s
        cdef int32_t p = choose_path(s, src, dst, flow), h, ch, n
        cdef ps_t t = 0
        if p < 0:
            return 0
        n = path_len(s, p)
        for h in range(n):
            ch = path_hop_ch(s, p, h)
            t += s.c[ch].ch_lat + s.c[ch].flit_ps
            if h + 1 < n:
                t += s.node_lat[s.c[ch].ch_dst]
        return t

    def add_fault(self, int kind, int ch, int64_t n, int64_t k=1):
        """Inject a deterministic fault (FAULT_* constants) on channel ch before run()."""
        if self._started:
            raise RuntimeError("faults must be added before run()")
        if not 0 <= ch < self.s.n_ch:
            raise ValueError(f"channel {ch} does not exist (0..{self.s.n_ch - 1})")
        self._faults.append((kind, ch, n, k))

    def _install_faults(self):
        cdef SimC* s = &self.s
        cdef int64_t i
        C = s.n_ch
        rows = sorted((ch, kind, n, k) for kind, ch, n, k in self._faults if kind != FAULT_RETRAIN)
        keys = np.array([ch * 3 + kind for ch, kind, n, k in rows], np.int64)
        ptr = np.searchsorted(keys, np.arange(3 * C + 1), side="left").astype(np.int64)
        for i in range(3 * C):
            s.c[i // 3].f_cur[i % 3] = ptr[i]
            s.c[i // 3].f_end[i % 3] = ptr[i + 1]
            if i % 3 != F_FLIT and ptr[i + 1] > ptr[i]:
                s.c[i // 3].ctrl_faults = 1
        s.f_n = <int64_t*>self._arr("f_n", [r[2] for r in rows], np.int64)
        s.f_k = <int64_t*>self._arr("f_k", [max(r[3], 1) for r in rows], np.int64)
        for kind, ch, n, k in self._faults:
            if kind == FAULT_RETRAIN:
                c_push(&s.heap, n, EV_FORCE_RETRAIN, ch, 0, 0, 0)

    def run(self, int64_t max_events=2**62, int64_t until_ps=2**63 - 1):
        """Process events (nogil) until done, max_events are processed, the next event would fire after until_ps
        (default: no time limit), or the watchdog fires; returns the outcome."""
        cdef int outcome = R_DONE
        cdef int32_t t
        cdef SimC* s = &self.s
        if not self._started:
            self._started = True
            self._install_faults()
            roots = np.flatnonzero(self._keep["t_deps"] == 0).astype(np.int32)   # before any completes
            for t in roots:
                start_task(s, t)
                drain(s)
        with nogil:
            c_run(s, max_events, until_ps, &outcome)
        return outcome

    # ---- results
    @property
    def now_ps(self):
        return self.s.now

    @property
    def events(self):
        return self.s.events

    @property
    def pending_events(self):
        return q_pending(&self.s.heap)

    @property
    def lane_slots(self):
        """Event slots the delay lanes' rings hold now, in all (storage, not a result: see lanes_trim)."""
        return sum(self.s.heap.lane[k].cap for k in range(self.s.heap.n_lanes))

    def route_graph(self):
        """The route graph packets walk (copies): hv[n] = channel << vcl_bits | VC level of node n's hop, next[n] =
        the node after it (-1: last hop), at1[p] = node of path p's second hop (-1: one hop)."""
        cdef int64_t i
        hv = np.empty(self.s.n_hop, np.int32)
        nxt = np.empty(self.s.n_hop, np.int32)
        for i in range(self.s.n_hop):
            hv[i] = self.s.hop[i].hv
            nxt[i] = self.s.hop[i].next
        return dict(hv=hv, next=nxt, at1=self._keep["path_at1"].copy(), vcl_bits=self.s.vcl_bits)

    def counters(self):
        """Per-channel counters as zero-copy int64 views: strided columns of the CntC table, whose base keeps it
        alive (copy them to keep a snapshot); as int64 copies: queue_len and queue_max (32-bit halves of one
        column), acks and updatefc (from the data-link state, where they are counted)."""
        cdef int32_t i
        cdef int64_t[::1] acks = np.zeros(self.s.n_ch, np.int64)
        cdef int64_t[::1] upd = np.zeros(self.s.n_ch, np.int64)
        for i in range(self.s.n_ch):
            acks[i] = self.s.c[i].ack_sent_n - self.s.k[i].naks
            upd[i] = self.s.c[i].upd_sent_n
        k = self._keep["k"][:self.s.n_ch]
        q = CNT_COLS.index("queue_len|queue_max")
        copies = {"queue_len": k.view(np.int32)[:, 2 * q].astype(np.int64),
                  "queue_max": k.view(np.int32)[:, 2 * q + 1].astype(np.int64),
                  "acks": np.asarray(acks), "updatefc": np.asarray(upd)}
        return {name: copies[name] if name in copies else k[:, CNT_COLS.index(name)] for name in COUNTERS}

    def totals(self):
        s = &self.s
        return dict(e2e_holds=s.e2e_holds, arbitrations=s.arbitrations, carved=s.carved, delivered=s.delivered,
                    duplicates=s.dup_delivered, out_of_order=s.ooo_delivered,
                    packets_live=s.pkts_live, tasks_left=s.tasks_left, events=s.events, now_ps=s.now,
                    replay_ring_slots=s.ring_cap)

    def task_times(self):
        return self._keep["t_start"], self._keep["t_end"]

    def link_state(self):
        """Data-link state at this moment, for end-of-run invariant checks (copies)."""
        cdef int32_t i
        V = self.s.nvc
        C = self.s.n_ch
        n = max(C, 1)
        cvt = self._keep["cv"]
        out = dict(
            credits_available=(cvt[:, CV_COLS.index("cr_limit")] - cvt[:, CV_COLS.index("cr_used")]).reshape(C, V),
            credit_pool=self.s.pool_flits,
            replay_count=np.zeros(n, np.int32), buffer_occupancy=cvt[:, CV_COLS.index("occ")].reshape(C, V).copy(),
            expected_seq=np.zeros(n, np.int32), next_seq=np.zeros(n, np.int32), down_until_ps=np.zeros(n, np.int64))
        for i in range(C):
            out["replay_count"][i] = self.s.c[i].r_count
            out["expected_seq"][i] = self.s.c[i].expected
            out["next_seq"][i] = self.s.c[i].next_seq
            out["down_until_ps"][i] = self.s.c[i].down_until
        return out

    def transfers(self):
        """Per transfer: src, dst, bytes total/delivered, status (0 ok, 1 unsupported request), start ps."""
        cdef int32_t i
        cdef XferC* xf
        n = self.s.n_xf
        names = ("src", "dst", "total_B", "delivered_B", "status", "start_ps", "kind", "path")
        table = np.zeros((len(names), n), np.int64)
        csum = np.zeros(n, np.uint64)
        cdef int64_t[:, ::1] t = table
        cdef uint64_t[::1] c = csum
        for i in range(n):                 # C loop: ~1 M transfers in a decode step
            xf = &self.s.xf[i]
            t[0, i] = xf.src; t[1, i] = xf.dst; t[2, i] = xf.total_B; t[3, i] = xf.delivered_B
            t[4, i] = xf.status; t[5, i] = xf.start_ps; t[6, i] = xf.kind; t[7, i] = xf.path
            c[i] = xf.csum
        out = {k: table[j] for j, k in enumerate(names)}
        out["csum"] = csum
        return out

    def stuck_report(self, int limit=10):
        """What is waiting where: channels holding unacknowledged units or queued packets."""
        rows = []
        cdef int32_t ch
        for ch in range(self.s.n_ch):
            if self.s.c[ch].r_count or self.s.k[ch].queue_len:
                rows.append(dict(channel=ch, unacked=self.s.c[ch].r_count, queued=self.s.k[ch].queue_len,
                                 credits=[self.s.cvs[cv(&self.s, ch, v)].cr_limit - self.s.cvs[cv(&self.s, ch, v)].cr_used
                                          for v in range(self.s.nvc)],
                                 down=self.s.c[ch].down_until > self.s.now))
        return rows[:limit]


COUNTERS = ("units", "packets", "tlp_B", "payload_B", "busy_ps", "corrupted", "flits_corrupted", "naks", "acks", "replays",
            "replay_timeouts", "retrains", "credit_stall_ps", "updatefc", "ctrl_lost", "dups_discarded",
            "queue_len", "queue_max", "queue_area", "qlast", "credit_errors")
def line_aligned_zeros(rows, cols):
    """int64[rows, cols] of zeros starting on a 64 B boundary (numpy only promises 16 B): records laid out by cache
    line in types.pxd stay on their lines."""
    buf = np.zeros(rows * cols + 8, np.int64)
    skip = (-buf.ctypes.data % 64) // 8
    return buf[skip:skip + rows * cols].reshape(rows, cols)


# column order of the CntC and CvC records (types.pxd) in their int64 tables
CNT_COLS = ("units", "packets", "tlp_B", "payload_B", "busy_ps", "queue_len|queue_max", "queue_area", "qlast",
            "credit_stall_ps", "corrupted", "flits_corrupted", "naks", "replays", "replay_timeouts", "retrains",
            "ctrl_lost", "dups_discarded", "credit_errors")
CV_COLS = ("cr_used", "cr_limit", "freed", "freed_sent", "occ")
