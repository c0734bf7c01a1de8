"""A served workload's results: throughput, latency percentiles, goodput, batch and KV use, preemptions, fabric
bytes by class (JSON-ready), and its timeline (Chrome trace-event JSON: a track per replica)."""
from __future__ import annotations

import gzip
import json

import numpy as np

from fabric.serve.stepmodel import CLASSES

PCTS = (50, 90, 99)


def _pcts(x: np.ndarray, scale: float = 1.0) -> dict:
    if not len(x):
        return {f"p{p}": None for p in PCTS} | {"mean": None}
    return {f"p{p}": float(np.percentile(x, p) * scale) for p in PCTS} | {"mean": float(x.mean() * scale)}


def _imbalance(sched, wl, done) -> dict:
    """How evenly the balancer spread the load over the attention groups: the busiest group's tokens (prompt +
    output of the requests it served), mean KV held and mean batch (running sequences), over the mean of all groups
    (1.0: even)."""
    groups = sum(len(rep) for rep in sched.groups)
    gid = getattr(sched, "group_of", None)
    out = {}
    if gid is not None and groups > 1:
        tokens = np.bincount(gid[done], weights=(wl.prompt_tokens + wl.output_tokens)[done], minlength=groups)
        out["tokens_max_over_mean"] = float(tokens.max() / tokens.mean()) if tokens.mean() else 1.0
    if groups > 1:
        for key, per in (("kv_max_over_mean", sched.rec.group_kv_s), ("batch_max_over_mean", sched.rec.group_batch_s)):
            x = np.array([per.get(g, 0.0) for g in range(groups)])
            out[key] = float(x.max() / x.mean()) if x.mean() else 1.0
    return out


def _tier_bytes(sched) -> dict:
    """The host tier's offloads and reloads, a class of their own (absent without a tier)."""
    if getattr(sched, "tier", None) is None:
        return {}
    return dict(kv_offload=float(sched.rec.tier_bytes[0]), kv_reload=float(sched.rec.tier_bytes[1]))


def host_tier(sched) -> dict:
    """What the host-memory tier did: swaps (preemptions that kept their KV), bytes and the steps' wait for them."""
    tier = sched.tier
    used = [g.host_used for rep in sched.groups for g in rep]
    return dict(tokens_per_group=tier.tokens_per_group, swaps=int(sched.swapped.sum()),
                requests_swapped=int((sched.swapped > 0).sum()), offload_bytes=float(sched.rec.tier_bytes[0]),
                reload_bytes=float(sched.rec.tier_bytes[1]), wait_s=float(sched.rec.tier_s),
                host_tokens_at_end=int(sum(used)), engine=tier.engine,
                us_per_token=dict(offload=tier.fit[0].one_us_per_byte * tier.rank_bytes[0],
                                  reload=tier.fit[1].one_us_per_byte * tier.rank_bytes[1]),
                fixed_us=dict(offload=tier.fit[0].base_us, reload=tier.fit[1].base_us))


def prefix_cache(sched, wl) -> dict:
    """What the prefix cache saved: prompt tokens read from a cached prefix instead of prefilled."""
    rec = sched.rec
    shared = int(wl.prefix_tokens.sum())
    return dict(prefixes=int(len(np.unique(wl.prefix_id))), shared_prompt_tokens=shared,
                hit_tokens=int(rec.prefix_hit_tokens), host_hits=int(rec.prefix_host_hits),
                hit_fraction_of_prompts=float(rec.prefix_hit_tokens / max(int(wl.prompt_tokens.sum()), 1)),
                entries_at_end=int(sum(len(g.cache) for rep in sched.groups for g in rep)))


def summarise(sched, wl, plan, slo_ttft_ms: float | None, slo_tpot_ms: float | None, accels_per_node: int) -> dict:
    """The results of a finished Scheduler run."""
    rec = sched.rec
    done = ~np.isnan(sched.finish)
    arrival, first, finish = sched.arrival[done], sched.first[done], sched.finish[done]
    prompt, out = wl.prompt_tokens[done], wl.output_tokens[done]
    ttft = first - arrival
    e2e = finish - arrival
    multi = out > 1
    tpot = np.where(multi, (finish - first) / np.maximum(out - 1, 1), np.nan)
    t0 = float(arrival.min()) if len(arrival) else 0.0
    span = float(finish.max() - t0) if len(finish) else 0.0
    ok = np.ones(len(ttft), bool)
    if slo_ttft_ms is not None:
        ok &= ttft * 1e3 <= slo_ttft_ms
    if slo_tpot_ms is not None:
        ok &= ~(tpot * 1e3 > slo_tpot_ms)                    # one-token requests have no TPOT: they meet it
    ranks = plan.total_ranks
    nodes = max(ranks / accels_per_node, 1e-12)
    dur = np.asarray(rec.step_dur_s)
    count = np.asarray(rec.step_count, np.int64)
    batch = np.asarray(rec.step_batch, np.float64)
    kv = np.asarray(rec.kv_used, np.float64)
    busy_s = float(dur.sum())
    per_rep_capacity = plan.dp * sched.groups[0][0].capacity
    itl = np.concatenate(rec.itl_s) if rec.itl_s else np.zeros(0)
    w = dur                                             # time-weighted means over the replicas' busy time
    return dict(
        requests=int(wl.n), finished=int(done.sum()), rejected=int(wl.n - done.sum()),
        duration_s=span,
        input_tokens=int(prompt.sum()), output_tokens=int(out.sum()),
        input_tokens_per_s=float(prompt.sum() / span) if span else 0.0,
        output_tokens_per_s=float(out.sum() / span) if span else 0.0,
        output_tokens_per_s_per_accelerator=float(out.sum() / span / ranks) if span else 0.0,
        output_tokens_per_s_per_node=float(out.sum() / span / nodes) if span else 0.0,
        input_tokens_per_s_per_accelerator=float(prompt.sum() / span / ranks) if span else 0.0,
        requests_per_s=float(done.sum() / span) if span else 0.0,
        ttft_ms=_pcts(ttft, 1e3), tpot_ms=_pcts(tpot[~np.isnan(tpot)], 1e3), e2e_ms=_pcts(e2e, 1e3),
        itl_ms=_pcts(itl, 1e3),
        slo=dict(ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms, met=int(ok.sum()),
                 met_fraction=float(ok.mean()) if len(ok) else 0.0),
        goodput_requests_per_s=float(ok.sum() / span) if span else 0.0,
        steps=int(count.sum()), step_records=int(len(dur)), busy_s=busy_s,
        exposed_comm_fraction=float(rec.comm_s / busy_s) if busy_s else 0.0,
        imbalance=_imbalance(sched, wl, done),
        batch_mean=float((batch * w).sum() / w.sum()) if w.sum() else 0.0,
        batch_max=int(batch.max()) if len(batch) else 0,
        kv_use_mean=float((kv * w).sum() / w.sum() / per_rep_capacity) if w.sum() else 0.0,
        kv_use_max=float(kv.max() / per_rep_capacity) if len(kv) else 0.0,
        queue_max=int(max(rec.queued)) if rec.queued else 0,
        preemptions=int(sched.preempted.sum()), requests_preempted=int((sched.preempted > 0).sum()),
        fabric_bytes={c: float(b) for c, b in zip(CLASSES, rec.bytes_by_class)} | _tier_bytes(sched),
        per_request=dict(ttft_ms=[round(float(x) * 1e3, 6) for x in ttft],
                         tpot_ms=[None if np.isnan(x) else round(float(x) * 1e3, 6) for x in tpot],
                         e2e_ms=[round(float(x) * 1e3, 6) for x in e2e],
                         preemptions=[int(x) for x in sched.preempted[done]]),
    )


def write_timeline(path: str, sched, plan, meta: dict) -> dict:
    """Chrome trace-event JSON: per replica a track of steps (a decode stretch of k identical-batch steps is one
    slice with its step count), and counters of KV in use and requests waiting."""
    rec = sched.rec
    events = [dict(ph="M", name="process_name", pid=0, args=dict(name=f"fabric-serve {meta.get('plan', '')}"))]
    for r in range(plan.replicas):
        events.append(dict(ph="M", name="thread_name", pid=0, tid=r, args=dict(name=f"replica {r}")))
    for i in range(len(rec.step_start_s)):
        ts, dur = rec.step_start_s[i] * 1e6, rec.step_dur_s[i] * 1e6
        r, k = rec.step_replica[i], rec.step_count[i]
        name = f"decode x{k}" if k > 1 else ("prefill+decode" if rec.step_prefill[i] else "decode")
        events.append(dict(ph="X", name=name, pid=0, tid=r, ts=ts, dur=dur,
                           args=dict(steps=k, batch=rec.step_batch[i], tokens_per_step=rec.step_tokens[i],
                                     prefill_tokens=rec.step_prefill[i])))
        events.append(dict(ph="C", name=f"replica {r} KV tokens", pid=0, ts=ts + dur,
                           args=dict(kv_tokens=rec.kv_used[i])))
        events.append(dict(ph="C", name=f"replica {r} queue", pid=0, ts=ts + dur,
                           args=dict(waiting=rec.queued[i])))
    doc = dict(traceEvents=events, displayTimeUnit="ms", metadata=meta)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as fh:
        json.dump(doc, fh)
    return dict(path=path, slices=len(rec.step_start_s), counter_events=2 * len(rec.step_start_s))
