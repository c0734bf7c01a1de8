# ================================================================== data-link layer: sequence, replay, Ack/Nak, credits
# Each channel is a PCIe-like data link: the transmitter numbers units, keeps them in a replay ring until Acked and
# replays go-back-N on a Nak or timeout (a retrain after replay_limit); the receiver accepts only the expected
# sequence number, Acks by count and timer, and returns freed buffer space as cumulative UpdateFC credits. Control
# messages ride the reverse channel. Contract: ChanC lines 1, 2 and 4, ReplayC, CvC, CntC (types.pxd).
# ------------------------------------------------------------------ replay buffer
cdef inline int64_t cv(SimC* s, int32_t ch, int32_t vc) noexcept nogil:
    """Index of the credit record (CvC) of VC vc of channel ch."""
    return <int64_t>ch * s.nvc + vc

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


# ------------------------------------------------------------------ control messages (receiver side)
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
    if s.ctrl_B:
        ctrl_wire(s, rev)
    if lost:
        s.k[ch].ctrl_lost += 1
        return 0
    delay = s.heap.lane[k].delay if k >= 0 else s.c[rev].flit_ps + s.c[rev].ch_lat    # the same value
    c_push_lane(&s.heap, k, s.now + delay, EV_CTRL_ARRIVE, ch, kind | (vc << 8), value, s.c[ch].epoch)
    return 0

cdef inline void ctrl_wire(SimC* s, int32_t rev) noexcept nogil:
    """A control message of link.control_wire_bytes takes wire time on rev: behind the unit rev is sending (owed:
    they go before its next unit, or when it is free), else now (phy.pxi ctrl_bytes). Its own delay stays the
    lane's (one flit + the PHY/wire latency): it does not queue behind the unit."""
    if s.c[rev].tx_busy:
        s.c[rev].ctrl_owed_B += s.ctrl_B
    else:
        ctrl_bytes(s, rev, s.ctrl_B)

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


# ------------------------------------------------------------------ transmitter
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
    if s.c[ch].down_until == INT64_MAX:    # a dead link (faults.pxi) does not come back by retraining
        return 0
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
    """Serialise one unit on ch (framed into its flits: phy.pxi frame_unit) and schedule its arrival (head) at the
    receiver."""
    cdef ps_t fin, head, tail
    cdef bint bad = frame_unit(s, ch, r.tlp_B, tail_in, &fin, &head, &tail)
    if s.c[ch].cr_short:                 # a credit stall ends when the output sends anything (replays included)
        s.k[ch].credit_stall_ps += s.now - s.c[ch].stall_since
        s.c[ch].stall_since = -1
        s.c[ch].cr_short = 0
    s.c[ch].tx_busy = 1
    s.k[ch].busy_ps += fin - s.now
    s.k[ch].units += 1
    s.k[ch].tlp_B += r.tlp_B
    head += s.c[ch].ch_lat
    s.c[ch].lane_txd = <int8_t>lane_pick(&s.heap, s.c[ch].lane_txd, fin - s.now)
    c_push_lane(&s.heap, s.c[ch].lane_txd, fin, EV_TX_DONE, ch, 0, 0, 0)
    s.c[ch].lane_arr = <int8_t>lane_pick(&s.heap, s.c[ch].lane_arr, head - s.now)
    c_push_lane(&s.heap, s.c[ch].lane_arr, head, EV_PKT_ARRIVE, ch, r.pkt,
                (<int64_t>r.seq) | ((<int64_t>bad) << 32) | ((tail + s.c[ch].ch_lat - head) << 33), s.c[ch].epoch)
    if not s.c[ch].rt_armed:
        arm_replay_timer(s, ch)
    return 0

cdef inline int try_send(SimC* s, int32_t ch) except -1 nogil:
    """Put the next unit on ch if it is idle. A third of the calls find it busy: they return without a call."""
    if s.c[ch].tx_busy or s.c[ch].down_until > s.now:
        return 0
    return arbitrate(s, ch)

cdef int send_packet(SimC* s, int32_t ch, int32_t p, int32_t vc, int64_t c, int32_t flits) except -1 nogil:
    """New packet p leaves on ch over VC vc: it spends its flits of credit (record c = cv(s, ch, vc)), takes the next
    sequence number and a slot of the replay ring, and goes on the wire."""
    cdef PacketC* pk = &s.pk[p]
    cdef ReplayC* r
    cdef int32_t i
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

cdef int on_ctrl(SimC* s, EventC* e) except -1 nogil:
    """An Ack/Nak or UpdateFC about ch reaches its transmitter (EV_CTRL_ARRIVE; lost if the link retrained since):
    credits grow, acknowledged units leave the replay ring, a Nak starts a replay, and ch may send again."""
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
        lim = e.y + s.credit_pool_flits
        if lim > s.cvs[cv(s, ch, vc)].cr_limit:
            s.cvs[cv(s, ch, vc)].cr_limit = lim
        if s.cvs[cv(s, ch, vc)].cr_limit - s.cvs[cv(s, ch, vc)].cr_used > s.credit_pool_flits:
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


# ------------------------------------------------------------------ receiver
cdef int on_arrive(SimC* s, EventC* e) except -1 nogil:
    """The head of a unit reaches the receiver of ch (EV_PKT_ARRIVE): a corrupted or out-of-sequence unit gets a Nak,
    a duplicate another Ack; an accepted packet takes its receive buffer slots and goes on to the queue of its next
    hop (switch.pxi) or, at its destination, to delivery when its tail is in (endpoint.pxi)."""
    cdef int32_t ch = e.ch
    cdef int32_t seq = <int32_t>(e.y & <int64_t>0xffffffff)
    cdef int64_t hit = e.y & (<int64_t>1 << 32)       # the unit's bytes were hit on the wire (phy_unit) ...
    cdef bint bad = hit != 0                          # ... which its CRC tells the receiver
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
    pk.offset_B |= hit << (PK_DAMAGED_BIT - 32)     # the bytes kept are those that came: a corrupted unit let in
    s.cvs[cv(s, ch, pk.vc)].occ += pk.flits          # changes its transfer's checksum at delivery (tests catch it)
    if s.cvs[cv(s, ch, pk.vc)].occ > s.credit_pool_flits:
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


# ------------------------------------------------------------------ link events: transmitter free, timers, retrain
cdef int on_tx_done(SimC* s, int32_t ch) except -1 nogil:
    """ch has serialised its unit (EV_TX_DONE): the input buffer the packet held is freed, the next unit may go."""
    s.c[ch].tx_busy = 0
    if s.c[ch].tx_free_ch >= 0:
        free_buffer(s, s.c[ch].tx_free_ch, s.c[ch].tx_free_vc, s.c[ch].tx_free_flits)
        s.c[ch].tx_free_ch = -1
    try_send(s, ch)
    if s.c[ch].ctrl_owed_B and not s.c[ch].tx_busy:      # no unit follows: the control bytes owed go now
        ctrl_bytes(s, ch, s.c[ch].ctrl_owed_B)
        s.c[ch].ctrl_owed_B = 0
    return 0

cdef int on_ack_timer(SimC* s, EventC* e) except -1 nogil:
    """The Ack coalescing timer of the receiver of e.ch expired: acknowledge what is pending, unless an Ack went out
    since it was armed (a stale generation)."""
    cdef int32_t ch = e.ch
    if s.c[ch].ack_armed and e.y == s.c[ch].ack_gen:
        s.c[ch].ack_armed = 0
        if s.c[ch].ack_pending > 0:
            send_ack(s, ch)
    return 0

cdef int on_replay_timer(SimC* s, int32_t ch) except -1 nogil:
    """The replay timer of ch fires: re-armed since (the pending event moves to the new deadline), or it expired
    and the unacknowledged units go again."""
    s.c[ch].rt_pending = 0
    if s.c[ch].rt_armed and s.now < s.c[ch].rt_deadline:
        s.c[ch].rt_pending = 1
        c_push(&s.heap, s.c[ch].rt_deadline, EV_REPLAY_TIMER, ch, 0, 0, 0)
    elif s.c[ch].rt_armed:
        s.c[ch].rt_armed = 0
        if s.c[ch].r_count > 0 and s.c[ch].down_until <= s.now:
            start_replay(s, ch, True)
    return 0

cdef int on_credit_timer(SimC* s, EventC* e) except -1 nogil:
    """The UpdateFC coalescing timer of the receiver of e.ch expired: announce the credits freed since."""
    cdef int32_t ch = e.ch
    cdef uint64_t dirty
    if s.c[ch].cr_armed and e.y == s.c[ch].cr_gen:
        s.c[ch].cr_armed = 0
        dirty = s.c[ch].cr_dirty                # the VCs with freed != freed_sent, in VC order: their
        while dirty:                            # records only (one line, not all nvc of them)
            send_update(s, ch, __builtin_ctzll(dirty))
            dirty &= dirty - 1
    return 0

cdef int on_refresh(SimC* s, int32_t ch) except -1 nogil:
    """Periodic UpdateFC; skipped (and not re-armed) when it could not change the sender's view."""
    cdef int vc
    s.c[ch].refresh_armed = 0
    if s.c[ch].down_until == INT64_MAX:    # no UpdateFC crosses a dead link; its revival resynchronises the credits
        return 0
    for vc in range(s.nvc):
        if s.cvs[cv(s, ch, vc)].cr_limit < s.cvs[cv(s, ch, vc)].freed + s.credit_pool_flits:
            send_update(s, ch, vc)
    return 0

cdef int on_retrain_done(SimC* s, int32_t ch) except -1 nogil:
    """The link of ch is up again: each direction resumes its replay and sending."""
    cdef int32_t c
    cdef int k
    for k in range(2):
        c = ch if k == 0 else s.c[ch].ch_rev
        if s.c[c].down_until <= s.now:
            if s.c[c].r_count > 0:
                arm_replay_timer(s, c)
            try_send(s, c)
    return 0
