"""link: two accelerators joined by one link (the link probe: the PHY and data-link layers in isolation)."""
from __future__ import annotations

from fabric.topologies import Kind, Size, register
from fabric.topology import ACCEL, Builder


def build(cfg):
    b = Builder(cfg)
    b.node("acc0", ACCEL, domain=0)
    b.node("acc1", ACCEL, domain=0)
    b.link(0, 1)
    return b.freeze("link", 2, "link", "two accelerators joined by one link")


def size(cfg) -> Size:
    return Size(2, 0, 1.0)


register(Kind("link", "two accelerators joined by one link (the link probe)", build, size, routing="updown"))
