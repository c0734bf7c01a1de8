"""What one rank of a plan keeps in accelerator memory, against the chip's capacity.

    memory_plan(spec, plan, chip) -> dict       per-rank breakdown in GiB (every rank of a plan holds the same)
    check_fits(mem, chip, plan)                 ConfigError with the numbers and the fixes when it does not fit

Counted per rank, with the sharding of fabric.capture.plan (the same rules kernel_cost applies):
- weights: every GEMM weight in the plan's weight dtype (bf16 2 B, fp8 / int8 1 B, int4 0.5 B per value) plus its
  quantisation scales (fp8: one fp32 per 128 x 128 block, as DeepSeek-V3's FP8 checkpoints; int8: one fp32 per
  output channel; int4: one bf16 per group of 128 inputs, as GPTQ/AWQ with group size 128); the embedding and the
  norm weights stay BF16. Replicated modules (MLA's fused q_a/kv_a projection, the router, shared experts under
  expert parallelism) count in full on every rank.
- KV cache: (context + 1) tokens for each of the rank's decode sequences (ceil(batch / dp)), plus a mixed step's
  prefill_kv_tokens (its prompt sequences' prefixes and chunks), every layer, BF16. MLA keeps one latent of kv_lora +
  rope values per token, replicated on every TP rank (every head reads it); GQA keeps k and v of the rank's
  ceil(kv_heads / tp) heads.
- activations: the residual stream of the step's tokens (decode + prefill), the largest input + output pair of any
  op at the tokens it runs on (fabric.capture.plan.op_tokens; in a mixed step MLA's per-head keys and values of the
  prompts' KV tokens), and the fp32 logits of the rank's vocab slice (small at decode).
- workspace: split-K partial sums and split-KV partial outputs of the shape-aware model (fabric.capture.kernels),
  when the chip profile has one.
- reserved: the chip profile's [memory] reserved_gib (CUDA context, library workspaces, communication and graph
  buffers) [E].
"""
from __future__ import annotations

import math

from fabric.capture.graph import analytic_graph
from fabric.capture.kernels import ACT, WEIGHT_BYTES, linear_dims, matrix_parts
from fabric.capture.plan import WEIGHT_DTYPES, op_tokens, with_prefill
from fabric.errors import ConfigError

GIB = float(1 << 30)


def _scale_bytes(dtype: str, k: int, n: int, count: int = 1) -> float:
    """Quantisation scales of `count` (k x n) weight matrices."""
    if dtype == "fp8":
        return count * math.ceil(k / 128) * math.ceil(n / 128) * 4.0
    if dtype == "int8":
        return count * n * 4.0
    if dtype == "int4":
        return count * math.ceil(k / 128) * n * 2.0
    return 0.0


def _matrices(op, plan, spec) -> list[tuple[int, int, int]]:
    """(count, k, n) of the weight matrices one rank holds for a logical op."""
    d = op.dims
    n_ranks, tp = plan.n_ranks, plan.tp
    in_moe = spec.layer_is_moe(op.layer) and op.name.startswith(("moe_", "experts_", "shared_")) if op.layer >= 0 \
        else False
    ep_mode = plan.ep > 1 and in_moe
    t = 1 if (ep_mode and op.style in ("colwise", "rowwise")) else tp
    sh = lambda x: -(-x // t)  # noqa: E731
    o = op.op
    if o == "linear":
        return [(1, *linear_dims(op.style, d, sh))]
    if o == "qkv_linear":
        return [(1, d["in"], (d["heads"] // t + 2 * sh(d["kv_heads"])) * d["head_dim"])]
    if o == "router":
        return [(1, d["in"], d["experts"])]
    if o == "mla_absorb_k":
        return [(d["heads"] // t, d["nope"], d["kv_lora"])]
    if o == "mla_absorb_v":
        return [(d["heads"] // t, d["kv_lora"], d["v_dim"])]
    if o in ("experts_gate_up", "experts_down"):
        if plan.ep > 1:
            count, inter = d["experts"] // n_ranks, d["inter"]
        else:
            count, inter = d["experts"], sh(d["inter"])
        return [(count, d["hidden"], 2 * inter)] if o == "experts_gate_up" else [(count, inter, d["hidden"])]
    return []


def memory_plan(spec, plan, chip, graph=None) -> dict:
    """Per-rank memory of `plan` (a fabric.capture.Plan) for `spec` on `chip`; sizes in GiB."""
    graph = with_prefill(graph if graph is not None else analytic_graph(spec, plan.context), spec, plan)
    wd = plan.weight_dtype
    if wd not in WEIGHT_BYTES:
        raise ConfigError(f"weight dtype {wd!r} is not supported; use one of {', '.join(WEIGHT_DTYPES)}")
    tp = plan.tp
    b = plan.b_local
    logit_rows = b
    quant = bf16 = scales = 0.0
    act_peak = 0.0
    workspace = 0.0
    kp = getattr(chip, "kernels", None)
    for op in graph:
        d = op.dims
        t = op_tokens(plan, op)
        for count, k, n in _matrices(op, plan, spec):
            quant += count * k * n * WEIGHT_BYTES[wd]
            scales += _scale_bytes(wd, k, n, count)
            act_peak = max(act_peak, t * (k + n) * ACT * (1 if op.op.startswith("experts_") else count))
            if kp is not None:
                parts = matrix_parts(chip, kp, count, t, k, n, WEIGHT_BYTES[wd], "bf16")
                if parts["split"] > 1:
                    workspace = max(workspace, parts["split"] * count * t * n * 4.0)
        if op.op == "linear" and op.style == "vocab":
            logit_rows = t
        elif op.op == "mla_kv_up":      # kv_b_proj's weight is w_uk's and w_uv's: only its output is new
            act_peak = max(act_peak, t * (d["kv_lora"] + d["heads"] // tp * (d["nope"] + d["v_dim"])) * ACT)
        if op.op == "embedding":
            bf16 += -(-d["vocab"] // tp) * d["hidden"] * ACT
        elif op.op == "norm":
            bf16 += d["width"] * ACT
        elif op.op in ("mla_attention", "gqa_attention") and kp is not None:
            hl = d["heads"] // tp
            groups = 1 if op.op == "mla_attention" else -(-d["kv_heads"] // tp)
            units = b * groups
            splits = max(1, min(math.ceil(kp.sms / units), math.ceil(d["ctx"] / kp.attn_block_n)))
            dv = d["kv_lora"] if op.op == "mla_attention" else d["head_dim"]
            if splits > 1:
                workspace = max(workspace, units * splits * max(1, hl // groups) * (dv + 1) * 4.0)
    tokens = (plan.context + 1) * b + plan.prefill_kv_tokens
    if spec.family == "mla_moe":
        kv_per_token = spec.layers * (spec.kv_lora + spec.rope) * ACT
    else:
        kv_per_token = spec.layers * 2 * -(-spec.kv_heads // tp) * spec.head_dim * ACT
    kv = tokens * kv_per_token
    vocab_local = -(-spec.vocab // tp)
    activations = 2 * (b + plan.prefill_tokens) * spec.hidden * ACT + act_peak + logit_rows * vocab_local * 4
    weights = quant + scales + bf16
    reserved = float(getattr(chip, "reserved_gib", 0.0))
    total = (weights + kv + activations + workspace) / GIB + reserved
    cap = float(getattr(chip, "memory_gib", 0.0)) or None
    by_dtype = {wd: (quant + scales) / GIB}
    by_dtype["bf16"] = by_dtype.get("bf16", 0.0) + bf16 / GIB
    return dict(chip=chip.name, ranks=plan.n_ranks, weight_dtype=wd,
                weights_gib=weights / GIB, weights_by_dtype_gib=by_dtype, scales_gib=scales / GIB,
                kv_cache_gib=kv / GIB, kv_tokens=tokens, kv_bytes_per_token=kv_per_token,
                activations_gib=activations / GIB, workspace_gib=workspace / GIB, reserved_gib=reserved,
                total_gib=total, capacity_gib=cap, fits=None if cap is None else total <= cap,
                headroom_gib=None if cap is None else cap - total)


def check_fits(mem: dict, chip, plan, spec=None) -> None:
    """Raise one ConfigError line when `mem` (memory_plan's result) exceeds the chip's capacity."""
    if mem["fits"] is not False:
        return
    hint = ""
    if spec is not None:
        import dataclasses
        smaller = [d for d in WEIGHT_DTYPES if WEIGHT_BYTES[d] < WEIGHT_BYTES[mem["weight_dtype"]]]
        ok = [d for d in smaller if memory_plan(spec, dataclasses.replace(plan, weight_dtype=d), chip)["fits"]]
        hint = f" (--weight-dtype {ok[0]} fits)" if ok else (" (none fits on this many ranks)" if smaller else "")
    raise ConfigError(
        f"the plan does not fit in memory: each of the {mem['ranks']} ranks needs {mem['total_gib']:.1f} GiB "
        f"(weights {mem['weights_gib']:.1f} GiB in {mem['weight_dtype']}, KV cache {mem['kv_cache_gib']:.2f} GiB, "
        f"activations and workspace {1024 * (mem['activations_gib'] + mem['workspace_gib']):.1f} MiB, runtime "
        f"reserve {mem['reserved_gib']:.1f} GiB) but {chip.name} has {mem['capacity_gib']:.1f} GiB; use more "
        f"ranks (--tp/--ep), a smaller weight dtype{hint}, or --allow-oversubscribe")
