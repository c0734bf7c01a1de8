"""Serve a workload, not a step: requests scheduled onto a deployment of the fabric, with step times from the step
pipeline (docs/serving.md).

    serve(model="deepseek-r1", preset="sd200", plan="attn=dp,ep=64", workload="azure-conv", requests=1000) -> dict

The package depends on the step pipeline and never the other way round:
    workload    request streams (traces in the Azure format, Poisson, closed loop)
    deployment  a model on a plan on a fabric: its KV budget and step model, made once
    plan        --plan text -> ServePlan (attention TP or DP, expert parallelism, replicas, two-batch overlap)
    memory      the KV budget of an attention group
    stepmodel   step times memoised on a grid of simulated steps (fabric.replay.run_step) and interpolated
    scheduler   continuous batching with chunked prefill, admission, preemption and a load balancer
    disagg      prefill and decode pools on separate ranks, the KV handed over on the fabric
    report      throughput, latency percentiles, goodput, KV and batch use, fabric bytes; the timeline
"""
from __future__ import annotations

import sys
import time
import types

from fabric.errors import ConfigError
from fabric.serve.deployment import DEFAULT_KV_FRACTION, DEFAULT_MAX_SEQS, DEFAULT_TOKEN_BUDGET, Deployment

__all__ = ["DEFAULT_KV_FRACTION", "DEFAULT_MAX_SEQS", "DEFAULT_TOKEN_BUDGET", "Deployment", "serve"]


def serve(*, model: str | None = None, hf_config: str | None = None, preset: str = "sd200", cfg=None,
          plan: str = "tp=64", workload: str = "azure-conv", requests: int | None = None,
          duration_s: float | None = None, rate: float | None = None, slo_ttft_ms: float | None = None,
          slo_tpot_ms: float | None = None, engine: str = "analytic", seed: int = 0,
          chip: str = "sd200-accelerator", token_budget: int = DEFAULT_TOKEN_BUDGET,
          max_seqs: int | None = None, balance: str = "least_tokens", kv_fraction: float = DEFAULT_KV_FRACTION,
          timeline: str | None = None, progress=None, on_point=None, prefill: str | None = None,
          decode: str | None = None, kv_tier: str = "hbm", shared_prefix: str | None = None) -> dict:
    """Run a served workload; returns the results (JSON-ready). `cfg`: a FabricConfig (default: the preset's).
    progress(done, total): requests finished; on_point(steps, seconds): the step model's simulated steps so far.
    The wall time includes making the deployment (its step model's grid is made during the run, on demand).
    prefill and decode (plans, both or neither; instead of `plan`): disaggregated serving (fabric.serve.disagg).
    kv_tier: "hbm", or "host" to swap preempted sequences' KV to host memory (fabric.serve.tier).
    shared_prefix: "F[:K]", prompts share prefixes that a prefix cache reuses (fabric.serve.workload)."""
    t0 = time.perf_counter()
    if prefill is not None or decode is not None:
        if prefill is None or decode is None:
            raise ConfigError("disaggregated serving needs both --prefill PLAN and --decode PLAN")
        if timeline:
            raise ConfigError("--timeline draws one pool's steps; it is not written for a disaggregated run yet")
        from fabric.serve.disagg import serve_disaggregated
        return serve_disaggregated(model=model, hf_config=hf_config, preset=preset, cfg=cfg, prefill=prefill,
                                   decode=decode, workload=workload, requests=requests, duration_s=duration_s,
                                   rate=rate, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, engine=engine,
                                   seed=seed, chip=chip, token_budget=token_budget, max_seqs=max_seqs,
                                   balance=balance, progress=progress, on_point=on_point, kv_tier=kv_tier,
                                   shared_prefix=shared_prefix)
    dep = Deployment(model=model, hf_config=hf_config, preset=preset, cfg=cfg, plan=plan, engine=engine, seed=seed,
                     chip=chip, token_budget=token_budget, kv_fraction=kv_fraction, on_point=on_point,
                     kv_tier=kv_tier)
    out = dep.serve(workload, requests=requests, duration_s=duration_s, rate=rate, slo_ttft_ms=slo_ttft_ms,
                    slo_tpot_ms=slo_tpot_ms, max_seqs=max_seqs, balance=balance, timeline=timeline,
                    progress=progress, shared_prefix=shared_prefix)
    out["wall_s"] = time.perf_counter() - t0
    return out


class _CallableModule(types.ModuleType):
    """`fabric.serve(...)` is serve(...) once `import fabric.serve` ran: the package is the API's entry point and the
    home of its parts (fabric/__init__.py does not import it: the root package stays below every layer)."""

    def __call__(self, **kwargs) -> dict:
        return serve(**kwargs)


sys.modules[__name__].__class__ = _CallableModule
