# ================================================================== critical path: a finished run's report passes
# For fabric/report.py, after a run, one pass each over the task records (successor CSR, kinds, ranks, streams)
# and the run's start/end times, in C: the walk back along the critical path from the last task to finish
# (critical_path_walk), each collective instance's span (collective_spans) and each rank's compute time
# (compute_totals). Pure functions of numpy arrays.

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

