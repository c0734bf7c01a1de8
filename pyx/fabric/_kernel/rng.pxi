# ================================================================== RNG and content checksums
# Randomness of the model: one splitmix64 stream per channel (ChanC.rng, seeded from sim.seed and the channel id at
# set-up), drawn by the PHY only (bit errors, lost control flits). Its mixing function also hashes the byte ranges
# that endpoints deliver (XferC.csum). Contract: plain 64-bit words, a stream's state passed by pointer.
cdef inline uint64_t c_mix(uint64_t a) noexcept nogil:
    """splitmix64's output function: a bijective mix of a 64-bit word."""
    a = (a ^ (a >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    a = (a ^ (a >> 27)) * <uint64_t>0x94D049BB133111EB
    return a ^ (a >> 31)

cdef inline uint64_t c_rand(uint64_t* s) noexcept nogil:
    """splitmix64: advance the state by the golden gamma, return it mixed."""
    s[0] += <uint64_t>0x9E3779B97F4A7C15
    return c_mix(s[0])

cdef inline double c_uniform(uint64_t* s) noexcept nogil:
    # in (0, 1]: safe for log()
    return ((c_rand(s) >> 11) + 1) * (1.0 / 9007199254740992.0)

cdef inline uint64_t content_sum(int32_t node, int32_t src, int64_t offset, int32_t nbytes) noexcept nogil:
    """Checksum of a byte range as it lands in `node`'s memory (fabric.sim.content_sum mirrors it)."""
    return c_mix(c_mix(c_mix(<uint64_t>node * 1000003 + <uint64_t>src) ^ <uint64_t>offset) ^ <uint64_t>nbytes)
