# ================================================================== set-up: from Python dicts to SimC
# What Engine.__init__ does, one step per part of the model: parameters, channels, nodes and their queues, routes,
# the event queue and its lanes, tasks, transfers and the packet pool; faults before the first run. numpy builds
# the arrays; C records are filled from them, and the numpy arrays whose buffers the C state points into stay alive
# in Engine._keep (`keep` below). Runs with the GIL, once. Contract: SimC and every record it holds (types.pxd).
# A transfer record itself (built here or at issue, released once done) is transfers.pxi's.

cdef void* keep_array(dict keep, str name, object values, object dtype) except NULL:
    """A contiguous copy of values, kept alive under name; its buffer, for C (one element at least)."""
    a = np.array(values, dtype=dtype, order="C", copy=True)   # the kernel writes into some: never alias
    if a.size == 0:
        a = np.zeros(1, dtype=dtype)
    keep[name] = a
    return cnp.PyArray_DATA(a)

cdef void* keep_view(dict keep, str name, object values, object dtype) except NULL:
    """values as a contiguous array of dtype, kept alive under name: the caller's own buffer when it already is one
    (no copy), for arrays the kernel only reads (task columns, route offsets); its buffer, for C."""
    a = np.ascontiguousarray(values, dtype=dtype)
    if a.size == 0:
        a = np.zeros(1, dtype=dtype)
    keep[name] = a
    return cnp.PyArray_DATA(a)

cdef void* keep_empty(dict keep, str name, Py_ssize_t n, object dtype) except NULL:
    """n elements (one at least), not initialised, kept alive under name; its buffer, for C: for arrays whose every
    element is written before it is read (set-up fills them in its own loops, or the kernel links them as it goes),
    so no page is touched twice and none that is never used is touched at all."""
    a = np.empty(max(int(n), 1), dtype=dtype)
    keep[name] = a
    return cnp.PyArray_DATA(a)

cdef void* keep_full(dict keep, str name, Py_ssize_t n, object dtype, object fill=0) except NULL:
    """n elements (one at least) set to fill, kept alive under name; its buffer, for C. Zeros come from calloc,
    untouched until used (the executor's work stack: 72 MB at 1024 ranks, a few KB of it written)."""
    a = np.zeros(max(int(n), 1), dtype=dtype) if fill == 0 else np.full(max(int(n), 1), fill, dtype=dtype)
    keep[name] = a
    return cnp.PyArray_DATA(a)

cdef void* keep_small_pages(dict keep, str name, Py_ssize_t n, object dtype, object fill=None) except NULL:
    """n elements (one at least), set to fill unless None, kept alive under name, on ordinary 4 KiB pages; its
    buffer, for C. For arrays that set-up writes through once and the run then touches about in order, once per
    task or transfer (task times, the task -> transfer map, route entries): numpy asks for huge pages for any large
    array, and on this VM a fresh huge page costs several times its 512 small ones to fault in (these four at 1024
    ranks, 400 MB, allocated and filled after lowering: 0.7 s CPU on huge pages, 0.2 s on small ones; the run no
    slower), while such sweeps gain nothing from fewer TLB entries."""
    cdef uintptr_t lo, hi
    a = np.empty(max(int(n), 1), dtype=dtype)
    lo = (<uintptr_t>cnp.PyArray_DATA(a) + 4095) & ~(<uintptr_t>4095)       # the whole pages inside it
    hi = (<uintptr_t>cnp.PyArray_DATA(a) + <uintptr_t>a.nbytes) & ~(<uintptr_t>4095)
    if hi > lo:
        madvise(<void*>lo, hi - lo, MADV_NOHUGEPAGE)
    if fill is not None:
        a.fill(fill)
    keep[name] = a
    return cnp.PyArray_DATA(a)


cdef int setup_params(SimC* s, dict p, dict topo, bint analytic, bint skip_settled, bint phy_countdown,
                      int32_t replay_ring_slots) except -1:
    """Scalar parameters (ps, bytes, flits) and the switches of Engine's keyword arguments."""
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
    s.credit_pool_flits = int(p["credit_pool_flits"]); s.update_flits = int(p["update_flits"])
    s.update_ps = int(p["update_ps"]); s.refresh_ps = int(p["refresh_ps"])
    s.hdr_B = int(p["header_B"]); s.maxp_B = int(p["max_payload_B"]); s.mrrs_B = int(p["mrrs_B"])
    s.flit_B = int(p["flit_B"]); s.flitpay_B = int(p["flit_B"]) - int(p["flit_overhead_B"])
    s.max_unit_flits = pkt_flits(s, s.maxp_B + s.hdr_B)
    s.ctrl_B = int(p.get("ctrl_B", 0))
    ge = p.get("ge")                  # Gilbert-Elliott burst errors: None, or per-state BER and mean dwell (bits)
    s.ge_on = ge is not None
    if s.ge_on:
        for k in range(2):
            s.ge_log1m[k] = float(np.log1p(-ge["ber"][k]))
            s.ge_dwell_bits[k] = float(ge["dwell_bits"][k])
    s.issue_ps = int(p["issue_ps"]); s.complete_ps = int(p["complete_ps"])
    s.xlate_ps = int(p["xlate_ps"]); s.p2p_ps = int(p["p2p_ps"]); s.watchdog_ps = int(p["watchdog_ps"])
    s.xmiss_ps = int(p.get("xmiss_ps", 0))
    s.fixed_priority = int(p.get("fixed_priority", 0))
    return 0


cdef int setup_channels(SimC* s, dict keep, dict p, dict topo) except -1:
    """ChanC records (ends, link timing, bit errors, one splitmix stream each), the replay rings, and the counter
    (CntC) and credit (CvC) tables as line-aligned int64 tables."""
    cdef int32_t C, V = s.nvc, i
    cdef ChanC* cc
    seed = int(p["seed"])
    ch_src = np.asarray(topo["ch_src"], np.int32)
    ch_dst = np.asarray(topo["ch_dst"], np.int32)
    C = s.n_ch = len(ch_src)
    s.c = <ChanC*>aligned_alloc(64, <size_t>max(C, 1) * sizeof(ChanC))
    if s.c == NULL:
        raise MemoryError("channel state")
    memset(s.c, 0, <size_t>max(C, 1) * sizeof(ChanC))
    ch_rev = np.asarray(topo["ch_rev"], np.int32)
    ppb = np.asarray(topo["ch_ps_per_byte"], np.float64)
    ch_lat = np.asarray(topo["ch_latency_ps"], np.int64)
    flit_ps = np.maximum(np.rint(ppb * s.flit_B), 1).astype(np.int64)
    ber = np.asarray(topo["ch_ber"], np.float64)
    log1m_ber = np.log1p(-ber)
    p_flit = -np.expm1(8.0 * s.flit_B * np.log1p(-ber))
    if s.ge_on:                       # control flits draw against the burst model's long-run flit error rate
        ge = p["ge"]
        pb = ge["dwell_bits"][1] / (ge["dwell_bits"][0] + ge["dwell_bits"][1])
        p_flit = np.full(C, (1 - pb) * -np.expm1(8.0 * s.flit_B * s.ge_log1m[0])
                         + pb * -np.expm1(8.0 * s.flit_B * s.ge_log1m[1]))
        log1m_ber = np.full(C, s.ge_log1m[0])
    # one splitmix stream per channel, derived from the seed and the channel id
    rng = [(seed * 0x9E3779B97F4A7C15 + (c + 1) * 0xD1B54A32D192ED03) & 0xFFFFFFFFFFFFFFFF for c in range(C)]
    for i in range(C):
        cc = &s.c[i]
        cc.wake_at = -1; cc.stall_since = -1; cc.rr = -1; cc.tx_free_ch = -1; cc.next_err_bit = -1.0
        cc.ge_flip_bit = -1.0; cc.tx_fin = -1; cc.flit_base = -1
        cc.ch_src = ch_src[i]; cc.ch_dst = ch_dst[i]; cc.ch_rev = ch_rev[i]
        cc.ps_per_B = ppb[i]; cc.flit_ps = flit_ps[i]; cc.ch_lat = ch_lat[i]
        cc.log1m_ber = log1m_ber[i]; cc.p_flit = p_flit[i]; cc.rng = <uint64_t>rng[i]
    s.ring = ring_alloc(<int64_t>C * s.ring_cap)
    if s.ring == NULL:
        raise MemoryError("replay buffers")
    assert sizeof(ChanC) == 320 and sizeof(XferC) == 128 and sizeof(PacketC) == 64
    assert sizeof(CntC) == 8 * 24 and sizeof(CvC) == 8 * len(CV_COLS)
    cvt = line_aligned_zeros(max(C * V, 1), sizeof(CvC) // 8)
    cvt[:, CV_COLS.index("cr_limit")] = s.credit_pool_flits
    keep["cv"] = cvt
    s.cvs = <CvC*>cnp.PyArray_DATA(cvt)
    keep["k"] = line_aligned_zeros(max(C, 1), sizeof(CntC) // 8)
    s.k = <CntC*>cnp.PyArray_DATA(keep["k"])
    return 0


cdef int setup_nodes(SimC* s, dict keep, dict topo) except -1:
    """Nodes: switch latency, host domain, each channel's input slot at its destination (plus one injection slot per
    node), the VOQs of every output (VC x slot) and their bitmaps, and the channels leaving each node."""
    cdef int32_t C = s.n_ch, N, V = s.nvc, i
    ch_src = np.asarray(topo["ch_src"], np.int32)
    ch_dst = np.asarray(topo["ch_dst"], np.int32)
    N = s.n_nodes = len(topo["node_latency_ps"])
    s.n_ranks = int(topo["n_ranks"])
    s.node_lat = <ps_t*>keep_array(keep, "node_lat", topo["node_latency_ps"], np.int64)
    s.node_domain = <int32_t*>keep_array(keep, "node_domain", topo.get("node_domain", np.zeros(N)), np.int32)
    # input slots: each channel's index among its destination's incoming channels; one extra injection slot
    n_in = np.bincount(ch_dst, minlength=N).astype(np.int32)
    order = np.argsort(ch_dst, kind="stable")
    slot = np.empty(C, np.int32)
    starts = np.cumsum(n_in) - n_in
    slot[order] = np.arange(C, dtype=np.int32) - np.repeat(starts, n_in).astype(np.int32)
    nslots = n_in + 1
    s.n_slots = <int32_t*>keep_array(keep, "n_slots", nslots, np.int32)
    qsize = V * nslots[ch_src].astype(np.int64)
    qbase = (np.cumsum(qsize) - qsize).astype(np.int64)
    s.q = <QueueC*>keep_full(keep, "q", 2 * qsize.sum(), np.int32, -1)
    qwords = (qsize + 63) // 64
    qb_base = (np.cumsum(qwords) - qwords).astype(np.int64)
    if 2 * qsize.sum() >= 2**31:
        raise ValueError("too many virtual output queues for int32 queue offsets")
    s.q_bits = <uint64_t*>keep_full(keep, "q_bits", qwords.sum(), np.uint64)
    for i in range(C):
        s.c[i].q_base = qbase[i]; s.c[i].qb_base = qb_base[i]; s.c[i].ch_slot = slot[i]
    n_out = np.bincount(ch_src, minlength=N)
    s.node_out_ptr = <int64_t*>keep_array(keep, "node_out_ptr", np.concatenate([[0], np.cumsum(n_out)]), np.int64)
    s.node_out = <int32_t*>keep_array(keep, "node_out", np.argsort(ch_src, kind="stable"), np.int32)
    return 0


cdef int setup_routes(SimC* s, dict keep, dict topo) except -1:
    """Candidate paths per rank pair, route entries (channel << vcl_bits | VC level) and the route graph."""
    s.pair_ptr = <int64_t*>keep_view(keep, "pair_ptr", topo["pair_ptr"], np.int64)
    s.path_ptr = <int64_t*>keep_view(keep, "path_ptr", topo["path_ptr"], np.int64)
    pp = np.asarray(topo["path_ptr"], np.int64)
    if pp.size and (int(pp[pp.size - 1]) >= (1 << 31) - 1 or int(np.diff(pp).max(initial=0)) >= (1 << 15)):
        raise ValueError("routes too large for int32 packet route offsets / int16 hop counts")
    path_vcl = np.asarray(topo["path_vcl"], np.int8)
    vmax = int(path_vcl.max()) if path_vcl.size else 0
    if path_vcl.size and int(path_vcl.min()) < 0:
        raise ValueError("negative VC level in a route")
    s.vcl_bits = max(vmax.bit_length(), 1)
    if (max(s.n_ch, 1) << s.vcl_bits) >= (1 << 31):
        raise ValueError("too many channels to pack routes into int32")
    path_ch = np.asarray(topo["path_ch"], np.int32)
    if topo.get("path_hv") is not None:         # made once (shared_routes) for several engines, which only read it
        if len(topo["path_hv"]) < max(path_ch.size, 1):
            raise ValueError("path_hv does not belong to these routes (use kernel.shared_routes(topo))")
        s.path_hv = <int32_t*>keep_view(keep, "path_hv", topo["path_hv"], np.int32)
    else:
        s.path_hv = <int32_t*>keep_small_pages(keep, "path_hv", path_ch.size, np.int32,
                                               None if path_ch.size else 0)
        hv = keep["path_hv"][:path_ch.size]                     # int32 throughout: no int64 temporaries
        np.left_shift(path_ch, s.vcl_bits, out=hv)
        np.bitwise_or(hv, path_vcl, out=hv)
    n_paths = pp.size - 1 if pp.size else 0
    if topo.get("route_hop") is not None:
        # built once for these routes (shared_routes) and shared by several engines: each takes its own copy
        hop = np.ascontiguousarray(topo["route_hop"], np.int32)
        at1 = topo["path_at1"]
        if hop.ndim != 2 or hop.shape[1] != 2 or len(at1) != n_paths:
            raise ValueError("route_hop / path_at1 do not belong to these routes (use kernel.shared_routes(topo))")
        s.path_at1 = <int32_t*>keep_array(keep, "path_at1", at1, np.int32)
        s.n_hop = hop.shape[0]
        s.hop = <HopC*>malloc(<size_t>max(s.n_hop, 1) * sizeof(HopC))
        if s.hop == NULL:
            raise MemoryError("route graph")
        memcpy(s.hop, cnp.PyArray_DATA(hop), <size_t>s.n_hop * sizeof(HopC))
    elif s.analytic:        # only the paths its transfers take, as setup_transfers finds them (rg_path)
        s.path_at1 = <int32_t*>keep_full(keep, "path_at1", n_paths, np.int32, AT1_UNBUILT)
    else:                   # every path: transfers are routed as they issue, and rerouted after faults
        s.path_at1 = <int32_t*>keep_full(keep, "path_at1", n_paths, np.int32, -1)
        build_route_graph(s, n_paths, s.path_at1)
    return 0


cdef int setup_event_queue(SimC* s, dict p, dict graph, int event_lanes, int64_t lane_min_heap) except -1:
    """The heap, and a delay lane for each fixed delay events will have (as many as MAX_LANES allows)."""
    cdef int32_t C = s.n_ch, i
    cdef int64_t tlp
    cdef ps_t ser, first, tail
    cdef int64_t P = s.flitpay_B, F = s.flit_B
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
    s.ln_inject_miss = s.ln_inject_miss_p2p = -1
    if "host_addr" in graph:                # addressed transfers: issues whose translation missed the cache
        s.ln_inject_miss = lane_for(&s.heap, s.issue_ps + s.xlate_ps + s.xmiss_ps)
        s.ln_inject_miss_p2p = lane_for(&s.heap, s.issue_ps + s.xlate_ps + s.xmiss_ps + s.p2p_ps)
    for i in range(C):      # Acks and UpdateFCs about a channel cross its reverse: one delay per link kind
        s.c[i].lane_ctrl = <int8_t>lane_for(&s.heap, s.c[s.c[i].ch_rev].flit_ps + s.c[s.c[i].ch_rev].ch_lat)
        s.c[i].lane_arr = s.c[i].lane_txd = s.c[i].lane_dlv = -1
    # A unit of tlp bytes starting a flit keeps its transmitter busy ser (to its last byte), its head arrives
    # first + ch_lat later (first = its first flit, or its last if that is the first) and its tail (its last
    # flit) tail - first after its head (phy.pxi frame_unit): lanes for the packet sizes the transfers will mostly
    # produce (full packets, then the commonest remainders)
    for tlp in common_packet_sizes(p, graph):
        for i in range(C):
            ser = max(<ps_t>(wire_B(tlp, P, F) * s.c[i].ps_per_B + 0.5), 1)
            tail = <ps_t>(padded_wire_B(tlp, P, F) * s.c[i].ps_per_B + 0.5)
            first = min(<ps_t>(F * s.c[i].ps_per_B + 0.5), tail)
            lane_for(&s.heap, first + s.c[i].ch_lat)
            lane_for(&s.heap, ser)
            lane_for(&s.heap, tail - first)
    return 0


cdef list common_packet_sizes(dict p, dict graph, int top=3):
    """Header + payload sizes of the packets the graph's transfers produce, commonest first (at most top):
    full packets of max_payload_B, each transfer's remainder, header-only read requests. A count per possible size
    (they lie in [hdr, maxp + hdr]) in one pass over the task columns, ties in ascending size: what np.unique's
    counts gave, without sorting or gathering 16 M transfers' sizes."""
    cdef const int8_t[::1] kind = np.ascontiguousarray(graph["kind"], np.int8)
    cdef const int8_t[::1] op = np.ascontiguousarray(graph["op"], np.int8)
    cdef const int64_t[::1] nbytes = np.ascontiguousarray(graph["nbytes"], np.int64)
    cdef int64_t maxp = int(p["max_payload_B"]), hdr = int(p["header_B"]), mrrs = int(p["mrrs_B"]), nb
    cdef Py_ssize_t t
    tot_a = np.zeros(maxp + 1, np.int64)
    cdef int64_t[::1] tot = tot_a
    with nogil:
        for t in range(kind.shape[0]):
            if kind[t] != T_TRANSFER:
                continue
            nb = nbytes[t]
            tot[maxp] += nb // maxp
            if nb % maxp:
                tot[nb % maxp] += 1
            if op[t] == 1:
                tot[0] += (nb + mrrs - 1) // mrrs
    order = np.argsort(-tot_a, kind="stable")
    return [int(j) + hdr for j in order[:top] if tot_a[j] > 0]


cdef int setup_tasks(SimC* s, dict keep, dict p, dict graph) except -1:
    """The task graph (kinds, ranks, streams, durations, successors, dependency counts), stream FIFOs, start/end
    times; per rank read tags, per pair end-to-end windows; the analytic engine's port clocks."""
    cdef int32_t n, R = s.n_ranks
    kind = np.asarray(graph["kind"], np.int8)
    n = s.n_tasks = len(kind)
    s.t_kind = <int8_t*>keep_view(keep, "t_kind", kind, np.int8)
    s.t_rank = <int32_t*>keep_view(keep, "t_rank", graph["rank"], np.int32)
    stream = np.asarray(graph["stream"], np.int32)
    s.t_stream = <int32_t*>keep_view(keep, "t_stream", stream, np.int32)
    s.t_dur = <ps_t*>keep_view(keep, "t_dur", graph["duration_ps"], np.int64)
    s.t_succ_ptr = <int64_t*>keep_view(keep, "t_succ_ptr", graph["succ_ptr"], np.int64)
    s.t_succ = <int32_t*>keep_view(keep, "t_succ", graph["succ_idx"], np.int32)
    s.t_deps = <int32_t*>keep_array(keep, "t_deps", graph["n_deps"], np.int32)
    s.t_start = <ps_t*>keep_small_pages(keep, "t_start", n, np.int64, -1)
    s.t_end = <ps_t*>keep_small_pages(keep, "t_end", n, np.int64, -1)
    s.t_next = <int32_t*>keep_empty(keep, "t_next", n, np.int32)     # set as a task joins its stream's FIFO
    s.work = <int32_t*>keep_full(keep, "work", n + 2, np.int32)
    s.n_streams = int(stream.max()) + 1 if n and stream.max() >= 0 else 1
    s.s_busy = <int8_t*>keep_full(keep, "s_busy", R * s.n_streams, np.int8)
    s.s_head = <int32_t*>keep_full(keep, "s_head", R * s.n_streams, np.int32, -1)
    s.s_tail = <int32_t*>keep_full(keep, "s_tail", R * s.n_streams, np.int32, -1)
    s.tags_free = <int32_t*>keep_full(keep, "tags_free", R, np.int32, int(p["read_tags"]))
    s.e2e_avail = <int64_t*>keep_full(keep, "e2e_avail", <int64_t>R * R, np.int64, int(p["e2e_window_B"]))
    s.e2e_owed = <int64_t*>keep_full(keep, "e2e_owed", <int64_t>R * R, np.int64)
    s.e2e_quantum = max(int(p["e2e_window_B"]) // 4, 1)
    if s.analytic:
        setup_analytic(s, keep)
    s.tasks_left = n
    return 0


cdef int setup_analytic(SimC* s, dict keep) except -1:
    """The analytic engine's channel lines (AnC: idle clocks, the constants its hop reads, 64 B aligned)."""
    cdef int32_t ch
    cdef AnC* a
    raw = np.zeros((s.n_ch + 1) * sizeof(AnC), np.uint8)
    keep["an"] = raw
    s.an = <AnC*>((<uintptr_t>cnp.PyArray_DATA(raw) + 63) & ~(<uintptr_t>63))
    for ch in range(s.n_ch):
        a = &s.an[ch]
        a.ps_per_B = s.c[ch].ps_per_B
        a.lat = s.c[ch].ch_lat
        a.step = s.c[ch].ch_lat + s.node_lat[s.c[ch].ch_dst] + s.c[ch].flit_ps
        a.lane = lane_for(&s.heap, a.step)
    return 0


cdef int setup_packets(SimC* s) except -1:
    """The packet pool: 1024 packets on a free list to start with (pkt_alloc doubles it when it runs out)."""
    cdef int32_t i
    s.pk_cap = 1024
    s.pk = <PacketC*>aligned_alloc(64, s.pk_cap * sizeof(PacketC))
    if s.pk == NULL:
        raise MemoryError("packet pool")
    for i in range(s.pk_cap - 1):
        s.pk[i].next = i + 1
    s.pk[s.pk_cap - 1].next = -1
    s.pk_free = 0
    return 0


cdef int setup_xlate(SimC* s, dict keep, dict p, dict xlate) except -1:
    """The shadow-window table of every host domain (xlate: CSR w_ptr over domains, w_base, w_size, w_target,
    w_rank; fabric.address.kernel_tables) and each rank's translation cache (p: xlate_cache_entries, _ways,
    xlate_page_B), empty and cold. No xlate: no table, every address is an Unsupported Request."""
    cdef int64_t entries = int(p.get("xlate_cache_entries", 0)), ways = max(int(p.get("xlate_cache_ways", 1)), 1)
    cdef int64_t page = int(p.get("xlate_page_B", 4096))
    xlate = xlate or dict(w_ptr=[0])
    if page < 1 or page & (page - 1):
        raise ValueError(f"xlate_page_B={page}: a power of two, please")
    if entries % ways or (entries // ways) & (entries // ways - 1):
        raise ValueError(f"xlate_cache_entries={entries} is not xlate_cache_ways={ways} x a power of two")
    s.page_shift = page.bit_length() - 1
    s.tc_sets = <int32_t>(entries // ways)
    s.tc_ways = <int32_t>ways
    s.n_dom = len(xlate["w_ptr"]) - 1
    s.w_ptr = <int64_t*>keep_array(keep, "w_ptr", xlate["w_ptr"], np.int64)
    for name in ("w_base", "w_size", "w_target"):
        keep_array(keep, name, xlate.get(name, ()), np.int64)
    s.w_base = <int64_t*>cnp.PyArray_DATA(keep["w_base"])
    s.w_size = <int64_t*>cnp.PyArray_DATA(keep["w_size"])
    s.w_target = <int64_t*>cnp.PyArray_DATA(keep["w_target"])
    s.w_rank = <int32_t*>keep_array(keep, "w_rank", xlate.get("w_rank", ()), np.int32)
    s.tc_tag = <int64_t*>keep_full(keep, "tc_tag", <int64_t>s.n_ranks * entries, np.int64, -1)
    s.tc_use = <int64_t*>keep_full(keep, "tc_use", <int64_t>s.n_ranks * entries, np.int64)
    return 0


cdef int setup_transfers(SimC* s, dict keep, dict graph, bint retire, bint own_addr) except -1:
    """One XferC per transfer task, and for a load a second one, its response flow (data from the owner back to the
    requester), after all the first ones; the task -> transfer map and each transfer's address. The records are
    built here (init_transfer), or with retire (packet engine) when their task is issued, in chunks of XF_CHUNK
    that are released once done (retire_xfer): what a record holds is a function of its task, so either way it is
    the same."""
    cdef int32_t t, x, n_xf, extra, n_first = 0, n_loads = 0, n_chunks, c
    cdef size_t chunk_B = <size_t>XF_CHUNK * sizeof(XferC)
    # typed views of the task columns (no gathered copies): the loops below run once per task (18 M at 1024
    # ranks), in C
    cdef const int8_t[::1] kind = keep["t_kind"]
    s.t_op = <int8_t*>keep_view(keep, "t_op", graph["op"], np.int8)
    s.t_peer = <int32_t*>keep_view(keep, "t_peer", graph["peer"], np.int32)
    s.t_bytes = <int64_t*>keep_view(keep, "t_bytes", graph["nbytes"], np.int64)
    cdef bint has_addr = graph.get("host_addr") is not None
    cdef const int64_t[::1] addr = np.ascontiguousarray(graph["host_addr"] if has_addr else np.zeros(1), np.int64)
    with nogil:
        for t in range(s.n_tasks):
            if kind[t] == T_TRANSFER:
                n_first += 1
                n_loads += s.t_op[t] == 1
    n_xf = n_first + n_loads
    host = graph.get("host_addr")
    if own_addr and isinstance(host, np.ndarray) and host.dtype == np.int64 and host.flags.c_contiguous \
            and host.flags.writeable and host.size >= max(n_first, 1):
        keep["x_addr"] = host             # transfer x's address goes to host[x], x <= its task: read before written
        s.x_addr = <int64_t*>cnp.PyArray_DATA(host)
    else:                                 # a response flow is not addressed: the first transfers only
        s.x_addr = <int64_t*>keep_empty(keep, "x_addr", n_first, np.int64)
    s.x_flow = NULL
    if graph.get("xf_flow") is not None:
        if len(graph["xf_flow"]) != n_xf:
            raise ValueError(f"xf_flow has {len(graph['xf_flow'])} flow ids for {n_xf} transfers")
        s.x_flow = <int32_t*>keep_view(keep, "x_flow", graph["xf_flow"], np.int32)
    s.n_xf = n_xf
    s.n_first = n_first
    s.n_loads = n_loads
    s.xf_lazy = retire and not s.analytic
    if s.analytic:        # its compact records, each filled from a scratch XferC (the same set-up as the packets')
        s.ax = <AnXC*>aligned_alloc(64, <size_t>(max(n_xf, 1) + 1) // 2 * 2 * sizeof(AnXC))
        if s.ax == NULL:
            raise MemoryError("transfers")
    elif s.xf_lazy:       # whole chunks, each on its own huge page, untouched until a record in it is built
        n_chunks = (max(n_xf, 1) + XF_CHUNK - 1) // XF_CHUNK
        s.xf = <XferC*>aligned_alloc(chunk_B, <size_t>n_chunks * chunk_B)
        if s.xf == NULL:
            raise MemoryError("transfers")
        s.xf_live = <int32_t*>keep_full(keep, "xf_live", n_chunks, np.int32, XF_CHUNK)
        s.xf_live[n_chunks - 1] = n_xf - (n_chunks - 1) * XF_CHUNK
        s.load_x = <int32_t*>keep_full(keep, "load_x", n_loads, np.int32)
    else:
        s.xf = <XferC*>aligned_alloc(64, <size_t>max(n_xf, 1) * sizeof(XferC))    # one record = two cache lines
        if s.xf == NULL:
            raise MemoryError("transfers")
    s.t_xfer = <int32_t*>keep_small_pages(keep, "t_xfer", s.n_tasks, np.int32)
    x = 0
    extra = n_first
    with nogil:
        for t in range(s.n_tasks):
            if kind[t] != T_TRANSFER:
                s.t_xfer[t] = -1
                continue
            s.t_xfer[t] = x
            s.x_addr[x] = addr[t] if has_addr and addr[t] >= 0 else -1
            if s.xf_lazy:
                if s.t_op[t] == 1:
                    s.load_x[extra - n_first] = x
            else:
                init_transfer(s, t, x, extra)
            extra += s.t_op[t] == 1
            x += 1
    if s.analytic and s.hop == NULL:     # (a route graph given in topo holds every path already)
        intern_taken_paths(s)
    return 0


cdef int intern_taken_paths(SimC* s) except -1:
    """The analytic engine's route graph: the paths its transfers take, in the order of their first transfer (a
    data-parallel step's transfers stay inside their groups: 6 % of sd200-1024's 2 M paths), each record's
    at1 then set from it (init_xfer left AT1_UNBUILT there)."""
    cdef RouteGraphB b
    cdef int32_t x
    cdef AnXC* a
    rg_open(&b)
    with nogil:
        for x in range(s.n_xf):
            a = &s.ax[x]
            if a.at1 == AT1_UNBUILT:
                if s.path_at1[a.path] == AT1_UNBUILT:
                    s.path_at1[a.path] = rg_path(s, &b, a.path)
                a.at1 = s.path_at1[a.path]
    return rg_close(s, &b)


cdef int install_faults(SimC* s, dict keep, list faults) except -1:
    """Injected faults (Engine.add_fault) into per-channel sorted lists, one per kind (F_*); retrains as events."""
    cdef int64_t i
    C = s.n_ch
    rows = sorted((ch, kind, n, k) for kind, ch, n, k in faults if kind != FAULT_RETRAIN)
    keys = np.array([ch * 3 + kind for ch, kind, n, k in rows], np.int64)
    ptr = np.searchsorted(keys, np.arange(3 * C + 1), side="left").astype(np.int64)
    for i in range(3 * C):
        s.c[i // 3].f_cur[i % 3] = ptr[i]
        s.c[i // 3].f_end[i % 3] = ptr[i + 1]
        if i % 3 != F_FLIT and ptr[i + 1] > ptr[i]:
            s.c[i // 3].ctrl_faults = 1
    s.f_n = <int64_t*>keep_array(keep, "f_n", [r[2] for r in rows], np.int64)
    s.f_k = <int64_t*>keep_array(keep, "f_k", [max(r[3], 1) for r in rows], np.int64)
    for kind, ch, n, k in faults:
        if kind == FAULT_RETRAIN:
            c_push(&s.heap, n, EV_FORCE_RETRAIN, ch, 0, 0, 0)
    return 0
