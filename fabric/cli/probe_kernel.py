"""`fabric-probe kernel`: the predicted time of one kernel on a chip profile and its breakdown
(fabric/capture/kernels.py; equations and constants in docs/compute-model.md)."""
from __future__ import annotations

import click

from fabric.cli.common import Command, check_writable, friendly, json_option, version_meta, write_json

OPS = ("linear", "bmm", "grouped", "attention", "norm", "softmax", "topk", "elementwise", "copy", "embedding")


def parse_shape(text: str | None) -> tuple:
    """'7168,2112' -> (7168, 2112); ConfigError on anything else."""
    from fabric.errors import ConfigError
    if text is None:
        return ()
    try:
        dims = tuple(int(x) for x in text.replace("x", ",").split(","))
    except ValueError:
        raise ConfigError(f"--shape {text!r} must be integers separated by commas, e.g. 7168,2112") from None
    if not dims or any(d < 1 for d in dims):
        raise ConfigError(f"--shape {text!r}: every dimension must be a positive integer")
    check_count("shape", max(dims))
    return dims


def check_count(option: str, value: int) -> None:
    """A count option (a shape dimension, tokens, heads, ...) at most 2^53, the most bytes one op of a trace may
    move (fabric.trace.MAX_MEM_BYTES): beyond it no kernel is in bounds, and a float would lose the count."""
    from fabric.errors import ConfigError
    from fabric.trace import MAX_MEM_BYTES
    if value > MAX_MEM_BYTES:
        raise ConfigError(f"--{option}={value} is larger than any kernel a trace holds (at most 2^53 = "
                          f"{int(MAX_MEM_BYTES)}); use a smaller --{option}")


def check_bounds(r: dict, what: str) -> None:
    """Refuse a prediction beyond the bounds every compute op of a trace obeys (fabric.trace MAX_FLOPS,
    MAX_MEM_BYTES, MAX_OP_NS; docs/trace-format.md §Bounds), the size guard captured kernels get."""
    from fabric import trace
    from fabric.errors import ConfigError
    over = [f"{name} {value:.3g} > {limit:.3g}" for name, value, limit in (
        ("FLOPs", r["flops"], trace.MAX_FLOPS), ("bytes", r["bytes"], trace.MAX_MEM_BYTES),
        ("ns", r["time_ns"], trace.MAX_OP_NS)) if not value <= limit]
    if over:
        raise ConfigError(f"{what} is beyond the bounds of one op of a trace ({', '.join(over)}; "
                          f"docs/trace-format.md §Bounds); use smaller sizes")


def probe_kernel(chip: str, op: str, shape=(), tokens: int = 1, dtype: str = "bf16", launch: str | None = None,
                 **attention) -> dict:
    """Predicted time of one op (time_us) with its breakdown: compute, memory, latency and fixed (launch) ns, the
    regime (compute | bandwidth | latency | launch), CTAs, waves, split and the extra kernels."""
    from fabric.capture import load_chip
    from fabric.capture.kernels import predict
    return predict(load_chip(chip), op, shape=tuple(shape), tokens=tokens, dtype=dtype, launch=launch, **attention)


@click.command("kernel", cls=Command,
               help="Predict the time of one kernel on a chip profile (shape-aware model): compute, memory, "
                    "latency and launch cost, and which one bounds it.")
@click.option("--chip", default="h200", show_default=True, help="chip profile (h200, h100, a100, sd200-accelerator) "
                                                                "or a profile .toml")
@click.option("--op", type=click.Choice(OPS), default="linear", show_default=True, help="kernel type")
@click.option("--shape", default=None, metavar="IN,OUT",
              help="linear/bmm/grouped: IN,OUT; norm/softmax/topk/embedding: WIDTH; elementwise/copy: ELEMENTS")
@click.option("--tokens", type=int, default=1, show_default=True, help="activation rows (batch x tokens)")
@click.option("--dtype", type=click.Choice(["bf16", "fp8", "int8", "int4"]), default="bf16", show_default=True,
              help="weight dtype of a matrix kernel")
@click.option("--launch", type=click.Choice(["graph", "eager", "queue"]), default=None,
              help="launch mode [default: the chip profile's]")
@click.option("--groups", type=int, default=1, show_default=True, help="bmm/grouped: independent products")
@click.option("--ctx", type=int, default=4096, show_default=True, help="attention: cached tokens")
@click.option("--heads", type=int, default=8, show_default=True, help="attention: query heads on this rank")
@click.option("--kv-heads", type=int, default=1, show_default=True, help="attention: KV heads on this rank")
@click.option("--head-dim", type=int, default=128, show_default=True, help="attention: head size (MLA: kv_lora)")
@click.option("--rope", type=int, default=0, show_default=True, help="attention: MLA rope dims (0 = GQA)")
@click.option("--phase", type=click.Choice(["decode", "prefill"]), default="decode", show_default=True,
              help="attention: decode (split-KV over --ctx cached tokens) or prefill (causal FlashAttention over "
                   "--tokens prompt tokens; --ctx = keys the last one sees)")
@click.option("--seqs", type=int, default=1, show_default=True,
              help="attention --phase prefill: sequences the --tokens are split over")
@click.option("--tokens-per-group", type=int, default=None,
              help="grouped: activation rows per group (expert); sets --tokens")
@click.option("--inputs", type=click.Choice(["hbm", "l2"]), default="hbm", show_default=True,
              help="norm/softmax/topk/elementwise/copy: input read from HBM (standalone) or from L2 (just written "
                   "by the kernel before, as in a decode step)")
@click.option("--topk", type=int, default=8, show_default=True,
              help="topk: experts each token selects (8: DeepSeek-V3/R1)")
@json_option("write the result as JSON")
@friendly
def kernel_cmd(chip, op, shape, tokens, dtype, launch, groups, ctx, heads, kv_heads, head_dim, rope, phase, seqs,
               tokens_per_group, inputs, topk, json_path):
    check_writable(json_path)
    from fabric.errors import ConfigError
    dims = parse_shape(shape)
    if op != "attention" and not dims:
        raise ConfigError(f"--op {op} needs --shape")
    if tokens_per_group is not None:
        if op != "grouped":
            raise ConfigError(f"--tokens-per-group is for --op grouped (got --op {op}); use --tokens")
        tokens = tokens_per_group
    extra = dict(ctx=ctx, heads=heads, kv_heads=kv_heads, head_dim=head_dim, rope=rope, phase=phase, seqs=seqs) \
        if op == "attention" else dict(groups=groups, inputs=inputs, topk=topk)
    for k, v in dict(groups=groups, ctx=ctx, heads=heads, kv_heads=kv_heads, head_dim=head_dim, seqs=seqs,
                     tokens_per_group=tokens if tokens_per_group is not None else 1).items():
        if v < 1:
            raise ConfigError(f"--{k.replace('_', '-')}={v} must be a positive integer")
        check_count(k.replace('_', '-'), v)
    check_count("tokens", tokens)
    check_count("rope", rope)
    what = (f"{op} {'x'.join(map(str, dims))}" + (f", {groups} groups" if op == "grouped" else "")
            if op != "attention"
            else f"{'causal prefill ' if phase == 'prefill' else ''}attention over {ctx} tokens, {heads} heads / "
                 f"{kv_heads} KV heads of {head_dim}" + (f" + rope {rope}" if rope else "")
                 + (f", {seqs} sequences" if phase == "prefill" and seqs > 1 else ""))
    r = probe_kernel(chip, op, dims, tokens=tokens, dtype=dtype, launch=launch, **extra)
    check_bounds(r, f"{what}, {tokens} token{'s' if tokens > 1 else ''}")
    click.echo(f"{what}, {tokens} token{'s' if tokens > 1 else ''}, {dtype} on {r['chip']} ({r['launch']} launch): "
               f"{r['time_us']:.2f} us, {r['regime']}-bound")
    sync = f"sync {r['sync_ns'] / 1e3:.2f} us, " if r["sync_ns"] else ""     # only kernels with reductions
    click.echo(f"  kernel: compute {r['compute_ns'] / 1e3:.2f} us, memory {r['memory_ns'] / 1e3:.2f} us, "
               f"latency {r['latency_ns'] / 1e3:.2f} us, {sync}fixed {r['fixed_ns'] / 1e3:.2f} us "
               f"(time = fixed + latency + max(compute, memory){' + sync' if sync else ''})")
    tile = "x".join(map(str, r["tile"])) if r["tile"] else "-"
    click.echo(f"  {r['ctas']} CTAs ({r['waves']} wave{'s' if r['waves'] != 1 else ''}), {r['path']}, tile {tile}, "
               f"split {r['split']}, {r['kernels']} kernel{'s' if r['kernels'] != 1 else ''}")
    for e in r["extra"]:
        click.echo(f"  + {e['name']}: {e['time_us']:.2f} us ({e['ctas']} CTAs)")
    write_json(json_path, r, version_meta(chip=chip, op=op, shape=shape, tokens=tokens, dtype=dtype, launch=launch,
                                          phase=phase, seqs=seqs, inputs=inputs,
                                          **(dict(topk=topk) if op == "topk" else {})))
