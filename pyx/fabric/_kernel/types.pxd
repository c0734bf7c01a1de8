# The contract of the packet kernel: every typedef, enum and C struct that its rooms (kernel.pyx and the .pxi files
# it includes, one C translation unit) share. Units are in the names: ps = picoseconds, B = bytes.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint64_t

ctypedef int64_t ps_t          # time, integer picoseconds

# ------------------------------------------------------------------ kernel constants
cdef enum Outcome:             # what Engine.run returns (kernel.DONE, PAUSED, STUCK)
    R_DONE = 0                 # the event queue drained: every event processed
    R_PAUSED = 1               # stopped at the event or time budget of this call; call run() again
    R_STUCK = 2                # the watchdog fired: work pending, no progress

cdef enum:
    # task kinds (docs/contracts.md; SimC.t_kind)
    T_COMPUTE = 0              # occupies its (rank, stream) for its duration
    T_TRANSFER = 1             # a store or load between ranks (SimC.t_xfer: its transfer)
    T_REDUCE = 2               # a local reduction: as a compute task
    T_JOIN = 3                 # free: completes as soon as its dependencies have
    # control messages (EV_CTRL_ARRIVE: x & 0xff)
    C_ACK = 0                  # every unit up to sequence y is accepted
    C_NAK = 1                  # same, and replay the rest
    C_UPDATEFC = 2             # the receiver has freed y flits of VC x >> 8 in all (cumulative)
    # per-channel fault lists (ChanC.f_cur, f_end)
    F_FLIT = 0                 # flits to corrupt
    F_ACK = 1                  # Acks/Naks to lose
    F_CREDIT = 2               # UpdateFCs to lose

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
    EV_E2E_GRANT = 13      # receive space (y bytes) freed at rank x is granted back to rank ch (its source)
    EV_AN_HOP = 14         # analytic engine: task x's transfer's head reaches route-graph node ch (y = earliest
                           # tail end); flag 1: its first hop, channel y, node ch next

cdef struct EventC:            # 32 B: two per cache line, four siblings of the 4-ary heap in two lines
    ps_t time                  # when it fires
    uint64_t key               # order << 24 | (uint16)flag << 8 | type: one word orders ties, carries both
    int64_t y                  # payload (sequence number, credit count, generation ...)
    int32_t ch                 # channel it concerns
    int32_t x                  # payload (packet, task, transfer, message kind)
# key fields: order = per-engine sequence number (deterministic ties; 40 bits, 10^12 events), flag = link epoch
# for messages in flight (int16), type = EventType (8 bits). Comparing (time, key) is comparing (time, order).

# ------------------------------------------------------------------ event queue (events.pxi)
cdef enum:
    MAX_LANES = 16             # delay lanes at most (HeapC's lane arrays)
    LANE_MIN_CAP = 256         # events a lane's ring holds at least (8 KB)

cdef struct LaneC:             # a FIFO of events that all fire `delay` after they were created (events.pxi: lanes)
    EventC* e                  # ring of cap events (a power of two, 64 B aligned: two events per cache line)
    int64_t head               # oldest
    int64_t n                  # events held
    int64_t cap                # ring slots
    ps_t delay                 # the delay of every event it holds

cdef struct HeapC:             # the event queue: a 4-ary heap and the delay lanes beside it, one order counter
    EventC* ev                 # = raw + 1: &ev[1] on a 64-byte boundary
    EventC* raw                # the allocation (64-byte aligned)
    int64_t n                  # events in the heap
    int64_t cap                # heap slots
    int64_t order              # events created so far: the tie-break of equal times, shared by heap and lanes
    LaneC lane[16]             # MAX_LANES
    int64_t lh_time[16]        # (time, key) of each lane's head; (INT64_MAX, ~0) when empty
    uint64_t lh_key[16]
    int32_t win[32]            # winner tree over the lanes: win[i] = earliest lane under node i (1 the root); the
                               # leaves are nodes tp .. 2 tp - 1, lane k's at leaf[k], win[leaf[k]] = k
    int8_t left[16]            # children and parent of each node: the shape is free (any binary tree gives the
    int8_t right[16]           # minimum), so it is a Huffman tree over the lanes' pop counts: the busiest lanes
    int8_t up[32]              # sit next to the root and most pops replay one or two levels, not log2(lanes)
    int8_t leaf[16]
    int64_t pops[16]           # events taken from each lane (weights of the shape)
    int64_t pops_all
    int64_t reshape_at         # pops_all at which the shape is next fitted to the counts (geometric: a few per run)
    int32_t tp                 # leaves in the tree (= n_lanes)
    int32_t n_lanes
    int32_t max_lanes          # lanes allowed (MAX_LANES; 0 puts every event in the heap, for equivalence tests)
    int64_t lane_min_heap      # events use their lane only while the heap holds at least this many (a small heap
                               # is cheaper than a lane; where an event waits never changes the pop sequence)

# ------------------------------------------------------------------ packets
cdef enum:
    PK_DAMAGED_BIT = 62        # PacketC.offset_B: the packet's bytes were damaged on a hop (sizes stay below 2^62)

cdef enum PacketKind:
    PK_DATA = 0                # store data or read completion
    PK_READ_REQ = 1            # read request (header only)

cdef struct PacketC:           # 64 B, pool 64 B aligned: one cache line per packet. Route position and class copied in
    ps_t tail_ps               # time its tail reached the current node (cut-through bound)
    ps_t ready_ps              # when it leaves the current node's switch pipeline (eligible in its VOQ)
    int64_t offset_B           # where its bytes sit in the transfer; bit PK_DAMAGED_BIT set if a unit of it came
                               # in corrupted and was accepted (only a broken CRC check does that): its bytes differ,
                               # and so does the checksum of the range at delivery (endpoint.pxi on_deliver)
    int32_t hop_at             # route-graph node (SimC.hop) of the hop it takes next; advances one per hop
    int32_t xfer               # transfer (flow) it belongs to
    int32_t fseq               # position in its flow, to check order at delivery
    int32_t payload_B          # payload bytes carried
    int32_t covers_B           # bytes of data a read request asks for (0 for data)
    int32_t tlp_B              # header + payload bytes
    int32_t flits              # buffer slots it occupies (credit cost)
    int32_t in_ch              # channel it arrived on (-1 when injected)
    int32_t next               # intrusive link: queue or free list
    int16_t hops_left          # hops of its route not yet completed (delivered when it reaches 0)
    int8_t vc                  # VC on in_ch
    int8_t cls                 # traffic class of its transfer (0 request, 1 response); its kind (read request or
                               # data) is its transfer's: XferC.kind == 1 <=> read request

# ------------------------------------------------------------------ transfers (flows)
# 128 B, 64 B aligned: line 1 is what try_send's injection branch touches per packet carved, line 2 what on_deliver
# touches per packet delivered (src, dst and kind are copied into it: immutable after setup), so each per-packet
# access misses at most one line (an 80-96 B record straddles two).
cdef enum:
    XF_CHUNK = 16384           # records per chunk (2 MiB, a huge page) released at once when retire_transfers is on
cdef struct XferC:
    # -- line 1: injection (carving packets at the source)
    int64_t avail_B            # bytes that may be carved so far (loads: as requests arrive)
    int64_t carved_B           # bytes put into packets
    ps_t start_ps              # when it was issued
    int32_t src                # node the packets leave from
    int32_t dst                # node they go to
    int32_t path               # chosen source route
    int32_t next               # intrusive link in an injection queue
    int32_t fseq_next          # next packet number carved
    int8_t cls                 # traffic class: 0 request VC, 1 response VC
    int8_t kind                # 0 store, 1 load request flow, 2 load response flow, 3 in-switch leg
    int8_t queued              # 1 while in an injection queue
    int8_t status              # 0 ok, 1 unsupported request
    int32_t hv0                # first hop of its route: channel << vcl_bits | VC level
    int32_t at1                # route-graph node of its second hop (-1: one hop)
    int16_t hops               # hops of its route it crosses
    int16_t h0                 # first of them (0; an in-switch DOWN leg: the route's last hop)
    int8_t _pad1[4]
    # -- line 2: delivery (at the destination)
    int64_t total_B            # bytes to move
    int64_t delivered_B        # bytes delivered at the destination
    uint64_t csum              # sum of content checksums of the byte ranges delivered, as the receiver saw them
    ps_t grant_ps              # zero-load latency of an end-to-end grant from dst back to src
    int32_t fseq_expect        # next packet number expected at delivery
    int32_t reqs_done          # loads: read requests fully answered
    int32_t partner            # loads: the other half (request <-> response)
    int32_t task               # task completed by it (-1: none)
    int32_t d_src              # = src (copy in the delivery line)
    int32_t d_dst              # = dst
    int8_t d_kind              # = kind
    int8_t _pad2[7]

cdef struct AnXC:              # 32 B: what the analytic engine reads of a transfer (it keeps no XferC: 4x less memory)
    int32_t src                # = XferC.src ...
    int32_t dst
    int32_t path
    int32_t partner
    int32_t hv0
    int32_t at1
    int32_t task               # the task that issues it (both halves of a load): its bytes are t_bytes[task]
    int8_t kind
    int8_t status
    int8_t _pad[2]

# ------------------------------------------------------------------ routes
cdef enum:
    AT1_UNBUILT = -2           # SimC.path_at1 of a path not interned in the route graph (analytic engine: untaken)

cdef struct HopC:              # a node of the route graph: a route suffix, shared by every route that ends with it
    int32_t hv                 # its first hop: channel << vcl_bits | VC level
    int32_t next               # the node of the rest of the suffix (-1: this hop reaches the destination)

cdef struct RouteGraphB:       # the route graph while it is built (routes.pxi: rg_open, rg_path, rg_close)
    HopC* hop                  # its nodes so far (n of cap)
    int32_t* slot              # open-addressing table over hop[]: 2^bits slots, at most half full (-1: empty)
    int64_t n
    int64_t cap
    int64_t bits
    bint failed                # out of memory: rg_close raises

# ------------------------------------------------------------------ queues
cdef struct QueueC:            # a FIFO of packets (VOQ) or transfers (injection slot), linked through their .next;
    int32_t head               # head and tail side by side: one cache line per queue touched, not two (-1: empty)
    int32_t tail

# ------------------------------------------------------------------ replay buffer entry
cdef struct ReplayC:
    int32_t pkt                # packet (dereferenced only if the receiver accepts it)
    int32_t seq                # sequence number it was sent with
    int32_t tlp_B              # header + payload bytes (timing on resend)
    int32_t flits              # replay buffer slots

# ------------------------------------------------------------------ per-channel state (array of structs)
# Everything one channel's transmitter, PHY and receiver touch per unit sits in one 320 B record (five cache lines,
# 64 B aligned) instead of ~50 parallel arrays (one line each per access). Line 1-2: transmitter; line 3: PHY and
# fault cursors; line 4: receiver; line 5: the flit the transmitter has open and the burst-error state. A control message about channel c crosses its reverse channel r and reads c's
# line 4 and r's line 1 only (down_until, p_flit and rng sit there; its delay is its lane's). Counters exposed to
# Python are a separate record (CntC), per-(channel, VC) credit state a third (CvC).
cdef struct ChanC:
    # -- line 1: transmitter, replay buffer, and all that a control message sent over this channel reads
    ps_t down_until            # link down (retrain) until then; INT64_MAX: dead (faults.pxi)
    ps_t wake_at               # time of its pending EV_WAKE (-1: none)
    ps_t rt_deadline           # replay timer: expiry while armed (re-arming moves it, pushes nothing)
    double p_flit              # probability that one flit is corrupted (control messages draw against it)
    uint64_t rng               # splitmix64 state
    int32_t q_base             # offset of its queues in SimC.q
    int32_t qb_base            # offset of its bitmap words in q_bits
    int32_t r_head             # replay ring: oldest unacknowledged unit
    int32_t r_count            # units unacknowledged
    int32_t r_sent             # of those, sent since the last replay start
    int32_t r_flits            # replay buffer slots used
    # -- line 2: transmitter, arbitration, link parameters
    int32_t next_seq           # sequence number of the next new unit
    int32_t q_busy             # how many of its queues are non-empty (skips idle scans)
    int32_t rr                 # round-robin pointer (last queue served)
    int16_t replay_num         # replays without progress (retrain past replay_limit <= 1000)
    int8_t e2e_held            # a store at the head of its injection queues may be held for grants (not settled)
    int8_t cr_short            # = stall_since >= 0 (a head short of credits), where try_send reads it
    int32_t tx_free_ch         # input buffer to free when the current unit is sent (-1 none)
    int32_t phy_left_B         # bytes it may still put into flits before phy_corrupt must look (< 0: at the next
                               # unit): no injected flit fault and no bit error falls in them (phy.pxi, phy_unit)
    int32_t tx_free_flits
    int32_t ch_src             # node it leaves
    double ps_per_B            # serialisation of one byte on the wire (flit framing is applied per unit: frame_unit)
    ps_t flit_ps               # one flit's serialisation (rounded)
    ps_t ch_lat                # PHY tx + rx + wire
    int16_t epoch              # link epoch (messages of an older epoch were lost in a retrain)
    int8_t tx_busy             # serialising a unit
    int8_t rt_armed            # replay timer armed
    int8_t rt_pending          # a replay-timer event for it is in the heap
    int8_t lane_txd            # event lane its last EV_TX_DONE went to (events.pxi: delay lanes; -1: the heap)
    int8_t tx_free_vc          # its VC
    int8_t lane_arr            # event lane its last unit's head (EV_PKT_ARRIVE) went to
    # -- line 3: PHY (bit errors, injected flit faults) and fault cursors
    int64_t cum_tlp_B          # bytes put into flits up to phy_corrupt's last look (flit index for fault injection);
                               # the position now is cum_tlp_B + phy_run_B - phy_left_B
    double next_err_bit        # stream position (bits) of the next bit error (geometric skip sampling)
    ps_t stall_since           # start of the current credit stall (-1: none)
    double log1m_ber           # log(1 - BER)
    int32_t f_cur[3]           # per fault kind (F_*): next entry of its sorted fault list
    int32_t f_end[3]           # per fault kind: end of its list
    int32_t phy_run_B          # phy_left_B as phy_corrupt's last look left it
    int8_t _pad3[4]
    # -- line 4: receiver
    int64_t ack_gen            # Ack timer generation
    int64_t cr_gen             # credit timer generation
    int64_t ack_sent_n         # Ack/Nak messages sent for it (counters(): acks = ack_sent_n - naks)
    int64_t upd_sent_n         # UpdateFC messages sent for it (counters(): updatefc)
    int32_t expected           # next sequence number it accepts
    int32_t ack_pending        # accepted units not yet acknowledged
    int32_t ch_dst             # node it reaches
    int32_t ch_rev             # channel of the reverse direction
    int32_t ch_slot            # its input slot at ch_dst
    int8_t nak_sched           # a Nak was sent; no other until an in-order unit is accepted
    int8_t ack_armed
    int8_t cr_armed
    int8_t refresh_armed
    int8_t lane_ctrl           # event lane of the Acks/UpdateFCs about it (they cross ch_rev; its delay is theirs)
    int8_t ctrl_faults         # Ack/Nak or UpdateFC losses are injected on it (fault_take has work to do)
    uint16_t cr_dirty          # bit vc set <=> freed != freed_sent on VC vc (what the credit timer has to send)
    int8_t lane_dlv            # event lane its last EV_DELIVER went to (the receiver's: its last hop ends here)
    int8_t _pad4[3]
    # -- line 5: the open flit (phy.pxi frame_unit) and the Gilbert-Elliott burst state (phy.pxi next_error)
    ps_t flit_base             # start of the current run of back-to-back flits: every time in it is flit_base +
    int64_t flit_off           # round(wire bytes x ps_per_B), so none rounds out of order; flit_off: wire bytes
                               # from flit_base to the flit the last unit ended in
    ps_t tx_fin                # when the last unit's last byte left (a unit starting then continues its flit)
    double ge_flip_bit         # stream position (bits) of the next good <-> bad state change (-1: not drawn yet)
    int32_t flit_pos           # bytes of that flit's payload area used (0: the unit ended on a flit boundary)
    int32_t ctrl_owed_B        # control-message bytes (link.control_wire_bytes) to put before the next unit
    int8_t flit_sampled        # the open flit's bit errors are drawn (a data unit's flit, not control bytes only)
    int8_t open_bad            # ... and it is errored: a unit that shares it is corrupted too
    int8_t ge_bad              # burst model: in the bad state at ge_flip_bit's side of the stream position
    int8_t ge_check            # next_err_bit is no error but a point to look again from (next_error's horizon)
    int8_t _pad5[20]

cdef struct CntC:              # counters exposed to Python (int64 columns: strided numpy views; queue_len and queue_max
                               # share one, 32 bits each); 192 B from a 64 B boundary: line 1 holds all that sending a
                               # unit and queueing a packet update
    int64_t units              # units put on the wire, replays included
    int64_t packets            # new packets
    int64_t tlp_B              # header + payload bytes put into flits, replays included
    int64_t payload_B          # payload of new packets
    int64_t busy_ps
    int32_t queue_len          # packets queued (32 bits, so that its maximum shares the line)
    int32_t queue_max
    int64_t queue_area         # integral of queue length over time (packet x ps)
    int64_t qlast
    # Acks and UpdateFCs sent are counted once, in ChanC line 4 (ack_sent_n, upd_sent_n), which sending them touches
    # anyway; counters() derives its acks and updatefc columns from them.
    int64_t credit_stall_ps    # credit stall: output idle, packets waiting, no credits
    int64_t corrupted          # units that arrived corrupted
    int64_t flits_corrupted    # flits corrupted on the wire (BER and injected)
    int64_t naks
    int64_t replays            # replay passes (Nak or timeout)
    int64_t replay_timeouts
    int64_t retrains
    int64_t ctrl_lost
    int64_t dups_discarded     # duplicates discarded by the receiver
    int64_t credit_errors      # credits negative or above the pool, receive buffer overrun
    int64_t flits              # flits a data unit opened on the wire (padding included, control-only flits not)
    int64_t _pad[5]            # 192 B: three whole cache lines

cdef struct AnC:               # 64 B, one line: all that the analytic engine's hop reads and writes of a channel
    ps_t free                  # when its port is free
    ps_t origin                # the start of its current run of back-to-back flits
    int64_t run_B              # header + payload bytes sent in that run so far
    double ps_per_B            # = ChanC.ps_per_B (copied at set-up: the analytic engine takes no run-time faults)
    ps_t lat                   # = ChanC.ch_lat
    ps_t step                  # head to the next hop: ch_lat + the next node's pipeline + one flit (flit_ps)
    int32_t lane               # the event lane of delay `step` (-1: the heap): a head that found the port free
    int32_t _pad
    int64_t head_B             # a rank's port: stream bytes of that run after which the next head goes (first packets)

cdef struct CvC:               # per (channel, VC): credits at the sender, buffer at the receiver
    int64_t cr_used            # cumulative flits consumed
    int64_t cr_limit           # cumulative flits allowed (last UpdateFC + pool)
    int64_t freed              # cumulative flits freed
    int64_t freed_sent         # value of the last UpdateFC sent
    int64_t occ                # flits held in the receive buffer

# ------------------------------------------------------------------ the whole simulation state
# One record owns everything the event loop touches; Engine (kernel.pyx) holds it and its set-up (init.pxi) fills
# it. Arrays are C arrays: allocated by the kernel, or the buffers of numpy arrays that Engine keeps alive.
cdef struct SimC:
    HeapC heap                     # the event queue (events.pxi)
    ps_t now                       # time of the event being processed
    int64_t events                 # events processed
    ps_t last_progress             # last unit accepted, Ack with progress, packet delivered or task completed
    int64_t tasks_left             # tasks not yet completed (the watchdog fires only while work is pending)
    int64_t pkts_live              # packets taken from the pool and not yet released
    int32_t analytic               # 1: transfers take the analytic engine's time (no packets, executor.pxi)
    # ---- parameters (ps, bytes, flits)
    int32_t nvc                    # VCs per channel = 2 traffic classes x vc_levels
    int32_t levels                 # VC levels per traffic class (the topology's vc_levels)
    int32_t seq_mod                # sequence numbers: 2^seq_bits
    int32_t seq_mask               # seq_mod - 1 (seq_mod is a power of two: a mask, not a division)
    int32_t window                 # max unacknowledged packets (<= seq_mod / 2)
    int32_t replay_cap_flits       # replay buffer of a channel (flits)
    int32_t max_unit_flits         # flits of the largest unit a queue can offer (a full data packet)
    bint skip_settled              # skip arbitrations that cannot change anything (off: arbitrate every time)
    bint phy_countdown             # let units that cannot meet a PHY event skip phy_corrupt (off: it looks at all)
    int32_t ack_every              # an Ack at the latest every this many accepted units
    ps_t ack_ps                    # ... or this long after the first unacknowledged one
    ps_t replay_ps                 # replay timer
    int32_t replay_limit           # replays without progress before the link retrains
    ps_t retrain_ps                # how long a retrain takes the link down
    int64_t credit_pool_flits      # credits (receive buffer slots) per (channel, VC)
    int32_t update_flits           # an UpdateFC at the latest every this many flits freed
    ps_t update_ps                 # ... or this long after the first unannounced one
    ps_t refresh_ps                # period of the cumulative credit refresh (recovers lost UpdateFCs)
    int32_t hdr_B                  # header bytes of a packet
    int32_t maxp_B                 # largest payload of a packet
    int32_t mrrs_B                 # largest read request
    int32_t flit_B                 # flit size
    int32_t flitpay_B              # bytes of a flit that carry packets (flit_B - CRC and data-link overhead)
    int32_t ctrl_B                 # wire bytes of an Ack/Nak/UpdateFC (0: carried in the flits' data-link bytes)
    bint ge_on                     # Gilbert-Elliott burst errors (phy.ge_*): per-state BER and mean dwell
    double ge_log1m[2]             # log(1 - BER) in the good (0) and bad (1) state
    double ge_dwell_bits[2]        # mean stream bits spent in each state
    ps_t issue_ps                  # a transfer's issue at its source
    ps_t complete_ps               # a transfer's completion, after its last byte
    ps_t xlate_ps                  # address translation at the ingress port
    ps_t p2p_ps                    # forwarding into another host domain
    ps_t watchdog_ps               # no progress for this long while work is pending: R_STUCK
    int32_t ln_ack                 # lanes (or -1: the heap) of the fixed-delay timers and transfer completions
    int32_t ln_upd
    int32_t ln_refresh
    int32_t ln_replay
    int32_t ln_complete
    int32_t ln_inject              # a transfer's issue + address translation (+ P2P forwarding across hosts)
    int32_t ln_inject_p2p
    int32_t fixed_priority         # 1: serve queues in fixed order (lowest VC and port first), not round robin
    # ---- topology (routes.pxi)
    int32_t n_nodes                # nodes: ranks (endpoints, nodes 0 .. n_ranks - 1) and switches
    int32_t n_ranks
    int32_t n_ch                   # channels: one direction of a link each
    ps_t* node_lat                 # per node: its switch pipeline (a packet leaves it that long after its head came)
    int32_t* node_domain           # per node: host domain (transfers across domains pay p2p_ps)
    int32_t* n_slots               # per node: inputs + 1 injection slot
    int64_t* node_out_ptr          # CSR: channels leaving each node
    int32_t* node_out
    int64_t* pair_ptr              # CSR: candidate paths of each (src, dst) rank pair
    int64_t* path_ptr              # CSR: hops of each path in path_hv
    int32_t* path_hv               # per hop: channel << vcl_bits | VC level (set-up and the analytic engine)
    int32_t vcl_bits               # bits of the VC level in a route entry
    HopC* hop                      # the route graph: every route suffix once (build_route_graph); packets walk it
    int64_t n_hop                  # its nodes
    int32_t* path_at1              # per path: route-graph node of its second hop (-1: one hop; AT1_UNBUILT:
                                   # a path the analytic engine's transfers do not take, not interned)
    # ---- per channel (ChanC, CntC, CvC above): state, counters, per (channel, VC) credits
    ChanC* c                       # [ch]
    CntC* k                        # [ch]
    CvC* cvs                       # [ch*nvc+vc]
    # ---- queues (VOQ per output channel x VC x input slot; the injection slot holds transfers)
    QueueC* q                      # [q_base + idx]: head and tail of each queue, side by side (one line, not two)
    uint64_t* q_bits               # per ch: bitmap of its non-empty queues (bit idx = vc * n_slots + slot)
    ReplayC* ring                  # [ch * ring_cap + slot], 64 B aligned
    int32_t ring_cap               # replay ring slots per channel: a power of two, grown up to >= window (ring_grow)
    int32_t ring_mask              # ring_cap - 1
    # ---- faults: per channel sorted lists (CSR; cursors in ChanC)
    int64_t* f_n                   # per fault: the flit, Ack/Nak or UpdateFC number it hits
    int64_t* f_k                   # per fault: flits in its burst (1 for messages)
    # ---- packets and transfers
    PacketC* pk                    # packet pool (one cache line each; free list through .next)
    int32_t pk_cap                 # packets in the pool (doubles when none is free)
    int32_t pk_free                # first free packet (-1: none)
    XferC* xf                      # transfers (flows): a load is two, its requests and its responses
    AnXC* ax                       # the analytic engine's transfers instead (xf is NULL then)
    int32_t n_xf
    # ---- retire_transfers (Engine): a record is built when its task is issued and its chunk of XF_CHUNK records is
    # released once all of them are done, so memory follows the transfers in flight, not the step's total
    bint xf_lazy                   # records built at issue (init_transfer) and released (retire_xfer)
    int32_t* xf_live               # per chunk: its records not yet done
    int32_t n_first                # transfers that are a task's own; a load's response flows follow them
    int32_t* load_x                # ascending: each load's first transfer (its response flow: n_first + index)
    int32_t n_loads
    int8_t* t_op                   # per task: a transfer's op (0 store, 1 load, 2/3 in-switch legs)
    int32_t* t_peer                # per task: a transfer's peer
    int32_t* tags_free             # per rank
    int64_t* e2e_avail             # [src*R+dst] receive space dst has granted src and src has not used (B)
    int64_t* e2e_owed              # [src*R+dst] space dst has drained but not yet granted back (B)
    int64_t e2e_quantum            # grants go back in quarters of the window (or when a transfer completes)
    int64_t e2e_holds              # times a ready store waited for end-to-end grants
    int64_t arbitrations           # idle channels arbitrated (a cost, not a result: skip_settled lowers it)
    # ---- delivery checks
    int64_t carved                 # packets created at sources
    int64_t delivered              # packets delivered in their flow's order
    int64_t dup_delivered          # packets delivered again
    int64_t ooo_delivered          # packets delivered ahead of their flow's order
    # ---- tasks (executor.pxi)
    int32_t n_tasks
    int8_t* t_kind                 # T_*
    int32_t* t_rank                # rank it runs on
    int32_t* t_stream              # stream of its rank it occupies (-1: none)
    ps_t* t_dur                    # duration of a compute or reduce task
    int32_t* t_xfer                # transfer of a transfer task (-1: none)
    int64_t* t_succ_ptr            # CSR: tasks that depend on it
    int32_t* t_succ
    int32_t* t_deps                # dependencies not yet completed
    ps_t* t_start                  # when it started (-1: not yet)
    ps_t* t_end                    # when it completed (-1: not yet)
    int32_t n_streams              # streams per rank
    int8_t* s_busy                 # [rank * n_streams + stream]: a task occupies it
    int32_t* s_head                # ... and the tasks waiting for it: a FIFO through t_next
    int32_t* s_tail
    int32_t* t_next
    int32_t* work                  # stack of tasks that became ready (work[0]: how many)
    AnC* an                        # analytic engine: [ch] its port clock and constants (one line per channel)
    int64_t* t_bytes               # analytic engine, retire_transfers: [t] bytes task t's transfer moves
    # ---- link counter sampling for timelines (sample.pxi); off: next_sample = INT64_MAX, one compare per event
    ps_t next_sample               # time of the next sample (INT64_MAX: sampling off)
    ps_t sample_ps                 # interval between samples (doubles each time the ring fills)
    int64_t* samp                  # ring of samp_cap rows, each n_ch x SAMPLE_COLS int64 (cumulative or level)
    int32_t samp_cap               # rows it holds (even)
    int32_t samp_n                 # rows filled: row i is the state at (i + 1) x sample_ps
    # ---- address translation at the ingress port (endpoint.pxi: translate; docs/kernel.md §Address translation)
    int64_t* x_addr                # per transfer: host address in its issuer's host domain (-1: addressed by rank)
    int32_t* x_flow                # per transfer: the flow id that picks its path (NULL: its own index x); a
                                   # part of a split run keeps the whole run's ids (fabric.parts)
    int32_t n_dom                  # host domains with a shadow-window table
    int64_t* w_ptr                 # CSR: each domain's windows (sorted by base, at most endpoint.shadow_windows)
    int64_t* w_base                # per window: host base, size, global target base, owner rank
    int64_t* w_size
    int64_t* w_target
    int32_t* w_rank
    int64_t* tc_tag                # translation cache of each rank's ingress port: [rank][set][way] page (-1 empty)
    int64_t* tc_use                # ... and when each entry was last used (LRU)
    int32_t tc_sets                # sets per port (a power of two; 0: no cache, every translation walks the table)
    int32_t tc_ways                # entries per set
    int32_t page_shift             # log2 of the page a cache entry maps
    ps_t xmiss_ps                  # a miss: the walk of the domain's window table, on top of xlate_ps
    int32_t ln_inject_miss         # lanes of an issue whose translation missed (+ P2P forwarding)
    int32_t ln_inject_miss_p2p
    int64_t tc_clock               # translations so far (the LRU clock)
    int64_t xl_miss                # translations that missed the cache
    int64_t xl_shadow              # translated transfers forwarded through a shadow window to another host domain
    int64_t xl_cross_B             # their bytes
    int64_t xl_ur                  # transfers completed as Unsupported Request (address in no window)
    # ---- permanent faults (faults.pxi): NULL / 0 until Engine.kill_channel is first called
    int32_t* x_void                # per transfer: first packet number voided by its last rewind (-1: none); packets
                                   # numbered from it up to fseq_expect are stale (discarded where they are found)
    int8_t* x_lost                 # per transfer: a live packet of it was lost since the last reroute (rewind it)
    int64_t reclaimed              # packets taken out of the fabric: lost on a dead channel or stale at delivery
    int64_t stale_dropped          # of those, stale packets discarded at their destination
    int64_t flows_moved            # transfers put on a new route set's path (rewind_xfer)
    int64_t flows_rewound          # of those, transfers that had packets in the fabric (made stale, sent again)
