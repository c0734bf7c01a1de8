# ================================================================== physical layer: flits, bit errors, injected faults
# What the wire does to a unit: packets are framed into flits (pkt_flits), bit errors hit them at the channel's BER
# (geometric skip sampling on its own splitmix stream) and injected faults corrupt given flits or lose given control
# messages. Contract: ChanC line 3 (cum_tlp_B, next_err_bit, log1m_ber, f_cur, f_end) and phy_left_B/phy_run_B,
# CntC.flits_corrupted, SimC.f_n/f_k.
cdef inline int32_t pkt_flits(SimC* s, int32_t tlp) noexcept nogil:
    """Flits (and credits, replay buffer slots) a packet of tlp header + payload bytes occupies."""
    return (tlp + s.flitpay_B - 1) // s.flitpay_B

cdef inline int64_t last_byte_before(double err_bit, double flit_bits, int64_t flitpay_B) noexcept nogil:
    """The largest stream position e (bytes) with e * flit_bits / flitpay_B <= err_bit, in phy_corrupt's own
    arithmetic (monotone in e), so that the countdown and the test it stands for agree to the last byte."""
    cdef int64_t e = <int64_t>(err_bit * flitpay_B / flit_bits)
    while e > 0 and e * flit_bits / flitpay_B > err_bit:
        e -= 1
    while (e + 1) * flit_bits / flitpay_B <= err_bit:
        e += 1
    return e

cdef inline bint phy_unit(SimC* s, int32_t ch, int32_t tlp_B) noexcept nogil:
    """Whether a unit of tlp_B bytes is corrupted. Most units end before the channel's next injected flit fault and
    its next bit error: a countdown on the transmitter's line says so, and phy_corrupt (the third line, a division)
    runs only for the others. The countdown only skips calls that would have changed nothing but the position."""
    s.c[ch].phy_left_B -= tlp_B
    if s.c[ch].phy_left_B >= 0:
        return False
    return phy_corrupt(s, ch, tlp_B)

cdef bint phy_corrupt(SimC* s, int32_t ch, int32_t tlp_B) noexcept nogil:
    """Decide whether a unit of tlp_B bytes (framed into flits) is corrupted: injected flit faults and BER.

    The channel's flit stream is numbered from 0; the unit covers flits [f0, f1]. Random bit errors are placed by
    skip sampling (the gap to the next errored bit is geometric), and every errored flit is counted once. Then it
    sets the countdown to the last byte position that the next look could not change anything before (phy_unit).
    """
    cdef bint bad = False
    cdef double flit_bits = 8.0 * s.flit_B, start_bit, end_bit, f
    cdef int64_t f0 = 0, f1 = 0, i, lo, hi, n_end, last
    # the units that phy_unit let through since the last look moved the position on
    cdef int64_t cum0 = s.c[ch].cum_tlp_B + s.c[ch].phy_run_B - (s.c[ch].phy_left_B + tlp_B)
    s.c[ch].cum_tlp_B = cum0 + tlp_B
    i = s.c[ch].f_cur[F_FLIT]
    n_end = s.c[ch].f_end[F_FLIT]
    if i < n_end:                              # injected faults pending on this channel (divisions only then)
        f0 = cum0 // s.flitpay_B
        f1 = (s.c[ch].cum_tlp_B - 1) // s.flitpay_B
    while i < n_end and s.f_n[i] <= f1:
        lo = s.f_n[i] if s.f_n[i] > f0 else f0
        hi = s.f_n[i] + s.f_k[i] - 1
        if hi > f1:
            hi = f1
        if hi >= lo:
            bad = True
            s.k[ch].flits_corrupted += hi - lo + 1
        if s.f_n[i] + s.f_k[i] - 1 > f1:     # the burst goes on into the next unit
            break
        i += 1
    s.c[ch].f_cur[F_FLIT] = i
    if s.c[ch].log1m_ber < 0.0:
        end_bit = s.c[ch].cum_tlp_B * flit_bits / s.flitpay_B
        # first use: errors are placed from the current position on. Later, next_err_bit is at or past the
        # previous unit's end, which is this unit's start, so only the first use can see it negative (-1).
        if s.c[ch].next_err_bit < 0.0:
            start_bit = cum0 * flit_bits / s.flitpay_B
            s.c[ch].next_err_bit = start_bit + log(c_uniform(&s.c[ch].rng)) / s.c[ch].log1m_ber
        while s.c[ch].next_err_bit < end_bit:
            bad = True
            s.k[ch].flits_corrupted += 1
            f = <double>(<int64_t>(s.c[ch].next_err_bit / flit_bits) + 1)
            s.c[ch].next_err_bit = f * flit_bits + log(c_uniform(&s.c[ch].rng)) / s.c[ch].log1m_ber
    # the next look is due for the first unit that ends past `last`: a unit ending at e needs one when a pending
    # fault's first flit is at or before (e - 1) // flitpay_B, or when next_err_bit < e * flit_bits / flitpay_B
    last = INT64_MAX
    if i < n_end and s.f_n[i] < INT64_MAX // s.flitpay_B:
        last = s.f_n[i] * s.flitpay_B
    if s.c[ch].log1m_ber < 0.0:                 # (capped: 1e18 bits is past any run, and int64 holds the bytes)
        last = min(last, last_byte_before(min(s.c[ch].next_err_bit, 1e18), flit_bits, s.flitpay_B))
    last -= s.c[ch].cum_tlp_B
    if not s.phy_countdown:
        last = -1
    s.c[ch].phy_left_B = <int32_t>(-1 if last < 0 else min(last, <int64_t>0x7fffffff))
    s.c[ch].phy_run_B = s.c[ch].phy_left_B
    return bad

cdef bint fault_take(SimC* s, int32_t ch, int kind, int64_t count) noexcept nogil:
    """True if the count-th message of this kind for ch is to be lost (injected fault)."""
    cdef int64_t i = s.c[ch].f_cur[kind]
    while i < s.c[ch].f_end[kind] and s.f_n[i] < count:
        i += 1
    s.c[ch].f_cur[kind] = i
    return i < s.c[ch].f_end[kind] and s.f_n[i] == count
