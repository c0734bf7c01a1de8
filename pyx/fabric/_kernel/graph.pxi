# ================================================================== graph: task-graph construction for taskgraph.py
# What fabric/taskgraph.py's GraphBuilder.build does once per edge (34 M edges for a 1024-rank decode step), in C.
# Pure functions of numpy arrays, with the GIL held between blocks, used before any Engine exists; no SimC.

cdef int edge_block(tuple blk, int64_t n, int64_t[::1] ptr, int32_t[::1] deps, int32_t[::1] idx,
                    bint fill) except -1:
    """One block of edges, counted (fill false: ptr[p + 1] and deps[s]) or placed (fill: idx[ptr[p]++] = s). A block
    is (pred, succ), or (src, dst, first, m, nt): a fragment's edges src -> dst stamped m times, copy i's tasks
    starting at first + i nt. ValueError if an edge names a task outside 0..n-1."""
    cdef const int64_t[::1] a = np.ascontiguousarray(blk[0], np.int64)
    cdef const int64_t[::1] b = np.ascontiguousarray(blk[1], np.int64)
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
