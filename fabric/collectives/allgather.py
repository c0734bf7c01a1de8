"""AllGather cores: direct (one-shot push), ring, recursive doubling. In place: rank i's contribution is chunk i
= [b[i], b[i+1]) of its OUT buffer, b = bounds(M, n); `nbytes` is the whole gathered buffer M (nccl-tests
convention). Each core takes `ready[r]` and returns the task after which rank r's OUT is complete.
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import FragBuilder, bounds
from fabric.collectives.reduce_scatter import pairs
from fabric.errors import ConfigError
from fabric.taskgraph import BUF_OUT


def ag_direct(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    """Rank i stores its chunk into every peer's OUT at the chunk's offset; a rank is done when the n-1 chunks
    (flags folded or following) have arrived."""
    n = fb.n
    b = bounds(nbytes, n)
    c = np.diff(b)
    i, j = pairs(n)
    issue, seen = fb.xfer(i, j, c[i], BUF_OUT, b[i], BUF_OUT, b[i])
    fb.edge(np.asarray(ready)[i], issue)
    w = fb.wait(np.arange(n))
    fb.edge(seen, w[j])
    fb.edge(ready, w)
    fb.need(BUF_OUT, nbytes)
    return w


def ag_ring(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    """n-1 steps; at step t rank r stores chunk (r-t) mod n into the next rank's OUT, which waits for it and
    forwards it at step t+1."""
    n = fb.n
    b = bounds(nbytes, n)
    c = np.diff(b)
    r = np.arange(n)
    q = (r + 1) % n
    cur = np.asarray(ready, np.int64).copy()
    for t in range(n - 1):
        ch = (r - t) % n
        cur = fb.step(r, q, cur, c[ch], BUF_OUT, b[ch], BUF_OUT, b[ch])
    fb.need(BUF_OUT, nbytes)
    return cur


def ag_doubling(fb: FragBuilder, ready: np.ndarray, nbytes: int, members=None) -> np.ndarray:
    """Recursive doubling over `members` (power of two): at distance d = 1, 2, .. p/2 a rank stores the block of
    d chunks it holds into partner rank ^ d's OUT and waits for the partner's block. `ready` is indexed by member
    position when `members` is given; returns ids per member."""
    mem = np.arange(fb.n) if members is None else np.asarray(members, np.int64)
    p = len(mem)
    k = p.bit_length() - 1
    if 1 << k != p:
        raise ConfigError(f"recursive doubling needs a power-of-two number of ranks, got {p}")
    b = bounds(nbytes, p)
    idx = np.arange(p)
    cur = np.asarray(ready, np.int64).copy()
    for s in range(k):
        d = 1 << s
        partner = idx ^ d
        base = (idx // d) * d
        cur = fb.step(mem, partner, cur, b[base + d] - b[base], BUF_OUT, b[base], BUF_OUT, b[base])
    fb.need(BUF_OUT, nbytes)
    return cur


CORES = {"direct": ag_direct, "ring": ag_ring, "halving_doubling": ag_doubling}
