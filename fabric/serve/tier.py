"""Host memory as a KV tier: when a step's KV no longer fits in HBM, the newest running sequence's KV is offloaded
(stored) to its host domain's host-memory node over the fabric instead of being dropped and recomputed, and loaded
back before the sequence runs again (swap instead of recompute).

    HostTier(cfg, plan, kv_budget, engine) -> .tokens_per_group, .time_us(moves), .bytes(moves)

Where the KV goes: the group's ranks store one copy of a sequence's KV on the host-memory nodes of their own host
domains (topology.host_memory), each its share (GQA: the kv heads it holds; MLA, whose latent every rank of the
group holds whole: 1/attn_tp of it), and every rank loads back what it holds (MLA: the whole latent each): stores
out, loads back, the load/store semantics of the fabric. A node's memory is shared evenly by the accelerators of its
domain, so a group holds its ranks' share of host memory / the bytes of one copy of a token.

Timing: the engine moves the bytes on the idle fabric at two sizes, once for one rank alone (its ports bound it) and
once for every rank of a domain at once (the node's links bound it); a step's moves take, per host-memory node and
direction, latency + max(the busiest rank's bytes x the one-rank slope, the node's bytes x the shared slope), the
slowest node setting the time. The moves run before the step's forward pass and it waits for them (vLLM's
swap_in / swap_out): they add to the step and count as exposed communication. Not modelled: their overlap with
compute, and their contention with the step's own collectives (they do not run at the same time here).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabric.errors import ConfigError

PROBE_TOKENS = (256, 8192)       # the two sizes simulated per timing fit (tokens per rank)
OFFLOAD, RELOAD = 0, 1           # directions: stores HBM -> host memory, loads host memory -> HBM
GIB = float(1 << 30)


def with_host_memory(cfg):
    """cfg with one host-memory node per host domain when it declares none (topology.host_memory)."""
    from fabric.config import with_overrides
    if cfg.topology.kind != "sd200":
        raise ConfigError(f"--kv-tier host needs host-memory nodes on the fabric, which topology.kind = "
                          f"{cfg.topology.kind!r} does not place (the sd200 kind does: topology.host_memory)")
    if cfg.topology.host_memory.nodes_per_domain:
        return cfg
    return with_overrides(cfg, {"topology.host_memory.nodes_per_domain": 1})


@dataclass(frozen=True)
class _Fit:
    base_us: float
    one_us_per_byte: float       # one rank alone
    shared_us_per_byte: float    # every rank of a domain at once, per byte through the node


class HostTier:
    """The host-memory tier of one pool: capacity per attention group, and the time of a step's moves."""

    def __init__(self, cfg, plan, kv, engine: str = "analytic", kv_fraction: float = 1.0, first_rank: int = 0,
                 replicated: bool = False):
        """replicated: every rank of a group holds the whole KV of a token (MLA's latent), not a share of it."""
        from fabric.network import shared
        self.cfg = with_host_memory(cfg)
        self.plan, self.engine, self.bpt = plan, engine, float(kv.bytes_per_token)
        topo = self.topo = shared(self.cfg)
        hm = self.cfg.topology.host_memory
        per_domain = self.cfg.topology.accels_per_domain
        per_rank = hm.nodes_per_domain * hm.gib_per_node * GIB / per_domain * kv_fraction
        # bytes a rank moves per token: one copy spread over the group out, what it holds back
        self.rank_bytes = {OFFLOAD: self.bpt / plan.attn_tp if replicated else self.bpt, RELOAD: self.bpt}
        self.tokens_per_group = int(per_rank // self.rank_bytes[OFFLOAD])
        if self.tokens_per_group < 1:
            raise ConfigError(f"topology.host_memory.gib_per_node = {hm.gib_per_node} GiB gives each accelerator "
                              f"{per_rank / GIB:.3g} GiB of host memory, less than one token of KV "
                              f"({self.bpt:.0f} B); raise it or serve without --kv-tier host")
        # the host-memory node each serving rank uses: its domain's, spread over the domain's nodes
        n_serving = topo.n_serving
        dom = np.asarray(topo.node_domain[:n_serving], np.int64)
        hm_ranks = np.asarray(topo.host_memory_ranks, np.int64).reshape(-1, hm.nodes_per_domain)
        self.node_of = hm_ranks[dom, np.arange(n_serving) % per_domain % hm.nodes_per_domain]
        self.first_rank = first_rank
        domain_ranks = np.flatnonzero(dom == dom[first_rank])
        self.fit = {d: self._fit(d, first_rank, domain_ranks) for d in (OFFLOAD, RELOAD)}

    # ---------------------------------------------------------------- the engine

    def graph(self, direction: int, ranks, tokens: int) -> dict:
        """Each of `ranks` stores (offload) or loads (reload) tokens x bytes_per_token to / from its node."""
        from fabric.taskgraph import transfer_graph
        ranks = np.asarray(ranks, np.int64)
        return transfer_graph(ranks, self.node_of[ranks], max(int(round(tokens * self.bpt)), 1), op=direction)

    def simulate(self, direction: int, ranks, tokens: int) -> float:
        """Microseconds the engine takes to move it on the idle fabric."""
        from fabric import sim
        res = sim.run(self.cfg, self.topo, self.graph(direction, ranks, tokens), engine=self.engine,
                      transfers=False)
        return float(res.task_end_ps.max()) / 1e6

    def _fit(self, direction: int, r0: int, domain_ranks) -> _Fit:
        lo, hi = PROBE_TOKENS
        b_lo, b_hi = lo * self.bpt, hi * self.bpt
        one = [self.simulate(direction, [r0], n) for n in (lo, hi)]
        many = [self.simulate(direction, domain_ranks, n) for n in (lo, hi)]
        s_one = (one[1] - one[0]) / (b_hi - b_lo)
        s_shared = (many[1] - many[0]) / ((b_hi - b_lo) * len(domain_ranks))
        return _Fit(base_us=one[0] - s_one * b_lo, one_us_per_byte=s_one, shared_us_per_byte=s_shared)

    # ---------------------------------------------------------------- a step's moves

    def group_ranks(self, group: int) -> np.ndarray:
        """Ranks of attention group `group` (replica-major, as fabric.serve.plan lays them out)."""
        p = self.plan
        r, g = divmod(group, p.dp)
        start = self.first_rank + r * p.ranks + g * p.attn_tp
        return np.arange(start, start + p.attn_tp)

    def time_us(self, moves) -> float:
        """moves: [(group, tokens, direction)] of one step -> microseconds before its forward pass can start."""
        worst = 0.0
        for d in (OFFLOAD, RELOAD):
            per_rank: dict[int, float] = {}
            for g, tokens, direction in moves:
                if direction == d:
                    for r in self.group_ranks(g):
                        per_rank[int(r)] = per_rank.get(int(r), 0.0) + tokens * self.rank_bytes[d]
            if not per_rank:
                continue
            ranks = np.fromiter(per_rank, np.int64)
            nbytes = np.fromiter(per_rank.values(), np.float64)
            node = self.node_of[ranks]
            f = self.fit[d]
            for n in np.unique(node):
                here = node == n
                worst = max(worst, f.base_us + max(nbytes[here].max() * f.one_us_per_byte,
                                                   nbytes[here].sum() * f.shared_us_per_byte))
        return worst

    def bytes(self, moves) -> tuple[float, float]:
        """(offloaded, reloaded) bytes of a step's moves."""
        out = [0.0, 0.0]
        for _, tokens, direction in moves:
            out[direction] += tokens * self.rank_bytes[direction] * self.plan.attn_tp
        return out[OFFLOAD], out[RELOAD]
