"""A fault during a run: timed actions on the engine's channels, then the manager's reroute around them.

Permanent faults applied to a run, and the fabric manager's reaction (docs/faults.md).

`Schedule` turns fault specs (fabric.faults) into timed actions on an Engine between slices of its run
(fabric.sim.run): the kernel kills, revives or slows channels (faults.pxi); `manager.detection_ns +
manager.route_update_ns` later the fabric manager installs routes around the dead parts (fabric.routing.reroute), and
the flows that lost packets or their route are rewound onto them. It records what each fault did for the report.
"""
from __future__ import annotations

import bisect

import numpy as np

from fabric.errors import ConfigError
from fabric.faults.spec import PartitionError, resolve
from fabric.routing import cut_off_ranks, reroute


def check(faults, topo, cfg) -> list[list[int]]:
    """The channels of each fault (fabric.faults.resolve), and the manager's reaction time checked against the
    watchdog: ConfigError before anything runs."""
    from fabric.phy import ps
    react = ps(cfg.manager.detection_ns) + ps(cfg.manager.route_update_ns)
    if faults and react >= ps(cfg.sim.watchdog_ns):
        raise ConfigError(f"manager.detection_ns + manager.route_update_ns = {react / 1e3:g} ns is not below "
                          f"sim.watchdog_ns = {cfg.sim.watchdog_ns:g} ns: the watchdog would stop a run waiting "
                          f"for the new routes; raise sim.watchdog_ns above it")
    return [resolve(f, topo, cfg) for f in faults]


class Schedule:
    """The faults of one run as timed actions on its Engine, and the record of what they did (`report`)."""

    def __init__(self, faults, topo, cfg, alive=None, retired=(), migrate=None):
        """alive: the channels working at the start (default all); retired: ranks out of service already (their
        work migrated); migrate (fabric.faults.migration, else None): a fault that cuts ranks in migrate.serving() off
        does not stop the run with PartitionError: migrate.partition(cut, t_ps, alive, retired, spec, fault_us)
        gives them spares and returns the takeover time, the routes leave them out, and the run goes on until that
        time (`stopped`)."""
        from fabric.phy import ps
        self.topo = topo
        self.alive = np.ones(topo.n_channels, bool) if alive is None else np.array(alive, bool)
        self.retired, self.migrate = set(retired), migrate
        self.partitions, self.takeover_ps, self.stopped = [], None, False
        react = ps(cfg.manager.detection_ns) + ps(cfg.manager.route_update_ns)
        self.records, self.actions = [], []
        for i, (f, chans) in enumerate(zip(faults, check(faults, topo, cfg))):
            at = ps(f.at_us * 1e3)
            rec = dict(spec=f.spec, channels=[topo.channel_name(c) for c in chans], at_us=f.at_us, applied=False)
            self.records.append(rec)
            if f.action == "lanes":
                rec["gbps_before"] = [1e3 / float(topo.ch_ps_per_byte[c]) for c in chans]
                factor = cfg.phy.lanes / f.lanes
                rec["gbps_after"] = [g / factor for g in rec["gbps_before"]]
                self.actions.append((at, len(self.actions), "rate", i, chans, factor))
                continue
            self.actions.append((at, len(self.actions), "kill", i, chans, None))
            self.actions.append((at + ps(cfg.manager.detection_ns), len(self.actions), "detect", i, chans, None))
            self.actions.append((at + react, len(self.actions), "reroute", i, chans, None))
            if f.action == "flap":
                up = ps(f.until_us * 1e3)
                self.actions.append((up, len(self.actions), "revive", i, chans, None))
                self.actions.append((up + react, len(self.actions), "reroute_up", i, chans, None))
        self.actions.sort()
        self._seq = len(self.actions)
        self._path_pair = None

    def next_ps(self) -> int | None:
        return self.actions[0][0] if self.actions else None

    def apply_due(self, eng, t_ps: int) -> None:
        """Apply every action due at t_ps (the engine has run every event up to it)."""
        eng.advance(t_ps)
        while self.actions and self.actions[0][0] <= t_ps and not self.stopped:
            _, _, what, i, chans, value = self.actions.pop(0)
            rec = self.records[i]
            if what == "takeover":            # the spares hold the state: the segment ends (fabric.faults.migration)
                self.stopped = t_ps >= self.takeover_ps
            elif what == "rate":
                for c in chans:
                    eng.set_channel_rate(c, float(self.topo.ch_ps_per_byte[c]) * value)
                rec["applied"] = True
            elif what == "kill":
                for c in chans:
                    eng.kill_channel(c)
                self.alive[chans] = False
                rec["applied"] = True
            elif what == "revive":
                for c in chans:
                    eng.revive_channel(c)
                self.alive[chans] = True
                rec["up_us"] = t_ps / 1e6
            elif what == "detect":
                rec["detected_us"] = t_ps / 1e6
            else:
                self._reroute(eng, rec, t_ps, "rerouted_back" if what == "reroute_up" else "rerouted")

    def _reroute(self, eng, rec: dict, t_ps: int, key: str) -> None:
        """The fabric manager installs routes around the channels dead now; flows off them are rewound."""
        topo = self.topo
        alive = self.alive                 # what the manager knows: the parts its detection reported
        cut = [r for r in cut_off_ranks(topo, alive) if r not in self.retired]
        if cut and self.migrate is None:
            names = ", ".join(topo.node_names[r] for r in cut)
            raise PartitionError(f"fault {rec['spec']} partitions {topo.name} at t={t_ps / 1e6:.1f} us: "
                                 f"{names} cannot reach the other accelerators; fault fewer parts (or give them "
                                 f"another path, or spares and --migrate)")
        self.retired.update(cut)                  # idle ones (spares) simply leave service
        serving = self.migrate.serving() if cut and eng.totals()["tasks_left"] else set()   # the step may be over
        moving = [r for r in cut if r in serving]
        if moving:
            take = self.migrate.partition(moving, t_ps, alive, self.retired, rec["spec"], rec["at_us"])
            self.partitions.append(dict(spec=rec["spec"], fault_us=rec["at_us"], at_ps=t_ps, cut=moving,
                                        takeover_ps=take))
            if self.takeover_ps is None or take > self.takeover_ps:
                self.takeover_ps = take
                bisect.insort(self.actions, (take, self._seq, "takeover", self.records.index(rec), [], None))
                self._seq += 1
        new, broken = reroute(topo, alive, exclude=sorted(self.retired))
        before = eng.fault_totals()["flows_moved"]
        eng.install_routes(new.pair_ptr, new.path_ptr, new.path_ch, new.path_vcl, self._keep(eng, new))
        rec[key] = dict(at_us=t_ps / 1e6, routing=new.routing, pairs_rerouted=broken,
                        flows_moved=eng.fault_totals()["flows_moved"] - before)
        if moving:
            rec[key]["cut_off"] = [topo.node_names[r] for r in moving]

    def _keep(self, eng, new) -> np.ndarray:
        """bool[paths the engine holds]: the path is a candidate of its pair in the new route set (same channels
        and VC levels), so a flow on it stays; the engine's paths are pair-ordered sets installed one after the
        other, so their pairs are known from each set's pair_ptr (tracked here)."""
        R = self.topo.n_ranks
        if self._path_pair is None:
            self._path_pair = np.repeat(np.arange(R * R, dtype=np.int64), np.diff(self.topo.pair_ptr))
        pp, ch, vcl = eng.routes()
        keys = _path_keys(self._path_pair, pp, ch, vcl)
        new_pair = np.repeat(np.arange(R * R, dtype=np.int64), np.diff(new.pair_ptr))
        keep = np.isin(keys, _path_keys(new_pair, new.path_ptr, new.path_ch, new.path_vcl))
        self._path_pair = np.concatenate([self._path_pair, new_pair])
        return keep

    def report(self) -> list[dict]:
        return self.records


def _path_keys(pair: np.ndarray, path_ptr: np.ndarray, path_ch: np.ndarray, path_vcl: np.ndarray) -> np.ndarray:
    """A 64-bit key per path from its pair and its hops (channel, VC level, position): equal paths, equal keys
    (a collision of different ones is ~2^-64 per pair of paths)."""
    with np.errstate(over="ignore"):
        lens = np.diff(path_ptr)
        pos = (np.arange(len(path_ch), dtype=np.int64) - np.repeat(path_ptr[:-1], lens)).astype(np.uint64)
        x = ((np.asarray(path_ch, np.int64) * 16 + np.asarray(path_vcl, np.int64) + 1).astype(np.uint64)
             * np.uint64(0x9E3779B97F4A7C15)) ^ ((pos + np.uint64(1)) * np.uint64(0xBF58476D1CE4E5B9))
        x ^= x >> np.uint64(31)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(29)
        sums = np.add.reduceat(x, path_ptr[:-1]) if len(x) else np.zeros(len(lens), np.uint64)
        sums = np.where(lens > 0, sums, np.uint64(0))
        return sums ^ (pair.astype(np.uint64) * np.uint64(0xD1B54A32D192ED03))
