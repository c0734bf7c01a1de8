# ================================================================== event queue: 4-ary heap, delay lanes, winner tree
# When things happen: every event of the model waits here until it fires, ordered by (time, order), order a
# per-engine sequence number, so ties are deterministic. The rooms create events (c_push, c_push_lane) and the loop
# takes them (q_first, q_take). Contract: EventC, EventType, LaneC, HeapC (types.pxd).
#
# ------------------------------------------------------------------ the heap, ordered by (time, order)
# A 4-ary implicit heap of 32-byte events: half the levels of a binary heap. The array is placed so that the four
# children of any node (4i+1 .. 4i+4) fill exactly two cache lines. (time, order) is a total order (order is
# unique), so the pop sequence is exactly that of any other correct priority queue: the heap's shape never shows in
# the results.
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


# ------------------------------------------------------------------ delay lanes: FIFOs beside the heap
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


# ------------------------------------------------------------------ the queue as one: heap and lanes
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
