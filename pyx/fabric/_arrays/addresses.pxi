# ================================================================== addresses: the unified address map's passes
# For fabric/address.py: its global -> host address translation over every transfer's address (18 M at 1024
# ranks), in one pass in C (host_addresses). A pure function of numpy arrays, used before any Engine exists (the
# kernel reads the host addresses it gives, graph["host_addr"]).

def host_addresses(const int64_t[::1] g, const int32_t[::1] who, const int32_t[::1] domain_of,
                   const int64_t[:, ::1] slot, int64_t global_base, int64_t window_B, int64_t host_base,
                   int64_t unaddressed):
    """fabric.address.AddressMap's global -> host translation (to_host_array, issuer_host_array) in one pass: the
    host address at which domain d sees global address g[i], d = who[i] (domain_of None) or domain_of[who[i]
    clipped into its range] (who a rank); slot[d, r] is where d sees rank r's window (-1: not at all). g[i] < 0
    gives unaddressed; one outside the global map, or a domain with no view of it, 0."""
    cdef Py_ssize_t i, n = g.shape[0]
    cdef int64_t R = slot.shape[1], rows = slot.shape[0], m, a, r, d, at
    cdef bint mapped = domain_of is not None
    if who.shape[0] != n:
        raise ValueError(f"{n} addresses but {who.shape[0]} issuers")
    m = domain_of.shape[0] if mapped else 0
    cdef double q, inv = 1.0 / window_B if window_B > 0 else 0.0
    out = np.empty(n, np.int64)
    cdef int64_t[::1] o = out
    with nogil:
        for i in range(n):
            a = g[i]
            if a < 0:
                o[i] = unaddressed
                continue
            d = who[i]
            if mapped:
                d = domain_of[min(max(d, 0), m - 1)] if m else -1
            a -= global_base
            o[i] = 0
            if a < 0 or d < 0 or d >= rows or window_B <= 0:
                continue
            q = <double>a * inv                    # a // window_B without a 64-bit division: the estimate is
            if q >= R + 1.0:                       # within one of it (53-bit doubles), past the map here
                continue
            r = <int64_t>q
            while r > 0 and <uint64_t>r * window_B > <uint64_t>a:
                r -= 1
            while <uint64_t>(r + 1) * window_B <= <uint64_t>a:
                r += 1
            if r < R:
                at = slot[d, r]
                if at >= 0:
                    o[i] = host_base + at * window_B + (a - r * window_B)
    return out
