"""Topology kinds, one module each: what `topology.kind` names.

Every module of this package registers its kind once (`register(Kind(...))`): the builder that lays out nodes and
links, the size estimate `fabric.network.check_size` refuses oversized fabrics with before building, the fabric
manager's default routing, and the kind's own parameters, a `[topology.<section>]` sub-section declared in the
module (fabric.params). Adding a kind is adding a module here and a preset in fabric/presets/ (docs/topology.md
§Adding a topology kind): the modules are found by listing the package, fabric.config makes `topology.kind`'s choices
and the sub-sections from the registry, and fabric.network builds and routes through it.

Shared building blocks (the Topology arrays, the Builder, mesh links) stay in fabric.topology.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable, NamedTuple

from fabric.errors import ConfigError


class Size(NamedTuple):
    """A fabric's size from its config alone, before anything is built (fabric.network.size_estimate)."""
    ranks: int
    switches: int
    hops: float          # mean hops of a route, a lower bound good enough for the routing's memory


@dataclass(frozen=True)
class Kind:
    """One topology kind."""
    name: str                           # the value of topology.kind
    help: str                           # one line: what it builds
    build: Callable                     # cfg -> fabric.topology.Topology (unrouted)
    size: Callable                      # cfg -> Size
    routing: str                        # the fabric manager's default algorithm (fabric.routing.METHODS)
    params: type | None = None          # its sub-section's dataclass (a fabric.params.Section), None for none
    section: str = ""                   # that sub-section's name, [topology.<section>]; default the kind's name
    reads: tuple[str, ...] = ()         # other kinds' sub-sections its builder reads too (hgx: the scale-out network)

    @property
    def section_name(self) -> str:
        return (self.section or self.name) if self.params is not None else ""


KINDS: dict[str, Kind] = {}
SHARED: dict[str, type] = {}   # sub-sections that no kind owns, read by the kinds that name them in `reads`


def register(kind: Kind) -> Kind:
    """Add a kind (once; a kind that shares another's sub-section must share its class too)."""
    if kind.name in KINDS:
        raise ValueError(f"topology kind {kind.name!r} is registered twice")
    other = next((k for k in KINDS.values() if k.section_name and k.section_name == kind.section_name), None)
    if kind.section_name in SHARED:
        raise ValueError(f"topology kind {kind.name} declares [topology.{kind.section_name}], a shared sub-section")
    if other is not None and other.params is not kind.params:
        raise ValueError(f"topology kinds {other.name} and {kind.name} declare different [topology."
                         f"{kind.section_name}] sections")
    KINDS[kind.name] = kind
    return kind


def register_section(name: str, params: type) -> None:
    """Add a sub-section [topology.<name>] that belongs to no kind (host memory): the kinds that read it name it in
    `reads`, and its `check` refuses it on the others."""
    if name in SHARED or any(k.section_name == name for k in KINDS.values()):
        raise ValueError(f"[topology.{name}] is registered twice")
    SHARED[name] = params


def get(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise ConfigError(f"topology.kind={name!r} has no builder; use one of {', '.join(KINDS)}") from None


def sections() -> dict[str, type]:
    """Sub-section name -> its dataclass, in the order the kinds registered them, then the shared ones."""
    out: dict[str, type] = {}
    for k in KINDS.values():
        if k.section_name:
            out.setdefault(k.section_name, k.params)
    return out | SHARED


def readers(section: str) -> list[str]:
    """The kinds that read a sub-section (their own, or through `reads`)."""
    return [k.name for k in KINDS.values() if section == k.section_name or section in k.reads]


# the kinds: every module of the package, in name order
for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_mod}")
