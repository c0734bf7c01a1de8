"""AllToAll (EP dispatch/combine): pairwise direct stores. `nbytes` = M, the bytes each rank sends in total
(nccl-tests convention), split into n blocks: block j (for rank j) has s + (j < M mod n) bytes, s = M // n, at
offset a[j] of IN. Rank j receives block j of every rank i into slot i of its OUT (slot size = block j's size).
Its own block is a local copy (a one-operand REDUCE). One wait per rank for the n-1 incoming blocks. With the
nccl-like library a rank's sends through a NIC are posted one after the other (o_p2p_ns each, library.py).
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import FragBuilder
from fabric.collectives.reduce_scatter import pairs
from fabric.taskgraph import BUF_IN, BUF_OUT


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
    i, j = pairs(n)
    issue, seen = fb.xfer(i, j, sizes[j], BUF_IN, a[j], BUF_OUT, i * sizes[j])
    fb.edge(ready[i], issue)
    if fb.protocol:     # nccl-like: the proxy posts a rank's remote (through a NIC) sends one after the other
        _proxy_posts(fb, ready, i, j, issue)
    r = np.arange(n)
    copy = fb.reduce(r, sizes, BUF_OUT, r * sizes, np.array([[BUF_IN]], np.int8), a[:-1].reshape(n, 1))
    fb.edge(ready, copy)
    w = fb.wait(r)
    fb.edge(seen, w[j])
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


CORES = {"direct": direct}
