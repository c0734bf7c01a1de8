"""In-switch reduction and multicast (NVLS / NVLink SHARP class) and NCCL 2.27 symmetric kernels: nccl-like only.

Built from the kernel's in-switch legs (fabric.taskgraph SW_UP / SW_DOWN; docs/kernel.md §In-switch reduction and
multicast): a leg is one hop of a route, rank -> its switch (UP, consumed by the switch's reduce / multicast engine)
or switch -> rank (DOWN, injected by the switch), so the packets that cross each link are exactly the switch's
traffic and contend with everything else on those links.

- multicast store of s bytes by rank i (multimem.st): one UP leg of s from i, then one DOWN leg of s to every member
  of the group (i included: the switch writes back to the sender too). i's uplink carries s, every downlink s.
- reduce-load of s bytes by rank i (multimem.ld_reduce): one UP leg of s from every member (i included), then one
  DOWN leg of s to i after all of them (the switch reduces when it has every operand). Every member's uplink carries
  s per requester, i's downlink s. The header-only read requests the switch fans out are not simulated (the pull is
  modelled as its data half).
- NVLS AllReduce of M over g ranks (one switch domain): reduce-load of chunk i (M/g) by rank i, then multicast store
  of it: each GPU sends and receives M (1 + 1/g) (NCCL's NVLS; the conservation test counts it on the links).
- NVLS tree (several domains, NCCL NVLS_TREE class): the reduce-load phase in every domain, ring AllReduce of chunk j
  over the NIC rails among the ranks of in-domain index j (sliced._Rings, as `hierarchical`), multicast phase.
- Symmetric kernels (collectives.nccl_like.symmetric, NCCL 2.27): `sym_oneshot` (LL: every rank stores its M into every
  peer, one wait) and `sym_nvls` (the NVLS two-shot above with two Simple step latencies instead of the NVLS
  algorithm latency), both after the symmetric launch launch_sym_ns.

Pacing: each rank's UP bytes of a slice are paced by a stream-less COMPUTE at the fitted NVLS rate (k_nvls x
nvls_efficiency[arch] x the rank's scale-up rate, GPU-side: the links keep their spec rate); slice k+1's legs are
issued when slice k's pace has run, so slices pipeline. Latency: the NVLS algorithm latency (nvls_lat_ns, NCCL's
25 us, which includes its fabric crossings) less the fabric's own zero-load crossing of the schedule (4 one-way
hops), as one delay after the launch. The legs carry no symbolic semantics (the reduction is in the switch).
"""
from __future__ import annotations

import math

import numpy as np

from fabric.collectives._frag import bounds
from fabric.collectives.library import capable, nvls_gbps  # noqa: F401 (re-exported)
from fabric.taskgraph import BUF_IN, BUF_OUT, COMPUTE, SW_DOWN, SW_UP, TRANSFER

_MAX_SLICES = 16
_SLICE_BYTES = 256 << 10   # a chunk is pipelined in slices of at least this (at most _MAX_SLICES): the phases of
                           # slice k overlap those of k+1 (NCCL's NVLS moves a channel's part in 128 KiB..1 MiB steps)


def _ports(view, r: int) -> int:
    from fabric.topology import SWITCH
    t = view.topo
    return int(((t.ch_src == r) & (t.node_kind[t.ch_dst] == SWITCH)).sum())


class _Phase:
    """The NVLS phases of disjoint equal groups (one switch domain each) over byte range [base, base + length) of
    each rank: chunk x of a group is owned by its x-th member (rank order)."""

    def __init__(self, fb, groups, base, length, max_slices: int = _MAX_SLICES):
        n = fb.n
        groups = [sorted(int(r) for r in g) for g in groups]
        g = len(groups[0])
        self.fb, self.g = fb, g
        self.memb = np.empty((n, g), np.int64)       # rank -> its group's members
        self.me = np.empty(n, np.int64)
        for grp in groups:
            self.memb[grp] = grp
            self.me[grp] = np.arange(g)
        self.base = np.asarray(base, np.int64)
        self.length = np.asarray(length, np.int64)
        chunk = int(-(-int(self.length.max()) // g)) if len(self.length) else 0
        C = max(1, min(int(fb.choice.channels) if fb.choice else 1, _ports(fb.view, 0)))
        self.K = int(min(max_slices, max(1, math.ceil(chunk / _SLICE_BYTES))))
        self.C = C
        self.ps_per_B = 1000.0 / nvls_gbps(fb.view)

    def lohi(self, r, k):
        """Byte range of slice k of rank r's own chunk."""
        r = np.asarray(r, np.int64)
        x = self.me[r]
        lo = self.base[r] + (self.length[r] * x) // self.g
        c = self.base[r] + (self.length[r] * (x + 1)) // self.g - lo
        return lo + (c * k) // self.K, lo + (c * (k + 1)) // self.K

    def via(self, r, shift):
        """A member of r's group other than r (rotated by shift): the pair whose route gives r's leg."""
        r = np.asarray(r, np.int64)
        return self.memb[r, (self.me[r] + 1 + np.asarray(shift, np.int64) % (self.g - 1)) % self.g]

    def legs(self, op, rank, peer, nbytes):
        """Legs striped into min(C, bytes) flows, C = the rank's scale-up ports (at most the channels): consecutive
        transfers take consecutive route candidates, i.e. ports (fewer stripes leave ports idle: -15 % measured).
        Returns per leg a JOIN before its stripes (its dependencies go there) and one after them."""
        fb = self.fb
        rank, peer, nbytes = np.broadcast_arrays(np.asarray(rank, np.int64), np.asarray(peer, np.int64),
                                                 np.asarray(nbytes, np.int64))
        rank, peer, nbytes = rank.ravel(), peer.ravel(), nbytes.ravel()
        start = fb.join(rank)
        done = fb.join(peer if op == SW_DOWN else rank)
        k = np.maximum(1, np.minimum(self.C, nbytes))          # stripes per leg
        b = np.maximum(nbytes, 1)
        leg = np.repeat(np.arange(len(rank)), k)
        j = np.arange(len(leg)) - np.repeat(np.cumsum(k) - k, k)   # stripe index within its leg
        part = b[leg] * (j + 1) // k[leg] - b[leg] * j // k[leg]
        ids = fb._add(TRANSFER, rank[leg], peer=peer[leg], nbytes=part, op=op)
        fb.edge(start[leg], ids)
        fb.edge(ids, done[leg])
        return start, done

    def run(self, ready, reduce_load: bool, multicast: bool, chain: str = ""):
        """The phases asked for, slice by slice. Returns per rank the JOIN after all its work. With only one phase
        (NVLS tree) its pace runs at the phase's share of the NVLS rate (reduce-load g/(g+1), multicast 1/(g+1)):
        the pipelined pieces of both phases overlap and share the GPU's rate; `chain` names a pace sequence that
        continues across the phases of that name (the pieces of one phase pace one after the other)."""
        fb, g, n = self.fb, self.g, self.fb.n
        r = np.arange(n)
        ps_per_B = self.ps_per_B
        if reduce_load != multicast:
            ps_per_B *= (g + 1) / g if reduce_load else (g + 1)
        tails = fb.__dict__.setdefault("_nvls_pace", {})
        if chain in tails:       # the legs of slice 0 wait for the end of the chain's previous pace too
            j0 = fb.join(r)
            fb.edge(np.asarray(ready, np.int64), j0)
            fb.edge(tails[chain], j0)
            ready = j0
        prev = np.asarray(ready, np.int64)
        finals = [[] for _ in range(n)]
        for k in range(self.K):
            lo, hi = self.lohi(r, k)
            s = hi - lo                                    # rank r's slice of its own chunk
            up_bytes = np.zeros(n, np.int64)
            got = np.asarray(prev, np.int64)               # when rank i holds its reduced slice
            if reduce_load:
                # every member j of i's group sends s[i] up; then the switch returns s[i] to i
                req = np.repeat(r, g)                      # leg (i, x): member x of requester i's group
                mem = self.memb[r].reshape(-1)
                st, dn = self.legs(SW_UP, mem, self.via(mem, req), s[req])
                fb.edge(prev[req], st)
                fb.edge(prev[mem], st)
                np.add.at(up_bytes, mem, s[req])
                st2, dn2 = self.legs(SW_DOWN, self.via(r, r + 1), r, s)
                fb.edge(dn.reshape(n, g), st2[:, None])
                got = dn2
                for i in range(n):
                    finals[i].append(int(dn2[i]))
            if multicast:
                st, dn = self.legs(SW_UP, r, self.via(r, r + 2), s)
                fb.edge(got, st)
                up_bytes += s
                src = np.repeat(r, g)
                dst = self.memb[r].reshape(-1)
                st2, dn2 = self.legs(SW_DOWN, self.via(dst, src + 3), dst, s[src])
                fb.edge(np.repeat(dn, g), st2)
                for d, t in zip(dst.tolist(), dn2.tolist()):
                    finals[d].append(t)
            pace = fb._add(COMPUTE, r, stream=-1, dur=np.rint(up_bytes * ps_per_B).astype(np.int64))
            fb.edge(prev, pace)
            if chain and chain in tails:
                fb.edge(tails[chain], pace)
            if chain:
                tails[chain] = pace
            prev = pace
        out = fb.join(r)
        fb.edge(prev, out)
        for i in range(n):
            fb.edge(np.asarray(finals[i], np.int64), out[i])
        return out


def _latency(fb, ready, total_ns: float):
    """The algorithm latency less the fabric's own zero-load crossing (4 one-way hops): a delay after launch."""
    import warnings
    n = fb.n
    a, b = 0, 1 if n > 1 else 0
    fab = 4 * fb.view.hop_ps(a, b) / 1000.0 if n > 1 else 0.0
    sw = total_ns - fab
    if sw < 0:
        warnings.warn(f"nccl-like NVLS: the fabric's own crossing {fab:.0f} ns exceeds the algorithm latency "
                      f"{total_ns:.0f} ns; clamped to 0", stacklevel=3)
        sw = 0.0
    d = fb.compute_delay(np.arange(n), sw)
    fb.edge(ready, d)
    return d


def _need(fb, nbytes):
    fb.need(BUF_IN, nbytes)
    fb.need(BUF_OUT, nbytes)


def nvls(fb, ready, nbytes):
    """One-domain NVLS AllReduce (NCCL NVLS): reduce-load of chunk i by rank i, multicast store of it."""
    from fabric.collectives.library import value
    n = fb.n
    ready = _latency(fb, ready, value("nvls_lat_ns"))
    ph = _Phase(fb, [range(n)], np.zeros(n, np.int64), np.full(n, nbytes, np.int64))
    _need(fb, nbytes)
    return ph.run(ready, True, True)


def sym_nvls(fb, ready, nbytes):
    """NCCL 2.27 symmetric two-shot with NVLS multicast: as nvls, two Simple step latencies instead of NVLS's."""
    from fabric.collectives.library import value
    n = fb.n
    ready = _latency(fb, ready, 2 * value("h_Simple_ns"))
    ph = _Phase(fb, [range(n)], np.zeros(n, np.int64), np.full(n, nbytes, np.int64))
    _need(fb, nbytes)
    return ph.run(ready, True, True)


def sym_oneshot(fb, ready, nbytes):
    """NCCL 2.27 symmetric one-shot LL: every rank stores its M (LL lines) into every peer's window, paced at the LL
    copy rate, then one wait (the LL step time, reduction fused in the loop)."""
    from fabric.collectives.library import inject_gbps
    from fabric.collectives.reduce_scatter import pairs
    n, M = fb.n, int(nbytes)
    i, j = pairs(n)
    issue, seen = fb.xfer(i, j, M, BUF_IN, 0, BUF_OUT, 0)
    fb.edge(ready[i], issue)
    r = np.arange(n)
    pace = fb._add(COMPUTE, r, stream=-1,
                   dur=np.rint((n - 1) * M * 1000.0 / inject_gbps(fb.view, "LL", 0, 1)).astype(np.int64))
    fb.edge(ready, pace)
    w = fb.wait(r, src=(r - 1) % n)
    fb.edge(seen, w[j])
    fb.edge(pace, w)
    fb.edge(ready, w)
    _need(fb, M)
    return w


_PIECE_BYTES = 8 << 20     # NVLS tree: the buffer is pipelined through its three phases in pieces of at least this
_MAX_PIECES = 32           # (at most this many: the fill and drain cost 2/P of the slowest phase)
_TREE_SLICES = 4           # slices per piece and phase


def nvls_tree(fb, ready, nbytes):
    """Several domains (NCCL NVLS_TREE class), pipelined in pieces (at most _MAX_PIECES): per piece, NVLS reduce-load in every
    domain, ring AllReduce of chunk j over the rails among the ranks of in-domain index j, NVLS multicast; piece
    p+1's reduce-load overlaps piece p's network ring and piece p-1's multicast, as NCCL's NVLS tree keeps the
    switch reduction, the network and the multicast busy at once."""
    from fabric.collectives import sliced
    from fabric.collectives.library import value
    doms = sliced.domains(fb)
    if doms is None:
        return nvls(fb, ready, nbytes)
    n, g = fb.n, len(doms[0])
    ready = _latency(fb, ready, value("nvls_lat_ns"))
    P = int(min(_MAX_PIECES, max(1, nbytes // _PIECE_BYTES)))
    cut = bounds(nbytes, P)
    rails = [[d[i] for d in doms] for i in range(g)]
    outs, prev_inter = [], None
    for p in range(P):
        base = np.full(n, cut[p], np.int64)
        ln = np.full(n, cut[p + 1] - cut[p], np.int64)
        rs = _Phase(fb, doms, base, ln, _TREE_SLICES)
        mid = rs.run(ready, True, False, chain="rs")
        bg = cut[p] + bounds(int(cut[p + 1] - cut[p]), g)
        j = rs.me
        fb.net_pipelined = p > 0          # the network steps' start-up (d_net, F_S) is paid once per call
        inter = sliced._Rings(fb, mid, rails, bg[j], bg[j + 1] - bg[j])
        if prev_inter is not None:        # the rail rings of successive pieces share one copy loop (NIC)
            inter.last_pace = prev_inter.last_pace
        sliced._rs(fb, inter, first=BUF_OUT, own=BUF_OUT, tmp_off=nbytes)
        sliced._ag(fb, inter)
        prev_inter = inter
        fb.net_pipelined = False
        ag = _Phase(fb, doms, base, ln, _TREE_SLICES)
        outs.append(ag.run(inter.finish(), False, True, chain="ag"))
    sliced._need(fb, nbytes, tmp=2)
    done = fb.join(np.arange(n))
    for o in outs:
        fb.edge(o, done)
    return done


CORES = {"nvls": nvls, "nvls_tree": nvls_tree, "sym_oneshot": sym_oneshot, "sym_nvls": sym_nvls}
