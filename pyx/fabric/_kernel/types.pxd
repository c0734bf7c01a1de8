# Typedefs and C structs of the packet kernel. Units are in the names: ps = picoseconds, B = bytes.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint64_t

ctypedef int64_t ps_t          # time, integer picoseconds

# ------------------------------------------------------------------ events
cdef enum EventType:
    EV_TX_DONE = 0         # ch finished serialising its current unit
    EV_PKT_ARRIVE = 1      # head of a unit reaches the receiver of ch      (x=pkt, y=seq|corrupt<<32, flag=epoch)
    EV_CTRL_ARRIVE = 2     # Ack/Nak/UpdateFC for ch reaches its sender    (x=kind|vc<<8, y=value, flag=epoch)
    EV_ACK_TIMER = 3       # receiver of ch flushes a coalesced Ack        (y=generation)
    EV_REPLAY_TIMER = 4    # sender of ch replays unacknowledged units      (y=generation)
    EV_CREDIT_TIMER = 5    # receiver of ch sends pending UpdateFCs         (y=generation)
    EV_REFRESH = 6         # receiver of ch re-sends its cumulative credits
    EV_RETRAIN_DONE = 7    # link of ch is up again
    EV_FORCE_RETRAIN = 8   # injected fault: retrain the link of ch now
    EV_WAKE = 9            # the head of one of ch's queues leaves the switch pipeline: arbitrate again
    EV_DELIVER = 10        # tail of packet x is at its destination endpoint (ch = last channel)
    EV_TASK_DONE = 11      # task x finished (compute, reduce, transfer completion)
    EV_XFER_INJECT = 12    # transfer x is issued at its source port
    EV_E2E_GRANT = 13      # receive space (y bytes) freed at transfer x's destination is granted back to its source

cdef struct EventC:            # 32 B: two per cache line, four siblings of the 4-ary heap in two lines
    ps_t time                  # when it fires
    uint64_t key               # order << 24 | (uint16)flag << 8 | type: one word orders ties, carries both
    int64_t y                  # payload (sequence number, credit count, generation ...)
    int32_t ch                 # channel it concerns
    int32_t x                  # payload (packet, task, transfer, message kind)
# key fields: order = per-engine sequence number (deterministic ties; 40 bits, 10^12 events), flag = link epoch
# for messages in flight (int16), type = EventType (8 bits). Comparing (time, key) is comparing (time, order).

# ------------------------------------------------------------------ packets
cdef enum PacketKind:
    PK_DATA = 0                # store data or read completion
    PK_READ_REQ = 1            # read request (header only)

cdef struct PacketC:           # 72 B; the route and class are copied in so a hop touches no XferC
    ps_t tail_ps               # time its tail reached the current node (cut-through bound)
    ps_t ready_ps              # when it leaves the current node's switch pipeline (eligible in its VOQ)
    int64_t offset_B           # where its bytes sit in the transfer
    int64_t path_at            # its source route: path_ch[path_at : path_at + path_n] (path_ptr[path])
    int32_t xfer               # transfer (flow) it belongs to
    int32_t fseq               # position in its flow, to check order at delivery
    int32_t payload_B          # payload bytes carried
    int32_t covers_B           # bytes of data a read request asks for (0 for data)
    int32_t tlp_B              # header + payload bytes
    int32_t flits              # buffer slots it occupies (credit cost)
    int32_t in_ch              # channel it arrived on (-1 when injected)
    int32_t next               # intrusive link: queue or free list
    int16_t hop                # index in its path of the channel it is on
    int16_t path_n             # hops in its route
    int8_t vc                  # VC on in_ch
    int8_t kind                # PacketKind
    int8_t cls                 # traffic class of its transfer (0 request, 1 response)

# ------------------------------------------------------------------ transfers (flows)
cdef struct XferC:
    int64_t total_B            # bytes to move
    int64_t avail_B            # bytes that may be carved so far (loads: as requests arrive)
    int64_t carved_B           # bytes put into packets
    int64_t delivered_B        # bytes delivered at the destination
    ps_t start_ps              # when it was issued
    uint64_t csum              # sum of content checksums of the byte ranges delivered, as the receiver saw them
    ps_t grant_ps              # zero-load latency of an end-to-end grant from dst back to src
    int32_t src                # node the packets leave from
    int32_t dst                # node they go to
    int32_t task               # task completed by it (-1: none)
    int32_t path               # chosen source route
    int32_t next               # intrusive link in an injection queue
    int32_t fseq_next          # next packet number carved
    int32_t fseq_expect        # next packet number expected at delivery
    int32_t partner            # loads: the other half (request <-> response)
    int32_t reqs_done          # loads: read requests fully answered
    int8_t cls                 # traffic class: 0 request VC, 1 response VC
    int8_t kind                # 0 store, 1 load request flow, 2 load response flow
    int8_t queued              # 1 while in an injection queue
    int8_t status              # 0 ok, 1 unsupported request

# ------------------------------------------------------------------ replay buffer entry
cdef struct ReplayC:
    int32_t pkt                # packet (dereferenced only if the receiver accepts it)
    int32_t seq                # sequence number it was sent with
    int32_t tlp_B              # header + payload bytes (timing on resend)
    int32_t flits              # replay buffer slots
