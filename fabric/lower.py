"""Lowering: Trace -> TaskGraph.

    lower(trace, cfg=None, *, oracle=None, semantics=False, stream_order=True, validate=False) -> TaskGraph

- A compute op becomes one COMPUTE task on (rank, stream) with duration_ps = round(duration_ns * 1000) and nbytes
  = the op's memory bytes.
- The k-th collective op of every member of a group on that group is one collective instance: the selected
  algorithm's fragment (fabric.collectives.select / template) stamped over the group's ranks. The config is
  normalised once for every one of those calls (collectives.fabric_config), and the sd200 library's auto tiers time
  their candidates with `oracle` (fabric.collectives.policy; default fabric.sim.analytic_times, the analytic
  engine): lowering hands the cost oracle to the workload layer, which runs no engine itself. The fragment starts on
  rank r after r's predecessors of the op (its start JOIN), and r's successors depend on r's done JOIN: the
  collective completes per rank when that rank's output is ready.
- The k-th send a -> b matches the k-th receive on b from a: a two-rank sendrecv fragment.
- Every store and load of a fragment (collectives, send/recv) names the peer's buffer and offset; the graph's `addr`
  column holds their global addresses in the unified map (fabric/address.py: symmetric buffers), which the kernel
  translates at the issuing domain's ingress port (docs/contracts.md §Addresses). In-switch legs stay rank-addressed.
- Dependencies: the trace's per-rank dep CSR, plus (stream_order=True) program order on each (rank, stream), as a
  GPU stream executes its ops in issue order. Repeated edges are merged.

Everything is vectorised over all ranks' ops at once; the Python loop runs once per collective instance, and each
instance stamps a cached template (key: kind, algorithm, nbytes, group size, root, config; chosen once per key here),
written into the graph's columns by one C pass at build; the dependencies between ops are merged in C too
(arrays.op_dependencies). A 64-rank decode step lowers in tens of milliseconds, the 18 M tasks of a 1024-rank one
in 0.4-1 s of CPU (docs/performance.md).

Size conventions: the trace's coll_bytes (docs/trace-format.md, fabric/capture/plan.py) is the buffer for
allreduce/broadcast/send-recv, one rank's chunk for allgather/reduce_scatter and the chunk sent to each peer for
alltoall. Fragments take whole buffers (nccl-tests: gathered output, whole input, each rank's total send), so
`fragment_nbytes` multiplies those three by the group size; CollMeta.nbytes is the fragment's size.
"""
from __future__ import annotations

import ctypes

import numpy as np

from fabric import collectives
from fabric._check_build import arrays
from fabric.errors import TraceError
from fabric.phy import PS_PER_NS
from fabric.taskgraph import COMPUTE, GraphBuilder, TaskGraph
from fabric.trace import COLL_NAMES, KIND_COLLECTIVE, KIND_COMPUTE, KIND_RECV, KIND_SEND


MAX_FRAGMENT_BYTES = 1 << 52     # a whole collective's buffer: x 1000 ps/B = 4.5e18 ps, below int64's 9.2e18


def fragment_nbytes(kind: str, coll_bytes: int, n: int) -> int:
    """The fragment's nbytes for a trace op's coll_bytes (the one place that knows both conventions)."""
    nb = int(coll_bytes) * int(n) if kind in ("allgather", "reduce_scatter", "alltoall") else int(coll_bytes)
    if not 0 <= nb <= MAX_FRAGMENT_BYTES:      # Python ints: checked before any int64 array holds it
        raise TraceError(f"a {kind} of {int(coll_bytes)} B over {int(n)} ranks moves {nb} B, more than the "
                         f"{MAX_FRAGMENT_BYTES} B (2^52) one collective may move (docs/trace-format.md §Bounds)")
    return nb


def _cat(tables, col, dtype=None):
    arrs = [getattr(t, col) for t in tables]
    out = np.concatenate(arrs) if arrs else np.zeros(0)
    return out.astype(dtype, copy=False) if dtype is not None else out


def _occurrence(keys: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements (in array order) share its key."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    first = np.ones(len(sk), bool)
    first[1:] = sk[1:] != sk[:-1]
    run_start = np.maximum.accumulate(np.where(first, np.arange(len(sk)), 0))
    occ = np.empty(len(keys), np.int64)
    occ[order] = np.arange(len(sk)) - run_start
    return occ


def _label(trace, r: int, i: int) -> str:
    t = trace.ops[r]
    name = str(t.name[i])
    mod = str(t.module[i]) if hasattr(t, "module") else ""
    layer = int(t.layer[i]) if hasattr(t, "layer") else -1
    parts = [name] + ([f"layer {layer}"] if layer >= 0 else []) + ([mod] if mod else [])
    return " ".join(parts[:1]) + (f" ({', '.join(parts[1:])})" if len(parts) > 1 else "")


def lower(trace, cfg=None, *, oracle=None, semantics: bool = False, stream_order: bool = True,
          validate: bool = False) -> TaskGraph:
    """Turn `trace` (fabric.trace.Trace or anything with its attributes) into a TaskGraph on the fabric `cfg`
    describes (None: the defaults); oracle: the auto tiers' cost oracle (default: the analytic engine's)."""
    if oracle is None:
        from fabric.sim import analytic_times as oracle
    cfg = collectives.fabric_config(cfg)
    # built once _builder's locals (the ops' columns, ~150 MB at 1024 ranks) are gone: the graph's arrays reuse them
    graph = _builder(trace, cfg, oracle, semantics=semantics, stream_order=stream_order).build(validate=validate)
    _return_freed_heap()
    return graph


def _return_freed_heap() -> None:
    """Give the heap pages lowering's temporaries freed back to the OS. glibc keeps them (a 1024-rank step: 1.3 GB
    of 2.7 GB resident after lowering), and the engine's large arrays, mmapped, would never reuse them: the
    process's peak would carry them to the end. Not in a process that keeps freed arrays for its next run on
    purpose (fabric._malloc.reuse_freed_arrays: fabric-validate's and the sweeps' workers, whose next lowering would
    fault those pages in again: ~12 % of fabric-validate's CPU, measured). A no-op where the C library has no
    malloc_trim."""
    from fabric._malloc import reusing_freed_arrays
    if reusing_freed_arrays():
        return
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def _builder(trace, cfg, oracle, *, semantics: bool, stream_order: bool) -> GraphBuilder:
    """The GraphBuilder holding every task and edge of the trace's graph (lower's work but the build); cfg: a
    FabricConfig."""
    R = int(trace.n_ranks)
    tables = list(trace.ops)
    if len(tables) != R:
        raise TraceError(f"trace has {len(tables)} op tables for n_ranks={R}")
    n_ops = np.array([len(t.kind) for t in tables], np.int64)
    off = np.zeros(R + 1, np.int64)
    np.cumsum(n_ops, out=off[1:])
    G = int(off[-1])
    kind = _cat(tables, "kind", np.int8)
    stream = _cat(tables, "stream", np.int32)
    op_rank = np.repeat(np.arange(R, dtype=np.int32), n_ops)        # the graph's rank column's dtype
    op_local = np.arange(G, dtype=np.int64) - np.repeat(off[:-1], n_ops)
    entry = np.full(G, -1, np.int64)       # per op: its first task (or start JOIN) and its last (or done JOIN)
    exit_ = np.full(G, -1, np.int64)
    from fabric.address import GIB
    # every store and load of a collective names (peer, buffer, offset): a global address of the unified map
    b = GraphBuilder(R, semantics=semantics, window_bytes=cfg.topology.accel_mem_gib * GIB)
    _add_compute(b, tables, kind, stream, op_rank, op_local, entry, exit_)
    # read after the compute ops' columns are freed
    coll_kind = _cat(tables, "coll_kind", np.int8)
    coll_bytes = _cat(tables, "coll_bytes", np.int64)
    group = _cat(tables, "group", np.int32)
    peer = _cat(tables, "peer", np.int32)
    _add_collectives(b, trace, cfg, oracle, semantics, kind, stream, op_rank, op_local, coll_kind, coll_bytes, group,
                     peer, entry, exit_)
    _add_point_to_point(b, trace, cfg, semantics, R, kind, stream, op_rank, op_local, coll_bytes, peer, entry, exit_)
    if np.any(entry < 0):
        j = int(np.flatnonzero(entry < 0)[0])
        raise TraceError(f"rank {op_rank[j]} op {op_local[j]}: unknown op kind {int(kind[j])}")
    _add_dependencies(b, tables, n_ops, stream, stream_order, op_rank, op_local, entry, exit_)
    return b


def _add_compute(b, tables, kind, stream, op_rank, op_local, entry, exit_) -> None:
    """Compute ops: a COMPUTE task each."""
    comp = np.flatnonzero(kind == KIND_COMPUTE)
    if len(comp):
        dur = _cat(tables, "duration_ns", np.float64)[comp]
        nby = _cat(tables, "bytes", np.float64)[comp]
        dur *= PS_PER_NS
        ids = b.add_tasks(COMPUTE, op_rank[comp], stream=stream[comp], duration_ps=np.rint(dur, out=dur),
                          nbytes=np.rint(nby, out=nby), src_op=op_local[comp], count=len(comp))
        entry[comp] = ids
        exit_[comp] = ids


def _add_collectives(b, trace, cfg, oracle, semantics, kind, stream, op_rank, op_local, coll_kind, coll_bytes, group,
                     peer, entry, exit_) -> None:
    """Collectives: the k-th op of each member on a group is one instance."""
    cidx = np.flatnonzero(kind == KIND_COLLECTIVE)
    if not len(cidx):
        return
    R = int(trace.n_ranks)
    groups = [np.asarray(g, np.int64) for g in trace.groups]
    ng = len(groups)
    grp = group[cidx].astype(np.int64)
    rk = op_rank[cidx]
    bad = (grp < 0) | (grp >= ng)
    if np.any(bad):
        j = cidx[np.flatnonzero(bad)[0]]
        raise TraceError(f"rank {op_rank[j]} op {op_local[j]}: unknown group {group[j]} ({ng} groups)")
    gpos = np.full((ng, R), -1, np.int64)
    for g, mem in enumerate(groups):
        gpos[g, mem] = np.arange(len(mem))
    lp = gpos[grp, rk]
    if np.any(lp < 0):
        j = cidx[np.flatnonzero(lp < 0)[0]]
        raise TraceError(f"rank {op_rank[j]} op {op_local[j]}: rank is not a member of group {group[j]}")
    occ = _occurrence(grp * R + rk)
    frags: dict = {}            # (kind, nbytes, group size, root) -> the fragment its instances stamp
    for g, mem in enumerate(groups):
        sel = np.flatnonzero(grp == g)
        if not len(sel):
            continue
        per = np.bincount(lp[sel], minlength=len(mem))
        K = int(per.max())
        if np.any(per != K):
            r = int(mem[np.flatnonzero(per != K)[0]])
            raise TraceError(f"group {g}: rank {r} issues {int(per[gpos[g, r]])} collectives on it, rank "
                             f"{int(mem[np.argmax(per)])} issues {K}")
        mat = np.empty((K, len(mem)), np.int64)
        mat[occ[sel], lp[sel]] = cidx[sel]
        _stamp_group(b, trace, cfg, oracle, semantics, frags, g, mem, mat, gpos, coll_kind, coll_bytes, peer,
                     stream, op_local, entry, exit_)


def _stamp_group(b, trace, cfg, oracle, semantics, frags, g, mem, mat, gpos, coll_kind, coll_bytes, peer, stream,
                 op_local, entry, exit_) -> None:
    """Group g's instances (mat: instance x member -> op): checked to match across members, each stamped with the
    fragment of its (kind, nbytes, group size, root), one stamping call per fragment."""
    R = int(trace.n_ranks)
    ck, cb = coll_kind[mat], coll_bytes[mat]
    mism = (ck != ck[:, :1]) | (cb != cb[:, :1])
    if np.any(mism):
        k, p = np.argwhere(mism)[0]
        j0, j = mat[k, 0], mat[k, p]
        raise TraceError(f"group {g}: collective #{k} does not match: rank {mem[0]} op {op_local[j0]} is "
                         f"{COLL_NAMES[ck[k, 0]]} {cb[k, 0]} B, rank {mem[p]} op {op_local[j]} is "
                         f"{COLL_NAMES[ck[k, p]]} {cb[k, p]} B")
    n = len(mem)
    batches: dict = {}  # one stamping call per (template, group)
    for k in range(len(mat)):
        row = mat[k]
        kname = COLL_NAMES[int(ck[k, 0])] if 0 <= ck[k, 0] < len(COLL_NAMES) else "?"
        if kname not in collectives.KINDS or kname == "sendrecv":   # send/recv are ops of their own
            raise TraceError(f"group {g}: rank {mem[0]} op {op_local[row[0]]} is a collective of unknown "
                             f"kind {int(ck[k, 0])}")
        nb = fragment_nbytes(kname, int(cb[k, 0]), n)
        root = 0
        if kname == "broadcast":
            pr = int(peer[row[0]])
            root = int(gpos[g, pr]) if 0 <= pr < R and gpos[g, pr] >= 0 else 0
        key = (kname, nb, n, root)
        frag = frags.get(key)
        if frag is None:        # the policy and the template cache hash the whole config on every call
            # the whole choice: the nccl-like tuner's protocol may be the oracle's pick, not its estimate's
            ch = collectives.choose(kname, nb, n, cfg, oracle=oracle)
            frag = frags[key] = collectives.template(kname, ch.algorithm, nb, n, cfg, root=root, semantics=semantics,
                                                     choice=ch if ch.protocol else None)
        batches.setdefault(id(frag), (frag, []))[1].append(k)
    for frag, ks in batches.values():
        rows = mat[ks]
        labels = [_label(trace, int(mem[0]), int(op_local[r0])) for r0 in rows[:, 0]]
        start, done, _ = b.add_fragments(frag, np.broadcast_to(mem, rows.shape), streams=stream[rows],
                                         labels=labels)
        entry[rows] = start
        exit_[rows] = done


def _add_point_to_point(b, trace, cfg, semantics, R, kind, stream, op_rank, op_local, coll_bytes, peer, entry,
                        exit_) -> None:
    """Point to point: the k-th send a->b matches the k-th recv on b from a, a sendrecv fragment per pair."""
    snd = np.flatnonzero(kind == KIND_SEND)
    rcv = np.flatnonzero(kind == KIND_RECV)
    if not (len(snd) or len(rcv)):
        return
    skey = op_rank[snd].astype(np.int64) * R + peer[snd]
    rkey = peer[rcv].astype(np.int64) * R + op_rank[rcv]
    so = np.lexsort((_occurrence(skey), skey))
    ro = np.lexsort((_occurrence(rkey), rkey))
    if len(so) != len(ro) or np.any(skey[so] != rkey[ro]):
        raise TraceError(f"sends and receives do not pair up ({len(snd)} sends, {len(rcv)} receives; every send "
                         f"a->b needs a receive on b from a, in order)")
    s_ops, r_ops = snd[so], rcv[ro]
    if np.any(coll_bytes[s_ops] != coll_bytes[r_ops]):
        j = np.flatnonzero(coll_bytes[s_ops] != coll_bytes[r_ops])[0]
        raise TraceError(f"rank {op_rank[s_ops[j]]} op {op_local[s_ops[j]]} sends {coll_bytes[s_ops[j]]} B but "
                         f"rank {op_rank[r_ops[j]]} op {op_local[r_ops[j]]} receives {coll_bytes[r_ops[j]]} B")
    nbs = coll_bytes[s_ops]
    for nb in np.unique(nbs).tolist():
        sel = np.flatnonzero(nbs == nb)
        frag = collectives.template("sendrecv", "direct", int(nb), 2, cfg, semantics=semantics)
        pair = np.stack([s_ops[sel], r_ops[sel]], axis=1)
        labels = [_label(trace, int(op_rank[a]), int(op_local[a])) for a in s_ops[sel]]
        start, done, _ = b.add_fragments(frag, op_rank[pair], streams=stream[pair], labels=labels)
        entry[pair] = start
        exit_[pair] = done


def _add_dependencies(b, tables, n_ops, stream, stream_order, op_rank, op_local, entry, exit_) -> None:
    """Dependencies between ops: the trace's, and program order on each (rank, stream), each edge once (in C)."""
    dep_cnt = np.concatenate([np.diff(t.dep_ptr) for t in tables]) if tables else np.zeros(0, np.int64)
    try:
        pred, succ, bad = arrays.op_dependencies(n_ops, dep_cnt, _cat(tables, "dep_idx", np.int64), stream,
                                                 stream_order, exit_, entry)
    except ValueError as e:
        raise TraceError(f"the trace's dependency lists are malformed: {e}") from None
    if bad >= 0:
        raise TraceError(f"rank {op_rank[bad]} op {op_local[bad]}: a dependency names an op outside the rank's table")
    if len(pred):
        b.add_edges(pred, succ)
