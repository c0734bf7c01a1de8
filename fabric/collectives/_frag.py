"""The fragment builder every algorithm module uses: vectorised task/edge appends in group-local ids, plus the
prologue (start, launch), flags, wait points, entry barrier and epilogue that every algorithm shares.

Modelling rules (docs/collectives.md):
- `xfer` is a data transfer (store). With fold_flags the flag travels as the last `flag_bytes` of the same transfer
  (one flow stays in order), so the receiver "sees" the data when the transfer completes. Without folding, a
  separate flag store is issued after the data has landed, and consumers depend on the flag.
- `wait` is a rank's wait point (poll the step's flags, then continue): a COMPUTE of `step_ns` on the op's stream,
  or a zero-cost JOIN when step_ns is 0.
- `reduce` is a local reduction of k operands of `length` bytes: (k+1)*length bytes touched at reduce_gbps, plus
  reduce_kernel_ns.
"""
from __future__ import annotations

import numpy as np

from fabric.phy import PS_PER_NS, ps, ps_per_byte_GBps
from fabric.taskgraph import (
    BUF_NONE,
    BUF_TMP,
    COMPUTE,
    JOIN,
    LOAD,
    REDUCE,
    STORE,
    TRANSFER,
    Fragment,
    Semantics,
)


_INT = (int, np.integer)
_SCALAR = frozenset((int, float, bool))
# the task columns a call may give as a scalar or an array (rank and the operands are kept apart), and their types
_COLS = {"kind": np.int8, "peer": np.int32, "stream": np.int32, "nbytes": np.int64, "dur": np.int64, "op": np.int8,
         "dst_buf": np.int8, "dst_off": np.int64, "length": np.int64, "data": bool, "n_src": np.int64}


def bounds(nbytes: int, n: int) -> np.ndarray:
    """Chunk boundaries of an nbytes buffer split n ways as evenly as possible: chunk i = [b[i], b[i+1])."""
    return (np.arange(n + 1, dtype=np.int64) * int(nbytes)) // n


def is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


class FragBuilder:
    def __init__(self, kind: str, algorithm: str, n: int, nbytes: int, cc, semantics: bool = True, root: int = -1,
                 choice=None, view=None):
        self.kind, self.algorithm, self.n, self.nbytes, self.cc = kind, algorithm, int(n), int(nbytes), cc
        self.semantics, self.root = semantics, root
        # nccl-like library (fabric/collectives/library.py): a protocol, a channel count and the fabric view that
        # turns fitted per-step times into software-only costs; "" = the sd200 library (one protocol)
        self.protocol = choice.protocol if choice is not None else ""
        self.choice, self.view = choice, view
        self.stripe = True      # nccl-like: stripe a store over the choice's channels (rings stripe by channel)
        self._sw: dict = {}
        self._pair_tables: dict = {}            # crosses_all's and software_all's n x n answers (_pair_table)
        self.m = 0
        # task columns, one entry per _add call (see _column): a scalar, or a copy of the call's array
        self._sizes: list[int] = []
        self._vals: dict[str, list] = {k: [] for k in _COLS}
        self._arrs: dict[str, list] = {k: [] for k in _COLS}
        self._rank: list[np.ndarray] = []
        self._src_buf: list[np.ndarray] = []
        self._src_off: list[np.ndarray] = []
        self._ep: list[np.ndarray] = []
        self._es: list[np.ndarray] = []
        self._sp: list[int] = []        # single edges (a tree adds ~10^5 one by one): ints, made an array once
        self._ss: list[int] = []
        self.buf_bytes: dict[int, int] = {}

    # ---------------------------------------------------------------- primitives
    def _add(self, kind, rank, peer=-1, stream=-1, nbytes=0, dur=0, op=STORE, dst_buf=BUF_NONE, dst_off=0,
             length=0, src_buf=None, src_off=None, data=False) -> np.ndarray:
        rank = np.atleast_1d(np.asarray(rank, np.int64))
        m = len(rank)
        call = len(self._sizes)
        self._sizes.append(m)
        vals, arrs = self._vals, self._arrs
        # a scalar is kept as it is and repeated once, when the fragment is made (most columns of most calls are
        # one value: a copy per call was ~a third of the builder's time); an array is copied now (the caller may
        # reuse it)
        for k, v in (("kind", kind), ("peer", peer), ("stream", stream), ("nbytes", nbytes), ("dur", dur),
                     ("op", op), ("dst_buf", dst_buf), ("dst_off", dst_off), ("length", length), ("data", data)):
            if type(v) in _SCALAR or np.ndim(v) == 0:
                vals[k].append(v)
            else:
                col = np.empty(m, _COLS[k])
                col[...] = v
                vals[k].append(0)
                arrs[k].append((call, col))
        self._rank.append(rank.astype(np.int32))
        if src_buf is None:
            vals["n_src"].append(0)
        else:
            so = np.asarray(src_off, np.int64)
            so = so.reshape(m, -1) if so.ndim == 2 else np.broadcast_to(so, (m,)).reshape(m, 1)
            sb = np.asarray(src_buf, np.int8)
            sb = np.broadcast_to(sb if sb.ndim == 2 else np.broadcast_to(sb, (m,)).reshape(m, 1), so.shape)
            vals["n_src"].append(so.shape[1])
            self._src_buf.append(sb.ravel())
            self._src_off.append(so.ravel())
        ids = np.arange(self.m, self.m + m, dtype=np.int64)
        self.m += m
        return ids

    def _column(self, k: str) -> np.ndarray:
        """Task column k over every task so far: the calls' scalars repeated, their arrays written over them."""
        sizes = np.array(self._sizes, np.int64)
        out = np.repeat(np.array(self._vals[k], _COLS[k]), sizes)
        if self._arrs[k]:
            first = np.zeros(len(sizes) + 1, np.int64)
            np.cumsum(sizes, out=first[1:])
            for call, col in self._arrs[k]:
                out[first[call]:first[call + 1]] = col
        return out

    def edge(self, pred, succ) -> None:
        if isinstance(pred, _INT) and isinstance(succ, _INT):
            self._sp.append(int(pred))
            self._ss.append(int(succ))
            return
        p, s = np.asarray(pred, np.int64), np.asarray(succ, np.int64)
        if p.shape != s.shape:
            p, s = np.broadcast_arrays(p, s)
        if p.size:
            self._ep.append(p.ravel())
            self._es.append(s.ravel())

    def need(self, buf: int, nbytes: int) -> None:
        """Record that buffer `buf` must hold `nbytes` on a rank (for symbolic checks and reports)."""
        self.buf_bytes[buf] = max(self.buf_bytes.get(buf, 0), int(nbytes))

    def join(self, rank) -> np.ndarray:
        return self._add(JOIN, rank)

    def compute(self, rank, ns: float) -> np.ndarray:
        return self._add(COMPUTE, rank, stream=0, dur=ps(ns))

    def compute_delay(self, rank, ns: float) -> np.ndarray:
        """A stream-less COMPUTE: a delay on a dependency path that occupies nothing."""
        return self._add(COMPUTE, rank, stream=-1, dur=int(round(ns * PS_PER_NS)))

    def wait(self, rank, src=None, pay: bool = True) -> np.ndarray:
        """A wait point: poll flags then continue (COMPUTE of step_ns, or a JOIN when it is 0). With a protocol
        (nccl-like) the cost is the protocol's per-step software time after the hop src -> rank (src defaults to
        rank - 1), and `pay=False` (a later slice of a pipelined step) makes it a JOIN."""
        if self.protocol:
            rank = np.atleast_1d(np.asarray(rank, np.int64))
            if not pay:
                return self.join(rank)
            src = (rank - 1) % self.n if src is None else np.broadcast_to(np.asarray(src, np.int64), rank.shape)
            # after a hop through a NIC the software time is a delay on the data path (xfer), not rank time
            dur = np.zeros(len(rank))
            local = ~self.crosses_all(src, rank)
            dur[local] = self.software_all(src[local], rank[local])
            # stream-less: channels run in parallel (their own SMs); the wait sequence of a channel orders them
            return self._add(COMPUTE, rank, stream=-1, dur=np.rint(dur * PS_PER_NS).astype(np.int64))
        if self.cc.step_ns > 0:
            return self.compute(rank, self.cc.step_ns)
        return self.join(rank)

    def crosses(self, s: int, d: int) -> bool:
        key = (s, d, "net")
        if key not in self._sw:
            self._sw[key] = s != d and self.view.crosses_nic(s, d)
        return self._sw[key]

    def crosses_all(self, s: np.ndarray, d: np.ndarray) -> np.ndarray:
        """crosses of every pair (s[i], d[i]) (int arrays)."""
        return self._pair_table("crosses", self.crosses, s, d, bool)

    def software_all(self, s: np.ndarray, d: np.ndarray) -> np.ndarray:
        """software_ns of every pair (s[i], d[i])."""
        got = self._pair_table("software", self._software_base, s, d, np.float64)
        if self.__dict__.get("net_pipelined"):
            got[self.crosses_all(s, d)] = 0.0
        return got

    def _pair_table(self, name: str, fn, s, d, dtype) -> np.ndarray:
        """fn(s[i], d[i]) for every pair (a new array), each distinct pair asked once per builder: calls carry the
        same few pairs over and over (channels, slices), so the answers are kept in an n x n table (a rank past n,
        which no table holds, is asked each time)."""
        s, d = np.asarray(s, np.int64), np.asarray(d, np.int64)
        if len(s) and max(int(s.max()), int(d.max())) >= self.n:
            return self._per_pair(fn, s, d, dtype)
        if name not in self._pair_tables:
            self._pair_tables[name] = (np.zeros((self.n, self.n), dtype), np.zeros((self.n, self.n), bool))
        val, known = self._pair_tables[name]
        new = ~known[s, d]
        if new.any():
            val[s[new], d[new]] = self._per_pair(fn, s[new], d[new], dtype)
            known[s[new], d[new]] = True
        return val[s, d]

    @staticmethod
    def _per_pair(fn, s, d, dtype) -> np.ndarray:
        s, d = np.asarray(s, np.int64), np.asarray(d, np.int64)
        if not len(s):
            return np.zeros(0, dtype)
        m = int(d.max()) + 1
        pairs, inv = np.unique(s * m + d, return_inverse=True)
        return np.array([fn(int(p // m), int(p % m)) for p in pairs.tolist()], dtype)[inv.ravel()]

    def software_ns(self, s: int, d: int) -> float:
        """nccl-like: per-step software after hop s -> d (fitted step time minus the fabric's own latency)."""
        if self.__dict__.get("net_pipelined") and self.crosses(s, d):
            return 0.0     # a later piece of a pipelined call: the proxy pipeline is already running (nvls_tree)
        return self._software_base(s, d)

    def _software_base(self, s: int, d: int) -> float:
        key = (s, d)
        if key not in self._sw:
            from fabric.collectives.library import step_software_ns
            self._sw[key] = step_software_ns(self.view, self.protocol, s, d) if s != d else 0.0
        return self._sw[key]

    def step(self, ranks, partner, after, length, src_buf, src_off, dst_buf, dst_off) -> np.ndarray:
        """One step of a ring or pairwise algorithm: each of `ranks`, after `after`, stores into the buffer of
        ranks[partner] and then waits until the store addressed to it has been seen. Returns the waits, per rank."""
        issue, seen = self.xfer(ranks, ranks[partner], length, src_buf, src_off, dst_buf, dst_off)
        self.edge(after, issue)
        inv = np.empty(len(partner), np.int64)
        inv[np.asarray(partner)] = np.arange(len(partner))
        w = self.wait(ranks, src=np.asarray(ranks)[inv])
        self.edge(seen, w[partner])
        self.edge(after, w)
        return w

    def xfer(self, src, dst, length, src_buf, src_off, dst_buf, dst_off) -> tuple[np.ndarray, np.ndarray]:
        """Data stores src -> dst. Returns (issue ids: add the sender's dependencies here, seen ids: the receiver
        depends on these). Stores of at least `channel_min_bytes` are striped over `channels` flows (one per
        accelerator port, as NCCL channels are), between a JOIN on each side. nccl-like: a store through a NIC is
        seen after a delay (stream-less COMPUTE on the receiver) of the network step's software time (proxy, RDMA
        post: a latency on the data path, so pipelined steps do not serialise on it)."""
        issue, seen = self._xfer(src, dst, length, src_buf, src_off, dst_buf, dst_off)
        self.landed = seen      # the stores' own completion (before any delay): a sender's flow-control window
        if self.protocol:
            s, d = np.broadcast_arrays(np.atleast_1d(np.asarray(src, np.int64)), np.asarray(dst, np.int64))
            net = self.crosses_all(s, d)
            if net.any():
                k = np.flatnonzero(net)
                dur = self.software_all(s[k], d[k])
                dl = self._add(COMPUTE, d[k], stream=-1, dur=np.rint(dur * PS_PER_NS).astype(np.int64))
                self.edge(seen[k], dl)
                seen = seen.copy()
                seen[k] = dl
        return issue, seen

    def load(self, reader, owner, length, src_buf, src_off, dst_buf, dst_off) -> tuple[np.ndarray, np.ndarray]:
        """Loads (op LOAD): `reader` reads (src_buf, src_off)[:length] of `owner`'s memory into its own (dst_buf,
        dst_off); read requests go out, completions carry the data back. Striped like stores (xfer). Returns
        (issue ids: add the reader's dependencies here, done ids: complete when the data is in the reader's
        memory; no flag, the reader sees its own completions)."""
        return self._xfer(reader, owner, length, src_buf, src_off, dst_buf, dst_off, op=LOAD)

    def flag(self, src, dst) -> np.ndarray:
        """Flag-only stores src -> dst (`flag_bytes`, no data): a signal such as "my buffer is ready" or "I have
        finished reading yours"."""
        return self._add(TRANSFER, np.atleast_1d(np.asarray(src, np.int64)), peer=dst, nbytes=self.cc.flag_bytes,
                         op=STORE)

    def _xfer(self, src, dst, length, src_buf, src_off, dst_buf, dst_off, op=STORE) -> tuple[np.ndarray, np.ndarray]:
        src, dst, length = np.broadcast_arrays(np.atleast_1d(np.asarray(src, np.int64)), np.asarray(dst, np.int64),
                                               np.asarray(length, np.int64))
        k = (self.choice.channels if self.stripe else 1) if self.protocol else self.cc.channels
        lim = k if self.protocol else max(self.cc.channel_min_bytes, k)
        wide = (length >= lim) if k > 1 else np.zeros(src.shape, bool)
        if not wide.any():
            return self._store(src, dst, length, src_buf, src_off, dst_buf, dst_off, op)
        cols = [np.broadcast_to(np.asarray(v, np.int64), src.shape) for v in (src_buf, src_off, dst_buf, dst_off)]
        issue = np.empty(src.shape, np.int64)
        seen = np.empty(src.shape, np.int64)
        narrow = ~wide
        if narrow.any():
            issue[narrow], seen[narrow] = self._store(src[narrow], dst[narrow], length[narrow],
                                                      *(c[narrow] for c in cols), op)
        w = np.flatnonzero(wide)
        issue[w] = self.join(src[w])
        seen[w] = self.join(src[w] if op == LOAD else dst[w])     # a load's data comes back to its requester
        # stripe c of store e is flow e*k + c: consecutive flows take consecutive route candidates (ports)
        lo = (length[w, None] * np.arange(k)) // k
        part = (length[w, None] * np.arange(1, k + 1)) // k - lo
        rep = np.repeat(w, k)
        sb, so, db, do = (c[rep] for c in cols)
        i_ids, s_ids = self._store(src[rep], dst[rep], part.ravel(), sb.astype(np.int8), so + lo.ravel(),
                                   db.astype(np.int8), do + lo.ravel(), op)
        self.edge(np.repeat(issue[w], k), i_ids)
        self.edge(s_ids, np.repeat(seen[w], k))
        return issue, seen

    def _store(self, src, dst, length, src_buf, src_off, dst_buf, dst_off, op=STORE) -> tuple[np.ndarray, np.ndarray]:
        """One flow per store (see xfer), or per load (src: the reader; a load of nothing is a JOIN)."""
        cc = self.cc
        src_off = np.broadcast_to(np.asarray(src_off, np.int64), src.shape)
        if op == LOAD:
            ids = self._add(np.where(length > 0, TRANSFER, JOIN).astype(np.int8), src,
                            peer=np.where(length > 0, dst, -1), nbytes=length, op=LOAD, dst_buf=dst_buf,
                            dst_off=dst_off, length=length, src_buf=src_buf, src_off=src_off, data=True)
            return ids, ids
        if self.protocol:      # the protocol's wire format: LL/LL128 lines carry their flags, Simple a trailing one
            from fabric.collectives.library import wire_nbytes
            ids = self._add(TRANSFER, src, peer=dst, nbytes=wire_nbytes(self.protocol, length, cc.flag_bytes),
                            op=STORE, dst_buf=dst_buf, dst_off=dst_off, length=length, src_buf=src_buf,
                            src_off=src_off, data=True)
            return ids, ids
        if cc.fold_flags:
            ids = self._add(TRANSFER, src, peer=dst, nbytes=length + cc.flag_bytes, op=STORE, dst_buf=dst_buf,
                            dst_off=dst_off, length=length, src_buf=src_buf, src_off=src_off, data=True)
            return ids, ids
        # data first (a transfer of nothing is a JOIN on the sender), then a flag once the data has landed
        kind = np.where(length > 0, TRANSFER, JOIN).astype(np.int8)
        ids = self._add(kind, src, peer=np.where(length > 0, dst, -1), nbytes=length, op=STORE, dst_buf=dst_buf,
                        dst_off=dst_off, length=length, src_buf=src_buf, src_off=src_off, data=True)
        flags = self._add(TRANSFER, src, peer=dst, nbytes=cc.flag_bytes, op=STORE)
        self.edge(ids, flags)
        return ids, flags

    def reduce(self, rank, length, dst_buf, dst_off, src_buf, src_off) -> np.ndarray:
        """rank's (dst_buf, dst_off)[:length] := sum of operands; src_buf/src_off are [m, k] (k operands)."""
        rank = np.atleast_1d(np.asarray(rank, np.int64))
        so = np.asarray(src_off, np.int64)
        so = so.reshape(len(rank), -1) if so.ndim else np.full((len(rank), 1), so)
        k = so.shape[1]
        length = np.broadcast_to(np.asarray(length, np.int64), rank.shape)
        touched = (k + 1) * length
        cc = self.cc
        # nccl-like: the reduction is fused into the protocol's copy loop; its fixed cost is inside h_p
        kern = 0.0 if self.protocol else cc.reduce_kernel_ns
        dur = np.rint(touched * ps_per_byte_GBps(cc.reduce_gbps) + kern * PS_PER_NS)
        dur = dur.astype(np.int64)
        sb = np.asarray(src_buf, np.int8)
        sb = np.broadcast_to(sb.reshape(1, -1) if sb.ndim == 1 else sb, so.shape)
        return self._add(REDUCE, rank, stream=0, nbytes=touched, dur=dur, dst_buf=dst_buf, dst_off=dst_off,
                         length=length, src_buf=sb, src_off=so)

    # ---------------------------------------------------------------- shared structure
    def prologue(self) -> tuple[np.ndarray, np.ndarray]:
        """start JOIN per rank, then the launch cost. Returns (start ids, ready ids) indexed by rank."""
        r = np.arange(self.n)
        start = self.join(r)
        launch = self.cc.launch_ns
        if self.protocol:
            from fabric.collectives.library import launch_ns
            launch = launch_ns(self.cc)
        if launch > 0:
            ready = self.compute(r, launch)
            self.edge(start, ready)
        else:
            ready = start
        self._ready = ready
        return start, ready

    def finish(self, start: np.ndarray, out: np.ndarray | list) -> Fragment:
        """done JOIN per rank after `out[r]` (a task id, or a list of arrays of ids, per rank); entry barrier."""
        r = np.arange(self.n)
        done = self.join(r)
        if isinstance(out, np.ndarray):
            self.edge(out, done)
        else:
            for rank, ids in enumerate(out):
                self.edge(ids, done[rank])
        if self.cc.entry_barrier:
            self._entry_barrier()
        return self._fragment(start, done)

    def _entry_barrier(self) -> None:
        """Every data store s -> d waits for a 'buffer free' flag d -> s, sent once per pair after d's launch."""
        data = np.flatnonzero(self._column("data") & (self._column("kind") == TRANSFER))
        if not len(data):
            return
        s = np.concatenate(self._rank).astype(np.int64)[data]
        d = self._column("peer").astype(np.int64)[data]
        key = d * self.n + s
        pairs, inv = np.unique(key, return_inverse=True)
        fd, fs = pairs // self.n, pairs % self.n
        flags = self._add(TRANSFER, fd, peer=fs, nbytes=self.cc.flag_bytes, op=STORE)
        self.edge(self._ready[fd], flags)
        self.edge(flags[inv], data)

    @staticmethod
    def _peer_side(cat: dict, dst, src) -> np.ndarray:
        """Per task, the buffer (or offset) on the peer that a transfer names: a store's destination, a load's
        first operand (the peer's bytes it reads)."""
        first = np.zeros(len(cat["kind"]) + 1, np.int64)
        np.cumsum(cat["n_src"], out=first[1:])
        load = (cat["op"] == LOAD) & (cat["n_src"] > 0)
        out = np.asarray(dst).copy()
        out[load] = np.asarray(src)[first[:-1][load]]
        return out

    def _addr_buf(self, cat: dict) -> np.ndarray:
        return self._peer_side(cat, cat["dst_buf"], cat["src_buf"]).astype(np.int8)

    def _addr_off(self, cat: dict) -> np.ndarray:
        return self._peer_side(cat, cat["dst_off"], cat["src_off"]).astype(np.int64)

    def _fragment(self, start, done) -> Fragment:
        cat = {k: self._column(k) for k in _COLS if k != "data" and (self.semantics or k != "length")}
        cat["rank"] = np.concatenate(self._rank) if self._rank else np.zeros(0, np.int32)
        for k, parts, dt in (("src_buf", self._src_buf, np.int8), ("src_off", self._src_off, np.int64)):
            cat[k] = np.concatenate(parts).astype(dt, copy=False) if parts else np.zeros(0, dt)
        # edges sorted by (pred, succ) here, so the order they were added in (arrays, then single ones) does not
        # matter: one sort of pred * m + succ (< m^2) is the lexicographic order at a third of a lexsort's time
        key = np.concatenate(self._ep + [np.array(self._sp, np.int64)]) * self.m
        key += np.concatenate(self._es + [np.array(self._ss, np.int64)])
        key.sort()
        ep = key // max(self.m, 1)
        es = key - ep * self.m
        sem = None
        if self.semantics:
            src_ptr = np.zeros(self.m + 1, np.int64)
            np.cumsum(cat["n_src"], out=src_ptr[1:])
            sem = Semantics(dst_buf=cat["dst_buf"], dst_off=cat["dst_off"], length=cat["length"], src_ptr=src_ptr,
                            src_buf=cat["src_buf"], src_off=cat["src_off"])
        frag = Fragment(kind=self.kind, algorithm=self.algorithm, nbytes=self.nbytes, n=self.n,
                        task_kind=cat["kind"], rank=cat["rank"], peer=cat["peer"], stream=cat["stream"],
                        task_nbytes=cat["nbytes"], duration_ps=cat["dur"], op=cat["op"], edge_src=ep, edge_dst=es,
                        start=np.asarray(start, np.int64), done=np.asarray(done, np.int64), root=self.root,
                        buf_bytes=tuple(sorted(self.buf_bytes.items())), sem=sem,
                        protocol=self.protocol or "", addr_buf=self._addr_buf(cat), addr_off=self._addr_off(cat))
        for a in (frag.task_kind, frag.rank, frag.peer, frag.stream, frag.task_nbytes, frag.duration_ps, frag.op,
                  frag.edge_src, frag.edge_dst, frag.start, frag.done, frag.addr_buf, frag.addr_off):
            a.flags.writeable = False
        return frag


__all__ = ["BUF_TMP", "FragBuilder", "bounds", "is_pow2"]
