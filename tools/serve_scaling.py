"""The 16 -> 64 experiment as a served workload (issue 31 part 4).

    python tools/serve_scaling.py [--requests 500] [--sizes 16,64] [--out docs/data/serve_scaling.json]
        [--check-requests 2000] [--refine 3] [--no-pd] [--no-saturation] [--sat-users 2048,4096] [--from FILE ...]

DeepSeek-R1 on 16 and on 64 accelerators of the sd200 family (64: the preset "sd200"; 16: the same preset with its
2x2x2 mesh of domain switches cut to 2x1x1, 2 host domains x 8: fabric.experiments.serving.PRESET_16), analytic engine.
Each size gets the best plan it can run out of a small searched space: tp=N, attn=dp,ep=N and attn=tp8,ep=N, each
with BF16 and FP8 weights (INT4 only at a size where neither fits with any shape). A plan that does not fit in
memory is refused by fabric.serve.Deployment (ConfigError): it is recorded as "does not fit" with the message.

Every plan that fits serves the same workload, the first --requests requests of the shipped Azure conversation trace
with their arrivals rescaled to each rate, under the same SLOs (TTFT <= 3 s, TPOT <= 100 ms: an interactive chat,
the experiments' own targets, not fitted to anything), climbing a ladder of rates (0.5, 1, 2, 4, ... 64 requests/s)
and stopping at the first rate where fewer than 90 % of the requests meet both SLOs, then --refine (3) geometric
bisections between the last rate met and the first missed. A plan's result: the highest rate
at which >= 90 % met both SLOs and its output tokens/s per accelerator there. A size's best plan: the highest such
rate (then tokens/s per accelerator). Reported: per size the best plan, and 64 vs 16 the ratios of throughput per
accelerator and of total throughput. The published 16.3x speed-up (docs/sources.md) is printed beside them as a
finding; nothing is tuned to it.

Also, with --pd (default), PD splits per size (fabric.serve(prefill=, decode=), FP8; the routed experts' 256 allow
ep 8, 16, 32, 64 a pool): 16 = 8 + 8, which does not fit; 64 = 16 + 48, 32 + 32 and 48 + 16 (prefill attention
tp8, decode attention dp, the 48-rank pool as 3 replicas of 16); with --check-requests N, each size's best plan and best
co-located plan re-run with N requests; with --saturation (default), the published request shape (prompt 4,096,
output 1,024) as a closed loop of users filling each size's largest KV (and --sat-users more on it), throughput with
the KV as the limit and the SLOs reported, not required.

One fabric.serve.Deployment per plan, one fabric.serve.disagg.Disaggregated per PD split (their step models' grids
are shared by the rates). Time on a 2-core VM shared with other jobs, --requests 500: a deployment's first serve
20-90 s (the step model's grid), each further rate 1-15 s; a PD rate took 11-45 s when its pools were made again at
each rate (as measured below); everything with --check-requests 2000 about 22
minutes. --sizes runs part of it; --from FILE (repeatable) takes the rows of plans (and checks, saturation runs)
already run from an earlier --out instead of running them again, so partial runs merge into one output with no
simulation.
"""
from __future__ import annotations

import json
import math
import time

import click

SLO = dict(slo_ttft_ms=3000.0, slo_tpot_ms=100.0)   # the experiment's own targets (an interactive chat), not fitted
MET = 0.9                                           # a rate is met when >= 90 % of the requests meet both SLOs
LADDER = (0.5, 1, 2, 4, 8, 16, 32, 64)
SHAPES = ("tp={n}", "attn=dp,ep={n}", "attn=tp8,ep={n}")
DTYPES = ("bf16", "fp8")
FALLBACK_DTYPES = ("int4",)                         # tried only where no shape fits with DTYPES
# PD splits per size: 16 = one host domain each (8 + 8); 64 = prefill : decode ranks 1 : 3, 1 : 1 (docs/serving.md's
# PD experiment) and 3 : 1
PD_SPLITS = {16: [("attn=tp8,ep=8,weights=fp8", "attn=tp8,ep=8,weights=fp8")],
             64: [("attn=tp8,ep=16,weights=fp8", "attn=dp,ep=16,replicas=3,weights=fp8"),
                  ("attn=tp8,ep=32,weights=fp8", "attn=dp,ep=32,weights=fp8"),
                  ("attn=tp8,ep=16,replicas=3,weights=fp8", "attn=dp,ep=16,weights=fp8")]}
# the request shape of the published one-user figure (docs/sources.md §SD200 serving; the 16.3x figure's own
# workload is not published)
PUBLISHED_SHAPE = dict(prompt=4096, output=1024)
SAT_USERS_CAP = 1024                                # closed-loop users at most in the saturation runs (run time)
PUBLISHED_SPEEDUP = 16.3                            # docs/sources.md §SD200 serving; a finding, never a fit


def size_overrides(n: int) -> dict | None:
    """The sd200 preset's overrides for n accelerators (64: none; 16: two host domains of 8)."""
    from fabric.experiments.serving import PRESET_16
    return dict(PRESET_16) if n == 16 else None


KEYS = ("output_tokens_per_s_per_accelerator", "output_tokens_per_s", "goodput_requests_per_s", "batch_mean",
        "batch_max", "kv_use_mean", "kv_use_max", "preemptions", "exposed_comm_fraction", "duration_s", "finished")


def point(rate: float, r: dict, wall_s: float) -> dict:
    """One rate's figures from a fabric.serve result (the per-request lists dropped)."""
    return dict(rate=rate, met_fraction=r["slo"]["met_fraction"], ttft_ms=r["ttft_ms"], tpot_ms=r["tpot_ms"],
                **{k: r[k] for k in KEYS}, wall_s=wall_s)


def run_plan(model: str, n: int, plan: str, cfg, *, requests: int, ladder=LADDER, refine: int = 3,
             preset: str = "sd200", workload: str = "azure-conv", slo: dict = SLO, overrides=None, pd=None,
             echo=click.echo) -> dict:
    """One plan at one size: refused (does not fit) or its ladder of rates and the best rate met. refine: that many
    geometric bisections between the last rate met and the first missed. pd: (prefill, decode) plans instead of
    `plan` (disaggregated: fabric.serve.disagg.Disaggregated, its pools made once for every rate)."""
    from fabric.errors import ConfigError
    from fabric.serve import Deployment
    from fabric.serve.disagg import Disaggregated
    row = dict(size=n, plan=plan, model=model, preset=preset, overrides=overrides)
    t0 = time.perf_counter()
    try:
        if pd:
            served = Disaggregated(model=model, cfg=cfg, preset=preset, prefill=pd[0], decode=pd[1])
            deps = [served.prefill, served.decode]
        else:
            deps = [Deployment(model=model, cfg=cfg, plan=plan, preset=preset)]
    except ConfigError as e:
        echo(f"  {n:>3} {plan:<28} does not fit: {e}")
        return dict(row, fits=False, refused=str(e))
    ms = [d.kv.as_dict() for d in deps]
    row.update(fits=True, weights_gib_per_rank=ms[-1]["weights_gib"], kv_tokens_per_group=ms[-1]["kv_tokens_per_group"],
               groups=deps[-1].plan.groups, kv_tokens_total=ms[-1]["kv_tokens_per_group"] * deps[-1].plan.groups,
               ranks=sum(d.plan.total_ranks for d in deps))
    if pd:
        row.update(prefill=pd[0], decode=pd[1], prefill_weights_gib_per_rank=ms[0]["weights_gib"])
    points: list[dict] = []

    def at(rate: float) -> dict:
        t = time.perf_counter()
        r = (served if pd else deps[0]).serve(workload, requests=requests, rate=rate, **slo)
        p = point(rate, r, time.perf_counter() - t)
        points.append(p)
        echo(f"  {n:>3} {plan:<28} rate {rate:>6g}: met {p['met_fraction']:6.1%}, "
             f"{p['output_tokens_per_s_per_accelerator']:7.2f} tok/s/acc, TTFT p50 {p['ttft_ms']['p50']:8.0f} ms, "
             f"TPOT p50 {p['tpot_ms']['p50']:6.1f} ms, batch {p['batch_mean']:6.1f}, "
             f"preempted {p['preemptions']} ({p['wall_s']:.0f} s)")
        return p

    best = missed = None
    try:
        at(ladder[0])
    except ConfigError as e:          # e.g. a request of the workload needs more KV than a group holds
        echo(f"  {n:>3} {plan:<28} cannot serve the workload: {e}")
        return dict(row, fits=False, refused=str(e))
    for rate in ladder:
        if (points[0] if rate == ladder[0] else at(rate))["met_fraction"] >= MET:
            best = rate
        else:
            missed = rate
            break
    for _ in range(refine if best is not None and missed is not None else 0):
        mid = round(math.sqrt(best * missed), 2)
        if not best < mid < missed:
            break
        if at(mid)["met_fraction"] >= MET:
            best = mid
        else:
            missed = mid
    row.update(points=points, best_rate=best, first_missed_rate=missed, wall_s=time.perf_counter() - t0)
    if best is not None:
        p = next(p for p in points if p["rate"] == best)
        row.update(best=dict(rate=best, met_fraction=p["met_fraction"],
                             output_tokens_per_s_per_accelerator=p["output_tokens_per_s_per_accelerator"],
                             output_tokens_per_s=p["output_tokens_per_s"], ttft_p50_ms=p["ttft_ms"]["p50"],
                             tpot_p50_ms=p["tpot_ms"]["p50"], ttft_p99_ms=p["ttft_ms"]["p99"],
                             tpot_p99_ms=p["tpot_ms"]["p99"], batch_mean=p["batch_mean"],
                             kv_use_mean=p["kv_use_mean"], exposed_comm_fraction=p["exposed_comm_fraction"],
                             duration_s=p["duration_s"]))
    return row


def plans_for(n: int, shapes=SHAPES, dtypes=DTYPES) -> list[str]:
    """The plans of shapes x weight dtypes at n ranks (a dtype "" leaves the shape as it is)."""
    return [f"{s.format(n=n)},weights={w}" if w else s.format(n=n) for s in shapes for w in dtypes]


def best_of(rows: list[dict]) -> dict | None:
    """The best plan of one size's rows: highest rate met, then tokens/s per accelerator there."""
    ok = [r for r in rows if r.get("best")]
    return max(ok, key=lambda r: (r["best"]["rate"], r["best"]["output_tokens_per_s_per_accelerator"]),
               default=None)


def search(model: str, sizes, *, requests: int, cfgs: dict | None = None, shapes=SHAPES, dtypes=DTYPES,
           fallback=FALLBACK_DTYPES, pd: dict | None = None, ladder=LADDER, refine: int = 3,
           done: dict | None = None, workload: str = "azure-conv", slo: dict = SLO, on_row=None,
           echo=click.echo) -> dict:
    """Every size's searched plans and its best. cfgs: {n: FabricConfig} (default: sd200 with size_overrides(n));
    pd: {n: [(prefill, decode), ...]}, disaggregated splits per size searched too; done: {(n, plan, requests): row}
    taken as run; on_row(rows): called after each plan (to write partial results)."""
    from fabric.config import load_config
    rows: list[dict] = []
    done = done or {}
    for n in sizes:
        given = (cfgs or {}).get(n)
        cfg = given or load_config("sd200", overrides=size_overrides(n))
        overrides = "cfg given" if given else size_overrides(n)
        todo = [(plan, None) for plan in plans_for(n, shapes, dtypes)]
        todo += [(pd_name(*split), split) for split in (pd or {}).get(n, [])]
        if fallback:
            todo.append(None)                       # the marker: the fallback dtypes, where nothing fitted
        mine: list[dict] = []
        while todo:
            item = todo.pop(0)
            if item is None:
                if not any(r["fits"] for r in mine):
                    todo = [(plan, None) for plan in plans_for(n, shapes, fallback)]
                continue
            plan, split = item
            row = done.get((n, plan, requests)) or run_plan(model, n, plan, cfg, requests=requests, ladder=ladder,
                                                           refine=refine, workload=workload, slo=slo,
                                                           overrides=overrides, pd=split, echo=echo)
            row["requests"] = requests
            mine.append(row)
            rows.append(row)
            if on_row:
                on_row(rows)
    return summarise(rows)


def run_saturation(model: str, n: int, plan: str, kv_tokens_total: int, cfg=None, *, cap: int = SAT_USERS_CAP,
                   users: int | None = None, echo=click.echo) -> dict:
    """The published figure's request shape (prompt 4,096, output 1,024) as a closed loop of enough users to fill
    the plan's KV (1.25 x the sequences it holds, at most `cap`), two requests each: throughput with the KV as the
    limit, not the SLOs (they are reported, not required). users: that many instead."""
    from fabric.config import load_config
    from fabric.serve import Deployment
    cfg = cfg or load_config("sd200", overrides=size_overrides(n))
    seq = PUBLISHED_SHAPE["prompt"] + PUBLISHED_SHAPE["output"]
    holds = kv_tokens_total // seq
    users = users or max(1, min(cap, math.ceil(1.25 * holds)))
    t = time.perf_counter()
    dep = Deployment(model=model, cfg=cfg, plan=plan)
    r = dep.serve(f"closed:users={users},in={PUBLISHED_SHAPE['prompt']},out={PUBLISHED_SHAPE['output']}",
                  requests=2 * users, **SLO)
    p = point(None, r, time.perf_counter() - t)
    del p["rate"]
    echo(f"  saturation {n:>3} {plan:<28} {users} users (KV holds {holds}): "
         f"{p['output_tokens_per_s_per_accelerator']:.1f} tok/s/acc, batch {p['batch_mean']:.0f}, KV use "
         f"{p['kv_use_mean']:.0%}, TPOT p50 {p['tpot_ms']['p50']:.1f} ms, preempted {p['preemptions']} "
         f"({p['wall_s']:.0f} s)")
    return dict(size=n, plan=plan, users=users, requests=2 * users, sequences_kv_holds=int(holds),
                kv_tokens_total=kv_tokens_total, **p)


def pd_name(prefill: str, decode: str) -> str:
    return f"PD prefill {prefill} + decode {decode}"


def summarise(rows: list[dict]) -> dict:
    sizes = sorted({r["size"] for r in rows})
    best = {n: best_of([r for r in rows if r["size"] == n]) for n in sizes}
    out = dict(rows=rows, best={str(n): (None if b is None else dict(plan=b["plan"], **b["best"],
                                                                      kv_tokens_total=b["kv_tokens_total"]))
                                for n, b in best.items()})
    if best.get(16) and best.get(64):
        a, b = best[16]["best"], best[64]["best"]
        out["ratio_64_vs_16"] = dict(
            per_accelerator=b["output_tokens_per_s_per_accelerator"] / a["output_tokens_per_s_per_accelerator"],
            total=b["output_tokens_per_s"] / a["output_tokens_per_s"], rate=b["rate"] / a["rate"],
            linear_total=4.0, published_speedup=PUBLISHED_SPEEDUP)
    return out


def table(res: dict) -> str:
    lines = ["| size | plan | weights / rank (GiB) | KV tokens in all | best rate meeting SLOs (req/s) | "
             "output tok/s per acc | TTFT p50 (ms) | TPOT p50 (ms) |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        if not r["fits"]:
            lines.append(f"| {r['size']} | {r['plan']} | does not fit | | | | | |")
            continue
        b = r.get("best")
        tail = ("none (missed at %g)" % r["first_missed_rate"] + " | | | |") if not b else (
            f"{b['rate']:g} | {b['output_tokens_per_s_per_accelerator']:.2f} | {b['ttft_p50_ms']:.0f} | "
            f"{b['tpot_p50_ms']:.1f} |")
        lines.append(f"| {r['size']} | {r['plan']} | {r['weights_gib_per_rank']:.1f} | "
                     f"{r['kv_tokens_total'] / 1e6:.2f} M | {tail}")
    return "\n".join(lines)


@click.command()
@click.option("--requests", default=500, show_default=True, help="the first N requests of the Azure trace")
@click.option("--sizes", default="16,64", show_default=True, help="accelerator counts (16 and/or 64)")
@click.option("--out", default=None, help="write every row and the summary as JSON")
@click.option("--from", "previous", multiple=True, help="an earlier --out whose rows are taken instead of re-run")
@click.option("--refine", default=3, show_default=True,
              help="geometric bisections between the last rate met and the first missed")
@click.option("--pd/--no-pd", default=True, show_default=True, help="search the PD splits of each size too")
@click.option("--check-requests", default=0, show_default=True,
              help="re-run each size's best plan and best co-located plan with this many requests (0: none)")
@click.option("--saturation/--no-saturation", default=True, show_default=True,
              help="each size's best and largest-KV plans at the published shape, KV-bound (closed loop)")
@click.option("--sat-users", default="2048,4096", show_default=True,
              help="more closed-loop users for each size's largest-KV plan (those its KV can hold)")
def main(requests, sizes, out, previous, refine, pd, check_requests, saturation, sat_users):
    t0 = time.perf_counter()
    done = {}
    sat_done = {}
    for f in previous:
        with open(f) as fh:
            prev = json.load(fh)
        for r in prev["rows"] + prev.get("check", {}).get("rows", []):
            done[(r["size"], r["plan"], r["requests"])] = r
        for r in prev.get("saturation", {}).get("rows", []):
            sat_done[(r["size"], r["plan"], r["users"])] = r
    sizes = [int(s) for s in sizes.split(",")]
    res: dict = {}

    def write(rows=None, check=None):
        if rows is not None:
            res.update(summarise(rows))
        if check is not None:
            res["check"] = summarise(check)
        res["meta"] = dict(model="deepseek-r1", preset="sd200", sizes=sizes, overrides_by_size={
                               str(n): size_overrides(n) for n in sizes}, workload="azure-conv", requests=requests,
                           check_requests=check_requests, **SLO, met_fraction_needed=MET, ladder=list(LADDER),
                           refine=refine, shapes=list(SHAPES), dtypes=list(DTYPES), fallback=list(FALLBACK_DTYPES),
                           pd={str(n): [list(x) for x in v] for n, v in PD_SPLITS.items()} if pd else None,
                           engine="analytic",
                           published_speedup=PUBLISHED_SPEEDUP, wall_s=time.perf_counter() - t0)
        if out:
            with open(out, "w") as fh:
                json.dump(res, fh, indent=1)

    kw = dict(refine=refine, done=done, pd=PD_SPLITS if pd else None)
    search("deepseek-r1", sizes, requests=requests, on_row=write, **kw)
    report(res)
    if check_requests:
        check_rows: list[dict] = []
        for n in sizes:
            mine = [r for r in res["rows"] if r["size"] == n]
            b, colo = best_of(mine), best_of([r for r in mine if not r.get("prefill")])
            for r in [x for x in (b, colo) if x is not None]:
                if any(x["size"] == n and x["plan"] == r["plan"] for x in check_rows):
                    continue
                split = (r["prefill"], r["decode"]) if r.get("prefill") else None
                sub = search("deepseek-r1", [n], requests=check_requests, shapes=() if split else (r["plan"],),
                             dtypes=("",) if not split else (), fallback=(),
                             **dict(kw, pd={n: [split]} if split else None))
                check_rows += sub["rows"]
                write(check=check_rows)
        click.echo(f"check with {check_requests} requests (each size's best plan and best co-located plan):")
        report(res["check"])
    if saturation:
        sat: list[dict] = []
        extra = [int(u) for u in sat_users.split(",") if u]
        for n in sizes:
            mine = [r for r in res["rows"] if r["size"] == n and r["fits"] and not r.get("prefill")]
            if not mine:
                continue
            b = best_of(mine)
            most = max(mine, key=lambda r: r["kv_tokens_total"])
            holds = most["kv_tokens_total"] // (PUBLISHED_SHAPE["prompt"] + PUBLISHED_SHAPE["output"])
            todo = [(r["plan"], r["kv_tokens_total"], None) for r in ([b] if b else []) + [most]]
            todo += [(most["plan"], most["kv_tokens_total"], u) for u in extra if SAT_USERS_CAP < u <= 1.25 * holds]
            for plan, kv, users in todo:
                if users is None:
                    users = max(1, min(SAT_USERS_CAP, math.ceil(1.25 * (kv // (PUBLISHED_SHAPE["prompt"] +
                                                                              PUBLISHED_SHAPE["output"])))))
                if any(x["size"] == n and x["plan"] == plan and x["users"] == users for x in sat):
                    continue
                sat.append(sat_done.get((n, plan, users)) or run_saturation("deepseek-r1", n, plan, kv, users=users))
                res["saturation"] = sat_summary(sat)
                write()
        report_saturation(res.get("saturation"))
    click.echo(f"{time.perf_counter() - t0:.0f} s")


def sat_summary(rows: list[dict]) -> dict:
    """The saturation rows and, with both sizes, the ratios of their best throughput per accelerator."""
    out = dict(shape=PUBLISHED_SHAPE, users_cap=SAT_USERS_CAP, rows=rows)
    top = {n: max((r for r in rows if r["size"] == n), key=lambda r: r["output_tokens_per_s_per_accelerator"],
                  default=None) for n in (16, 64)}
    if top[16] and top[64]:
        a, b = top[16], top[64]
        out["ratio_64_vs_16"] = dict(plan_16=a["plan"], plan_64=b["plan"],
                                     per_accelerator=b["output_tokens_per_s_per_accelerator"] /
                                     a["output_tokens_per_s_per_accelerator"],
                                     total=b["output_tokens_per_s"] / a["output_tokens_per_s"],
                                     published_speedup=PUBLISHED_SPEEDUP)
    return out


def report_saturation(sat: dict | None) -> None:
    if not sat:
        return
    click.echo(f"saturation (closed loop, prompt {sat['shape']['prompt']}, output {sat['shape']['output']}):")
    for r in sat["rows"]:
        click.echo(f"  {r['size']:>3} {r['plan']:<28} {r['users']:>5} users: "
                   f"{r['output_tokens_per_s_per_accelerator']:.1f} tok/s/acc, batch {r['batch_mean']:.0f}, "
                   f"KV use {r['kv_use_mean']:.0%}, TPOT p50 {r['tpot_ms']['p50']:.1f} ms, "
                   f"preempted {r['preemptions']}")
    if "ratio_64_vs_16" in sat:
        q = sat["ratio_64_vs_16"]
        click.echo(f"  64 vs 16: per accelerator {q['per_accelerator']:.2f}x, total {q['total']:.2f}x")


def report(res: dict) -> None:
    click.echo(table(res))
    for n, b in res["best"].items():
        click.echo(f"best on {n}: {b['plan'] if b else 'none'}")
    if "ratio_64_vs_16" in res:
        q = res["ratio_64_vs_16"]
        click.echo(f"64 vs 16: per accelerator {q['per_accelerator']:.2f}x, total {q['total']:.2f}x, best rate "
                   f"{q['rate']:.2f}x (linear: 1x and 4x; published speed-up {PUBLISHED_SPEEDUP}x, a finding, "
                   f"not a fit)")


if __name__ == "__main__":
    main()
