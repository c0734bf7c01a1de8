# ================================================================== route tables: for the fabric manager
# The loops of fabric/routing.py's dimension-order routing that run once per router pair or per route entry
# (262 k router pairs on an 8x8x8 mesh, ~15 M route entries at 1024 ranks), the routes' channel dependencies (the
# deadlock-freedom proof), and fabric/phy.py's per-pair round trips over the routes (flow control's window sizing),
# in C. Pure functions of numpy arrays, with the GIL, used before any Engine exists. The Python reference is the
# docstring of each function; fabric/routing.py keeps the definitions of what a route is.

cdef inline int32_t dim_options(int32_t k, int64_t delta, bint wrap, int32_t* step, int32_t* steps) noexcept:
    """The ways along one dimension from coordinate c to c + delta: (direction, hops) into step/steps; returns how
    many (1, or 2 when both ways round a ring are equally short)."""
    cdef int64_t fwd, back
    cdef int32_t n = 0
    if delta == 0:
        step[0] = 0; steps[0] = 0
        return 1
    if not wrap:
        step[0] = 1 if delta > 0 else -1; steps[0] = <int32_t>(delta if delta > 0 else -delta)
        return 1
    fwd = delta % k
    if fwd < 0:
        fwd += k
    back = k - fwd
    if fwd <= back:
        step[n] = 1; steps[n] = <int32_t>fwd; n += 1
    if back <= fwd:
        step[n] = -1; steps[n] = <int32_t>back; n += 1
    return n


def dor_router_candidates(int32_t X, int32_t Y, int32_t Z, wrap, bint datelines, nb_ch_a, nb_n_a, int32_t width):
    """Candidate router-level paths for every router pair (a, b) of an X x Y x Z mesh, as fabric.routing's
    _router_candidates defines them: per lane (width if a != b, else 1), every combination of the per-dimension
    alternatives (the shorter way round a ring, both when they tie), hops in x, then y, then z; a wrap-around
    channel raises the VC level to 1 (datelines) until the next dimension starts.
    nb_ch[r, 2 * dim + (step < 0), k]: the k-th lane channel from router r to its neighbour one step along dim
    (nb_n[r, 2 * dim + (step < 0)] of them; 0: no link). Returns cnt[S*S], start[S*S], cand_ptr, cand_ch, cand_vcl."""
    cdef int32_t S = X * Y * Z
    cdef int32_t[:, :, ::1] nb_ch = np.ascontiguousarray(nb_ch_a, np.int32)
    cdef int32_t[:, ::1] nb_n = np.ascontiguousarray(nb_n_a, np.int32)
    cdef int32_t dims[3]
    cdef bint wr[3]
    cdef int32_t ca[3]
    cdef int32_t cb[3]
    cdef int32_t cur[3]
    cdef int32_t nopt[3]
    cdef int32_t ostep[3][2]
    cdef int32_t osteps[3][2]
    cdef int32_t sel[3]
    dims[0] = X; dims[1] = Y; dims[2] = Z
    for d in range(3):
        wr[d] = bool(wrap[d])
    cnt_a = np.zeros(<int64_t>S * S, np.int64)
    start_a = np.zeros(<int64_t>S * S, np.int64)
    cdef int64_t[::1] cnt = cnt_a, start = start_a
    cdef int64_t n_cand = 0, n_hops = 0, a, b
    cdef int32_t lane, nl, dim, st, steps, level, u, nxt, slot, m, i0, i1, i2, t
    cdef int pss
    cdef int64_t[::1] cptr
    cdef int32_t[::1] cch
    cdef int8_t[::1] cvl
    cand_ptr_a = cand_ch_a = cand_vcl_a = None
    for pss in range(2):        # pass 0 counts, pass 1 fills
        if pss == 1:
            cand_ptr_a = np.zeros(n_cand + 1, np.int64)
            cand_ch_a = np.empty(n_hops, np.int32)
            cand_vcl_a = np.empty(n_hops, np.int8)
            cptr = cand_ptr_a; cch = cand_ch_a; cvl = cand_vcl_a
            n_cand = 0; n_hops = 0
        for a in range(S):
            ca[0] = a % X; ca[1] = (a // X) % Y; ca[2] = a // (X * Y)
            for b in range(S):
                cb[0] = b % X; cb[1] = (b // X) % Y; cb[2] = b // (X * Y)
                for dim in range(3):
                    nopt[dim] = dim_options(dims[dim], cb[dim] - ca[dim], wr[dim], &ostep[dim][0], &osteps[dim][0])
                start[a * S + b] = n_cand
                m = 0
                nl = width if a != b else 1
                for lane in range(nl):
                    for i0 in range(nopt[0]):
                        for i1 in range(nopt[1]):
                            for i2 in range(nopt[2]):
                                sel[0] = i0; sel[1] = i1; sel[2] = i2
                                cur[0] = ca[0]; cur[1] = ca[1]; cur[2] = ca[2]
                                for dim in range(3):
                                    st = ostep[dim][sel[dim]]; steps = osteps[dim][sel[dim]]
                                    level = 0
                                    for t in range(steps):
                                        u = cur[0] + X * (cur[1] + Y * cur[2])
                                        nxt = (cur[dim] + st + dims[dim]) % dims[dim]
                                        if wr[dim] and datelines and abs(nxt - cur[dim]) != 1:
                                            level = 1
                                        cur[dim] = nxt
                                        if pss == 1:
                                            slot = 2 * dim + (1 if st < 0 else 0)
                                            if nb_n[u, slot] <= 0:
                                                raise KeyError(f"no link from router {u} along dimension {dim}")
                                            cch[n_hops] = nb_ch[u, slot, lane % nb_n[u, slot]]
                                            cvl[n_hops] = level
                                        n_hops += 1
                                n_cand += 1
                                if pss == 1:
                                    cptr[n_cand] = n_hops
                                m += 1
                cnt[a * S + b] = m
    return cnt_a, start_a, cand_ptr_a, cand_ch_a, cand_vcl_a


cdef inline int64_t gcd64(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t t
    while b:
        t = a % b
        a = b
        b = t
    return a


def dor_expand_paths(int32_t R, int32_t S, rank_router_a, int32_t N, cnt_a, start_a, cptr_a, cch_a, cvcl_a,
                     up_a, down_a):
    """Rank-pair paths from router candidates, as fabric.routing's _route_dor defines them: pair (s, d), q = s * R + d,
    has K = lcm(cnt[ab], N) paths (cnt[ab] without ports, none when s == d; ab = router(s) * S + router(d)); path j
    takes router candidate start[ab] + (j + s + d) % cnt[ab] between a first hop up[s, (j + d) % N] and a last hop
    down[d, (j + s) % N] (none when N == 0), VC level 0 on those. Returns pair_ptr, path_ptr, path_ch, path_vcl."""
    cdef int32_t[::1] rr = np.ascontiguousarray(rank_router_a, np.int32)
    cdef const int64_t[::1] cnt = np.ascontiguousarray(cnt_a, np.int64)
    cdef const int64_t[::1] start = np.ascontiguousarray(start_a, np.int64)
    cdef const int64_t[::1] cptr = np.ascontiguousarray(cptr_a, np.int64)
    cdef const int32_t[::1] cch = np.ascontiguousarray(cch_a, np.int32)
    cdef const int8_t[::1] cvcl = np.ascontiguousarray(cvcl_a, np.int8)
    cdef int32_t[:, ::1] up
    cdef int32_t[:, ::1] down
    cdef int64_t P = 0, H = 0, p, q, j, K, ab, m, rc, h, pos
    cdef int32_t s, d, extra = 2 if N > 0 else 0
    if N > 0:
        up = np.ascontiguousarray(up_a, np.int32)
        down = np.ascontiguousarray(down_a, np.int32)
    pair_ptr_a = np.empty(<int64_t>R * R + 1, np.int64)
    cdef int64_t[::1] pair_ptr = pair_ptr_a
    with nogil:
        pair_ptr[0] = 0
        for q in range(<int64_t>R * R):    # pass 0: paths per pair
            s = <int32_t>(q // R); d = <int32_t>(q % R)
            m = cnt[<int64_t>rr[s] * S + rr[d]]
            K = 0 if s == d else (m // gcd64(m, N) * N if N > 0 and m > 0 else m)
            P += K
            pair_ptr[q + 1] = P
    path_ptr_a = np.empty(P + 1, np.int64)
    cdef int64_t[::1] path_ptr = path_ptr_a
    with nogil:
        p = 0
        path_ptr[0] = 0
        for q in range(<int64_t>R * R):    # pass 1: path lengths
            s = <int32_t>(q // R); d = <int32_t>(q % R)
            K = pair_ptr[q + 1] - pair_ptr[q]
            if K == 0:
                continue
            ab = <int64_t>rr[s] * S + rr[d]
            m = cnt[ab]
            for j in range(K):
                rc = start[ab] + (j + s + d) % m
                H += cptr[rc + 1] - cptr[rc] + extra
                p += 1
                path_ptr[p] = H
    path_ch_a = np.empty(H, np.int32)
    path_vcl_a = np.empty(H, np.int8)
    cdef int32_t[::1] pch = path_ch_a
    cdef int8_t[::1] pvl = path_vcl_a
    with nogil:
        p = 0
        for q in range(<int64_t>R * R):    # pass 2: entries
            s = <int32_t>(q // R); d = <int32_t>(q % R)
            K = pair_ptr[q + 1] - pair_ptr[q]
            if K == 0:
                continue
            ab = <int64_t>rr[s] * S + rr[d]
            m = cnt[ab]
            for j in range(K):
                rc = start[ab] + (j + s + d) % m
                pos = path_ptr[p]
                if N > 0:
                    pch[pos] = up[s, (j + d) % N]
                    pvl[pos] = 0
                    pos += 1
                for h in range(cptr[rc], cptr[rc + 1]):
                    pch[pos] = cch[h]
                    pvl[pos] = cvcl[h]
                    pos += 1
                if N > 0:
                    pch[pos] = down[d, (j + s) % N]
                    pvl[pos] = 0
                p += 1
    return pair_ptr_a, path_ptr_a, path_ch_a, path_vcl_a


def route_dependencies(path_ptr_a, path_ch_a, path_vcl_a, int64_t levels, int64_t n_ch):
    """The channel-dependency graph of the routes (fabric/routing.py's dependency_edges, deadlock freedom): every
    pair of consecutive hops of a path as a key a * nv + b of virtual channels (channel x levels + VC level,
    nv = n_ch x levels), each once, ascending. A bit per possible key where nv^2 <= 2^30 (marking is linear where
    sorting ~15 M keys is not; sd200-1024's 28 M keys are 3.5 MB of bits, mostly in cache), else the keys sorted."""
    cdef const int64_t[::1] ptr = np.ascontiguousarray(path_ptr_a, np.int64)
    cdef const int32_t[::1] ch = np.ascontiguousarray(path_ch_a, np.int32)
    cdef const int8_t[::1] vcl = np.ascontiguousarray(path_vcl_a, np.int8)
    cdef int64_t nv = n_ch * levels, p, h, n = 0, k, w
    cdef uint64_t x
    cdef bint mark = nv * nv <= (1 << 30)
    bits_a = np.zeros((nv * nv + 63) // 64 if mark else 0, np.uint64)
    cdef uint64_t[::1] bits = bits_a
    if not mark:
        for p in range(ptr.shape[0] - 1):
            n += max(ptr[p + 1] - ptr[p] - 1, 0)
    keys_a = np.empty(n, np.int64)
    cdef int64_t[::1] keys = keys_a
    n = 0
    with nogil:
        for p in range(ptr.shape[0] - 1):
            for h in range(ptr[p], ptr[p + 1] - 1):
                k = (ch[h] * levels + vcl[h]) * nv + ch[h + 1] * levels + vcl[h + 1]
                if mark:
                    bits[k >> 6] |= (<uint64_t>1) << (k & 63)
                else:
                    keys[n] = k
                    n += 1
    if not mark:
        return np.unique(keys_a)
    with nogil:
        for w in range(bits.shape[0]):      # count, then list the set bits in ascending order
            x = bits[w]
            while x:
                x &= x - 1
                n += 1
    keys_a = np.empty(n, np.int64)
    keys = keys_a
    with nogil:
        n = 0
        for w in range(bits.shape[0]):
            x = bits[w]
            while x:
                keys[n] = w * 64 + __builtin_ctzll(x)
                n += 1
                x &= x - 1
    return keys_a


cdef double pairwise_sum(const double* a, int64_t n) noexcept nogil:
    """numpy's pairwise sum (its add reduction's inner loop), bit for bit: under 8 terms in order from 0.0; up to
    128 in 8 running sums; above that, two halves split at a multiple of 8."""
    cdef double r[8]
    cdef double res = 0.0
    cdef int64_t i, j, half
    if n < 8:
        for i in range(n):
            res += a[i]
        return res
    if n <= 128:
        for j in range(8):
            r[j] = a[j]
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += a[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += a[i]
            i += 1
        return res
    half = n // 2
    half -= half % 8
    return pairwise_sum(a, half) + pairwise_sum(a + half, n - half)


cdef inline double segment_sum(const double* a, int64_t n) noexcept nogil:
    """np.add.reduceat's sum of a segment of n >= 1 terms: the first plus the pairwise sum of the rest."""
    return a[0] + pairwise_sum(a + 1, n - 1) if n > 1 else a[0]


cdef inline double distinct_rate(const int32_t* chs, int64_t k, int32_t* seen, const double* rate) noexcept nogil:
    """The rates of the distinct channels among chs[0..k-1], summed from 0.0 in ascending channel order."""
    cdef int64_t i, j, m = 0
    cdef int32_t c
    cdef double tot = 0.0
    for i in range(k):                          # insertion into the sorted distinct list seen[0..m-1]
        c = chs[i]
        j = m
        while j > 0 and seen[j - 1] > c:
            j -= 1
        if j > 0 and seen[j - 1] == c:
            continue
        memmove(&seen[j + 1], &seen[j], (m - j) * sizeof(int32_t))
        seen[j] = c
        m += 1
    for i in range(m):
        tot += rate[seen[i]]
    return tot


def pair_round_trips(pair_ptr_a, path_ptr_a, path_ch_a, lat_a, node_lat_a, ch_dst_a, flit_a, T_a, rate_a):
    """fabric/phy.py's e2e_round_trips per rank pair, in one pass over the routes (~15 M entries at 1024 ranks) with
    numpy's float arithmetic bit for bit (reduceat's pairwise sums, bincount's ascending order): per pair (R x R
    arrays) the largest D (delivery) and G (grant) over its candidate paths, and its payload rate B: the distinct
    first channels' rates or the distinct last channels', whichever is less (0 without a non-empty path)."""
    cdef const int64_t[::1] pair_ptr = np.ascontiguousarray(pair_ptr_a, np.int64)
    cdef const int64_t[::1] path_ptr = np.ascontiguousarray(path_ptr_a, np.int64)
    cdef const int32_t[::1] path_ch = np.ascontiguousarray(path_ch_a, np.int32)
    cdef const double[::1] lat = np.ascontiguousarray(lat_a, np.float64)
    cdef const double[::1] node_lat = np.ascontiguousarray(node_lat_a, np.float64)
    cdef const int32_t[::1] ch_dst = np.ascontiguousarray(ch_dst_a, np.int32)
    cdef const double[::1] flit = np.ascontiguousarray(flit_a, np.float64)
    cdef const double[::1] T = np.ascontiguousarray(T_a, np.float64)
    cdef const double[::1] rate = np.ascontiguousarray(rate_a, np.float64)
    cdef int64_t n_pairs = pair_ptr.shape[0] - 1, k, p, h, n, i, m, most_hops = 1, most_paths = 1
    cdef double ser, cut, lat_sum, node_sum, flit_sum, D, G, dmax, gmax, b
    cdef int32_t c
    lens = np.diff(path_ptr_a)
    if len(lens):
        most_hops = max(int(lens.max()), 1)
        most_paths = max(int(np.diff(pair_ptr_a).max()), 1)
    Dp_a, Gp_a, B_a = np.zeros(n_pairs), np.zeros(n_pairs), np.zeros(n_pairs)
    cdef double[::1] Dp = Dp_a, Gp = Gp_a, B = B_a
    hop_a = np.empty((4, most_hops))            # one path's hop latencies, nodes, first flits, flits
    cdef double[:, ::1] hop = hop_a
    ends_a = np.empty((3, most_paths), np.int32)     # a pair's first and last channels, and the distinct ones
    cdef int32_t[:, ::1] ends = ends_a
    with nogil:
        for k in range(n_pairs):
            if pair_ptr[k + 1] == pair_ptr[k]:
                continue
            dmax = gmax = -INFINITY
            m = 0
            for p in range(pair_ptr[k], pair_ptr[k + 1]):
                n = path_ptr[p + 1] - path_ptr[p]
                D = G = 0.0
                if n > 0:
                    ser = -INFINITY
                    for i in range(n):
                        c = path_ch[path_ptr[p] + i]
                        hop[0, i] = lat[c]
                        hop[1, i] = node_lat[ch_dst[c]]
                        hop[2, i] = T[c] if T[c] < flit[c] else flit[c]
                        hop[3, i] = flit[c]
                        if T[c] > ser:
                            ser = T[c]
                    lat_sum = segment_sum(&hop[0, 0], n)
                    node_sum = segment_sum(&hop[1, 0], n) - hop[1, n - 1]     # nodes crossed, not the destination
                    cut = segment_sum(&hop[2, 0], n) - hop[2, 0]             # a flit per later hop (cut-through)
                    flit_sum = segment_sum(&hop[3, 0], n)
                    D = ser + cut + lat_sum + node_sum
                    G = lat_sum + flit_sum + node_sum
                    ends[0, m] = path_ch[path_ptr[p]]
                    ends[1, m] = path_ch[path_ptr[p + 1] - 1]
                    m += 1
                if D > dmax:
                    dmax = D
                if G > gmax:
                    gmax = G
            Dp[k] = dmax
            Gp[k] = gmax
            b = distinct_rate(&ends[0, 0], m, &ends[2, 0], &rate[0])
            B[k] = min(b, distinct_rate(&ends[1, 0], m, &ends[2, 0], &rate[0]))
    return Dp_a, Gp_a, B_a
