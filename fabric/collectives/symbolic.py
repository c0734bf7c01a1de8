"""A symbolic executor that proves collective fragments correct (pure Python + numpy; for tests and debugging).

Every byte of every (collective, rank, buffer) holds a multiset of contributions: a count per contributing rank,
plus the byte position it came from. Inputs start with their owner's contribution (count 1, position = offset).
Tasks run in a topological order; a transfer copies its byte range, a REDUCE sums the counts of its operands
(which must come from the same positions). Afterwards each collective is checked against its definition: an
AllReduce output byte must hold exactly one contribution of every member (a duplicate is a count of 2 and fails)
from the same position, and so on.

Races are caught too, independent of the order chosen: a task that reads bytes must be ordered after (be a
descendant of) their last writer; a task that writes bytes must be ordered after their last writer and after every
task that read them since (no write-after-read race). Reading bytes nobody wrote is an error.
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import bounds
from fabric.collectives.alltoall import block_sizes
from fabric.errors import ConfigError
from fabric.taskgraph import (
    BUF_IN,
    BUF_NAMES,
    BUF_OUT,
    LOAD,
    TRANSFER,
    TaskGraph,
)


class SemanticError(AssertionError):
    """A collective computed the wrong thing, read unwritten data, or has a race."""


class _Buf:
    __slots__ = ("counts", "pos", "reads", "writer")

    def __init__(self, size: int, n_ranks: int):
        self.counts = np.zeros((size, n_ranks), np.int32)
        self.pos = np.full(size, -1, np.int64)  # -1 never written, -2 mixed positions
        self.writer = np.full(size, -1, np.int64)
        self.reads: list[tuple[int, int, int]] = []  # (task, lo, hi) since the start


def _initial(g: TaskGraph, c: int) -> dict:
    m = g.coll_meta[c]
    sizes = {int(b): int(s) for b, s in m.buf_bytes}
    n = len(m.ranks)
    state = {}
    for i, r in enumerate(m.ranks):
        for b, s in sizes.items():
            state[(c, r, b)] = _Buf(s, g.n_ranks)

    def own(i, buf, lo, hi):
        st = state[(c, m.ranks[i], buf)]
        st.counts[lo:hi, m.ranks[i]] = 1
        st.pos[lo:hi] = np.arange(lo, hi)

    M = m.nbytes
    if m.kind in ("allreduce", "reduce_scatter", "alltoall"):
        for i in range(n):
            own(i, BUF_IN, 0, M)
    elif m.kind == "allgather":
        b = bounds(M, n)
        for i in range(n):
            own(i, BUF_OUT, b[i], b[i + 1])
    elif m.kind in ("broadcast", "sendrecv"):
        own(m.root, BUF_IN, 0, M)
    return state


def execute(g: TaskGraph) -> dict:
    """Run every task of `g` symbolically; returns {(coll, rank, buf): _Buf}. Raises SemanticError on a race or a
    read of unwritten bytes."""
    if g.sem is None:
        raise ConfigError("the graph has no semantics; build it with semantics=True")
    s = g.sem
    state: dict = {}
    for c in range(len(g.coll_meta)):
        state.update(_initial(g, c))
    order = g.topo_order()
    anc = [0] * g.n_tasks  # ancestor sets as bit masks
    ptr, idx = g.succ_ptr, g.succ_idx
    dst_buf, dst_off, length = s.dst_buf, s.dst_off, s.length
    for t in order.tolist():
        a = anc[t]
        bit = a | (1 << t)
        for u in idx[ptr[t]:ptr[t + 1]].tolist():
            anc[u] |= bit
        db = int(dst_buf[t])
        L = int(length[t])
        if db < 0 or L == 0:
            continue
        c = int(g.coll[t])
        k = int(g.kind[t])
        rank, peer = int(g.rank[t]), int(g.peer[t])
        if k == TRANSFER and g.op[t] == LOAD:
            src, dst = peer, rank
        elif k == TRANSFER:
            src, dst = rank, peer
        else:
            src = dst = rank
        counts = None
        pos = None
        for j in range(int(s.src_ptr[t]), int(s.src_ptr[t + 1])):
            key = (c, src, int(s.src_buf[j]))
            lo = int(s.src_off[j])
            b = _get(state, key, lo, L, g, t, "reads")
            w = np.unique(b.writer[lo:lo + L])
            _ordered(a, w[w >= 0], g, t, f"reads {_where(key, lo, L)} written by")
            if np.any(b.pos[lo:lo + L] == -1):
                raise SemanticError(f"{g.describe(t)} reads {_where(key, lo, L)}, which nobody wrote")
            b.reads.append((t, lo, lo + L))
            cnt = b.counts[lo:lo + L].astype(np.int32)
            p = b.pos[lo:lo + L]
            if counts is None:
                counts, pos = cnt.copy(), p.copy()
            else:
                counts += cnt
                pos = np.where(pos == p, pos, -2)
        if counts is None:
            raise SemanticError(f"{g.describe(t)} writes data but has no operands")
        key = (c, dst, db)
        lo = int(dst_off[t])
        b = _get(state, key, lo, L, g, t, "writes")
        w = np.unique(b.writer[lo:lo + L])
        _ordered(a, w[w >= 0], g, t, f"overwrites {_where(key, lo, L)} written by")
        readers = [r for (r, rlo, rhi) in b.reads if r != t and rlo < lo + L and lo < rhi]
        _ordered(a, np.array(readers, np.int64), g, t, f"overwrites {_where(key, lo, L)} still to be read by")
        b.counts[lo:lo + L] = counts
        b.pos[lo:lo + L] = pos
        b.writer[lo:lo + L] = t
    return state


def _where(key, lo, L) -> str:
    c, r, b = key
    return f"{BUF_NAMES.get(b, b)}[{lo}:{lo + L}] of rank {r} (collective {c})"


def _get(state, key, lo, L, g, t, verb) -> _Buf:
    b = state.get(key)
    if b is None:
        raise SemanticError(f"{g.describe(t)} {verb} buffer {BUF_NAMES.get(key[2], key[2])} of rank {key[1]}, "
                            f"which collective {key[0]} does not have")
    if lo < 0 or lo + L > len(b.pos):
        raise SemanticError(f"{g.describe(t)} {verb} {_where(key, lo, L)} outside its {len(b.pos)} bytes")
    return b


def _ordered(anc_mask: int, others: np.ndarray, g, t, what: str) -> None:
    for w in others.tolist():
        if not (anc_mask >> w) & 1:
            raise SemanticError(f"race: {g.describe(t)} {what} {g.describe(w)}, and nothing orders the two")


def _expect(b: _Buf, lo: int, hi: int, owners, pos, what: str) -> None:
    """Bytes lo..hi of `b` must hold exactly one contribution of each rank in owners (a list of ranks for every
    byte, or an int array: one owner per byte) from positions `pos`."""
    cnt = b.counts[lo:hi]
    want = np.zeros_like(cnt)
    if isinstance(owners, (list, tuple)):
        want[:, list(owners)] = 1
    else:
        want[np.arange(hi - lo), owners] = 1
    if not np.array_equal(cnt, want):
        bad = int(np.flatnonzero((cnt != want).any(axis=1))[0])
        got = {int(r): int(v) for r, v in enumerate(cnt[bad]) if v}
        exp = {int(r): int(v) for r, v in enumerate(want[bad]) if v}
        raise SemanticError(f"{what}: byte {lo + bad} holds contributions {got}, expected {exp}")
    if not np.array_equal(b.pos[lo:hi], pos):
        bad = int(np.flatnonzero(b.pos[lo:hi] != pos)[0])
        raise SemanticError(f"{what}: byte {lo + bad} came from position {int(b.pos[lo + bad])} "
                            f"(-2: mixed, -1: never written), expected {int(np.asarray(pos)[bad])}")


def check(g: TaskGraph) -> dict:
    """Execute `g` symbolically and check every collective against its definition; returns the final state."""
    state = execute(g)
    for c, m in enumerate(g.coll_meta):
        ranks = list(m.ranks)
        n, M = len(ranks), m.nbytes
        label = f"collective {c} ({m.kind}/{m.algorithm}, {M} B, {n} ranks)"
        if m.kind == "allreduce":
            for r in ranks:
                _expect(state[(c, r, BUF_OUT)], 0, M, ranks, np.arange(M), f"{label} rank {r} out")
        elif m.kind == "reduce_scatter":
            b = bounds(M, n)
            for i, r in enumerate(ranks):
                _expect(state[(c, r, BUF_OUT)], b[i], b[i + 1], ranks, np.arange(b[i], b[i + 1]),
                        f"{label} rank {r} out chunk {i}")
        elif m.kind == "allgather":
            b = bounds(M, n)
            owner = np.repeat(np.array(ranks), np.diff(b))
            for r in ranks:
                _expect(state[(c, r, BUF_OUT)], 0, M, owner, np.arange(M), f"{label} rank {r} out")
        elif m.kind == "alltoall":
            sizes, a = block_sizes(M, n)
            for j, r in enumerate(ranks):
                L = int(sizes[j])
                owner = np.repeat(np.array(ranks), L)
                pos = np.tile(np.arange(a[j], a[j] + L), n)
                _expect(state[(c, r, BUF_OUT)], 0, n * L, owner, pos, f"{label} rank {r} out")
        elif m.kind in ("broadcast", "sendrecv"):
            src = ranks[m.root]
            for r in ranks:
                if r != src:
                    _expect(state[(c, r, BUF_OUT)], 0, M, [src], np.arange(M), f"{label} rank {r} out")
        else:
            raise SemanticError(f"{label}: unknown kind")
    return state
