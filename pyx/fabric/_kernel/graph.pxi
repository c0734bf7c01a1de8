# ================================================================== graph: task-graph construction for taskgraph.py
# What fabric/taskgraph.py's GraphBuilder.build does once per edge (34 M edges for a 1024-rank decode step), in C.
# A pure function of numpy arrays, with the GIL, used before any Engine exists; it touches no SimC.

def csr_by_source(pred_a, succ_a, int64_t n):
    """(succ_ptr int64[n+1], succ_idx int32[E], n_deps int32[n]) of the edges pred[e] -> succ[e] over tasks 0..n-1:
    each task's successors in the order its edges are listed, exactly what a stable sort of the edges by
    predecessor gives (np.argsort(pred, kind="stable")), by a counting sort: two passes, no int64 order array.
    ValueError if an edge names a task outside 0..n-1."""
    cdef const int32_t[::1] pr = np.ascontiguousarray(pred_a, np.int32)
    cdef const int32_t[::1] su = np.ascontiguousarray(succ_a, np.int32)
    cdef int64_t E = pr.shape[0], e, p, s, bad = -1
    if su.shape[0] != E:
        raise ValueError(f"{E} predecessors but {su.shape[0]} successors")
    ptr_a = np.zeros(n + 1, np.int64)
    deps_a = np.zeros(n, np.int32)
    idx_a = np.empty(E, np.int32)
    cdef int64_t[::1] ptr = ptr_a
    cdef int32_t[::1] deps = deps_a, idx = idx_a
    with nogil:
        for e in range(E):
            p = pr[e]
            s = su[e]
            if p < 0 or p >= n or s < 0 or s >= n:
                bad = e
                break
            ptr[p + 1] += 1
            deps[s] += 1
    if bad >= 0:
        raise ValueError(f"edge {bad} ({pr[bad]} -> {su[bad]}) names a task outside 0..{n - 1}")
    with nogil:
        for p in range(n):
            ptr[p + 1] += ptr[p]
        for e in range(E):                     # ptr[p] walks through p's slots, then holds p + 1's start
            p = pr[e]
            idx[ptr[p]] = su[e]
            ptr[p] += 1
        for p in range(n, 0, -1):              # shift back: ptr[p] = start of p
            ptr[p] = ptr[p - 1]
        ptr[0] = 0
    return ptr_a, idx_a, deps_a
