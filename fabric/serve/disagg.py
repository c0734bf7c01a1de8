"""Prefill and decode on separate ranks, the KV cache moved between them over the fabric (PD disaggregation).

    serve_disaggregated(prefill="attn=dp,ep=16", decode="attn=dp,ep=48", ...) -> dict (fabric.serve's keys, and
                                                                              "pools", "kv_handover")
    Disaggregated(prefill=..., decode=...).serve(workload, ...)   the same, the pools made once for many workloads

The prefill pool takes ranks 0 .. P-1 of the preset, the decode pool the next D, and both run in one simulated time
(`couple`). A request is prefilled in the prefill pool (its first token made there: TTFT) and then sent to the decode
pool, which admits it when it has room for its KV (fabric.serve.scheduler: a prefilled request). Its KV (the
prompt's tokens in the model's own layout: every rank of the decode attention group gets its share, MLA's whole
latent) then moves from the prefill attention group's ranks to the decode group's, and it decodes from the first
step after the KV has landed. The prefill pool holds the KV until it has landed, so a full decode pool holds the
prefill pool back (backpressure); a closed loop's user sends the next request when the last one finishes, in
either pool.

The hand-over runs after the prefill, or (`handover=layered` in the prefill plan) layer by layer while it runs: each
layer's KV of a chunk leaves as soon as the layer has computed it, so the KV lands one layer's share of the last
chunk after the prefill ends, or, when the fabric is slower than the prefill makes KV, when the whole prompt's bytes
have crossed since its first chunk began (the later of the two), provided the decode pool admitted the request by
then (it streams into memory the decode pool has set aside); admitted later, it moves whole on admission.

The hand-over time is the engine's: every source rank sends its share to every destination rank, split over the
accelerator's ports, on the idle fabric, simulated at two sizes and linear between (a transfer on an idle path is
latency + bytes / bandwidth; `Handover.simulate` also takes background traffic, and a test shows a hand-over sharing
its links landing later). In a served run the hand-over shares the destination rank's ingress with the decode
pool's own steps (their collectives and expert all-to-all land on the same ports): at its admission the decode pool's
current step carries B bytes per rank in a step of D seconds, a load u = B / (ingress payload rate x D) (at most
MAX_LOAD), and the hand-over's bytes take 1 / (1 - u) as long (that traffic spread evenly over the hand-over; the
engines, given the same bytes, land it earlier or later by who queues first, and the estimate lies within their
outcomes: tested). Not modelled: the prefill pool's traffic on the hand-over's source side (its sources are
spread over the prefill group's ranks), and each pool's steps being simulated on ranks 0.. of the preset.
"""
from __future__ import annotations

import dataclasses
import heapq
import time

import numpy as np

from fabric.errors import ConfigError

PROBE_TOKENS = (256, 8192)       # the two hand-over sizes simulated (prompt tokens)
MAX_LOAD = 0.9                   # the decode pool's share of a rank's ingress a hand-over can be slowed by, at most


class Handover:
    """KV hand-over time of a prompt from one prefill attention group to one decode attention group."""

    def __init__(self, cfg, src_ranks, dst_ranks, bytes_per_token: float, engine: str = "analytic"):
        self.cfg, self.src, self.dst, self.bpt, self.engine = cfg, list(src_ranks), list(dst_ranks), \
            float(bytes_per_token), engine
        t = [self.simulate(n) for n in PROBE_TOKENS]
        self.slope_us = (t[1] - t[0]) / (PROBE_TOKENS[1] - PROBE_TOKENS[0])
        self.base_us = t[0] - self.slope_us * PROBE_TOKENS[0]

    def graph(self, tokens: int) -> dict:
        """Every source rank sends its 1/len(src) of each destination rank's share, split over the ports."""
        from fabric.taskgraph import transfer_graph
        ports = max(int(self.cfg.topology.ports_per_accel), 1)
        per = tokens * self.bpt / len(self.src) / ports
        pairs = [(s, d) for s in self.src for d in self.dst for _ in range(ports)]
        src, dst = np.array(pairs, np.int64).T
        return transfer_graph(src, dst, np.full(len(pairs), max(int(round(per)), 1)))

    def simulate(self, tokens: int, background=None) -> float:
        """Microseconds until the hand-over's last byte lands; background: (src, dst, bytes) arrays of transfers
        that start with it (other traffic it shares links with), None for the idle fabric."""
        from fabric import sim
        from fabric.network import shared
        from fabric.taskgraph import transfer_graph
        g = self.graph(tokens)
        n = len(g["rank"])
        if background is not None:       # queued first: the analytic engine serves a shared link in issue order
            src, dst, nbytes = (np.asarray(x, np.int64) for x in background)
            g = transfer_graph(np.concatenate([src, g["rank"]]), np.concatenate([dst, g["peer"]]),
                               np.concatenate([nbytes, g["nbytes"]]))
        res = sim.run(self.cfg, shared(self.cfg), g, engine=self.engine, transfers=False)
        return float(res.task_end_ps[-n:].max()) / 1e6

    def links(self, tokens: int = PROBE_TOKENS[0]) -> list[dict]:
        """The channels a hand-over loads, from one run of the packet engine (which counts every channel's bytes):
        each channel and the share of the hand-over's payload it carries, busiest first."""
        from fabric import sim
        from fabric.network import shared
        topo = shared(self.cfg)
        g = self.graph(tokens)
        res = sim.run(self.cfg, topo, g, engine="packet", transfers=False)
        payload = res.counters["payload_B"].astype(np.float64)
        total = float(g["nbytes"].sum())
        used = np.flatnonzero(payload > 0)
        used = used[np.argsort(-payload[used], kind="stable")]
        return [dict(channel=topo.channel_name(int(c)), share=float(payload[c] / total)) for c in used]

    def time_us(self, tokens) -> np.ndarray:
        return self.base_us + self.slope_us * np.asarray(tokens, np.float64)

    def bytes(self, tokens) -> np.ndarray:
        return np.asarray(tokens, np.float64) * self.bpt * len(self.dst)


class Disaggregated:
    """Prefill and decode pools on a fabric, their deployments and hand-over made once; `serve` runs any workload
    on them (as fabric.serve.Deployment does for one pool: a sweep over load pays for the step models once)."""

    def __init__(self, *, model: str | None = None, hf_config: str | None = None, preset: str = "sd200", cfg=None,
                 prefill: str, decode: str, engine: str = "analytic", seed: int = 0,
                 chip: str = "sd200-accelerator", token_budget: int = 8192, on_point=None, kv_tier: str = "hbm"):
        from fabric import phy
        from fabric.config import load_config
        from fabric.network import shared
        from fabric.serve.deployment import Deployment
        cfg = cfg if cfg is not None else load_config(preset)
        common = dict(model=model, hf_config=hf_config, preset=preset, cfg=cfg, engine=engine, seed=seed, chip=chip,
                      token_budget=token_budget, on_point=on_point)
        self.prefill = Deployment(plan=prefill, plan_flag="--prefill", **common)
        # the decode pool keeps the KV for the whole output: the host tier, if any, is its
        self.decode = Deployment(plan=decode, plan_flag="--decode", kv_tier=kv_tier,
                                 first_rank=self.prefill.plan.total_ranks, **common)
        topo = shared(cfg)
        serving = topo.n_serving
        p_ranks, d_ranks = self.prefill.plan.total_ranks, self.decode.plan.total_ranks
        if p_ranks + d_ranks > serving:
            raise ConfigError(f"--prefill {prefill!r} ({p_ranks} ranks) and --decode {decode!r} ({d_ranks} ranks) "
                              f"need {p_ranks + d_ranks} ranks but preset {preset!r} has {serving}; the pools do "
                              f"not share ranks: shrink one of them")
        self.cfg, self.ranks = cfg, p_ranks + d_ranks
        # the KV moves from the prefill group's ranks to a decode group's (the first group of each pool: on sd200
        # the path length changes the hand-over by less than a microsecond, its bytes set it)
        self.handover = Handover(cfg, range(self.prefill.plan.attn_tp),
                                 range(p_ranks, p_ranks + self.decode.plan.attn_tp),
                                 self.decode.kv.bytes_per_token, engine)
        self.handover_links = self.handover.links()   # the representative pair of groups' path
        self.ingress_Bps = phy.data_gbps(cfg) / 8 * 1e9 * max(int(cfg.topology.ports_per_accel), 1)
        pre, dec = self.prefill, self.decode
        self.meta = dict(model=pre.model_name, preset=preset, chip=pre.chip.name,
                         plan=f"prefill {prefill} | decode {decode}",
                         plan_described=f"prefill: {pre.plan.describe()}; decode: {dec.plan.describe()}",
                         engine=engine, seed=seed, token_budget=token_budget, kv_tier=kv_tier)

    def _cosimulate(self, wl, sched_kw: dict, progress):
        """The two pools' schedulers run coupled (couple); returns (prefill, decode scheduler, landing times, each
        hand-over's slowdown by the decode pool's traffic)."""
        from fabric.serve.scheduler import Scheduler
        pre, dec, hand = self.prefill, self.decode, self.handover
        moved = wl.output_tokens > 1
        ps = Scheduler(dataclasses.replace(wl, output_tokens=np.ones(wl.n, np.int64)), pre.plan, pre.stepmodel,
                       pre.kv.tokens_per_group, **sched_kw)
        ds = Scheduler(dataclasses.replace(wl, prefilled=True, prefix_id=None, prefix_tokens=None),   # KV whole
                       dec.plan, dec.stepmodel, dec.kv.tokens_per_group, progress=progress, tier=dec.tier,
                       **sched_kw)
        full_us = hand.time_us(wl.prompt_tokens)
        slowdown = np.ones(wl.n)

        def transfer_us(rid: int, t: float) -> float:
            """The hand-over's time with the decode pool's own traffic into the ranks it lands on (module doc)."""
            load = self.decode_load(ds, int(ds.group_of[rid]) // dec.plan.dp)
            slowdown[rid] = 1.0 / (1.0 - load)
            return hand.base_us + hand.slope_us * float(wl.prompt_tokens[rid]) * slowdown[rid]
        streamed = None
        if pre.plan.handover == "layered":    # each layer's KV of a chunk leaves as soon as the layer made it
            def streamed(rid):
                return max(ps.finish[rid] + hand.time_us(ps.last_chunk[rid] / pre.spec.layers) / 1e6,
                           ps.prefill_start[rid] + full_us[rid] / 1e6)
        return ps, ds, couple(ps, ds, moved, transfer_us, streamed), slowdown

    def decode_load(self, ds, replica: int) -> float:
        """The share of a decode rank's ingress bandwidth the decode pool's own steps use at its current batch: the
        bytes its step carries (all classes, the whole step over the pool's ranks) over the rank's ports' payload
        rate and the step's time; at most MAX_LOAD."""
        groups = ds.groups[replica]
        n = max(len(g.running) for g in groups)
        if not n:
            return 0.0
        kv = max(int(ds.kv[g.running].sum()) for g in groups if g.running)
        dur_us, _, nbytes = self.decode.stepmodel.step(n, kv, mean_tokens=sum(len(g.running) for g in groups)
                                                       / len(groups))
        per_rank = sum(nbytes) / self.decode.plan.ranks
        return min(per_rank / self.ingress_Bps / (dur_us * 1e-6), MAX_LOAD)

    def serve(self, workload: str = "azure-conv", *, requests: int | None = None, duration_s: float | None = None,
              rate: float | None = None, slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
              max_seqs: int | None = None, balance: str = "least_tokens", progress=None,
              shared_prefix: str | None = None) -> dict:
        from fabric.serve.deployment import check_slos, max_seqs_for
        from fabric.serve.report import summarise
        from fabric.serve.workload import parse_workload
        t0 = time.perf_counter()
        check_slos(slo_ttft_ms, slo_tpot_ms)
        pre, dec, hand = self.prefill, self.decode, self.handover
        wl = parse_workload(workload, requests=requests, duration_s=duration_s, rate=rate, seed=self.meta["seed"],
                            shared_prefix=shared_prefix)
        budget = self.meta["token_budget"]
        max_seqs = max_seqs_for(budget, max_seqs)
        sched_kw = dict(token_budget=budget, max_seqs=max_seqs, balance=balance)
        simulated = pre.stepmodel.simulated + dec.stepmodel.simulated
        sim_s = pre.stepmodel.sim_s + dec.stepmodel.sim_s
        ps, ds, landed, slowdown = self._cosimulate(wl, sched_kw, progress)
        moved = wl.output_tokens > 1
        hand_us = (landed - ps.finish) * 1e6                  # what a request waits after its prefill

        # one request's life: arrival and first token from the prefill pool, the rest from the decode pool
        finish = np.where(moved, ds.finish, ps.finish)
        merged = _Merged(arrival=wl.arrival_s.copy(), first=ps.first.copy(), finish=finish,
                         preempted=ps.preempted + ds.preempted, rec=ds.rec, groups=ds.groups, tier=ds.tier)
        res = summarise(merged, wl, _Ranks(dec.plan, self.ranks), slo_ttft_ms, slo_tpot_ms,
                        self.cfg.topology.accels_per_domain)
        res["fabric_bytes"]["kv_handover"] = float(hand.bytes(wl.prompt_tokens[moved]).sum())
        for c, b in zip(("tp_collectives", "expert_alltoall", "other"), ps.rec.bytes_by_class):
            res["fabric_bytes"][c] += float(b)
        h = hand_us[moved]
        done = ~np.isnan(finish)
        res["per_request"]["kv_handover_ms"] = [None if np.isnan(x) else round(float(x) * 1e-3, 6)
                                                for x in hand_us[done]]
        return dict(self.meta, max_seqs=max_seqs, balance=balance, workload=wl.name, workload_meta=wl.meta,
                    ranks=self.ranks, attention_groups=pre.plan.groups + dec.plan.groups, memory=dec.kv.as_dict(),
                    **res, pools=dict(prefill=_pool(ps, pre), decode=_pool(ds, dec)),
                    kv_handover=dict(mode=pre.plan.handover, requests=int(moved.sum()),
                                     slowdown_mean=float(slowdown[moved].mean()) if moved.any() else 1.0,
                                     slowdown_max=float(slowdown[moved].max()) if moved.any() else 1.0,
                                     mean_ms=float(h.mean() * 1e-3) if len(h) else 0.0,
                                     p99_ms=float(np.percentile(h, 99) * 1e-3) if len(h) else 0.0,
                                     bytes=res["fabric_bytes"]["kv_handover"], us_per_token=hand.slope_us,
                                     links=[dict(x, gb=x["share"] * res["fabric_bytes"]["kv_handover"] / 1e9)
                                            for x in self.handover_links],
                                     fixed_us=hand.base_us),
                    step_model=dict(grid_steps_simulated=pre.stepmodel.simulated + dec.stepmodel.simulated - simulated,
                                    simulate_s=pre.stepmodel.sim_s + dec.stepmodel.sim_s - sim_s),
                    wall_s=time.perf_counter() - t0, **_tier(ds), **_prefix(ps, wl))


def _prefix(ps, wl) -> dict:
    """The prefill pool's prefix cache (the decode pool receives each prompt's KV whole)."""
    if wl.prefix_id is None:
        return {}
    from fabric.serve.report import prefix_cache
    return dict(prefix_cache=prefix_cache(ps, wl))


def _tier(ds) -> dict:
    from fabric.serve.report import host_tier
    if ds.tier is None:
        return {}
    return dict(host_tier=host_tier(ds))


def couple(ps, ds, moved, transfer_us, streamed=None) -> np.ndarray:
    """Run a prefill pool's and a decode pool's schedulers in one simulated time; returns when each request's KV
    landed in the decode pool (NaN: it had one output token and never left the prefill pool).

    A finished prefill's request (moved[rid]) goes to the decode pool, which admits it when it has room for its KV;
    the KV then moves, transfer_us(rid, t) us from its admission at t, or has already streamed by streamed(rid) if
    the decode pool admitted it by then (layer-by-layer hand-over); the prefill pool holds it until it has landed, so a full decode pool holds
    the prefill pool back. A closed loop's user sends its next request when either pool finishes its last."""
    landed = np.full(len(moved), np.nan)
    releases: list = []                                   # (time its KV has left the prefill pool, request)

    def admitted(rid: int, t: float) -> float:
        land = t + transfer_us(rid, t) / 1e6
        if streamed is not None and t <= streamed(rid):
            land = streamed(rid)
        landed[rid] = land
        heapq.heappush(releases, (land, rid))
        return land

    ps.on_done = lambda rid, t: ds.push(t, rid) if moved[rid] else ps.next_user(rid, t)
    ps.keeps_kv = lambda rid: bool(moved[rid])
    ds.on_admit = admitted
    ds.on_done = ps.next_user
    ds.others_next = ps.next_time
    ps.start()
    ds.start(arrivals=False)
    while True:
        t_rel = releases[0][0] if releases else np.inf
        t_pre, t_dec = ps.next_time(), ds.next_time()
        t = min(t_rel, t_pre, t_dec)
        if t == np.inf:
            break
        if t_rel == t:
            ps.release(heapq.heappop(releases)[1], t)
        elif t_pre == t:
            ps.advance()
        else:
            ds.advance()
    if np.isnan(np.where(moved, ds.finish, ps.finish)).any():
        raise RuntimeError("disaggregated run ended with requests unserved")     # a bug, not input
    return landed


def serve_disaggregated(*, model: str | None = None, hf_config: str | None = None, preset: str = "sd200", cfg=None,
                        prefill: str, decode: str, workload: str = "azure-conv", requests: int | None = None,
                        duration_s: float | None = None, rate: float | None = None,
                        slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
                        engine: str = "analytic", seed: int = 0, chip: str = "sd200-accelerator",
                        token_budget: int = 8192, max_seqs: int | None = None, balance: str = "least_tokens",
                        progress=None, on_point=None, kv_tier: str = "hbm", shared_prefix: str | None = None) -> dict:
    """One workload on a Disaggregated deployment made for it (its wall time included)."""
    from fabric.serve.deployment import check_slos
    t0 = time.perf_counter()
    check_slos(slo_ttft_ms, slo_tpot_ms)           # before the pools' deployments are made
    dep = Disaggregated(model=model, hf_config=hf_config, preset=preset, cfg=cfg, prefill=prefill, decode=decode,
                        engine=engine, seed=seed, chip=chip, token_budget=token_budget, on_point=on_point,
                        kv_tier=kv_tier)
    out = dep.serve(workload, requests=requests, duration_s=duration_s, rate=rate, slo_ttft_ms=slo_ttft_ms,
                    slo_tpot_ms=slo_tpot_ms, max_seqs=max_seqs, balance=balance, progress=progress,
                    shared_prefix=shared_prefix)
    out["wall_s"] = time.perf_counter() - t0
    return out


def _pool(sched, dep) -> dict:
    """One pool's plan, memory and steps."""
    busy = float(sum(sched.rec.step_dur_s))
    return dict(plan=dep.plan.text, plan_described=dep.plan.describe(), ranks=dep.plan.total_ranks,
                memory=dep.kv.as_dict(), steps=int(sum(sched.rec.step_count)), busy_s=busy,
                preemptions=int(sched.preempted.sum()),
                exposed_comm_fraction=float(sched.rec.comm_s / max(busy, 1e-12)),
                step_model=dict(grid_steps_simulated=dep.stepmodel.simulated, simulate_s=dep.stepmodel.sim_s))


@dataclasses.dataclass
class _Merged:
    """What report.summarise reads of a run, from the two pools."""
    arrival: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    preempted: np.ndarray
    rec: object
    groups: list
    tier: object = None


@dataclasses.dataclass(frozen=True)
class _Ranks:
    """A plan view whose total_ranks counts both pools (throughput per accelerator)."""
    plan: object
    total_ranks: int

    def __getattr__(self, name):
        return getattr(self.plan, name)
