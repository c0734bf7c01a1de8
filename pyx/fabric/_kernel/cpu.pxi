# ================================================================== C primitives shared by every room
# What the compiler and the CPU give the kernel beyond C: cache-line aligned allocation (ChanC, XferC and PacketC
# records, event rings), a prefetch that GCC cannot delete, and the bit scan of the queue bitmaps. No contract.
cdef extern from "<stdlib.h>" nogil:
    void* aligned_alloc(size_t alignment, size_t size)     # C11: ChanC and XferC records start on cache lines

cdef extern from *:
    """
    /* Prefetches as volatile asm on x86-64. GCC treats __builtin_prefetch as free of side effects, so a function
       that only computes addresses and prefetches them counts as pure and a call to it is deleted as dead: the
       lane look-ahead (prefetch_ahead) compiled to nothing. A volatile asm is never deleted. Elsewhere the builtin
       stays (results are the same either way; only the look-ahead may be lost). */
    #if defined(__x86_64__) && defined(__GNUC__)
    static inline void fabric_prefetch(const void *p) { __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p)); }
    #else
    static inline void fabric_prefetch(const void *p) { __builtin_prefetch(p); }
    #endif
    """
    void prefetch "fabric_prefetch"(const void* addr) nogil

cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil
