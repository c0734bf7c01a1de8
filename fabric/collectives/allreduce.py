"""AllReduce: one-shot, two-shot, ring, halving-doubling. `nbytes` = M, the buffer on every rank (nccl-tests
convention); every rank ends with the elementwise sum of all inputs in OUT.

Synchronisation per algorithm (flags fold into the data store by default, see docs/collectives.md):
- oneshot: 1 wait per rank (for the n-1 pushed inputs), then one reduce of n operands.
- twoshot: direct ReduceScatter (1 wait + reduce) then direct AllGather of the reduced chunks (1 wait).
- ring: ring ReduceScatter (n-1 waits, each followed by a 2-operand reduce) then ring AllGather (n-1 waits).
- halving_doubling: recursive halving ReduceScatter + recursive doubling AllGather (2 log2 p waits). A group that
  is not a power of two takes a pre-step (rank p+i pushes its whole input to rank i, which adds it) and a
  post-step (rank i pushes the whole result back), p = the largest power of two <= n (Rabenseifner's method).

Load (pull) and cached variants (the SD200 library's cache-less and cached paths, docs/collectives.md):
- oneshot_load: every owner flags "input ready" to each peer; each rank loads every peer's whole input (its user
  buffer, through the shadow window) and reduces n operands; each reader flags "done reading" to the owner, which
  completes when all n-1 have (it may not reuse its input before).
- twoshot_load: the same ready flags; rank i loads chunk i of every peer's input (a load-based ReduceScatter) and
  reduces it into OUT; then the direct AllGather stores it into every peer's OUT (which also tells the owner that
  its input has been read).
- oneshot_cached / twoshot_cached: a local copy of the input into a registered staging buffer (TMP[0:M], at
  reduce_gbps, + reduce_kernel_ns), then stores between staging buffers only (no per-call handshake: registered,
  double-buffered), and a final copy out of staging (two-shot) or the reduce (one-shot) into OUT.
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import FragBuilder, bounds
from fabric.collectives.allgather import ag_direct, ag_doubling, ag_ring
from fabric.collectives.reduce_scatter import pairs, reduce_arrivals, reduce_slots, rs_direct, rs_halving, rs_ring
from fabric.taskgraph import BUF_IN, BUF_OUT, BUF_TMP


def oneshot(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    """Each rank pushes its whole buffer into slot i of every peer's scratch; each rank waits for the n-1 slots
    and reduces n operands (its input + the slots) into OUT."""
    n, M = fb.n, int(nbytes)
    i, j = pairs(n)
    issue, seen = fb.xfer(i, j, M, BUF_IN, 0, BUF_TMP, i * M)
    fb.edge(ready[i], issue)
    return reduce_arrivals(fb, ready, seen, j, M, 0, M, M)


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


def _ready_flags(fb: FragBuilder, ready: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (reader i, owner j) and the flag j -> i that says j's input is ready (sent after j's launch)."""
    i, j = pairs(fb.n)
    f = fb.flag(j, i)
    fb.edge(ready[j], f)
    return i, j, f


def oneshot_load(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> list:
    n, M = fb.n, int(nbytes)
    i, j, f = _ready_flags(fb, ready)
    issue, done = fb.load(i, j, M, BUF_IN, 0, BUF_TMP, j * M)
    fb.edge(f, issue)
    fb.edge(ready[i], issue)
    red = reduce_arrivals(fb, ready, done, i, M, 0, M, M)
    fin = fb.flag(i, j)              # "done reading your input"
    fb.edge(done, fin)
    return [np.concatenate([red[k:k + 1], fin[j == k]]) for k in range(n)]


def rs_load(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    """Load-based ReduceScatter: rank i loads chunk i of every peer's input into its TMP slot for that peer once
    the peer's ready flag has come, then reduces them with its own chunk into OUT."""
    n = fb.n
    b = bounds(nbytes, n)
    c = np.diff(b)
    cmax = int(c.max())
    i, j, f = _ready_flags(fb, ready)
    issue, done = fb.load(i, j, c[i], BUF_IN, b[i], BUF_TMP, j * cmax)
    fb.edge(f, issue)
    fb.edge(ready[i], issue)
    return reduce_arrivals(fb, ready, done, i, c, b[:-1], cmax, nbytes)


def twoshot_load(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    return ag_direct(fb, rs_load(fb, ready, nbytes), nbytes)


def _stage(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    """The cached path's first step: copy the input into the registered staging buffer TMP[0:M]."""
    n, M = fb.n, int(nbytes)
    cp = fb.reduce(np.arange(n), M, BUF_TMP, 0, np.array([[BUF_IN]], np.int8), np.zeros((n, 1), np.int64))
    fb.edge(ready, cp)
    return cp


def oneshot_cached(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    """Stage, then store the staged buffer into slot i (after the staging copy) of every peer's staging buffer;
    wait, reduce n staged operands into OUT."""
    n, M = fb.n, int(nbytes)
    cp = _stage(fb, ready, M)
    i, j = pairs(n)
    issue, seen = fb.xfer(i, j, M, BUF_TMP, 0, BUF_TMP, (1 + i) * M)
    fb.edge(cp[i], issue)
    r = np.arange(n)
    w = fb.wait(r)
    fb.edge(seen, w[j])
    fb.edge(cp, w)
    red = reduce_slots(fb, M, BUF_OUT, 0, BUF_TMP, 0, np.broadcast_to((1 + r) * M, (n, n)))
    fb.edge(w, red)
    fb.need(BUF_IN, M)
    fb.need(BUF_OUT, M)
    fb.need(BUF_TMP, (n + 1) * M)
    return red


def twoshot_cached(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> np.ndarray:
    """Stage; ReduceScatter by stores of staged chunks into the peers' staging slots, reduced into the staging
    gather area G = TMP[M + n*cmax:]; AllGather by stores of that chunk into every peer's gather area; a copy of
    the gathered area into OUT."""
    n, M = fb.n, int(nbytes)
    b = bounds(M, n)
    c = np.diff(b)
    cmax = int(c.max())
    G = M + n * cmax
    cp = _stage(fb, ready, M)
    i, j = pairs(n)
    issue, seen = fb.xfer(i, j, c[j], BUF_TMP, b[j], BUF_TMP, M + i * cmax)
    fb.edge(cp[i], issue)
    r = np.arange(n)
    w = fb.wait(r)
    fb.edge(seen, w[j])
    fb.edge(cp, w)
    red = reduce_slots(fb, c, BUF_TMP, G + b[:-1], BUF_TMP, b[:-1], np.broadcast_to(M + r * cmax, (n, n)))
    fb.edge(w, red)
    issue, seen = fb.xfer(i, j, c[i], BUF_TMP, G + b[i], BUF_TMP, G + b[i])
    fb.edge(red[i], issue)
    w2 = fb.wait(r)
    fb.edge(seen, w2[j])
    fb.edge(red, w2)
    out = fb.reduce(r, M, BUF_OUT, 0, np.array([[BUF_TMP]], np.int8), np.full((n, 1), G, np.int64))
    fb.edge(w2, out)
    fb.need(BUF_IN, M)
    fb.need(BUF_OUT, M)
    fb.need(BUF_TMP, G + M)
    return out


CORES = {"oneshot": oneshot, "twoshot": twoshot, "ring": ring, "halving_doubling": halving_doubling,
         "oneshot_load": oneshot_load, "twoshot_load": twoshot_load, "oneshot_cached": oneshot_cached,
         "twoshot_cached": twoshot_cached}
