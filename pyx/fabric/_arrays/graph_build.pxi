# ================================================================== graph build: a task graph's columns and edges
# What fabric/taskgraph.py's GraphBuilder.build and fabric/lower.py do once per task or edge (18 M tasks, 34 M
# edges for a 1024-rank decode step), in C: the task columns of stamped fragments (stamp_fragment), the edges
# between a trace's ops (op_dependencies), the successor CSR of the edges (csr_of_blocks, csr_by_source) and its
# transpose (csr_transpose). Pure functions of numpy arrays, used before any Engine exists.

def stamp_fragment(tuple cols, int64_t lo, f_kind_a, f_rank_a, f_peer_a, f_stream_a, f_nbytes_a, f_dur_a, f_op_a,
                   f_apeer_a, f_aoff_a, ranks_a, streams_a, int64_t cid0, int64_t window):
    """Write m copies of a fragment of nt tasks over n group positions into the graph's columns `cols` (kind,
    rank, peer, stream, nbytes, duration_ps, op, coll, src_op, addr: taskgraph's column order and dtypes), copy i at
    tasks lo + i nt ...: in one pass, no per-column temporaries. Copy i runs on the global ranks ranks[i, :] (int32
    [m, n]) with its members' streams streams[i, :]: a task's rank is ranks[i, f_rank], its peer ranks[i, f_peer]
    (-1 where f_peer < 0), its stream streams[i, f_rank] (-1 where f_stream < 0), its collective cid0 + i, src_op -1,
    its address ranks[i, f_apeer] * window + f_aoff (global_addresses with the peer's window added; -1 where
    f_apeer < 0; int64 arithmetic wraps as numpy's does); kind, nbytes, duration_ps and op are the fragment's.
    ValueError if a position is outside 0..n-1 or the columns are too short."""
    cdef int8_t[::1] kind = cols[0]
    cdef int32_t[::1] rank = cols[1]
    cdef int32_t[::1] peer = cols[2]
    cdef int32_t[::1] stream = cols[3]
    cdef int64_t[::1] nbytes = cols[4]
    cdef int64_t[::1] dur = cols[5]
    cdef int8_t[::1] op = cols[6]
    cdef int32_t[::1] coll = cols[7]
    cdef int64_t[::1] src_op = cols[8]
    cdef int64_t[::1] addr = cols[9]
    cdef const int8_t[::1] fk = np.ascontiguousarray(f_kind_a, np.int8)
    cdef const int32_t[::1] fr = np.ascontiguousarray(f_rank_a, np.int32)
    cdef const int32_t[::1] fp = np.ascontiguousarray(f_peer_a, np.int32)
    cdef const int32_t[::1] fs = np.ascontiguousarray(f_stream_a, np.int32)
    cdef const int64_t[::1] fb = np.ascontiguousarray(f_nbytes_a, np.int64)
    cdef const int64_t[::1] fd = np.ascontiguousarray(f_dur_a, np.int64)
    cdef const int8_t[::1] fo = np.ascontiguousarray(f_op_a, np.int8)
    cdef const int32_t[::1] fap = np.ascontiguousarray(f_apeer_a, np.int32)
    cdef const int64_t[::1] fao = np.ascontiguousarray(f_aoff_a, np.int64)
    cdef const int32_t[:, ::1] rk = np.ascontiguousarray(ranks_a, np.int32)
    cdef const int32_t[:, ::1] st = np.ascontiguousarray(streams_a, np.int32)
    cdef int64_t m = rk.shape[0], n = rk.shape[1], nt = fk.shape[0], i, j, t
    cdef int32_t c
    if st.shape[0] != m or st.shape[1] != n:
        raise ValueError(f"streams are {st.shape[0]}x{st.shape[1]}, ranks {m}x{n}")
    if {fr.shape[0], fp.shape[0], fs.shape[0], fb.shape[0], fd.shape[0], fo.shape[0], fap.shape[0],
            fao.shape[0]} != {nt}:
        raise ValueError(f"the fragment's columns are not all {nt} tasks long")
    if nt == 0 or m == 0:
        return
    if lo < 0 or lo + m * nt > min(kind.shape[0], rank.shape[0], peer.shape[0], stream.shape[0], nbytes.shape[0],
                                   dur.shape[0], op.shape[0], coll.shape[0], src_op.shape[0], addr.shape[0]):
        raise ValueError(f"tasks {lo}..{lo + m * nt - 1} do not fit the graph's columns")
    for j in range(nt):
        if not (0 <= fr[j] < n and fp[j] < n and fap[j] < n):
            raise ValueError(f"fragment task {j} names a group position outside 0..{n - 1}")
    with nogil:
        for i in range(m):
            t = lo + i * nt
            c = <int32_t>(cid0 + i)
            memcpy(&kind[t], &fk[0], nt)
            memcpy(&nbytes[t], &fb[0], nt * sizeof(int64_t))
            memcpy(&dur[t], &fd[0], nt * sizeof(int64_t))
            memcpy(&op[t], &fo[0], nt)
            for j in range(nt):
                rank[t + j] = rk[i, fr[j]]
                peer[t + j] = rk[i, fp[j]] if fp[j] >= 0 else -1
                stream[t + j] = st[i, fr[j]] if fs[j] >= 0 else -1
                coll[t + j] = c
                src_op[t + j] = -1
                addr[t + j] = <int64_t>(<uint64_t>rk[i, fap[j]] * <uint64_t>window + <uint64_t>fao[j]) \
                    if fap[j] >= 0 else -1

cdef int edge_block(tuple blk, int64_t n, int64_t[::1] ptr, int32_t[::1] deps, int32_t[::1] idx,
                    bint fill) except -1:
    """One block of edges, counted (fill false: ptr[p + 1] and deps[s]) or placed (fill: idx[ptr[p]++] = s). A block
    is (pred, succ), or (src, dst, first, m, nt): a fragment's edges src -> dst stamped m times, copy i's tasks
    starting at first + i nt; int64 arrays. ValueError if an edge names a task outside 0..n-1."""
    cdef const int64_t[::1] a = blk[0]
    cdef const int64_t[::1] b = blk[1]
    cdef int64_t first = 0, m = 1, nt = 0, i, e, k = a.shape[0], base, p = 0, s = 0
    cdef bint bad = False
    if b.shape[0] != k:
        raise ValueError(f"{k} predecessors but {b.shape[0]} successors")
    if len(blk) == 5:
        first, m, nt = blk[2], blk[3], blk[4]
    with nogil:
        for i in range(m):
            base = first + i * nt
            for e in range(k):
                p = a[e] + base
                s = b[e] + base
                if fill:
                    idx[ptr[p]] = <int32_t>s
                    ptr[p] += 1
                elif p < 0 or p >= n or s < 0 or s >= n:
                    bad = True
                    break
                else:
                    ptr[p + 1] += 1
                    deps[s] += 1
            if bad:
                break
    if bad:
        raise ValueError(f"an edge ({p} -> {s}) names a task outside 0..{n - 1}")
    return 0


def csr_of_blocks(list blocks, int64_t n):
    """(succ_ptr int64[n+1], succ_idx int32[E], n_deps int32[n]) of the edges the blocks list, in order (see
    edge_block: a fragment's stamped copies are expanded here, never as arrays): each task's successors in the
    order its edges are listed, exactly what a stable sort of the listed edges by predecessor gives, by a counting
    sort in two passes. ValueError if an edge names a task outside 0..n-1."""
    blocks = [(np.ascontiguousarray(b[0], np.int64), np.ascontiguousarray(b[1], np.int64)) + tuple(b[2:])
              for b in blocks]
    ptr_a = np.zeros(n + 1, np.int64)
    deps_a = np.zeros(n, np.int32)
    cdef int64_t[::1] ptr = ptr_a
    cdef int32_t[::1] deps = deps_a
    cdef int64_t p
    for blk in blocks:
        edge_block(blk, n, ptr, deps, None, False)
    with nogil:
        for p in range(n):
            ptr[p + 1] += ptr[p]
    idx_a = np.empty(ptr[n], np.int32)
    cdef int32_t[::1] idx = idx_a
    for blk in blocks:                          # ptr[p] walks through p's slots, then holds p + 1's start
        edge_block(blk, n, ptr, deps, idx, True)
    with nogil:
        for p in range(n, 0, -1):               # shift back: ptr[p] = start of p
            ptr[p] = ptr[p - 1]
        ptr[0] = 0
    return ptr_a, idx_a, deps_a


def op_dependencies(n_ops_a, dep_cnt_a, dep_idx_a, stream_a, bint stream_order, exit_a, entry_a):
    """The dependencies between a trace's ops as task edges (fabric/lower.py): op s (ops numbered rank by rank,
    n_ops[r] on rank r) depends on the ops its dep_cnt[s] entries of dep_idx name (indices into its rank's table)
    and, with stream_order, on the previous op of its rank on the same stream. Each distinct (p, s) once, ordered by
    p then s (np.unique of p * G + s), as task ids (exit[p], entry[s]), int64 arrays. Returns (pred, succ, -1), or
    (None, None, s) for the first op s whose dependency is outside its rank's table. ValueError if the counts do not
    cover dep_idx."""
    cdef const int64_t[::1] n_ops = np.ascontiguousarray(n_ops_a, np.int64)
    cdef const int64_t[::1] cnt = np.ascontiguousarray(dep_cnt_a, np.int64)
    cdef const int64_t[::1] dep = np.ascontiguousarray(dep_idx_a, np.int64)
    cdef const int32_t[::1] stream = np.ascontiguousarray(stream_a, np.int32)
    cdef const int64_t[::1] exit_ = np.ascontiguousarray(exit_a, np.int64)
    cdef const int64_t[::1] entry = np.ascontiguousarray(entry_a, np.int64)
    cdef int64_t R = n_ops.shape[0], G = cnt.shape[0], E = dep.shape[0], r, s, k, lo, hi, p, q, e, most = 0, total = 0
    cdef int64_t cap = 1, h, bad = -1
    for r in range(R):
        if n_ops[r] < 0:
            raise ValueError(f"rank {r} has {n_ops[r]} ops")
        total += n_ops[r]
        most = max(most, n_ops[r])
    if total != G or stream.shape[0] != G or exit_.shape[0] != G or entry.shape[0] != G:
        raise ValueError(f"{total} ops over the ranks, {G} dependency counts, {stream.shape[0]} streams")
    k = 0
    for s in range(G):
        if cnt[s] < 0:
            raise ValueError(f"op {s} has {cnt[s]} dependencies")
        k += cnt[s]
    if k != E:
        raise ValueError(f"the dependency counts add up to {k}, but {E} dependencies are listed")
    if G >= 1 << 31:
        raise ValueError(f"{G} ops: ops are numbered with 32 bits")
    while cap < 2 * most:
        cap *= 2
    # the previous op on each op's (rank, stream): an open-addressing table of streams per rank (a slot is live
    # when owner == the rank: nothing to clear between ranks)
    prev_a = np.full(G, -1, np.int32)
    owner_a = np.full(cap if stream_order else 1, -1, np.int64)
    keys_a = np.empty(cap if stream_order else 1, np.int32)
    last_a = np.empty(cap if stream_order else 1, np.int64)
    ptr_a = np.zeros(G + 1, np.int64)
    cdef int64_t[::1] owner = owner_a, last = last_a, ptr = ptr_a
    cdef int32_t[::1] prev = prev_a, keys = keys_a
    with nogil:
        hi = 0
        e = 0
        for r in range(R):              # pass 1: check, previous op per stream, count each predecessor's edges
            lo = hi
            hi = lo + n_ops[r]
            for s in range(lo, hi):
                for k in range(e, e + cnt[s]):
                    if dep[k] < 0 or dep[k] >= n_ops[r]:
                        bad = s
                        break
                    ptr[lo + dep[k] + 1] += 1
                e += cnt[s]
                if bad >= 0:
                    break
                if stream_order:
                    h = (<uint32_t>stream[s] * <uint64_t>0x9E3779B97F4A7C15) >> 32 & (cap - 1)
                    while owner[h] == r and keys[h] != stream[s]:
                        h = (h + 1) & (cap - 1)
                    if owner[h] == r:
                        prev[s] = <int32_t>last[h]
                        ptr[last[h] + 1] += 1
                    owner[h] = r
                    keys[h] = stream[s]
                    last[h] = s
            if bad >= 0:
                break
    if bad >= 0:
        return None, None, bad
    del owner_a, keys_a, last_a
    with nogil:
        for p in range(G):
            ptr[p + 1] += ptr[p]
    idx_a = np.empty(ptr[G], np.int32)
    fill_a = ptr_a[:G].copy()
    cdef int32_t[::1] idx = idx_a
    cdef int64_t[::1] fill = fill_a
    with nogil:
        hi = 0
        e = 0
        for r in range(R):              # pass 2: each predecessor's successors, ascending, each once
            lo = hi
            hi = lo + n_ops[r]
            for s in range(lo, hi):
                for k in range(e, e + cnt[s] + 1):
                    p = (lo + dep[k]) if k < e + cnt[s] else prev[s]
                    if p >= 0 and not (fill[p] > ptr[p] and idx[fill[p] - 1] == s):
                        idx[fill[p]] = <int32_t>s
                        fill[p] += 1
                e += cnt[s]
        q = 0
        for p in range(G):
            q += fill[p] - ptr[p]
    pred_a = np.empty(q, np.int64)
    succ_a = np.empty(q, np.int64)
    cdef int64_t[::1] pred = pred_a, succ = succ_a
    with nogil:
        q = 0
        for p in range(G):
            for k in range(ptr[p], fill[p]):
                pred[q] = exit_[p]
                succ[q] = entry[idx[k]]
                q += 1
    return pred_a, succ_a, -1


def csr_by_source(pred, succ, int64_t n):
    """csr_of_blocks of one block of edges pred[e] -> succ[e]."""
    return csr_of_blocks([(pred, succ)], n)


def csr_transpose(ptr_a, idx_a, int64_t n):
    """The predecessor CSR (ptr int64[n+1], idx int64) of a successor CSR (ptr, idx) over tasks 0..n-1: each
    task's predecessors in ascending order, what a stable sort of the edges by successor gives, in two passes
    without an edge list. ValueError if it is not a CSR over 0..n-1."""
    cdef const int64_t[::1] ptr = np.ascontiguousarray(ptr_a, np.int64)
    cdef const int32_t[::1] idx = np.ascontiguousarray(idx_a, np.int32)
    cdef int64_t p, e, E = idx.shape[0]
    cdef bint bad = ptr.shape[0] != n + 1 or ptr[0] != 0 or ptr[n] != E
    out_ptr_a = np.zeros(n + 1, np.int64)
    out_a = np.empty(E, np.int64)
    cdef int64_t[::1] out_ptr = out_ptr_a, out = out_a
    with nogil:
        p = 0
        while not bad and p < n:
            bad = ptr[p + 1] < ptr[p] or ptr[p + 1] > E
            p += 1
        e = 0
        while not bad and e < E:
            bad = idx[e] < 0 or idx[e] >= n
            if not bad:
                out_ptr[idx[e] + 1] += 1
            e += 1
    if bad:
        raise ValueError(f"not a successor CSR over tasks 0..{n - 1}")
    with nogil:
        for p in range(n):
            out_ptr[p + 1] += out_ptr[p]
        for p in range(n):                      # out_ptr[s] walks through s's slots, then holds s + 1's start
            for e in range(ptr[p], ptr[p + 1]):
                out[out_ptr[idx[e]]] = p
                out_ptr[idx[e]] += 1
        for p in range(n, 0, -1):
            out_ptr[p] = out_ptr[p - 1]
        out_ptr[0] = 0
    return out_ptr_a, out_a
