# ================================================================== report: the critical path of a finished run
# For fabric/report.py: the walk back from the last task to finish, over the task records (successor CSR, kinds,
# ranks, streams) and the run's start/end times, in C. With the GIL; touches no SimC.

cdef tuple predecessors_csr(const int64_t[::1] sp, const int32_t[::1] si, int64_t n):
    """(ptr, idx): the edges counting-sorted by successor, predecessors ascending within each."""
    cdef int64_t E = sp[n], u, i
    pp_a = np.zeros(n + 1, np.int64)
    cdef int64_t[::1] pp = pp_a
    for i in range(E):
        pp[si[i] + 1] += 1
    for i in range(n):
        pp[i + 1] += pp[i]
    pi_a = np.empty(max(E, 1), np.int32)
    cdef int32_t[::1] pi = pi_a
    fill_a = pp_a[:n].copy()
    cdef int64_t[::1] fill = fill_a
    for u in range(n):
        for i in range(sp[u], sp[u + 1]):
            pi[fill[si[i]]] = <int32_t>u
            fill[si[i]] += 1
    return pp_a, pi_a


cdef tuple stream_groups(const int32_t[::1] rk, const int32_t[::1] sm, int64_t n):
    """(ptr, members, streams per rank): the tasks of each (rank, stream) group in id order; group = rank*NS+stream."""
    cdef int32_t NS = max(int(np.asarray(sm).max()) + 1, 1)
    cdef int64_t n_groups = <int64_t>(int(np.asarray(rk).max()) + 1) * NS, t, i, g
    gp_a = np.zeros(n_groups + 1, np.int64)
    cdef int64_t[::1] gp = gp_a
    for t in range(n):
        if sm[t] >= 0 and rk[t] >= 0:
            gp[<int64_t>rk[t] * NS + sm[t] + 1] += 1
    for i in range(n_groups):
        gp[i + 1] += gp[i]
    gm_a = np.empty(max(int(gp[n_groups]), 1), np.int32)
    cdef int32_t[::1] gm = gm_a
    gf_a = gp_a[:n_groups].copy()
    cdef int64_t[::1] gf = gf_a
    for t in range(n):
        if sm[t] >= 0 and rk[t] >= 0:
            g = <int64_t>rk[t] * NS + sm[t]
            gm[gf[g]] = <int32_t>t
            gf[g] += 1
    return gp_a, gm_a, NS


def critical_path_walk(succ_ptr_a, succ_idx_a, start_a, end_a, kind_a, coll_a, rank_a, stream_a, int8_t compute):
    """(compute_ps, comm_ps, tasks) of the critical path, exactly as fabric.report.critical_path defines it: from the
    task that ends last (the first such), step to the constraint that released it, the predecessor that ended last
    (the lowest id among equals) or, if it ended strictly later, the task before it on its stream (same rank and
    stream, the latest (start, id) before the task's own). Time on a compute task outside collectives is compute,
    the wait before it and everything else is exposed communication."""
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
        return 0, 0, 0
    pp_a, pi_a = predecessors_csr(sp, si, n)
    cdef int64_t[::1] pp = pp_a
    cdef int32_t[::1] pi = pi_a
    gp_a, gm_a, NS = stream_groups(rk, sm, n)      # each group sorted by (start, id) when the walk first needs it
    cdef int64_t[::1] gp = gp_a
    cdef int32_t[::1] gm = gm_a
    sorted_g = np.zeros(len(gp_a) - 1, np.int8)
    cdef int8_t[::1] sg = sorted_g
    start_np = np.asarray(st)
    t = 0                                          # the last task to finish (argmax: the first of equals)
    for i in range(1, n):
        if en[i] > en[t]:
            t = i
    while t >= 0:
        best = -1
        for i in range(pp[t], pp[t + 1]):
            u = pi[i]
            if best < 0 or en[u] > en[best]:
                best = u
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
        length += 1
        t = best
    return compute_ps, comm_ps, length
