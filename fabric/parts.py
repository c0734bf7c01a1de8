"""Independent parts of one run, each on its own core.

A part is a group of ranks whose tasks, dependencies and routes share no node of the fabric with any other group:
the data-parallel replicas of a 1024-card deployment, each in its own corner of the mesh. Every piece of kernel state
(a channel's queues, credits, replay ring and random stream; a switch's buffers; a rank's streams and translation
cache; a pair's end-to-end window) belongs to one node or one pair of ranks, and events are taken in (time, order)
with a per-engine sequence number, so the events of one part happen in the same order whether the others run
alongside or not. Run as separate engines (in threads: the kernel releases the GIL while it runs), the parts give
every task time, channel counter and total that the joint run gives, bit for bit (tests/test_parts.py checks it
against the joint run), in about 1/jobs of its wall time and with only `jobs` parts' engine state alive at once.

The one number a transfer's model reads from its place in the whole graph, its flow id (which of a pair's candidate
routes it takes), is handed to each part's engine as `xf_flow`, the whole run's ids of the part's transfers.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fabric.taskgraph import csr_ranges


def _components(n_nodes: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components of the undirected graph on n_nodes with edges a[i] - b[i]: each node's smallest member
    (minimum labels spread along edges, then halved by pointer jumping, until nothing moves)."""
    lab = np.arange(n_nodes, dtype=np.int64)
    while True:
        m = np.minimum(lab[a], lab[b])
        new = lab.copy()
        np.minimum.at(new, a, m)
        np.minimum.at(new, b, m)
        new = new[new]
        if np.array_equal(new, lab):
            return lab
        lab = new


def node_parts(topo: dict, graph: dict) -> tuple[np.ndarray, np.ndarray]:
    """(int64[R], int64[n_nodes]): the part of each rank, numbered from 0 by its smallest rank, and of each node
    (-1: on no route the graph uses). Two ranks are in one part when a dependency joins their tasks, or some node
    lies on a candidate route, in either direction, of a pair of ranks that a transfer of each part uses (a route
    is a chain of channels, so joining each used channel's two ends joins the route's whole node set). ValueError
    if a task is on no rank of the topology."""
    from fabric._check_build import arrays
    R, n_nodes = int(topo["n_ranks"]), len(topo["node_kind"])
    pairs, deps = arrays.rank_pairs(graph["kind"], graph["rank"], graph["peer"], graph["succ_ptr"],
                                    graph["succ_idx"], R)
    paths = csr_ranges(np.asarray(topo["pair_ptr"]), np.flatnonzero(pairs))
    hops = csr_ranges(np.asarray(topo["path_ptr"]), paths)
    ch = np.unique(np.asarray(topo["path_ch"])[hops])
    d = np.flatnonzero(deps)
    lab = _components(n_nodes, np.concatenate((np.asarray(topo["ch_src"], np.int64)[ch], d // R)),
                      np.concatenate((np.asarray(topo["ch_dst"], np.int64)[ch], d % R)))
    roots, part_of_rank = np.unique(lab[:R], return_inverse=True)
    part_of_label = np.full(n_nodes, -1, np.int64)
    part_of_label[roots] = np.arange(len(roots))
    part_of_node = part_of_label[lab]
    on_route = np.zeros(n_nodes, bool)
    on_route[:R] = True
    on_route[np.asarray(topo["ch_src"])[ch]] = True
    on_route[np.asarray(topo["ch_dst"])[ch]] = True
    return part_of_rank.astype(np.int64), np.where(on_route, part_of_node, -1)


class Plan:
    """A graph's parts: each one's task ids (ascending), and each one's own graph built on demand (part_graph), so
    that only the parts being run hold a copy of their columns. parts are in the order of their first task."""

    def __init__(self, graph: dict, part_of_rank: np.ndarray):
        from fabric._check_build import arrays
        order, bounds, self._local, self._gx, self._gl, self._n_xf = arrays.part_order(
            part_of_rank, graph["rank"], graph["kind"], graph["op"])
        tasks = [order[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
        self.tasks = sorted(tasks, key=lambda t: int(t[0]))
        self.rank_part = [int(part_of_rank[graph["rank"][t[0]]]) for t in self.tasks]

    def part_graph(self, graph: dict, i: int) -> dict:
        """Part i's graph, from `graph` (the planned one, or the same tasks with more columns: host_addr): the
        columns its engine reads (not coll, src_op or the global addr: the report's, or translated into host_addr)
        at the part's tasks (ranks unchanged), its tasks renumbered 0.. in their order, its CSR made from
        theirs, and `xf_flow`, its transfers' flow ids in the whole graph (a transfer's index among the transfer
        tasks; a load's response flow: the number of transfers plus its index among the loads), in the order the
        engine numbers its own: first the transfers, then the loads' responses."""
        from fabric._check_build import arrays
        g, t = graph, self.tasks[i]
        out = {k: g[k][t] for k in ("kind", "rank", "peer", "stream", "nbytes", "duration_ps", "op", "host_addr")
               if g.get(k) is not None}
        ptr, idx, flow = arrays.part_csr(g["succ_ptr"], g["succ_idx"], t, self._local, g["kind"], g["op"], self._gx,
                                         self._gl, self._n_xf)
        out.update(n_ranks=g["n_ranks"], succ_ptr=ptr, succ_idx=idx, n_deps=g["n_deps"][t], xf_flow=flow)
        return out


# totals: summed over parts, except these (the run's clock; the replay ring, which grows to the deepest need)
_TOTAL_MAX = ("now_ps", "replay_ring_slots")


class PartsRun:
    """The engines of a split run, driven together; reads like one kernel Engine (what fabric.sim.run reads of
    one): events, now_ps, totals(), counters(), task_times(), translations(), link_state(). A part's engine is
    dropped once it has run and its results are read, so only `jobs` engines are alive at once. A channel's
    counters and state come from the engine of the part its source node belongs to (the others never touch it)."""

    def __init__(self, make, parts: Plan, graph: dict, owner: np.ndarray, jobs: int):
        """make(graph) -> Engine; graph: the one parts was planned on, or it with more columns (Plan.part_graph);
        owner: int64[C], the index in `parts` of the part owning each channel (-1 none: its values come from the
        first part's engine, where it idles too)."""
        self._make, self._parts, self._graph, self._owner, self._jobs = make, parts, graph, owner, jobs
        n_tasks = len(graph["kind"])
        self._start, self._end = np.empty(n_tasks, np.int64), np.empty(n_tasks, np.int64)
        self._got: list[dict] = [{} for _ in parts.tasks]
        self._lock = threading.Lock()

    def run(self, slice_events: int, progress=None) -> str:
        """Build and run every part to its end (jobs at a time); the outcome: kernel.DONE, or the first other
        outcome of a part (the kernel's, or "stuck" for one that drained with tasks left)."""
        from fabric._check_build import kernel
        n = len(self._parts.tasks)
        done_tasks, events, clock = [0] * n, [0] * n, [0] * n
        n_tasks = len(self._start)

        def one(i: int) -> str:
            tasks = self._parts.tasks[i]
            eng = self._make(self._parts.part_graph(self._graph, i))
            while True:
                outcome = eng.run(max_events=slice_events)
                if progress is not None:
                    with self._lock:
                        events[i], clock[i] = eng.events, eng.now_ps
                        done_tasks[i] = len(tasks) - eng.totals()["tasks_left"]
                        progress(sum(events), max(clock), sum(done_tasks) / max(n_tasks, 1))
                if outcome != kernel.PAUSED:
                    break
            start, end = eng.task_times()
            self._start[tasks], self._end[tasks] = start, end
            self._got[i] = dict(events=eng.events, now_ps=eng.now_ps, totals=eng.totals(),
                                translations=eng.translations(), counters=eng.counters(),
                                link_state=eng.link_state())
            if outcome == kernel.DONE and self._got[i]["totals"]["tasks_left"]:
                return "stuck"           # drained with tasks left: a dependency never met
            return outcome
        with ThreadPoolExecutor(max_workers=self._jobs) as ex:
            outcomes = list(ex.map(one, range(n)))
        return next((o for o in outcomes if o != kernel.DONE), kernel.DONE)

    @property
    def events(self) -> int:
        return sum(g["events"] for g in self._got)

    @property
    def now_ps(self) -> int:
        return max(g["now_ps"] for g in self._got)

    def totals(self) -> dict:
        each = [g["totals"] for g in self._got]
        return {k: (max if k in _TOTAL_MAX else sum)(t[k] for t in each) for k in each[0]}

    def translations(self) -> dict:
        each = [g["translations"] for g in self._got]
        return {k: sum(t[k] for t in each) for k in each[0]}

    def task_times(self) -> tuple[np.ndarray, np.ndarray]:
        return self._start, self._end

    def _by_owner(self, name: str) -> dict:
        """Per-channel arrays (first axis: channel) merged by owning part; other values from the first part."""
        each = [g[name] for g in self._got]
        out = {}
        for k, v in each[0].items():
            if not isinstance(v, np.ndarray):
                out[k] = v
                continue
            a = np.array(v)
            for i in range(1, len(each)):
                mine = self._owner == i
                a[mine] = each[i][k][mine]
            out[k] = a
        return out

    def counters(self) -> dict:
        return self._by_owner("counters")

    def link_state(self) -> dict:
        return self._by_owner("link_state")


def plan(topo: dict, graph: dict, found: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Plan, np.ndarray] | None:
    """The parts of a run (Plan) and the index among them of each channel's owning part, the part of its source
    node (-1: none), or None when the graph has fewer than two parts with tasks. found: node_parts(topo, graph),
    when the caller has it already."""
    part_of_rank, part_of_node = found if found is not None else node_parts(topo, graph)
    if part_of_rank.max() < 1:
        return None
    p = Plan(graph, part_of_rank)
    if len(p.tasks) < 2:
        return None
    index_of = np.full(int(part_of_rank.max()) + 1, -1, np.int64)
    index_of[p.rank_part] = np.arange(len(p.tasks))
    src_part = part_of_node[np.asarray(topo["ch_src"], np.int64)]
    return p, np.where(src_part >= 0, index_of[src_part], -1)
