"""A fault that cuts serving ranks off: their work moves to spares, the step runs in segments of fresh engines.

Task migration to spare accelerators (--migrate, manager.migrate; docs/faults.md §Task migration).

A step runs in segments (fabric.sim.run, each a fresh Engine). When a fault cuts serving ranks off, the fabric
manager finds it at its reroute (detection + route update after the fault): each cut-off rank gets a spare
(topology.sd200.spares: one in its host domain first, else the lowest-numbered one still reachable), which loads the
rank's state (manager.migration_ns) while the other ranks run on with routes that leave the cut-off ones out
(fabric.faults.failover.Schedule calls `_Spares.partition`). The segment ends at the takeover. The next one starts
there, on the fabric as it is then (dead channels out of the routes, lane-degraded rates), with every task not kept: a
task completed in the segment is kept, except on a cut-off rank, where only what completed before the fault counts
(its results could not leave it), and what depends on a task not kept; a task in progress restarts, a transfer in
flight is sent again from its first byte (its packets in the fabric are abandoned with the segment). The migrated
rank's tasks run on the spare, its memory window moves there (rank_map), later faults still apply (shifted to the
segment's clock), and a later partition migrates again. No spare left: MigrationError, one line.
"""
from __future__ import annotations

import numpy as np

from fabric import sim
from fabric.faults.spec import PartitionError, parse_all, resolve
from fabric.phy import ps
from fabric.routing import cut_off_ranks, reroute
from fabric.taskgraph import TRANSFER


class MigrationError(PartitionError):
    """A fault cut serving ranks off and no reachable spare is left to take their work."""


def migration_ps(cfg, topo, spare: int, alive: np.ndarray) -> int:
    """manager.migration_ns, or (0 = auto) manager.migration_state_gb over the spare's working ports."""
    if cfg.manager.migration_ns:
        return ps(cfg.manager.migration_ns)
    out = np.flatnonzero((topo.ch_src == spare) & alive)
    bytes_per_ps = float((1.0 / topo.ch_ps_per_byte[out]).sum())
    return int(round(cfg.manager.migration_state_gb * 1e9 / bytes_per_ps)) if bytes_per_ps else 0


def _fabric_at(faults, chans, topo, cfg, t_ps: int):
    """(alive channels, ps per byte) at absolute time t_ps, and the faults still to come: (spec shifted to t_ps,
    spec as given). A flapping link down at t_ps stays down for the rest of the step (its return is not modelled
    across segments)."""
    alive = np.ones(topo.n_channels, bool)
    rate = np.array(topo.ch_ps_per_byte, np.float64)
    later = []
    for f, ch in zip(faults, chans):
        at = ps(f.at_us * 1e3)
        if at > t_ps:
            when = f"{(at - t_ps) / 1e6!r}" + (f"-{(ps(f.until_us * 1e3) - t_ps) / 1e6!r}" if f.until_us else "")
            what = f"lanes={f.lanes}" if f.action == "lanes" else f.action
            later.append((f"{f.part}:{f.where}:{what}@{when}", f.spec))
        elif f.action == "lanes":
            rate[ch] *= cfg.phy.lanes / f.lanes
        elif f.action != "flap" or ps(f.until_us * 1e3) > t_ps:
            alive[ch] = False
    return alive, rate, later


def _remaining(g: dict, done: np.ndarray, rank_map: np.ndarray, n_ranks: int) -> tuple[dict, np.ndarray]:
    """The tasks of graph g (as arrays) not done, with their dependencies among themselves and their ranks moved
    by rank_map; and their ids in g."""
    n = len(done)
    ids = np.flatnonzero(~done)
    new_id = np.full(n, -1, np.int64)
    new_id[ids] = np.arange(len(ids))
    pred = np.repeat(np.arange(n, dtype=np.int64), np.diff(g["succ_ptr"]))
    succ = np.asarray(g["succ_idx"], np.int64)
    keep = ~done[pred] & ~done[succ]
    p, q = new_id[pred[keep]], new_id[succ[keep]]
    ptr = np.zeros(len(ids) + 1, np.int64)
    np.cumsum(np.bincount(p, minlength=len(ids)), out=ptr[1:])
    sub = {k: (v[ids] if isinstance(v, np.ndarray) and len(v) == n and k not in ("succ_ptr", "succ_idx") else v)
           for k, v in g.items() if k != "sem"}
    peer = sub["peer"]
    sub.update(n_ranks=n_ranks, rank=rank_map[sub["rank"]].astype(np.int32),
               peer=np.where(peer >= 0, rank_map[np.maximum(peer, 0)], -1).astype(np.int32),
               succ_ptr=ptr, succ_idx=q[np.argsort(p, kind="stable")].astype(np.int32),
               n_deps=np.bincount(q, minlength=len(ids)).astype(np.int32))
    return sub, ids


def _closed(graph, kept: np.ndarray) -> np.ndarray:
    """kept, less every task downstream of one not kept (a join that only waited on a discarded task): the kept
    set is closed under predecessors, so the step's task times respect every dependency."""
    g = sim.as_arrays(graph)
    pred = np.repeat(np.arange(len(kept), dtype=np.int64), np.diff(g["succ_ptr"]))
    succ = np.asarray(g["succ_idx"], np.int64)
    kept = kept.copy()
    while True:
        bad = succ[kept[succ] & ~kept[pred]]
        if not len(bad):
            return kept
        kept[bad] = False


def _choose_spares(topo, cut, free: list[int], alive, retired, spec: str, at_us: float) -> dict[int, int]:
    """A reachable free spare for each cut-off rank: one in its host domain first, else the lowest-numbered."""
    out = set(cut_off_ranks(topo, alive)) | set(retired)
    usable = [s for s in free if s not in out]
    moves = {}
    for r in cut:
        if not usable:
            names = ", ".join(topo.node_names[x] for x in cut)
            raise MigrationError(f"fault {spec} cuts {names} off at t={at_us:.1f} us and no reachable spare is left "
                                 f"for {topo.node_names[r]} ({topo.n_spares} in all); raise topology.sd200.spares")
        same = [s for s in usable if topo.node_domain[s] == topo.node_domain[r]]
        s = (same or usable)[0]
        usable.remove(s)
        moves[r] = s
    return moves


class _Spares:
    """The spares not used yet and the rank each of the step's ranks runs on now (rank_map); the `migrate` of a
    segment's fault schedule (fabric.faults.failover.Schedule), which calls `partition` when a fault cuts serving ranks
    off. offset: the segment's start on the step's clock; given: each segment spec's spec as given."""

    def __init__(self, cfg, topo, ranks: np.ndarray):
        self.cfg, self.topo, self.ranks = cfg, topo, ranks
        self.free = topo.spare_ranks.tolist()
        self.rank_map = np.arange(topo.n_ranks, dtype=np.int64)
        self.offset, self.given, self.events = 0, {}, []

    def serving(self) -> set:
        return set(self.rank_map[self.ranks].tolist())

    def partition(self, cut, t_ps: int, alive, retired, spec: str, fault_us: float) -> int:
        """Spares for the ranks in cut (MigrationError when none is left); the takeover time on the segment's
        clock."""
        at = self.offset + t_ps
        moves = _choose_spares(self.topo, cut, self.free, alive, retired, self.given.get(spec, spec), at / 1e6)
        took = max(migration_ps(self.cfg, self.topo, s, alive) for s in moves.values())
        for r, s in moves.items():
            self.free.remove(s)
            self.rank_map[self.rank_map == r] = s
        names = self.topo.node_names
        self.events.append(dict(fault=self.given.get(spec, spec), fault_us=self.offset / 1e6 + fault_us,
                                partition_us=at / 1e6, takeover_us=(at + took) / 1e6, migration_us=took / 1e6,
                                moves={names[r]: names[s] for r, s in moves.items()}))
        return t_ps + took


def run(cfg, topo, graph, *, engine: str = "packet", progress=None, transfers: bool = False, runs=None):
    """Execute graph with cfg's faults, migrating cut-off ranks to spares; (merged RunResult, migration record).
    The RunResult's task times are the step's (segments offset by their starts), its counters and totals summed
    over the segments; `faults` adds packets_abandoned (in flight when a segment ended, sent again). runs: a list
    that gets each segment's graph, RunResult and the ids (in graph) of the tasks kept from it, for checks."""
    faults = parse_all(cfg.faults)
    chans = [resolve(f, topo, cfg) for f in faults]
    g = sim.as_arrays(graph)
    n = len(g["kind"])
    start, end = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    done = np.zeros(n, bool)
    spares = _Spares(cfg, topo, np.unique(np.concatenate([g["rank"], g["peer"][g["kind"] == TRANSFER]])))
    seg_topo, seg_graph, ids = topo, graph, np.arange(n)
    specs, alive, retired = [(f.spec, f.spec) for f in faults], None, set()
    results, applied = [], []
    while True:
        spares.given = dict(specs)
        res = sim.run(cfg, seg_topo, seg_graph, engine=engine, progress=progress, transfers=transfers,
                      permanent=[shifted for shifted, _ in specs], alive=alive, retired=sorted(retired),
                      rank_map=spares.rank_map.copy(), migrate=spares)
        results.append(res)
        applied += [_shifted(rec, spares.offset / 1e6, spares.given[rec["spec"]])
                    for rec in res.faults.get("applied", [])]
        parts = res.faults.get("partitions") or []
        fin = res.task_end_ps >= 0
        rank = sim.as_arrays(seg_graph)["rank"]
        for p in parts:                 # a cut-off rank's results after the fault never left it
            fin &= ~(np.isin(rank, p["cut"]) & (res.task_end_ps > ps(p["fault_us"] * 1e3)))
        fin = _closed(seg_graph, fin)
        start[ids[fin]] = res.task_start_ps[fin] + spares.offset
        end[ids[fin]] = res.task_end_ps[fin] + spares.offset
        done[ids[fin]] = True
        if runs is not None:
            runs.append(dict(graph=seg_graph, result=res, kept=ids[fin]))
        for e in spares.events[len(spares.events) - len(parts):]:
            e.update(tasks_kept=int(done.sum()), tasks_restarted=int((res.task_start_ps >= 0).sum() - fin.sum()))
        if done.all():
            break
        take = spares.offset + max(p["takeover_ps"] for p in parts)
        retired |= set(res.faults["retired"])
        while True:                     # a fault after the segment's last reroute that cut serving ranks off
            alive, rate, specs = _fabric_at(faults, chans, topo, cfg, take)
            cut = set(cut_off_ranks(topo, alive)) - retired
            retired |= cut
            more = sorted(cut & spares.serving())
            if not more:
                break
            last = max((f for f in faults if ps(f.at_us * 1e3) <= take), key=lambda f: f.at_us)
            spares.offset = take
            take += spares.partition(more, 0, alive, retired, last.spec, last.at_us - take / 1e6)
            spares.events[-1].update(tasks_kept=int(done.sum()), tasks_restarted=0)
        spares.offset = take
        seg_topo, _ = reroute(topo, alive, exclude=sorted(retired))
        seg_topo.ch_ps_per_byte = rate
        seg_graph, ids = _remaining(g, done, spares.rank_map, topo.n_ranks)
    events = spares.events
    record = dict(events=events, segments=len(results), step_us=float(end.max()) / 1e6 if n else 0.0)
    if events:                          # without a rank from the first cut to the last takeover (or the end)
        first = events[0]["fault_us"]
        record["degraded_us"] = min(max(e["takeover_us"] for e in events), record["step_us"]) - first
        record["fault_to_end_us"] = record["step_us"] - first
    dead = [topo.channel_name(int(c)) for c in np.flatnonzero(~alive)] if alive is not None else []
    return _merge(results, start, end, spares.offset, applied, dead), record


def _shifted(rec: dict, off_us: float, spec: str) -> dict:
    """A fault record of a segment on the step's clock, with its spec as given."""
    out = dict(rec, spec=spec)
    for k in ("at_us", "detected_us", "up_us"):
        if k in out:
            out[k] += off_us
    for k in ("rerouted", "rerouted_back"):
        if k in out:
            out[k] = dict(out[k], at_us=out[k]["at_us"] + off_us)
    return out


def _merge(results, start, end, offset: int, applied, dead: list[str]) -> sim.RunResult:
    """One RunResult of the segments: counters and totals summed, the step's task times, every fault record."""
    last = results[-1]
    totals = {k: sum(int(r.totals[k]) for r in results) for k in last.totals}
    counters = {k: sum(r.counters[k] for r in results) for k in last.counters}
    abandoned = sum(int(r.totals["packets_live"]) for r in results[:-1])
    faults = {}
    if any(r.faults for r in results):
        keys = ("packets_reclaimed", "stale_dropped", "flows_moved", "flows_rewound")
        faults = {k: sum(int(r.faults.get(k, 0)) for r in results) for k in keys}
        faults.update(applied=applied, packets_abandoned=abandoned,
                      packets_lost=int(totals["carved"] - totals["delivered"] - faults["packets_reclaimed"]
                                       - abandoned),
                      dead_channels=sorted(set(dead) | set(last.faults.get("dead_channels", []))), partition=None)
    return sim.RunResult(engine=last.engine, outcome=last.outcome, now_ps=offset + last.now_ps,
                         events=sum(r.events for r in results), wall_s=sum(r.wall_s for r in results),
                         totals=totals, counters=counters, task_start_ps=start, task_end_ps=end,
                         link_state=last.link_state, transfers=last.transfers, stuck=last.stuck,
                         translation={k: sum(r.translation.get(k, 0) for r in results) for k in last.translation},
                         faults=faults)
