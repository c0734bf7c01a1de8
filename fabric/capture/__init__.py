"""Trace capture: turn a model config and a parallel plan into a fabric trace (docs/trace-format.md).

    capture(model="deepseek-r1", tp=64, batch=1, context=4096, chip="sd200-accelerator") -> fabric.trace.Trace

Engines: "analytic" (config only, no torch; fabric.capture.graph) and "torch" (the real transformers model on the
meta device, recorded with a TorchDispatchMode; fabric.capture.torch_engine). Both produce the same logical graph,
which fabric.capture.plan shards, costs on a chip profile (fabric.capture.chips) and fills with collectives.
"""
from __future__ import annotations

import fabric
from fabric.capture.chips import ChipProfile, chip_names, load_chip
from fabric.capture.plan import Plan, lower
from fabric.capture.spec import ModelSpec, builtin_config, builtin_names, load_hf_config, spec_from_config
from fabric.errors import ConfigError

ENGINES = ("analytic", "torch")

__all__ = ["ENGINES", "ChipProfile", "ModelSpec", "Plan", "builtin_names", "capture", "chip_names", "load_chip",
           "logical_graph", "resolve_model"]


def resolve_model(model: str | None = None, hf_config: str | None = None) -> tuple[str, dict]:
    if bool(model) == bool(hf_config):
        raise ConfigError("give exactly one of --model NAME or --hf-config config.json")
    if model:
        return model, builtin_config(model)
    cfg = load_hf_config(hf_config)
    # the model's name from its config (a folder's config.json lives at .../config.json of any name)
    arch = cfg.get("architectures")
    named = [cfg.get("_name_or_path"), cfg.get("model_type"), arch[0] if isinstance(arch, list) and arch else None]
    return next((str(n) for n in named if isinstance(n, str) and n.strip()), str(hf_config)), cfg


def logical_graph(spec: ModelSpec, config: dict, context: int, engine: str = "analytic", seed: int = 0,
                  batch: int = 1):
    if engine == "analytic":
        from fabric.capture.graph import analytic_graph
        return analytic_graph(spec, context)
    if engine == "torch":
        from fabric.capture.torch_engine import torch_graph
        return torch_graph(spec, config, context, batch=batch, seed=seed)
    raise ConfigError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")


def capture(model: str | None = None, hf_config: str | None = None, *, tp: int, ep: int = 1, batch: int = 1,
            context: int = 4096, chip: str | ChipProfile = "sd200-accelerator", engine: str = "analytic",
            weight_dtype: str = "bf16", dispatch_dtype: str = "fp8", seed: int = 0,
            allow_oversubscribe: bool = True, cost_model: str | None = None, launch: str | None = None,
            runtime: str = "fused", replicas: int = 1, prefill_tokens: int = 0, prefill_context: float = 0,
            prefill_kv_tokens: int = 0, prefill_seqs: int = 1):
    """One decode step as a Trace (`replicas` > 1: that many independent data-parallel copies of the (tp, ep)
    deployment side by side, each with `batch` sequences; fabric.trace.replicate), or with prefill_tokens > 0 one
    mixed serving step: decode tokens and chunked-prefill tokens in one forward pass.

    prefill_tokens       prompt tokens in the step, per attention group (dp = n_ranks / tp groups, each with
                         ceil(batch / dp) >= 1 decode tokens)
    prefill_context      mean keys a prompt token attends to (its sequence's prefix + its place in the chunk)
    prefill_kv_tokens    KV tokens the prefill attention reads per group (each prompt sequence's prefix + chunk)
    prefill_seqs         prompt sequences in the step per group (1: one chunk); the LM head runs on their last tokens

    allow_oversubscribe  False: raise ConfigError when a rank's weights + KV cache + activations + workspace +
                         runtime reserve exceed the chip's memory (fabric.capture.memory). The library default
                         (True) keeps existing recipes working; `fabric-capture` checks unless --allow-oversubscribe.
    cost_model           "roofline" (ChipProfile.kernel_time_ns) or "shape" (fabric.capture.kernels); default: the
                         chip profile's ([chip] cost_model) for the fused runtime, shape for the eager one
    launch               shape model: graph | eager | queue (default: the chip profile's [launch] mode for the fused
                         runtime, eager for the eager runtime)
    chip                 a profile name or path (load_chip), or a ChipProfile (e.g. one with a parameter replaced)
    runtime              "fused" (a serving engine's fused kernels, the default) or "eager" (one kernel per
                         framework op; fabric.capture.runtime). With engine="torch" the eager kernels come from the
                         recorded aten dispatch sequence of a TP-sharded copy of the model (ep == 1 only).
    """
    from fabric.capture.runtime import check_runtime
    check_runtime(runtime)
    prof = chip if isinstance(chip, ChipProfile) else load_chip(chip)
    if cost_model is None:
        cost_model = "shape" if runtime == "eager" else prof.cost_model
    name, cfg = resolve_model(model, hf_config)
    spec = spec_from_config(cfg, name, generic=engine == "torch" and runtime == "eager")
    plan = Plan(tp=tp, ep=ep, batch=batch, context=context, weight_dtype=weight_dtype,
                dispatch_dtype=dispatch_dtype, seed=seed, cost_model=cost_model, launch=launch, runtime=runtime,
                prefill_tokens=prefill_tokens, prefill_context=prefill_context, prefill_kv_tokens=prefill_kv_tokens,
                prefill_seqs=prefill_seqs)
    plan.check(spec)
    if not allow_oversubscribe:
        from fabric.capture.memory import check_fits, memory_plan
        check_fits(memory_plan(spec, plan, prof), prof, plan, spec)
    if engine == "torch" and runtime == "eager" and ep != 1:
        raise ConfigError("--engine torch --runtime eager records a tensor-parallel shard: use --ep 1 (or the "
                          "analytic engine's eager template, which handles expert parallelism)")
    meta = dict(schema_version=1, model=name, model_config=cfg, tool=f"fabric-capture/{engine}",
                tool_version=fabric.__version__)
    if engine == "torch":
        from fabric.capture.torch_engine import eager_graph, paused_gc
        with paused_gc():
            graph = (eager_graph(spec, cfg, context, tp, batch=batch, seed=seed) if runtime == "eager" else
                     logical_graph(spec, cfg, context, engine, seed=seed, batch=batch))
            tr = lower(graph, spec, plan, prof, meta)
    else:
        tr = lower(logical_graph(spec, cfg, context, engine, seed=seed, batch=batch), spec, plan, prof, meta)
    if replicas != 1:       # DP replicas of the whole (tp, ep) deployment: fabric.trace.replicate
        from fabric.trace import replicate
        tr = replicate(tr, replicas)
    return tr
