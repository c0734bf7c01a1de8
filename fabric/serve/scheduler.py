"""Continuous batching in simulated time, as vLLM and SGLang run it, per attention group.

Each attention group (fabric.serve.plan) keeps its own waiting queue, running set and KV cache of `kv_capacity`
tokens. A replica's groups step together (one forward pass; the step model times it from the busiest group's
tokens, KV read and prefill pairs and the mean tokens per group, which the routed experts see).
A step's batch, per group: every running sequence that is decoding (one token each; decode first), then prompt
chunks of the sequences being prefilled and of newly admitted ones, up to `token_budget` tokens in the step and
`max_seqs` running sequences. A request is admitted when the KV its prefill will need fits next to what the running
sequences hold and what is promised to the prefills under way. When a step's decode tokens no longer fit, the newest
running sequence is preempted (its KV freed; it is prefilled again later, prompt and the tokens generated so far:
recompute) and counted; with a host-memory tier (fabric.serve.tier) its KV is offloaded there instead while
the tier has room, and loaded back when it is admitted again (swap): no token is computed twice. The step that
processes a prompt's last chunk emits the request's first token.

Prefix cache (a workload with shared prefixes, fabric.serve.workload): when a prompt's prefill completes, its shared
prefix's KV becomes a cache entry of the group (counted in its KV; the request keeps only the rest), and a later
request with that prefix starts its prefill after the cached tokens (reading them in attention). Entries no running
or swapped sequence uses are evicted least recently used first when KV runs short: offloaded to the host tier while
it has room (a later hit reloads them), else dropped.

Requests arrive (open loop) or are sent by users when their previous one finishes (closed loop) and are assigned to
a group at arrival by the balancer: round robin; the group with the least outstanding tokens (prompt still to
prefill + output still to generate); or KV-aware: a group that caches the request's prefix (in HBM or host memory)
if one has room for it, else the group with the most KV room once what it holds and what it owes are counted
(capacity - KV held - outstanding tokens), which also weighs the long contexts already running.

Python runs per step and per request, never per token: the running set is numpy arrays, and a stretch of decode-only
steps whose batch cannot change (no arrival, no finish, no KV shortage before its end) is taken at once, each step's
time from the step model at its own context (`StepModel.decode_times`).
"""
from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from fabric.errors import ConfigError
from fabric.serve.tier import OFFLOAD, RELOAD

BALANCERS = ("round_robin", "least_tokens", "kv_aware")


@dataclass
class Group:
    capacity: int
    index: int                                       # replica x groups per replica + its place in the replica
    waiting: list = field(default_factory=list)      # request ids, next first (preempted ones go to the front)
    running: list = field(default_factory=list)      # request ids in admission order
    prefilling: list = field(default_factory=list)   # the running ones whose prefill is not done, in order
    kv_used: int = 0
    host_used: int = 0                               # KV tokens of its swapped-out sequences and cache entries in
    #                                                  host memory
    cache: OrderedDict = field(default_factory=OrderedDict)       # prefix -> tokens cached in HBM (in kv_used), LRU
    host_cache: OrderedDict = field(default_factory=OrderedDict)  # prefix -> tokens cached in host memory
    pins: dict = field(default_factory=dict)         # prefix -> sequences using its HBM entry
    outstanding: int = 0                             # tokens still to process for the balancer


@dataclass
class Trace:
    """What a run records for the report: per request, and per step (or stretch of identical steps)."""
    step_start_s: list = field(default_factory=list)
    step_dur_s: list = field(default_factory=list)
    step_count: list = field(default_factory=list)    # steps in the stretch
    step_replica: list = field(default_factory=list)
    step_batch: list = field(default_factory=list)    # sequences in the batch (all groups of the replica)
    step_tokens: list = field(default_factory=list)   # tokens per step (all groups)
    step_prefill: list = field(default_factory=list)  # prompt tokens per step (all groups)
    kv_used: list = field(default_factory=list)       # KV tokens held by the replica after the stretch
    queued: list = field(default_factory=list)        # requests waiting in the replica after the stretch
    itl_s: list = field(default_factory=list)         # arrays of inter-token gaps (one per decode token)
    bytes_by_class: np.ndarray = field(default_factory=lambda: np.zeros(3))
    tier_bytes: np.ndarray = field(default_factory=lambda: np.zeros(2))   # KV offloaded, reloaded (host tier)
    tier_s: float = 0.0                               # steps' time spent waiting for offloads and reloads
    prefix_hit_tokens: int = 0                        # prompt tokens not prefilled: read from a cached prefix
    prefix_host_hits: int = 0                         # of those hits, the ones whose entry was reloaded from host
    comm_s: float = 0.0                               # exposed communication, summed over the steps
    group_kv_s: dict = field(default_factory=dict)    # attention group -> KV tokens held x seconds (its mean KV)
    group_batch_s: dict = field(default_factory=dict)  # attention group -> running sequences x seconds


class Scheduler:
    def __init__(self, workload, plan, stepmodel, kv_capacity: int, *, token_budget: int = 8192,
                 max_seqs: int = 1024, balance: str = "least_tokens", progress=None, stretch: bool = True,
                 tier=None):
        """stretch=False: one step at a time, never a stretch of decode steps at once (the reference the tests
        compare the stretches with). tier: a fabric.serve.tier.HostTier (swap to host memory instead of
        recompute)."""
        if balance not in BALANCERS:
            raise ConfigError(f"--balance {balance!r} is not one of {', '.join(BALANCERS)}")
        if not 1 <= max_seqs <= token_budget:
            raise ConfigError(f"--max-seqs {max_seqs} must be in [1, --token-budget {token_budget}] (every running "
                              f"sequence decodes one token a step)")
        self.wl, self.plan, self.sm = workload, plan, stepmodel
        self.budget, self.max_seqs, self.balance = token_budget, max_seqs, balance
        self.progress, self.stretch, self.tier = progress, stretch, tier
        n = workload.n
        need = workload.prompt_tokens + workload.output_tokens
        worst = int(np.argmax(need))
        if need[worst] > kv_capacity:
            raise ConfigError(f"request {worst} needs {int(need[worst])} tokens of KV (prompt "
                              f"{int(workload.prompt_tokens[worst])} + output {int(workload.output_tokens[worst])}) "
                              f"but an attention group holds {kv_capacity}; it could never finish: use a plan with "
                              f"more KV per group (attn=dp, smaller weights) or drop such requests from the workload")
        self.groups = [[Group(kv_capacity, r * plan.dp + g) for g in range(plan.dp)] for r in range(plan.replicas)]
        self.every_group = [grp for rep in self.groups for grp in rep]          # in index order
        self.free_at = np.zeros(plan.replicas)           # when each replica's current step ends
        self.prompt = workload.prompt_tokens.astype(np.int64)
        self.out = workload.output_tokens.astype(np.int64)
        self.arrival = np.full(n, np.nan)
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.group_of = np.full(n, -1, np.int64)
        self.target = self.prompt.copy()                 # prefill target: prompt (+ generated, after a preemption)
        # a disaggregated decode pool's requests arrive prefilled, their first token made (fabric.serve.disagg)
        self.done_prefill = self.target.copy() if workload.prefilled else np.zeros(n, np.int64)
        self.generated = np.full(n, int(workload.prefilled), np.int64)
        self.kv = np.zeros(n, np.int64)
        self.preempted = np.zeros(n, np.int64)          # preemptions by recompute
        self.host = np.zeros(n, np.int64)               # KV tokens in host memory (a swapped-out sequence)
        self.swapped = np.zeros(n, np.int64)            # preemptions by swap
        self.moves = []                                 # this step's (group, tokens, direction) for the tier
        self.pid = workload.prefix_id                   # shared prefixes (None: the workload has none)
        self.plen = workload.prefix_tokens
        self.shared = np.zeros(n, np.int64)             # tokens of its prefix's cache entry a sequence reads
        self.prefill_start = np.full(n, np.nan)         # start of the step that ran its (last) prefill's first chunk
        self.ready_at = np.zeros(n)                     # a handed-over sequence decodes once its KV lands (couple)
        self.held: dict = {}                            # finished prefills whose KV waits for the decode pool: group
        self.now = 0.0                                  # start of the step being planned
        self.heap: list = []
        # set by fabric.serve.disagg's coupling of a prefill and a decode pool (standalone: None)
        self.on_done = None        # (rid, t): a request finished here; replaces the closed loop's next send
        self.on_admit = None       # (rid, t) -> t its KV lands: a handed-over request was admitted
        self.keeps_kv = None       # (rid) -> whether a finished request's KV stays until release()
        self.others_next = None    # () -> the earliest time the other pool may send a request here
        self.last_chunk = np.zeros(n, np.int64)         # tokens of the chunk that completed its prefill
        self.rr = 0
        self.joined = 0                                  # prefilled requests admitted while planning a step
        self.rec = Trace()
        self.finished = 0

    # ---------------------------------------------------------------- arrivals

    def _arrivals(self) -> list:
        """The heap of (time, request) known at the start: every open-loop arrival, or a closed loop's first
        wave (the rest follow finishes)."""
        wl = self.wl
        if wl.users:
            first = min(wl.users, wl.n)
            return [(0.0, i) for i in range(first)]
        return [(float(t), i) for i, t in enumerate(wl.arrival_s)]

    def _assign(self, rid: int, t: float) -> None:
        if self.balance == "round_robin":
            grp = self.every_group[self.rr % len(self.every_group)]
            self.rr += 1
        elif self.balance == "kv_aware":
            grp = max(self.every_group, key=self._room)
            if self.pid is not None:
                p, need = int(self.pid[rid]), int(self.target[rid] + self.out[rid])
                hold = [x for x in self.every_group if (p in x.cache or p in x.host_cache) and self._room(x) >= need]
                if hold:
                    grp = max(hold, key=self._room)
        else:
            grp = min(self.every_group, key=lambda x: x.outstanding)
        grp.waiting.append(rid)
        grp.outstanding += int(self.target[rid] - self.done_prefill[rid] + self.out[rid] - self.generated[rid])
        self.arrival[rid] = t
        self.group_of[rid] = grp.index
        r = grp.index // self.plan.dp
        self.free_at[r] = t if self.free_at[r] == np.inf else max(self.free_at[r], t)

    @staticmethod
    def _room(grp: Group) -> int:
        """KV tokens a group has left once its running sequences and its outstanding work are counted."""
        return grp.capacity - grp.kv_used - grp.outstanding

    def _busy(self, r: int) -> bool:
        return any(g.waiting or g.running for g in self.groups[r])

    # ---------------------------------------------------------------- one replica's step

    def _preempt_newest(self, grp: Group) -> None:
        """Free the newest running sequence's KV: offloaded to the host tier while it has room (reloaded when the
        sequence is admitted again), else dropped and prefilled again later (prompt + tokens so far)."""
        rid = grp.running.pop()
        if rid in grp.prefilling:
            grp.prefilling.remove(rid)
        own = int(self.kv[rid])
        held = own + int(self.shared[rid])           # its prefix goes too: a swapped sequence pins no entry
        if self.tier is not None and own and self._host_room(grp, held):
            self._unpin(grp, rid)
            grp.kv_used -= own
            grp.host_used += held
            self.kv[rid] = 0
            self.host[rid] = held
            self.moves.append((int(self.group_of[rid]), held, OFFLOAD))
            self.swapped[rid] += 1
            grp.waiting.insert(0, rid)
            return
        left_before = int(self.target[rid] - self.done_prefill[rid])
        self._unpin(grp, rid)
        grp.kv_used -= int(self.kv[rid])
        self.kv[rid] = 0
        self.done_prefill[rid] = 0
        self.target[rid] = self.prompt[rid] + self.generated[rid]
        grp.outstanding += int(self.target[rid]) - left_before
        self.preempted[rid] += 1
        grp.waiting.insert(0, rid)

    # ---------------------------------------------------------------- the prefix cache and the host tier's room

    def _prefix_of(self, rid: int) -> int:
        return -1 if self.pid is None else int(self.pid[rid])

    def _prefix_hit(self, grp: Group, rid: int) -> tuple[int, int]:
        """(prompt tokens a fresh prefill of rid can skip, tokens of the entry to reload from host memory first)."""
        p = self._prefix_of(rid)
        if p < 0 or self.done_prefill[rid] or self.host[rid]:
            return 0, 0
        cap = int(min(self.plen[rid], self.target[rid] - 1))     # at least one token computed: it makes the logits
        entry = grp.cache.get(p, grp.host_cache.get(p, 0))
        hit = max(min(entry, cap), 0)
        # the entry it pins (which may be longer than its own prefix) and all its own KV must fit alone
        if not hit or entry + self.target[rid] - hit + self.out[rid] - self.generated[rid] > grp.capacity:
            return 0, 0
        return hit, (entry if p in grp.host_cache else 0)

    def _use_prefix(self, grp: Group, rid: int, hit: int) -> None:
        """rid starts its prefill after `hit` cached tokens of its prefix (reloaded first if in host memory)."""
        p = int(self.pid[rid])
        if p in grp.host_cache:
            t = grp.host_cache.pop(p)
            grp.host_used -= t
            grp.kv_used += t
            grp.cache[p] = t
            self.moves.append((int(self.group_of[rid]), t, RELOAD))
            self.rec.prefix_host_hits += 1
        grp.cache.move_to_end(p)
        grp.pins[p] = grp.pins.get(p, 0) + 1
        self.shared[rid] = hit
        self.done_prefill[rid] = hit
        grp.outstanding -= hit
        self.rec.prefix_hit_tokens += hit

    def _share_prefix(self, grp: Group, rid: int) -> None:
        """rid's prefill is done: its prefix's KV becomes (or grows) the group's cache entry, which it then reads."""
        p = self._prefix_of(rid)
        if p < 0:
            return
        plen = int(min(self.plen[rid], self.target[rid]))
        old = grp.cache.get(p, 0)
        if plen <= self.shared[rid] or (p in grp.host_cache and not old):
            return                                   # nothing new to share (or its entry is in host memory)
        if not self.shared[rid]:
            grp.pins[p] = grp.pins.get(p, 0) + 1
        grp.cache[p] = max(old, plen)
        grp.cache.move_to_end(p)
        own = plen - int(self.shared[rid])           # its own copy of the prefix goes: the entry holds it
        self.kv[rid] -= own
        grp.kv_used += grp.cache[p] - old - own
        self.shared[rid] = plen

    def _unpin(self, grp: Group, rid: int) -> None:
        if self.shared[rid]:
            p = int(self.pid[rid])
            grp.pins[p] -= 1
            self.shared[rid] = 0

    def _evict(self, grp: Group, short: int, keep: int = -1) -> bool:
        """Free `short` KV tokens from cache entries no sequence uses (least recently used first; offloaded to the
        host tier while it has room); False, evicting nothing, if they cannot."""
        free = [p for p in grp.cache if not grp.pins.get(p, 0) and p != keep]
        if sum(grp.cache[p] for p in free) < short:
            return False
        for p in free:
            if short <= 0:
                break
            t = grp.cache.pop(p)
            grp.kv_used -= t
            short -= t
            if self.tier is not None and self._host_room(grp, t, keep):
                grp.host_cache[p] = t
                grp.host_used += t
                self.moves.append((grp.index, t, OFFLOAD))
        return True

    def _host_room(self, grp: Group, tokens: int, keep: int = -1) -> bool:
        """Whether `tokens` fit in the group's host tier, dropping its least recently used cache entries if they
        must (never a swapped sequence's KV, nor the entry `keep` a request is about to reload)."""
        limit = self.tier.tokens_per_group
        droppable = [p for p in grp.host_cache if p != keep]
        if tokens > limit - grp.host_used + sum(grp.host_cache[p] for p in droppable):
            return False
        for p in droppable:
            if grp.host_used + tokens <= limit:
                break
            grp.host_used -= grp.host_cache.pop(p)
        return True

    def _decoding(self, grp: Group) -> np.ndarray:
        ids = np.asarray(grp.running, np.int64)
        if not len(ids):
            return ids
        return ids[(self.done_prefill[ids] >= self.target[ids]) & (self.ready_at[ids] <= self.now)]

    def _plan_group(self, grp: Group):
        """(decode ids, [(id, chunk)]) of one group's next step: decode first, then the prefills under way, then
        admissions; preempts the newest sequences while the step's tokens would not fit in the KV cache."""
        while True:
            dec = self._decoding(grp)
            left = self.budget - len(dec)
            chunks = []
            for rid in grp.prefilling:               # prefills under way first, in admission order
                if left <= 0:
                    break
                c = min(int(self.target[rid] - self.done_prefill[rid]), left)
                chunks.append((rid, c))
                left -= c
            short = grp.kv_used + len(dec) + sum(c for _, c in chunks) - grp.capacity
            if short <= 0 or not grp.running:
                break
            if not self._evict(grp, short):
                self._preempt_newest(grp)
        promised = sum(int(self.target[r] - self.done_prefill[r]) for r in grp.prefilling)
        while grp.waiting and left > 0 and len(grp.running) < self.max_seqs:
            rid = grp.waiting[0]
            hit, entry_in_host = self._prefix_hit(grp, rid)
            todo = int(self.target[rid] - self.done_prefill[rid]) - hit  # prompt tokens still to prefill
            # the KV it brings: swapped out (in host memory), or handed over whole (disaggregated), or none; and
            # its prefix's cache entry if that is in host memory
            brings = int(self.host[rid]) or (int(self.target[rid]) if todo <= 0 and not hit else 0)
            short = grp.kv_used + len(dec) + promised + brings + entry_in_host + todo - grp.capacity
            if short > 0 and not self._evict(grp, short, keep=self._prefix_of(rid) if hit else -1):
                break
            grp.waiting.pop(0)
            grp.running.append(rid)
            if hit:
                self._use_prefix(grp, rid, hit)
            handed = self.on_admit is not None and todo <= 0 and not self.host[rid] and not self.ready_at[rid]
            if self.host[rid]:                        # swapped out: reloaded before this step's forward pass
                self.moves.append((int(self.group_of[rid]), brings, RELOAD))
                grp.host_used -= brings
                self.host[rid] = 0
            self.kv[rid] = brings
            grp.kv_used += brings
            if todo <= 0:                             # its KV is all here: decodes from the next step
                if handed:                            # its KV moves from the prefill pool now: once it lands
                    self.ready_at[rid] = self.on_admit(rid, self.now)
                else:
                    self.joined += 1
                continue
            grp.prefilling.append(rid)
            promised += todo
            c = min(todo, left)
            chunks.append((rid, c))
            left -= c
        return dec, chunks

    def _step(self, r: int) -> None:
        t = self.now = self.free_at[r]
        self.joined = 0
        self.moves = []
        plans = [self._plan_group(g) for g in self.groups[r]]
        if not any(len(d) or c for d, c in plans):
            if not self.joined:
                return
            plans = [self._plan_group(g) for g in self.groups[r]]     # the prefilled ones just admitted decode
        if self.stretch and not self.joined and not self.moves and not any(c for _, c in plans):
            return self._decode_stretch(r, t, [d for d, _ in plans])
        sizes = [len(d) + sum(c for _, c in chunks) for d, chunks in plans]
        dec_kv = max(int(self.kv[d].sum() + self.shared[d].sum()) for d, _ in plans)
        # the group with the most prefill attention work: its prompt tokens, prompts and (query, key) pairs
        pre = max(((sum(c for _, c in chunks), len(chunks),
                    sum(c * int(self.done_prefill[rid]) + c * (c + 1) / 2 for rid, c in chunks))
                   for _, chunks in plans), key=lambda x: x[2])
        dur_us, comm_us, nbytes = self.sm.step(max(sizes), dec_kv, pre[2], mean_tokens=sum(sizes) / len(sizes),
                                               prefill=pre[0], prompts=pre[1])
        if self.moves:                                # the tier's moves run first; the step waits for them
            tier_us = self.tier.time_us(self.moves)
            dur_us, comm_us = dur_us + tier_us, comm_us + tier_us
            self.rec.tier_s += tier_us / 1e6
            self.rec.tier_bytes += self.tier.bytes(self.moves)
        end = t + dur_us / 1e6
        for grp, (dec, chunks) in zip(self.groups[r], plans):
            self._advance_decode(grp, dec, 1, end)
            for rid, c in chunks:
                if self.done_prefill[rid] == self.shared[rid]:      # its prefill's first chunk
                    self.prefill_start[rid] = t
                self.done_prefill[rid] += c
                self.last_chunk[rid] = c
                self.kv[rid] += c
                grp.kv_used += c
                grp.outstanding -= c
                if self.done_prefill[rid] >= self.target[rid]:      # the prompt's last chunk: a token
                    grp.prefilling.remove(rid)
                    self._share_prefix(grp, rid)
                    if np.isnan(self.first[rid]) and not self.wl.prefilled:   # (a decode pool's: the prefill's)
                        self.first[rid] = end
                    self.generated[rid] += 1
                    grp.outstanding -= 1
                    if self.generated[rid] >= self.out[rid]:
                        self._finish(grp, rid, end)
        self.rec.itl_s.append(np.full(sum(len(d) for d, _ in plans), dur_us / 1e6))
        self._record(r, t, dur_us / 1e6, 1, sum(len(d) + len(c) for d, c in plans), sum(sizes),
                     sum(sizes) - sum(len(d) for d, _ in plans), nbytes, comm_us / 1e6)
        self.free_at[r] = end

    def _decode_stretch(self, r: int, t: float, decs: list) -> None:
        """k decode-only steps at once: as many as leave the batch unchanged (no finish before the last, KV for
        every token, no arrival before a step's start)."""
        groups = self.groups[r]
        k = min(int((self.out[d] - self.generated[d]).min()) for d in decs if len(d))
        for grp, d in zip(groups, decs):
            if len(d):
                k = min(k, (grp.capacity - grp.kv_used) // len(d))
        k = max(k, 1)
        n = max(len(d) for d in decs)
        kv0 = np.array([int(self.kv[d].sum() + self.shared[d].sum()) for d in decs], np.float64)
        grow = np.array([len(d) for d in decs], np.float64)
        steps = np.arange(k)
        kv = (kv0[:, None] + grow[:, None] * steps[None, :]).max(axis=0)      # busiest group's read per step
        mean = sum(len(d) for d in decs) / len(decs)
        dur_us, comm_us = self.sm.decode_times(n, kv, mean_tokens=mean)
        dur_s = dur_us / 1e6
        starts = t + np.concatenate(([0.0], np.cumsum(dur_s)[:-1]))
        horizon = self.next_arrival
        landing = [self.ready_at[rid] for grp in groups for rid in grp.running if self.ready_at[rid] > t]
        if self.others_next is not None:
            landing.append(self.others_next())
        if landing:                              # a handed-over sequence joins, or the other pool sends one
            horizon = min(landing) if horizon is None else min(horizon, min(landing))
        if self.wl.users and self.on_done is None:        # a closed loop's next arrival can come from another replica's finish
            others = [self.free_at[x] for x in range(self.plan.replicas) if x != r and self._busy(x)]
            horizon = min([h for h in [horizon] + others if h is not None], default=None)
        if horizon is not None:
            k = max(1, int(np.searchsorted(starts, horizon, side="left")))     # steps that start before it
            dur_s, starts, comm_us = dur_s[:k], starts[:k], comm_us[:k]
        end = t + float(dur_s.sum())
        for grp, d in zip(groups, decs):
            self._advance_decode(grp, d, k, end)
        total = sum(len(d) for d in decs)
        self.rec.itl_s.append(np.repeat(dur_s, total))
        _, _, nbytes = self.sm.step(n, int(kv[0]), 0.0, mean_tokens=mean)
        self._record(r, t, end - t, k, total, total, 0, tuple(b * k for b in nbytes), float(comm_us.sum()) / 1e6)
        self.free_at[r] = end

    def _advance_decode(self, grp: Group, dec: np.ndarray, k: int, end: float) -> None:
        """k decode steps of `dec` ending at `end` (k is never past a sequence's last token)."""
        if not len(dec):
            return
        self.generated[dec] += k
        self.kv[dec] += k
        grp.kv_used += k * len(dec)
        grp.outstanding -= k * len(dec)
        for rid in dec[self.generated[dec] >= self.out[dec]]:
            self._finish(grp, int(rid), end)

    def _finish(self, grp: Group, rid: int, t: float) -> None:
        grp.running.remove(rid)
        self._unpin(grp, rid)
        self.finish[rid] = t
        self.finished += 1
        if self.keeps_kv is not None and self.keeps_kv(rid):     # its KV waits for the decode pool: release()
            self.held[rid] = grp
        else:
            grp.kv_used -= int(self.kv[rid])
            self.kv[rid] = 0
        if self.on_done is not None:
            self.on_done(rid, t)
        else:
            self.next_user(rid, t)

    def next_user(self, rid: int, t: float) -> None:
        """A closed loop's user sends its next request after thinking."""
        wl = self.wl
        if wl.users:
            nxt = rid + wl.users
            send = t + wl.think_s
            if nxt < wl.n and (wl.duration_s is None or send < wl.duration_s):
                heapq.heappush(self.heap, (send, nxt))

    def push(self, t: float, rid: int) -> None:
        """Request rid arrives at t (sent by the other pool)."""
        heapq.heappush(self.heap, (t, rid))

    def release(self, rid: int, t: float) -> None:
        """A held request's KV has left: its group's memory is free again (and a replica waiting for it wakes)."""
        grp = self.held.pop(rid)
        grp.kv_used -= int(self.kv[rid])
        self.kv[rid] = 0
        r = int(self.group_of[rid]) // self.plan.dp
        if self.free_at[r] == np.inf:
            self.free_at[r] = t

    def _record(self, r, t, dur, k, batch, tokens, prefill, nbytes, comm_s) -> None:
        rec = self.rec
        rec.comm_s += comm_s
        rec.step_start_s.append(t)
        rec.step_dur_s.append(dur)
        rec.step_count.append(k)
        rec.step_replica.append(r)
        rec.step_batch.append(batch)
        rec.step_tokens.append(tokens)
        rec.step_prefill.append(prefill)
        rec.kv_used.append(sum(g.kv_used for g in self.groups[r]))
        rec.queued.append(sum(len(g.waiting) for g in self.groups[r]))
        rec.bytes_by_class += np.asarray(nbytes)
        for grp in self.groups[r]:                     # the KV a group holds after the stretch, over its time
            rec.group_kv_s[grp.index] = rec.group_kv_s.get(grp.index, 0.0) + grp.kv_used * dur
            rec.group_batch_s[grp.index] = rec.group_batch_s.get(grp.index, 0.0) + len(grp.running) * dur

    # ---------------------------------------------------------------- the loop

    @property
    def next_arrival(self):
        return self.heap[0][0] if self.heap else None

    def start(self, arrivals: bool = True) -> None:
        """Before the first event; arrivals=False: requests come only by push() (a coupled decode pool)."""
        self.heap = self._arrivals() if arrivals else []
        heapq.heapify(self.heap)
        self._shown = -1

    def next_time(self) -> float:
        """When the next event (an arrival or a replica's step) happens; inf when there is none."""
        busy = [self.free_at[r] for r in range(self.plan.replicas) if self._busy(r)]
        return min(min(busy, default=np.inf), self.heap[0][0] if self.heap else np.inf)

    def advance(self) -> None:
        """The next event: an arrival (first, at a tie) or the earliest replica's step."""
        busy = [r for r in range(self.plan.replicas) if self._busy(r)]
        t_busy = min((self.free_at[r] for r in busy), default=np.inf)
        if self.heap and self.heap[0][0] <= t_busy:
            t, rid = heapq.heappop(self.heap)
            self._assign(rid, t)
            return
        r = min(busy, key=lambda x: self.free_at[x])
        before = len(self.rec.step_start_s)
        self._step(r)
        if len(self.rec.step_start_s) == before:     # nothing could run: wait for an arrival or a landing KV
            landing = [self.ready_at[rid] for g in self.groups[r] for rid in g.running
                       if self.ready_at[rid] > self.free_at[r]]
            wake = min(landing + ([self.heap[0][0]] if self.heap else []), default=np.inf)
            if wake == np.inf and self.keeps_kv is None:
                raise RuntimeError("scheduler stalled with work queued and nothing arriving")  # a bug, not input
            self.free_at[r] = max(self.free_at[r], wake)   # inf: blocked until release() frees KV
        if self.progress is not None and self.finished != self._shown:
            self._shown = self.finished
            self.progress(self.finished, self.wl.n)

    def run(self) -> Trace:
        self.start()
        while self.next_time() < np.inf:
            self.advance()
        return self.rec
