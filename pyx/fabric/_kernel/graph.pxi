# ================================================================== graph: task-graph construction for taskgraph.py
# What fabric/taskgraph.py's GraphBuilder.build does once per edge (34 M edges for a 1024-rank decode step), in C.
# Pure functions of numpy arrays, used before any Engine exists (no SimC): the CSR of the edges, and the size of
# the transfers for fabric/sim.py's estimate.

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


def transfer_load(kind_a, op_a, nbytes_a, rank_a, peer_a, duration_a, pair_ptr_a, path_ptr_a, int64_t n_ranks,
                  int64_t payload_B, int64_t mrrs_B):
    """For fabric/sim.py's estimate, one pass over a graph's tasks (16 M transfers at 1024 ranks: no per-transfer
    temporaries): (packets, packet_hops, transfer bytes, transfers, busy ps). A transfer of b = max(nbytes, 0)
    bytes is ceil(b / payload_B) packets, a load ceil(b / mrrs_B) read requests more, each crossing the hops of its
    pair's first route (ends clipped to the ranks; at least one hop; pair_ptr None: one); busy ps is the sum of the
    tasks' durations (negative ones as 0). Sums in float64 (no overflow on absurd sizes)."""
    cdef const int8_t[::1] kind = np.ascontiguousarray(kind_a, np.int8)
    cdef const int8_t[::1] op = np.ascontiguousarray(op_a, np.int8)
    cdef const int64_t[::1] nbytes = np.ascontiguousarray(nbytes_a, np.int64)
    cdef const int32_t[::1] rank = np.ascontiguousarray(rank_a, np.int32)
    cdef const int32_t[::1] peer = np.ascontiguousarray(peer_a, np.int32)
    cdef const int64_t[::1] dur = np.ascontiguousarray(duration_a, np.int64)
    cdef bint routed = pair_ptr_a is not None and path_ptr_a is not None and len(path_ptr_a) >= 2
    cdef const int64_t[::1] pair_ptr = np.ascontiguousarray(pair_ptr_a if routed else np.zeros(1), np.int64)
    cdef const int64_t[::1] path_ptr = np.ascontiguousarray(path_ptr_a if routed else np.zeros(1), np.int64)
    cdef double packets = 0.0, hops_total = 0.0, total_B = 0.0, busy = 0.0, b, pk, hops
    cdef int64_t t, n_xfer = 0, src, dst, first, last_path = path_ptr.shape[0] - 2
    with nogil:
        for t in range(kind.shape[0]):
            if dur[t] > 0:
                busy += <double>dur[t]
            if kind[t] != T_TRANSFER:
                continue
            n_xfer += 1
            b = <double>nbytes[t] if nbytes[t] > 0 else 0.0
            pk = ceil(b / payload_B) + (ceil(b / mrrs_B) if op[t] == 1 else 0.0)
            packets += pk
            total_B += b
            hops = 1.0
            if routed:
                src = min(max(<int64_t>rank[t], 0), n_ranks - 1)
                dst = min(max(<int64_t>peer[t], 0), n_ranks - 1)
                first = min(pair_ptr[src * n_ranks + dst], last_path)
                hops = max(<double>(path_ptr[first + 1] - path_ptr[first]), 1.0)
            hops_total += pk * hops
    return packets, hops_total, total_B, n_xfer, busy


def rank_pairs(kind_a, rank_a, peer_a, succ_ptr_a, succ_idx_a, int64_t n_ranks):
    """For fabric/parts.py, one pass over a graph's tasks and edges (50 M at 1024 ranks: no per-edge temporaries):
    (transfer pairs, dependency pairs), uint8[R * R] each. transfer[a * R + b] = 1 when a transfer joins ranks a and
    b (a != b, both ranks), in both directions; dependency[a * R + b] = 1 when a task on rank a precedes one on b."""
    cdef const int8_t[::1] kind = np.ascontiguousarray(kind_a, np.int8)
    cdef const int32_t[::1] rank = np.ascontiguousarray(rank_a, np.int32)
    cdef const int32_t[::1] peer = np.ascontiguousarray(peer_a, np.int32)
    cdef const int64_t[::1] succ_ptr = np.ascontiguousarray(succ_ptr_a, np.int64)
    cdef const int32_t[::1] succ = np.ascontiguousarray(succ_idx_a, np.int32)
    xf_a = np.zeros(n_ranks * n_ranks, np.uint8)
    dep_a = np.zeros(n_ranks * n_ranks, np.uint8)
    cdef uint8_t[::1] xf = xf_a
    cdef uint8_t[::1] dep = dep_a
    cdef int64_t t, e, r, q
    with nogil:
        for t in range(kind.shape[0]):
            r = rank[t]
            if kind[t] == T_TRANSFER:
                q = peer[t]
                if 0 <= q < n_ranks and q != r:
                    xf[r * n_ranks + q] = 1
                    xf[q * n_ranks + r] = 1
            for e in range(succ_ptr[t], succ_ptr[t + 1]):
                dep[r * n_ranks + rank[succ[e]]] = 1
    return xf_a, dep_a
