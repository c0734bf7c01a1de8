# ================================================================== transfers: a transfer record's life
# A transfer's record (XferC; the analytic engine's compact AnXC) from its task: its ends, bytes, kind, path among
# the pair's candidates (by its flow id) and first hops, an in-switch leg trimmed to its one hop, an addressed
# transfer sent where its issuer's shadow windows map the address, and its end-to-end grant's return latency. The
# records are built at set-up (setup_transfers, init.pxi) or, with retire_transfers, as their task is issued
# (issue_record, from the executor) and released a chunk at a time once done (retire_xfer, from the executor and
# endpoints); a reroute rebuilds a record's path (faults.pxi). Contract: XferC, AnXC, SimC's transfer arrays
# (x_addr, x_flow, xf_live, load_x) and the task columns they are made from.

cdef void init_transfer(SimC* s, int32_t t, int32_t x, int32_t extra) noexcept nogil:
    """The record of transfer task t (transfer x) and, for a load, of its response flow (transfer extra). An
    addressed transfer (x_addr >= 0: a host address in its issuer's domain) goes to the rank its issuer's
    shadow-window table maps that address to (window_find), whatever its peer says; in no window, it is an
    Unsupported Request."""
    cdef XferC scratch
    cdef XferC* xf
    cdef int32_t r = s.t_rank[t], q = s.t_peer[t], w
    cdef int64_t gaddr, nbytes = s.t_bytes[t]
    cdef int8_t op = s.t_op[t]
    cdef bint load = op == 1
    if s.x_addr[x] >= 0:
        w = window_find(s, s.node_domain[r], s.x_addr[x], nbytes, &gaddr) if 0 <= r < s.n_ranks else -1
        q = s.w_rank[w] if w >= 0 else -1
    xf = &scratch if s.analytic else &s.xf[x]
    init_xfer(s, xf, x, r, q, nbytes, -1 if load else t, 1 if load else 0, 0, extra if load else -1)
    if op == 2 or op == 3:
        switch_leg(s, xf, op)
    if s.analytic:
        an_xfer(s, x, xf, t)
    if load:    # the response flow: data from the owner back to the requester
        xf = &scratch if s.analytic else &s.xf[extra]
        init_xfer(s, xf, extra, q, r, nbytes, t, 2, 1, x)
        if s.analytic:
            an_xfer(s, extra, xf, t)


cdef void issue_record(SimC* s, int32_t t, int32_t x) noexcept nogil:
    """retire_transfers: build transfer x's record (a load's response flow too) as its task t is issued."""
    cdef int32_t lo = 0, hi = s.n_loads, mid
    if s.t_op[t] == 1:         # its response flow: n_first + its place among the loads (load_x is ascending)
        while lo < hi:
            mid = (lo + hi) >> 1
            if s.load_x[mid] < x:
                lo = mid + 1
            else:
                hi = mid
    init_transfer(s, t, x, s.n_first + lo)


cdef void retire_xfer(SimC* s, int32_t x) noexcept nogil:
    """retire_transfers: transfer x is done and nothing reads its record again; once every record of its chunk is,
    the chunk's pages go back to the system (madvise: they read as zeros if touched again)."""
    cdef int32_t c
    if not s.xf_lazy:
        return
    c = x // XF_CHUNK
    s.xf_live[c] -= 1
    if s.xf_live[c] == 0:
        madvise(<char*>s.xf + <size_t>c * XF_CHUNK * sizeof(XferC), <size_t>XF_CHUNK * sizeof(XferC), MADV_DONTNEED)


cdef XferC XF_ZERO             # all zeros (static storage): what init_xfer starts a record from

cdef void init_xfer(SimC* s, XferC* xf, int32_t x, int32_t src, int32_t dst, int64_t nbytes, int32_t task,
                    int8_t kind, int8_t cls, int32_t partner) noexcept nogil:
    """Transfer x (record xf): src -> dst, nbytes; its path (its flow id, x or x_flow[x], picks among the pair's
    candidates) and first hops; an Unsupported Request when an end is no rank or no path joins them."""
    cdef int32_t flow = s.x_flow[x] if s.x_flow != NULL else x
    xf[0] = XF_ZERO              # a copy: GCC's generic tuning makes this memset a `rep stos`, 30+ cycles each
    xf.total_B = nbytes
    xf.avail_B = 0 if kind == 2 else nbytes
    xf.src = src; xf.dst = dst; xf.task = task; xf.kind = kind; xf.cls = cls; xf.partner = partner
    xf.d_src = src; xf.d_dst = dst; xf.d_kind = kind
    xf.next = -1
    if src < 0 or dst < 0 or src >= s.n_ranks or dst >= s.n_ranks:
        xf.status = 1            # Unsupported Request: no accelerator there
        xf.path = -1
        return
    xf.path = choose_path(s, src, dst, flow) if src != dst else -1
    if src != dst and xf.path < 0:
        xf.status = 1
    if xf.path >= 0:
        if not s.analytic:       # end-to-end grants: packets only
            xf.grant_ps = return_latency(s, dst, src, flow)
        xf.hv0 = s.path_hv[s.path_ptr[xf.path]]
        xf.at1 = s.path_at1[xf.path]
        xf.hops = <int16_t>path_len(s, xf.path)


cdef void switch_leg(SimC* s, XferC* xf, int8_t op) noexcept nogil:
    """In-switch legs (issue 16, NVLS): the route r -> q trimmed to its first hop (op 2, UP: r's port into its
    switch; the packets are consumed by the switch's reduce/multicast engine) or to its last hop (op 3, DOWN: the
    switch's port to q; the packets are injected at the switch). Kind 3: no end-to-end window (the switch engine
    buffers; link credits still apply), no read tags."""
    cdef int32_t n
    xf.kind = 3
    xf.d_kind = 3
    if xf.path < 0:
        return
    n = path_len(s, xf.path)
    if op == 3:
        xf.hv0 = s.path_hv[s.path_ptr[xf.path] + n - 1]
        xf.h0 = <int16_t>(n - 1)
    xf.at1 = -1
    xf.hops = 1


cdef void an_xfer(SimC* s, int32_t x, XferC* xf, int32_t task) noexcept nogil:
    """The analytic engine's record of transfer x: what it reads of xf (AnXC), its bytes by the issuing task."""
    cdef AnXC* a = &s.ax[x]
    a.src = xf.src; a.dst = xf.dst; a.path = xf.path; a.partner = xf.partner
    a.hv0 = xf.hv0; a.at1 = xf.at1; a.task = task; a.kind = xf.kind; a.status = xf.status


cdef ps_t return_latency(SimC* s, int32_t src, int32_t dst, int32_t flow) noexcept nogil:
    """Zero-load latency of a small message along the route src -> dst (an end-to-end grant)."""
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
