# ================================================================== physical layer: flits, bit errors, injected faults
# What the wire does to a unit: packets are framed into flits (frame_unit: packed back to back into the flits'
# payload areas, a flit left open when nothing follows at once is padded out), bit errors hit whole flits at the
# channel's BER or, with the burst model, at the BER of its Gilbert-Elliott state (skip sampling on its own splitmix
# stream: next_error), and injected faults corrupt given flits or lose given control messages. Contract: ChanC
# lines 3 and 5 and phy_left_B/phy_run_B, CntC.flits and flits_corrupted, SimC.f_n/f_k and ge_*.
cdef inline int32_t pkt_flits(SimC* s, int32_t tlp) noexcept nogil:
    """Flits (and credits, replay buffer slots) a packet of tlp header + payload bytes occupies when it starts a
    flit, as a unit on an idle link does; packed behind another it spans as many or one more (frame_unit)."""
    return (tlp + s.flitpay_B - 1) // s.flitpay_B

cdef inline double wire_B(int64_t x, int64_t flitpay_B, int64_t flit_B) noexcept nogil:
    """Wire bytes from the start of a flit to the end of its x-th payload byte (each flit's CRC and data-link bytes
    follow its payload area): the offset of stream byte x in wire bytes."""
    return <double>((x // flitpay_B) * flit_B + x % flitpay_B)

cdef inline int64_t padded_wire_B(int64_t x, int64_t flitpay_B, int64_t flit_B) noexcept nogil:
    """Wire bytes from the start of a flit to the end of the flit that holds payload byte x - 1 (its padding and CRC
    included): when x bytes sent from a flit boundary are usable at the receiver."""
    return ((x + flitpay_B - 1) // flitpay_B) * flit_B

cdef inline ps_t flit_open_end(SimC* s, ChanC* c) noexcept nogil:
    """When the flit the last unit ended in ends on the wire (its padding included)."""
    return c.flit_base + <ps_t>((c.flit_off + s.flit_B) * c.ps_per_B + 0.5)

cdef inline bint stream_at(SimC* s, ChanC* c, ps_t* base, int64_t* off, int64_t* a) noexcept nogil:
    """Where bytes put into c's flit stream now start: right behind the last unit's if they come the instant its
    last byte left (tx_fin; returns whether that open flit's errors are drawn already), else in a new flit, at the
    end of the open one if it is still on the wire (its rest is padding), else at once. base + (off + wire bytes)
    x ps_per_B is the time of a wire byte; a is the payload byte of the flit at off that they start at."""
    if c.flit_pos > 0 and s.now == c.tx_fin:            # back to back: the open flit goes on
        base[0] = c.flit_base
        off[0] = c.flit_off
        a[0] = c.flit_pos
        return c.flit_sampled
    base[0] = s.now
    if c.flit_pos > 0:                                   # padding out the open flit, if still on the wire
        base[0] = max(s.now, flit_open_end(s, c))
    off[0] = 0
    a[0] = 0
    return False

cdef void ctrl_bytes(SimC* s, int32_t ch, int64_t nbytes) noexcept nogil:
    """nbytes of control messages (link.control_wire_bytes each) go into ch's flit stream now, where a unit would
    (stream_at); the transmitter stays free for units, which start behind them or, once they are out, in a new flit
    (their flit is padded out). They take no credits and draw no bit errors (control flits draw their own)."""
    cdef ChanC* c = &s.c[ch]
    cdef ps_t base
    cdef int64_t off, a
    cdef bint sampled = stream_at(s, c, &base, &off, &a)
    cdef int64_t e = a + nbytes
    c.tx_fin = base + <ps_t>((off + wire_B(e, s.flitpay_B, s.flit_B)) * c.ps_per_B + 0.5)
    s.k[ch].busy_ps += c.tx_fin - s.now
    c.flit_base = base
    c.flit_off = off + (e // s.flitpay_B) * s.flit_B
    c.flit_pos = <int32_t>(e % s.flitpay_B)
    c.flit_sampled = sampled and e < s.flitpay_B

cdef bint frame_unit(SimC* s, int32_t ch, int32_t tlp_B, ps_t tail_in, ps_t* fin, ps_t* head, ps_t* tail) \
        except -1 nogil:
    """Put a unit of tlp_B bytes into ch's flit stream now; returns whether it arrives corrupted.

    It starts where stream_at says, behind control bytes owed (link.control_wire_bytes, sent while it waited), and
    occupies the flits [a // P, ceil(e / P)) of payload P counted from the open flit (a, e: its first and past-last
    stream bytes); the transmitter is free when its last byte is out (fin), its head is usable when its first flit's
    CRC is in (head) and its tail when its last flit's is (tail); a cut-through hop cannot finish before the
    packet's tail came in (tail_in), which delays all three. Bit errors are drawn for the flits it opens; a flit it
    shares was drawn with the unit before."""
    cdef ChanC* c = &s.c[ch]
    cdef int64_t P = s.flitpay_B, F = s.flit_B, a, e, q, r, qa, opened, off
    cdef double ppb = c.ps_per_B
    cdef ps_t base, shift, start
    cdef bint shared = stream_at(s, c, &base, &off, &a)
    cdef int code = 0
    if c.ctrl_owed_B:
        a += c.ctrl_owed_B
        c.ctrl_owed_B = 0
        shared = shared and a < P
    e = a + tlp_B
    q = e // P                                          # flits it fills to the end; r bytes into the next
    r = e - q * P
    qa = a // P if a >= P else 0                        # (a >= P only behind control bytes owed)
    start = base + <ps_t>((off + qa * F + (a - qa * P)) * ppb + 0.5)
    fin[0] = base + <ps_t>((off + q * F + r) * ppb + 0.5)
    if fin[0] <= s.now:
        fin[0] = s.now + 1
    tail[0] = base + <ps_t>((off + (q + (r > 0)) * F) * ppb + 0.5)
    head[0] = base + <ps_t>((off + (qa + 1) * F) * ppb + 0.5)
    if head[0] > tail[0]:
        head[0] = tail[0]
    shift = 0
    if tail_in + (head[0] - start) > fin[0]:          # cut-through: cannot finish before the tail has arrived
        shift = tail_in + (head[0] - start) - fin[0]
    fin[0] += shift; tail[0] += shift
    c.tx_fin = fin[0]
    c.flit_pos = <int32_t>r
    c.flit_base = base + shift
    c.flit_off = off + q * F
    opened = q + (r > 0) - qa - shared
    s.k[ch].flits += opened
    if opened > 0:
        code = phy_unit(s, ch, <int32_t>(opened * P))
    c.flit_sampled = 1
    if shared and c.open_bad:
        code |= 1
    if opened > 0:
        c.open_bad = (code >> 1) & 1
    return code & 1

cdef inline int phy_unit(SimC* s, int32_t ch, int32_t span_B) noexcept nogil:
    """Bit 0: whether the flits opened by a unit (span_B = their payload bytes) are corrupted; bit 1: whether the
    last of them is. Most spans end before the channel's next injected flit fault and its next bit error: a
    countdown on the transmitter's line says so, and phy_corrupt (the third line, a division) runs only for the
    others. The countdown only skips calls that would have changed nothing but the position."""
    s.c[ch].phy_left_B -= span_B
    if s.c[ch].phy_left_B >= 0:
        return 0
    return phy_corrupt(s, ch, span_B)

cdef inline int64_t last_byte_before(double err_bit, double flit_bits, int64_t flitpay_B) noexcept nogil:
    """The largest stream position e (bytes) with e * flit_bits / flitpay_B <= err_bit, in phy_corrupt's own
    arithmetic (monotone in e), so that the countdown and the test it stands for agree to the last byte."""
    cdef int64_t e = <int64_t>(err_bit * flitpay_B / flit_bits)
    while e > 0 and e * flit_bits / flitpay_B > err_bit:
        e -= 1
    while (e + 1) * flit_bits / flitpay_B <= err_bit:
        e += 1
    return e

cdef int phy_corrupt(SimC* s, int32_t ch, int32_t span_B) noexcept nogil:
    """Decide whether whole flits opened by a unit (span_B of their payload bytes) are corrupted: injected flit
    faults and bit errors (phy_unit's code: bit 0 any of them, bit 1 the last).

    The channel's flit stream is numbered from 0; the span covers flits [f0, f1]. Random bit errors are placed by
    skip sampling (next_error), and every errored flit is counted once. Then it sets the countdown to the last byte
    position that the next look could not change anything before (phy_unit).
    """
    cdef int code = 0
    cdef double flit_bits = 8.0 * s.flit_B, start_bit, end_bit, f
    cdef int64_t f0 = 0, f1 = 0, i, lo, hi, n_end, last
    cdef bint errs = s.c[ch].log1m_ber < 0.0 or s.ge_on
    # the spans that phy_unit let through since the last look moved the position on
    cdef int64_t cum0 = s.c[ch].cum_tlp_B + s.c[ch].phy_run_B - (s.c[ch].phy_left_B + span_B)
    s.c[ch].cum_tlp_B = cum0 + span_B
    f1 = (s.c[ch].cum_tlp_B - 1) // s.flitpay_B
    i = s.c[ch].f_cur[F_FLIT]
    n_end = s.c[ch].f_end[F_FLIT]
    if i < n_end:                              # injected faults pending on this channel
        f0 = cum0 // s.flitpay_B
    while i < n_end and s.f_n[i] <= f1:
        lo = s.f_n[i] if s.f_n[i] > f0 else f0
        hi = s.f_n[i] + s.f_k[i] - 1
        if hi > f1:
            hi = f1
        if hi >= lo:
            code |= 1 | (2 if hi == f1 else 0)
            s.k[ch].flits_corrupted += hi - lo + 1
        if s.f_n[i] + s.f_k[i] - 1 > f1:     # the burst goes on into the next unit
            break
        i += 1
    s.c[ch].f_cur[F_FLIT] = i
    if errs:
        end_bit = s.c[ch].cum_tlp_B * flit_bits / s.flitpay_B
        # first use: errors are placed from the current position on. Later, next_err_bit is at or past the
        # previous span's end, which is this span's start, so only the first use can see it negative (-1).
        if s.c[ch].next_err_bit < 0.0:
            start_bit = cum0 * flit_bits / s.flitpay_B
            s.c[ch].next_err_bit = next_error(s, ch, start_bit)
        while s.c[ch].next_err_bit < end_bit:
            if s.c[ch].ge_check:                  # no error up to here: draw on from it
                s.c[ch].next_err_bit = next_error(s, ch, s.c[ch].next_err_bit)
                continue
            f = <double>(<int64_t>(s.c[ch].next_err_bit / flit_bits) + 1)
            code |= 1 | (2 if <int64_t>f == f1 + 1 else 0)
            s.k[ch].flits_corrupted += 1
            s.c[ch].next_err_bit = next_error(s, ch, f * flit_bits)
    # the next look is due for the first span that ends past `last`: a span ending at e needs one when a pending
    # fault's first flit is at or before (e - 1) // flitpay_B, or when next_err_bit < e * flit_bits / flitpay_B
    last = INT64_MAX
    if i < n_end and s.f_n[i] < INT64_MAX // s.flitpay_B:
        last = s.f_n[i] * s.flitpay_B
    if errs:                                    # (capped: 1e18 bits is past any run, and int64 holds the bytes)
        last = min(last, last_byte_before(min(s.c[ch].next_err_bit, 1e18), flit_bits, s.flitpay_B))
    last -= s.c[ch].cum_tlp_B
    if not s.phy_countdown:
        last = -1
    s.c[ch].phy_left_B = <int32_t>(-1 if last < 0 else min(last, <int64_t>0x7fffffff))
    s.c[ch].phy_run_B = s.c[ch].phy_left_B
    return code

cdef double next_error(SimC* s, int32_t ch, double at) noexcept nogil:
    """Stream position (bits) of the next errored bit at or after `at`: geometric gaps at the channel's BER or, with
    the Gilbert-Elliott model, at the BER of the state each stretch of the stream is in (exponential dwell, in
    stream bits; memoryless, so a stretch without error ends at the state change and the draw starts again there).
    A state with BER 0 draws nothing but its dwell: an error-free good state costs no draw per unit. After 64 state
    changes without an error it returns the position reached with ge_check set: a point to look again from (the
    countdown lets units through up to it), not an error."""
    cdef ChanC* c = &s.c[ch]
    cdef double x
    cdef int flips = 0
    c.ge_check = 0
    if not s.ge_on:
        return at + log(c_uniform(&c.rng)) / c.log1m_ber
    if c.ge_flip_bit < 0.0:                       # first use: the channel starts in the good state
        c.ge_flip_bit = at - log(c_uniform(&c.rng)) * s.ge_dwell_bits[0]
    while True:
        while c.ge_flip_bit <= at:
            c.ge_bad ^= 1
            c.ge_flip_bit -= log(c_uniform(&c.rng)) * s.ge_dwell_bits[c.ge_bad]
            flips += 1
        if s.ge_log1m[c.ge_bad] < 0.0:
            x = at + log(c_uniform(&c.rng)) / s.ge_log1m[c.ge_bad]
            if x < c.ge_flip_bit:
                return x
        at = c.ge_flip_bit
        if flips >= 64:
            c.ge_check = 1
            return at

cdef bint fault_take(SimC* s, int32_t ch, int kind, int64_t count) noexcept nogil:
    """True if the count-th message of this kind for ch is to be lost (injected fault)."""
    cdef int64_t i = s.c[ch].f_cur[kind]
    while i < s.c[ch].f_end[kind] and s.f_n[i] < count:
        i += 1
    s.c[ch].f_cur[kind] = i
    return i < s.c[ch].f_end[kind] and s.f_n[i] == count
