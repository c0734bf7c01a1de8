"""The logical graph of one decode step: serving-engine kernels of the *unsharded* model.

Both capture engines produce this list (analytic: from the config; torch: from a recorded meta-device forward pass
after fusion); fabric.capture.plan then shards it, costs it and inserts the collectives. Two engines agree when
their logical graphs are equal (`LogicalOp.key()`).

Op types and their dims (all unsharded, per token unless said otherwise):
  norm            width, n (vectors per token: 1, or heads for per-head norms), add (fused residual add: 0/1)
  linear          in, out                                  (style: replicated | colwise | rowwise | vocab)
  qkv_linear      in, heads, kv_heads, head_dim            fused GQA q/k/v projection, kv heads replicated if needed
  act             width                                    SiLU(gate) * up
  rope_mla        heads, rope, kv_lora                     RoPE on q_pe/k_pe + append the latent to the KV cache
  rope_gqa        heads, kv_heads, head_dim                RoPE on q/k + append k/v to the cache
  mla_absorb_k    heads, nope, kv_lora                     q_nope x W_UK (weight absorption)
  mla_attention   heads, kv_lora, rope, ctx                one decode-attention kernel over ctx cached latents
  mla_absorb_v    heads, kv_lora, v_dim                    attention output x W_UV
  gqa_attention   heads, kv_heads, head_dim, ctx           flash-decode over ctx cached k/v
  embedding       vocab, hidden                            vocab-parallel lookup
  router          in, experts                              gate GEMM (replicated)
  topk            experts, topk, n_group, topk_group       fused (group-limited) top-k selection
  experts_gate_up experts, topk, hidden, inter             grouped GEMM over the routed experts
  experts_act     topk, inter
  experts_down    experts, topk, hidden, inter
  moe_combine     topk, hidden, shared                     weighted sum of routed outputs (+ shared expert output)

A mixed serving step (fabric.capture.plan.Plan's prefill_* fields) adds the prefill attention of its prompt tokens
after each layer's decode attention (prefill_ops; dims per step, not per token):
  mla_kv_up             heads, kv_lora, nope, v_dim        kv_b_proj over the cached latents the prompts attend to
  mla_prefill_attention heads, nope, rope, v_dim, ctx, kv, seqs    multi-head (non-absorbed) attention of the prompt
  gqa_prefill_attention heads, kv_heads, head_dim, ctx, kv, seqs   tokens: ctx mean keys per token, kv KV tokens read,
                                                                   over seqs sequences
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fabric.capture.spec import ModelSpec


@dataclass
class LogicalOp:
    layer: int                   # decoder layer, -1 for embedding / final norm / LM head
    name: str                    # kernel name, unique within its layer
    op: str                      # op type (module docstring)
    module: str                  # HF module path the kernel comes from
    style: str                   # replicated | colwise | rowwise | vocab | heads | experts
    dims: dict = field(default_factory=dict)
    stream: int = 0              # 0 main stream, 1 the serving engine's alternate stream
    after: tuple | None = None   # names (same layer) this op consumes; None = the previous op in the list
    reduce_after: bool = False   # partial sums: an all-reduce over the TP group follows
    gather_after: bool = False   # vocab-parallel logits: an all-gather over the TP group follows

    def key(self) -> tuple:
        return (self.layer, self.name, self.op, self.style, tuple(sorted(self.dims.items())), self.stream,
                self.after, self.reduce_after, self.gather_after)


def head_ops(spec: ModelSpec, where: str) -> list[LogicalOp]:
    if where == "embed":
        return [LogicalOp(-1, "embed", "embedding", "model.embed_tokens", "vocab",
                          dict(vocab=spec.vocab, hidden=spec.hidden), reduce_after=True)]
    return [LogicalOp(-1, "final_norm", "norm", "model.norm", "replicated", dict(width=spec.hidden, n=1, add=1)),
            LogicalOp(-1, "lm_head", "linear", "lm_head", "vocab", {"in": spec.hidden, "out": spec.vocab},
                      gather_after=True)]


def attention_ops(spec: ModelSpec, i: int, ctx: int) -> list[LogicalOp]:
    p = f"model.layers.{i}"
    a = f"{p}.self_attn"
    h = spec.hidden
    out = [LogicalOp(i, "input_norm", "norm", f"{p}.input_layernorm", "replicated",
                     dict(width=h, n=1, add=int(i > 0)))]
    if spec.family == "mla_moe":
        out += [
            LogicalOp(i, "qkv_a_proj", "linear", a, "replicated",
                      {"in": h, "out": spec.q_lora + spec.kv_lora + spec.rope}),
            LogicalOp(i, "q_a_norm", "norm", f"{a}.q_a_layernorm", "replicated", dict(width=spec.q_lora, n=1, add=0)),
            LogicalOp(i, "kv_a_norm", "norm", f"{a}.kv_a_layernorm", "replicated",
                      dict(width=spec.kv_lora, n=1, add=0), stream=1, after=("qkv_a_proj",)),
            LogicalOp(i, "q_b_proj", "linear", f"{a}.q_b_proj", "colwise",
                      {"in": spec.q_lora, "out": spec.heads * (spec.nope + spec.rope)}, after=("q_a_norm",)),
            LogicalOp(i, "rope_kv_append", "rope_mla", a, "heads",
                      dict(heads=spec.heads, rope=spec.rope, kv_lora=spec.kv_lora), after=("q_b_proj", "kv_a_norm")),
            LogicalOp(i, "w_uk", "mla_absorb_k", f"{a}.kv_b_proj", "heads",
                      dict(heads=spec.heads, nope=spec.nope, kv_lora=spec.kv_lora)),
            LogicalOp(i, "attention", "mla_attention", a, "heads",
                      dict(heads=spec.heads, kv_lora=spec.kv_lora, rope=spec.rope, ctx=ctx)),
            LogicalOp(i, "w_uv", "mla_absorb_v", f"{a}.kv_b_proj", "heads",
                      dict(heads=spec.heads, kv_lora=spec.kv_lora, v_dim=spec.v_dim)),
            LogicalOp(i, "o_proj", "linear", f"{a}.o_proj", "rowwise", {"in": spec.heads * spec.v_dim, "out": h},
                      reduce_after=True),
        ]
    else:
        out.append(LogicalOp(i, "qkv_proj", "qkv_linear", a, "colwise",
                             {"in": h, "heads": spec.heads, "kv_heads": spec.kv_heads, "head_dim": spec.head_dim}))
        rope_after = None
        if spec.qk_norm:
            out += [LogicalOp(i, "q_norm", "norm", f"{a}.q_norm", "heads", dict(width=spec.head_dim, n=spec.heads,
                                                                                 add=0)),
                    LogicalOp(i, "k_norm", "norm", f"{a}.k_norm", "kv_heads",
                              dict(width=spec.head_dim, n=spec.kv_heads, add=0), stream=1, after=("qkv_proj",))]
            rope_after = ("q_norm", "k_norm")
        out += [
            LogicalOp(i, "rope_kv_append", "rope_gqa", a, "heads",
                      dict(heads=spec.heads, kv_heads=spec.kv_heads, head_dim=spec.head_dim), after=rope_after),
            LogicalOp(i, "attention", "gqa_attention", a, "heads",
                      dict(heads=spec.heads, kv_heads=spec.kv_heads, head_dim=spec.head_dim, ctx=ctx)),
            LogicalOp(i, "o_proj", "linear", f"{a}.o_proj", "rowwise", {"in": spec.heads * spec.head_dim, "out": h},
                      reduce_after=True),
        ]
    out.append(LogicalOp(i, "post_norm", "norm", f"{p}.post_attention_layernorm", "replicated",
                         dict(width=h, n=1, add=1)))
    return out


def prefill_ops(spec: ModelSpec, i: int, ctx: float, kv: int, seqs: int) -> list[LogicalOp]:
    """Layer i's prefill attention in a mixed step, as a serving engine runs it for prompt chunks (FlashAttention,
    compute-bound): MLA without weight absorption, the cached latents of the keys read expanded by kv_b_proj into
    per-head keys and values first; GQA over the cached k/v."""
    a = f"model.layers.{i}.self_attn"
    if spec.family == "mla_moe":
        return [LogicalOp(i, "prefill_kv_up", "mla_kv_up", f"{a}.kv_b_proj", "heads",
                          dict(heads=spec.heads, kv_lora=spec.kv_lora, nope=spec.nope, v_dim=spec.v_dim)),
                LogicalOp(i, "prefill_attention", "mla_prefill_attention", a, "heads",
                          dict(heads=spec.heads, nope=spec.nope, rope=spec.rope, v_dim=spec.v_dim, ctx=ctx, kv=kv,
                               seqs=seqs))]
    return [LogicalOp(i, "prefill_attention", "gqa_prefill_attention", a, "heads",
                      dict(heads=spec.heads, kv_heads=spec.kv_heads, head_dim=spec.head_dim, ctx=ctx, kv=kv,
                           seqs=seqs))]


def dense_mlp_ops(spec: ModelSpec, i: int) -> list[LogicalOp]:
    m = f"model.layers.{i}.mlp"
    return [LogicalOp(i, "gate_up_proj", "linear", m, "colwise", {"in": spec.hidden, "out": 2 * spec.inter}),
            LogicalOp(i, "act", "act", f"{m}.act_fn", "colwise", dict(width=spec.inter)),
            LogicalOp(i, "down_proj", "linear", f"{m}.down_proj", "rowwise", {"in": spec.inter, "out": spec.hidden},
                      reduce_after=True)]


def moe_ops(spec: ModelSpec, i: int) -> list[LogicalOp]:
    """Router, top-k and routed experts on the alternate stream while the shared expert runs on the main stream
    (SGLang's dual-stream MoE); the combine sums routed and shared outputs before the one all-reduce."""
    m = f"model.layers.{i}.mlp"
    h, E, k, inter = spec.hidden, spec.n_experts, spec.topk, spec.moe_inter
    s = 1 if spec.n_shared else 0
    out = [
        LogicalOp(i, "moe_gate", "router", f"{m}.gate", "replicated", {"in": h, "experts": E}, stream=s,
                  after=("post_norm",)),
        LogicalOp(i, "moe_topk", "topk", f"{m}.gate", "replicated",
                  dict(experts=E, topk=k, n_group=spec.n_group, topk_group=spec.topk_group), stream=s),
        LogicalOp(i, "experts_gate_up", "experts_gate_up", f"{m}.experts", "experts",
                  dict(experts=E, topk=k, hidden=h, inter=inter), stream=s),
        LogicalOp(i, "experts_act", "experts_act", f"{m}.experts", "experts", dict(topk=k, inter=inter), stream=s),
        LogicalOp(i, "experts_down", "experts_down", f"{m}.experts", "experts",
                  dict(experts=E, topk=k, hidden=h, inter=inter), stream=s),
    ]
    if spec.n_shared:
        si = inter * spec.n_shared
        sm = f"{m}.shared_experts"
        out += [LogicalOp(i, "shared_gate_up", "linear", sm, "colwise", {"in": h, "out": 2 * si},
                          after=("post_norm",)),
                LogicalOp(i, "shared_act", "act", f"{sm}.act_fn", "colwise", dict(width=si)),
                LogicalOp(i, "shared_down", "linear", f"{sm}.down_proj", "rowwise", {"in": si, "out": h})]
    out.append(LogicalOp(i, "moe_combine", "moe_combine", m, "replicated", dict(topk=k, hidden=h, shared=int(s)),
                         after=("experts_down", "shared_down") if s else ("experts_down",), reduce_after=True))
    return out


def analytic_graph(spec: ModelSpec, context: int) -> list[LogicalOp]:
    """The logical graph from the config alone (the analytic engine)."""
    ctx = context + 1  # the cache holds the context plus the token being decoded
    ops = head_ops(spec, "embed")
    for i in range(spec.layers):
        ops += attention_ops(spec, i, ctx)
        ops += moe_ops(spec, i) if spec.layer_is_moe(i) else dense_mlp_ops(spec, i)
    return ops + head_ops(spec, "head")
