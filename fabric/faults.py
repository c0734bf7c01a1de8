"""Permanent faults at run time: links that die, lose lanes or flap, switches that die (docs/faults.md).

A spec names a part by the node names `fabric-probe topology` uses and a time in microseconds from the start of the
step: `link:sw0-sw1:down@100`, `link:acc3-sw0:lanes=4@50`, `switch:sw5:down@200`, `link:sw0-sw1:flap@100-300`;
a link means both directions and every parallel link between the two nodes unless `#k` picks one (`sw0-sw1#1`).

`parse` checks the syntax (at config load), `resolve` the names against a topology, and `Schedule` applies them to
an Engine between slices of its run (fabric.sim.run): the kernel kills, revives or slows channels (faults.pxi);
`manager.detection_ns + manager.route_update_ns` later the fabric manager installs routes around the dead parts
(fabric.routing.reroute), and the flows that lost packets or their route are rewound onto them. A fault that cuts
accelerators off stops the run with one line naming them (PartitionError).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import numpy as np

from fabric.errors import ConfigError, RoutingError

SYNTAX = ("link:A-B[#k]:down@T, link:A-B[#k]:lanes=N@T, link:A-B[#k]:flap@T1-T2 or switch:S:down@T "
          "(T in us from the start of the step)")
_SPEC = re.compile(r"(link|switch):([^:]+):(down|flap|lanes=\d+)@([^@]+)")
_TIME = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"
MAX_US = 4.6e12          # the kernel's int64 picosecond clock


class PartitionError(RoutingError):
    """A fault cut accelerators off from the rest of the fabric."""


@dataclass(frozen=True)
class Fault:
    spec: str            # as given
    part: str            # "link" or "switch"
    where: str           # "A-B", "A-B#k" or a switch name
    action: str          # "down", "flap" or "lanes"
    at_us: float
    until_us: float | None = None     # flap: when it comes back
    lanes: int | None = None          # lanes: how many still work


def parse(spec: str) -> Fault:
    """A fault spec, syntax-checked (names are checked by resolve, against a topology)."""
    text = str(spec).strip()
    m = _SPEC.fullmatch(text)
    if not m:
        raise ConfigError(f"fault {text!r} is not a fault spec; use {SYNTAX}")
    part, where, action, when = m.groups()
    if part == "switch" and action != "down":
        raise ConfigError(f"fault {text!r}: a switch can only go down (switch:S:down@T)")
    lanes = None
    if action.startswith("lanes="):
        action, lanes = "lanes", int(action[6:])
    if action == "flap":
        t = re.fullmatch(f"({_TIME})-({_TIME})", when)
        if not t:
            raise ConfigError(f"fault {text!r}: a flap needs its down and up times, T1-T2 in us (flap@100-300)")
        at, until = float(t.group(1)), float(t.group(2))
        if not until > at:
            raise ConfigError(f"fault {text!r}: the link must come back after it went down (T2 > T1)")
    else:
        if not re.fullmatch(_TIME, when):
            raise ConfigError(f"fault {text!r}: the time {when!r} must be a number of us >= 0 (@100)")
        at, until = float(when), None
    if max(at, until or 0.0) >= MAX_US:
        raise ConfigError(f"fault {text!r}: time out of range; use a time in us below {MAX_US:g}")
    return Fault(text, part, where, action, at, until, lanes)


def parse_all(specs) -> tuple[Fault, ...]:
    return tuple(parse(s) for s in specs)


def _node(topo, name: str, spec: str) -> int:
    try:
        return topo.node_names.index(name)
    except ValueError:
        close = difflib.get_close_matches(name, topo.node_names, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (`fabric-probe topology --nodes` lists them)"
        raise ConfigError(f"fault {spec!r}: {topo.name} has no node {name!r}{hint}") from None


def _link_channels(topo, where: str, spec: str) -> list[int]:
    """Both directions of the link(s) A-B (every parallel one, or the k-th with #k)."""
    base, _, k = where.partition("#")
    if k and not k.isdigit():
        raise ConfigError(f"fault {spec!r}: #{k} must be the index of a parallel link (#0, #1, ...)")
    for i in [i for i, ch in enumerate(base) if ch == "-"]:        # node names may hold '-': split where both exist
        a, b = base[:i], base[i + 1:]
        if a in topo.node_names and b in topo.node_names:
            break
    else:
        a, _, b = base.partition("-")
        if not b:
            raise ConfigError(f"fault {spec!r}: name a link by its two nodes, A-B (sw0-sw1)")
        _node(topo, a, spec), _node(topo, b, spec)
    u, v = topo.node_names.index(a), topo.node_names.index(b)
    chans = np.flatnonzero((topo.ch_src == u) & (topo.ch_dst == v))
    if not len(chans):
        raise ConfigError(f"fault {spec!r}: no link joins {a} and {b} in {topo.name}")
    lane = topo.ch_lane[chans] if topo.ch_lane is not None else np.zeros(len(chans), int)
    if k:
        if int(k) not in set(lane.tolist()):
            raise ConfigError(f"fault {spec!r}: {a}-{b} has {len(chans)} parallel link(s), #0..#{len(chans) - 1}")
        chans = chans[lane == int(k)]
    return sorted(int(c) for c in np.concatenate([chans, topo.ch_rev[chans]]))


def resolve(fault: Fault, topo, cfg) -> list[int]:
    """The channels a fault hits (both directions of each link), checked against the topology and config."""
    if fault.part == "switch":
        n = _node(topo, fault.where, fault.spec)
        if topo.node_kind[n] != 1:
            raise ConfigError(f"fault {fault.spec!r}: {fault.where} is not a switch; take its links down instead "
                              f"(link:{fault.where}-X:down@T)")
        return np.flatnonzero((topo.ch_src == n) | (topo.ch_dst == n)).astype(int).tolist()
    chans = _link_channels(topo, fault.where, fault.spec)
    if fault.action == "lanes" and not 1 <= fault.lanes <= cfg.phy.lanes:
        raise ConfigError(f"fault {fault.spec!r}: lanes={fault.lanes} is out of range; a link has phy.lanes="
                          f"{cfg.phy.lanes} lanes, so use 1..{cfg.phy.lanes}")
    return chans


class Schedule:
    """The faults of one run as timed actions on its Engine, and the record of what they did (`report`)."""

    def __init__(self, faults, topo, cfg):
        from fabric.phy import ps
        self.topo, self.cfg = topo, cfg
        self.alive = np.ones(topo.n_channels, bool)
        react = ps(cfg.manager.detection_ns) + ps(cfg.manager.route_update_ns)
        self.records, self.actions = [], []
        for i, f in enumerate(faults):
            chans = resolve(f, topo, cfg)
            at = ps(f.at_us * 1e3)
            rec = dict(spec=f.spec, channels=[topo.channel_name(c) for c in chans], at_us=f.at_us, applied=False)
            self.records.append(rec)
            if f.action == "lanes":
                rec["gbps_before"] = [self._gbps(topo.ch_ps_per_byte[c]) for c in chans]
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
        self._path_pair = None
        self.routes_installed = 0

    @staticmethod
    def _gbps(ps_per_byte: float) -> float:
        return 1e3 / float(ps_per_byte)

    def next_ps(self) -> int | None:
        return self.actions[0][0] if self.actions else None

    def apply_due(self, eng, t_ps: int) -> None:
        """Apply every action due at t_ps (the engine has run every event up to it)."""
        eng.advance(t_ps)
        while self.actions and self.actions[0][0] <= t_ps:
            _, _, what, i, chans, value = self.actions.pop(0)
            rec = self.records[i]
            if what == "rate":
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
        from fabric.routing import cut_off_ranks, reroute
        topo = self.topo
        alive = self.alive                 # what the manager knows: the parts its detection reported
        cut = cut_off_ranks(topo, alive)
        if cut:
            names = ", ".join(topo.node_names[r] for r in cut)
            raise PartitionError(f"fault {rec['spec']} partitions {topo.name} at t={t_ps / 1e6:.1f} us: "
                                 f"{names} cannot reach the other accelerators; fault fewer parts (or give them "
                                 f"another path)")
        new, broken = reroute(topo, alive)
        before = eng.fault_totals()["flows_moved"]
        eng.install_routes(new.pair_ptr, new.path_ptr, new.path_ch, new.path_vcl, self._keep(eng, new))
        self.routes_installed += 1
        rec[key] = dict(at_us=t_ps / 1e6, routing=new.routing, pairs_rerouted=broken,
                        flows_moved=eng.fault_totals()["flows_moved"] - before)

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
