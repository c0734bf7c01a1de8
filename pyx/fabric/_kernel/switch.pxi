# ================================================================== switches: virtual output queues and arbitration
# Each output channel has a queue per (VC, input slot) and an injection queue at endpoints (one bit per queue in
# a bitmap); an idle output serves them round robin (or in fixed order), skipping heads still in the switch
# pipeline or short of credits. Contract: QueueC, SimC.q/q_bits/n_slots, ChanC.q_base/qb_base/q_busy/rr/wake_at,
# PacketC.ready_ps, CntC queue counters.
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

cdef inline void q_account(SimC* s, int32_t ch, int32_t delta) noexcept nogil:
    s.k[ch].queue_area += s.k[ch].queue_len * (s.now - s.k[ch].qlast)
    s.k[ch].qlast = s.now
    s.k[ch].queue_len += delta
    if delta > 0 and s.k[ch].queue_len > s.k[ch].queue_max:
        s.k[ch].queue_max = s.k[ch].queue_len

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

cdef inline int try_send_if_unsettled(SimC* s, int32_t ch) except -1 nogil:
    """try_send after an event that made nothing sendable on ch (a credit return with no head short of credits, an
    Ack that relieved no limit, a grant that released no store): a third of all arbitrations at 1024 ranks."""
    if s.c[ch].tx_busy or s.c[ch].down_until > s.now or settled(s, ch):
        return 0
    return arbitrate(s, ch)

cdef int arbitrate(SimC* s, int32_t ch) except -1 nogil:
    """Put the next unit on idle channel ch: pending replays first, then round robin over its queues. A VOQ offers
    its head packet once it is out of the switch pipeline, an injection queue a packet carved from its head transfer
    (endpoint.pxi: carve_size, carve); either leaves only if its VC's credits and the replay buffer can take it."""
    cdef int32_t nslots, nq, k, idx, vc, slot, p, flits, payload, covers, seen
    cdef bint inject                      # the queue is an injection queue (it holds transfers)
    cdef int64_t qi, c
    cdef bint credit_blocked = False
    cdef ps_t next_ready = INT64_MAX
    cdef ReplayC* r
    cdef PacketC* pk
    cdef uint64_t* bits
    s.arbitrations += 1
    if s.c[ch].r_sent < s.c[ch].r_count:                                   # go-back-N replay in progress
        r = &s.ring[<int64_t>ch * s.ring_cap + ((s.c[ch].r_head + s.c[ch].r_sent) & s.ring_mask)]
        s.c[ch].r_sent += 1
        return send_unit(s, ch, r, 0)
    if s.c[ch].r_count >= s.window or s.c[ch].q_busy == 0:
        return 0
    nslots = s.n_slots[s.c[ch].ch_src]
    nq = s.nvc * nslots
    seen = 0
    k = s.c[ch].rr + 1                      # next bit to look at: rr in [-1, nq), so k in [0, nq]
    if k >= nq:
        k -= nq
    bits = &s.q_bits[s.c[ch].qb_base]
    s.c[ch].e2e_held = 0
    while seen < s.c[ch].q_busy:            # the non-empty queues in the order (rr + 1 + j) % nq, j = 0 .. nq-1,
        idx = next_bit(bits, k, nq)         # as a scan would visit them
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
        inject = slot == nslots - 1
        if inject:                                                      # injection: carve from a transfer
            payload = carve_size(s, ch, &s.xf[s.q[qi].head], &covers)
            if payload < 0:                                             # it waits for a read tag or a grant
                continue
            flits = pkt_flits(s, payload + s.hdr_B)
        else:                                                           # a packet waiting in a VOQ
            pk = &s.pk[s.q[qi].head]
            if pk.ready_ps > s.now:                                     # still in the switch pipeline
                if pk.ready_ps < next_ready:
                    next_ready = pk.ready_ps
                continue
            flits = pk.flits
            payload = covers = 0                                        # (nothing to carve)
        if s.cvs[c].cr_limit - s.cvs[c].cr_used < flits:
            credit_blocked = True
            continue
        if s.c[ch].r_flits + flits > s.replay_cap_flits:
            return 0
        if inject:
            p = carve(s, ch, qi, idx, payload, covers, flits)
        else:
            p = voq_pop(s, ch, qi, idx)
        if not s.fixed_priority:
            s.c[ch].rr = idx
        return send_packet(s, ch, p, vc, c, flits)
    if credit_blocked and s.c[ch].stall_since < 0:
        s.c[ch].stall_since = s.now
        s.c[ch].cr_short = 1
    if next_ready < INT64_MAX and not (s.now < s.c[ch].wake_at <= next_ready):
        s.c[ch].wake_at = next_ready
        c_push(&s.heap, next_ready, EV_WAKE, ch, 0, 0, 0)
    return 0

cdef int32_t voq_pop(SimC* s, int32_t ch, int64_t qi, int32_t idx) noexcept nogil:
    """Take the packet at the head of VOQ qi (queue idx of ch) to send it on ch; the input buffer it holds is freed
    when it has been sent (EV_TX_DONE)."""
    cdef int32_t p = s.q[qi].head
    cdef PacketC* pk = &s.pk[p]
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
    s.c[ch].tx_free_flits = pk.flits
    s.k[ch].payload_B += pk.payload_B
    return p

cdef int enqueue_packet(SimC* s, int32_t p) except -1 nogil:
    """Queue a packet at its output now; it becomes eligible when it leaves the switch pipeline (ready_ps), and
    the output is woken then if nothing else wakes it (no event per packet for the pipeline)."""
    cdef PacketC* pk = &s.pk[p]
    cdef int32_t hv = s.hop[pk.hop_at].hv
    cdef int32_t out = hv_ch(s, hv)
    cdef int32_t vc = hv_vc(s, hv, pk.cls)
    cdef int32_t idx = vc * s.n_slots[s.c[out].ch_src] + s.c[pk.in_ch].ch_slot
    cdef int64_t qi = s.c[out].q_base + idx
    if s.c[out].down_until == INT64_MAX:      # a dead output (faults.pxi) takes nothing: the packet is lost here
        return lose_packet(s, p)
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

cdef int wake_node(SimC* s, int32_t node) except -1 nogil:
    """Every output of node may send again (read tags or grants came back)."""
    cdef int64_t i
    for i in range(s.node_out_ptr[node], s.node_out_ptr[node + 1]):
        try_send(s, s.node_out[i])
    return 0

cdef int on_wake(SimC* s, int32_t ch) except -1 nogil:
    """A queue head of ch leaves the switch pipeline (EV_WAKE): arbitrate, unless a later wake-up replaced it."""
    if s.c[ch].wake_at == s.now:
        s.c[ch].wake_at = -1
        return try_send(s, ch)
    return 0
