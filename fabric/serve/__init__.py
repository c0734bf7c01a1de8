"""Serve a workload, not a step: requests scheduled onto a deployment of the fabric, with step times from the step
pipeline (docs/serving.md).

    serve(model="deepseek-r1", preset="sd200", plan="attn=dp,ep=64", workload="azure-conv", requests=1000) -> dict

The package depends on the step pipeline and never the other way round:
    workload    request streams (traces in the Azure format, Poisson, closed loop)
    plan        --plan text -> ServePlan (attention TP or DP, expert parallelism, replicas, two-batch overlap)
    memory      the KV budget of an attention group
    stepmodel   step times memoised on a grid of simulated steps (fabric.replay.run_step) and interpolated
    scheduler   continuous batching with chunked prefill, admission, preemption and a load balancer
    report      throughput, latency percentiles, goodput, KV and batch use, fabric bytes; the timeline
"""
from __future__ import annotations

import sys
import time
import types

from fabric.errors import ConfigError

DEFAULT_TOKEN_BUDGET = 8192    # tokens per step per attention group: vLLM's and SGLang's default chunk size
DEFAULT_MAX_SEQS = 1024        # running sequences per attention group (vLLM V1's default max_num_seqs), at most the
#                                token budget (every running sequence decodes a token a step)
DEFAULT_KV_FRACTION = 0.9      # of the memory left after weights and activations (SGLang's mem_fraction margin)


def serve(*, model: str | None = None, hf_config: str | None = None, preset: str = "sd200", cfg=None,
          plan: str = "tp=64", workload: str = "azure-conv", requests: int | None = None,
          duration_s: float | None = None, rate: float | None = None, slo_ttft_ms: float | None = None,
          slo_tpot_ms: float | None = None, engine: str = "analytic", seed: int = 0,
          chip: str = "sd200-accelerator", token_budget: int = DEFAULT_TOKEN_BUDGET,
          max_seqs: int | None = None, balance: str = "least_tokens", kv_fraction: float = DEFAULT_KV_FRACTION,
          timeline: str | None = None, progress=None, on_point=None) -> dict:
    """Run a served workload; returns the results (JSON-ready). `cfg`: a FabricConfig (default: the preset's).
    progress(done, total): requests finished; on_point(points, seconds): step-model grid steps simulated."""
    from fabric.capture import load_chip, resolve_model
    from fabric.capture.spec import spec_from_config
    from fabric.config import load_config
    from fabric.network import shared
    from fabric.serve.memory import kv_budget
    from fabric.serve.plan import check_plan, parse_plan
    from fabric.serve.report import summarise, write_timeline
    from fabric.serve.scheduler import Scheduler
    from fabric.serve.stepmodel import MAX_STEP_TOKENS, StepModel
    from fabric.serve.workload import parse_workload

    t0 = time.perf_counter()
    if engine not in ("analytic", "packet"):
        raise ConfigError(f"--engine {engine!r} must be analytic or packet")
    for name, v in (("--slo-ttft-ms", slo_ttft_ms), ("--slo-tpot-ms", slo_tpot_ms)):
        if v is not None and not v > 0:
            raise ConfigError(f"{name} must be > 0, got {v}")
    if not 1 <= token_budget <= MAX_STEP_TOKENS:
        raise ConfigError(f"--token-budget {token_budget} must be in [1, {MAX_STEP_TOKENS}]")
    if not 0 < kv_fraction <= 1:
        raise ConfigError(f"kv_fraction {kv_fraction} must be in (0, 1]")
    max_seqs = min(DEFAULT_MAX_SEQS, token_budget) if max_seqs is None else max_seqs
    sp = parse_plan(plan)
    wl = parse_workload(workload, requests=requests, duration_s=duration_s, rate=rate, seed=seed)
    name, mcfg = resolve_model(model, hf_config)
    spec = spec_from_config(mcfg, name)
    prof = load_chip(chip)
    cfg = cfg if cfg is not None else load_config(preset)
    topo = shared(cfg)
    check_plan(sp, spec, topo.n_ranks - topo.n_spares, preset)
    budget = kv_budget(spec, sp, prof, token_budget, kv_fraction)
    sm = StepModel(model, hf_config, spec, sp, prof, cfg, engine=engine, seed=seed, on_point=on_point)
    sched = Scheduler(wl, sp, sm, budget.tokens_per_group, token_budget=token_budget, max_seqs=max_seqs,
                      balance=balance, progress=progress)
    sched.run()
    res = summarise(sched, wl, sp, slo_ttft_ms, slo_tpot_ms, cfg.topology.accels_per_domain)
    meta = dict(model=name, preset=preset, chip=prof.name, plan=sp.text, plan_described=sp.describe(),
                workload=wl.name, workload_meta=wl.meta, engine=engine, seed=seed, token_budget=token_budget,
                max_seqs=max_seqs, balance=balance, kv_fraction=kv_fraction)
    out = dict(meta, ranks=sp.total_ranks, attention_groups=sp.groups, memory=budget.as_dict(), **res,
               step_model=dict(grid_steps_simulated=len(sm.points), simulate_s=sm.sim_s),
               wall_s=time.perf_counter() - t0)
    if timeline:
        out["timeline"] = write_timeline(timeline, sched, sp, meta)
    return out


class _CallableModule(types.ModuleType):
    """`fabric.serve(...)` is serve(...): the package is the API's entry point and the home of its parts."""

    def __call__(self, **kwargs) -> dict:
        return serve(**kwargs)


sys.modules[__name__].__class__ = _CallableModule
