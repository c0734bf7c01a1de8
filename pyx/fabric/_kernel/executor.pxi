# ================================================================== task-graph executor and analytic engine
# The workload: tasks start when their dependencies complete; compute and reduce tasks occupy their (rank, stream)
# FIFO, transfers are issued to the endpoints (or timed alpha-beta by the analytic engine), joins are free.
# Contract: SimC's task arrays (t_*, s_*, work), XferC.task, SimC.an_free.
cdef ps_t analytic_oneway(SimC* s, int32_t p, int64_t nbytes, int32_t npk, ps_t start, bint occupy,
                          int32_t h0=0, int32_t h1=-1) noexcept nogil:
    """Alpha-beta over the route: latencies + pipelined serialisation on the slowest hop (its packets back to back in
    flits, the last one padded: fabric.phy.path_terms), a flit per later hop (the first flit's CRC is checked before
    it goes on), queued behind earlier transfers on the source port (injection is where a rank's own transfers
    contend; the network is not modelled). Hops h0..h1-1 only (default all): an in-switch leg crosses one hop."""
    cdef int32_t h, n = path_len(s, p) if h1 < 0 else h1, ch, first_ch = path_hop_ch(s, p, h0)
    cdef double worst = 0.0
    cdef ps_t lat = 0, ser, t, f
    cdef int64_t tlp = nbytes + <int64_t>npk * s.hdr_B
    for h in range(h0, n):
        ch = path_hop_ch(s, p, h)
        lat += s.c[ch].ch_lat
        if h + 1 < n:
            lat += s.node_lat[s.c[ch].ch_dst]
        if s.c[ch].ps_per_B > worst:
            worst = s.c[ch].ps_per_B
    ser = <ps_t>(((tlp + s.flitpay_B - 1) // s.flitpay_B) * s.flit_B * worst + 0.5)
    f = s.c[first_ch].flit_ps
    t = start
    if occupy and s.an_free[first_ch] > t:
        t = s.an_free[first_ch]
    if occupy:
        s.an_free[first_ch] = t + ser
    return t + lat + ser + (n - h0 - 1) * f

cdef int start_task(SimC* s, int32_t t) except -1 nogil:
    """Task t is ready: a join completes at once, a transfer is issued after its ingress translation (an addressed
    one through its port's translation cache: endpoint.pxi translate; else the flat cost) and its shadow forward
    (or timed by the analytic engine), a compute or reduce task runs for its duration once its (rank, stream) is
    free."""
    cdef int32_t key, x, p, k
    cdef int8_t kind = s.t_kind[t]
    cdef XferC* xf
    cdef ps_t when, cost
    cdef bint missed
    s.t_start[t] = s.now
    if kind == T_JOIN:                         # zero cost: completes in place via the work stack
        s.work[0] += 1
        s.work[s.work[0]] = t
        return 0
    if kind == T_TRANSFER:
        x = s.t_xfer[t]
        xf = &s.xf[x]
        when = s.now + s.issue_ps
        missed = False
        if s.x_addr[x] >= 0:                       # addressed: the ingress port translates (cache, table walk)
            cost = translate(s, x)
            missed = cost > s.xlate_ps
            when += cost
            if xf.status != 0:
                s.xl_ur += 1
        else:                                      # addressed by rank: the flat translation cost
            when += s.xlate_ps
        if xf.src == xf.dst or xf.status != 0:     # local, or Unsupported Request answered by the ingress port
            return c_push(&s.heap, when, EV_TASK_DONE, -1, t, 0, 0)
        k = s.ln_inject_miss if missed else s.ln_inject
        if s.node_domain[xf.src] != s.node_domain[xf.dst]:     # a shadow window: forwarded to the owner's domain
            when += s.p2p_ps
            k = s.ln_inject_miss_p2p if missed else s.ln_inject_p2p
            if s.x_addr[x] >= 0:
                s.xl_shadow += 1
                s.xl_cross_B += xf.total_B
        if s.analytic:
            if xf.kind == 1:
                p = xf.path
                when = analytic_oneway(s, p, 0, <int32_t>((xf.total_B + s.mrrs_B - 1) // s.mrrs_B), when, False)
                xf = &s.xf[xf.partner]
            when = analytic_oneway(s, xf.path, xf.total_B, <int32_t>((xf.total_B + s.maxp_B - 1) // s.maxp_B),
                                   when, True, xf.h0, xf.h0 + xf.hops)   # an in-switch leg: its one hop
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
