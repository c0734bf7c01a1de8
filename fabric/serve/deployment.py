"""A deployment: a model on a plan on a fabric, its KV budget and step model made once (fabric.serve.Deployment)."""
from __future__ import annotations

import time

from fabric.errors import ConfigError

DEFAULT_TOKEN_BUDGET = 8192    # tokens per step per attention group: vLLM's and SGLang's default chunk size
DEFAULT_MAX_SEQS = 1024        # running sequences per attention group (vLLM V1's default max_num_seqs), at most the
#                                token budget (every running sequence decodes a token a step)
DEFAULT_KV_FRACTION = 0.9      # of the memory left after weights and activations (SGLang's mem_fraction margin)
KV_TIERS = ("hbm", "host")     # where KV may live: HBM only (preempted sequences recompute), or HBM + host memory


def check_slos(slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> None:
    for name, v in (("--slo-ttft-ms", slo_ttft_ms), ("--slo-tpot-ms", slo_tpot_ms)):
        if v is not None and not v > 0:
            raise ConfigError(f"{name} must be > 0, got {v}")


def max_seqs_for(token_budget: int, max_seqs: int | None) -> int:
    """--max-seqs, by default DEFAULT_MAX_SEQS or the token budget if smaller."""
    return min(DEFAULT_MAX_SEQS, token_budget) if max_seqs is None else max_seqs


class Deployment:
    """A model on a plan on a fabric: its KV budget and step model, made once; `serve` runs any workload on it
    (the step model's grid is kept between workloads: a sweep over load pays for it once)."""

    def __init__(self, *, model: str | None = None, hf_config: str | None = None, preset: str = "sd200", cfg=None,
                 plan: str = "tp=64", engine: str = "analytic", seed: int = 0, chip: str = "sd200-accelerator",
                 token_budget: int = DEFAULT_TOKEN_BUDGET, kv_fraction: float = DEFAULT_KV_FRACTION, on_point=None,
                 plan_flag: str = "--plan", kv_tier: str = "hbm", first_rank: int = 0):
        from fabric.capture import load_chip, resolve_model
        from fabric.capture.spec import spec_from_config
        from fabric.config import load_config
        from fabric.network import shared
        from fabric.serve.memory import kv_budget
        from fabric.serve.plan import check_plan, parse_plan
        from fabric.serve.stepmodel import MAX_STEP_TOKENS, StepModel
        if engine not in ("analytic", "packet"):
            raise ConfigError(f"--engine {engine!r} must be analytic or packet")
        if not 1 <= token_budget <= MAX_STEP_TOKENS:
            raise ConfigError(f"--token-budget {token_budget} must be in [1, {MAX_STEP_TOKENS}]")
        if not 0 < kv_fraction <= 1:
            raise ConfigError(f"kv_fraction {kv_fraction} must be in (0, 1]")
        if kv_tier not in KV_TIERS:
            raise ConfigError(f"--kv-tier {kv_tier!r} must be one of {', '.join(KV_TIERS)}")
        self.plan = parse_plan(plan, plan_flag)
        self.model_name, mcfg = resolve_model(model or (None if hf_config else "deepseek-r1"), hf_config)
        self.spec = spec = spec_from_config(mcfg, self.model_name)
        self.chip = load_chip(chip)
        self.cfg = cfg if cfg is not None else load_config(preset)
        topo = shared(self.cfg)
        check_plan(self.plan, spec, topo.n_serving, preset)
        self.kv = kv_budget(spec, self.plan, self.chip, token_budget, kv_fraction)
        self.tier = None
        if kv_tier == "host":
            from fabric.serve.tier import HostTier
            self.tier = HostTier(self.cfg, self.plan, self.kv, engine, kv_fraction, first_rank=first_rank,
                                 replicated=spec.kv_lora > 0)
        self.stepmodel = StepModel(model or (None if hf_config else "deepseek-r1"), hf_config, spec, self.plan,
                                   self.chip, self.cfg, engine=engine, seed=seed, on_point=on_point)
        self.meta = dict(model=self.model_name, preset=preset, chip=self.chip.name, plan=self.plan.text,
                         plan_described=self.plan.describe(), engine=engine, seed=seed, token_budget=token_budget,
                         kv_fraction=kv_fraction, kv_tier=kv_tier)

    def serve(self, workload: str = "azure-conv", *, requests: int | None = None, duration_s: float | None = None,
              rate: float | None = None, slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
              max_seqs: int | None = None, balance: str = "least_tokens", timeline: str | None = None,
              progress=None, shared_prefix: str | None = None) -> dict:
        from fabric.serve.report import summarise, write_timeline
        from fabric.serve.scheduler import Scheduler
        from fabric.serve.workload import parse_workload
        t0 = time.perf_counter()
        check_slos(slo_ttft_ms, slo_tpot_ms)
        budget = self.meta["token_budget"]
        max_seqs = max_seqs_for(budget, max_seqs)
        wl = parse_workload(workload, requests=requests, duration_s=duration_s, rate=rate, seed=self.meta["seed"],
                            shared_prefix=shared_prefix)
        sm = self.stepmodel
        simulated, sim_s = sm.simulated, sm.sim_s
        sched = Scheduler(wl, self.plan, sm, self.kv.tokens_per_group, token_budget=budget, max_seqs=max_seqs,
                          balance=balance, progress=progress, tier=self.tier)
        sched.run()
        res = summarise(sched, wl, self.plan, slo_ttft_ms, slo_tpot_ms, self.cfg.topology.accels_per_domain)
        meta = dict(self.meta, workload=wl.name, workload_meta=wl.meta, max_seqs=max_seqs, balance=balance)
        out = dict(meta, ranks=self.plan.total_ranks, attention_groups=self.plan.groups, memory=self.kv.as_dict(),
                   **res, step_model=dict(grid_steps_simulated=sm.simulated - simulated,
                                          simulate_s=sm.sim_s - sim_s),
                   wall_s=time.perf_counter() - t0)
        if self.tier is not None:
            from fabric.serve.report import host_tier
            out["host_tier"] = host_tier(sched)
        if wl.prefix_id is not None:
            from fabric.serve.report import prefix_cache
            out["prefix_cache"] = prefix_cache(sched, wl)
        if timeline:
            out["timeline"] = write_timeline(timeline, sched, self.plan, meta)
        return out
