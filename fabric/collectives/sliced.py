"""Pipelined multi-channel rings of the nccl-like library.

- Channels: each of the C channels is a ring of its own (library.ring: fabric.topology.ring_order, channel c's
  ring shifted by c inside every domain so that the channels cross between domains on different rails) and moves
  its share of every chunk (chunk i is cut into C parts; channel c moves part c). Channels run in parallel, as
  NCCL's channels on different SMs: each has its own wait sequence per rank.
- Pacing: each lane's stores are paced by a stream-less COMPUTE (the copy loop) at its share of
  library.inject_gbps, the fitted fraction of the link or NIC rate a GPU reaches with the protocol; the fabric's
  links keep their spec rate. The receiver sees a slice when its stores have landed (+ the network step's software
  delay through a NIC) and one head latency (+ that delay) after its copy ended.
- Slices: every ring step of a channel moves its part in K slices (library.n_slices), so a rank forwards slice k as
  soon as it has received (and, in a ReduceScatter, reduced) it while slice k+1 is still in flight: transfer and
  reduction overlap as in NCCL's ring.

Per rank and channel the sends of all steps form one sequence (step-major, slice-minor); a send waits for the data
it forwards and for the landing of the send `slices_in_flight` places earlier (NCCL's FIFO of NCCL_STEPS slots).
The wait points form one sequence too; only the first slice of a step pays the protocol's per-step software time
(it is paid once per step of the dependency chain, not per slice).

Chunk i is still rank i's (AllGather input, ReduceScatter output): chunks are named by rank and moved by ring
position. Positions 0..n-1 are taken as ranks 0..n-1 of the fabric for the ring order. Same buffers as the unsliced
ring (reduce_scatter.rs_ring, allgather.ag_ring).
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import FragBuilder, bounds
from fabric.taskgraph import BUF_IN, BUF_OUT, BUF_TMP, COMPUTE
from fabric.topology import domain_groups


class _Rings:
    """The C channel rings of disjoint groups of ranks (all ranks take part; every group has m members), vectorised
    over lanes i = rank * C + channel (so that the stores of one rank's channels are consecutive transfers: the
    kernel spreads consecutive flows of a pair over its route candidates, i.e. over the rank's ports). A group
    works on the byte range [base[r], base[r] + length[r]) of its members, cut into m chunks; chunk x is owned by
    the group's x-th rank in rank order."""

    def __init__(self, fb: FragBuilder, ready, groups, base, length):
        from fabric.collectives.library import inject_gbps, n_slices, ring, value
        n = fb.n
        C = max(1, int(fb.choice.channels))
        fb.stripe = False           # one flow per store: the channels are the rings
        self.fb, self.n, self.C = fb, n, C
        groups = [sorted(int(r) for r in g) for g in groups]
        m = len(groups[0])
        self.m = m
        gid = np.empty(n, np.int64)
        me = np.empty(n, np.int64)                  # owner index of each rank in its group
        for i, g in enumerate(groups):
            gid[g] = i
            me[g] = np.arange(m)
        self.me = me
        base, length = np.asarray(base, np.int64), np.asarray(length, np.int64)
        self.K = n_slices(int(-(-length.max() // m)), fb.protocol, C)
        self.depth = int(value("slices_in_flight"))
        # per channel and group: the ring order (channel c's ring of all ranks, filtered to the group)
        order = np.empty((C, n), np.int64)          # order[c, r] = rank's ring position in its group
        perm = np.empty((C, len(groups), m), np.int64)   # perm[c, i] = group i's ranks in channel c's ring order
        for c in range(C):
            full = np.asarray(ring(fb.view, n, c), np.int64)
            member = gid[full]
            for i in range(len(groups)):
                perm[c, i] = full[member == i]
                order[c, perm[c, i]] = np.arange(m)
        self.rank = np.repeat(np.arange(n), C)                                 # lane -> rank
        self.chan = np.tile(np.arange(C), n)                                   # lane -> channel
        self.grp = gid[self.rank]
        self.pos = order[self.chan, self.rank]
        self.permtab = perm[self.chan, self.grp]                               # [lanes, m]
        lanes = np.arange(len(self.rank))
        self.nxt = self.permtab[lanes, (self.pos + 1) % m]                     # lane -> next rank
        self.prv = self.permtab[lanes, (self.pos - 1) % m]                     # lane -> previous rank
        self.recv = self.nxt * C + self.chan                                   # lane of the receiver
        self.lbase, self.llen = base[self.rank], length[self.rank]
        self.cur = [np.asarray(ready, np.int64)[self.rank].copy() for _ in range(self.K)]
        self.sent: list = []
        self.last_wait = None
        # injection pacing: lane (r, c) may push payload at most at its share of the rank's copy-loop rate
        net = fb.crosses_all(self.rank, self.nxt)
        # (a rank's lanes of one kind, scale-up or NIC, share the rate of the first one's path)
        _, first, inv, count = np.unique(self.rank * 2 + net, return_index=True, return_inverse=True,
                                             return_counts=True)
        rate = np.array([inject_gbps(fb.view, fb.protocol, int(self.rank[i]), int(self.nxt[i])) for i in first])
        self.ps_per_B = 1000.0 / (rate / count)[inv.ravel()]
        self.last_pace = None
        # the last byte of a paced slice reaches the receiver one head latency after the copy ends, plus (through a
        # NIC) the network step's software delay: a stream-less COMPUTE on the receiver after the pace
        tail = fb._per_pair(lambda a, b: fb.view.hop_ps(a, b, 1) / 1000.0 +
                            (fb.software_ns(a, b) if fb.crosses(a, b) else 0.0), self.rank, self.nxt, np.float64)
        self.tail_ps = np.rint(tail * 1000.0).astype(np.int64)

    def chunk(self, back: int) -> np.ndarray:
        """Per lane: the chunk owned by the rank `back` ring positions behind the lane's rank."""
        lanes = np.arange(len(self.rank))
        return self.me[self.permtab[lanes, (self.pos - back) % self.m]]

    def lohi(self, ch: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per lane: byte range of slice k of its channel's part of chunk ch of its group's range."""
        lo = self.lbase + (self.llen * ch) // self.m
        c = self.lbase + (self.llen * (ch + 1)) // self.m - lo
        piece = self.chan * self.K + k
        q = self.C * self.K
        return lo + (c * piece) // q, lo + (c * (piece + 1)) // q

    def finish(self) -> np.ndarray:
        """Per rank a JOIN after the last task of every slice of every channel."""
        j = self.fb.join(np.arange(self.n))
        for k in range(self.K):
            self.fb.edge(self.cur[k], j[self.rank])
        return j

    def step(self, ch, src_buf, dst_buf, reduce_ch=None, own_buf=BUF_IN, tmp_off=0):
        """One ring step of every channel, slice by slice: lane (r, c) sends slice k of chunk ch to its next rank;
        with reduce_ch, the receiver adds IN to the received slice of chunk reduce_ch into OUT (ReduceScatter)."""
        fb = self.fb
        for k in range(self.K):
            lo, hi = self.lohi(ch, k)
            issue, seen = fb.xfer(self.rank, self.nxt, hi - lo, src_buf, lo,
                                  BUF_TMP if reduce_ch is not None else dst_buf,
                                  lo + (tmp_off if reduce_ch is not None else 0))
            fb.edge(self.cur[k], issue)
            # the copy loop: a stream-less COMPUTE as long as the payload at the lane's injection rate, in
            # sequence per lane; the receiver sees the slice when both the stores and the copy are done
            pace = fb._add(COMPUTE, self.rank, stream=-1,
                           dur=np.rint((hi - lo) * self.ps_per_B).astype(np.int64))
            fb.edge(self.cur[k], pace)
            if self.last_pace is not None:
                fb.edge(self.last_pace, pace)
            self.last_pace = pace
            if len(self.sent) >= self.depth:
                fb.edge(self.sent[-self.depth], issue)
            self.sent.append(fb.landed)
            w = fb.wait(self.rank, src=self.prv, pay=(k == 0))
            fb.edge(self.cur[k], w)        # the lane's own previous work on this slice (reduce, copy) first
            fb.edge(seen, w[self.recv])
            tail = fb._add(COMPUTE, self.nxt, stream=-1, dur=self.tail_ps)
            fb.edge(pace, tail)
            fb.edge(tail, w[self.recv])
            if self.last_wait is not None:
                fb.edge(self.last_wait, w)
            self.last_wait = w
            if reduce_ch is None:
                self.cur[k] = w
                continue
            rlo, rhi = self.lohi(reduce_ch, k)
            red = fb.reduce(self.rank, rhi - rlo, BUF_OUT, rlo, np.array([[own_buf, BUF_TMP]], np.int8),
                            np.stack([rlo, rlo + tmp_off], axis=1))
            fb.edge(w, red)
            self.cur[k] = red


def _rs(fb, rings, first=BUF_IN, own=BUF_IN, tmp_off=0):
    """Ring ReduceScatter of every group: the rank ends with the group's sum of its own chunk in OUT (own: where
    its own contribution is, IN or OUT; first: where step 0 reads)."""
    for s in range(rings.m - 1):
        rings.step(rings.chunk(1 + s), first if s == 0 else BUF_OUT, BUF_TMP, reduce_ch=rings.chunk(2 + s),
                   own_buf=own, tmp_off=tmp_off)


def _ag(fb, rings):
    for t in range(rings.m - 1):
        rings.step(rings.chunk(t), BUF_OUT, BUF_OUT)


def _flat(fb, ready, nbytes):
    return _Rings(fb, ready, [range(fb.n)], np.zeros(fb.n, np.int64), np.full(fb.n, nbytes, np.int64))


def _need(fb, nbytes, tmp=1):
    fb.need(BUF_IN, nbytes)
    fb.need(BUF_OUT, nbytes)
    fb.need(BUF_TMP, tmp * nbytes)


def reduce_scatter(fb, ready, nbytes):
    rings = _flat(fb, ready, nbytes)
    _rs(fb, rings)
    _need(fb, nbytes)
    return rings.finish()


def allgather(fb, ready, nbytes):
    rings = _flat(fb, ready, nbytes)
    _ag(fb, rings)
    fb.need(BUF_OUT, nbytes)
    return rings.finish()


def allreduce(fb, ready, nbytes):
    rings = _flat(fb, ready, nbytes)
    _rs(fb, rings)
    _ag(fb, rings)
    _need(fb, nbytes)
    return rings.finish()


def domains(fb):
    """The groups of a hierarchical call: positions by host domain (ranks 0..n-1 of the fabric), or None when the
    positions do not form >= 2 domains of equal size >= 2."""
    return domain_groups(fb.view.topo, fb.n, 2)


def hierarchical(fb, ready, nbytes):
    """AllReduce in three phases (NCCL-style multi-node form): ring ReduceScatter inside every domain (the rank
    with in-domain index j ends with the domain's sum of chunk j), ring AllReduce of chunk j among the ranks of
    index j of all domains (one rail each: the network carries M per node, not 2(n-1)/n M), ring AllGather
    inside every domain. Phases meet at a per-rank JOIN. Scratch: 2M (the rail phase has its own region)."""
    doms = domains(fb)
    if doms is None:
        return allreduce(fb, ready, nbytes)
    n, g = fb.n, len(doms[0])
    zero, full = np.zeros(n, np.int64), np.full(n, nbytes, np.int64)
    intra = _Rings(fb, ready, doms, zero, full)
    _rs(fb, intra)
    mid = intra.finish()
    bg = bounds(nbytes, g)
    j = intra.me                                  # in-domain index = the chunk the rank now holds
    rails = [[d[i] for d in doms] for i in range(g)]
    inter = _Rings(fb, mid, rails, bg[j], bg[j + 1] - bg[j])
    _rs(fb, inter, first=BUF_OUT, own=BUF_OUT, tmp_off=nbytes)
    _ag(fb, inter)
    last = _Rings(fb, inter.finish(), doms, zero, full)
    _ag(fb, last)
    _need(fb, nbytes, tmp=2)
    return last.finish()


CORES = {"allreduce": allreduce, "allgather": allgather, "reduce_scatter": reduce_scatter}
HIERARCHICAL = {"allreduce": hierarchical}
