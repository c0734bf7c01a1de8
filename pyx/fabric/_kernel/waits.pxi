# ================================================================== waits: what a stuck run waits for
# For Engine.stuck_report, once after a run that stopped with work pending: every non-empty queue's head (what it
# needs to leave, what it has), and a cycle of credit waits among them if there is one (fabric/faults/stuck.py names
# the rows; docs/kernel.md, "A stuck run"). With the GIL; reads SimC.
WAIT_COLS = ("channel", "vc", "slot", "queued", "xfer", "src", "dst", "in_ch", "in_vc", "needed", "credits", "hold")
HOLD_NONE, HOLD_PIPELINE, HOLD_TAG, HOLD_GRANT = 0, 1, 2, 3     # what else holds a head (besides credits)

cdef dict waiting_heads(SimC* s):
    """One row per non-empty queue (WAIT_COLS, int64 arrays): its output channel, VC and input slot, how many packets
    (injection queues: transfers) it holds, its head's transfer and end ranks, the channel and VC the head arrived on
    (-1: carved at this endpoint), the credits the head needs and those its VC has, and what else holds the head."""
    cdef int32_t ch, idx, nslots, nq, vc, slot, x, n, payload
    cdef int64_t qi
    cdef XferC* xf
    cdef PacketC* pk
    rows = []
    for ch in range(s.n_ch):
        nslots = s.n_slots[s.c[ch].ch_src]
        nq = s.nvc * nslots
        idx = next_bit(&s.q_bits[s.c[ch].qb_base], 0, nq)
        while idx >= 0:
            qi = s.c[ch].q_base + idx
            vc = idx // nslots
            slot = idx - vc * nslots
            n = 0
            x = s.q[qi].head
            if slot == nslots - 1:                        # an injection queue: transfers to carve from
                while x >= 0:
                    n += 1
                    x = s.xf[x].next
                x = s.q[qi].head
                xf = &s.xf[x]
                payload = 0 if xf.kind == 1 else <int32_t>max(0, min(<int64_t>s.maxp_B, xf.avail_B - xf.carved_B))
                hold = (HOLD_TAG if xf.kind == 1 and s.tags_free[xf.src] <= 0 else
                        HOLD_GRANT if xf.kind == 0 and s.e2e_avail[<int64_t>xf.src * s.n_ranks + xf.dst] < payload
                        else HOLD_NONE)
                rows.append((ch, vc, slot, n, x, xf.src, xf.dst, -1, -1, pkt_flits(s, payload + s.hdr_B),
                             s.cvs[cv(s, ch, vc)].cr_limit - s.cvs[cv(s, ch, vc)].cr_used, hold))
            else:                                         # a VOQ: packets that arrived on an input channel
                while x >= 0:
                    n += 1
                    x = s.pk[x].next
                pk = &s.pk[s.q[qi].head]
                xf = &s.xf[pk.xfer]
                rows.append((ch, vc, slot, n, pk.xfer, xf.src, xf.dst, pk.in_ch, pk.vc, pk.flits,
                             s.cvs[cv(s, ch, vc)].cr_limit - s.cvs[cv(s, ch, vc)].cr_used,
                             HOLD_PIPELINE if pk.ready_ps > s.now else HOLD_NONE))
            idx = next_bit(&s.q_bits[s.c[ch].qb_base], idx + 1, nq)
    table = np.array(rows, np.int64).reshape(len(rows), len(WAIT_COLS))
    return {name: table[:, j].copy() for j, name in enumerate(WAIT_COLS)}


def credit_wait_cycle(dict heads, int32_t nvc):
    """Rows of `heads` (waiting_heads) that form a cycle of credit waits, in order: the head of each row arrived on
    the channel and VC the previous row sends on, and needs more credits there than its VC has; [] if no such cycle.
    A depth-first search over the wait-for graph of receive buffers (channel x VC): buffer (in_ch, in_vc) waits for
    buffer (channel, vc) when a head it holds is short of credits for it."""
    in_ch, in_vc, hold = heads["in_ch"], heads["in_vc"], heads["hold"]
    blocked = np.flatnonzero((in_ch >= 0) & (hold == HOLD_NONE) & (heads["credits"] < heads["needed"]))
    src = in_ch[blocked] * nvc + in_vc[blocked]
    dst = heads["channel"][blocked] * nvc + heads["vc"][blocked]
    order = np.lexsort((dst, src))                  # out-edges of each buffer, contiguous and in a fixed order
    src, dst, rows = src[order], dst[order], blocked[order]
    starts = {}
    for i in range(len(src) - 1, -1, -1):
        starts[int(src[i])] = i
    state = {}                                      # buffer -> 1 on the current path, 2 finished
    for root in sorted(starts):
        if root in state:
            continue
        path = [(root, starts[root])]               # (buffer, next out-edge to try)
        along = []                                  # the rows (edges) taken along the path
        state[root] = 1
        while path:
            node, e = path[len(path) - 1]           # (the kernel is compiled with wraparound off)
            if e < len(src) and src[e] == node:
                path[len(path) - 1] = (node, e + 1)
                nxt = int(dst[e])
                if state.get(nxt) == 1:             # back to a buffer on the path: the cycle closes there
                    along.append(int(rows[e]))
                    first = next(i for i, (b, _) in enumerate(path) if b == nxt)
                    return along[first:]
                if nxt not in state:
                    state[nxt] = 1
                    along.append(int(rows[e]))
                    path.append((nxt, starts.get(nxt, len(src))))
            else:
                state[node] = 2
                path.pop()
                if along:
                    along.pop()
    return []
