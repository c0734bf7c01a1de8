# ================================================================== the event loop
# Takes events in (time, order) order and hands each to its room; prefetches what the next few events will touch.
# Runs without the GIL until the queue drains, a budget is spent or the watchdog fires. Contract: SimC, EventC.
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
    """Take events in (time, order) order and hand each to the room that models it, until none is left (R_DONE),
    this call's event budget or time limit is reached (R_PAUSED) or the watchdog fires (R_STUCK)."""
    cdef EventC e
    cdef int64_t budget_end = s.events + max_events
    cdef bint bounded = until_ps < INT64_MAX             # a time limit was given (else skip its check per event)
    cdef int typ
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
        if e.time >= s.next_sample:             # sample.pxi (off: next_sample = INT64_MAX)
            take_samples(s, e.time)
        s.now = e.time
        s.events += 1
        typ = ev_type(&e)
        if typ == EV_PKT_ARRIVE:                # datalink.pxi
            on_arrive(s, &e)
        elif typ == EV_TX_DONE:                 # datalink.pxi
            on_tx_done(s, e.ch)
        elif typ == EV_CTRL_ARRIVE:             # datalink.pxi
            on_ctrl(s, &e)
        elif typ == EV_WAKE:                    # switch.pxi
            on_wake(s, e.ch)
        elif typ == EV_DELIVER:                 # endpoint.pxi
            on_deliver(s, &e)
        elif typ == EV_TASK_DONE:               # executor.pxi
            complete_task(s, e.x)
        elif typ == EV_AN_HOP:                  # executor.pxi (analytic engine)
            analytic_hop(s, e.x, e.ch, e.y, ev_flag(&e))
        elif typ == EV_E2E_GRANT:               # endpoint.pxi
            on_grant(s, &e)
        elif typ == EV_XFER_INJECT:             # endpoint.pxi
            on_inject(s, e.x)
        elif typ == EV_ACK_TIMER:               # datalink.pxi, and the rest
            on_ack_timer(s, &e)
        elif typ == EV_REPLAY_TIMER:
            on_replay_timer(s, e.ch)
        elif typ == EV_CREDIT_TIMER:
            on_credit_timer(s, &e)
        elif typ == EV_REFRESH:
            on_refresh(s, e.ch)
        elif typ == EV_RETRAIN_DONE:
            on_retrain_done(s, e.ch)
        elif typ == EV_FORCE_RETRAIN:
            retrain(s, e.ch)
    outcome[0] = R_DONE
    return 0
