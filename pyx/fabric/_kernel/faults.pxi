# ================================================================== permanent faults: dead links, lost lanes, reroutes
# What a link or switch that fails for good does to the fabric, and how the fabric manager's new routes take over
# (fabric/faults/failover.py drives it: docs/faults.md). Python calls these between slices of a run, a handful per
# run; the event path pays one compare for them (a dead output in enqueue_packet, a stale packet in on_deliver).
# - A dead channel (ChanC.down_until = INT64_MAX) sends nothing; units and messages in flight on it are lost (its
#   epoch moves on), the units its receiver had not accepted leave its replay ring, the packets in its VOQs and every
#   packet that reaches them later are lost (lose_packet).
# - A lost packet gives back what its source spent on it (a store's granted space, a read request's tag) and marks
#   its flow; at the next reroute every such flow, and every flow whose route is not in the new route set, is rewound
#   (end-to-end go-back-N): it restarts from its last byte delivered in order, on its new route. Its packets still in
#   the fabric are stale: their numbers [x_void, fseq_expect) are voided, and they are dropped where they turn up.
# Contract: SimC.x_void, x_lost, reclaimed, stale_dropped, flows_moved, flows_rewound (types.pxd, the end of SimC).

cdef inline bint is_stale(SimC* s, PacketC* pk) noexcept nogil:
    """pk belongs to a stretch of its flow voided by a rewind (its bytes were sent again since)."""
    return pk.fseq >= s.x_void[pk.xfer] and pk.fseq < s.xf[pk.xfer].fseq_expect

cdef inline bint not_taken(SimC* s, PacketC* pk, XferC* xf) noexcept nogil:
    """At delivery, out of its flow's order: a stale packet (voided by a rewind), or one behind a packet lost on a
    dead channel (the flow's end-to-end receiver takes nothing past the gap; the rewind sends both again)."""
    if pk.fseq < xf.fseq_expect:
        return pk.fseq >= s.x_void[pk.xfer]
    return s.x_lost[pk.xfer] != 0

cdef int give_back(SimC* s, int32_t p) except -1 nogil:
    """Packet p leaves the fabric undelivered: a store's granted space returns to its source after the return
    latency (as a grant), a read request's tag at once; p goes back to the pool."""
    cdef PacketC* pk = &s.pk[p]
    cdef XferC* xf = &s.xf[pk.xfer]
    if xf.kind == 0 and pk.payload_B > 0:
        c_push(&s.heap, s.now + xf.grant_ps, EV_E2E_GRANT, xf.src, xf.dst, pk.payload_B, 0)
    elif xf.kind == 1:
        s.tags_free[xf.src] += 1
        wake_node(s, xf.src)
    s.reclaimed += 1
    pkt_release(s, p)
    return 0

cdef int lose_packet(SimC* s, int32_t p) except -1 nogil:
    """Packet p reached (or sat in) a queue of a dead output: the input buffer it held is freed and it is lost; its
    flow is rewound at the next reroute, unless p was stale already."""
    cdef PacketC* pk = &s.pk[p]
    free_buffer(s, pk.in_ch, pk.vc, pk.flits)
    if not is_stale(s, pk):
        s.x_lost[pk.xfer] = 1
    return give_back(s, p)

cdef int drop_stale(SimC* s, int32_t p) except -1 nogil:
    """A packet its destination does not take (not_taken) reached it (on_deliver, its buffer freed): dropped."""
    s.stale_dropped += 1
    s.last_progress = s.now
    return give_back(s, p)

cdef int faults_alloc(SimC* s) except -1:
    """The per-transfer fault state, at the first permanent fault."""
    cdef int32_t x
    if s.x_void != NULL:
        return 0
    s.x_void = <int32_t*>malloc(<size_t>max(s.n_xf, 1) * sizeof(int32_t))
    s.x_lost = <int8_t*>calloc(<size_t>max(s.n_xf, 1), sizeof(int8_t))
    if s.x_void == NULL or s.x_lost == NULL:
        raise MemoryError("fault state")
    for x in range(s.n_xf):
        s.x_void[x] = 0x7fffffff
    return 0

cdef int kill_channel(SimC* s, int32_t ch) except -1:
    """Channel ch dies now: it sends nothing more, what is in flight on it is lost (epoch), units its receiver did
    not accept leave the replay ring (their credits with them: they never reached the buffer), and the packets in
    its VOQs are lost. Its injection queues keep their transfers until the reroute moves them."""
    cdef ChanC* c = &s.c[ch]
    cdef int32_t j, n_acc, nslots, idx, p, nxt
    cdef int64_t qi
    cdef ReplayC* r
    faults_alloc(s)
    if c.down_until == INT64_MAX:
        return 0
    c.down_until = INT64_MAX
    c.epoch = <int16_t>(c.epoch + 1)
    c.rt_armed = 0
    c.wake_at = -1
    if c.cr_short:
        s.k[ch].credit_stall_ps += s.now - c.stall_since
        c.stall_since = -1
        c.cr_short = 0
    n_acc = 0
    if c.r_count > 0:
        n_acc = (c.expected - s.ring[<int64_t>ch * s.ring_cap + c.r_head].seq) & s.seq_mask
    for j in range(c.r_count):
        if j < n_acc:                      # accepted by the receiver: the packet lives on downstream
            continue
        r = &s.ring[<int64_t>ch * s.ring_cap + ((c.r_head + j) & s.ring_mask)]
        s.cvs[cv(s, ch, s.pk[r.pkt].vc)].cr_used -= r.flits
        if not is_stale(s, &s.pk[r.pkt]):
            s.x_lost[s.pk[r.pkt].xfer] = 1
        give_back(s, r.pkt)
    c.r_head = (c.r_head + c.r_count) & s.ring_mask
    c.r_count = 0
    c.r_sent = 0
    c.r_flits = 0
    c.replay_num = 0
    nslots = s.n_slots[c.ch_src]
    for idx in range(s.nvc * nslots):
        qi = c.q_base + idx
        if idx % nslots == nslots - 1 or s.q[qi].head < 0:     # injection queues hold transfers: kept
            continue
        p = s.q[qi].head
        s.q[qi].head = s.q[qi].tail = -1
        c.q_busy -= 1
        q_unmark(s, ch, idx)
        while p >= 0:
            nxt = s.pk[p].next
            q_account(s, ch, -1)
            lose_packet(s, p)
            p = nxt
    return 0

cdef int revive_channel(SimC* s, int32_t ch) except -1:
    """Dead channel ch comes back (a flapping link): transmitter and receiver resynchronise as a link coming up does
    (the receiver expects the next sequence number, the sender learns every credit freed while it was down)."""
    cdef ChanC* c = &s.c[ch]
    cdef int32_t vc
    cdef int64_t i
    if c.down_until != INT64_MAX:
        return 0
    c.down_until = s.now
    c.expected = c.next_seq
    c.nak_sched = 0
    c.ack_pending = 0
    c.ack_armed = 0
    c.ack_gen += 1
    c.cr_armed = 0
    c.cr_gen += 1
    c.cr_dirty = 0
    for vc in range(s.nvc):
        i = cv(s, ch, vc)
        s.cvs[i].cr_limit = s.cvs[i].freed + s.credit_pool_flits
        s.cvs[i].freed_sent = s.cvs[i].freed
    return try_send(s, ch)

cdef int set_channel_rate(SimC* s, int32_t ch, double ps_per_B) except -1:
    """ch serialises at ps_per_B per wire byte from now on (a link that lost lanes); units on the wire keep theirs.
    Its open flit is padded out at the old rate (the stream's times are offsets at one rate from one origin): the
    next unit starts a new flit, no earlier than that flit's end, so its tail cannot overtake the last unit's (whose
    tail is that flit's end). The Acks and UpdateFCs that cross it leave their fixed-delay lane (its delay was the old
    flit time)."""
    cdef ChanC* c = &s.c[ch]
    if c.flit_pos > 0:                 # flit_open_end at the new rate stays the old end; no unit continues the flit
        c.flit_base = flit_open_end(s, c)
        c.flit_off = -s.flit_B
        c.tx_fin = -1
    c.ps_per_B = ps_per_B
    c.flit_ps = max(<ps_t>(ps_per_B * s.flit_B + 0.5), 1)
    s.c[c.ch_rev].lane_ctrl = -1
    return 0

cdef int unqueue_xfer(SimC* s, int32_t x) except -1 nogil:
    """Take transfer x out of the injection queue of its first hop."""
    cdef XferC* xf = &s.xf[x]
    cdef int32_t ch = hv_ch(s, xf.hv0)
    cdef int32_t nslots = s.n_slots[s.c[ch].ch_src]
    cdef int32_t idx = hv_vc(s, xf.hv0, xf.cls) * nslots + nslots - 1
    cdef int64_t qi = s.c[ch].q_base + idx
    cdef int32_t prev = -1, y = s.q[qi].head
    while y >= 0 and y != x:
        prev = y
        y = s.xf[y].next
    if y < 0:
        return 0
    if prev >= 0:
        s.xf[prev].next = xf.next
    else:
        s.q[qi].head = xf.next
    if s.q[qi].tail == x:
        s.q[qi].tail = prev
    if s.q[qi].head < 0:
        s.c[ch].q_busy -= 1
        q_unmark(s, ch, idx)
    xf.next = -1
    xf.queued = 0
    return 0

cdef int rewind_xfer(SimC* s, int32_t x) except -1 nogil:
    """End-to-end go-back-N of transfer x onto its pair's route in the current tables: its packets in the fabric
    become stale, it restarts from its last byte delivered in order, and rejoins an injection queue if it had been
    issued."""
    cdef XferC* xf = &s.xf[x]
    cdef bint active = xf.queued or xf.carved_B > 0
    cdef bint down_leg = xf.kind == 3 and xf.h0 > 0
    cdef int32_t p
    if xf.queued:
        unqueue_xfer(s, x)
    if xf.fseq_next > xf.fseq_expect:
        s.flows_rewound += 1
        if s.x_void[x] > xf.fseq_expect:
            s.x_void[x] = xf.fseq_expect
        xf.fseq_expect = xf.fseq_next
    xf.carved_B = xf.delivered_B
    p = choose_path(s, xf.src, xf.dst, x)
    if p < 0:
        with gil:
            raise RuntimeError(f"no route for transfer {x} ({xf.src} -> {xf.dst}) in the new tables")
    xf.path = p
    xf.hv0 = s.path_hv[s.path_ptr[p]]
    xf.at1 = s.path_at1[p]
    xf.hops = <int16_t>path_len(s, p)
    xf.h0 = 0
    if xf.kind == 3:
        switch_leg(s, xf, 3 if down_leg else 2)
    xf.grant_ps = return_latency(s, xf.dst, xf.src, x)
    s.flows_moved += 1
    if active and xf.carved_B < xf.avail_B:
        enqueue_xfer(s, x)
    return 0

cdef int install_routes(SimC* s, dict keep, object pair_ptr, object path_ptr, object path_ch, object path_vcl,
                        object keep_path) except -1:
    """The fabric manager's new route set (pair_ptr, path_ptr, path_ch, path_vcl as fabric.routing makes them) is
    appended to the paths and the route graph (stale packets still walk the old nodes); every pair's candidates are
    the new ones from now on. Transfers not done whose path is not kept (keep_path[p] false) or that lost a packet
    are rewound onto the new routes, except those of a pair the set leaves without a path (a rank out of service:
    its packets are lost where its route is dead); every channel then arbitrates once."""
    cdef int64_t n_old, H_old, n_new, i, old_n, pair
    cdef int32_t x, ch
    cdef HopC* old_hop
    cdef HopC* merged
    cdef int32_t* at1
    cdef cnp.ndarray pp, hv, at1_a
    cdef const uint8_t[::1] kp = np.ascontiguousarray(keep_path, np.uint8)
    faults_alloc(s)
    old_pp = np.asarray(keep["path_ptr"], np.int64)
    n_old = old_pp.size - 1
    H_old = int(old_pp[n_old])
    if kp.shape[0] != n_old:
        raise ValueError(f"keep_path has {kp.shape[0]} entries for {n_old} paths")
    vcl = np.asarray(path_vcl, np.int32)
    if vcl.size and (int(vcl.min()) < 0 or int(vcl.max()) >= s.levels):
        raise ValueError(f"new routes use VC levels the engine was not built with ({s.levels})")
    new_pp = np.asarray(path_ptr, np.int64)
    n_new = new_pp.size - 1
    pp = np.ascontiguousarray(np.concatenate([old_pp, new_pp[1:] + H_old]))
    hv = np.ascontiguousarray(np.concatenate([np.asarray(keep["path_hv"], np.int32)[:H_old],
                                              (np.asarray(path_ch, np.int32) << s.vcl_bits) | vcl]), np.int32)
    if hv.size == 0:
        hv = np.zeros(1, np.int32)
    at1_a = np.ascontiguousarray(np.concatenate([np.asarray(keep["path_at1"], np.int32),
                                                 np.full(n_new, -1, np.int32)]))
    keep["path_ptr"], keep["path_hv"], keep["path_at1"] = pp, hv, at1_a
    keep["pair_ptr"] = np.ascontiguousarray(np.asarray(pair_ptr, np.int64) + n_old)
    s.path_hv = <int32_t*>cnp.PyArray_DATA(hv)
    s.pair_ptr = <int64_t*>cnp.PyArray_DATA(keep["pair_ptr"])
    at1 = <int32_t*>cnp.PyArray_DATA(at1_a)
    s.path_at1 = at1
    old_hop, old_n = s.hop, s.n_hop
    s.path_ptr = (<int64_t*>cnp.PyArray_DATA(pp)) + n_old          # the new paths alone, for the graph's builder
    try:
        build_route_graph(s, n_new, at1 + n_old)
    finally:
        s.path_ptr = <int64_t*>cnp.PyArray_DATA(pp)
    merged = <HopC*>malloc(<size_t>max(old_n + s.n_hop, 1) * sizeof(HopC))
    if merged == NULL:
        raise MemoryError("route graph")
    memcpy(merged, old_hop, <size_t>old_n * sizeof(HopC))
    for i in range(s.n_hop):
        merged[old_n + i].hv = s.hop[i].hv
        merged[old_n + i].next = s.hop[i].next + <int32_t>old_n if s.hop[i].next >= 0 else -1
    for i in range(n_old, n_old + n_new):
        if at1[i] >= 0:
            at1[i] += <int32_t>old_n
    free(old_hop)
    free(s.hop)
    s.hop = merged
    s.n_hop = old_n + s.n_hop
    for x in range(s.n_xf):
        if s.xf[x].path < 0 or s.xf[x].status or s.xf[x].delivered_B >= s.xf[x].total_B:
            s.x_lost[x] = 0
            continue
        if kp[s.xf[x].path] and not s.x_lost[x]:
            continue
        pair = <int64_t>s.xf[x].src * s.n_ranks + s.xf[x].dst
        if s.pair_ptr[pair + 1] == s.pair_ptr[pair]:
            continue               # a rank taken out of service (its work migrates: faults.migration): left as is
        s.x_lost[x] = 0
        rewind_xfer(s, x)
    for ch in range(s.n_ch):
        try_send(s, ch)
    return 0
