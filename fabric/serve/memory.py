"""KV capacity of one attention group under a plan: what is left of a rank's memory after weights, activations,
workspace and the runtime reserve, in tokens of KV (fabric.capture.memory does the per-rank accounting).

Every rank of an attention group holds the KV of the group's sequences in the model's own layout: MLA's latent
(kv_lora + rope values per token and layer) is replicated on each of the group's ranks, GQA's kv heads are split
over them. So a group of attn_tp ranks holds as many tokens as one of its ranks: attention over fewer ranks and more
groups (attn=dp) multiplies the deployment's KV capacity, which pure TP does not (docs/serving.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from fabric.errors import ConfigError

GIB = float(1 << 30)


@dataclass(frozen=True)
class KvBudget:
    tokens_per_group: int         # KV tokens one attention group can hold
    bytes_per_token: float        # per rank, every layer
    weights_gib: float            # per rank
    other_gib: float              # activations + workspace + runtime reserve, per rank, at the step's token budget
    capacity_gib: float

    def as_dict(self) -> dict:
        return dict(kv_tokens_per_group=self.tokens_per_group, kv_bytes_per_token=self.bytes_per_token,
                    weights_gib=self.weights_gib, other_gib=self.other_gib, capacity_gib=self.capacity_gib,
                    kv_gib=self.tokens_per_group * self.bytes_per_token / GIB)


def kv_budget(spec, plan, chip, token_budget: int, kv_fraction: float = 1.0) -> KvBudget:
    """The KV budget of one attention group; ConfigError (one line, needed vs available) when the weights and the
    step's activations leave no room. kv_fraction: the share of the free memory given to KV (the rest is a
    safety margin, as a serving engine's mem_fraction)."""
    from fabric.capture import Plan
    from fabric.capture.memory import memory_plan
    cp = Plan(tp=plan.attn_tp, ep=plan.ep, batch=plan.dp * token_budget, context=0, weight_dtype=plan.weight_dtype)
    mem = memory_plan(spec, cp, chip)
    cap = mem["capacity_gib"]
    if not cap:
        raise ConfigError(f"chip {chip.name} declares no memory capacity ([memory] capacity_gib); fabric-serve "
                          f"needs it to size the KV cache")
    other = mem["activations_gib"] + mem["workspace_gib"] + mem["reserved_gib"]
    free = (cap - mem["weights_gib"] - other) * kv_fraction
    bpt = float(mem["kv_bytes_per_token"])
    tokens = int(free * GIB // bpt) if free > 0 else 0
    if tokens < 1:
        raise ConfigError(f"{plan.flag} {plan.text!r} does not fit in memory: each rank needs {mem['weights_gib']:.1f} "
                          f"GiB of weights ({plan.weight_dtype}) + {other:.1f} GiB of activations, workspace and "
                          f"reserve before any KV, but {chip.name} has {cap:.1f} GiB; use more ranks per replica "
                          f"(ep, tp), smaller weights (weights=fp8) or a smaller --token-budget")
    return KvBudget(tokens, bpt, float(mem["weights_gib"]), float(other), float(cap))
