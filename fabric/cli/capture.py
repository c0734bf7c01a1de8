"""fabric-capture: write the trace of one decode step of a model under a parallel plan."""
from __future__ import annotations

import time

import click

from fabric.cli.common import Command, check_writable, friendly


@click.command(cls=Command, help="Capture one decode step of a model as a fabric trace (HDF5, format v1). Built-in models: "
                    "deepseek-r1, kimi-k2, qwen3-235b-a22b, llama-3-70b, toy-mla; or --hf-config config.json (or its "
                    "folder).")
@click.option("--model", default=None, help="built-in model name")
@click.option("--hf-config", type=click.Path(), default=None,
              help="an HF-style config.json of a supported architecture, or the model folder holding it, instead of "
                   "--model (the trace names the model from the config)")
@click.option("--tp", type=int, required=True, help="tensor-parallel ranks (attention, dense MLP)")
@click.option("--ep", type=int, default=1, show_default=True,
              help="expert-parallel ranks (1 = experts tensor-parallel; else a multiple of --tp)")
@click.option("--batch", type=int, default=1, show_default=True, help="sequences decoded together")
@click.option("--context", type=int, default=4096, show_default=True, help="tokens already in the KV cache")
@click.option("--chip", default="sd200-accelerator", show_default=True,
              help="chip profile (h200, h100, sd200-accelerator) or a profile .toml")
@click.option("--engine", type=click.Choice(["analytic", "torch"]), default="analytic", show_default=True,
              help="analytic: from the config; torch: record the transformers model on the meta device")
@click.option("--weight-dtype", type=click.Choice(["bf16", "fp8", "int8", "int4"]), default="bf16", show_default=True,
              help="dtype of the weights (bytes read by GEMMs and held in memory)")
@click.option("--allow-oversubscribe", is_flag=True, default=False,
              help="write the trace even when a rank's weights, KV cache and workspace exceed the chip's memory")
@click.option("--dispatch-dtype", type=click.Choice(["bf16", "fp8"]), default="fp8", show_default=True,
              help="payload dtype of the expert-parallel dispatch")
@click.option("--runtime", type=click.Choice(["fused", "eager"]), default="fused", show_default=True,
              help="fused: a serving engine's fused kernels (what the SD200 stack runs); eager: a plain framework, "
                   "one kernel per framework op (split-K reduces, copies, separate elementwise ops)")
@click.option("--cost-model", type=click.Choice(["roofline", "shape"]), default=None,
              help="kernel cost model: roofline or the shape-aware model (default for --runtime fused: the chip "
                   "profile's, shape on sd200-accelerator, roofline on h200/h100; default and required for "
                   "--runtime eager); docs/compute-model.md")
@click.option("--launch", type=click.Choice(["graph", "eager", "queue"]), default=None,
              help="shape model: how kernels are launched (default: the chip profile's mode; eager for --runtime "
                   "eager)")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="seed of the routing oracle")
@click.option("--replicas", type=click.IntRange(1, 4096), default=1, show_default=True,
              help="independent data-parallel copies of the whole tp x ep deployment, side by side (each decodes "
                   "--batch sequences): 16 replicas of --tp 64 fill 1024 accelerators")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="trace file to write")
@friendly
def main(model, hf_config, tp, ep, batch, context, chip, engine, weight_dtype, allow_oversubscribe, dispatch_dtype,
         runtime, cost_model, launch, seed, replicas, output):
    check_writable(output, "-o")
    from fabric import trace as T
    from fabric.capture import capture
    t0 = time.perf_counter()
    tr = capture(model, hf_config, tp=tp, ep=ep, batch=batch, context=context, chip=chip, engine=engine,
                 weight_dtype=weight_dtype, dispatch_dtype=dispatch_dtype, seed=seed,
                 allow_oversubscribe=allow_oversubscribe, runtime=runtime, cost_model=cost_model,
                 launch=launch, replicas=replicas)
    T.write(output, tr)
    s = T.summary(tr)
    colls = ", ".join(f"{min(c['count_per_rank'])}-{max(c['count_per_rank'])} x {c['kind']} {c['bytes']:,} B"
                      if min(c['count_per_rank']) != max(c['count_per_rank'])
                      else f"{c['count_per_rank'][0]} x {c['kind']} {c['bytes']:,} B" for c in s["collectives"])
    us = s["compute_us_per_rank"]
    click.echo(f"wrote {output}: {s['model']}, {tr.n_ranks} ranks, {max(s['ops_per_rank'])} ops per rank, "
               f"{colls or 'no collectives'}; {runtime} runtime; compute {min(us):.1f}-{max(us):.1f} us per rank "
               f"({time.perf_counter() - t0:.2f} s)")
