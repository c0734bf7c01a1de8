"""NCCL's double binary tree AllReduce (nccl-like library only; NCCL src/graph/trees.cc, device/all_reduce.h).

Structure. The group's ranks form N >= 2 equal host domains (nodes) of g >= 1 ranks joined by NICs. Every channel c
is one tree over all ranks:
- inside each node a chain (the node's ranks in rank order rotated by c, so successive channels leave the node on
  different ranks, i.e. rails): chain position 0 is the node's head, position i's parent is position i - 1;
- between nodes one of NCCL's two complementary binary trees over the node indices (ncclGetDtree: tree 0 is
  ncclGetBtree; tree 1 its mirror for an even N, its shift by one for an odd N), channel c using tree c % 2, so the
  two trees carry half of the data each: a node's head's parent is the head of its parent node.
Each channel carries its own share of the buffer, cut into K chunks (n_chunks: NCCL's tree chunk rule), pipelined:
reduce up (every rank adds IN and its children's partial sums of the slice, written into its TMP slot per child:
slot 0 the chain child, 1-2 the child nodes' heads; a leaf sends its IN), the root holds the slice's full sum in OUT,
then broadcast down (every rank stores OUT into its children's OUT). Reduce and broadcast run as separate wait and
copy sequences per (rank, channel), as NCCL's tree kernel splits its threads, so slice k's broadcast overlaps slice
k+1's reduce.

Costs are the ring's (sliced.py), nothing counted twice: every receive is a wait point paying the protocol's
per-step software (fitted h_p less the fabric's own one-way hop) on slice 0 of the hop only; through a NIC the
network step's software is a delay on the data path (FragBuilder.xfer); sends are paced by stream-less COMPUTEs at
the rank's share of library.inject_gbps (its copy-loop chains of a kind, scale-up or NIC, share the fitted rate,
scaled by (K + depth) / K: a chain is busy K of the K + depth chunk times of its phase);
a slice is seen one head latency (+ the network delay) after its copy ended; a (rank, channel, phase) keeps at most
`slices_in_flight` slices un-landed. The closed form the tuner uses (library.estimate_ns):
T = launch + 2((g-1) h_p + log2(N) hn_p) + max(2M / Rintra_p, M / Rnode_p).
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import bounds
from fabric.taskgraph import BUF_IN, BUF_OUT, BUF_TMP, COMPUTE


def btree_parent(N: int) -> list[int]:
    """NCCL ncclGetBtree: the parent of every index 0..N-1 (-1 for the root 0)."""
    par = [-1] * N
    for r in range(1, N):
        bit = 1
        while bit < N and not bit & r:
            bit <<= 1
        up = (r ^ bit) | (bit << 1)
        if up >= N:
            up = r ^ bit
        par[r] = up
    return par


def dtree_parents(N: int) -> tuple[list[int], list[int]]:
    """NCCL ncclGetDtree: the two complementary binary trees (parent per index)."""
    t0 = btree_parent(N)
    if N % 2:   # shift by one
        t1 = [-1] * N
        for r in range(N):
            p = t0[(r - 1) % N]
            t1[r] = -1 if p < 0 else (p + 1) % N
    else:       # mirror
        t1 = [-1 if t0[N - 1 - r] < 0 else N - 1 - t0[N - 1 - r] for r in range(N)]
    return t0, t1


def _structure(groups, C: int, n: int):
    """Per lane (rank * C + channel): parent rank (-1 root), slot at the parent, children [(rank, slot)], depth."""
    N, g = len(groups), len(groups[0])
    trees = dtree_parents(N)
    par = np.full(n * C, -1, np.int64)
    slot = np.zeros(n * C, np.int64)
    kids: list[list] = [[] for _ in range(n * C)]
    for c in range(C):
        tp = trees[c % 2]
        chains = [[grp[(i + c) % g] for i in range(g)] for grp in groups]
        nslot = {}
        for x, ch in enumerate(chains):
            for i in range(1, g):
                par[ch[i] * C + c] = ch[i - 1]
                slot[ch[i] * C + c] = 0
            if tp[x] >= 0:
                p = chains[tp[x]][0]
                s = nslot.get(p, 1)
                nslot[p] = s + 1
                par[ch[0] * C + c] = p
                slot[ch[0] * C + c] = s
        for lane in range(n * C):
            if lane % C == c and par[lane] >= 0:
                kids[int(par[lane]) * C + c].append((lane // C, int(slot[lane])))
    depth = np.zeros(n * C, np.int64)
    for lane in range(n * C):
        d, x = 0, lane
        while par[x] >= 0:
            x = int(par[x]) * C + lane % C
            d += 1
        depth[lane] = d
    return par, slot, kids, depth


_MAX_CHUNKS = 64            # bounds the graph (NCCL's own target for a depth-8 tree is 8 x 8 = 64)
_MIN_CHUNK = 8 << 10        # the smallest chunk (NCCL enqueue.cc halves a Simple tree chunk down to 32 KiB; LL/LL128 steps
                            # are smaller: 8 KiB keeps a latency-bound call pipelined)


def n_chunks(nbytes: int, protocol: str, channels: int, depth: int) -> int:
    """Chunks a channel's share is pipelined in (NCCL enqueue.cc, tree: start from one step, slice_p / 2, and halve
    the chunk while a channel has fewer than 8 x depth of them, down to 32 KiB; at most _MAX_CHUNKS)."""
    from fabric.collectives.library import value
    per = nbytes / max(channels, 1)
    chunk = max(value(f"slice_{protocol}_bytes") // 2, _MIN_CHUNK)
    while per < 8 * max(depth, 1) * chunk and chunk > _MIN_CHUNK:
        chunk //= 2
    return int(min(_MAX_CHUNKS, max(1, -(-int(per) // int(chunk)))))


def allreduce(fb, ready, nbytes):
    from fabric.collectives import sliced
    from fabric.collectives.library import tree_groups, value
    groups = tree_groups(fb.view, fb.n)
    if groups is None:
        return sliced.allreduce(fb, ready, nbytes)
    n, M = fb.n, int(nbytes)
    C = max(1, int(fb.choice.channels))
    fb.stripe = False
    depth_fc = int(value("slices_in_flight"))
    par, slot, kids, depth = _structure(groups, C, n)
    K = n_chunks(M, fb.protocol, C, int(depth.max()))
    t = _Tree(fb, ready, M, C, K, par, slot, kids, depth, depth_fc)
    final = []                                         # per slice: the task after which each lane holds it
    for k in range(K):
        have = t.reduce_up(k)
        t.broadcast_down(k, have)
        final.append(have.copy())
    out = fb.join(np.arange(n))
    fb.edge(np.stack(final), out[t.lrank][None, :])
    paced = np.flatnonzero(t.last_pace.ravel() >= 0)   # every copy loop's last pace
    fb.edge(t.last_pace.ravel()[paced], out[t.lrank[paced // 4]])
    fb.need(BUF_IN, M)
    fb.need(BUF_OUT, M)
    fb.need(BUF_TMP, 3 * M)
    return out


def _pace_rates(fb, lrank, par, kids, K: int, max_depth: int) -> np.ndarray:
    """Copy-loop pacing: ps per byte per (rank, crosses NIC). Per (lane, phase, crosses-NIC) one chain; a rank's
    chains of one kind share its rate."""
    from fabric.collectives.library import inject_gbps
    chains: dict = {}
    for lane in range(len(lrank)):
        r = int(lrank[lane])
        if par[lane] >= 0:
            chains[lane, 0, fb.crosses(r, int(par[lane]))] = int(par[lane])
        for kr, _ in kids[lane]:
            chains.setdefault((lane, 1, fb.crosses(r, kr)), kr)
    count: dict = {}
    for (lane, ph, net) in chains:
        key = (int(lrank[lane]), net)
        count[key] = count.get(key, 0) + 1
    # a chain is busy for K of the K + depth slice times of its phase (the pipeline's fill and drain): its share of
    # the rank's rate is rate / count scaled by (K + depth) / K, so that a rank's chains of one kind together move
    # their bytes at the rank's rate over the phase (the closed form's perfectly pipelined 2M / Rintra)
    busy = K / (K + max_depth)
    rate = np.full((fb.n, 2), np.nan)                  # (rank, crosses NIC) -> ps per byte
    for (lane, ph, net), d in chains.items():
        r = int(lrank[lane])
        if np.isnan(rate[r, int(net)]):
            share = inject_gbps(fb.view, fb.protocol, r, d) / (count[r, net] * busy)
            rate[r, int(net)] = 1000.0 / share
    return rate


class _Tree:
    """One tree AllReduce being stamped: its lanes (rank * C + channel) and their tree, the copy loops' rates, and
    the per-sequence state that orders each lane's sends and waits across slices."""

    def __init__(self, fb, ready, M: int, C: int, K: int, par, slot, kids, depth, depth_fc: int):
        n = fb.n
        self.fb, self.M, self.C, self.K = fb, M, C, K
        self.par, self.slot, self.depth, self.depth_fc = par, slot, depth, depth_fc
        L = n * C
        self.lrank = np.repeat(np.arange(n), C)
        self.lchan = np.tile(np.arange(C), n)
        self.ready = np.asarray(ready, np.int64)
        self.cb = bounds(M, C)
        self.clen = self.cb[1:] - self.cb[:-1]
        self.rate = _pace_rates(fb, self.lrank, par, kids, K, int(depth.max()))
        self.tails = np.full((n, n), -1, np.int64)     # (src, dst) -> the tail's ps, asked once per pair
        # per-sequence state as arrays indexed by lane (a call's sends, or waits, are of distinct lanes, so one
        # vectorised step per call keeps each sequence's order): -1 = none yet
        self.last_pace = np.full((L, 2, 2), -1, np.int64)      # (lane, phase, crosses NIC) -> the previous pace
        self.window = np.full((L, 2, max(depth_fc, 1)), -1, np.int64)   # (lane, phase) -> its last depth_fc landed
        self.n_sent = np.zeros((L, 2), np.int64)                # (lane, phase) -> sends so far
        self.last_wait = np.full((L, 2, 3), -1, np.int64)      # (lane, phase, slot) -> the previous wait there
        # the tree as lane arrays: the up sends (lanes with a parent), the down sends (lane, child j) in lane order
        self.maxd = int(depth.max())
        self.nk = np.array([len(k) for k in kids])
        self.up_lanes = np.flatnonzero(par >= 0)
        self.up_pos = np.full(L, -1, np.int64)
        self.up_pos[self.up_lanes] = np.arange(len(self.up_lanes))
        dn_lane = np.array([x for x in range(L) for _ in kids[x]], np.int64)
        dn_j = np.array([j for x in range(L) for j in range(len(kids[x]))], np.int64)
        dn_kid = np.array([kids[x][j][0] for x, j in zip(dn_lane, dn_j)], np.int64)
        self.dn_lane, self.dn_j, self.dn_kid = dn_lane, dn_j, dn_kid
        self.kid_rank = np.full((L, 3), -1, np.int64)  # (lane, child j) -> the child's rank, and its slot
        self.kid_slot = np.full((L, 3), -1, np.int64)
        self.kid_rank[dn_lane, dn_j] = dn_kid
        self.kid_slot[dn_lane, dn_j] = [kids[x][j][1] for x, j in zip(dn_lane, dn_j)]

    def lohi(self, lanes, k):
        """The byte range of slice k of each lane's channel share."""
        c = self.lchan[lanes]
        return self.cb[c] + (self.clen[c] * k) // self.K, self.cb[c] + (self.clen[c] * (k + 1)) // self.K

    def tail_ps(self, src, dst):
        tails = self.tails
        new = tails[src, dst] < 0
        for s, d in zip(src[new].tolist(), dst[new].tolist()):
            t = self.fb.view.hop_ps(s, d, 1) / 1000.0 + (self.fb.software_ns(s, d) if self.fb.crosses(s, d) else 0.0)
            tails[s, d] = int(round(t * 1000.0))
        return tails[src, dst]

    def make(self, lanes, dst, nbyte, src_buf, src_off, dst_buf, dst_off):
        """The stores lane -> dst of one slice and phase, created together in lane order (so that the flows of a
        rank pair are consecutive transfers and spread over the pair's route candidates, i.e. ports, as the
        ring's do), their paces (the copy loop) and tails (the receiver sees the last byte one head latency after
        the copy, plus the network delay through a NIC). Dependencies are added by `wire`."""
        fb = self.fb
        src = self.lrank[lanes]
        issue, seen = fb.xfer(src, dst, nbyte, src_buf, src_off, dst_buf, dst_off)
        landed = fb.landed
        dst = np.asarray(dst, np.int64)
        net = fb.crosses_all(src, dst).astype(np.int64)
        # np.rint rounds half to even, as round() does
        dur = np.rint(np.asarray(nbyte, np.int64) * self.rate[src, net]).astype(np.int64)
        pace = fb._add(COMPUTE, src, stream=-1, dur=dur)
        tl = fb._add(COMPUTE, dst, stream=-1, dur=self.tail_ps(src, dst))
        fb.edge(pace, tl)
        return dict(issue=issue, seen=seen, pace=pace, tail=tl, lanes=np.asarray(lanes), net=net, landed=landed)

    def wire(self, S, idx, after, phase):
        """Sends idx of S (distinct lanes) start after `after` (their data), in their lane's copy-loop and window
        sequences."""
        fb = self.fb
        fb.edge(after, S["issue"][idx])
        fb.edge(after, S["pace"][idx])
        idx = np.atleast_1d(idx)
        lanes, net, pace, issue = S["lanes"][idx], S["net"][idx], S["pace"][idx], S["issue"][idx]
        prev = self.last_pace[lanes, phase, net]
        has = prev >= 0
        fb.edge(prev[has], pace[has])
        self.last_pace[lanes, phase, net] = pace
        cnt = self.n_sent[lanes, phase]
        slot = cnt % self.window.shape[2]
        full = cnt >= self.depth_fc
        fb.edge(self.window[lanes, phase, slot][full], issue[full])
        self.window[lanes, phase, slot] = S["landed"][idx]
        self.n_sent[lanes, phase] = cnt + 1

    def recv(self, lanes, src, seen, tl, k, phase, slt):
        """The wait of each receiving lane for one incoming slice (pays the hop's software on slice 0)."""
        fb = self.fb
        w = fb.wait(self.lrank[lanes], src=src, pay=(k == 0))
        fb.edge(seen, w)
        fb.edge(tl, w)
        slt = np.asarray(slt)
        prev = self.last_wait[lanes, phase, slt]
        fb.edge(np.where(prev >= 0, prev, self.ready[self.lrank[lanes]]), w)
        self.last_wait[lanes, phase, slt] = w
        return w

    def reduce_up(self, k):
        """Slice k's reduce up, deepest level first (a leaf sends its IN, an inner rank the sum it reduced into
        OUT); returns lane -> the task after which OUT holds the slice's full sum (set on the roots)."""
        fb, M, C, nk, depth, par = self.fb, self.M, self.C, self.nk, self.depth, self.par
        lrank, up_lanes, up_pos, kid_rank, kid_slot = self.lrank, self.up_lanes, self.up_pos, self.kid_rank, \
            self.kid_slot
        lo, hi = self.lohi(up_lanes, k)
        U = self.make(up_lanes, par[up_lanes], hi - lo, np.where(nk[up_lanes] > 0, BUF_OUT, BUF_IN), lo, BUF_TMP,
                      self.slot[up_lanes] * M + lo)
        have = np.full(len(lrank), -1, np.int64)
        for d in range(self.maxd, -1, -1):
            sel = np.flatnonzero(depth == d)
            cur = self.ready[lrank[sel]].copy()        # when the lane's partial sum is ready
            for m in (1, 2, 3):
                grp = sel[nk[sel] == m]
                if not len(grp):
                    continue
                waits = []
                for j in range(m):
                    kr = kid_rank[grp, j]
                    q = up_pos[kr * C + self.lchan[grp]]
                    waits.append(self.recv(grp, kr, U["seen"][q], U["tail"][q], k, 0, kid_slot[grp, j]))
                glo, ghi = self.lohi(grp, k)
                offs = np.stack([glo] + [kid_slot[grp, j] * M + glo for j in range(m)], axis=1)
                red = fb.reduce(lrank[grp], ghi - glo, BUF_OUT, glo,
                                np.array([[BUF_IN] + [BUF_TMP] * m], np.int8), offs)
                for w in waits:
                    fb.edge(w, red)
                cur[np.searchsorted(sel, grp)] = red
            snd = sel[par[sel] >= 0]
            if len(snd):
                self.wire(U, up_pos[snd], cur[np.searchsorted(sel, snd)], 0)
            roots = sel[par[sel] < 0]
            have[roots] = cur[np.searchsorted(sel, roots)]
        return have

    def broadcast_down(self, k, have):
        """Slice k's broadcast down, root first: OUT into every child's OUT; sets `have` of every non-root lane to
        the wait after which it holds the slice."""
        dn_lane, dn_j, dn_kid, lchan, lrank = self.dn_lane, self.dn_j, self.dn_kid, self.lchan, self.lrank
        lo, hi = self.lohi(dn_lane, k)
        D = self.make(dn_lane, dn_kid, hi - lo, BUF_OUT, lo, BUF_OUT, lo)
        for d in range(0, self.maxd):
            for j in range(3):
                q = np.flatnonzero((self.depth[dn_lane] == d) & (dn_j == j))
                if not len(q):
                    continue
                grp = dn_lane[q]
                self.wire(D, q, have[grp], 1)
                kl = dn_kid[q] * self.C + lchan[grp]
                have[kl] = self.recv(kl, lrank[grp], D["seen"][q], D["tail"][q], k, 1, np.zeros(len(kl), np.int64))


CORES = {"tree": allreduce}
