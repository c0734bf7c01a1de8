"""Timelines: a run as a Chrome trace-event JSON file (`FILE.json` or `FILE.json.gz`) for Perfetto and chrome://tracing.

    with recording() as runs:                 # fabric.sim.run samples link counters in the kernel meanwhile
        r = replay(...)                       # or any probe that calls fabric.sim.run
    write(path, runs[-1], trace=tr)           # -> stats (events, bytes, seconds)

Layout (docs/timeline.md): a process per accelerator ("rank r") with a thread per stream (compute ops with their
trace name, layer, module, flops and bytes; collective library overheads and local reductions), a "collectives"
thread (one slice per collective instance and rank: kind, algorithm, protocol, bytes, ranks, label) and a
"collective sends" thread (a slice per phase of the rank's sends: transfers, bytes); flow arrows from a sender's
phase to the receiver's collective slice, one per (collective, receiver, phase): the transfer of that phase that
arrived last, the receive that completed it; a "links" process with a counter track per used link (utilisation and
credit stall in % of the interval, queue depth in packets, replays in the interval), from the samples the kernel took
every `report.sample_ns` (fabric/_kernel/sample.pxi). Times are microseconds with picosecond decimals.
"""
from __future__ import annotations

import gzip
import json
import os
import time
from contextlib import contextmanager

import numpy as np

from fabric.taskgraph import COMPUTE, LOAD, REDUCE, TRANSFER

COLL_TID, SEND_TID, XFER_TID = 1000, 2000, 3000     # thread ids (+ lane) of the per-rank tracks beyond streams


@contextmanager
def recording():
    """Make every fabric.sim.run inside the block sample link counters and append its record to the yielded list."""
    from fabric import sim
    prev = sim._recorder
    runs: list = []
    sim._recorder = runs
    try:
        yield runs
    finally:
        sim._recorder = prev


def _lanes(owner: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per slice so that slices of one owner on one lane never overlap (greedy, in start order)."""
    lane = np.zeros(len(start), np.int64)
    if not len(start):
        return lane
    order = np.lexsort((start, owner))
    free: dict[int, list] = {}
    for i in order.tolist():
        ends = free.setdefault(int(owner[i]), [])
        s = int(start[i])
        for k, e in enumerate(ends):
            if e <= s:
                lane[i] = k
                ends[k] = int(end[i])
                break
        else:
            lane[i] = len(ends)
            ends.append(int(end[i]))
    return lane


def _us(ps) -> str:
    return f"{ps / 1e6:.6f}"


def _senders_receivers(kind, rank, peer, op):
    """Per task: the rank its data leaves and the rank it lands on (a load's data goes peer -> rank)."""
    load = (kind == TRANSFER) & (op == LOAD)
    return np.where(load, peer, rank), np.where(load, rank, peer)


def events(run: dict, trace=None) -> tuple[list[str], dict]:
    """The trace events of one recorded run as JSON text pieces, and counts (slices, flows, counters)."""
    g = run["graph"]
    res = run["result"]
    get = (lambda k: getattr(g, k)) if not isinstance(g, dict) else (lambda k: np.asarray(g[k]))
    kind, rank, peer, stream = get("kind"), get("rank").astype(np.int64), get("peer").astype(np.int64), get("stream")
    coll, op, nbytes = get("coll"), get("op"), get("nbytes")
    coll_meta = list(getattr(g, "coll_meta", []) or [])
    src_op = getattr(g, "src_op", None) if not isinstance(g, dict) else None
    start, end = res.task_start_ps, res.task_end_ps
    topo = run["topo"]
    R = int(topo.n_ranks if hasattr(topo, "n_ranks") else topo["n_ranks"])
    ran = start >= 0
    out: list[str] = []
    n = dict(slices=0, stream_slices=0, collective_slices=0, phase_slices=0, transfer_slices=0, flows=0,
             counter_events=0)
    step_ps = int(end[ran].max()) if ran.any() else 0
    tids: dict[tuple[int, int], str] = {}      # (rank, thread id) -> the track's name, filled by every section
    q = _quoter()
    # link counters first: before the per-task arrays of the sections below exist
    n["counter_events"], counter_text = _counters(run, R, step_ps)
    n["stream_slices"] = _stream_slices(out, tids, q, trace, ran, kind, rank, stream, coll, nbytes, src_op, coll_meta,
                                        start, end)
    snd, rcv = _senders_receivers(kind, rank, peer, op)
    inc = np.flatnonzero(ran & (coll >= 0))
    if len(inc) and coll_meta:
        n["collective_slices"], n["phase_slices"], n["flows"] = _collectives(
            out, tids, q, inc, R, kind, rank, coll, nbytes, coll_meta, snd, rcv, start, end)
    lone = np.flatnonzero(ran & (coll < 0) & (kind == TRANSFER))
    if len(lone) and len(lone) <= 200_000:
        _lone_transfers(out, tids, lone, snd, rcv, op, nbytes, start, end)
        n["transfer_slices"] = 2 * len(lone)
        n["flows"] += len(lone)
    n["slices"] = n["stream_slices"] + n["collective_slices"] + n["phase_slices"] + n["transfer_slices"]
    meta = _track_names(tids, R, q)
    n["step_ps"] = step_ps
    n["sample_ps"] = int(run.get("sample_ps", 0))
    n["samples"] = int(len(run.get("samples", ())))
    return meta + out + counter_text, n


def _quoter():
    """A JSON string quoter that caches each value's text (names, modules and labels repeat over ranks)."""
    esc: dict = {}

    def q(x) -> str:
        s = esc.get(x)
        if s is None:
            s = esc[x] = json.dumps(x if isinstance(x, str) else str(x, "utf-8") if isinstance(x, bytes) else str(x))
        return s
    return q


def _stream_slices(out, tids, q, trace, ran, kind, rank, stream, coll, nbytes, src_op, coll_meta, start, end) -> int:
    """Stream tasks: compute ops (with their trace op's name, layer, module, flops and bytes when the trace is
    given), collective overheads, local reductions. Appends to out and tids; returns the slice count."""
    on = np.flatnonzero(ran & (stream >= 0) & ((kind == COMPUTE) | (kind == REDUCE)))
    op_names = None
    if trace is not None and src_op is not None:
        offs = np.zeros(trace.n_ranks + 1, np.int64)
        np.cumsum([len(t.kind) for t in trace.ops], out=offs[1:])
        cat = {k: np.concatenate([np.asarray(getattr(t, k)) for t in trace.ops])
               for k in ("name", "layer", "module", "flops", "bytes")
               if all(getattr(t, k, None) is not None for t in trace.ops)}
        op_names = (offs, cat)
    kinds = kind[on].tolist()
    colls = coll[on].tolist()
    nbs = nbytes[on].tolist()
    desc: list[str] = []
    cache: dict = {}
    if op_names is not None:
        offs, cat = op_names
        idx = np.where(src_op[on] >= 0, offs[rank[on]] + src_op[on], -1).tolist()
        cols = {k: cat[k].tolist() for k in ("name", "layer", "module", "flops", "bytes") if k in cat}
    else:
        idx = [-1] * len(on)
    for k_, c, nb, i in zip(kinds, colls, nbs, idx):
        if k_ == REDUCE:
            d = f'"name":"reduce","args":{{"bytes":{nb}' + (f',"collective":{c}}}' if c >= 0 else "}")
        elif c >= 0:
            d = cache.get(("c", c))
            if d is None:
                m = coll_meta[c] if c < len(coll_meta) else None
                d = cache[("c", c)] = (f'"name":{q(f"{m.kind} overhead" if m else "collective overhead")},'
                                       f'"args":{{"collective":{c}}}')
        elif i >= 0:
            key = tuple(cols[k][i] for k in cols)
            d = cache.get(key)
            if d is None:
                nm = q(cols["name"][i]) if "name" in cols else '"compute"'
                args = ",".join(f'"{k}":{q(cols[k][i]) if k in ("name", "module") else _num(cols[k][i])}'
                                for k in ("layer", "module", "flops", "bytes") if k in cols)
                d = cache[key] = f'"name":{nm},"args":{{{args}}}'
        else:
            d = f'"name":"compute","args":{{"bytes":{nb}}}'
        desc.append(d)
    rl, sl = rank[on].tolist(), stream[on].tolist()
    for r, st in set(zip(rl, sl)):
        tids[(r, st)] = f"stream {st}"
    out += [f'{{"ph":"X","pid":{r},"tid":{st},"ts":{a:.6f},"dur":{b:.6f},{d}}}'
            for r, st, a, b, d in zip(rl, sl, (start[on] / 1e6).tolist(), ((end[on] - start[on]) / 1e6).tolist(),
                                      desc)]
    return len(on)


def _collectives(out, tids, q, inc, R, kind, rank, coll, nbytes, coll_meta, snd, rcv, start, end) \
        -> tuple[int, int, int]:
    """The collective tasks inc: a slice per (instance, rank), the phases of each rank's sends, and the flows from
    a phase to its receiver's slice. Appends to out and tids; returns the counts of slices, phases and flows."""
    xf = kind[inc] == TRANSFER
    coll_lane, n_slices = _collective_slices(out, tids, q, inc, xf, R, rank, coll, coll_meta, snd, rcv, start, end)
    tx, inv, p_idx, pl, n_phases = _send_phases(out, tids, q, inc, xf, R, kind, rank, coll, nbytes, coll_meta, snd,
                                                start, end)
    n_flows = _phase_flows(out, tx, inv, p_idx, pl, coll_lane, R, coll, snd, rcv, start, end)
    return n_slices, n_phases, n_flows


def _collective_slices(out, tids, q, inc, xf, R, rank, coll, coll_meta, snd, rcv, start, end) -> tuple[dict, int]:
    """One slice per (instance, rank), over its tasks on that rank and the receives landing there; returns each
    (instance * R + rank)'s lane and the slice count."""
    C = len(coll_meta)
    first = np.full(C * R, np.iinfo(np.int64).max)
    last = np.full(C * R, -1, np.int64)
    for who, sel in ((rank, inc), (rcv, inc[xf]), (snd, inc[xf])):   # own tasks, receives, sends
        key = coll[sel].astype(np.int64) * R + who[sel]
        np.minimum.at(first, key, start[sel])
        np.maximum.at(last, key, end[sel])
        del key
    have = np.flatnonzero(last >= 0)
    cl = _lanes(have % R, first[have], last[have])
    coll_lane = dict(zip(have.tolist(), cl.tolist()))
    for key, lane in zip(have.tolist(), cl.tolist()):
        c, r = divmod(key, R)
        m = coll_meta[c]
        tids[(r, COLL_TID + lane)] = "collectives" if lane == 0 else f"collectives {lane}"
        out.append(f'{{"ph":"X","pid":{r},"tid":{COLL_TID + lane},"ts":{_us(first[key])},'
                   f'"dur":{_us(last[key] - first[key])},"name":{q(m.kind)},"args":{{"collective":{c},'
                   f'"algorithm":{q(m.algorithm)},"protocol":{q(getattr(m, "protocol", "") or "default")},'
                   f'"bytes":{int(m.nbytes)},"ranks":{len(m.ranks)},"label":{q(m.label)}}}}}')
    return coll_lane, len(have)


def _send_phases(out, tids, q, inc, xf, R, kind, rank, coll, nbytes, coll_meta, snd, start, end):
    """The phases of a rank's sends: separated by its own non-transfer tasks of the collective (wait points,
    reductions, overheads) in start order; a slice each. Returns the transfers tx, each one's phase inv (an index
    into the phases), each phase's number within its (collective, rank) and lane, and the phase count."""
    own = inc[(kind[inc] != TRANSFER)]
    sx = inc[xf]
    k_all = np.concatenate([coll[own].astype(np.int64) * R + rank[own], coll[sx].astype(np.int64) * R + snd[sx]])
    is_x = np.concatenate([np.zeros(len(own), bool), np.ones(len(sx), bool)])
    t_all = np.concatenate([own, sx])
    o = np.lexsort((is_x, start[t_all], k_all))
    k_s, x_s, t_s = k_all[o], is_x[o], t_all[o]
    del k_all, is_x, t_all, o
    sep = np.cumsum(~x_s)
    grp_start = np.r_[True, k_s[1:] != k_s[:-1]]
    base = np.maximum.accumulate(np.where(grp_start, sep - (~x_s), 0))
    phase_raw = sep - base                              # non-transfer tasks before it in its group
    del sep, base, grp_start
    xs = x_s
    M = len(t_s) + 1
    pk = k_s[xs] * M + phase_raw[xs]                   # unique (collective, rank, phase)
    tx = t_s[xs]
    del k_s, x_s, t_s, phase_raw
    uk, inv = np.unique(pk, return_inverse=True)
    del pk
    p_first = np.full(len(uk), np.iinfo(np.int64).max)
    p_last = np.full(len(uk), -1, np.int64)
    np.minimum.at(p_first, inv, start[tx])
    np.maximum.at(p_last, inv, end[tx])
    p_cnt = np.bincount(inv, minlength=len(uk))
    p_bytes = np.bincount(inv, weights=nbytes[tx], minlength=len(uk))
    p_key = uk // M
    p_idx = np.zeros(len(uk), np.int64)                 # dense phase number within (collective, rank)
    if len(uk):
        new = np.r_[True, p_key[1:] != p_key[:-1]]
        pos = np.arange(len(uk))
        p_idx = pos - np.maximum.accumulate(np.where(new, pos, 0))
    p_rank = p_key % R
    p_coll = p_key // R
    pl = _lanes(p_rank, p_first, p_last)
    kname = [q(f"{m.kind} phase ") for m in coll_meta]
    for r, lane, c, ph, a, b, cnt, byt in zip(p_rank.tolist(), pl.tolist(), p_coll.tolist(), p_idx.tolist(),
                                               (p_first / 1e6).tolist(), ((p_last - p_first) / 1e6).tolist(),
                                               p_cnt.tolist(), p_bytes.tolist()):
        if lane:
            tids[(r, SEND_TID + lane)] = f"collective sends {lane}"
        out.append(f'{{"ph":"X","pid":{r},"tid":{SEND_TID + lane},"ts":{a:.6f},"dur":{b:.6f},'
                   f'"name":{kname[c][:-1]}{ph}","args":{{"collective":{c},"phase":{ph},"transfers":{cnt},'
                   f'"bytes":{int(byt)}}}}}')
    for r in set(p_rank.tolist()):
        tids[(r, SEND_TID)] = "collective sends"
    return tx, inv, p_idx, pl, len(uk)


def _phase_flows(out, tx, inv, p_idx, pl, coll_lane, R, coll, snd, rcv, start, end) -> int:
    """Flows: per (collective, receiver, phase number) the transfer of that phase that arrived last, from the
    sender's phase slice to the receiver's collective slice; returns their count."""
    ph_of_t = p_idx[inv]
    fk = (coll[tx].astype(np.int64) * R + rcv[tx]) * (int(p_idx.max()) + 1 if len(p_idx) else 1) + ph_of_t
    o = np.lexsort((end[tx], fk))
    lastof = np.r_[fk[o][1:] != fk[o][:-1], True]
    sel = o[lastof]
    flow_id = 0
    for j in sel.tolist():
        t = int(tx[j])
        s_r, d_r, c = int(snd[t]), int(rcv[t]), int(coll[t])
        flow_id += 1
        s_lane = int(pl[inv[j]])
        d_lane = coll_lane.get(c * R + d_r, 0)
        out.append(f'{{"ph":"s","id":{flow_id},"pid":{s_r},"tid":{SEND_TID + s_lane},"ts":{_us(start[t])},'
                   f'"name":"recv","cat":"flow"}}')
        out.append(f'{{"ph":"f","bp":"e","id":{flow_id},"pid":{d_r},"tid":{COLL_TID + d_lane},'
                   f'"ts":{_us(end[t])},"name":"recv","cat":"flow"}}')
    return flow_id


def _lone_transfers(out, tids, lone, snd, rcv, op, nbytes, start, end) -> None:
    """Transfers outside collectives (probes): a slice each on the sender and the receiver, a flow between."""
    ln = _lanes(snd[lone], start[lone], end[lone])
    rl = _lanes(rcv[lone], start[lone], end[lone])
    for i, t in enumerate(lone.tolist()):
        s_r, d_r = int(snd[t]), int(rcv[t])
        tids[(s_r, XFER_TID + int(ln[i]))] = "transfers"
        tids[(d_r, XFER_TID + 500 + int(rl[i]))] = "receives"
        body = (f'"dur":{_us(end[t] - start[t])},"args":{{"bytes":{int(nbytes[t])},"src":{s_r},"dst":{d_r},'
                f'"op":{int(op[t])}}}')
        out.append(f'{{"ph":"X","pid":{s_r},"tid":{XFER_TID + int(ln[i])},"ts":{_us(start[t])},'
                   f'"name":"send",{body}}}')
        out.append(f'{{"ph":"X","pid":{d_r},"tid":{XFER_TID + 500 + int(rl[i])},"ts":{_us(start[t])},'
                   f'"name":"receive",{body}}}')
        out.append(f'{{"ph":"s","id":{1_000_000 + i},"pid":{s_r},"tid":{XFER_TID + int(ln[i])},'
                   f'"ts":{_us(start[t])},"name":"transfer","cat":"flow"}}')
        out.append(f'{{"ph":"f","bp":"e","id":{1_000_000 + i},"pid":{d_r},"tid":{XFER_TID + 500 + int(rl[i])},'
                   f'"ts":{_us(end[t])},"name":"transfer","cat":"flow"}}')


def _track_names(tids, R: int, q) -> list[str]:
    """Metadata events: the names and order of the processes (a rank each, then "links") and their threads."""
    meta = []
    for r in sorted({r for r, _ in tids}):
        meta.append(f'{{"ph":"M","ts":0,"pid":{r},"name":"process_name","args":{{"name":"rank {r}"}}}}')
        meta.append(f'{{"ph":"M","ts":0,"pid":{r},"name":"process_sort_index","args":{{"sort_index":{r}}}}}')
    for (r, tid), name in sorted(tids.items()):
        meta.append(f'{{"ph":"M","ts":0,"pid":{r},"tid":{tid},"name":"thread_name","args":{{"name":{q(name)}}}}}')
        meta.append(f'{{"ph":"M","ts":0,"pid":{r},"tid":{tid},"name":"thread_sort_index","args":{{"sort_index":{tid}}}}}')
    meta.append(f'{{"ph":"M","ts":0,"pid":{R},"name":"process_name","args":{{"name":"links"}}}}')
    meta.append(f'{{"ph":"M","ts":0,"pid":{R},"name":"process_sort_index","args":{{"sort_index":{R}}}}}')
    return meta


def _num(v) -> str:
    v = float(v)
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


def _counters(run: dict, R: int, step_ps: int) -> tuple[int, list[str]]:
    """Counter events per used link: a value per sample interval, written only when it changes."""
    samples = run.get("samples")
    P = int(run.get("sample_ps", 0))
    if samples is None or not len(samples) or P <= 0:
        return 0, []
    res, topo = run["result"], run["topo"]
    def per_interval(col):             # cumulative column -> amount in each interval [n, C]
        return np.diff(samples[:, :, col], axis=0, prepend=np.zeros((1, samples.shape[1]), np.int64))
    util = np.clip(np.round(per_interval(0) * (100 / P), 1), 0, 100)
    stall = np.clip(np.round(per_interval(2) * (100 / P), 1), 0, 100)
    queue = samples[:, :, 1]
    repl = per_interval(3)
    used = np.flatnonzero((res.counters["packets"] > 0) | (res.counters["queue_max"] > 0))
    name = topo.channel_name if hasattr(topo, "channel_name") else (lambda c: f"channel {c}")
    out = []
    for c in used.tolist():
        v = np.stack([util[:, c], queue[:, c], stall[:, c], repl[:, c]], axis=1)
        keep = np.r_[True, (v[1:] != v[:-1]).any(axis=1)]
        nm = json.dumps(f"{name(c)}")
        ki = np.flatnonzero(keep)
        for t_us, u, qd, st, rp in zip((ki * (P / 1e6)).tolist(), v[ki, 0].tolist(), v[ki, 1].astype(np.int64).tolist(),
                                       v[ki, 2].tolist(), v[ki, 3].astype(np.int64).tolist()):
            out.append(f'{{"ph":"C","pid":{R},"ts":{t_us:.6f},"name":{nm},"args":{{"util %":{u:g},'
                       f'"queue":{qd},"credit stall %":{st:g},"replays":{rp}}}}}')
        end_ps = max(len(v) * P, step_ps)
        out.append(f'{{"ph":"C","pid":{R},"ts":{_us(end_ps)},"name":{nm},"args":{{"util %":0,"queue":0,'
                   f'"credit stall %":0,"replays":0}}}}')
    return len(out), out


def write(path: str, run: dict, trace=None, meta: dict | None = None) -> dict:
    """Write `run` (a record from recording()) to path (.json or .json.gz); returns counts, bytes and seconds."""
    t0 = time.perf_counter()
    parts, stats = events(run, trace)
    other = json.dumps(dict(meta or {}, step_ps=stats["step_ps"], sample_ps=stats["sample_ps"],
                            samples=stats["samples"], generator="fabric.timeline"), default=str)
    head = '{"displayTimeUnit":"ns","otherData":' + other + ',"traceEvents":[\n'
    opener = (lambda: gzip.open(path, "wt", compresslevel=3, encoding="utf-8")) if str(path).endswith(".gz") else \
        (lambda: open(path, "w", encoding="utf-8"))
    size = len(head)
    with opener() as f:                      # in chunks: never the whole text in memory at once
        f.write(head)
        for i in range(0, len(parts), 20000):
            chunk = ",\n".join(parts[i:i + 20000]) + (",\n" if i + 20000 < len(parts) else "\n")
            size += len(chunk)
            f.write(chunk)
        f.write("]}\n")
    stats.update(bytes=os.path.getsize(path), json_bytes=size + 3, events=len(parts),
                 seconds=time.perf_counter() - t0)
    return stats


@contextmanager
def to_file(path: str | None, trace=None, meta: dict | None = None):
    """Record the runs of the block and write the last one to path (nothing when path is None); the yielded dict
    receives write()'s figures and the path."""
    info: dict = {}
    if not path:
        yield info
        return
    with recording() as runs:
        yield info
    if not runs:
        from fabric.errors import FabricError
        raise FabricError("--timeline: the command ran no simulation to draw")
    info.update(write(path, runs[-1], trace, meta), path=path)
