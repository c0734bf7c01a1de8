"""Runtimes: how the logical graph of a decode step becomes kernels.

    fused   a serving engine's fused kernels (SGLang-class): one kernel per logical op of fabric.capture.graph
            (fused q_a/kv_a and gate/up GEMMs, residual add inside RMSNorm, RoPE + KV append in one kernel, MLA
            weight absorption around one decode-attention kernel, grouped expert GEMMs, fused top-k). What the SD200
            stack runs; the default, and what every shipped trace holds.
    eager   a plain framework (PyTorch running the transformers modeling code op by op): one kernel per framework
            op. `eager_kernels` expands each logical op into that list (the analytic engine's template, per
            family); `fabric.capture.torch_engine.eager_graph` takes it from the recorded aten dispatch sequence
            instead (one recorded aten op that launches a kernel = one kernel).

Eager template (per rank, `b` tokens; every kernel costed by the shape-aware model of fabric.capture.kernels):

    residual add      add (a separate kernel before the next norm)
    RMSNorm           to(fp32), pow, mean, add(eps), rsqrt, mul, to(bf16), mul(weight)      (transformers' code)
    linear            one cuBLAS GEMM (+ a split-K reduce kernel when K is split; + a dequantisation kernel of the
                      weight when it is not BF16: eager PyTorch has no FP8/INT GEMM in F.linear)
    fused projections separate GEMMs: q_a and kv_a; q, k and v; gate and up
    SiLU-mul          silu, mul
    RoPE              per rotated tensor: mul(cos), the rotate-half pieces, mul(sin), add, cat (transformers'
                      interleaved/rotate-half code), then cat of the rotated and pass-through parts
    KV cache          DynamicCache.update: torch.cat of the whole cache with the new token, per cache tensor
    MLA attention     the modeling code's path: kv_b_proj expanded over every cached latent (a GEMM with b x ctx
                      rows), the key assembled by new_empty + two copy_, then SDPA (memory-efficient attention: q and
                      v head sizes differ, so no flash kernel and no split-KV)
    GQA attention     SDPA (flash, split-KV + combine)
    router (MLA)      to(fp32) of the activations and of the router weight, an fp32 GEMM
    top-k (MLA)       sigmoid, add(bias), group topk, sum, topk, zeros_like, scatter_, expand+reshape copy, to(bool),
                      bitwise_not, masked_fill, topk, gather, sum, add, div_, mul
    top-k (softmax)   softmax(fp32), topk, sum, div, to(bf16)
    experts           zeros_like, one_hot, sum, gt, nonzero; then per expert hit on the rank: where, index,
                      gate_up GEMM, silu, mul, down GEMM, index(weights), mul, index_add_
    MoE combine       add (routed + shared)
    embedding         vocab-parallel: mask (lt/ge/or), sub, embedding, masked_fill; rotary table (arange-free):
                      mul, cat, cos, sin, mul, mul, to, to
    LM head           GEMM + to(fp32) of the logits
"""
from __future__ import annotations

import math

from fabric.capture.kernels import (ACT, COMPUTE_DTYPE, WEIGHT_BYTES, _elementwise_parts, _finish, _rows_parts,
                                    attention_parts, linear_dims, matrix_parts, params_of)
from fabric.errors import ConfigError

RUNTIMES = ("fused", "eager")


def check_runtime(runtime: str) -> None:
    if runtime not in RUNTIMES:
        raise ConfigError(f"runtime {runtime!r} is not one of {', '.join(RUNTIMES)}")


class _T:
    """Builds one logical op's eager kernel list: (name, parts) pairs."""

    def __init__(self, chip, wdtype: str):
        self.chip, self.kp, self.wd = chip, params_of(chip), wdtype
        self.out: list[tuple[str, dict]] = []

    def ew(self, name, elems, bytes_per_elem, flops_per_elem=1.0):
        elems = max(1, int(elems))
        self.out.append((name, _elementwise_parts(self.kp, elems, float(elems * bytes_per_elem),
                                                  float(elems * flops_per_elem))))

    def rows(self, name, rows, nbytes, flops=0.0):
        self.out.append((name, _rows_parts(self.kp, rows, float(nbytes), float(flops))))

    def mat(self, name, G, M, K, N, wdtype=None):
        wd = wdtype or self.wd
        if wd not in ("bf16", "fp16", "fp32"):   # eager F.linear runs BF16: dequantise the weight first
            self.ew(f"{name}.dequant", G * K * N, WEIGHT_BYTES[wd] + ACT, 2.0)
            wd = "bf16"
        self.out.append((name, matrix_parts(self.chip, self.kp, G, max(1, M), K, N, WEIGHT_BYTES[wd],
                                            COMPUTE_DTYPE[wd], fused_reduce=False)))

    def rmsnorm(self, prefix, rows, width):
        e = rows * width
        self.ew(f"{prefix}.to_fp32", e, ACT + 4)
        self.ew(f"{prefix}.pow", e, 8)
        self.rows(f"{prefix}.mean", rows, e * 4 + rows * 4, e)
        self.ew(f"{prefix}.add_eps", rows, 8)
        self.ew(f"{prefix}.rsqrt", rows, 8)
        self.ew(f"{prefix}.mul", e, 12)
        self.ew(f"{prefix}.to_bf16", e, 4 + ACT)
        self.ew(f"{prefix}.mul_weight", e, 3 * ACT)

    def rope(self, prefix, elems):
        """transformers' rotate-half RoPE on `elems` rotated values: q*cos, rotate_half (two muls, a sub), q*sin,
        add, cat of the halves."""
        for k in ("mul_cos_a", "mul_cos_b", "sub", "mul_sin_a", "mul_sin_b", "add"):
            self.ew(f"{prefix}.{k}", elems / 2, 3 * ACT)
        self.ew(f"{prefix}.cat", elems, 2 * ACT, 0.0)


def eager_kernels(chip, spec, op, t_shard: int, b: int, wdtype: str, moe: dict | None, ctx: int) \
        -> list[tuple[str, dict]]:
    """The plain-framework kernels one rank runs for logical op `op` (fabric.capture.graph): (name, parts) pairs,
    each costed with fabric.capture.kernels._finish. An empty list: the op launches no kernel of its own in eager
    mode (e.g. MLA's W_UV absorb: the modeling code gets v from the expanded kv_b GEMM)."""
    T = _T(chip, wdtype)
    if op.op in _NO_KERNEL:
        return []
    family = _EAGER.get(op.op)
    if family is None:
        raise ConfigError(f"the eager runtime has no template for logical op type {op.op!r} ({op.name})")
    family(T, spec, op, t_shard, b, moe, ctx)
    return T.out


# One template per family of logical ops (the module docstring's table); each appends the op's kernels to T.
# Arguments: T, the model spec, the op, the tp shard count, the rank's tokens, the MoE load (experts only), context.

def _sh(n: int, t_shard: int) -> int:
    return -(-n // t_shard)


def _norm(T, spec, op, t_shard, b, moe, ctx):
    d = op.dims
    n = d["n"] if op.style == "replicated" else _sh(d["n"], t_shard)
    if d["add"]:
        T.ew(f"{op.name}.residual_add", b * n * d["width"], 3 * ACT)
    T.rmsnorm(op.name, b * n, d["width"])


def _linear(T, spec, op, t_shard, b, moe, ctx):
    nm = op.name
    i, out = linear_dims(op.style, op.dims, lambda n: _sh(n, t_shard))
    if nm == "qkv_a_proj" and spec.family == "mla_moe":   # q_a_proj and kv_a_proj_with_mqa
        T.mat("q_a_proj", 1, b, i, spec.q_lora)
        T.mat("kv_a_proj", 1, b, i, out - spec.q_lora)
    elif nm in ("gate_up_proj", "shared_gate_up"):        # gate_proj and up_proj
        base = "shared_" if nm.startswith("shared") else ""
        T.mat(f"{base}gate_proj", 1, b, i, out // 2)
        T.mat(f"{base}up_proj", 1, b, i, out - out // 2)
    else:
        T.mat(nm, 1, b, i, out)
        if op.style == "vocab":                           # logits.float()
            T.ew(f"{nm}.to_fp32", b * out, ACT + 4)


def _qkv_linear(T, spec, op, t_shard, b, moe, ctx):
    d = op.dims
    q, kv = d["heads"] // t_shard, _sh(d["kv_heads"], t_shard)
    T.mat("q_proj", 1, b, d["in"], q * d["head_dim"])
    T.mat("k_proj", 1, b, d["in"], kv * d["head_dim"])
    T.mat("v_proj", 1, b, d["in"], kv * d["head_dim"])


def _act(T, spec, op, t_shard, b, moe, ctx):
    d = op.dims
    w = d["width"] if op.style == "replicated" else _sh(d["width"], t_shard)
    T.ew(f"{op.name}.silu", b * w, 2 * ACT, 4.0)
    T.ew(f"{op.name}.mul", b * w, 3 * ACT)


def _rope_mla(T, spec, op, t_shard, b, moe, ctx):
    d = op.dims
    hl = d["heads"] // t_shard
    T.rope("q_pe", b * hl * d["rope"])
    T.rope("k_pe", b * d["rope"])
    T.ew("query_cat", b * hl * (spec.nope + d["rope"]), 2 * ACT, 0.0)
    T.ew("cache_cat_latent", b * ctx * d["kv_lora"], 2 * ACT, 0.0)
    T.ew("cache_cat_rope", b * ctx * d["rope"], 2 * ACT, 0.0)


def _rope_gqa(T, spec, op, t_shard, b, moe, ctx):
    d = op.dims
    hl, kv, hd = d["heads"] // t_shard, _sh(d["kv_heads"], t_shard), d["head_dim"]
    T.rope("q", b * hl * hd)
    T.rope("k", b * kv * hd)
    T.ew("cache_cat_k", b * ctx * kv * hd, 2 * ACT, 0.0)
    T.ew("cache_cat_v", b * ctx * kv * hd, 2 * ACT, 0.0)


def _mla_absorb_k(T, spec, op, t_shard, b, moe, ctx):
    """The modeling code expands kv_b over the whole cache instead of absorbing."""
    d = op.dims
    hl = d["heads"] // t_shard
    T.mat("kv_b_proj", 1, b * ctx, d["kv_lora"], hl * (d["nope"] + spec.v_dim))
    T.ew("key_copy_nope", b * hl * ctx * d["nope"], 2 * ACT, 0.0)
    T.ew("key_copy_pe", b * hl * ctx * spec.rope, 2 * ACT, 0.0)


def _mla_attention(T, spec, op, t_shard, b, moe, ctx):
    d = op.dims
    hl, dk, dv = d["heads"] // t_shard, spec.nope + d["rope"], spec.v_dim
    T.out.append(("sdpa", attention_parts(T.chip, T.kp, b, hl, 1, d["ctx"], (dk + dv) * ACT, dk, dv,
                                          fused_combine=True, max_split=1)))


def _gqa_attention(T, spec, op, t_shard, b, moe, ctx):
    d = op.dims
    hl, kv, hd = d["heads"] // t_shard, _sh(d["kv_heads"], t_shard), d["head_dim"]
    T.out.append(("sdpa", attention_parts(T.chip, T.kp, b, kv, max(1, hl // kv), d["ctx"], 2 * hd * ACT, hd, hd,
                                          fused_combine=False)))


def _embedding(T, spec, op, t_shard, b, moe, ctx):
    w = op.dims["hidden"]
    for k in ("mask_lt", "mask_ge", "mask_or", "shift"):
        T.ew(f"embed.{k}", b, 8 + 8)
    T.rows("embed.embedding", b, 2 * b * w * ACT + b * 8)
    T.ew("embed.masked_fill", b * w, 2 * ACT + 1)
    rd = max(1, (spec.rope or spec.head_dim))
    for k in ("inv_freq_mul", "cat", "cos", "sin", "mul_cos", "mul_sin", "to_cos", "to_sin"):
        T.ew(f"rotary.{k}", b * rd, 8)


def _router(T, spec, op, t_shard, b, moe, ctx):
    E, h = op.dims["experts"], op.dims["in"]
    if spec.family == "mla_moe":           # DeepseekV3TopkRouter: F.linear(x.float(), weight.float())
        T.ew("gate.x_to_fp32", b * h, ACT + 4)
        T.ew("gate.w_to_fp32", h * E, ACT + 4)
        T.mat("gate", 1, b, h, E, wdtype="fp32")
    else:
        T.mat("gate", 1, b, h, E)


def _topk(T, spec, op, t_shard, b, moe, ctx):
    d = op.dims
    E, k = d["experts"], d["topk"]
    G, kg = max(1, d["n_group"]), max(1, d["topk_group"])
    if spec.family == "mla_moe":
        T.ew("sigmoid", b * E, 8, 4.0)
        T.ew("add_bias", b * E, 12)
        if G > 1:
            T.rows("group_topk", b * G, b * E * 4 + b * G * 2 * 12, b * E)
            T.ew("group_sum", b * G, 16)
            T.rows("topk_groups", b, b * G * 4 + b * kg * 12, b * G)
            T.ew("zeros_like", b * G, 4)
            T.ew("scatter_", b * kg, 16)
            T.ew("mask_expand_copy", b * E, 8)
            T.ew("to_bool", b * E, 5)
            T.ew("bitwise_not", b * E, 2)
            T.ew("masked_fill", b * E, 9)
        T.rows("topk", b, b * E * 4 + b * k * 12, b * E * max(1.0, math.log2(E)))
        T.ew("gather", b * k, 16)
        T.ew("sum", b, b * k * 4 + 4)
        T.ew("add_eps", b, 8)
        T.ew("div_", b * k, 12)
        T.ew("mul_scale", b * k, 8)
    else:                                   # softmax router (Qwen-MoE, Mixtral)
        T.rows("softmax", b, b * E * (ACT + 4), 5.0 * b * E)
        T.rows("topk", b, b * E * 4 + b * k * 12, b * E * max(1.0, math.log2(E)))
        T.ew("sum", b, b * k * 4 + 4)
        T.ew("div", b * k, 12)
        T.ew("to_bf16", b * k, 4 + ACT)


def _experts(T, spec, op, t_shard, b, moe, ctx):
    """The whole MoE block's expert loop (experts_act and experts_down launch nothing of their own)."""
    d = op.dims
    pairs, active, ep = moe["pairs"], moe["active"], moe["ep"]
    inter = d["inter"] if ep > 1 else _sh(d["inter"], t_shard)
    h, E = d["hidden"], d["experts"]
    tok = max(1, -(-pairs // max(1, d["topk"])))
    T.ew("experts.zeros_like", tok * h, ACT)
    T.ew("experts.one_hot", pairs * E, 8)
    T.rows("experts.hit_sum", E, pairs * E * 8 + E * 8)
    T.ew("experts.gt", E, 9)
    T.rows("experts.nonzero", 1, E + E * 8)
    rows_e = max(1, -(-pairs // max(1, active)))
    for e in range(active):
        T.ew(f"expert{e}.where", pairs, 16)
        T.ew(f"expert{e}.index", rows_e * h, 2 * ACT)
        T.mat(f"expert{e}.gate_up", 1, rows_e, h, 2 * inter)
        T.ew(f"expert{e}.silu", rows_e * inter, 2 * ACT, 4.0)
        T.ew(f"expert{e}.mul", rows_e * inter, 3 * ACT)
        T.mat(f"expert{e}.down", 1, rows_e, inter, h)
        T.ew(f"expert{e}.index_weights", rows_e, 8)
        T.ew(f"expert{e}.mul_weights", rows_e * h, 2 * ACT + 4)
        T.ew(f"expert{e}.index_add_", rows_e * h, 3 * ACT)


def _aten(T, spec, op, t_shard, b, moe, ctx):
    aten_parts(T, op.dims)


def _moe_combine(T, spec, op, t_shard, b, moe, ctx):
    if op.dims["shared"]:
        T.ew("moe.add_shared", b * op.dims["hidden"], 3 * ACT)


_EAGER = {"norm": _norm, "linear": _linear, "qkv_linear": _qkv_linear, "act": _act, "rope_mla": _rope_mla,
          "rope_gqa": _rope_gqa, "mla_absorb_k": _mla_absorb_k, "mla_attention": _mla_attention,
          "gqa_attention": _gqa_attention, "embedding": _embedding, "router": _router, "topk": _topk,
          "experts_gate_up": _experts, "aten": _aten, "moe_combine": _moe_combine}
# in the per-expert loop of experts_gate_up, or (W_UV) in the expanded kv_b GEMM of mla_absorb_k
_NO_KERNEL = ("experts_act", "experts_down", "mla_absorb_v")


def _numel(shape) -> int:
    return int(math.prod(shape)) if shape else 1


ROW_OPS = {"topk", "sort", "argsort", "mean", "sum", "amax", "amin", "max", "min", "argmax", "argmin", "softmax",
           "_softmax", "log_softmax", "_log_softmax", "cumsum", "nonzero", "prod", "any", "all", "norm",
           "linalg_vector_norm", "var", "std", "logsumexp", "embedding"}


def aten_parts(T: _T, d: dict) -> None:
    """One recorded aten op (fabric.capture.torch_engine.eager_graph) as one kernel, costed by shape:
    linear -> a GEMM (M = the input's rows, the weight's K x N; an fp32 weight runs at fp32, a BF16 weight is read in
    the plan's weight dtype), mm / bmm / matmul -> batched GEMM of activations, scaled_dot_product_attention ->
    decode attention (no split-KV when the q and v head sizes differ: memory-efficient kernel), reductions,
    top-k, softmax and embedding -> one CTA per row, everything else -> elementwise over the output."""
    name, ins, outs = d["aten"], d["ins"], d["outs"]
    in_bytes = sum(_numel(s) * e for s, e in ins)
    out_bytes = sum(_numel(s) * e for s, e in outs)
    if name == "linear" and len(ins) >= 2 and len(ins[1][0]) == 2:
        (x, _), (w, we) = ins[0], ins[1]
        T.mat("linear", 1, _numel(x[:-1]), x[-1], w[0], wdtype="fp32" if we == 4 else None)
    elif name in ("mm", "bmm", "matmul") and len(ins) >= 2 and len(ins[0][0]) >= 2 and len(ins[1][0]) >= 2:
        (a, ae), (bsh, _) = ins[0], ins[1]
        G = _numel(a[:-2])
        T.out.append((name, matrix_parts(T.chip, T.kp, max(1, G), a[-2], a[-1], bsh[-1], float(ae),
                                         "fp32" if ae == 4 else "bf16", fused_reduce=False)))
    elif name == "scaled_dot_product_attention" and len(ins) >= 3:
        q, k, v = ins[0][0], ins[1][0], ins[2][0]
        b, h, dk = q[0], q[1], q[-1]
        hk, L, dv = k[1], k[-2], v[-1]
        T.out.append(("sdpa", attention_parts(T.chip, T.kp, b, hk, max(1, h // hk), L, (dk + dv) * ACT, dk, dv,
                                              fused_combine=False, max_split=1 if dk != dv else None)))
    elif name in ROW_OPS and ins:
        s0 = ins[0][0]
        rows = _numel(s0[:-1]) if len(s0) > 1 else 1
        if name == "embedding":
            rows = _numel(outs[0][0][:-1]) if outs else 1
        T.rows(name, rows, in_bytes + out_bytes, _numel(s0))
    else:
        elems = max([_numel(s) for s, _ in outs] or [1])
        T.ew(name, elems, (in_bytes + out_bytes) / max(1, elems))


def cost_kernels(chip, kernels: list[tuple[str, dict]], launch: str | None) -> list[dict]:
    """One row per launched kernel (a split-K reduce or split-KV combine is its own row): name, duration_ns (the
    kernel alone: kernels._finish, in eager mode max(queue_ns + body, eager_ns)), gpu_ns (the device's own time,
    queue_ns + body in eager mode, for `host_timeline`), flops, bytes."""
    kp = params_of(chip)
    mode = launch or kp.launch_mode
    rows = []

    def gpu(r):
        body = r["latency_ns"] + max(r["memory_ns"], r["compute_ns"])
        return kp.fixed_ns(mode) + body if mode == "eager" else r["time_ns"] - sum(s["time_ns"] for s in r["extra"])

    for name, parts in kernels:
        r = _finish(chip, kp, parts, launch)
        sub = r["extra"]
        rows.append(dict(name=name, duration_ns=r["time_ns"] - sum(s["time_ns"] for s in sub), gpu_ns=gpu(r),
                         flops=float(parts["flops"]), bytes=float(parts["bytes"])))
        for s in sub:
            rows.append(dict(name=f"{name}.{s['name']}", duration_ns=s["time_ns"], gpu_ns=gpu(s), flops=s["flops"],
                             bytes=s["bytes"]))
    return rows


def host_timeline(gpu_ns, host_ns: float) -> list[float]:
    """Eager launch of a chain of kernels with the host running ahead: the host spends `host_ns` issuing each kernel
    (Python, dispatcher, launch) and never waits for the GPU; kernel i starts when it has been issued and the GPU
    has finished kernel i - 1. Returns each kernel's effective duration (the GPU's finish time minus the previous
    kernel's), so a long kernel banks host time for the short ones after it: the chain's total is the device's
    finish time, at least the host's n x host_ns and at least the sum of the kernels' own times."""
    issued = done = 0.0
    out = []
    for g in gpu_ns:
        issued += host_ns
        end = max(issued, done) + g
        out.append(end - done)
        done = end
    return out
