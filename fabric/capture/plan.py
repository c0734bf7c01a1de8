"""Parallel plans: shard a logical graph over ranks, cost every kernel on a chip, insert the collectives.

Plan (tp, ep) over n_ranks = max(tp, ep) ranks:
- ep == 1: full tensor parallelism over tp ranks. Column-parallel GEMMs split their outputs, row-parallel ones their
  inputs (an all-reduce of the partial sums follows), attention splits heads (GQA kv heads are replicated when
  tp > kv_heads), experts are sharded by their intermediate dimension on every rank, the embedding and LM head are
  vocab-parallel (all-reduce after the embedding, all-gather of the logits after the LM head).
- ep == n_ranks (tp divides it): attention and dense MLPs are tensor-parallel within groups of tp ranks
  (dp = n_ranks / tp data-parallel replicas of attention, each with ceil(batch / dp) padded sequences); each MoE
  layer is expert-parallel over all ranks: rank r owns experts [r E/n, (r+1) E/n). After the attention all-reduce
  each TP rank takes a slice of ceil(b / tp) token slots, routes them, dispatches each token once to every rank
  that owns one of its experts (all-to-all), runs its local experts as a grouped GEMM, combines the outputs back
  (all-to-all), adds the shared expert (replicated on every rank) and all-gathers the slices over the TP group.

Mixed serving steps (Plan.prefill_tokens > 0; docs/compute-model.md §Mixed steps): each attention group runs its
ceil(batch / dp) decode tokens and prefill_tokens prompt tokens in one forward pass, as vLLM / SGLang batch chunked
prefill. Token-linear ops (norms, GEMMs, activations, router, top-k, experts, embedding) and the collectives after
them cover all of the step's tokens, and MoE routing dp x that many; the decode attention (and MLA's weight
absorption around it) the decode tokens; a prefill attention after it the prompt tokens; the LM head the decode
tokens and the last token of each prompt sequence (with_prefill, op_tokens).

Kernel durations: the chip profile's roofline model (ChipProfile.kernel_time_ns) by default, or with
Plan(cost_model="shape") the shape-aware model of fabric.capture.kernels (docs/compute-model.md).
Plan(runtime="eager") expands every logical op into a plain framework's kernels (fabric.capture.runtime), one row
each on one stream, costed by the shape model; "aten" ops (the torch engine's eager graph) are one kernel each.

Collective sizes (coll_bytes) follow docs/trace-format.md: all-reduce/broadcast the buffer size, all-gather and
reduce-scatter one rank's chunk, all-to-all the chunk sent to each peer (padded to the largest of the step, as a
fixed-buffer low-latency dispatch is).
"""
from __future__ import annotations

import copy
import functools
import math
import threading
from dataclasses import dataclass

import numpy as np

from fabric.capture.chips import DTYPE_BYTES, ChipProfile
from fabric.capture.graph import LogicalOp, prefill_ops
from fabric.capture.kernels import COMPUTE_DTYPE, LAUNCH_MODES, logical_op_time
from fabric.capture.runtime import check_runtime, cost_kernels, eager_kernels, host_timeline
from fabric.capture.spec import ModelSpec
from fabric.errors import ConfigError
from fabric.trace import (COLL_ALLGATHER, COLL_ALLREDUCE, COLL_ALLTOALL, KIND_COLLECTIVE, KIND_COMPUTE, OpTable,
                          Trace)

ACT = 2  # activations and KV cache are BF16
WEIGHT_DTYPES = ("bf16", "fp8", "int8", "int4")
COST_MODELS = ("roofline", "shape")
MAX_STEP_TOKENS = 65536   # tokens (decode + prefill) one attention group processes in one step
MAX_CONTEXT = 10_000_000


@dataclass(frozen=True)
class Plan:
    tp: int
    ep: int = 1
    batch: int = 1
    context: int = 4096
    weight_dtype: str = "bf16"
    dispatch_dtype: str = "fp8"   # EP dispatch payload: fp8 + one fp32 scale per 128 values (DeepEP), or bf16
    seed: int = 0                 # routing oracle
    cost_model: str = "roofline"  # "roofline": ChipProfile.kernel_time_ns; "shape": fabric.capture.kernels
    launch: str | None = None     # shape model only: graph | eager | queue (None: the chip profile's mode; the
    #                               eager runtime: eager)
    runtime: str = "fused"        # fused: a serving engine's kernels (one per logical op); eager: one kernel per
    #                               framework op (fabric.capture.runtime)
    # chunked prefill in the same step (module docstring), per attention group, next to its ceil(batch / dp) decode
    # tokens; all 0: a decode step
    prefill_tokens: int = 0       # prompt tokens the step processes
    prefill_context: float = 0    # mean keys a prompt token attends to: its sequence's prefix + its place in the chunk
    prefill_kv_tokens: int = 0    # KV tokens the prefill attention reads: each prompt sequence's prefix + chunk, summed
    prefill_seqs: int = 1         # sequences the prompt tokens belong to (the LM head runs on each one's last token)

    @property
    def n_ranks(self) -> int:
        return max(self.tp, self.ep)

    @property
    def dp(self) -> int:
        return self.n_ranks // self.tp

    @property
    def b_local(self) -> int:
        """Decode tokens of each attention group (the batch padded to a multiple of dp)."""
        return -(-self.batch // self.dp)

    def check(self, spec: ModelSpec) -> None:
        for k in ("tp", "ep"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1 or v > 4096:
                raise ConfigError(f"--{k}={v!r} must be an integer in [1, 4096]")
        if not isinstance(self.batch, int) or self.batch < 1:
            raise ConfigError(f"--batch={self.batch!r} must be a positive integer")
        for k in ("prefill_tokens", "prefill_kv_tokens", "prefill_seqs"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 0:
                raise ConfigError(f"{k}={v!r} must be a non-negative integer")
        c = self.prefill_context
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0:
            raise ConfigError(f"prefill_context={c!r} must be a non-negative number (mean keys per prompt token)")
        if not isinstance(self.context, int) or self.context < 0 or self.context > MAX_CONTEXT:
            raise ConfigError(f"--context={self.context!r} must be an integer in [0, {MAX_CONTEXT}]")
        if self.ep > 1 and self.ep % self.tp:
            raise ConfigError(f"--ep={self.ep} must be a multiple of --tp={self.tp} (the plan puts tp-way attention "
                              f"groups inside one ep-way expert-parallel group)")
        if self.ep > 1 and self.tp > self.ep:
            raise ConfigError(f"--ep={self.ep} smaller than --tp={self.tp} is not supported; use --ep 1 or "
                              f"--ep >= --tp")
        if self.ep > 1 and not spec.is_moe:
            raise ConfigError(f"--ep={self.ep} needs a mixture-of-experts model; {spec.name} is dense")
        if self.ep > 1 and spec.n_experts % self.ep:
            raise ConfigError(f"--ep={self.ep} must divide the {spec.n_experts} routed experts of {spec.name}")
        if spec.heads % self.tp:
            raise ConfigError(f"--tp={self.tp} must divide the {spec.heads} attention heads of {spec.name}")
        if self.weight_dtype not in WEIGHT_DTYPES:
            raise ConfigError(f"weight dtype {self.weight_dtype!r} is not supported; use one of "
                              f"{', '.join(WEIGHT_DTYPES)}")
        if self.dispatch_dtype not in ("bf16", "fp8"):
            raise ConfigError(f"dispatch dtype {self.dispatch_dtype!r} is not supported; use bf16 or fp8")
        if self.cost_model not in COST_MODELS:
            raise ConfigError(f"cost model {self.cost_model!r} is not one of {', '.join(COST_MODELS)}")
        if self.launch is not None and self.launch not in LAUNCH_MODES:
            raise ConfigError(f"launch mode {self.launch!r} is not one of {', '.join(LAUNCH_MODES)}")
        check_runtime(self.runtime)
        if self.runtime == "eager" and self.cost_model != "shape":
            raise ConfigError("the eager runtime is costed by the shape-aware model: use --cost-model shape (the "
                              "roofline model has no per-kernel launch modes or split-K reduce kernels)")
        self._check_tokens()

    def _check_tokens(self) -> None:
        T, K, C, S = self.prefill_tokens, self.prefill_kv_tokens, self.prefill_context, self.prefill_seqs
        step = self.b_local + T
        if step > MAX_STEP_TOKENS:
            raise ConfigError(f"{step} tokens per step in each attention group ({self.b_local} decode + {T} prefill) "
                              f"exceed {MAX_STEP_TOKENS}: use a smaller batch or prefill chunk, or more attention "
                              f"groups (--ep / --tp)")
        if not T:
            if K or C:
                raise ConfigError(f"prefill_kv_tokens={K} / prefill_context={C} describe prefill tokens: give "
                                  f"prefill_tokens > 0 or leave them 0")
            return
        if self.runtime != "fused":
            raise ConfigError("prefill tokens are costed for the fused runtime only (the eager template is a decode "
                              "step): use --runtime fused")
        if not 1 <= S <= T:
            raise ConfigError(f"prefill_seqs={S} must be in [1, prefill_tokens={T}]: each prompt sequence brings "
                              f"at least one token")
        if K < T or K > S * MAX_CONTEXT:
            raise ConfigError(f"prefill_kv_tokens={K} must be in [prefill_tokens={T}, {MAX_CONTEXT} x prefill_seqs]: "
                              f"the prompt sequences' prefixes + chunks, each chunk's own keys included")
        if not 1 <= C <= K:
            raise ConfigError(f"prefill_context={C} must be in [1, prefill_kv_tokens={K}]: the mean keys a prompt "
                              f"token attends to (its prefix + its place in the chunk)")


# ---------------------------------------------------------------- routing oracle

_KEPT_LOCK = threading.Lock()
KEEP_ROWS = 1 << 18   # rows of one layer's routing kept between calls (4 MiB at topk 8; 58 MoE layers: 232 MiB); a
#                       longer draw is extended from the kept generator state for that call only


def route(spec: ModelSpec, layer: int, n_tokens: int, seed: int) -> np.ndarray:
    """Seeded routing oracle: [n_tokens, topk] expert ids (sorted in each row), group-limited as the model's router is.

    Meta tensors hold no values, so routing cannot be computed; both engines draw it from here. Each token picks
    topk_group of n_group expert groups uniformly, then topk distinct experts uniformly inside them, as

        groups = rng.choice(n_group, topk_group, replace=False)
        row = sort(rng.choice(<the experts of those groups, group by group>, topk, replace=False))

    per token, in order, from one generator per (layer, seed): fewer tokens are a prefix of more. _draw_rows replays
    that loop on blocks of the generator's words at once (identical rows, ~100x faster), and the first KEEP_ROWS rows
    of each (spec, layer, seed) are kept and extended (the serving experiments capture many steps)."""
    return _routed(spec, layer, n_tokens, seed).astype(np.int64)


def _routed(spec: ModelSpec, layer: int, n: int, seed: int) -> np.ndarray:
    """route's rows, read-only, in the small dtype they are kept in (lower reads them without a copy)."""
    kept = _kept(spec, layer, seed)
    with _KEPT_LOCK:           # one extension at a time: the kept generator is shared
        rng, rows = kept
        want = min(n, KEEP_ROWS)
        if len(rows) < want:
            rows = np.concatenate([rows, _draw_rows(spec, rng, want - len(rows))])
            rows.flags.writeable = False
            kept[1] = rows
        if n <= len(rows):
            return rows[:n]
        rng = copy.deepcopy(rng)
    return np.concatenate([rows, _draw_rows(spec, rng, n - len(rows))])


@functools.lru_cache(maxsize=128)
def _kept(spec: ModelSpec, layer: int, seed: int) -> list:
    """[the layer's generator, the rows drawn from it so far] (route)."""
    return [np.random.default_rng([seed, layer, 0x5EED]), np.empty((0, spec.topk), _id_dtype(spec))]


def _id_dtype(spec: ModelSpec):
    return np.int16 if spec.n_experts <= np.iinfo(np.int16).max else np.int32


def _draw_rows(spec: ModelSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """The next n (>= 1) rows of route's per-token loop, 65536 tokens at a time (bounded temporaries)."""
    return np.concatenate([_draw_block(spec, rng, min(1 << 16, n - s)) for s in range(0, n, 1 << 16)])


def _draw_block(spec: ModelSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """The next n rows of route's per-token loop, drawn for all n tokens at once.

    Generator.choice(pop, size, replace=False) with size <= 200 is Floyd's algorithm (numpy shuffles the tail of
    the population instead only when pop > 10000 and size > pop / 50): for j in pop-size .. pop-1, v = a bounded
    integer in [0, j], or j if v was picked already; then a Fisher-Yates shuffle of the picks (for i in size-1 .. 1:
    swap i with a bounded integer in [0, i]). Each bounded integer in [0, j] (j >= 1; j == 0 draws nothing) is
    Lemire's method on the generator's next 32-bit word w: (w * (j+1)) >> 32, redrawn while (w * (j+1)) mod 2^32 <
    2^32 mod (j+1). So a token consumes a fixed sequence of words but for those rare rejections (< 1e-7 per word
    here): the block is cut into tokens, a rejected word is dropped (the next word serves the same draw) and the
    block re-cut; then each draw is one numpy operation over all tokens. The second shuffle only consumes words:
    the row is sorted."""
    E, k, G, kg = spec.n_experts, spec.topk, max(spec.n_group, 1), max(spec.topk_group, 1)
    per = E // G
    m = kg * per
    g_floyd, g_shuffle = range(G - kg, G), range(kg - 1, 0, -1)
    e_floyd, e_shuffle = range(m - k, m), range(k - 1, 0, -1)
    bounds = [j for j in g_floyd if j] + list(g_shuffle) + [j for j in e_floyd if j] + list(e_shuffle)
    D = len(bounds)
    span = np.array(bounds, np.uint32) + 1
    reject_below = (np.uint64(1 << 32) % span).astype(np.uint32)

    def words(count):
        return rng.integers(0, 1 << 32, size=count, dtype=np.uint32)

    w = words(n * D)
    while True:
        W = w.reshape(n, D)
        bad = np.flatnonzero(W * span < reject_below)      # uint32 arithmetic: (w * (j+1)) mod 2^32
        if not bad.size:
            break
        w = np.concatenate([w[:bad[0]], w[bad[0] + 1:], words(1)])
    used = D - len(e_shuffle)
    # floor(w * (j+1) / 2^32), exact in float64 (w * (j+1) < 2^53); one contiguous row of values per draw
    vals = iter((W[:, :used] * (span[:used] / 2.0 ** 32)).T.astype(np.int32, order="C"))

    def floyd(js):
        picks = []
        for j in js:
            v = next(vals) if j else np.zeros(n, np.int32)
            dup = np.zeros(n, bool)
            for p in picks:
                dup |= p == v
            v[dup] = j
            picks.append(v)
        return picks

    groups = np.stack(floyd(g_floyd), axis=1)
    r = np.arange(n)
    for i in g_shuffle:
        j = next(vals)
        t = groups[r, j]
        groups[r, j] = groups[:, i]
        groups[:, i] = t
    picks = np.stack(floyd(e_floyd), axis=1)           # candidate indices: block q of per experts is groups[:, q]
    ids = np.take_along_axis(groups, picks // per, axis=1) * per + picks % per
    cols = list(ids.T.astype(_id_dtype(spec)))
    for rnd in range(k):                                # odd-even transposition sort of each row (k columns)
        for a in range(rnd % 2, k - 1, 2):
            lo = np.minimum(cols[a], cols[a + 1])
            cols[a + 1] = np.maximum(cols[a], cols[a + 1])
            cols[a] = lo
    return np.stack(cols, axis=1)


# ---------------------------------------------------------------- per-kernel flops and bytes

def _shard(n: int, t: int) -> int:
    return -(-n // t)


def kernel_cost(op: LogicalOp, tp: int, b: int, wbytes: int, moe: dict | None = None) -> tuple[float, float]:
    """(flops, bytes) of one rank's kernel for `b` tokens; `moe` = dict(pairs, active, ep) for expert ops."""
    d = op.dims
    if op.op == "norm":
        n = d["n"] if op.style == "replicated" else _shard(d["n"], tp)  # per-head norms: local (kv) heads
        w = d["width"]
        vec = b * n * w * ACT
        return 4.0 * b * n * w, (4 if d["add"] else 2) * vec + w * ACT
    if op.op == "linear":
        i, o = d["in"], d["out"]
        if op.style in ("colwise", "vocab"):
            o = _shard(o, tp)
        elif op.style == "rowwise":
            i = _shard(i, tp)
        return 2.0 * b * i * o, i * o * wbytes + b * (i + o) * ACT
    if op.op == "qkv_linear":
        q, kv = d["heads"] // tp, _shard(d["kv_heads"], tp)
        o = (q + 2 * kv) * d["head_dim"]
        return 2.0 * b * d["in"] * o, d["in"] * o * wbytes + b * (d["in"] + o) * ACT
    if op.op == "act":
        w = d["width"] if op.style == "replicated" else _shard(d["width"], tp)
        return 3.0 * b * w, 3 * b * w * ACT
    if op.op == "rope_mla":
        hl = d["heads"] // tp
        rot = b * (hl + 1) * d["rope"]
        return 6.0 * rot, (2 * rot + b * d["kv_lora"] + b * (d["kv_lora"] + d["rope"])) * ACT
    if op.op == "rope_gqa":
        hl, kv = d["heads"] // tp, _shard(d["kv_heads"], tp)
        rot = b * (hl + kv) * d["head_dim"]
        return 6.0 * rot, (2 * rot + 3 * b * kv * d["head_dim"]) * ACT
    if op.op == "mla_absorb_k":
        hl = d["heads"] // tp
        w = hl * d["nope"] * d["kv_lora"]
        return 2.0 * b * w, w * wbytes + b * hl * (d["nope"] + d["kv_lora"]) * ACT
    if op.op == "mla_absorb_v":
        hl = d["heads"] // tp
        w = hl * d["kv_lora"] * d["v_dim"]
        return 2.0 * b * w, w * wbytes + b * hl * (d["kv_lora"] + d["v_dim"]) * ACT
    if op.op == "mla_attention":
        hl, L, kvl, r = d["heads"] // tp, d["ctx"], d["kv_lora"], d["rope"]
        flops = 2.0 * b * hl * L * ((kvl + r) + kvl)
        return flops, b * L * (kvl + r) * ACT + b * hl * (2 * kvl + r) * ACT
    if op.op == "gqa_attention":
        hl, kv, hd, L = d["heads"] // tp, _shard(d["kv_heads"], tp), d["head_dim"], d["ctx"]
        return 4.0 * b * hl * L * hd, b * L * kv * hd * 2 * ACT + 2 * b * hl * hd * ACT
    if op.op == "mla_kv_up":            # b: the KV tokens the prefill attention reads
        i, o = d["kv_lora"], d["heads"] // tp * (d["nope"] + d["v_dim"])
        return 2.0 * b * i * o, i * o * wbytes + b * (i + o) * ACT
    if op.op == "mla_prefill_attention":    # b prompt tokens x ctx keys; k = (nope, shared rope), v per head
        hl, dk, dv = d["heads"] // tp, d["nope"] + d["rope"], d["v_dim"]
        kv_row = hl * (d["nope"] + dv) + d["rope"]
        return 2.0 * b * hl * d["ctx"] * (dk + dv), (d["kv"] * kv_row + b * hl * (dk + dv)) * ACT
    if op.op == "gqa_prefill_attention":
        hl, kv, hd = d["heads"] // tp, _shard(d["kv_heads"], tp), d["head_dim"]
        return 4.0 * b * hl * d["ctx"] * hd, (d["kv"] * kv * hd * 2 + 2 * b * hl * hd) * ACT
    if op.op == "embedding":
        return 0.0, 2 * b * d["hidden"] * ACT + b * 8
    if op.op == "router":
        return 2.0 * b * d["in"] * d["experts"], d["in"] * d["experts"] * wbytes + b * (d["in"] + d["experts"]) * ACT
    if op.op == "topk":
        return 4.0 * b * d["experts"], b * d["experts"] * 4 + d["experts"] * 4 + b * d["topk"] * 8
    if op.op in ("experts_gate_up", "experts_down", "experts_act"):
        pairs, active, ep = moe["pairs"], moe["active"], moe["ep"]
        inter = d["inter"] if ep > 1 else _shard(d["inter"], tp)
        if op.op == "experts_act":
            return 3.0 * pairs * inter, 3 * pairs * inter * ACT
        wo = 2 * inter if op.op == "experts_gate_up" else d["hidden"]
        wi = d["hidden"] if op.op == "experts_gate_up" else inter
        return 2.0 * pairs * wi * wo, active * wi * wo * wbytes + pairs * (wi + wo) * ACT
    if op.op == "moe_combine":
        return float(b * d["hidden"] * (d["topk"] + d["shared"])), \
            b * d["hidden"] * (d["topk"] + d["shared"] + 1) * ACT + b * d["topk"] * 4
    raise ConfigError(f"unknown logical op type {op.op!r} ({op.name})")


# ---------------------------------------------------------------- mixed steps: which ops see which tokens

DECODE_ATTENTION = ("mla_absorb_k", "mla_attention", "mla_absorb_v", "gqa_attention")


def with_prefill(graph: list[LogicalOp], spec: ModelSpec, plan: Plan) -> list[LogicalOp]:
    """The step's graph: with prompt tokens, each layer's prefill attention after its decode attention, on the same
    stream (a serving engine runs the two attention kernels of a mixed batch one after the other)."""
    if not plan.prefill_tokens:
        return graph
    out = []
    for op in graph:
        out.append(op)
        if op.op in ("mla_absorb_v", "gqa_attention"):
            out += prefill_ops(spec, op.layer, plan.prefill_context, plan.prefill_kv_tokens, plan.prefill_seqs)
    return out


def op_tokens(plan: Plan, op: LogicalOp) -> int:
    """Token rows a rank of an attention group runs `op` on (before expert-parallel slots): the decode attention
    (and MLA's weight absorption around it) the group's decode tokens; the prefill attention its prompt tokens;
    MLA's latent up-projection the KV tokens the prompts read; the LM head the decode tokens and the last token of
    each prompt sequence (a serving engine computes logits only there); every other op every token of the step."""
    if op.op in DECODE_ATTENTION:
        return plan.b_local
    if op.op in ("mla_prefill_attention", "gqa_prefill_attention"):
        return plan.prefill_tokens
    if op.op == "mla_kv_up":
        return plan.prefill_kv_tokens
    if op.op == "linear" and op.style == "vocab":
        return plan.b_local + (plan.prefill_seqs if plan.prefill_tokens else 0)
    return plan.b_local + plan.prefill_tokens


# ---------------------------------------------------------------- lowering

class _Builder:
    """Accumulates one rank's op rows and dependencies."""

    def __init__(self):
        self.rows: list[dict] = []
        self.deps: list[list[int]] = []

    def add(self, deps: list[int], **row) -> int:
        self.rows.append(row)
        self.deps.append(sorted(set(d for d in deps if d is not None)))
        return len(self.rows) - 1

    def table(self) -> OpTable:
        return OpTable.from_rows(self.rows, self.deps)


def op_time(chip: ChipProfile, plan: Plan, op: LogicalOp, t_shard: int, b: int, flops: float, nbytes: float,
            dtype: str, moe: dict | None, launch: str | None) -> dict:
    """One fused kernel's cost as lower() gives it: {"time_ns", "kernels"} (the plan's cost model)."""
    if plan.cost_model == "roofline":
        return {"time_ns": chip.kernel_time_ns(flops, nbytes, dtype), "kernels": 1}
    return logical_op_time(chip, op, t_shard, b, plan.weight_dtype, moe, launch, flops=flops, nbytes=nbytes)


def decode_attention_ns(spec: ModelSpec, plan: Plan, chip: ChipProfile) -> float:
    """A rank's decode-attention kernels over every layer (ns) for the plan's decode tokens per attention group
    (Plan.b_local) at its context: the "attention" rows lower() makes, without capturing the step (fused runtime;
    the serving step model asks this for every batch it meets)."""
    from fabric.capture.graph import analytic_graph
    wbytes = DTYPE_BYTES[plan.weight_dtype]
    b = plan.b_local
    total = 0.0
    for op in analytic_graph(spec, plan.context):
        if op.op in ("mla_attention", "gqa_attention"):
            flops, nbytes = kernel_cost(op, plan.tp, b, wbytes, None)
            total += op_time(chip, plan, op, plan.tp, b, flops, nbytes, "bf16", None, plan.launch)["time_ns"]
    return total


def lower(graph: list[LogicalOp], spec: ModelSpec, plan: Plan, chip: ChipProfile, meta: dict, *,
          each_rank_built: bool = False) -> Trace:
    """Shard, cost and add collectives: one OpTable per rank (identical ranks share one table). Under expert
    parallelism ranks 1.. are rank 0's table with their own experts' costs and tp group (_Lowering.rank_table, much
    faster than building each rank: docs/performance-history.md); each_rank_built=True builds every rank op by op
    instead, the reference the tests compare with."""
    plan.check(spec)
    graph = with_prefill(graph, spec, plan)
    lw = _Lowering(graph, spec, plan, chip)
    n = plan.n_ranks
    if plan.ep == 1:
        t = lw.build(0)
        ops = [t] * n
    elif lw.eager or each_rank_built:    # an eager step's host timeline runs over every kernel's own time
        ops = [lw.build(r) for r in range(n)]
    else:
        base = lw.build(0)
        ops = [base] + [lw.rank_table(base, r) for r in range(1, n)]
    return Trace(meta=_trace_meta(meta, plan, chip, lw), n_ranks=n, groups=lw.groups, ops=ops)


def _moe_loads(graph: list[LogicalOp], spec: ModelSpec, plan: Plan, n_tok: int) -> tuple[dict, dict]:
    """What the experts of each MoE layer receive, one layer's routing at a time (a large step routes ~1M tokens):
    per layer the expert-parallel layout (_ep_layout) under ep > 1, else the tensor-parallel load."""
    ep_info, tp_moe = {}, {}
    for L in sorted({op.layer for op in graph if op.op == "experts_gate_up"}):
        if plan.ep > 1:
            ep_info[L] = _ep_layout(spec, plan, _routed(spec, L, plan.dp * n_tok, plan.seed), n_tok)
        else:
            rt = _routed(spec, L, n_tok, plan.seed)
            tp_moe[L] = dict(pairs=rt.size, active=len(np.unique(rt)), ep=1)
    return ep_info, tp_moe


def _trace_meta(meta: dict, plan: Plan, chip: ChipProfile, lw: "_Lowering") -> dict:
    """The trace's metadata: the caller's, with the plan's."""
    meta = dict(meta)
    plan_meta = dict(tp=plan.tp, ep=plan.ep, dp=plan.dp, n_ranks=plan.n_ranks, weight_dtype=plan.weight_dtype,
                     dispatch_dtype=plan.dispatch_dtype, routing_seed=plan.seed, batch_per_replica=plan.b_local)
    if plan.prefill_tokens:        # a decode step's metadata stays as it always was
        plan_meta.update(prefill_tokens=plan.prefill_tokens, prefill_context=plan.prefill_context,
                         prefill_kv_tokens=plan.prefill_kv_tokens, prefill_seqs=plan.prefill_seqs)
    if plan.cost_model != "roofline" or lw.eager:   # the default model leaves the metadata as it always was
        plan_meta.update(cost_model=plan.cost_model,
                         launch=lw.launch or getattr(chip.kernels, "launch_mode", None),
                         runtime=plan.runtime, kernels_per_step=int(lw.kernel_count))
    meta.update(plan=plan_meta,
                batch=plan.batch, context=plan.context, chip=chip.name)
    return meta


class _Lowering:
    """One lower() call: the plan's groups and MoE loads, the kernel costs (cached by shape) and the per-rank
    tables."""

    def __init__(self, graph: list[LogicalOp], spec: ModelSpec, plan: Plan, chip: ChipProfile):
        self.graph, self.spec, self.plan, self.chip = graph, spec, plan, chip
        n, tp, dp = plan.n_ranks, plan.tp, plan.dp
        self.wbytes = DTYPE_BYTES[plan.weight_dtype]
        n_tok = plan.b_local + plan.prefill_tokens      # tokens each attention group routes through every MoE layer
        self.groups = [list(range(n))]
        if dp > 1:
            self.groups += [list(range(d * tp, (d + 1) * tp)) for d in range(dp)]
        self.ep_info, self.tp_moe = _moe_loads(graph, spec, plan, n_tok)
        self.moe_set = set(self.ep_info) | set(self.tp_moe)
        self.shape_cache: dict = {}
        self.kernel_count = 0   # kernels launched per step on rank 0 (split-K reduces and split-KV combines included)
        self.eager = plan.runtime == "eager"
        self.launch = plan.launch or ("eager" if self.eager else None)
        self.experts: list[tuple] = []     # build(0)'s expert kernels: (row, op, t_shard, b, dtype), for rank_table

    def tp_group(self, r: int) -> int:
        return 0 if self.plan.dp == 1 else 1 + r // self.plan.tp

    # ---- kernel costs, cached by shape

    def _key(self, op, t_shard, b, moe):
        # eager template kernels are named for their logical op; a recorded aten op's for the aten op in its dims
        return (op.op, op.name if self.eager and op.op != "aten" else "", op.style, tuple(sorted(op.dims.items())),
                t_shard, b, None if moe is None else tuple(sorted(moe.items())))

    def duration(self, op, t_shard, b, flops, nbytes, dtype, moe, count) -> float:
        plan, chip = self.plan, self.chip
        if plan.cost_model == "roofline":
            self.kernel_count += count
            return chip.kernel_time_ns(flops, nbytes, dtype)
        key = self._key(op, t_shard, b, moe)
        if key not in self.shape_cache:
            self.shape_cache[key] = op_time(chip, plan, op, t_shard, b, flops, nbytes, dtype, moe, self.launch)
        self.kernel_count += count * self.shape_cache[key]["kernels"]
        return self.shape_cache[key]["time_ns"]

    def eager_rows(self, op, t_shard, b, moe, count) -> list[dict]:
        plan = self.plan
        key = ("eager",) + self._key(op, t_shard, b, moe)
        if key not in self.shape_cache:
            self.shape_cache[key] = cost_kernels(self.chip, eager_kernels(self.chip, self.spec, op, t_shard, b,
                                                                          plan.weight_dtype, moe, plan.context + 1),
                                                 self.launch)
        self.kernel_count += count * len(self.shape_cache[key])
        return self.shape_cache[key]

    # ---- a rank's table

    def _op_shape(self, op, r: int):
        """How op runs on rank r: (expert-parallel, its tokens, its tp shard count, its experts' load or None)."""
        plan = self.plan
        in_moe = op.layer in self.moe_set and op.name.startswith(("moe_", "experts_", "shared_"))
        ep_mode = plan.ep > 1 and in_moe
        b = self.ep_info[op.layer]["slots"] if ep_mode else op_tokens(plan, op)
        t_shard = 1 if (ep_mode and op.style in ("colwise", "rowwise")) else plan.tp
        moe = None
        if op.op.startswith("experts_"):
            if plan.ep > 1:
                info = self.ep_info[op.layer]
                moe = dict(pairs=int(info["pairs"][r]), active=int(info["active"][r]), ep=plan.ep)
            else:
                moe = self.tp_moe[op.layer]
        return ep_mode, b, t_shard, moe

    def build(self, r: int) -> OpTable:
        plan, eager = self.plan, self.eager
        count = int(r == 0)
        bld = _Builder()
        chain: list[tuple[int, float]] = []    # eager runtime: (row, the kernel's own GPU time) in issue order
        out: dict[tuple[int, str], int] = {}
        prev = None
        g_tp = self.tp_group(r)
        for op in self.graph:
            ep_mode, b, t_shard, moe = self._op_shape(op, r)
            if eager:
                flops = nbytes = dtype = None
            else:
                flops, nbytes = kernel_cost(op, t_shard, b, self.wbytes, moe)
                dtype = COMPUTE_DTYPE[plan.weight_dtype] if op.op in (
                    "linear", "qkv_linear", "router", "experts_gate_up", "experts_down", "mla_absorb_k",
                    "mla_absorb_v", "mla_kv_up") else "bf16"
            deps = [prev] if (op.after is None or eager) else [out.get((op.layer, a)) for a in op.after]
            stream = 0 if eager else op.stream          # an eager framework issues every kernel on one stream
            if ep_mode and op.name == "experts_gate_up":
                info = self.ep_info[op.layer]
                deps = [bld.add(deps, name="moe_dispatch", kind=KIND_COLLECTIVE, stream=stream,
                                coll_kind=COLL_ALLTOALL, coll_bytes=info["dispatch_bytes"], group=0,
                                layer=op.layer, module=op.module)]
            if eager:
                idx = deps[0]
                for k in self.eager_rows(op, t_shard, b, moe, count):
                    k = dict(k)
                    chain.append((len(bld.rows), k.pop("gpu_ns")))
                    idx = bld.add([idx], kind=KIND_COMPUTE, stream=0, layer=op.layer, module=op.module, **k)
            else:
                idx = bld.add(deps, name=op.name, kind=KIND_COMPUTE, stream=op.stream,
                              duration_ns=self.duration(op, t_shard, b, flops, nbytes, dtype, moe, count),
                              flops=flops, bytes=float(nbytes),
                              layer=op.layer, module=op.module)
                if r == 0 and moe is not None and plan.ep > 1:
                    self.experts.append((idx, op, t_shard, b, dtype))
            idx = self._collectives_after(bld, op, idx, ep_mode, b, stream, g_tp)
            out[(op.layer, op.name)] = idx
            prev = idx
        if eager and self.launch == "eager":        # the host runs ahead of the GPU (fabric.capture.runtime)
            eff = host_timeline([g for _, g in chain], self.chip.kernels.launch_ns["eager"])
            for (i, _), d in zip(chain, eff):
                bld.rows[i]["duration_ns"] = d
        return bld.table()

    def _collectives_after(self, bld: _Builder, op, idx: int, ep_mode: bool, b: int, stream: int, g_tp: int) -> int:
        """The collectives that follow op's kernels (the EP combine, the tp all-reduce or all-gather); returns the
        row the next op depends on."""
        tp, hidden = self.plan.tp, self.spec.hidden
        if ep_mode and op.name == "experts_down":
            info = self.ep_info[op.layer]
            idx = bld.add([idx], name="moe_combine_a2a", kind=KIND_COLLECTIVE, stream=stream,
                          coll_kind=COLL_ALLTOALL, coll_bytes=info["combine_bytes"], group=0,
                          layer=op.layer, module=op.module)
        if op.reduce_after and ep_mode:
            if tp > 1:
                idx = bld.add([idx], name=f"{op.name}.allgather", kind=KIND_COLLECTIVE, stream=stream,
                              coll_kind=COLL_ALLGATHER, coll_bytes=b * hidden * ACT, group=g_tp,
                              layer=op.layer, module=op.module)
        elif op.reduce_after and tp > 1:
            idx = bld.add([idx], name=f"{op.name}.allreduce", kind=KIND_COLLECTIVE, stream=stream,
                          coll_kind=COLL_ALLREDUCE, coll_bytes=b * hidden * ACT, group=g_tp,
                          layer=op.layer, module=op.module)
        if op.gather_after and tp > 1:
            idx = bld.add([idx], name=f"{op.name}.allgather", kind=KIND_COLLECTIVE, stream=stream,
                          coll_kind=COLL_ALLGATHER, coll_bytes=b * (_shard(op.dims["out"], tp) if "out" in op.dims
                                                            else op.dims["vocab_local"]) * ACT,
                          group=g_tp, layer=op.layer, module=op.module)
        return idx

    def rank_table(self, base: OpTable, r: int) -> OpTable:
        """Rank r's table from rank 0's (fused runtime): the same ops and dependencies, but its own experts'
        costs (the tokens routed to it) and its own tp group, which is all build(r) would change (the tests
        compare the two on every built-in MoE model). The columns they share are shared, read-only."""
        plan = self.plan
        cols = base.columns()
        for a in cols.values():
            a.flags.writeable = False
        dur, flops, nbytes = cols["duration_ns"].copy(), cols["flops"].copy(), cols["bytes"].copy()
        for row, op, t_shard, b, dtype in self.experts:
            info = self.ep_info[op.layer]
            moe = dict(pairs=int(info["pairs"][r]), active=int(info["active"][r]), ep=plan.ep)
            f, nb = kernel_cost(op, t_shard, b, self.wbytes, moe)
            dur[row], flops[row], nbytes[row] = self.duration(op, t_shard, b, f, nb, dtype, moe, 0), f, float(nb)
        group = cols["group"]
        if plan.dp > 1:       # rank 0's tp collectives name group tp_group(0); EP all-to-alls the world (0)
            group = np.where(group == self.tp_group(0), self.tp_group(r), group).astype(group.dtype)
        return OpTable(**dict(cols, duration_ns=dur, flops=flops, bytes=nbytes, group=group))


def _ep_layout(spec: ModelSpec, plan: Plan, routing: np.ndarray, tokens: int) -> dict:
    """Which rank sends which token where, for one MoE layer under expert parallelism: attention group d's `tokens`
    tokens are routing rows [d tokens, (d+1) tokens) (sorted within each row, as route gives them); TP rank j of the
    group sends slot j (its tokens [j s, (j+1) s), s = ceil(tokens / tp)) once to every rank that owns one of a
    token's experts."""
    n, tp = plan.n_ranks, plan.tp
    per_rank = spec.n_experts // n
    slots = -(-tokens // tp)
    ids = np.ascontiguousarray(routing[:plan.dp * tokens].T)     # [topk, tokens]: one contiguous row per pick
    src = (np.arange(plan.dp, dtype=np.int32)[:, None] * tp + np.arange(tokens, dtype=np.int32) // slots).ravel()
    owners = ids // per_rank
    first = np.ones(owners.shape, bool)       # sorted picks: a token goes to each owning rank once
    first[1:] = owners[1:] != owners[:-1]
    sent = np.bincount((owners + src * n)[first], minlength=n * n).reshape(n, n)
    per_expert = np.bincount(ids.ravel(), minlength=spec.n_experts).reshape(n, per_rank)
    pairs, active = per_expert.sum(1), (per_expert > 0).sum(1)
    tok_dispatch = spec.hidden + (math.ceil(spec.hidden / 128) * 4 if plan.dispatch_dtype == "fp8" else spec.hidden)
    chunk = int(sent.max())
    return dict(slots=slots, pairs=pairs, active=active,
                dispatch_bytes=chunk * tok_dispatch, combine_bytes=chunk * spec.hidden * ACT, sent=sent)
