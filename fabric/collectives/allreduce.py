"""AllReduce: one-shot, two-shot, ring, halving-doubling. `nbytes` = M, the buffer on every rank (nccl-tests
convention); every rank ends with the elementwise sum of all inputs in OUT.

Synchronisation per algorithm (flags fold into the data store by default, see docs/collectives.md):
- oneshot: 1 wait per rank (for the n-1 pushed inputs), then one reduce of n operands.
- twoshot: direct ReduceScatter (1 wait + reduce) then direct AllGather of the reduced chunks (1 wait).
- ring: ring ReduceScatter (n-1 waits, each followed by a 2-operand reduce) then ring AllGather (n-1 waits).
- halving_doubling: recursive halving ReduceScatter + recursive doubling AllGather (2 log2 p waits). A group that
  is not a power of two takes a pre-step (rank p+i pushes its whole input to rank i, which adds it) and a
  post-step (rank i pushes the whole result back), p = the largest power of two <= n (Rabenseifner's method).
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import FragBuilder
from fabric.collectives.allgather import ag_direct, ag_doubling, ag_ring
from fabric.collectives.reduce_scatter import pairs, rs_direct, rs_halving, rs_ring
from fabric.taskgraph import BUF_IN, BUF_OUT, BUF_TMP


def oneshot(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    """Each rank pushes its whole buffer into slot i of every peer's scratch; each rank waits for the n-1 slots
    and reduces n operands (its input + the slots) into OUT."""
    n, M = fb.n, int(nbytes)
    i, j = pairs(n)
    issue, seen = fb.xfer(i, j, M, BUF_IN, 0, BUF_TMP, i * M)
    fb.edge(ready[i], issue)
    r = np.arange(n)
    w = fb.wait(r)
    fb.edge(seen, w[j])
    fb.edge(ready, w)
    others = (r[:, None] + np.arange(1, n)[None, :]) % n
    offs = np.concatenate([np.zeros((n, 1), np.int64), others * M], axis=1)
    bufs = np.array([[BUF_IN] + [BUF_TMP] * (n - 1)], np.int8)
    red = fb.reduce(r, M, BUF_OUT, 0, bufs, offs)
    fb.edge(w, red)
    fb.need(BUF_IN, M)
    fb.need(BUF_OUT, M)
    fb.need(BUF_TMP, n * M)
    return red


def twoshot(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    return ag_direct(fb, rs_direct(fb, ready, nbytes), nbytes)


def ring(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    return ag_ring(fb, rs_ring(fb, ready, nbytes), nbytes)


def halving_doubling(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    n, M = fb.n, int(nbytes)
    p = 1 << (n.bit_length() - 1)
    e = n - p
    k = p.bit_length() - 1
    ready = np.asarray(ready, np.int64).copy()
    cbuf = np.full(p, BUF_IN, np.int8)
    pre = k * M  # scratch offset of the pre-step slot, after the halving slots
    if e:
        i = np.arange(e)
        x = p + i
        issue, seen = fb.xfer(x, i, M, BUF_IN, 0, BUF_TMP, pre)
        fb.edge(ready[x], issue)
        w = fb.wait(i)
        fb.edge(seen, w)
        fb.edge(ready[i], w)
        red = fb.reduce(i, M, BUF_OUT, 0, np.array([[BUF_IN, BUF_TMP]], np.int8),
                        np.tile(np.array([[0, pre]], np.int64), (e, 1)))
        fb.edge(w, red)
        ready[i] = red
        cbuf[i] = BUF_OUT
        fb.need(BUF_TMP, pre + M)
    mem = np.arange(p)
    fin = ag_doubling(fb, rs_halving(fb, ready, M, members=mem, cur_buf=cbuf), M, members=mem)
    if not e:
        return fin
    issue, seen = fb.xfer(i, x, M, BUF_OUT, 0, BUF_OUT, 0)
    fb.edge(fin[i], issue)
    w2 = fb.wait(x)
    fb.edge(seen, w2)
    fb.edge(ready[x], w2)
    return np.concatenate([fin, w2])


CORES = {"oneshot": oneshot, "twoshot": twoshot, "ring": ring, "halving_doubling": halving_doubling}
