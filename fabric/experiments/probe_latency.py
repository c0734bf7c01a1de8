"""The latency probe: one store or load between two accelerators on an idle fabric, with a breakdown.

The latency is measured by the packet kernel; the breakdown is the zero-load model of the same path
(fabric.phy.path_terms: issue, translation, serialisation, PHY, wire, switch, completion) and `queueing_ns` is the
residual, what the measurement adds on top (0 on an idle fabric; a test holds it there).
"""
from __future__ import annotations

import numpy as np

from fabric import sim
from fabric.config import FabricConfig
from fabric.errors import ConfigError
from fabric.network import build
from fabric.phy import ns, path_terms, ps
from fabric.taskgraph import transfer_graph


def probe_latency(cfg: FabricConfig, src: int, dst: int | None = None, op: str = "store", nbytes: int = 64,
                  addr: int | None = None) -> dict:
    """dst is a rank, or give addr: a host address in src's host domain, translated by the kernel at the ingress
    port through the domain's shadow-window table (local or shadow-device window; a cold translation cache, so
    the walk's endpoint.translation_miss_ns is in the translation term); an address outside every window
    completes as an Unsupported Request and the result says so."""
    topo = build(cfg)
    R = topo.n_ranks
    if not 0 <= src < R:
        raise ConfigError(f"--src={src} is out of range; this topology has accelerators 0..{R - 1}")
    if (dst is None) == (addr is None):
        raise ConfigError("give exactly one of --dst (a rank) and --addr (a host address)")
    if op not in ("store", "load"):
        raise ConfigError(f"--op={op!r} is not allowed; use store or load")
    if nbytes < 1:
        raise ConfigError(f"--bytes={nbytes} is out of range; allowed >= 1")
    graph = transfer_graph(src, -1 if dst is None else dst, nbytes, op=1 if op == "load" else 0)
    if addr is not None:      # the kernel's ingress port translates it (the same path as a replay's transfers)
        if not 0 <= addr < 1 << 63:
            raise ConfigError(f"--addr={addr:#x} is not a 63-bit host address")
        graph["host_addr"] = np.array([addr], np.int64)
        res = sim.run(cfg, topo, graph)
        if res.transfers["status"][0]:
            dom = int(topo.node_domain[src])
            return dict(preset=topo.name, src=src, dst=None, addr=hex(addr), op=op, bytes=nbytes, status="UR",
                        error=f"Unsupported Request: host domain {dom} access [{addr:#x}, {addr + nbytes:#x}) is "
                              f"not inside one window", latency_ns=ns(float(res.task_end_ps[0] - res.task_start_ps[0])))
        dst = int(res.transfers["dst"][0])
    if not 0 <= dst < R:
        raise ConfigError(f"--dst={dst} is out of range; this topology has accelerators 0..{R - 1}")
    if src == dst:
        raise ConfigError(f"--addr={addr:#x} is accelerator {src}'s own memory; a local access never enters the "
                          f"fabric: give another accelerator's window" if addr is not None else
                          "--src and --dst must differ (a local access never enters the fabric)")
    if addr is None:
        res = sim.run(cfg, topo, graph)
    measured = int(res.task_end_ps[0] - res.task_start_ps[0])
    ep = cfg.endpoint
    cross = topo.node_domain[src] != topo.node_domain[dst]
    miss = res.translation["cache_misses"] * ps(ep.translation_miss_ns)     # a cold cache: the table walk
    terms = dict(issue=ps(ep.issue_ns),
                 translation=ps(ep.translation_ns) + miss + (ps(ep.p2p_forward_ns) if cross else 0))
    if op == "load":      # read requests travel there, completions come back on the response path
        n_req = -(-nbytes // cfg.txn.max_read_request_bytes)
        flows = [(0, 0, n_req), (1, nbytes, -(-nbytes // cfg.txn.max_payload_bytes))]
    else:
        flows = [(0, nbytes, -(-nbytes // cfg.txn.max_payload_bytes))]
    node_path = []
    for xf, payload, packets in flows:
        p = int(res.transfers["path"][xf])
        chans = topo.path_ch[topo.path_ptr[p]:topo.path_ptr[p + 1]]
        for k, v in path_terms(cfg, topo, chans, payload, packets).items():
            terms[k] = terms.get(k, 0) + v
        names = [topo.node_names[topo.ch_src[chans[0]]]] + [topo.node_names[c] for c in topo.ch_dst[chans]]
        node_path += names if not node_path else names[1:]
    terms["completion"] = ps(ep.completion_ns)
    modelled = sum(terms.values())
    breakdown = {f"{k}_ns": round(ns(v), 3) for k, v in terms.items()}
    # residual of a measurement over its zero-load model: ~0 on an idle fabric (rounding of ps serialisation)
    breakdown["queueing_ns"] = round(ns(measured - modelled), 1) + 0.0
    return dict(preset=topo.name, src=src, dst=dst, addr=None if addr is None else hex(addr), op=op, bytes=nbytes,
                status="OK", latency_ns=ns(measured),
                hops=len(node_path) - 1 if op == "store" else (len(node_path) - 1) // 2, path=node_path,
                cross_domain=bool(cross), breakdown=breakdown)
