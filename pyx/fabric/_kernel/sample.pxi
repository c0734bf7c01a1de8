# ================================================================== link counter sampling (timelines)
# Every sample_ps of simulated time, copy four numbers per channel into a bounded ring: busy time and credit stall
# (cumulative ps), queue length (packets, a level) and replays (cumulative). The loop calls take_samples before it
# handles the first event at or past the next sample time, so a row is the state at its own time exactly; nothing
# is pushed on the event queue and nothing is written that the model reads: results are unchanged. When the ring is
# full, every other row is dropped and the interval doubles, so memory is bounded whatever the run's length.
# Contract: SimC (next_sample, sample_ps, samp, samp_cap, samp_n), ChanC.stall_since, CntC.
cdef enum:
    SAMPLE_COLS = 4              # busy_ps, queue_len, credit_stall_ps, replays

cdef void sample_halve(SimC* s) noexcept nogil:
    """Keep rows 1, 3, 5, ... (times 2P, 4P, ...: the multiples of the doubled interval) and double the interval."""
    cdef int64_t row = <int64_t>s.n_ch * SAMPLE_COLS
    cdef int32_t j
    for j in range(s.samp_n // 2):
        memcpy(&s.samp[j * row], &s.samp[(2 * j + 1) * row], row * sizeof(int64_t))
    s.samp_n = s.samp_n // 2
    s.sample_ps *= 2
    s.next_sample = (<int64_t>s.samp_n + 1) * s.sample_ps

cdef void take_samples(SimC* s, ps_t t) noexcept nogil:
    """Record one row per sample time <= t not yet recorded (the state before the event at t runs)."""
    cdef int64_t row = <int64_t>s.n_ch * SAMPLE_COLS
    cdef int64_t* r
    cdef int32_t ch
    cdef ps_t at, stall
    while s.next_sample <= t:
        if s.samp_n >= s.samp_cap:
            sample_halve(s)
            continue
        at = s.next_sample
        r = &s.samp[s.samp_n * row]
        for ch in range(s.n_ch):
            stall = s.k[ch].credit_stall_ps
            if s.c[ch].stall_since >= 0 and at > s.c[ch].stall_since:
                stall += at - s.c[ch].stall_since
            r[0] = s.k[ch].busy_ps
            r[1] = s.k[ch].queue_len
            r[2] = stall
            r[3] = s.k[ch].replays
            r += SAMPLE_COLS
        s.samp_n += 1
        s.next_sample = (<int64_t>s.samp_n + 1) * s.sample_ps
