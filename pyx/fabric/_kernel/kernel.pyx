# The packet kernel: one event loop for links (PHY + data-link layer), switches, endpoints and the task-graph
# executor. Everything below `Engine.run` is nogil C; Python only builds the arrays before and reads them after.
#
# One extension, one C translation unit: the rooms below are include files (textual inclusion, so every inline
# function stays inline across rooms and GCC sees the whole event path at once), and types.pxd is the contract
# they share (every struct, enum and typedef). This file holds the includes and Engine, the Python-facing owner of
# the state. Each room opens with what it models and which records of types.pxd it uses. The array passes that
# touch no simulation state (route tables, task-graph CSRs, the critical path) are the other extension's,
# fabric._arrays (pyx/fabric/_arrays.pyx).
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memset, memcpy
from libc.math cimport log, log1p, expm1
from posix.mman cimport madvise, MADV_DONTNEED, MADV_NOHUGEPAGE
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t, INT64_MAX
cimport numpy as cnp
import numpy as np

from fabric._kernel.types cimport *

cnp.import_array()

KERNEL_VERSION = "0.2.0"

DONE, PAUSED, STUCK = R_DONE, R_PAUSED, R_STUCK
DAMAGED_BIT = PK_DAMAGED_BIT   # bit of a packet's offset that a corrupted unit let in sets (its checksum changes)
PATH_UNBUILT = AT1_UNBUILT      # route_graph()'s at1 of a path the analytic engine's transfers do not take

# fault kinds
FAULT_CORRUPT_FLIT = 0   # corrupt flits n .. n+k-1 sent on a channel
FAULT_LOSE_ACK = 1       # lose the n-th Ack/Nak sent for a channel
FAULT_LOSE_CREDIT = 2    # lose the n-th UpdateFC sent for a channel
FAULT_RETRAIN = 3        # retrain the channel's link at time n ps

include "cpu.pxi"        # C primitives: aligned allocation, prefetch (volatile asm), bit scan
include "rng.pxi"        # splitmix64 streams, content checksums
include "events.pxi"     # event queue: 4-ary heap, delay lanes, winner tree
include "routes.pxi"     # route entries, route graph, path choice
include "phy.pxi"        # physical layer: flit framing, bit errors, injected faults
include "datalink.pxi"   # data-link layer: sequence numbers, replay, Ack/Nak, credits, link timers, receiver
include "switch.pxi"     # switches: VOQs, bitmaps, arbitration, switch pipeline wake-ups
include "endpoint.pxi"   # transaction layer: packet pool, carving, tags, end-to-end window, delivery, completions
include "executor.pxi"   # task graph, analytic engine
include "sample.pxi"     # link counter sampling into a bounded ring, for timelines
include "loop.pxi"       # the event loop (c_run) and its look-ahead prefetches
include "transfers.pxi"  # transfer records: built at set-up or at issue, released once done, their paths and grants
include "init.pxi"       # Engine's set-up steps, run once: dicts of numpy arrays -> SimC
include "faults.pxi"     # permanent faults: dead channels, lost lanes, route changes and flow rewinds
include "waits.pxi"      # after a stuck run: every queue's head, the cycle of credit waits among them


# ================================================================== Python-facing owner of the state
class EngineOptions:
    """The Engine's speed and memory switches: each turns one mechanism on or off and changes no result (each has
    its equivalence test); the tests set them, a run takes the defaults (fabric.sim.make_engine sets the two memory
    ones).
    event_lanes: how many fixed-delay FIFOs may hold events beside the heap (0: the heap alone);
    lane_min_heap: events go to their lane only while the heap holds at least this many. Neither changes
    results (tests/test_event_queue.py checks), only speed: lanes pay off once the heap is deep.
    skip_settled: skip arbitrating channels that cannot send (see settled()); off, every event that may enable
    a send arbitrates. It changes nothing either (tests/test_arbitration.py checks), only speed.
    replay_ring_slots: replay ring slots per channel at the start (a power of two; they double when a channel's
    unacknowledged units fill them, up to the window): storage, not a result (tests/test_replay_ring.py).
    phy_countdown: units that end before their channel's next injected flit fault and bit error skip the PHY's
    look (phy_unit); off, every unit gets it. Results are the same (tests/test_phy_countdown.py checks).
    retire_transfers: (packet engine) build each transfer's record when its task is issued and release them, a
    chunk at a time, once done: memory follows the transfers in flight (a decode step's layers), not all of
    them (128 B each: 2 GB at 1024 ranks). Results are the same (tests/test_retire_transfers.py); transfers()
    and permanent faults, which read every record, are then refused.
    own_addresses: graph["host_addr"] is the engine's to reuse (sim.make_engine's, fresh from kernel_inputs): the
    transfers' addresses are packed into its buffer, not into a second array (120 MB at 1024 ranks).
    """
    __slots__ = ("event_lanes", "lane_min_heap", "skip_settled", "replay_ring_slots", "phy_countdown",
                 "retire_transfers", "own_addresses")

    def __init__(self, event_lanes=MAX_LANES, lane_min_heap=64, skip_settled=True, replay_ring_slots=16,
                 phy_countdown=True, retire_transfers=False, own_addresses=False):
        self.event_lanes = int(event_lanes)
        self.lane_min_heap = int(lane_min_heap)
        self.skip_settled = bool(skip_settled)
        self.replay_ring_slots = int(replay_ring_slots)
        self.phy_countdown = bool(phy_countdown)
        self.retire_transfers = bool(retire_transfers)
        self.own_addresses = bool(own_addresses)

    def __repr__(self):
        return "EngineOptions(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


cdef class Engine:
    """Owns the simulation state (C arrays) and runs the event loop without the GIL.

    Build it with `fabric.sim` (which turns a config, a topology and a task graph into the arrays below);
    counters come back as zero-copy numpy views (`counters()`), per-task start/end times as `task_times()`.
    """
    cdef SimC s
    cdef dict _keep          # numpy arrays whose buffers the C state points into
    cdef list _faults
    cdef bint _started

    def __cinit__(self):
        memset(&self.s, 0, sizeof(SimC))
        self.s.next_sample = INT64_MAX     # sampling off (enable_sampling)
        self._keep = {}
        self._faults = []
        self._started = False

    def __dealloc__(self):
        q_free(&self.s.heap)
        free(self.s.pk)
        free(self.s.xf)
        free(self.s.ax)
        free(self.s.ring)
        free(self.s.c)
        free(self.s.hop)
        free(self.s.samp)
        free(self.s.x_void)
        free(self.s.x_lost)

    def __init__(self, dict p, dict topo, dict graph, bint analytic=False, dict xlate=None, options=None):
        """p: scalar parameters (ps, bytes, flits); topo: docs/contracts.md arrays; graph: TaskGraph arrays.
        xlate: every host domain's shadow-window table (fabric.address.kernel_tables), for transfers the graph
        addresses (graph["host_addr"]); None: no table (every address is then an Unsupported Request).
        options: the speed and memory switches (EngineOptions; None: its defaults), none of which changes a result."""
        cdef SimC* s = &self.s
        o = EngineOptions() if options is None else options
        setup_params(s, p, topo, analytic, o.skip_settled, o.phy_countdown, o.replay_ring_slots)
        setup_channels(s, self._keep, p, topo)
        setup_nodes(s, self._keep, topo)
        setup_routes(s, self._keep, topo)
        setup_event_queue(s, p, graph, o.event_lanes, o.lane_min_heap)
        setup_tasks(s, self._keep, p, graph)
        setup_packets(s)
        setup_xlate(s, self._keep, p, xlate)
        setup_transfers(s, self._keep, graph, o.retire_transfers, o.own_addresses)

    def add_fault(self, int kind, int ch, int64_t n, int64_t k=1):
        """Inject a deterministic fault (FAULT_* constants) on channel ch before run()."""
        if self._started:
            raise RuntimeError("faults must be added before run()")
        if not 0 <= ch < self.s.n_ch:
            raise ValueError(f"channel {ch} does not exist (0..{self.s.n_ch - 1})")
        self._faults.append((kind, ch, n, k))

    def run(self, int64_t max_events=2**62, int64_t until_ps=2**63 - 1):
        """Process events (nogil) until done, max_events are processed, the next event would fire after until_ps
        (default: no time limit), or the watchdog fires; returns the outcome."""
        cdef int outcome = R_DONE
        cdef int32_t t
        cdef SimC* s = &self.s
        if not self._started:
            self._started = True
            install_faults(s, self._keep, self._faults)
            roots = np.flatnonzero(self._keep["t_deps"] == 0).astype(np.int32)   # before any completes
            for t in roots:
                start_task(s, t)
                drain(s)
        with nogil:
            c_run(s, max_events, until_ps, &outcome)
        return outcome

    # ---- permanent faults (faults.pxi; fabric/faults/failover.py drives them between slices of a run)
    @property
    def next_event_ps(self):
        """Time of the earliest pending event (INT64_MAX: none)."""
        src = q_first(&self.s.heap)
        return INT64_MAX if src == -2 else q_peek(&self.s.heap, src).time

    def advance(self, int64_t t_ps):
        """Move the clock to t_ps, where a fault or reroute applies: every event up to it must have run."""
        if not self._started:
            raise RuntimeError("advance() after the first run()")
        if self.next_event_ps <= t_ps:
            raise RuntimeError(f"events before {t_ps} ps are pending; run(until_ps=...) first")
        if t_ps > self.s.now:
            self.s.now = t_ps

    def kill_channel(self, int32_t ch):
        """Channel ch (one direction) dies now; see faults.pxi."""
        self._check_ch(ch)
        kill_channel(&self.s, ch)

    def revive_channel(self, int32_t ch):
        """Dead channel ch comes back now (resynchronised)."""
        self._check_ch(ch)
        revive_channel(&self.s, ch)

    def set_channel_rate(self, int32_t ch, double ps_per_byte):
        """ch serialises at ps_per_byte (raw wire byte, as the topology's ch_ps_per_byte) from now on."""
        self._check_ch(ch)
        if not ps_per_byte > 0:
            raise ValueError("ps_per_byte must be > 0")
        set_channel_rate(&self.s, ch, ps_per_byte)

    def install_routes(self, pair_ptr, path_ptr, path_ch, path_vcl, keep_path):
        """A new route set from the fabric manager; transfers whose path is not kept are rewound onto it."""
        self._check_ch(0)
        install_routes(&self.s, self._keep, pair_ptr, path_ptr, path_ch, path_vcl, keep_path)

    def routes(self):
        """The paths the engine holds (those of every route set installed, in order): path_ptr, path_ch, path_vcl
        copies."""
        pp = np.asarray(self._keep["path_ptr"], np.int64).copy()
        hv = np.asarray(self._keep["path_hv"], np.int32)[:int(pp[pp.size - 1])]
        return pp, hv >> self.s.vcl_bits, (hv & ((1 << self.s.vcl_bits) - 1)).astype(np.int8)

    def fault_totals(self):
        """Permanent-fault counters: packets reclaimed (lost on a dead channel, or stale and dropped at delivery),
        stale_dropped (the latter), flows_moved (transfers put on a new route set's path) and flows_rewound (those
        of them that had packets in the fabric)."""
        return dict(reclaimed=self.s.reclaimed, stale_dropped=self.s.stale_dropped, flows_moved=self.s.flows_moved,
                    flows_rewound=self.s.flows_rewound)

    def dead_channels(self):
        """bool[n_ch]: channels dead now."""
        return np.array([self.s.c[i].down_until == INT64_MAX for i in range(self.s.n_ch)], bool)

    def _check_ch(self, int32_t ch):
        if self.s.analytic:
            raise ValueError("permanent faults need the packet engine (the analytic engine keeps no packets)")
        if self.s.xf_lazy:
            raise ValueError("permanent faults rewind transfers from their records: build the Engine with "
                             "retire_transfers=False")
        if not 0 <= ch < self.s.n_ch:
            raise ValueError(f"channel {ch} does not exist (0..{self.s.n_ch - 1})")

    def enable_sampling(self, int64_t sample_ps, int64_t max_bytes=64 << 20):
        """Sample every channel's busy time, queue length, credit stall and replays every sample_ps into a ring of
        at most max_bytes (sample.pxi: full, it drops every other row and doubles the interval). Before run()."""
        if self._started:
            raise RuntimeError("sampling must be enabled before run()")
        if sample_ps <= 0:
            raise ValueError("sample_ps must be > 0")
        cdef int64_t row = max(<int64_t>self.s.n_ch, 1) * SAMPLE_COLS * sizeof(int64_t)
        cdef int64_t cap = max(2, min(max_bytes // row, 1 << 20)) & ~1
        free(self.s.samp)
        free(self.s.x_void)
        free(self.s.x_lost)
        self.s.samp = <int64_t*>malloc(cap * row)
        if self.s.samp == NULL:
            raise MemoryError()
        self.s.samp_cap = <int32_t>cap
        self.s.samp_n = 0
        self.s.sample_ps = sample_ps
        self.s.next_sample = sample_ps

    def samples(self):
        """(interval_ps, int64[n, n_ch, 4] copy): row i is the state at (i + 1) x interval_ps; columns busy_ps,
        queue_len, credit_stall_ps, replays (SAMPLE_NAMES)."""
        n = self.s.samp_n
        out = np.zeros((n, self.s.n_ch, SAMPLE_COLS), np.int64)
        cdef int64_t[:, :, ::1] v = out
        if n and self.s.n_ch:
            memcpy(&v[0, 0, 0], self.s.samp, n * self.s.n_ch * SAMPLE_COLS * sizeof(int64_t))
        return int(self.s.sample_ps), out

    # ---- results
    @property
    def now_ps(self):
        return self.s.now

    @property
    def events(self):
        return self.s.events

    @property
    def pending_events(self):
        return q_pending(&self.s.heap)

    @property
    def lane_slots(self):
        """Event slots the delay lanes' rings hold now, in all (storage, not a result: see lanes_trim)."""
        return sum(self.s.heap.lane[k].cap for k in range(self.s.heap.n_lanes))

    def route_graph(self):
        """The route graph packets walk (copies): hv[n] = channel << vcl_bits | VC level of node n's hop, next[n] =
        the node after it (-1: last hop), at1[p] = node of path p's second hop (-1: one hop; PATH_UNBUILT: the
        analytic engine holds only the paths its transfers take)."""
        cdef int64_t i
        hv = np.empty(self.s.n_hop, np.int32)
        nxt = np.empty(self.s.n_hop, np.int32)
        for i in range(self.s.n_hop):
            hv[i] = self.s.hop[i].hv
            nxt[i] = self.s.hop[i].next
        return dict(hv=hv, next=nxt, at1=self._keep["path_at1"].copy(), vcl_bits=self.s.vcl_bits)

    def counters(self):
        """Per-channel counters as zero-copy int64 views: strided columns of the CntC table, whose base keeps it
        alive (copy them to keep a snapshot); as int64 copies: queue_len and queue_max (32-bit halves of one
        column), acks and updatefc (from the data-link state, where they are counted)."""
        cdef int32_t i
        cdef int64_t[::1] acks = np.zeros(self.s.n_ch, np.int64)
        cdef int64_t[::1] upd = np.zeros(self.s.n_ch, np.int64)
        for i in range(self.s.n_ch):
            acks[i] = self.s.c[i].ack_sent_n - self.s.k[i].naks
            upd[i] = self.s.c[i].upd_sent_n
        k = self._keep["k"][:self.s.n_ch]
        q = CNT_COLS.index("queue_len|queue_max")
        copies = {"queue_len": k.view(np.int32)[:, 2 * q].astype(np.int64),
                  "queue_max": k.view(np.int32)[:, 2 * q + 1].astype(np.int64),
                  "acks": np.asarray(acks), "updatefc": np.asarray(upd)}
        return {name: copies[name] if name in copies else k[:, CNT_COLS.index(name)] for name in COUNTERS}

    def totals(self):
        s = &self.s
        return dict(e2e_holds=s.e2e_holds, arbitrations=s.arbitrations, carved=s.carved, delivered=s.delivered,
                    duplicates=s.dup_delivered, out_of_order=s.ooo_delivered,
                    packets_live=s.pkts_live, tasks_left=s.tasks_left, events=s.events, now_ps=s.now,
                    replay_ring_slots=s.ring_cap)

    def translations(self):
        """Ingress address translation so far: translations, cache misses, shadow forwards (translated transfers
        forwarded into another host domain) and their bytes, Unsupported Request completions."""
        s = &self.s
        return dict(translations=s.tc_clock, cache_misses=s.xl_miss, shadow_forwards=s.xl_shadow,
                    cross_domain_bytes=s.xl_cross_B, unsupported_requests=s.xl_ur)

    def task_times(self):
        return self._keep["t_start"], self._keep["t_end"]

    def link_state(self):
        """Data-link state at this moment, for end-of-run invariant checks (copies)."""
        cdef int32_t i
        V = self.s.nvc
        C = self.s.n_ch
        n = max(C, 1)
        cvt = self._keep["cv"]
        out = dict(
            credits_available=(cvt[:, CV_COLS.index("cr_limit")] - cvt[:, CV_COLS.index("cr_used")]).reshape(C, V),
            credit_pool_flits=self.s.credit_pool_flits,
            replay_count=np.zeros(n, np.int32), buffer_occupancy=cvt[:, CV_COLS.index("occ")].reshape(C, V).copy(),
            expected_seq=np.zeros(n, np.int32), next_seq=np.zeros(n, np.int32), down_until_ps=np.zeros(n, np.int64))
        for i in range(C):
            out["replay_count"][i] = self.s.c[i].r_count
            out["expected_seq"][i] = self.s.c[i].expected
            out["next_seq"][i] = self.s.c[i].next_seq
            out["down_until_ps"][i] = self.s.c[i].down_until
        return out

    def transfer_records_held(self):
        """Transfer records not yet released: with retire_transfers, those not done (0 once every transfer is);
        without, all of them."""
        cdef int64_t c, n = 0
        if not self.s.xf_lazy:
            return self.s.n_xf
        for c in range((max(self.s.n_xf, 1) + XF_CHUNK - 1) // XF_CHUNK):
            n += self.s.xf_live[c]
        return n

    def transfers(self):
        """Per transfer: src, dst, bytes total/delivered, status (0 ok, 1 unsupported request), start ps."""
        cdef int32_t i
        cdef XferC* xf
        cdef AnXC* ax
        if self.s.xf_lazy:
            raise RuntimeError("this Engine released its transfer records (retire_transfers=True)")
        n = self.s.n_xf
        names = ("src", "dst", "total_B", "delivered_B", "status", "start_ps", "kind", "path")
        table = np.zeros((len(names), n), np.int64)
        csum = np.zeros(n, np.uint64)
        cdef int64_t[:, ::1] t = table
        cdef uint64_t[::1] c = csum
        if self.s.analytic:                # its compact records: nothing delivered, no packets
            for i in range(n):
                ax = &self.s.ax[i]
                t[0, i] = ax.src; t[1, i] = ax.dst; t[2, i] = self.s.t_bytes[ax.task]; t[4, i] = ax.status
                t[6, i] = ax.kind; t[7, i] = ax.path
            n = 0
        for i in range(n):                 # C loop: ~1 M transfers in a decode step
            xf = &self.s.xf[i]
            t[0, i] = xf.src; t[1, i] = xf.dst; t[2, i] = xf.total_B; t[3, i] = xf.delivered_B
            t[4, i] = xf.status; t[5, i] = xf.start_ps; t[6, i] = xf.kind; t[7, i] = xf.path
            c[i] = xf.csum
        out = {k: table[j] for j, k in enumerate(names)}
        out["csum"] = csum
        return out

    def stuck_report(self):
        """What a run that stopped with work pending waits for (docs/kernel.md, "A stuck run"): "channels", one row per
        channel holding unacknowledged units or queued packets (credits per VC, link down); "queues", one row per
        non-empty queue with its head (WAIT_COLS arrays: what the head needs, what holds it); "cycle", the rows of
        "queues" that form a cycle of credit waits, in order ([] if none: not a credit deadlock)."""
        rows = []
        cdef int32_t ch
        for ch in range(self.s.n_ch):
            if self.s.c[ch].r_count or self.s.k[ch].queue_len:
                rows.append(dict(channel=ch, unacked=self.s.c[ch].r_count, queued=self.s.k[ch].queue_len,
                                 credits=[self.s.cvs[cv(&self.s, ch, v)].cr_limit - self.s.cvs[cv(&self.s, ch, v)].cr_used
                                          for v in range(self.s.nvc)],
                                 down=self.s.c[ch].down_until > self.s.now))
        heads = waiting_heads(&self.s)
        return dict(channels=rows, queues=heads, cycle=credit_wait_cycle(heads, self.s.nvc))

SAMPLE_NAMES = ("busy_ps", "queue_len", "credit_stall_ps", "replays")
COUNTERS = ("units", "packets", "tlp_B", "payload_B", "busy_ps", "corrupted", "flits_corrupted", "naks", "acks", "replays",
            "replay_timeouts", "retrains", "credit_stall_ps", "updatefc", "ctrl_lost", "dups_discarded",
            "queue_len", "queue_max", "queue_area", "qlast", "credit_errors", "flits")
def line_aligned_zeros(rows, cols):
    """int64[rows, cols] of zeros starting on a 64 B boundary (numpy only promises 16 B): records laid out by cache
    line in types.pxd stay on their lines."""
    buf = np.zeros(rows * cols + 8, np.int64)
    skip = (-buf.ctypes.data % 64) // 8
    return buf[skip:skip + rows * cols].reshape(rows, cols)


# column order of the CntC and CvC records (types.pxd) in their int64 tables
CNT_COLS = ("units", "packets", "tlp_B", "payload_B", "busy_ps", "queue_len|queue_max", "queue_area", "qlast",
            "credit_stall_ps", "corrupted", "flits_corrupted", "naks", "replays", "replay_timeouts", "retrains",
            "ctrl_lost", "dups_discarded", "credit_errors", "flits")
CV_COLS = ("cr_used", "cr_limit", "freed", "freed_sent", "occ")
