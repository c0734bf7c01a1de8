# ================================================================== task-graph executor and analytic engine
# The workload: tasks start when their dependencies complete; compute and reduce tasks occupy their (rank, stream)
# FIFO, transfers are issued to the endpoints (or timed by the analytic engine: every hop serves transfers in head
# order, one event per hop), joins are free. Contract: SimC's task arrays (t_*, s_*, work), XferC.task, SimC.an (AnC),
# ax (AnXC), t_bytes.
cdef inline ps_t framed_ser(SimC* s, int64_t tlp, double ps_per_B) noexcept nogil:
    """Serialisation of tlp header + payload bytes sent back to back in whole flits, the last one padded (its CRC
    comes at the flit's end): fabric.phy.path_terms."""
    return <ps_t>(padded_wire_B(tlp, s.flitpay_B, s.flit_B) * ps_per_B + 0.5)

cdef ps_t analytic_oneway(SimC* s, int32_t p, int64_t nbytes, int32_t npk, ps_t start, int32_t h0=0,
                          int32_t h1=-1) noexcept nogil:
    """Zero-load time over hops h0..h1-1 of route p (default all): latencies + the slowest hop's serialisation +
    a flit per later hop (each checks the first flit's CRC before it goes on); occupies nothing (a load's
    header-only read requests)."""
    cdef int32_t h, n = path_len(s, p) if h1 < 0 else h1, ch
    cdef double worst = 0.0
    cdef ps_t lat = 0
    for h in range(h0, n):
        ch = path_hop_ch(s, p, h)
        lat += s.c[ch].ch_lat
        if h + 1 < n:
            lat += s.node_lat[s.c[ch].ch_dst] + s.c[ch].flit_ps
        if s.c[ch].ps_per_B > worst:
            worst = s.c[ch].ps_per_B
    return start + lat + framed_ser(s, nbytes + <int64_t>npk * s.hdr_B, worst)

cdef inline ps_t run_time(SimC* s, AnC* a, int64_t run_B, bint to_flit_end) noexcept nogil:
    """Time, from the start of channel a's current run, at which its run_B-th stream byte is out (or, to_flit_end,
    the end of the flit that holds it, when that flit's CRC is in)."""
    if to_flit_end:
        return <ps_t>(padded_wire_B(run_B, s.flitpay_B, s.flit_B) * a.ps_per_B + 0.5)
    return <ps_t>(wire_B(run_B, s.flitpay_B, s.flit_B) * a.ps_per_B + 0.5)

cdef int analytic_hop(SimC* s, int32_t t, int32_t node, ps_t tail, bint first) except -1 nogil:
    """Analytic engine, EV_AN_HOP: the head of task t's transfer is at a hop of its route now: the route-graph node
    `node`, or (first) channel `tail` with `node` next. Every channel serves transfers at its own rate in the order
    heads arrive: so a source port, a switch port many senders converge on (incast) and a shared link in between
    each queue what crosses them. At the port a transfer is injected on (first: a rank's, or a switch's for an
    in-switch leg) heads interleave, as the injection queue carves its flows round robin, a packet each: a head
    goes out after the first packet of each transfer queued before it in this run (head_B), and not before now,
    its tail once all bytes queued before it and its own are out; a switch output takes its inputs in turn but
    each input's packets in order, so there a transfer starts after those before it. As on the wire
    (phy.pxi stream_at), a
    transfer that waited, or comes the instant the last one's bytes are out, continues the channel's run of
    back-to-back flits (AnC.origin, run_B); one that finds the channel idle starts a new run, after the open flit's
    padding. Its tail leaves the hop when the flit holding its last byte is out, and no earlier than `tail` (it
    arrived from upstream). On an idle route this is analytic_oneway's zero-load time exactly. O(1) per hop, one
    event per hop; it reads one AnC line, a route-graph node (cache-resident) and t_bytes[t] (the graph's column), never the transfer's
    128 B XferC (random lines: a miss per hop at 1024 ranks)."""
    cdef int32_t nxt, ch
    cdef AnC* a
    cdef int64_t P = s.flitpay_B
    cdef ps_t start, end, pad_end
    if first:
        ch = <int32_t>tail
        tail = 0
        nxt = node
    else:
        ch = hv_ch(s, s.hop[node].hv)
        nxt = s.hop[node].next
    a = &s.an[ch]
    s.last_progress = s.now                  # a transfer moving on is progress (the watchdog)
    if a.free < s.now or (a.free == s.now and a.run_B % P == 0):
        pad_end = a.origin + run_time(s, a, a.run_B, True)
        a.origin = pad_end if pad_end > s.now else s.now
        a.run_B = 0
        a.head_B = 0
    start = a.origin + run_time(s, a, a.head_B if first else a.run_B, False)
    if start < s.now:                        # (first) the heads before it are out: its first packet goes next
        start = s.now
    a.head_B += (s.t_bytes[t] if s.t_bytes[t] < s.maxp_B else s.maxp_B) + s.hdr_B
    a.run_B += s.t_bytes[t] + ((s.t_bytes[t] + s.maxp_B - 1) // s.maxp_B) * s.hdr_B     # its packets' wire bytes
    a.free = a.origin + run_time(s, a, a.run_B, False)
    end = a.origin + run_time(s, a, a.run_B, True)
    if tail > end:
        end = tail
    if nxt >= 0:            # a head that did not wait steps on a fixed delay after now: its lane (a FIFO)
        return c_push_lane(&s.heap, a.lane if start == s.now else -1, start + a.step, EV_AN_HOP, nxt, t,
                           end + a.step, 0)
    return c_push(&s.heap, end + a.lat + s.complete_ps, EV_TASK_DONE, -1, t, 0, 0)

cdef int start_task(SimC* s, int32_t t) except -1 nogil:
    """Task t is ready: a join completes at once, a transfer is issued after its ingress translation (an addressed
    one through its port's translation cache: endpoint.pxi translate; else the flat cost) and its shadow forward
    (or timed by the analytic engine), a compute or reduce task runs for its duration once its (rank, stream) is
    free."""
    cdef int32_t key, x, k, src, dst
    cdef int8_t kind = s.t_kind[t], status
    cdef int64_t total_B
    cdef XferC* xf
    cdef AnXC* ax
    cdef ps_t when, cost
    cdef bint missed
    s.t_start[t] = s.now
    if kind == T_JOIN:                         # zero cost: completes in place via the work stack
        s.work[0] += 1
        s.work[s.work[0]] = t
        return 0
    if kind == T_TRANSFER:
        x = s.t_xfer[t]
        if s.analytic:
            ax = &s.ax[x]
            src, dst, status, total_B = ax.src, ax.dst, ax.status, s.t_bytes[t]
        else:
            if s.xf_lazy:
                issue_record(s, t, x)
            xf = &s.xf[x]
            src, dst, status, total_B = xf.src, xf.dst, xf.status, xf.total_B
        when = s.now + s.issue_ps
        missed = False
        if s.x_addr[x] >= 0:                       # addressed: the ingress port translates (cache, table walk)
            cost = translate(s, x, src, status == 0)
            missed = cost > s.xlate_ps
            when += cost
            if status != 0:
                s.xl_ur += 1
        else:                                      # addressed by rank: the flat translation cost
            when += s.xlate_ps
        if src == dst or status != 0:              # local, or Unsupported Request answered by the ingress port
            if s.xf_lazy:                          # no packet will read its records
                if xf.kind == 1:
                    retire_xfer(s, xf.partner)
                retire_xfer(s, x)
            return c_push(&s.heap, when, EV_TASK_DONE, -1, t, 0, 0)
        k = s.ln_inject_miss if missed else s.ln_inject
        if s.node_domain[src] != s.node_domain[dst]:           # a shadow window: forwarded to the owner's domain
            when += s.p2p_ps
            k = s.ln_inject_miss_p2p if missed else s.ln_inject_p2p
            if s.x_addr[x] >= 0:
                s.xl_shadow += 1
                s.xl_cross_B += total_B
        if s.analytic:
            if ax.kind == 1:                   # a load: its read requests (header only), then the completions
                when = analytic_oneway(s, ax.path, 0, <int32_t>((total_B + s.mrrs_B - 1) // s.mrrs_B), when)
                ax = &s.ax[ax.partner]
            # the data crosses hops h0.. of its route (an in-switch leg: its one hop), each a queue (analytic_hop)
            # (hop events carry the task and where its head is: flag 1, the first hop's channel in y)
            return c_push_lane(&s.heap, -1 if ax.kind == 2 else k, when, EV_AN_HOP, ax.at1, t, hv_ch(s, ax.hv0), 1)
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
    """Task t is done (EV_TASK_DONE): complete it and start what it unblocks."""
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
