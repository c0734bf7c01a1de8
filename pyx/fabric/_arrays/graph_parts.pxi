# ================================================================== graph parts: a planned graph's size and parts
# One pass each over a built task graph before it runs, in C (16 M transfers, 50 M tasks and edges at 1024 ranks:
# no per-task temporaries): the size of its transfers for fabric/sim.py's estimate (transfer_load), and for
# fabric/parts.py the rank pairs its transfers and dependencies join (rank_pairs), its tasks sorted by part
# (part_order) and each part's own CSR and flow ids (part_csr). Pure functions of numpy arrays.

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
    b (a != b, both ranks), in both directions; dependency[a * R + b] = 1 when a task on rank a precedes one on b.
    ValueError if a task's rank is outside 0..R-1 (such a graph has no parts by rank)."""
    cdef const int8_t[::1] kind = np.ascontiguousarray(kind_a, np.int8)
    cdef const int32_t[::1] rank = np.ascontiguousarray(rank_a, np.int32)
    cdef const int32_t[::1] peer = np.ascontiguousarray(peer_a, np.int32)
    cdef const int64_t[::1] succ_ptr = np.ascontiguousarray(succ_ptr_a, np.int64)
    cdef const int32_t[::1] succ = np.ascontiguousarray(succ_idx_a, np.int32)
    xf_a = np.zeros(n_ranks * n_ranks, np.uint8)
    dep_a = np.zeros(n_ranks * n_ranks, np.uint8)
    cdef uint8_t[::1] xf = xf_a
    cdef uint8_t[::1] dep = dep_a
    cdef int64_t t, e, r, q, bad = -1
    with nogil:
        for t in range(rank.shape[0]):
            if rank[t] < 0 or rank[t] >= n_ranks:
                bad = t
                break
    if bad >= 0:
        raise ValueError(f"task {bad} is on rank {rank[bad]}, outside 0..{n_ranks - 1}")
    if succ_ptr.shape[0] != rank.shape[0] + 1 or kind.shape[0] != rank.shape[0]:
        raise ValueError(f"{rank.shape[0]} ranks, {kind.shape[0]} kinds, {succ_ptr.shape[0]} successor pointers")
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


def part_order(part_of_rank_a, rank_a, kind_a, op_a):
    """For fabric/parts.py, a counting sort of the tasks by their rank's part in two passes (no per-task
    temporaries): (order int64[n]: each part's tasks in task order, part after part; bounds int64[K + 1]: part k is
    order[bounds[k]:bounds[k + 1]]; local int32[n]: each task's place in its part; gx int32[n]: a transfer's index
    among the transfer tasks; gl int32[n]: a load's index among the loads; the number of transfers). gx and gl are
    left unset for the other tasks."""
    cdef const int64_t[::1] part_of_rank = np.ascontiguousarray(part_of_rank_a, np.int64)
    cdef const int32_t[::1] rank = np.ascontiguousarray(rank_a, np.int32)
    cdef const int8_t[::1] kind = np.ascontiguousarray(kind_a, np.int8)
    cdef const int8_t[::1] op = np.ascontiguousarray(op_a, np.int8)
    cdef Py_ssize_t n = kind.shape[0], t
    cdef int64_t K = int(np.max(part_of_rank_a)) + 1 if len(part_of_rank_a) else 1, p, i, nx = 0, nl = 0
    bounds_a = np.zeros(K + 1, np.int64)
    pos_a = np.zeros(K, np.int64)
    order_a = np.empty(n, np.int64)
    local_a = np.empty(n, np.int32)
    gx_a = np.empty(n, np.int32)
    gl_a = np.empty(n, np.int32)
    cdef int64_t[::1] bounds = bounds_a
    cdef int64_t[::1] pos = pos_a
    cdef int64_t[::1] order = order_a
    cdef int32_t[::1] local = local_a
    cdef int32_t[::1] gx = gx_a
    cdef int32_t[::1] gl = gl_a
    with nogil:
        for t in range(n):
            bounds[part_of_rank[rank[t]] + 1] += 1
        for p in range(K):
            bounds[p + 1] += bounds[p]
            pos[p] = bounds[p]
        for t in range(n):
            p = part_of_rank[rank[t]]
            i = pos[p]
            pos[p] += 1
            order[i] = t
            local[t] = <int32_t>(i - bounds[p])
            if kind[t] == T_TRANSFER:
                gx[t] = <int32_t>nx
                nx += 1
                if op[t] == 1:
                    gl[t] = <int32_t>nl
                    nl += 1
    return order_a, bounds_a, local_a, gx_a, gl_a, nx


def part_csr(succ_ptr_a, succ_idx_a, tasks_a, local_a, kind_a, op_a, gx_a, gl_a, int64_t n_xf):
    """For fabric/parts.py, one part's successor CSR in its own task ids and its transfers' flow ids, in one pass
    over its tasks (tasks: its task ids ascending; local, gx, gl, n_xf: part_order's): (succ_ptr int64[m + 1],
    succ_idx int32[...], xf_flow int32[...]: its transfers' gx, then its loads' n_xf + gl, each in task order)."""
    cdef const int64_t[::1] succ_ptr = np.ascontiguousarray(succ_ptr_a, np.int64)
    cdef const int32_t[::1] succ = np.ascontiguousarray(succ_idx_a, np.int32)
    cdef const int64_t[::1] tasks = np.ascontiguousarray(tasks_a, np.int64)
    cdef const int32_t[::1] local = np.ascontiguousarray(local_a, np.int32)
    cdef const int8_t[::1] kind = np.ascontiguousarray(kind_a, np.int8)
    cdef const int8_t[::1] op = np.ascontiguousarray(op_a, np.int8)
    cdef const int32_t[::1] gx = np.ascontiguousarray(gx_a, np.int32)
    cdef const int32_t[::1] gl = np.ascontiguousarray(gl_a, np.int32)
    cdef Py_ssize_t m = tasks.shape[0], i
    cdef int64_t t, e, k = 0, n_edges = 0, n_x = 0, n_l = 0, x = 0, l
    with nogil:
        for i in range(m):
            t = tasks[i]
            n_edges += succ_ptr[t + 1] - succ_ptr[t]
            if kind[t] == T_TRANSFER:
                n_x += 1
                n_l += op[t] == 1
    ptr_a = np.empty(m + 1, np.int64)
    idx_a = np.empty(n_edges, np.int32)
    flow_a = np.empty(n_x + n_l, np.int32)
    cdef int64_t[::1] ptr = ptr_a
    cdef int32_t[::1] idx = idx_a
    cdef int32_t[::1] flow = flow_a
    with nogil:
        l = n_x
        ptr[0] = 0
        for i in range(m):
            t = tasks[i]
            for e in range(succ_ptr[t], succ_ptr[t + 1]):
                idx[k] = local[succ[e]]
                k += 1
            ptr[i + 1] = k
            if kind[t] == T_TRANSFER:
                flow[x] = gx[t]
                x += 1
                if op[t] == 1:
                    flow[l] = <int32_t>(n_xf + gl[t])
                    l += 1
    return ptr_a, idx_a, flow_a
