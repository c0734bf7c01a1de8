"""What a parameter is: a field of a frozen dataclass section whose metadata carries its unit, allowed range, help
text and the reason for its default, and the hooks a section offers the whole config.

fabric.config assembles the sections, and the sub-sections that the topology kinds of fabric/topologies/ declare
next to their builders, into one FabricConfig. This module imports nothing of the package, so a kind's module can
declare its parameters without importing fabric.config (which imports the kinds).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import field
from typing import NamedTuple

from fabric.errors import ConfigError


def param(default, *, unit: str, help: str, reason: str, lo=None, hi=None, lo_open=False, hi_open=False,
          choices=None, was: str | tuple[str, ...] = ()):
    """A config field: `help` says what it is, `reason` why the default is what it is. `was`: the flat key(s) it
    had before it moved into a sub-section; they still set it, with a deprecation message (fabric.config)."""
    meta = dict(unit=unit, help=help, reason=reason, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open,
                choices=choices, was=(was,) if isinstance(was, str) else tuple(was))
    return field(default=default, metadata=meta)


def subsection(cls):
    """A field holding a sub-section (a Section of its own, `[section.name]` in TOML)."""
    return field(default_factory=cls)


def range_text(m: dict, default=None) -> str:
    if m["choices"]:
        return "one of " + ", ".join(map(str, m["choices"]))
    if isinstance(default, bool):
        return "true | false"
    if isinstance(default, str):
        return "text"
    lo = "(" if m["lo_open"] else "["
    hi = ")" if m["hi_open"] else "]"
    return f"{lo}{m['lo'] if m['lo'] is not None else '-inf'}, {m['hi'] if m['hi'] is not None else 'inf'}{hi}"


def check_value(name: str, m: dict, v) -> None:
    """A ConfigError if v is not one of the field's choices or lies outside its range (metadata m)."""
    if m.get("choices"):
        if v not in m["choices"]:
            raise ConfigError(f"{name}={v!r} is not allowed; use {range_text(m)}")
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return
    bad = (isinstance(v, float) and not math.isfinite(v))
    if m.get("lo") is not None:
        bad |= v <= m["lo"] if m["lo_open"] else v < m["lo"]
    if m.get("hi") is not None:
        bad |= v >= m["hi"] if m["hi_open"] else v > m["hi"]
    if bad:
        raise ConfigError(f"{name}={v!r} is out of range; allowed {range_text(m)} {m['unit']}")


class Crossing(NamedTuple):
    """What a sub-section's parts add to one crossing of the fabric (fabric.config.idle_gap_ns, the watchdog's
    floor): forwarding nodes slower than a switch may be, cables longer than phy.cable_m, and latencies paid once
    per crossing (in the order they are added)."""
    node_ns: tuple = ()
    cable_m: tuple = ()
    once_ns: tuple = ()


class Section:
    """Validation shared by every section: types and ranges from field metadata, sub-sections recursively."""

    def validate(self, prefix: str) -> None:
        for f in dataclasses.fields(self):
            v, name = getattr(self, f.name), f"{prefix}.{f.name}"
            if isinstance(v, Section):
                v.validate(name)
            else:
                check_value(name, f.metadata, v)

    def check(self, cfg, prefix: str) -> None:
        """Rules that need the whole config (cfg, validated section by section); run for every sub-section,
        whether or not the chosen kind reads it, so a bad value never waits for the kind that reads it."""

    def crossing(self) -> Crossing:
        """What this sub-section adds to one crossing of the fabric (see Crossing); nothing by default."""
        return Crossing()
