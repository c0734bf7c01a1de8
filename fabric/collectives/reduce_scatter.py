"""ReduceScatter cores: direct (push), ring, recursive halving. Size convention: `nbytes` is the whole input
buffer M (as nccl-tests reports it); rank i ends with chunk i = [b[i], b[i+1]) of the sum, b = bounds(M, n),
held at the same offsets of its OUT buffer.

Each core takes `ready[r]` (the task after which rank r may start) and returns the task after which rank r's
reduced chunk is in OUT. They are also the first half of the two-shot, ring and halving-doubling AllReduce.
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import FragBuilder, bounds
from fabric.errors import ConfigError
from fabric.taskgraph import BUF_IN, BUF_OUT, BUF_TMP


def pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """All ordered pairs (i, j), i != j; rank i visits i+1, i+2, ... so that no destination is hit by everyone at
    once (the staggered order real push kernels use)."""
    i = np.repeat(np.arange(n, dtype=np.int64), n - 1)
    j = (i + np.tile(np.arange(1, n, dtype=np.int64), n)) % n
    return i, j


def reduce_slots(fb: FragBuilder, length, out_buf, out_off, own_buf, own_off, slot) -> np.ndarray:
    """Each rank r reduces its own operand (own_buf, own_off[r]) and peer k's TMP slot `slot[r, k]` into out."""
    n = fb.n
    r = np.arange(n)
    others = (r[:, None] + np.arange(1, n)[None, :]) % n
    offs = np.concatenate([np.broadcast_to(np.asarray(own_off, np.int64), (n,))[:, None],
                           slot[r[:, None], others]], axis=1)
    bufs = np.array([[own_buf] + [BUF_TMP] * (n - 1)], np.int8)
    return fb.reduce(r, length, out_buf, out_off, bufs, offs)


def reduce_arrivals(fb: FragBuilder, ready, arrived, at, length, off, stride: int, nbytes: int) -> np.ndarray:
    """The receiving side of a direct exchange: rank r waits for its own launch (ready) and for the n-1 slots that
    arrived (arrived[k] lands at rank at[k]; slot of peer k at k x stride in TMP), then reduces its IN at off[r]
    with them into OUT at off[r]. Returns the reduce tasks."""
    n = fb.n
    r = np.arange(n)
    w = fb.wait(r)
    fb.edge(arrived, w[at])
    fb.edge(ready, w)
    red = reduce_slots(fb, length, BUF_OUT, off, BUF_IN, off, np.broadcast_to(r * stride, (n, n)))
    fb.edge(w, red)
    fb.need(BUF_IN, nbytes)
    fb.need(BUF_OUT, nbytes)
    fb.need(BUF_TMP, n * stride)
    return red


def rs_direct(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    """Rank i stores chunk j of its input into slot i of rank j's scratch (flag folded or after it); rank j waits
    for its n-1 slots and reduces them with its own chunk into OUT."""
    n = fb.n
    b = bounds(nbytes, n)
    c = np.diff(b)
    cmax = int(c.max())
    i, j = pairs(n)
    issue, seen = fb.xfer(i, j, c[j], BUF_IN, b[j], BUF_TMP, i * cmax)
    fb.edge(ready[i], issue)
    return reduce_arrivals(fb, ready, seen, j, c, b[:-1], cmax, nbytes)


def rs_ring(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    """n-1 steps; at step s rank r stores chunk (r-1-s) mod n (its input at s=0, its running sum after) into the
    next rank's scratch; the receiver waits, adds its own input chunk, and forwards the sum at the next step."""
    n = fb.n
    b = bounds(nbytes, n)
    c = np.diff(b)
    r = np.arange(n)
    q = (r + 1) % n
    cur = np.asarray(ready, np.int64).copy()
    for s in range(n - 1):
        ch = (r - 1 - s) % n  # chunk sent by r
        w = fb.step(r, q, cur, c[ch], BUF_IN if s == 0 else BUF_OUT, b[ch], BUF_TMP, b[ch])
        rc = (r - 2 - s) % n  # chunk received by r
        red = fb.reduce(r, c[rc], BUF_OUT, b[rc], np.array([[BUF_IN, BUF_TMP]], np.int8),
                        np.stack([b[rc], b[rc]], axis=1))
        fb.edge(w, red)
        cur = red
    fb.need(BUF_IN, nbytes)
    fb.need(BUF_OUT, nbytes)
    fb.need(BUF_TMP, nbytes)
    return cur


def rs_halving(fb: FragBuilder, ready: np.ndarray, nbytes: int, members=None, cur_buf=None,
               tmp_base: int = 0) -> np.ndarray:
    """Recursive halving over `members` (a power of two of them; default all ranks): at distance d = p/2, p/4, ..
    1 a rank keeps the half of its current block that holds its own chunk, stores the other half into its partner
    (rank ^ d)'s scratch (one scratch slot per step), waits for the partner's half and reduces it into OUT.
    `cur_buf[i]` is where member i's data starts (IN, or OUT after a pre-step). Returns ids per member."""
    mem = np.arange(fb.n) if members is None else np.asarray(members, np.int64)
    p = len(mem)
    k = p.bit_length() - 1
    if 1 << k != p:
        raise ConfigError(f"recursive halving needs a power-of-two number of ranks, got {p}")
    M = int(nbytes)
    b = bounds(M, p)
    idx = np.arange(p)
    cur = np.asarray(ready, np.int64)[mem].copy()
    cbuf = np.full(p, BUF_IN, np.int8) if cur_buf is None else np.asarray(cur_buf, np.int8)
    for s in range(k):
        d = p >> (s + 1)
        partner = idx ^ d
        base = (idx // (2 * d)) * (2 * d)
        upper = (idx & d) != 0
        keep = base + np.where(upper, d, 0)
        send = base + np.where(upper, 0, d)
        slot = tmp_base + s * M
        w = fb.step(mem, partner, cur, b[send + d] - b[send], cbuf, b[send], BUF_TMP, slot + b[send])
        bufs = np.stack([cbuf, np.full(p, BUF_TMP, np.int8)], axis=1)
        red = fb.reduce(mem, b[keep + d] - b[keep], BUF_OUT, b[keep], bufs,
                        np.stack([b[keep], slot + b[keep]], axis=1))
        fb.edge(w, red)
        cur = red
        cbuf = np.full(p, BUF_OUT, np.int8)
    fb.need(BUF_IN, M)
    fb.need(BUF_OUT, M)
    fb.need(BUF_TMP, tmp_base + k * M)
    return cur


CORES = {"direct": rs_direct, "ring": rs_ring, "halving_doubling": rs_halving}
