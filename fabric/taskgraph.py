"""The task graph: what the packet kernel and the analytic engine execute (contract: docs/contracts.md).

A graph is a frozen bundle of numpy arrays, one entry per task, plus successor CSR dependencies. It is built by
`GraphBuilder`, which appends numpy *fragments* (vectorised; task ids are offset on append) and dependency edges
given as (pred, succ) arrays, and converts the edges to successor CSR + n_deps once, in `build()`.

Optional symbolic semantics (`Semantics`) say which bytes each task moves or reduces, so that a symbolic executor
(fabric.collectives.symbolic) can prove a collective correct. The kernel ignores them; the lowering of a whole trace
leaves them out unless asked.

Conventions beyond the contract:
- TRANSFER `nbytes` is what travels (data plus a folded flag, see docs/collectives.md); it is always > 0: a transfer
  of nothing is a JOIN.
- REDUCE `nbytes` is the bytes the reduction touches (k operands read + 1 result written); `duration_ps` is
  authoritative and already includes the fixed kernel cost.
- COMPUTE tasks with `coll >= 0` are a collective library's software overhead (launch, flag polling per step).
- Edges may repeat; `n_deps` counts every repeat, so a consumer that decrements once per successor entry is right.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fabric.errors import FabricError

# ---------------------------------------------------------------- codes (import these, never hard-code)
KIND_NAMES = ("compute", "transfer", "reduce", "join")
COMPUTE, TRANSFER, REDUCE, JOIN = range(len(KIND_NAMES))
STORE, LOAD = 0, 1
# in-switch legs (NVLS class, docs/kernel.md §In-switch reduction and multicast): the route rank -> peer trimmed to
# its first hop (SW_UP: rank's port into its switch, consumed by the switch's reduce/multicast engine) or to its last
# hop (SW_DOWN: the switch's port to peer, injected by the switch). Need switch.reduction on that switch.
SW_UP, SW_DOWN = 2, 3
# symbolic buffer tags (per collective instance and rank)
BUF_NAMES = dict(enumerate(("in", "out", "tmp")))
BUF_NONE = -1
BUF_IN, BUF_OUT, BUF_TMP = BUF_NAMES

_TASK_COLUMNS = {  # name -> dtype, default
    "kind": (np.int8, 0), "rank": (np.int32, 0), "peer": (np.int32, -1), "stream": (np.int32, -1),
    "nbytes": (np.int64, 0), "duration_ps": (np.int64, 0), "op": (np.int8, 0), "coll": (np.int32, -1),
    "src_op": (np.int64, -1), "addr": (np.int64, -1),
}


def csr_ranges(ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The positions ptr[i]..ptr[i+1] of each row i in `rows`, concatenated (int64): a CSR's entries of those rows."""
    lo, n = ptr[rows], ptr[rows + 1] - ptr[rows]
    return np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()), dtype=np.int64)


class GraphError(FabricError):
    """A task graph breaks its contract (cycle, index out of range, inconsistent CSR)."""


@dataclass(frozen=True, eq=False)
class Semantics:
    """What data a task moves, for symbolic checking. Task t writes `length[t]` bytes at (dst_buf, dst_off) on its
    destination rank := the sum of its operands, operand j being `length` bytes at (src_buf[j], src_off[j]) on its
    source rank, j in src_ptr[t]..src_ptr[t+1]. Source/destination rank: a store moves rank -> peer, a load
    peer -> rank, a REDUCE works on `rank`. dst_buf = -1: the task moves no data (flag, join, compute)."""
    dst_buf: np.ndarray  # int8[n]
    dst_off: np.ndarray  # int64[n]
    length: np.ndarray  # int64[n]
    src_ptr: np.ndarray  # int64[n+1]
    src_buf: np.ndarray  # int8[m]
    src_off: np.ndarray  # int64[m]


def transfer_graph(src, dst, nbytes, op=0) -> dict:
    """Independent transfers (no dependencies) in the kernel's array layout: probes, benchmarks, tests.
    Arguments broadcast against each other; op 0 store, 1 load."""
    src, dst, nbytes, op = np.broadcast_arrays(np.atleast_1d(src), dst, nbytes, op)
    n = len(src)
    return dict(kind=np.full(n, TRANSFER, np.int8), rank=src.astype(np.int32), peer=dst.astype(np.int32),
                stream=np.full(n, -1, np.int32), nbytes=nbytes.astype(np.int64), duration_ps=np.zeros(n, np.int64),
                op=op.astype(np.int8), coll=np.full(n, -1, np.int32), succ_ptr=np.zeros(n + 1, np.int64),
                succ_idx=np.zeros(0, np.int32), n_deps=np.zeros(n, np.int32))


def all_to_all_graph(n_ranks: int, nbytes: int) -> dict:
    """Every ordered pair (src, dst), src != dst: one store of nbytes, no dependencies."""
    src, dst = np.nonzero(~np.eye(n_ranks, dtype=bool))
    return transfer_graph(src, dst, nbytes)


@dataclass(frozen=True)
class CollMeta:
    """One collective instance of a graph (index = `coll` of its tasks)."""
    kind: str  # allreduce, allgather, reduce_scatter, alltoall, broadcast, sendrecv
    algorithm: str
    nbytes: int  # the fragment's size convention (docs/collectives.md), not necessarily the trace's coll_bytes
    ranks: tuple  # global ranks; position = rank within the group
    label: str = ""
    root: int = -1  # broadcast root / sender of a send-recv, as a position in `ranks`; -1 none
    buf_bytes: tuple = ()  # ((buf tag, bytes per rank, largest over ranks), ...) for symbolic checking
    protocol: str = ""  # nccl-like library: LL / LL128 / Simple; "" = the sd200 library (one protocol)


@dataclass(frozen=True, eq=False)
class TaskGraph:
    """Tasks as numpy arrays (docs/contracts.md). Build with GraphBuilder; check with validate()."""
    n_ranks: int
    kind: np.ndarray  # int8   COMPUTE/TRANSFER/REDUCE/JOIN
    rank: np.ndarray  # int32  where it runs; TRANSFER: the initiator
    peer: np.ndarray  # int32  TRANSFER: the other rank; else -1
    stream: np.ndarray  # int32  COMPUTE/REDUCE stream on `rank`; -1 none
    nbytes: np.ndarray  # int64
    duration_ps: np.ndarray  # int64  COMPUTE/REDUCE
    op: np.ndarray  # int8   TRANSFER: 0 store, 1 load
    coll: np.ndarray  # int32  collective instance (index into coll_meta), -1 none
    succ_ptr: np.ndarray  # int64[n+1]
    succ_idx: np.ndarray  # int32
    n_deps: np.ndarray  # int32
    coll_meta: list = field(default_factory=list)
    src_op: np.ndarray | None = None  # int64: index of the trace op within its rank's table; -1 inside collectives
    addr: np.ndarray | None = None  # int64  TRANSFER store/load: global address of the peer's bytes; -1 by rank
    sem: Semantics | None = None

    @property
    def n_tasks(self) -> int:
        return len(self.kind)

    @property
    def n_edges(self) -> int:
        return len(self.succ_idx)

    def successors(self, t: int) -> np.ndarray:
        return self.succ_idx[self.succ_ptr[t]:self.succ_ptr[t + 1]]

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(pred, succ) arrays of every edge."""
        pred = np.repeat(np.arange(self.n_tasks, dtype=np.int64), np.diff(self.succ_ptr))
        return pred, self.succ_idx.astype(np.int64)

    def predecessors_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """Predecessor CSR (ptr int64[n+1], idx int64) for engines that walk backwards: each task's predecessors in
        ascending order (a stable sort of the edges by successor), transposed in C."""
        from fabric._check_build import arrays
        return arrays.csr_transpose(self.succ_ptr, self.succ_idx, self.n_tasks)

    def topo_levels(self) -> np.ndarray:
        """Level of every task (0 = no predecessors; otherwise 1 + the deepest predecessor's). Raises GraphError
        on a cycle. Kahn's algorithm, one vectorised frontier per level."""
        n = self.n_tasks
        indeg = self.n_deps.astype(np.int64).copy()
        level = np.full(n, -1, np.int64)
        frontier = np.flatnonzero(indeg == 0)
        ptr, idx = self.succ_ptr, self.succ_idx
        depth, seen = 0, 0
        while len(frontier):
            level[frontier] = depth
            seen += len(frontier)
            counts = ptr[frontier + 1] - ptr[frontier]
            if counts.sum() == 0:
                break
            succ = idx[csr_ranges(ptr, frontier)]
            uniq, dec = np.unique(succ, return_counts=True)
            indeg[uniq] -= dec
            frontier = uniq[indeg[uniq] == 0]
            depth += 1
        if seen != n:
            stuck = np.flatnonzero(level < 0)
            raise GraphError(f"task graph has a cycle: {len(stuck)} of {n} tasks never become ready "
                             f"(first: {self.describe(int(stuck[0]))})")
        return level

    def topo_order(self) -> np.ndarray:
        """A topological order (by level, then id)."""
        return np.argsort(self.topo_levels(), kind="stable")

    def describe(self, t: int) -> str:
        k = int(self.kind[t])
        s = f"task {t} {KIND_NAMES[k] if 0 <= k < len(KIND_NAMES) else k} on rank {int(self.rank[t])}"
        if k == TRANSFER:
            verb = {STORE: "store to", LOAD: "load from", SW_UP: "switch-up leg towards",
                    SW_DOWN: "switch-down leg to"}.get(int(self.op[t]), "transfer to")
            s += f" {verb} rank {int(self.peer[t])}, {int(self.nbytes[t])} B"
        c = int(self.coll[t])
        if 0 <= c < len(self.coll_meta):
            m = self.coll_meta[c]
            s += f" (collective {c}: {m.kind}/{m.algorithm} {m.nbytes} B{', ' + m.label if m.label else ''})"
        return s

    def validate(self) -> None:
        """Check the contract: lengths, dtypes, ranges, CSR consistency, acyclicity. Raises GraphError."""
        n = self.n_tasks
        for name, (dt, _) in _TASK_COLUMNS.items():
            a = getattr(self, name)
            if a is None and name in ("src_op", "addr"):
                continue
            if a.dtype != np.dtype(dt) or a.shape != (n,):
                raise GraphError(f"{name} must be {np.dtype(dt)}[{n}], is {a.dtype}{list(a.shape)}")
        if self.succ_ptr.dtype != np.int64 or self.succ_idx.dtype != np.int32 or self.n_deps.dtype != np.int32:
            raise GraphError("succ_ptr must be int64, succ_idx int32, n_deps int32")

        def bad(mask, what):
            if np.any(mask):
                t = int(np.flatnonzero(mask)[0])
                raise GraphError(f"{int(mask.sum())} task(s) {what}; first: {self.describe(t)}")

        bad((self.kind < 0) | (self.kind > JOIN), "have an unknown kind")
        bad((self.rank < 0) | (self.rank >= self.n_ranks), f"have a rank outside 0..{self.n_ranks - 1}")
        xf = self.kind == TRANSFER
        bad(xf & ((self.peer < 0) | (self.peer >= self.n_ranks) | (self.peer == self.rank)),
            "are transfers without a valid peer")
        bad(~xf & (self.peer != -1), "are not transfers but name a peer")
        bad(xf & ((self.op < STORE) | (self.op > SW_DOWN)), "are transfers with an op other than store/load/"
            "switch-up/switch-down")
        bad(xf & (self.nbytes <= 0), "are transfers of no bytes (use a JOIN)")
        bad((self.nbytes < 0) | (self.duration_ps < 0), "have negative bytes or duration")
        bad((self.stream < -1), "have a stream below -1")
        bad((self.coll < -1) | (self.coll >= len(self.coll_meta)), "name an unknown collective")
        p = self.succ_ptr
        if p.shape != (n + 1,) or p[0] != 0 or p[-1] != len(self.succ_idx) or np.any(np.diff(p) < 0):
            raise GraphError("succ_ptr is not a CSR pointer into succ_idx")
        if len(self.succ_idx) and (self.succ_idx.min() < 0 or self.succ_idx.max() >= n):
            raise GraphError("succ_idx refers to a task that does not exist")
        if not np.array_equal(np.bincount(self.succ_idx, minlength=n), self.n_deps):
            raise GraphError("n_deps does not equal the number of successor entries naming each task")
        self.topo_levels()
        if self.sem is not None:
            s = self.sem
            if not (len(s.dst_buf) == len(s.dst_off) == len(s.length) == n and len(s.src_ptr) == n + 1
                    and s.src_ptr[-1] == len(s.src_buf) == len(s.src_off)):
                raise GraphError("semantics arrays have inconsistent lengths")

    def summary(self) -> dict:
        """Counts for reports and logs."""
        k = np.bincount(self.kind, minlength=4)
        xf = self.kind == TRANSFER
        return {"tasks": self.n_tasks, "edges": self.n_edges, "compute": int(k[COMPUTE]), "transfer": int(k[TRANSFER]),
                    "reduce": int(k[REDUCE]), "join": int(k[JOIN]), "collectives": len(self.coll_meta),
                    "transfer_bytes": int(self.nbytes[xf].sum())}


@dataclass(frozen=True, eq=False)
class Fragment:
    """A relocatable piece of graph over ranks 0..n-1 of a group (task ids 0..n_tasks-1). `stream` is 0 for tasks
    that occupy the stream of the op that issued them (the member's stream is substituted on append), -1 for none.
    `start[r]` is the task every predecessor of rank r's op must precede; `done[r]` the task that completes when
    rank r's output is ready. Edges are sorted by predecessor."""
    kind: str
    algorithm: str
    nbytes: int
    n: int
    task_kind: np.ndarray
    rank: np.ndarray
    peer: np.ndarray
    stream: np.ndarray
    task_nbytes: np.ndarray
    duration_ps: np.ndarray
    op: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    start: np.ndarray
    done: np.ndarray
    root: int = -1
    buf_bytes: tuple = ()
    sem: Semantics | None = None
    protocol: str = ""
    addr_buf: np.ndarray | None = None   # int8: TRANSFER: the peer's buffer it stores into or loads from (BUF_*;
    addr_off: np.ndarray | None = None   # BUF_NONE: a flag) and the offset there; GraphBuilder's addresses

    @property
    def n_tasks(self) -> int:
        return len(self.task_kind)

    def to_graph(self, ranks=None, n_ranks: int | None = None, label: str = "") -> TaskGraph:
        """This fragment alone as a graph (ranks default to 0..n-1), with semantics if it has them."""
        ranks = np.arange(self.n) if ranks is None else np.asarray(ranks)
        b = GraphBuilder(int(n_ranks if n_ranks is not None else ranks.max() + 1), semantics=self.sem is not None)
        b.add_fragment(self, ranks, label=label)
        return b.build()


class _Tasks:
    """A block of add_tasks: each column a scalar (broadcast at build) or an array of the block's length."""

    def __init__(self, cols: dict, m: int):
        self.cols, self.size = cols, m

    def fill(self, cols: dict, lo: int) -> None:
        for name, out in cols.items():
            out[lo:lo + self.size] = self.cols[name]
        self.cols = None                        # consumed: build frees each block once it is written


class _Stamp:
    """m copies of a fragment stamped on the rows of `ranks` (add_fragments), written into the graph's columns only
    at build, in one C pass (arrays.stamp_fragment): no per-call blocks to concatenate and no per-column
    temporaries (the address column's arithmetic alone took 1.4 GB at 1024 ranks)."""

    def __init__(self, frag: Fragment, ranks: np.ndarray, streams: np.ndarray, first: int, cid0: int,
                 addr: tuple[np.ndarray, np.ndarray, int]):
        self.frag, self.ranks, self.streams, self.first, self.cid0, self.addr = frag, ranks, streams, first, cid0, addr
        self.m = len(ranks)
        self.size = self.m * frag.n_tasks

    def fill(self, cols: dict, lo: int) -> None:
        from fabric._check_build import arrays
        f = self.frag
        apeer, aoff, window = self.addr
        arrays.stamp_fragment(tuple(cols[k] for k in _TASK_COLUMNS), lo, f.task_kind, f.rank, f.peer, f.stream,
                              f.task_nbytes, f.duration_ps, f.op, apeer, aoff, self.ranks, self.streams, self.cid0,
                              window)

    @property
    def edges(self) -> tuple:
        """The fragment's edges and where its copies start (arrays.csr_of_blocks expands them)."""
        return self.frag.edge_src, self.frag.edge_dst, self.first, self.m, self.frag.n_tasks


class _Edges:
    """A block of add_edges: pred -> succ as given (int64)."""

    def __init__(self, pred: np.ndarray, succ: np.ndarray):
        self.edges = (pred, succ)


_FILL_THREAD_TASKS = 2_000_000
"""Blocks are written by several threads once the graph has at least this many tasks per thread: their writes (a
stamped fragment's C pass, a block's numpy copies) run without the GIL and touch disjoint rows, and at 1024 ranks
(18 M tasks, ~0.8 GB of fresh columns) filling was a third of lowering. Below it a thread costs more than it saves."""


def _fill_blocks(blocks: list, cols: dict) -> None:
    """Write every block into the graph's columns at its rows (blocks in task order), split into runs of blocks
    with about equal tasks, one thread each (the cores, at most one per _FILL_THREAD_TASKS tasks)."""
    sizes = np.array([blk.size for blk in blocks], np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)))
    from fabric.config import machine_cores
    jobs = int(min(machine_cores(), starts[-1] // _FILL_THREAD_TASKS, len(blocks)))

    def fill(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            blocks[i].fill(cols, int(starts[i]))
    if jobs <= 1:
        fill(0, len(blocks))
        return
    # run j: the blocks starting in its 1/jobs of the rows
    cut = np.searchsorted(starts[:-1], np.arange(jobs + 1) * starts[-1] / jobs, side="left")
    cut[-1] = len(blocks)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        list(ex.map(fill, cut[:-1], cut[1:]))


class GraphBuilder:
    """Accumulates tasks and edges as blocks (arrays, or fragments with the ranks to stamp them on); `build()`
    writes each column once, straight into the graph's arrays, and makes the CSR."""

    def __init__(self, n_ranks: int, semantics: bool = False, window_bytes: int | None = None):
        """window_bytes: each accelerator's window of the unified address map (topology.accel_mem_gib GiB): the
        stores and loads of fragments get global addresses (fabric.address.global_addresses); None: none (by rank)."""
        self.n_ranks = int(n_ranks)
        self.semantics = semantics
        self.window_bytes = window_bytes
        self._blocks: list = []                 # _Tasks and _Stamp, in task order
        self._edges: list = []                  # _Edges and _Stamp, in edge order
        self._sem: dict[str, list[np.ndarray]] = {k: [] for k in ("dst_buf", "dst_off", "length", "n_src",
                                                                  "src_buf", "src_off")}
        self.n_tasks = 0
        self.coll_meta: list[CollMeta] = []

    def add_tasks(self, kind, rank, *, peer=-1, stream=-1, nbytes=0, duration_ps=0, op=0, coll=-1, src_op=-1,
                  addr=-1, count: int | None = None) -> np.ndarray:
        """Append tasks (arguments broadcast against each other) without semantics; returns their ids."""
        args = {"kind": kind, "rank": rank, "peer": peer, "stream": stream, "nbytes": nbytes,
                "duration_ps": duration_ps, "op": op, "coll": coll, "src_op": src_op, "addr": addr}
        m = count if count is not None else max(np.size(v) for v in args.values())
        cols = {}
        for k, v in args.items():
            a = np.asarray(v, dtype=_TASK_COLUMNS[k][0])
            if a.ndim and len(a) != m:
                raise ValueError(f"add_tasks: {k} has {len(a)} entries, expected {m}")
            cols[k] = a
        self._blocks.append(_Tasks(cols, m))
        if self.semantics:
            self._sem["dst_buf"].append(np.full(m, BUF_NONE, np.int8))
            for k in ("dst_off", "length", "n_src"):
                self._sem[k].append(np.zeros(m, np.int64))
        ids = np.arange(self.n_tasks, self.n_tasks + m, dtype=np.int64)
        self.n_tasks += m
        return ids

    def add_edges(self, pred, succ) -> None:
        """Dependencies pred[i] -> succ[i] (broadcast)."""
        p, s = np.broadcast_arrays(np.asarray(pred, np.int64), np.asarray(succ, np.int64))
        if p.size:
            self._edges.append(_Edges(p.flatten(), s.flatten()))      # copies: build reads them later

    def add_fragment(self, frag: Fragment, ranks, streams=None, label: str = "",
                     nbytes: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """Stamp `frag` onto global `ranks` (position = rank in the fragment); `streams[i]` is the stream of rank
        i's op (default 0). Returns (start ids, done ids, collective id), each id array indexed like `ranks`."""
        start, done, cids = self.add_fragments(frag, np.asarray(ranks)[None, :],
                                               None if streams is None else np.asarray(streams)[None, :],
                                               labels=[label], nbytes=nbytes)
        return start[0], done[0], int(cids[0])

    def add_fragments(self, frag: Fragment, ranks, streams=None, labels=None,
                      nbytes: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stamp m copies of `frag` at once: ranks and streams are [m, n] (row = one instance). Returns start and
        done ids [m, n] and the m collective ids."""
        ranks = np.array(ranks, np.int32)               # copies: build reads them later
        m, n = ranks.shape
        if n != frag.n:
            raise ValueError(f"fragment {frag.kind}/{frag.algorithm} is for {frag.n} ranks, got {n}")
        streams = np.zeros((m, n), np.int32) if streams is None else np.array(np.broadcast_to(
            np.asarray(streams, np.int32), (m, n)))
        nt = frag.n_tasks
        base = self.n_tasks + np.arange(m, dtype=np.int64)[:, None] * nt
        cid0 = len(self.coll_meta)
        stamp = _Stamp(frag, ranks, streams, self.n_tasks, cid0, self._addresses(frag))
        self._blocks.append(stamp)
        if len(frag.edge_src):
            self._edges.append(stamp)
        if self.semantics:
            if frag.sem is None:
                raise ValueError("this builder keeps semantics but the fragment was built without them")
            s = frag.sem
            self._sem["dst_buf"].append(np.tile(s.dst_buf, m))
            self._sem["dst_off"].append(np.tile(s.dst_off, m))
            self._sem["length"].append(np.tile(s.length, m))
            self._sem["n_src"].append(np.tile(np.diff(s.src_ptr), m))
            self._sem["src_buf"].append(np.tile(s.src_buf, m))
            self._sem["src_off"].append(np.tile(s.src_off, m))
        self.n_tasks += m * nt
        labels = [""] * m if labels is None else list(labels)
        nb = int(frag.nbytes if nbytes is None else nbytes)
        for i in range(m):
            self.coll_meta.append(CollMeta(kind=frag.kind, algorithm=frag.algorithm, nbytes=nb,
                                           ranks=tuple(ranks[i].tolist()), label=labels[i], root=frag.root,
                                           buf_bytes=frag.buf_bytes, protocol=frag.protocol))
        return frag.start[None, :] + base, frag.done[None, :] + base, np.arange(cid0, cid0 + m)

    def _addresses(self, frag: Fragment) -> tuple[np.ndarray, np.ndarray, int]:
        """How a copy of the fragment addresses its stores and loads: (apeer, aoff, window) with the address of
        task j on rows `ranks` = ranks[apeer[j]] * window + aoff[j] (fabric.address.global_addresses, the peer's
        window added at build: the same integers); apeer[j] = -1 where task j has no address (its address is -1)."""
        nt = frag.n_tasks
        if self.window_bytes is None or frag.addr_buf is None:
            return np.full(nt, -1, np.int32), np.zeros(nt, np.int64), 0
        from fabric.address import global_addresses
        on = (frag.task_kind == TRANSFER) & ((frag.op == STORE) | (frag.op == LOAD))
        aoff = global_addresses(0, frag.addr_buf, frag.addr_off, frag.rank, self.window_bytes)
        return np.where(on, np.maximum(frag.peer, 0), -1).astype(np.int32), aoff, int(self.window_bytes)

    def build(self, validate: bool = False) -> TaskGraph:
        """The graph. Each column is allocated once (np.empty: every element is written) and filled block by block,
        every column of a block at once (a stamped fragment's in one C pass), and the CSR is made from the edge
        blocks themselves, so the peak is the graph plus one block's temporaries. The builder is consumed."""
        n = self.n_tasks
        if n >= 1 << 31:
            raise GraphError(f"{n} tasks: the kernel numbers tasks with 32 bits (at most 2^31 - 1)")
        cols = {k: np.empty(n, dt) for k, (dt, _) in _TASK_COLUMNS.items()}
        _fill_blocks(self._blocks, cols)
        self._blocks.clear()
        from fabric._check_build import arrays
        # a counting sort in C over the edge blocks (stamped fragments expanded there, never as arrays): each
        # task's successors in edge order, as a stable sort by predecessor would give
        try:
            succ_ptr, succ_idx, n_deps = arrays.csr_of_blocks([blk.edges for blk in self._edges], n)
        except ValueError as e:
            raise GraphError(str(e)) from None
        self._edges.clear()
        sem = None
        if self.semantics:
            s = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in self._sem.items()}
            src_ptr = np.zeros(n + 1, np.int64)
            np.cumsum(s["n_src"], out=src_ptr[1:])
            sem = Semantics(dst_buf=s["dst_buf"].astype(np.int8), dst_off=s["dst_off"].astype(np.int64),
                            length=s["length"].astype(np.int64), src_ptr=src_ptr,
                            src_buf=s["src_buf"].astype(np.int8), src_off=s["src_off"].astype(np.int64))
        g = TaskGraph(n_ranks=self.n_ranks, succ_ptr=succ_ptr, succ_idx=succ_idx, n_deps=n_deps,
                      coll_meta=list(self.coll_meta), sem=sem, **cols)
        if validate:
            g.validate()
        return g
