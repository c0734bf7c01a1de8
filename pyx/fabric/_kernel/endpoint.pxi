# ================================================================== endpoints: transaction layer
# What endpoints do with transfers: carve them into packets (stores: max_payload_B data packets; loads: read
# requests of up to mrrs_B, limited by read tags), hold stores until their destination grants receive space
# (end-to-end window), deliver packets into memory (order check, checksum), answer read requests with
# completions, and complete transfers. Packets come from a pool here and go back to it at delivery.
# Addressed transfers are translated at issue by the ingress port of the issuing rank: a lookup in its translation
# cache, on a miss a walk of its host domain's shadow-window table (window_find, translate).
# Contract: XferC, PacketC and the pool (SimC.pk, pk_free), SimC.tags_free and e2e_*, ChanC.e2e_held, SimC's
# address translation block (x_addr, w_*, tc_*, xl_*).
cdef int32_t pkt_alloc(SimC* s) except -1 nogil:
    """A packet from the pool's free list; the pool doubles (moving every packet) when none is free."""
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

cdef void unsettle_node(SimC* s, int32_t node) noexcept nogil:
    """A pair's granted window fell below one packet: a store of that pair at the head of any of node's injection
    queues may be held now, and an arbitration would count it (e2e_holds); none of node's ports is settled until
    its next full scan says so."""
    cdef int64_t i
    for i in range(s.node_out_ptr[node], s.node_out_ptr[node + 1]):
        s.c[s.node_out[i]].e2e_held = 1

cdef int32_t carve_size(SimC* s, int32_t ch, XferC* xf, int32_t* covers) noexcept nogil:
    """Payload bytes of the next packet to carve from transfer xf, at the head of an injection queue of ch (0 for a
    read request, which asks for *covers bytes), or -1 while it has to wait: a load for a free read tag, a store
    for receive space its destination has granted (counted in e2e_holds; ch is not settled then)."""
    cdef int32_t payload
    if xf.kind == 1:
        if s.tags_free[xf.src] <= 0:
            return -1
        covers[0] = <int32_t>min(<int64_t>s.mrrs_B, xf.avail_B - xf.carved_B)
        return 0
    covers[0] = 0
    payload = <int32_t>min(<int64_t>s.maxp_B, xf.avail_B - xf.carved_B)
    # preventive flow control: a store leaves only into space its destination has granted
    # (completions land in space the requester reserved with its read tag)
    if xf.kind == 0 and s.e2e_avail[<int64_t>xf.src * s.n_ranks + xf.dst] < payload:
        s.e2e_holds += 1
        s.c[ch].e2e_held = 1
        return -1
    return payload

cdef int32_t carve(SimC* s, int32_t ch, int64_t qi, int32_t idx, int32_t payload, int32_t covers,
                   int32_t flits) except -1 nogil:
    """Carve the next packet (sizes from carve_size) from the transfer at the head of injection queue qi (queue idx
    of ch), to send it on ch: the transfer moves to the queue's tail, or leaves it once all its bytes are carved.
    Returns the packet."""
    cdef int32_t x = s.q[qi].head
    cdef XferC* xf = &s.xf[x]
    cdef int32_t p
    cdef PacketC* pk
    p = pkt_alloc(s)
    pk = &s.pk[p]
    pk.xfer = x; pk.fseq = xf.fseq_next; pk.payload_B = payload; pk.covers_B = covers
    pk.tlp_B = payload + s.hdr_B; pk.flits = flits; pk.in_ch = -1
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
                unsettle_node(s, s.c[ch].ch_src)    # a store of this pair may now be held at any of its ports
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
    return p

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

cdef int finish_xfer(SimC* s, int32_t x) except -1 nogil:
    """All bytes of transfer x are in: its task completes complete_ps later."""
    cdef int32_t t = s.xf[x].task
    if t >= 0:
        c_push_lane(&s.heap, s.ln_complete, s.now + s.complete_ps, EV_TASK_DONE, -1, t, 0, 0)
    return 0

cdef int on_deliver(SimC* s, EventC* e) except -1 nogil:
    """The tail of packet e.x is at its destination (EV_DELIVER, e.ch its last channel): its buffer slots are freed,
    its order checked; data lands in memory (checksum) and its space is granted back in quanta, a read request
    makes room for completions, completions free read tags; the last byte completes the transfer."""
    cdef int32_t p = e.x
    cdef PacketC* pk = &s.pk[p]
    cdef XferC* xf = &s.xf[pk.xfer]
    cdef XferC* rx
    cdef int32_t done
    cdef int64_t i
    free_buffer(s, e.ch, pk.vc, pk.flits)
    if pk.fseq != xf.fseq_expect and s.x_void != NULL and not_taken(s, pk, xf):
        return drop_stale(s, p)            # stale, or past a gap a dead channel made (faults.pxi)
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
        if xf.delivered_B == xf.total_B:       # every request is in: only the response flow is read from now
            retire_xfer(s, pk.xfer)
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
            retire_xfer(s, pk.xfer)
    pkt_release(s, p)
    return 0

cdef int on_grant(SimC* s, EventC* e) except -1 nogil:
    """Receive space (e.y bytes) freed at rank e.x is granted back to its source e.ch (EV_E2E_GRANT)."""
    cdef int64_t i = <int64_t>e.ch * s.n_ranks + e.x
    cdef int64_t j
    cdef bint held = s.e2e_avail[i] < s.maxp_B    # a store of this pair may have been held (else none could be)
    s.e2e_avail[i] += e.y
    if held:
        return wake_node(s, e.ch)
    for j in range(s.node_out_ptr[e.ch], s.node_out_ptr[e.ch + 1]):
        try_send_if_unsettled(s, s.node_out[j])
    return 0

cdef int on_inject(SimC* s, int32_t x) except -1 nogil:
    """Transfer x is issued at its source port (EV_XFER_INJECT): it joins the injection queue of its first hop."""
    cdef XferC* xf = &s.xf[x]
    xf.start_ps = s.now
    if xf.path < 0:
        return 0
    return enqueue_xfer(s, x)


cdef int32_t window_find(SimC* s, int32_t dom, int64_t addr, int64_t nbytes, int64_t* gaddr) noexcept nogil:
    """The window of host domain dom's shadow-window table that wholly holds [addr, addr + nbytes) (a binary
    search over its sorted bases), *gaddr the global address addr translates to; -1 when none does (an
    Unsupported Request), as fabric.address.AddressMap.translate."""
    cdef int64_t lo, hi, mid, first
    if dom < 0 or dom >= s.n_dom or nbytes < 1:
        return -1
    first = s.w_ptr[dom]
    lo = first
    hi = s.w_ptr[dom + 1]
    while lo < hi:                              # lo: the first window whose base is above addr
        mid = (lo + hi) >> 1
        if s.w_base[mid] <= addr:
            lo = mid + 1
        else:
            hi = mid
    lo -= 1
    if lo < first or addr - s.w_base[lo] > s.w_size[lo] - nbytes:     # no overflow near 2^63
        return -1
    gaddr[0] = s.w_target[lo] + (addr - s.w_base[lo])
    return <int32_t>lo

cdef ps_t translate(SimC* s, int32_t x, int32_t src, bint ok) noexcept nogil:
    """The ingress port of transfer x's issuer (rank src) translates its address (once per transfer, the page of its
    first byte): a hit in the port's set-associative cache costs xlate_ps, a miss also the walk of the domain's
    window table (xmiss_ps) and caches the page (LRU way of its set; an Unsupported Request, not ok, caches
    nothing). Returns the cost; counts translations (tc_clock) and misses."""
    cdef int64_t page = s.x_addr[x] >> s.page_shift, base, i, victim
    s.tc_clock += 1
    if s.tc_sets > 0:
        base = (<int64_t>src * s.tc_sets
                + <int64_t>(c_mix(<uint64_t>page) & <uint64_t>(s.tc_sets - 1))) * s.tc_ways
        victim = base
        for i in range(base, base + s.tc_ways):
            if s.tc_tag[i] == page:
                s.tc_use[i] = s.tc_clock
                return s.xlate_ps
            if s.tc_use[i] < s.tc_use[victim]:
                victim = i
        if ok:
            s.tc_tag[victim] = page
            s.tc_use[victim] = s.tc_clock
    s.xl_miss += 1
    return s.xlate_ps + s.xmiss_ps
