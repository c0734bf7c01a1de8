"""The fault specs alone, before any run: their syntax and the topology parts they name (failover applies them).

Permanent faults at run time: links that die, lose lanes or flap, switches that die (docs/faults.md).

A spec names a part by the node names `fabric-probe topology` uses and a time in microseconds from the start of the
step: `link:sw0-sw1:down@100`, `link:acc3-sw0:lanes=4@50`, `switch:sw5:down@200`, `link:sw0-sw1:flap@100-300`;
a link means both directions and every parallel link between the two nodes unless `#k` picks one (`sw0-sw1#1`).

`parse` checks the syntax (at config load), `resolve` the names against a topology; fabric.faults.failover applies them
to a run. A fault that cuts accelerators off stops the run with one line naming them (PartitionError).
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
