"""AllToAll (EP dispatch/combine): pairwise direct stores. `nbytes` = M, the bytes each rank sends in total
(nccl-tests convention), split into n blocks: block j (for rank j) has s + (j < M mod n) bytes, s = M // n, at
offset a[j] of IN. Rank j receives block j of every rank i into slot i of its OUT (slot size = block j's size).
Its own block is a local copy (a one-operand REDUCE). One wait per rank for the n-1 incoming blocks. With the
nccl-like library a rank's sends through a NIC are posted one after the other (o_p2p_ns each, library.py), and
its sends are paced by its copy loop (library.inject_gbps: the fitted fraction of the scale-up or NIC rate the GPU
and proxy reach, as the ring's, tree's and NVLS's sends are): per rank and kind of path (scale-up, NIC) the sends
form one sequence in the staggered order, send m leaves when the copy of send m-1 has run, and the receiver sees a
block when its store has landed and one head latency after its copy ended.

deepep_ll: DeepEP's low-latency dispatch/combine over NVLink + RDMA (its README and csrc/kernels/legacy/
internode_ll.cu; EPv2's hybrid mode, deep_ep/buffers/elastic.py, docs/sources.md §DeepEP). Every GPU writes each
block for a GPU of another node straight from the kernel (GPU-initiated RDMA, IBGDA: no CPU proxy, so no posts in
sequence and no network software step) into a staging slot of the destination's rail peer, the GPU at its own
position in the destination node, in pieces of collectives.nccl_like.deepep_chunk_bytes (at most 8) sent one
after the other; that peer's forward warps poll the slots of each source and store each piece over NVLink to its
destination in the node once it has landed. A block for the rail peer itself lands in its output directly, and blocks
inside a node go over NVLink as direct's do. Raw data and a trailing flag (no LL/LL128 line format): the library's
plain primitives (launch_ns, step_ns, channels of [collectives]), not the nccl-like protocol's. Groups that are not
>= 2 equal host domains joined by NICs run direct.
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import FragBuilder
from fabric.collectives.reduce_scatter import pairs
from fabric.taskgraph import BUF_IN, BUF_OUT, BUF_TMP, COMPUTE


def block_sizes(nbytes: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(sizes[j], offsets a[j]) of the n blocks of an M-byte AllToAll input."""
    s, rem = divmod(int(nbytes), n)
    sizes = s + (np.arange(n) < rem).astype(np.int64)
    a = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=a[1:])
    return sizes, a


def direct(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    n = fb.n
    sizes, a = block_sizes(nbytes, n)
    i, j = p2p_schedule(fb) if fb.protocol else pairs(n)
    issue, seen = fb.xfer(i, j, sizes[j], BUF_IN, a[j], BUF_OUT, i * sizes[j])
    fb.edge(ready[i], issue)
    paced = None
    if fb.protocol:     # nccl-like: the proxy posts a rank's remote (through a NIC) sends one after the other
        _proxy_posts(fb, ready, i, j, issue)
        paced = _paced(fb, ready, i, j, sizes[j], issue)
    r = np.arange(n)
    copy = fb.reduce(r, sizes, BUF_OUT, r * sizes, np.array([[BUF_IN]], np.int8), a[:-1].reshape(n, 1))
    fb.edge(ready, copy)
    w = fb.wait(r)
    fb.edge(seen, w[j])
    if paced is not None:
        fb.edge(paced, w[j])
    fb.edge(copy, w)
    fb.need(BUF_IN, nbytes)
    fb.need(BUF_OUT, n * int(sizes.max()))
    return w


def _proxy_posts(fb: FragBuilder, ready, i, j, issue) -> None:
    """Remote send m of rank r waits for m + 1 chained proxy posts of library o_p2p_ns each (stream-less COMPUTEs)."""
    from fabric.collectives.library import value
    o = value("o_p2p_ns")
    remote = np.array([fb.crosses(int(a), int(b)) for a, b in zip(i, j)], bool)
    for r in np.unique(i[remote]):
        prev = ready[r]
        for k in np.flatnonzero(remote & (i == r)):
            post = fb.compute_delay(r, o)
            fb.edge(prev, post)
            fb.edge(post, issue[k])
            prev = post


def p2p_schedule(fb: FragBuilder) -> tuple[np.ndarray, np.ndarray]:
    """nccl-like: the pairs in NCCL's p2p schedule (src/init.cc, the node-aware round order): in round
    d = node_delta x g + local_delta, the rank at local index l of node k sends to local index (l + local_delta) % g
    of node (k + node_delta) % N, so every round is a permutation, its network rounds included (the staggered order
    rank + 1, + 2, .. would send every rank of a node to the same remote rank first). Ranks not in N >= 2 equal host
    domains joined by NICs: the staggered order (fabric.collectives.reduce_scatter.pairs)."""
    from fabric.collectives.library import tree_groups
    groups = tree_groups(fb.view, fb.n)
    if groups is None:
        return pairs(fb.n)
    N, g = len(groups), len(groups[0])
    G = np.asarray(groups, np.int64)                      # [node, local index] -> rank
    node, loc = np.divmod(np.arange(N * g), g)            # position p = node x g + local index
    d = np.arange(1, N * g)
    nd, ld = np.divmod(d, g)
    src = np.repeat(G[node, loc], len(d))
    dst = G[(node[:, None] + nd[None, :]) % N, (loc[:, None] + ld[None, :]) % g].ravel()
    o = np.argsort(src, kind="stable")                    # rank-major, each rank's rounds in order
    return src[o], dst[o]


def _paced(fb: FragBuilder, ready, i, j, length, issue) -> np.ndarray:
    """nccl-like: the copy loop of every rank, one sequence per kind of path (scale-up, NIC) in the order of the
    pairs: a stream-less COMPUTE of send m's payload at the rank's injection rate for that path (library.inject_gbps)
    after the previous one; send m + 1 is issued when it has run. Returns per pair the receiver-side tail (one head
    latency after the copy, plus through a NIC the network step's software delay) that the receiver's wait needs.
    The head latency is that of the rank's first peer of the kind (peers of one kind differ by at most a few switch
    crossings, and the receiver also waits for the store itself): one latency per rank and kind, not per pair."""
    from fabric.collectives.library import inject_gbps
    net = np.array([fb.crosses(int(a), int(b)) for a, b in zip(i, j)], bool)
    key = 2 * np.asarray(i, np.int64) + net
    keys, first = np.unique(key, return_index=True)
    rate = np.array([inject_gbps(fb.view, fb.protocol, int(i[m]), int(j[m])) for m in first])
    lat = np.array([fb.view.hop_ps(int(i[m]), int(j[m]), 1) / 1000.0
                    + (fb.software_ns(int(i[m]), int(j[m])) if net[m] else 0.0) for m in first])
    k = np.searchsorted(keys, key)
    pace = fb._add(COMPUTE, i, stream=-1, dur=np.rint(np.asarray(length) * 1000.0 / rate[k]).astype(np.int64))
    tail = fb._add(COMPUTE, j, stream=-1, dur=np.rint(lat[k] * 1000.0).astype(np.int64))
    fb.edge(pace, tail)
    o = np.argsort(key, kind="stable")             # each (rank, kind) sequence, in the order of the pairs
    cont = key[o][1:] == key[o][:-1]               # o[t + 1] follows o[t] in its sequence
    prev, cur = o[:-1][cont], o[1:][cont]
    fb.edge(pace[prev], pace[cur])
    fb.edge(pace[prev], issue[cur])
    head = o[np.r_[True, ~cont]]
    fb.edge(np.asarray(ready)[np.asarray(i)[head]], pace[head])
    return tail


def deepep_ll(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    G = _nodes(fb)
    if G is None:
        return direct(fb, ready, nbytes)
    n = fb.n
    N, g = G.shape
    node, loc = np.empty(n, np.int64), np.empty(n, np.int64)
    node[G], loc[G] = np.arange(N)[:, None], np.arange(g)[None, :]
    sizes, a = block_sizes(nbytes, n)
    smax = int(sizes.max())
    i, j = pairs(n)
    # inside the node, and to the rail peer itself: one store into the destination's output slot
    k = np.flatnonzero((node[i] == node[j]) | (loc[i] == loc[j]))
    issue, seen = fb.xfer(i[k], j[k], sizes[j[k]], BUF_IN, a[j[k]], BUF_OUT, i[k] * sizes[j[k]])
    fb.edge(ready[i[k]], issue)
    dst = [(seen, j[k])]
    # to another node: RDMA writes into the rail peer's staging slot (source node, destination position), in
    # pieces sent one after the other; one poll per (rail peer, source, piece), then that piece's NVLink store
    k = np.flatnonzero((node[i] != node[j]) & (loc[i] != loc[j]))
    si, sj = i[k], j[k]
    peer = G[node[sj], loc[si]]
    slot = (node[si] * g + loc[sj]) * smax
    size = sizes[sj]
    key, inv = np.unique(peer * n + si, return_inverse=True)
    P = int(min(8, max(1, -(-smax // fb.cc.nccl_like.deepep_chunk_bytes))))
    after = ready[si]
    for q in range(P):
        lo, length = size * q // P, size * (q + 1) // P - size * q // P
        issue, landed = fb.xfer(si, peer, length, BUF_IN, a[sj] + lo, BUF_TMP, slot + lo)
        fb.edge(after, issue)
        after = landed
        poll = fb.wait(key // n, src=key % n)
        fb.edge(ready[key // n], poll)
        fb.edge(landed, poll[inv])
        issue, seen = fb.xfer(peer, sj, length, BUF_TMP, slot + lo, BUF_OUT, si * size + lo)
        fb.edge(poll[inv], issue)
        dst.append((seen, sj))
    r = np.arange(n)
    copy = fb.reduce(r, sizes, BUF_OUT, r * sizes, np.array([[BUF_IN]], np.int8), a[:-1].reshape(n, 1))
    fb.edge(ready, copy)
    w = fb.wait(r)
    for seen, to in dst:
        fb.edge(seen, w[to])
    fb.edge(copy, w)
    fb.need(BUF_IN, nbytes)
    fb.need(BUF_OUT, n * smax)
    fb.need(BUF_TMP, n * smax)
    return w


def _nodes(fb: FragBuilder):
    """[node, position] -> rank of the group's >= 2 equal NIC-joined host domains, or None (no fabric view, one
    domain, unequal domains)."""
    from fabric.collectives.library import tree_groups
    groups = tree_groups(fb.view, fb.n) if fb.view is not None else None
    return None if groups is None else np.asarray(groups, np.int64)


CORES = {"direct": direct}
LIBRARY_CORES = {"deepep_ll": deepep_ll}
