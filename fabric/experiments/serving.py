"""The published SD200 serving results as experiments (docs/sources.md §SD200 serving): JSON-ready rows.

    scaling_16_vs_64()   DeepSeek-R1 on 16 vs 64 accelerators: what 16 needs to fit in memory, and the speed-up
    context_growth()     TPOT averaged over 1024 output tokens as the context grows from 4096
    batch_sweep()        batch 1..64: tokens/s per user and per node

Every experiment captures in memory (analytic capture engine, fabric.capture) and replays with the analytic replay
engine by default (about 0.5 s per step on the 64-rank preset; `engine="packet"` for the packet engine). Kernel
costs: the chip profile's default model (the shape-aware model of `sd200-accelerator`, whose per-kernel launch cost
is calibrated on the published 8.9 ms TPOT: docs/calibration.md), runtime fused (what the SD200 stack runs). None of
these functions reads a published value; `PUBLISHED` is there for the caller that judges the rows.

The analytic replay engine underestimates the two-shot all-reduces of batches 8-32 (17 us against the packet
engine's 49 us for 458 KB), so the batch sweep's exposed communication there is low; docs/compute-model.md
§Serving experiments gives both engines' figures.
"""
from __future__ import annotations

import functools
import time

import numpy as np

MODEL = "deepseek-r1"
CHIP = "sd200-accelerator"
PRESET = "sd200"
ENGINE = "analytic"
# The 64-accelerator sd200 preset with its 2x2x2 mesh of domain switches cut to 2x1x1: 2 domains x 8 = 16 ranks,
# the same switches, links and software.
PRESET_16 = {"topology.sd200.switch_mesh_dims": "2x1x1"}
DTYPES_BY_SIZE = ("bf16", "fp8", "int8", "int4")   # the weight dtypes tried, largest first

# Published (docs/sources.md §SD200 serving); never read by the experiments below.
PUBLISHED = {"speedup_16_to_64": 16.3, "tpot_ms": 8.9, "tokens_per_s": 112.0, "input": 4096, "output": 1024}


def _cfg(n_ranks: int, preset: str = PRESET, overrides: dict | None = None):
    from fabric.config import load_config
    ov = dict(overrides or {})
    if n_ranks == 16 and preset == PRESET and not ov:
        ov = dict(PRESET_16)
    return load_config(preset, overrides=ov or None)


def replay_trace(tr, cfg, engine: str = ENGINE) -> dict:
    """TPOT and the compute / exposed-communication split of one decode step (fabric.replay.run_step, from a
    Trace), on the network cfg describes as the lowering's library tuner and flow control see it
    (fabric.network.shared: built once per config and process, not again for each step)."""
    from fabric.replay import run_step
    run = run_step(tr, cfg, engine)
    s = run.summary
    return dict(tpot_us=s["step_us"], compute_us=s["compute_us"], comm_us=s["exposed_comm_us"],
                comm_fraction=s["comm_fraction"], wall_s=run.result.wall_s)


def step(tp: int, *, batch: int = 1, context: int = 4096, weight_dtype: str = "bf16", chip: str = CHIP,
         engine: str = ENGINE, cfg=None, model: str = MODEL, **capture_kw) -> dict:
    """Capture one decode step (analytic capture engine) and replay it: TPOT, compute and exposed communication."""
    from fabric.capture import capture
    tr = capture(model, tp=tp, batch=batch, context=context, chip=_chip(chip), weight_dtype=weight_dtype,
                 **capture_kw)
    cfg = cfg if cfg is not None else _cfg(tr.n_ranks)
    r = replay_trace(tr, cfg, engine)
    return dict(ranks=tr.n_ranks, tp=tp, batch=batch, context=context, weight_dtype=weight_dtype,
                tpot_us=r["tpot_us"], compute_us=r["compute_us"], exposed_comm_us=r["comm_us"],
                comm_fraction=r["comm_fraction"], tokens_per_s_per_user=1e6 / r["tpot_us"],
                tokens_per_s=batch * 1e6 / r["tpot_us"])


def memory(tp: int, *, batch: int = 1, context: int = 4096, weight_dtype: str = "bf16", chip: str = CHIP,
           model: str = MODEL) -> dict:
    """Per-rank memory plan (fabric.capture.memory) of a pure-TP plan."""
    return dict(_memory(tp, batch, context, weight_dtype, chip, model))


@functools.lru_cache(maxsize=256)
def _memory(tp: int, batch: int, context: int, weight_dtype: str, chip: str, model: str) -> dict:
    """memory's plan, once per process (~5 ms each; max_batch's bisections and the experiments ask again)."""
    from fabric.capture import Plan
    from fabric.capture.memory import memory_plan
    return memory_plan(_spec(model), Plan(tp=tp, batch=batch, context=context, weight_dtype=weight_dtype),
                       _chip(chip))


@functools.lru_cache(maxsize=8)
def _spec(model: str):
    """A built-in model's ModelSpec (frozen), parsed once per process: ~50 memory plans and 16 steps ask for it."""
    from fabric.capture import resolve_model
    from fabric.capture.spec import spec_from_config
    name, cfg = resolve_model(model)
    return spec_from_config(cfg, name)


@functools.lru_cache(maxsize=8)
def _chip(chip: str):
    """A chip profile (frozen ChipProfile) by name, its TOML parsed once per process, not per plan and step."""
    from fabric.capture import load_chip
    return load_chip(chip)


def fitting_dtype(tp: int, *, batch: int = 1, context: int = 4096, chip: str = CHIP, model: str = MODEL) \
        -> tuple[str | None, dict]:
    """The largest weight dtype whose plan fits (None: none does), and the bf16 plan."""
    first = memory(tp, batch=batch, context=context, weight_dtype="bf16", chip=chip, model=model)
    for wd in DTYPES_BY_SIZE:
        m = first if wd == "bf16" else memory(tp, batch=batch, context=context, weight_dtype=wd, chip=chip,
                                               model=model)
        if m["fits"]:
            return wd, first
    return None, first


def max_batch(tp: int, *, context: int, weight_dtype: str, chip: str = CHIP, model: str = MODEL,
              limit: int = 4096) -> int:
    """The largest batch whose KV cache still fits next to the weights (bisection on the memory plan)."""
    if not memory(tp, batch=1, context=context, weight_dtype=weight_dtype, chip=chip, model=model)["fits"]:
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if memory(tp, batch=mid, context=context, weight_dtype=weight_dtype, chip=chip, model=model)["fits"]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def scaling_16_vs_64(*, chip: str = CHIP, engine: str = ENGINE, context: int = 4096, output: int = 1024,
                     like_for_like: bool = True, run_step=step) -> dict:
    """DeepSeek-R1 TP16 vs TP64 (pure tensor parallelism, as the SD200 stack runs it).

    Rows: one per configuration (ranks, weight dtype, memory per rank, whether BF16 fits, TPOT at batch 1, the
    largest batch that fits at context + output tokens, and the throughput there). Speed-ups: batch-1 TPOT ratio
    (per-user speed) and max-batch throughput ratio (per-system speed), 64 over 16 cards, for the published 64-card
    configuration (BF16) and, with like_for_like, both in the dtype 16 cards need."""
    t0 = time.perf_counter()
    need16, bf16_16 = fitting_dtype(16, context=context, chip=chip)
    rows = []
    configs = [(16, need16 or "bf16"), (64, "bf16")]
    if like_for_like and need16 not in (None, "bf16"):
        configs.append((64, need16))
    for n, wd in configs:
        mem = memory(n, context=context, weight_dtype=wd, chip=chip)
        row = dict(ranks=n, weight_dtype=wd, memory_gib=mem["total_gib"], weights_gib=mem["weights_gib"],
                   capacity_gib=mem["capacity_gib"], fits=bool(mem["fits"]),
                   allow_oversubscribe=not mem["fits"])
        st = run_step(n, context=context, weight_dtype=wd, chip=chip, engine=engine)
        row.update(tpot_us=st["tpot_us"], compute_us=st["compute_us"], exposed_comm_us=st["exposed_comm_us"],
                   tokens_per_s_per_user=st["tokens_per_s_per_user"])
        mb = max_batch(n, context=context + output, weight_dtype=wd, chip=chip)
        row["max_batch"] = mb
        if mb:
            sb = run_step(n, batch=mb, context=context, weight_dtype=wd, chip=chip, engine=engine)
            row.update(max_batch_tpot_us=sb["tpot_us"], max_batch_tokens_per_s=sb["tokens_per_s"])
        rows.append(row)
    by = {(r["ranks"], r["weight_dtype"]): r for r in rows}
    r16 = rows[0]
    speedups = []
    for (n, wd), r in by.items():
        if n != 64:
            continue
        speedups.append(dict(
            compare=f"64 x {wd} vs 16 x {r16['weight_dtype']}",
            tpot_speedup=r16["tpot_us"] / r["tpot_us"],
            throughput_speedup=(r.get("max_batch_tokens_per_s", 0.0) / r16["max_batch_tokens_per_s"])
            if r16.get("max_batch_tokens_per_s") else None))
    change = ("nothing: BF16 fits" if need16 == "bf16" else
              f"weights in {need16} (BF16 needs {bf16_16['total_gib']:.1f} GiB per rank of "
              f"{bf16_16['capacity_gib']:.0f} GiB)" if need16 else
              f"refused: no weight dtype fits (BF16 needs {bf16_16['total_gib']:.1f} GiB per rank)")
    return dict(experiment="DeepSeek-R1 16 vs 64 accelerators", chip=chip, engine=engine, capture_engine="analytic",
                context=context, output=output, change_for_16=change, weight_dtype_16=need16, rows=rows,
                speedups=speedups, wall_s=time.perf_counter() - t0)


def context_growth(*, start: int = 4096, output: int = 1024, samples: int = 5, batch: int = 1, tp: int = 64,
                   chip: str = CHIP, engine: str = ENGINE, weight_dtype: str = "bf16", run_step=step) -> dict:
    """TPOT of output token t (0 <= t < output) sees start + t tokens of context; sample `samples` contexts evenly
    from start to start + output and integrate (trapezoid; TPOT is linear in the context to within the model's
    rounding) into the mean TPOT over the whole output and its tokens/s."""
    t0 = time.perf_counter()
    ctxs = np.unique(np.linspace(start, start + output, samples).round().astype(int))
    rows = [run_step(tp, batch=batch, context=int(c), weight_dtype=weight_dtype, chip=chip, engine=engine)
            for c in ctxs]
    tp_us = np.array([r["tpot_us"] for r in rows])
    tokens = np.arange(output) + start
    mean = float(np.interp(tokens, ctxs, tp_us).mean())
    return dict(experiment="TPOT over 1024 output tokens from context 4096", chip=chip, engine=engine,
                capture_engine="analytic", start=start, output=output, batch=batch,
                rows=[dict(context=r["context"], tpot_us=r["tpot_us"], compute_us=r["compute_us"],
                           exposed_comm_us=r["exposed_comm_us"]) for r in rows],
                tpot_first_us=float(tp_us[0]), tpot_last_us=float(tp_us[-1]), tpot_mean_us=mean,
                growth=float(tp_us[-1] / tp_us[0] - 1.0), tokens_per_s=batch * 1e6 / mean,
                wall_s=time.perf_counter() - t0)


def batch_sweep(*, batches=(1, 2, 4, 8, 16, 32, 64), context: int = 4096, tp: int = 64, chip: str = CHIP,
                engine: str = ENGINE, weight_dtype: str = "bf16", run_step=step) -> dict:
    """Tokens/s per user (1 / TPOT) and per node (the whole tp-rank super-node: batch / TPOT) for each batch."""
    t0 = time.perf_counter()
    rows = []
    for b in batches:
        st = run_step(tp, batch=int(b), context=context, weight_dtype=weight_dtype, chip=chip, engine=engine)
        mem = memory(tp, batch=int(b), context=context, weight_dtype=weight_dtype, chip=chip)
        rows.append(dict(batch=int(b), tpot_us=st["tpot_us"], compute_us=st["compute_us"],
                         exposed_comm_us=st["exposed_comm_us"], tokens_per_s_per_user=st["tokens_per_s_per_user"],
                         tokens_per_s_per_node=st["tokens_per_s"], memory_gib=mem["total_gib"],
                         fits=bool(mem["fits"])))
    return dict(experiment="batch 1..64, DeepSeek-R1 TP64", chip=chip, engine=engine, capture_engine="analytic",
                context=context, ranks=tp, rows=rows, wall_s=time.perf_counter() - t0)


def serving(engine: str = ENGINE, run_step=step) -> dict:
    """All three experiments. Every decode step goes through `run_step` (step's arguments; default: step itself),
    so a caller can run the steps elsewhere first (experiments.validate: in parallel, each distinct step once)."""
    return dict(scaling=scaling_16_vs_64(engine=engine, run_step=run_step),
                context=context_growth(engine=engine, run_step=run_step),
                batch=batch_sweep(engine=engine, run_step=run_step))

