"""Facade over the packet kernel: config + topology + task graph -> Engine -> RunResult.

Everything per packet and per event happens in the compiled kernel; this module only converts units (ns -> ps,
through fabric.phy), hands arrays over, drives the run in slices (for progress and the watchdog) and collects the
counters.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from fabric._check_build import kernel
from fabric.config import FabricConfig
from fabric.errors import ConfigError, SimulationError
from fabric.phy import burst_params, ps
from fabric.faults.stuck import report as stuck_report, text as stuck_text

ENGINES = ("packet", "analytic")
FAULTS = {"corrupt_flit": kernel.FAULT_CORRUPT_FLIT, "lose_ack": kernel.FAULT_LOSE_ACK,
          "lose_credit": kernel.FAULT_LOSE_CREDIT, "retrain": kernel.FAULT_RETRAIN}


_M64 = (1 << 64) - 1


def _mix(a: int) -> int:
    a = ((a ^ (a >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    a = ((a ^ (a >> 27)) * 0x94D049BB133111EB) & _M64
    return a ^ (a >> 31)


def content_sum(node: int, src: int, offset: int, nbytes: int) -> int:
    """Checksum of bytes [offset, offset+nbytes) of a transfer from src landing in node (mirrors the kernel)."""
    return _mix(_mix(_mix((node * 1000003 + src) & _M64) ^ offset) ^ nbytes)


def expected_csum(dst: int, src: int, total_B: int, max_payload_B: int) -> int:
    """What a transfer's receiver must have accumulated if every byte arrived once, at the right node."""
    return sum(content_sum(dst, src, off, min(max_payload_B, total_B - off))
               for off in range(0, total_B, max_payload_B)) & _M64


_WARNED: set[str] = set()
_QUIET = [0]        # > 0 inside no_warnings()


def _warn_once(message: str) -> None:
    """One `warning: ...` line on stderr (the CLI's style), once per process for the same text."""
    if message not in _WARNED and not _QUIET[0]:
        _WARNED.add(message)
        print(f"warning: {message}", file=sys.stderr)


@contextlib.contextmanager
def no_warnings():
    """No warning lines inside: for runs whose config a tool set on purpose (fabric-validate's sensitivity points
    halve the credit pool), where a warning would name a value the user never gave."""
    _QUIET[0] += 1
    try:
        yield
    finally:
        _QUIET[0] -= 1


def _channel_name(topo, c: int) -> str:
    if hasattr(topo, "channel_name"):
        return topo.channel_name(c)
    a = as_arrays(topo)
    names = a.get("node_names")
    return f"{names[a['ch_src'][c]]}->{names[a['ch_dst'][c]]}" if names is not None else f"channel {c}"


_NEEDS_CACHE: dict = {}

# endpoint.e2e_grants = false: the kernel gets a window no run can fill (its grant counters are int64), so no store
# is ever held for grants; a pair's grants then come back only as each of its stores ends (quarter window: 2^60 B).
NO_E2E_WINDOW_B = 1 << 62


def _needs(cfg: FabricConfig, topo) -> dict:
    """The per-channel and per-pair needs of phy's flow-control sizing, cached per topology object and the config
    sections they read (a sweep runs many graphs on one topology; 1024 ranks take ~1 s)."""
    import weakref

    from fabric import phy
    key = (id(topo), cfg.phy, cfg.link, cfg.txn,         # and the arrays' identity: routing may be redone in place
           tuple(id(getattr(topo, k, None)) for k in ("path_ch", "pair_ptr", "ch_ps_per_byte", "ch_latency_ps",
                                                        "node_latency_ps")))
    hit = _NEEDS_CACHE.get(key)
    if hit is not None and hit[0]() is topo:
        return hit[1]
    arrays = as_arrays(topo)
    need_w, B, _ = phy.e2e_window_needs(cfg, arrays)
    got = dict(credit_pool_flits=phy.credit_pool_needs(cfg, arrays),
               replay_buffer_flits=phy.replay_buffer_needs(cfg, arrays),
               e2e_window_B=need_w, pair_rate=B)
    try:
        ref = weakref.ref(topo)
    except TypeError:                  # a plain dict of arrays: not cached
        return got
    if len(_NEEDS_CACHE) > 64:
        _NEEDS_CACHE.clear()
    _NEEDS_CACHE[key] = (ref, got)
    return got


def flow_control(cfg: FabricConfig, topo, *, warn: bool = True) -> dict:
    """The credit pool, replay buffer and end-to-end window the kernel gets on this topology.

    0 (auto) takes the largest need over channels (credits, replay buffer) or source-destination pairs (window) from
    fabric.phy.credit_pool_needs / replay_buffer_needs / e2e_window_needs: bandwidth x zero-load round trip plus
    the stated margin (phy.FC_MARGIN), so no channel or pair is throttled at its rate. An explicit value is used as
    given; if it caps a channel or pair below its rate, one warning line names the parameter, the worst-capped
    channel or pair and the rate it is held to. endpoint.e2e_grants = false gives the window NO_E2E_WINDOW_B (no
    cap). Returns the three values, their auto values and the caps."""
    from fabric import phy
    arrays = as_arrays(topo)
    needs = _needs(cfg, topo)
    largest = phy.packet_flits(cfg, max(cfg.txn.max_payload_bytes, cfg.txn.max_read_request_bytes))
    out = {}
    for key, value, fraction, unit in (
            ("credit_pool_flits", cfg.link.credit_pool_flits, phy.credit_rate_fraction, "flits"),
            ("replay_buffer_flits", cfg.link.replay_buffer_flits, phy.replay_rate_fraction, "flits")):
        need = needs[key]
        auto = max(int(need.max()) if len(need) else 0, largest)
        out[key], out[key + "_auto"], out[key + "_cap"] = value or auto, auto, None
        if value:
            frac = fraction(cfg, arrays, value)
            c = int(frac.argmin()) if len(frac) else 0
            if len(frac) and frac[c] < 1.0 - 1e-9:
                full = phy.GBps(float(arrays["ch_ps_per_byte"][c]))
                out[key + "_cap"] = dict(channel=_channel_name(topo, c), gbps=full * frac[c], of_gbps=full)
                if warn:
                    _warn_once(f"link.{key}={value} caps {_channel_name(topo, c)} at {full * frac[c]:.0f} GB/s of "
                               f"{full:.0f} GB/s; use 0 (auto: {auto} {unit} here)")
    need_w, B = needs["e2e_window_B"], needs["pair_rate"]
    auto_w = max(int(need_w.max()) if len(need_w) else 0, cfg.txn.max_payload_bytes)
    window = (cfg.endpoint.e2e_window_bytes or auto_w) if cfg.endpoint.e2e_grants else NO_E2E_WINDOW_B
    out.update(e2e_window_B=window, e2e_window_B_auto=auto_w, e2e_window_B_cap=None)
    if cfg.endpoint.e2e_window_bytes:
        frac = phy.e2e_rate_fraction(cfg, arrays, window)
        i = int(frac.argmin()) if len(frac) else 0
        if len(frac) and frac[i] < 1.0 - 1e-9:
            names = arrays.get("node_names")
            s, d = divmod(i, int(arrays["n_ranks"]))
            pair = f"{names[s]}->{names[d]}" if names is not None else f"rank {s}->rank {d}"
            full = float(B[i]) * 1e3                                  # payload B/ps -> GB/s
            out["e2e_window_B_cap"] = dict(pair=pair, gbps=full * frac[i], of_gbps=full)
            if warn:
                _warn_once(f"endpoint.e2e_window_bytes={window} caps {pair} at {full * frac[i]:.0f} GB/s of its "
                           f"{full:.0f} GB/s payload rate; use 0 (auto: {auto_w} B here)")
    return out


def kernel_params(cfg: FabricConfig, topo=None, *, engine: str = "packet") -> dict:
    """The config's scalars in the kernel's units (ps, bytes, flits), with the flow-control sizes resolved on
    `topo` (flow_control; default: the topology cfg describes). The analytic engine has no credits, replay
    buffers or end-to-end windows (tests/test_flow_control.py checks its results do not depend on them), so for it
    they are not resolved: the configured values, auto ones standing at the largest packet (flow_control's
    per-pair window needs take 0.2-0.3 s at 1024 ranks)."""
    link, phy, txn, ep = cfg.link, cfg.phy, cfg.txn, cfg.endpoint
    if engine == "analytic":
        from fabric import phy as phymod
        largest = phymod.packet_flits(cfg, max(txn.max_payload_bytes, txn.max_read_request_bytes))
        fc = dict(credit_pool_flits=link.credit_pool_flits or largest,
                  replay_buffer_flits=link.replay_buffer_flits or largest,
                  e2e_window_B=ep.e2e_window_bytes or txn.max_payload_bytes)
    else:
        from fabric.network import shared
        fc = flow_control(cfg, shared(cfg) if topo is None else topo)
    return dict(
        seq_bits=link.seq_bits, replay_buffer_flits=fc["replay_buffer_flits"], ack_every=link.ack_every_packets,
        ack_ps=ps(link.ack_timer_ns), replay_ps=ps(link.replay_timer_ns), replay_limit=link.replay_limit,
        retrain_ps=ps(link.retrain_ns), credit_pool_flits=fc["credit_pool_flits"],
        update_flits=link.credit_update_flits,
        update_ps=ps(link.credit_update_ns), refresh_ps=ps(link.credit_refresh_ns),
        header_B=txn.header_bytes, max_payload_B=txn.max_payload_bytes, mrrs_B=txn.max_read_request_bytes,
        read_tags=txn.read_tags, flit_B=phy.flit_bytes, flit_overhead_B=phy.flit_overhead_bytes,
        issue_ps=ps(ep.issue_ns), complete_ps=ps(ep.completion_ns), xlate_ps=ps(ep.translation_ns),
        p2p_ps=ps(ep.p2p_forward_ns), watchdog_ps=ps(cfg.sim.watchdog_ns), seed=cfg.sim.seed,
        fixed_priority=int(cfg.switch.arbitration == "fixed_priority"), e2e_window_B=fc["e2e_window_B"],
        xlate_cache_entries=ep.xlate_cache_entries, xlate_cache_ways=ep.xlate_cache_ways,
        xlate_page_B=ep.xlate_page_bytes, xmiss_ps=ps(ep.translation_miss_ns),
        ctrl_B=link.control_wire_bytes, ge=burst_params(cfg),
    )


def kernel_inputs(cfg: FabricConfig, topo, graph, rank_map=None) -> tuple[dict, dict | None]:
    """The graph's arrays for the kernel and the shadow-window tables its ingress ports translate through: a graph
    whose transfers carry global addresses (`addr`, from the lowering) gets `host_addr`, each address as its
    issuer's host domain sees it (fabric.address: the program's view), and the tables of every domain
    (endpoint.shadow_windows entries each). A graph that already has `host_addr` keeps it; one without addresses
    gets no tables (its transfers are addressed by rank). rank_map (int[ranks]): the rank now holding each rank's
    memory window (a spare that took a cut-off rank's work over: fabric.faults.migration)."""
    from fabric.address import build_address_map
    g = as_arrays(graph)
    addr = g.get("addr")
    if g.get("host_addr") is None and (addr is None or not len(addr) or np.max(addr) < 0):
        return g, None
    amap = build_address_map(topo, cfg)
    if g.get("host_addr") is None:      # one pass in C, no temporaries (18 M tasks at 1024 ranks)
        g = dict(g, host_addr=amap.issuer_host_array(g["rank"], addr))
    tables = amap.kernel_tables(cfg.endpoint.shadow_windows)
    if rank_map is not None:
        tables["w_rank"] = np.asarray(rank_map, np.int32)[tables["w_rank"]]
    return g, tables


def as_arrays(obj) -> dict:
    """A Topology or TaskGraph (dataclass or dict) as a plain dict of its fields."""
    return dict(obj) if isinstance(obj, dict) else dict(vars(obj))


EVENTS_PER_PACKET_HOP = 5.5    # measured 3.2 (oneshot), 4.2 (decode), 5.3 (one saturated link with its Acks)
EVENTS_PER_TASK = 8            # start, dependency releases, completion; the analytic engine's cost per transfer
EVENTS_PER_S = 2e7             # the kernel's ~10-40 M events/s (docs/performance.md), for the time estimate


def estimate(cfg: FabricConfig, topo, graph, engine: str = "packet") -> dict:
    """The size of a run before it starts, from the task graph and the routes: packets (max-payload data packets,
    plus read requests), packet_hops (packets x hops of the pair's first route), events, memory_mb (topology, graph,
    per-pair end-to-end state, per-transfer state, full link buffers) and seconds (at EVENTS_PER_S)."""
    from fabric._check_build import arrays
    t, g = as_arrays(topo), as_arrays(graph)
    R = int(t["n_ranks"])
    routed = "pair_ptr" in t and t.get("path_ptr") is not None
    packets, packet_hops, xfer_B, n_xfer, busy_ps = arrays.transfer_load(
        g["kind"], g["op"], g["nbytes"], g["rank"], g["peer"], g["duration_ps"], t["pair_ptr"] if routed else None,
        t.get("path_ptr"), R, cfg.txn.max_payload_bytes, cfg.txn.max_read_request_bytes)
    n_tasks = len(g["kind"])
    if engine == "packet":
        events = EVENTS_PER_PACKET_HOP * packet_hops + EVENTS_PER_TASK * n_tasks
    else:
        events = EVENTS_PER_TASK * n_tasks
    arr_B = sum(v.nbytes for v in list(t.values()) + list(g.values()) if isinstance(v, np.ndarray))
    n_ch = len(t.get("ch_src", ())) if t.get("ch_src") is not None else 0
    buffered_B = 0
    if engine == "packet" and n_ch:
        # full link buffers at the sizes the kernel gets (auto ones resolved, as flow_control does for the run): one
        # 64-B record per flit slot, but never more than the packets can fill (each packet one buffer slot at a
        # time, plus a replay-ring unit on each hop it has crossed)
        fc = flow_control(cfg, topo, warn=False)
        flits = fc["credit_pool_flits"] * cfg.link.vcs + fc["replay_buffer_flits"]
        buffered_B = min(n_ch * flits, 2 * packet_hops) * 64
    memory_B = 2 * arr_B + 16 * R * R + 128 * n_xfer + buffered_B + (64 << 20)
    # the latest time any task could end: every task back to back, every byte over the slowest channel
    ppb = float(np.max(t["ch_ps_per_byte"])) if len(t.get("ch_ps_per_byte", ())) else 0.0
    lat = float(np.max(t["ch_latency_ps"])) if len(t.get("ch_latency_ps", ())) else 0.0
    worst_ps = busy_ps + xfer_B * max(ppb, 1.0) * 2 + n_tasks * (lat + 1e6)
    return dict(packets=packets, packet_hops=packet_hops, events=events, memory_mb=memory_B / 2**20,
                seconds=events / EVENTS_PER_S, worst_ps=worst_ps)


def _human_s(sec: float) -> str:
    for unit, k in (("days", 86400), ("h", 3600), ("min", 60)):
        if sec >= k:
            return f"{sec / k:.3g} {unit}"
    return f"{sec:.3g} s"


def check_size(cfg: FabricConfig, topo, graph, engine: str = "packet") -> dict:
    """Refuse, before the run, one whose estimate (`estimate`) exceeds sim.max_events or sim.max_memory_mb
    (0 = auto, from the machine's memory: fabric.config.resource_limits); returns the estimate."""
    from fabric.config import check_memory, resource_limits
    est = estimate(cfg, topo, graph, engine)
    max_events, _, _ = resource_limits(cfg)
    if est["worst_ps"] >= 2.0 ** 62:
        raise ConfigError(f"this task graph could run for {est['worst_ps'] / 1e12:.3g} s of simulated time, past "
                          f"what the kernel's int64 picosecond clock holds (4.6e6 s); shrink its durations or sizes")
    if est["events"] > max_events:
        given = f"sim.max_events={cfg.sim.max_events}" if cfg.sim.max_events else \
            f"sim.max_events (auto {max_events:.3g})"
        raise ConfigError(f"this run would take about {est['events']:.3g} kernel events ({est['packets']:.3g} "
                          f"packets, {est['packet_hops']:.3g} packet-hops, ~{_human_s(est['seconds'])} at "
                          f"{EVENTS_PER_S / 1e6:.0f} M events/s), "
                          f"above {given}; shrink the workload or raise it with --set "
                          f"sim.max_events={int(min(est['events'] * 1.1, 2**62)):d}")
    check_memory(cfg, est["memory_mb"], f"this run would need about {est['memory_mb']:.0f} MiB",
                 "shrink the workload")
    return est


@dataclass
class RunResult:
    engine: str
    outcome: str                      # "done" or "stuck"
    now_ps: int
    events: int
    wall_s: float
    totals: dict
    counters: dict                    # per-channel int64 arrays (copies)
    task_start_ps: np.ndarray
    task_end_ps: np.ndarray
    link_state: dict
    transfers: dict
    stuck: dict = field(default_factory=dict)   # a stuck run: what it waits for (fabric.faults.stuck.report)
    translation: dict = field(default_factory=dict)   # Engine.translations(): ingress address translation counts
    faults: dict = field(default_factory=dict)   # permanent faults: what each did, and the packets they cost

    @property
    def packets_sent(self) -> int:
        return int(self.counters["packets"].sum())


def check_switch_legs(topo: dict, graph: dict) -> None:
    """In-switch legs (ops SW_UP / SW_DOWN) only through switches that declare switch.reduction: ConfigError."""
    from fabric.taskgraph import SW_DOWN, SW_UP, TRANSFER
    op = np.asarray(graph["op"])
    legs = np.flatnonzero((np.asarray(graph["kind"]) == TRANSFER) & ((op == SW_UP) | (op == SW_DOWN)))
    if not len(legs):
        return
    red = topo.get("node_reduce")
    R = int(topo["n_ranks"])
    rank, peer = np.asarray(graph["rank"])[legs], np.asarray(graph["peer"])[legs]
    first = np.asarray(topo["pair_ptr"])[rank.astype(np.int64) * R + peer]
    up = op[legs] == SW_UP
    hop = np.where(up, np.asarray(topo["path_ptr"])[first], np.asarray(topo["path_ptr"])[first + 1] - 1)
    ch = np.asarray(topo["path_ch"])[hop]
    sw = np.where(up, np.asarray(topo["ch_dst"])[ch], np.asarray(topo["ch_src"])[ch])
    ok = np.zeros(len(legs), bool) if red is None else np.asarray(red, bool)[sw]
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise ConfigError(f"{int((~ok).sum())} in-switch reduce/multicast leg(s) through a switch without in-switch "
                          f"reduction (first: rank {int(rank[i])} -> {int(peer[i])}, node {int(sw[i])}); set "
                          f"switch.reduction = true only for NVLS-capable switches (NVSwitch gen3+)")


_recorder: list | None = None   # fabric.timeline.recording(): runs append their record here, with link samples


def check_run(cfg: FabricConfig, topo_arrays: dict, graph_arrays: dict, engine: str) -> None:
    """What a run needs before its engine is built: every task on a rank of the topology (the engine indexes its
    per-rank state by it), VC levels, switch legs, size (ConfigError otherwise)."""
    rank, R = np.asarray(graph_arrays["rank"]), int(topo_arrays["n_ranks"])
    if len(rank) and (rank.min() < 0 or rank.max() >= R):
        t = int(np.flatnonzero((rank < 0) | (rank >= R))[0])
        raise ConfigError(f"task {t} is on rank {int(rank[t])}, but the topology has ranks 0..{R - 1}; build the "
                          f"graph for this topology (or choose a preset with more accelerators)")
    need = 2 * int(topo_arrays["vc_levels"])
    if cfg.link.vcs < need:
        raise ConfigError(f"link.vcs={cfg.link.vcs} is too few for this routing: 2 traffic classes x "
                          f"{topo_arrays['vc_levels']} VC levels need link.vcs >= {need}")
    check_switch_legs(topo_arrays, graph_arrays)
    check_size(cfg, topo_arrays, graph_arrays, engine)


def make_engine(cfg: FabricConfig, topo, graph, engine: str = "packet", *, retire_transfers: bool = False,
                rank_map=None, checked: bool = False):
    """The kernel Engine that `run` drives, after the checks a run needs (check_run; checked=True: the caller ran
    them); the task graph's host addresses are translated (kernel_inputs) into an array the engine then packs its
    transfers' addresses into (EngineOptions own_addresses: no second copy)."""
    topo_arrays, graph_arrays = as_arrays(topo), as_arrays(graph)
    if not checked:
        check_run(cfg, topo_arrays, graph_arrays, engine)
    kernel_graph, xlate = kernel_inputs(cfg, topo, graph_arrays, rank_map)
    options = kernel.EngineOptions(retire_transfers=retire_transfers,
                                   own_addresses=kernel_graph.get("host_addr") is not graph_arrays.get("host_addr"))
    return kernel.Engine(kernel_params(cfg, topo, engine=engine), topo_arrays, kernel_graph, engine == "analytic",
                         xlate=xlate, options=options)


def run(cfg: FabricConfig, topo, graph, *, engine: str = "packet", faults=(), progress=None,
        slice_events: int = 2_000_000, raise_on_stuck: bool = True, transfers: bool = True,
        permanent=None, alive=None, retired=(), rank_map=None, migrate=None, jobs: int = 1) -> RunResult:
    """Execute a task graph on the fabric. faults: transient (kind name, channel, n, k) tuples (see FAULTS);
    permanent: fault specs (fabric.faults; default cfg.faults, () for none); progress: called after every slice of
    `slice_events` events with (events, now_ps, fraction of tasks done); transfers=False leaves
    RunResult.transfers empty (a per-transfer table: 60 MB for a decode step's 1 M) and, without permanent faults,
    lets the engine release each transfer's record once it is done (Engine retire_transfers). fabric.faults.migration
    runs a step in segments: `migrate` takes the ranks a fault cuts off to spares (failover.Schedule), and the segment
    ends at their takeover (outcome "partition", faults["partitions"]); the next one gets the working channels
    (alive), the ranks out of service (retired) and where each rank's memory window lives now (rank_map).
    jobs > 1: a graph whose ranks fall into independent parts (fabric.parts: no shared node, no dependency between
    them) runs them as separate engines, `jobs` at a time, with the same results (wall_s then includes their
    set-up); only a plain run splits (transfers=False, no fault, migration or timeline), and a part that does not
    finish makes the whole run again as one engine, for the joint run's report."""
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; use {' or '.join(ENGINES)}")
    from fabric.faults import parse_all
    specs = parse_all(cfg.faults if permanent is None else permanent)
    if specs and engine != "packet":
        raise ConfigError("permanent faults (--fault, [[faults]]) need the packet engine; drop --engine analytic")
    graph_arrays = as_arrays(graph)
    n_tasks = len(graph_arrays["kind"])
    check_run(cfg, as_arrays(topo), graph_arrays, engine)       # once, for either way of running
    split = None
    if jobs > 1 and not transfers and not specs and not faults and _recorder is None and migrate is None \
            and alive is None and not retired and rank_map is None:
        split = run_parts(cfg, topo, graph, engine, jobs, slice_events, progress, checked=True)
    if split is not None and split[0] != kernel.DONE:   # stuck, or out of events: the report is the joint run's
        return run(cfg, topo, graph, engine=engine, progress=progress, slice_events=slice_events,
                   raise_on_stuck=raise_on_stuck, transfers=transfers, permanent=permanent)
    if split is not None:
        (outcome, eng, wall), schedule = split, None
    else:
        outcome, eng, schedule, wall = _run_one(cfg, topo, graph, engine, faults, progress, slice_events, transfers,
                                                specs, alive, retired, rank_map, migrate, n_tasks)
    totals = eng.totals()
    start, end = eng.task_times()
    partition = outcome == "partition"   # a segment that stopped for a migration (fabric.faults.migration)
    # the watchdog fired, or the events ran out first
    stuck = not partition and (outcome == kernel.STUCK or totals["tasks_left"] > 0)
    # the task times are the engine's own arrays, not copies: nothing writes them once this returns (18 M tasks:
    # 288 MB not copied)
    result = RunResult(engine=engine, outcome="partition" if partition else "stuck" if stuck else "done",
                       now_ps=eng.now_ps,
                       events=eng.events, wall_s=wall, totals=totals,
                       counters={k: v.copy() for k, v in eng.counters().items()},
                       task_start_ps=start, task_end_ps=end, link_state=eng.link_state(),
                       transfers=eng.transfers() if transfers else {},
                       stuck=stuck_report(eng.stuck_report(), topo) if stuck else {},
                       translation=eng.translations())
    if schedule is not None:
        ft = eng.fault_totals()
        result.faults = dict(applied=schedule.report(), packets_reclaimed=int(ft["reclaimed"]),
                             stale_dropped=int(ft["stale_dropped"]), flows_moved=int(ft["flows_moved"]),
                             flows_rewound=int(ft["flows_rewound"]),
                             packets_lost=int(totals["carved"] - totals["delivered"] - ft["reclaimed"]),
                             dead_channels=[_channel_name(topo, int(c)) for c in np.flatnonzero(eng.dead_channels())],
                             partitions=schedule.partitions, retired=sorted(schedule.retired))
    if _recorder is not None:
        interval_ps, samples = eng.samples()
        _recorder.append(dict(cfg=cfg, topo=topo, graph=graph, result=result, sample_ps=interval_ps,
                             samples=samples))
    if raise_on_stuck and stuck:
        why = f"no progress for {cfg.sim.watchdog_ns:g} ns" if outcome == kernel.STUCK else "no event left"
        raise SimulationError(f"{why} at t={eng.now_ps / 1e3:.1f} ns with "
                              f"{totals['tasks_left']} tasks and {totals['packets_live']} packets pending: "
                              + stuck_text(result.stuck), stuck=result.stuck)
    return result


def _run_one(cfg, topo, graph, engine, faults, progress, slice_events, transfers, specs, alive, retired, rank_map,
             migrate, n_tasks):
    """run() as one engine: (outcome, engine, fault schedule or None, wall s of the run)."""
    from fabric.faults.failover import Schedule
    # no per-transfer table asked for and no permanent fault to rewind flows: transfer records are built as issued
    # and released once done (1 M x 128 B for a decode step, 2 GB at 1024 ranks, down to those in flight)
    eng = make_engine(cfg, topo, graph, engine, retire_transfers=not transfers and not specs, rank_map=rank_map,
                      checked=True)
    schedule = Schedule(specs, topo, cfg, alive, retired, migrate) if specs else None
    for kind, ch, n, k in faults:
        eng.add_fault(FAULTS[kind], int(ch), int(n), int(k))
    if _recorder is not None:      # a timeline is being recorded: the kernel samples link counters (sample.pxi)
        eng.enable_sampling(max(1, int(round(cfg.report.sample_ns * 1000))))
    t0 = time.perf_counter()
    while True:
        due = schedule.next_ps() if schedule else None
        if due is None:
            outcome = eng.run(max_events=slice_events)
        else:                 # stop at the next fault action and apply it there (fabric.faults)
            outcome = eng.run(max_events=slice_events, until_ps=due)
            # due now: the run stopped before it, or ran dry with work waiting for it (a dead link's reroute)
            if eng.next_event_ps > due and (outcome == kernel.PAUSED or
                                            (outcome == kernel.DONE and eng.totals()["tasks_left"] > 0)):
                schedule.apply_due(eng, due)
                outcome = "partition" if schedule.stopped else kernel.PAUSED
        if progress is not None:
            progress(eng.events, eng.now_ps, 1.0 - eng.totals()["tasks_left"] / max(n_tasks, 1))
        if outcome == kernel.STUCK and schedule is not None and schedule.takeover_ps is not None:
            outcome = "partition"     # what is left waits for the migrating ranks: the segment ends (faults.migration)
        if outcome != kernel.PAUSED:
            break
    return outcome, eng, schedule, time.perf_counter() - t0


def run_parts(cfg: FabricConfig, topo, graph, engine: str = "packet", jobs: int = 2, slice_events: int = 2_000_000,
              progress=None, *, checked: bool = False):
    """The graph's independent parts (fabric.parts) run as separate engines, `jobs` at a time, after the whole
    run's checks (check_run; checked=True: the caller ran them) and with its address translation, kernel
    parameters and route graph made once: (outcome, the parts' run (reads like an Engine), wall s of set-up and
    run), or None when the graph is one part. run(jobs=N) uses it; fabric-bench times it as a stage."""
    from concurrent.futures import ThreadPoolExecutor

    from fabric import parts
    topo_arrays, graph_arrays = as_arrays(topo), as_arrays(graph)

    def inputs():
        # the address translation, and the route entries once for all parts (for the packet engines the route
        # graph too; the analytic engine interns only the paths its part's transfers take)
        return kernel_inputs(cfg, topo, graph_arrays), kernel.shared_routes(topo_arrays, engine == "packet")
    if not checked:
        check_run(cfg, topo_arrays, graph_arrays, engine)     # before anything is made for the engines
    found = parts.node_parts(topo_arrays, graph_arrays)
    if found[0].max() < 1:          # one part (the shipped step): the joint run
        return None
    # the inputs' C passes run without the GIL, alongside the plan (1024 ranks: 0.5 -> 0.4 s). Where only one of
    # the parts has tasks (plan: None) they were made for nothing, and the joint run makes its own.
    with ThreadPoolExecutor(max_workers=1) as ex:
        made = ex.submit(inputs)
        planned = parts.plan(topo_arrays, graph_arrays, found)
        (kernel_graph, xlate), routes = made.result()
    if planned is None:
        return None
    params = kernel_params(cfg, topo, engine=engine)
    shared_topo = dict(topo_arrays, **routes)
    # each part's graph is a fresh copy: its engine may pack its transfers' addresses into its host_addr
    options = kernel.EngineOptions(retire_transfers=True, own_addresses=True)
    eng = parts.PartsRun(lambda g: kernel.Engine(params, shared_topo, g, engine == "analytic", xlate=xlate,
                                                 options=options),
                         planned[0], kernel_graph, planned[1], jobs)
    t0 = time.perf_counter()
    outcome = eng.run(slice_events, progress)
    return outcome, eng, time.perf_counter() - t0


def _oracle_fabric(cfg: FabricConfig, fragments):
    """The healthy fabric cfg describes (fabric.network.shared), confined to the routes among the fragments'
    ranks 0..n-1 (routing.confined)."""
    from fabric.network import shared
    from fabric.routing import confined
    topo = shared(cfg)
    n = fragments[0].n
    if n > topo.n_ranks:
        raise ConfigError(f"a {fragments[0].kind} over {n} ranks does not fit this fabric of {topo.n_ranks} "
                          f"accelerators")
    return topo, confined(topo, n)


def packet_times(cfg: FabricConfig, fragments) -> list[float]:
    """The auto tiers' check (analytic_times.check, fabric.collectives.policy): the time in us of each fragment
    run alone on the packet engine, one engine each (a fragment's packets, Acks and credits never meet the next's),
    on the same confined routes as analytic_times."""
    topo, routes = _oracle_fabric(cfg, fragments)
    out = []
    for frag in fragments:
        res = run(cfg, routes, frag.to_graph(n_ranks=topo.n_ranks, label=frag.kind), engine="packet",
                  transfers=False, permanent=())
        out.append(float(res.task_end_ps[np.asarray(frag.done)].max() - res.task_start_ps.min()) / 1e6)
    return out


def analytic_times(cfg: FabricConfig, fragments) -> list[float]:
    """The cost oracle the pipeline hands the collectives' auto tiers (fabric.collectives.policy): the time in us
    of each fragment (all over the same ranks 0..n-1), each run alone on the analytic engine over the healthy fabric
    cfg describes (fabric.network.shared). It carries `check` (packet_times): the tiers run the candidates it
    cannot tell apart on the packet engine, which has the switch buffers it lacks.

    One engine for every fragment, on the routes among the group's ranks alone (routing.confined: the same run; a
    decision on 1024 ranks 0.36 -> 0.07 s CPU): each runs after a barrier on every task of the previous one (flags
    may still fly after a rank's output is ready), so it finds every channel idle as a run of its own would
    (released by one barrier: equal start times break ties in the barrier's order, so a time may differ from a lone
    run's by a few hundred ps)."""
    from fabric.taskgraph import JOIN, GraphBuilder
    topo, routes = _oracle_fabric(cfg, fragments)
    n = fragments[0].n
    b = GraphBuilder(topo.n_ranks)
    ranks = np.arange(n)
    spans, prev = [], None
    for frag in fragments:
        lo = b.n_tasks
        first, done, _ = b.add_fragment(frag, ranks)
        if prev is not None:
            barrier = b.add_tasks(JOIN, 0)
            b.add_edges(prev, barrier)
            b.add_edges(barrier, first)
        spans.append((first, done))
        prev = np.arange(lo, lo + frag.n_tasks)
    res = run(cfg, routes, b.build(), engine="analytic", transfers=False, permanent=())
    return [float(res.task_end_ps[done].max() - res.task_start_ps[first].min()) / 1e6 for first, done in spans]


analytic_times.check = packet_times
