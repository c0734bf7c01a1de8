# ================================================================== report: the critical path of a finished run
# For fabric/report.py: the walk back from the last task to finish, over the task records (successor CSR, kinds,
# ranks, streams) and the run's start/end times, in C. With the GIL; touches no SimC.

cdef int64_t released_by(const int64_t[::1] sp, const int32_t[::1] si, const int64_t[::1] en, int32_t[::1] rel,
                         int64_t n) except -1 nogil:
    """rel[t] = 1 + the predecessor of t that ended last, the lowest id among equals (0: none), in one pass over the
    successor CSR: sources come in id order, so the first of equal ends stays. Returns the task that ended last (the
    first of equals). No predecessor CSR: the walk needs one predecessor per task, and the edges are read once."""
    cdef int64_t u, i, last = 0
    cdef int64_t e
    cdef int32_t v, b
    for u in range(n):
        e = en[u]
        if e > en[last]:
            last = u
        for i in range(sp[u], sp[u + 1]):
            v = si[i]
            b = rel[v]
            if b == 0 or e > en[b - 1]:
                rel[v] = <int32_t>(u + 1)
    return last


cdef tuple stream_groups(const int32_t[::1] rk, const int32_t[::1] sm, int64_t n):
    """(ptr, members, streams per rank): the tasks of each (rank, stream) group in id order; group = rank*NS+stream.
    One pass over the streams finds the tasks on one (a tenth of a decode step's); the rest touches only those."""
    cdef int64_t t, i, g, m = 0, n_groups
    cdef int32_t NS = 0, NR = 0
    on_a = np.empty(max(n, 1), np.int32)      # pages are touched only as far as the stream tasks go
    cdef int32_t[::1] on = on_a
    with nogil:
        for t in range(n):
            if sm[t] >= 0 and rk[t] >= 0:
                on[m] = <int32_t>t
                m += 1
                NS = max(NS, sm[t] + 1)
                NR = max(NR, rk[t] + 1)
    NS = max(NS, 1)
    n_groups = <int64_t>NR * NS
    gp_a = np.zeros(n_groups + 1, np.int64)
    cdef int64_t[::1] gp = gp_a
    gm_a = np.empty(max(m, 1), np.int32)
    cdef int32_t[::1] gm = gm_a
    gf_a = np.empty(n_groups, np.int64)
    cdef int64_t[::1] gf = gf_a
    with nogil:
        for i in range(m):
            t = on[i]
            gp[<int64_t>rk[t] * NS + sm[t] + 1] += 1
        for g in range(n_groups):
            gp[g + 1] += gp[g]
            gf[g] = gp[g]
        for i in range(m):
            t = on[i]
            g = <int64_t>rk[t] * NS + sm[t]
            gm[gf[g]] = <int32_t>t
            gf[g] += 1
    return gp_a, gm_a, NS


def critical_path_walk(succ_ptr_a, succ_idx_a, start_a, end_a, kind_a, coll_a, rank_a, stream_a, int8_t compute,
                       bint with_path=False):
    """(compute_ps, comm_ps, tasks) of the critical path, exactly as fabric.report.critical_path defines it: from the
    task that ends last (the first such), step to the constraint that released it, the predecessor that ended last
    (the lowest id among equals) or, if it ended strictly later, the task before it on its stream (same rank and
    stream, the latest (start, id) before the task's own). Time on a compute task outside collectives is compute,
    the wait before it and everything else is exposed communication. with_path: a fourth item, the path's task ids
    (int64) in walk order, the last task first."""
    cdef const int64_t[::1] sp = np.ascontiguousarray(succ_ptr_a, np.int64)
    cdef const int32_t[::1] si = np.ascontiguousarray(succ_idx_a, np.int32)
    cdef const int64_t[::1] st = np.ascontiguousarray(start_a, np.int64)
    cdef const int64_t[::1] en = np.ascontiguousarray(end_a, np.int64)
    cdef const int8_t[::1] kd = np.ascontiguousarray(kind_a, np.int8)
    cdef const int32_t[::1] cl = np.ascontiguousarray(coll_a, np.int32)
    cdef const int32_t[::1] rk = np.ascontiguousarray(rank_a, np.int32)
    cdef const int32_t[::1] sm = np.ascontiguousarray(stream_a, np.int32)
    cdef int64_t n = en.shape[0], u, i, t, best, seg, compute_ps = 0, comm_ps = 0, length = 0, g, lo, hi
    cdef int32_t NS
    if n == 0:
        return (0, 0, 0, np.zeros(0, np.int64)) if with_path else (0, 0, 0)
    rel_a = np.zeros(n, np.int32)
    cdef int32_t[::1] rel = rel_a
    with nogil:
        t = released_by(sp, si, en, rel, n)        # the last task to finish (argmax: the first of equals)
    gp_a, gm_a, NS = stream_groups(rk, sm, n)      # each group sorted by (start, id) when the walk first needs it
    cdef int64_t[::1] gp = gp_a
    cdef int32_t[::1] gm = gm_a
    sorted_g = np.zeros(len(gp_a) - 1, np.int8)
    cdef int8_t[::1] sg = sorted_g
    start_np = np.asarray(st)
    path = [] if with_path else None
    while t >= 0:
        best = rel[t] - 1
        if sm[t] >= 0 and rk[t] >= 0:      # the task before t on its stream, in (start, id) order
            g = <int64_t>rk[t] * NS + sm[t]
            lo = gp[g]; hi = gp[g + 1]
            if not sg[g]:
                mem = gm_a[lo:hi]
                gm_a[lo:hi] = mem[np.lexsort((mem, start_np[mem]))]
                sg[g] = 1
            while lo < hi:        # binary search for t's place: the first member not before (start[t], t)
                i = (lo + hi) // 2
                u = gm[i]
                if st[u] < st[t] or (st[u] == st[t] and u < t):
                    lo = i + 1
                else:
                    hi = i
            if lo > gp[g] and (best < 0 or en[gm[lo - 1]] > en[best]):
                best = gm[lo - 1]
        seg = en[best] if best >= 0 else 0
        if kd[t] == compute and cl[t] < 0:
            compute_ps += en[t] - st[t]
            comm_ps += st[t] - seg
        else:
            comm_ps += en[t] - seg
        if path is not None:
            path.append(t)
        length += 1
        if length > n:            # times no run gives (a task both before and after another): not a path
            raise ValueError("the critical path walk came back to a task: start/end times inconsistent with the graph")
        t = best
    if with_path:
        return compute_ps, comm_ps, length, np.array(path, np.int64)
    return compute_ps, comm_ps, length


def collective_spans(coll_a, start_a, end_a, int64_t n_coll):
    """(first, last): per collective instance 0..n_coll-1, the earliest start and the latest end of its tasks
    (coll[t] = the instance, -1 none); an instance without tasks keeps INT64_MAX and 0. One pass over the tasks
    (np.minimum.at and np.maximum.at took 1.1 s over a 1024-rank step's 17 M collective tasks). ValueError if a task
    names an instance >= n_coll."""
    cdef const int32_t[::1] cl = np.ascontiguousarray(coll_a, np.int32)
    cdef const int64_t[::1] st = np.ascontiguousarray(start_a, np.int64)
    cdef const int64_t[::1] en = np.ascontiguousarray(end_a, np.int64)
    cdef int64_t t, n = cl.shape[0]
    cdef int32_t c
    cdef bint bad = False
    first_a = np.full(n_coll, INT64_MAX, np.int64)
    last_a = np.zeros(n_coll, np.int64)
    cdef int64_t[::1] first = first_a, last = last_a
    with nogil:
        for t in range(n):
            c = cl[t]
            if c < 0:
                continue
            if c >= n_coll:
                bad = True
                break
            if st[t] < first[c]:
                first[c] = st[t]
            if en[t] > last[c]:
                last[c] = en[t]
    if bad:
        raise ValueError(f"a task names collective instance {cl[t]} of {n_coll}")
    return first_a, last_a


def compute_totals(kind_a, coll_a, rank_a, dur_a, int8_t compute, int8_t reduce, int64_t n_ranks):
    """(busy, reduce_ps): per rank 0..n_ranks-1, the durations of its compute tasks outside collectives added up as
    float64 in task order (np.bincount's weights, bit for bit), and the durations of every local reduction added up
    (int64). One pass over the tasks, no masks. ValueError if a compute task's rank is outside 0..n_ranks-1."""
    cdef const int8_t[::1] kd = np.ascontiguousarray(kind_a, np.int8)
    cdef const int32_t[::1] cl = np.ascontiguousarray(coll_a, np.int32)
    cdef const int32_t[::1] rk = np.ascontiguousarray(rank_a, np.int32)
    cdef const int64_t[::1] du = np.ascontiguousarray(dur_a, np.int64)
    cdef int64_t t, n = kd.shape[0], reduce_ps = 0
    cdef bint bad = False
    busy_a = np.zeros(n_ranks, np.float64)
    cdef double[::1] busy = busy_a
    with nogil:
        for t in range(n):
            if kd[t] == compute and cl[t] < 0:
                if rk[t] < 0 or rk[t] >= n_ranks:
                    bad = True
                    break
                busy[rk[t]] += <double>du[t]
            elif kd[t] == reduce:
                reduce_ps += du[t]
    if bad:
        raise ValueError(f"task {t} is on rank {rk[t]}, outside 0..{n_ranks - 1}")
    return busy_a, reduce_ps


# ================================================================== report: what a stuck run waits for
# For Engine.stuck_report, once after a run that stopped with work pending: every non-empty queue's head (what it
# needs to leave, what it has), and a cycle of credit waits among them if there is one. With the GIL; reads SimC.
WAIT_COLS = ("channel", "vc", "slot", "queued", "xfer", "src", "dst", "in_ch", "in_vc", "needed", "credits", "hold")
HOLD_NONE, HOLD_PIPELINE, HOLD_TAG, HOLD_GRANT = 0, 1, 2, 3     # what else holds a head (besides credits)

cdef dict waiting_heads(SimC* s):
    """One row per non-empty queue (WAIT_COLS, int64 arrays): its output channel, VC and input slot, how many packets
    (injection queues: transfers) it holds, its head's transfer and end ranks, the channel and VC the head arrived on
    (-1: carved at this endpoint), the credits the head needs and those its VC has, and what else holds the head."""
    cdef int32_t ch, idx, nslots, nq, vc, slot, x, n, payload
    cdef int64_t qi
    cdef XferC* xf
    cdef PacketC* pk
    rows = []
    for ch in range(s.n_ch):
        nslots = s.n_slots[s.c[ch].ch_src]
        nq = s.nvc * nslots
        idx = next_bit(&s.q_bits[s.c[ch].qb_base], 0, nq)
        while idx >= 0:
            qi = s.c[ch].q_base + idx
            vc = idx // nslots
            slot = idx - vc * nslots
            n = 0
            x = s.q[qi].head
            if slot == nslots - 1:                        # an injection queue: transfers to carve from
                while x >= 0:
                    n += 1
                    x = s.xf[x].next
                x = s.q[qi].head
                xf = &s.xf[x]
                payload = 0 if xf.kind == 1 else <int32_t>max(0, min(<int64_t>s.maxp_B, xf.avail_B - xf.carved_B))
                hold = (HOLD_TAG if xf.kind == 1 and s.tags_free[xf.src] <= 0 else
                        HOLD_GRANT if xf.kind == 0 and s.e2e_avail[<int64_t>xf.src * s.n_ranks + xf.dst] < payload
                        else HOLD_NONE)
                rows.append((ch, vc, slot, n, x, xf.src, xf.dst, -1, -1, pkt_flits(s, payload + s.hdr_B),
                             s.cvs[cv(s, ch, vc)].cr_limit - s.cvs[cv(s, ch, vc)].cr_used, hold))
            else:                                         # a VOQ: packets that arrived on an input channel
                while x >= 0:
                    n += 1
                    x = s.pk[x].next
                pk = &s.pk[s.q[qi].head]
                xf = &s.xf[pk.xfer]
                rows.append((ch, vc, slot, n, pk.xfer, xf.src, xf.dst, pk.in_ch, pk.vc, pk.flits,
                             s.cvs[cv(s, ch, vc)].cr_limit - s.cvs[cv(s, ch, vc)].cr_used,
                             HOLD_PIPELINE if pk.ready_ps > s.now else HOLD_NONE))
            idx = next_bit(&s.q_bits[s.c[ch].qb_base], idx + 1, nq)
    table = np.array(rows, np.int64).reshape(len(rows), len(WAIT_COLS))
    return {name: table[:, j].copy() for j, name in enumerate(WAIT_COLS)}


def credit_wait_cycle(dict heads, int32_t nvc):
    """Rows of `heads` (waiting_heads) that form a cycle of credit waits, in order: the head of each row arrived on
    the channel and VC the previous row sends on, and needs more credits there than its VC has; [] if no such cycle.
    A depth-first search over the wait-for graph of receive buffers (channel x VC): buffer (in_ch, in_vc) waits for
    buffer (channel, vc) when a head it holds is short of credits for it."""
    in_ch, in_vc, hold = heads["in_ch"], heads["in_vc"], heads["hold"]
    blocked = np.flatnonzero((in_ch >= 0) & (hold == HOLD_NONE) & (heads["credits"] < heads["needed"]))
    src = in_ch[blocked] * nvc + in_vc[blocked]
    dst = heads["channel"][blocked] * nvc + heads["vc"][blocked]
    order = np.lexsort((dst, src))                  # out-edges of each buffer, contiguous and in a fixed order
    src, dst, rows = src[order], dst[order], blocked[order]
    starts = {}
    for i in range(len(src) - 1, -1, -1):
        starts[int(src[i])] = i
    state = {}                                      # buffer -> 1 on the current path, 2 finished
    for root in sorted(starts):
        if root in state:
            continue
        path = [(root, starts[root])]               # (buffer, next out-edge to try)
        along = []                                  # the rows (edges) taken along the path
        state[root] = 1
        while path:
            node, e = path[len(path) - 1]           # (the kernel is compiled with wraparound off)
            if e < len(src) and src[e] == node:
                path[len(path) - 1] = (node, e + 1)
                nxt = int(dst[e])
                if state.get(nxt) == 1:             # back to a buffer on the path: the cycle closes there
                    along.append(int(rows[e]))
                    first = next(i for i, (b, _) in enumerate(path) if b == nxt)
                    return along[first:]
                if nxt not in state:
                    state[nxt] = 1
                    along.append(int(rows[e]))
                    path.append((nxt, starts.get(nxt, len(src))))
            else:
                state[node] = 2
                path.pop()
                if along:
                    along.pop()
    return []
