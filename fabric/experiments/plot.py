"""Plots drawn from the results the commands write (matplotlib, headless Agg backend; `pip install
'scaleup-fabric[plot]'`). Each function takes parsed results and an output path (.png or .svg) and returns the
path. See docs/sweep-and-plots.md.

- collective: time and bus bandwidth vs size of `fabric-probe collective --json` results (several on one chart),
  with an nccl-tests file overlaid (measured);
- links: per-link utilisation of a `fabric-replay --json` result laid out on its topology (mesh coordinates,
  switch planes), with the node-by-node utilisation matrix beside it;
- tpot: the TPOT breakdown (compute, exposed communication; per layer when the result has `layers`) and the time
  in collectives by kind;
- sweep: any result field against any swept key of a `fabric-sweep` output, one line per value of the other keys;
- serve: latency CDFs (TTFT, TPOT, end to end) of `fabric-serve --json` results, or throughput per accelerator and
  TTFT / TPOT percentiles against the load of a `fabric-sweep` over served workloads.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from fabric.errors import ConfigError

KINDS = ("collective", "links", "tpot", "sweep", "serve")
FORMATS = (".png", ".svg")


def _plt():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("fabric-plot needs matplotlib: pip install 'scaleup-fabric[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def check_output(path: str) -> None:
    if Path(path).suffix.lower() not in FORMATS:
        raise ConfigError(f"-o {path!r}: write .png or .svg")


def load_json(path: str | Path):
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from None


def read_table(path: str | Path) -> list[dict]:
    """The rows of a fabric-sweep output; a file that is not one is a one-line error."""
    import csv

    from fabric.experiments.sweep import read_rows
    if Path(path).suffix not in (".csv", ".parquet"):
        raise ConfigError(f"{path}: a fabric-sweep output is .csv or .parquet")
    try:
        rows = read_rows(path)
    except (ValueError, csv.Error) as exc:       # pyarrow's ArrowInvalid is a ValueError
        raise ConfigError(f"{path} is not a readable table: {str(exc).splitlines()[0]}") from None
    if not rows:
        raise ConfigError(f"{path}: the results file has no rows")
    return rows


def label_of(result: dict, path: str | Path, key: str | None = None) -> str:
    """A legend label: preset (library), and the overrides, from the result's meta; else the file name."""
    meta = result.get("meta") if isinstance(result, dict) else None
    if not meta:
        return Path(path).stem
    parts = [str(meta.get("preset") or "defaults")]
    if meta.get("library") and meta.get("library") != meta.get("preset"):
        parts.append(f"({meta['library']})")
    parts += [f"{k}={v}" for k, v in (meta.get("overrides") or {}).items() if k != "sim.seed"]
    return " ".join(parts)


def _save(fig, out: str) -> str:
    check_output(out)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    return out


def _fmt_size(b: float) -> str:
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= k:
            return f"{b / k:g}{unit}"
    return f"{b:g}"


# ---------------------------------------------------------------- collective

COLLECTIVE_FIELDS = ("bytes", "time_us", "busbw_gbps")


def collective_rows(data, where) -> list[dict]:
    """The rows of a `fabric-probe collective --json` result (a {"rows": [...]} object, or the list itself), each
    with a number in every COLLECTIVE_FIELDS; anything else is one line naming the expected input."""
    rows = data.get("rows") if isinstance(data, dict) else data
    bad = None
    if not isinstance(rows, list) or not rows:
        bad = "no rows" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
    else:
        for i, r in enumerate(rows):
            miss = [k for k in COLLECTIVE_FIELDS if not isinstance(r, dict) or not _is_number(r.get(k))]
            if miss:
                bad = f"row {i} has no number in {', '.join(miss)}"
                break
    if bad:
        fields = ", ".join(f'"{k}": N' for k in COLLECTIVE_FIELDS)
        raise ConfigError(f"{where}: not a `fabric-probe collective --json` result ({bad}); expected "
                          f'{{"rows": [{{{fields}, ...}}, ...]}}')
    return rows


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def collective(results: list[tuple[str, dict | list]], out: str, measured: str | None = None,
               title: str | None = None) -> str:
    """results: (label, JSON of `fabric-probe collective --json`) pairs."""
    plt = _plt()
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(12, 4.5))
    op = None
    for label, data in results:
        rows = collective_rows(data, label)
        if isinstance(data, dict):
            op = op or (data.get("meta") or {}).get("op")
        x = [r["bytes"] for r in rows]
        ax_t.plot(x, [r["time_us"] for r in rows], marker="o", ms=3, label=label)
        ax_b.plot(x, [r["busbw_gbps"] for r in rows], marker="o", ms=3, label=label)
    if measured:
        from fabric.experiments import nccl_tests
        table = nccl_tests.read(measured)
        rows = sorted(table.rows, key=lambda r: r.size)
        name = f"measured: {Path(measured).name}"
        ax_t.plot([r.size for r in rows], [r.oop_time_us for r in rows], "k--", marker="x", ms=4, label=name)
        ax_b.plot([r.size for r in rows], [r.oop_busbw for r in rows], "k--", marker="x", ms=4, label=name)
    for ax, yl in ((ax_t, "time (us)"), (ax_b, "bus bandwidth (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (B)")
        ax.set_ylabel(yl)
        ax.grid(True, which="both", alpha=0.3)
        ticks = ax.get_xticks()
        ax.set_xticks(ticks, [_fmt_size(t) for t in ticks])
    ax_t.set_yscale("log")
    ax_b.legend(fontsize=8)
    fig.suptitle(title or f"{op or 'collective'}: time and bus bandwidth vs size")
    return _save(fig, out)


# ---------------------------------------------------------------- links

def config_from_meta(meta: dict):
    """The FabricConfig a result's meta.config describes."""
    from fabric.config import from_dict
    return from_dict({s: kv for s, kv in meta["config"].items() if isinstance(kv, dict)}, "the result's meta.config")


def _plane_xy(x: int, y: int, z: int, dims, sx: float) -> tuple[float, float]:
    """Position of mesh coordinate (x, y, z): the z planes as copies of the x-y plane, two per row."""
    col, row = z % 2, z // 2
    return sx * x + (sx * dims[0] + 2.0) * col, sx * y + 0.6 * z + (sx * dims[1] + 2.5) * row


def layout(topo) -> dict[int, tuple[float, float]]:
    """2-D positions of the nodes: routers of a mesh at their coordinates (z drawn as an offset copy of the x-y
    plane), accelerators on a small circle around their switch; topologies without coordinates in layers
    (accelerators, switch planes, NICs, scale-out switches) ordered by host domain."""
    import numpy as np
    n = topo.n_nodes
    coord = topo.node_coord if topo.node_coord is not None else np.full((n, 3), -1)
    kind = topo.node_kind
    pos: dict[int, tuple[float, float]] = {}
    routers = [i for i in range(n) if coord[i][0] >= 0 and (kind[i] == 1 or topo.rank_ports == 0)]
    if routers:
        dims = [int(coord[:, d].max()) + 1 for d in range(3)]
        sx = 3.0
        for i in range(n):
            if coord[i][0] < 0:
                continue
            x, y, z = (int(v) for v in coord[i])
            if kind[i] == 1 or topo.rank_ports == 0:   # z planes side by side, slightly raised
                pos[i] = _plane_xy(x, y, z, dims, sx)
        for i in range(n):      # accelerators (and NICs) around the router that shares their coordinate
            if i in pos or coord[i][0] < 0:
                continue
            x, y, z = (int(v) for v in coord[i])
            peers = [j for j in range(n) if j not in routers and tuple(coord[j]) == tuple(coord[i])]
            k, m = peers.index(i), len(peers)
            bx, by = _plane_xy(x, y, z, dims, sx)
            a = 2 * math.pi * k / max(m, 1)
            pos[i] = (bx + 0.9 * math.cos(a), by + 0.9 * math.sin(a))
    rest = [i for i in range(n) if i not in pos]
    if rest:      # layered: accelerators, switches (by domain, then plane), NICs, switches of no domain
        def layer(i):
            if kind[i] == 0:
                return 0
            if kind[i] == 2:
                return 2
            return 1 if topo.node_domain[i] >= 0 else 3
        y0 = (max(p[1] for p in pos.values()) + 4) if pos else 0
        for lay in range(4):
            members = sorted((i for i in rest if layer(i) == lay), key=lambda i: (topo.node_domain[i], i))
            for k, i in enumerate(members):
                pos[i] = ((k + 0.5) / max(len(members), 1) * 16, y0 + 3 * lay)
    return pos


def links(result: dict, out: str, title: str | None = None) -> str:
    """Per-link utilisation of a replay (`fabric-replay --json`, which carries channel_utilisation and meta)."""
    if not isinstance(result, dict) or "channel_utilisation" not in result or "meta" not in result:
        raise ConfigError("links: the result needs channel_utilisation and meta (write it with fabric-replay --json)")
    if result.get("engine") == "analytic":      # it times transfers alpha-beta: no link is ever occupied
        raise ConfigError("links: an analytic-engine result has no link utilisation (that engine times each "
                          "transfer alpha-beta, without links); replay with --engine packet for this plot")
    import numpy as np
    from matplotlib import cm, colors
    from matplotlib.collections import LineCollection

    from fabric.network import build
    plt = _plt()
    topo = build(config_from_meta(result["meta"]))
    util = np.asarray(result["channel_utilisation"], dtype=float)
    if len(util) != topo.n_channels:
        raise ConfigError(f"links: {len(util)} channel values but the result's configuration has "
                          f"{topo.n_channels} channels")
    pos = layout(topo)
    link_util = np.maximum(util, util[topo.ch_rev])
    vmax = max(float(link_util.max()), 1e-9)
    norm = colors.Normalize(0, vmax * 100)
    cmap = plt.get_cmap("inferno_r")
    segs, cols = [], []
    for c in range(topo.n_channels):
        r = int(topo.ch_rev[c])
        if r < c:
            continue
        (x0, y0), (x1, y1) = pos[int(topo.ch_src[c])], pos[int(topo.ch_dst[c])]
        lane = int(topo.ch_lane[c]) if topo.ch_lane is not None else 0
        off = 0.12 * lane
        segs.append([(x0 + off, y0 + off), (x1 + off, y1 + off)])
        cols.append(cmap(norm(100 * link_util[c])))
    fig, (ax, axm) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw=dict(width_ratios=[1.6, 1]))
    ax.add_collection(LineCollection(segs, colors=cols, linewidths=2.2, zorder=1))
    for i, (x, y) in pos.items():
        k = int(topo.node_kind[i])
        ax.scatter([x], [y], s=60 if k else 14, marker="s" if k == 1 else ("D" if k == 2 else "o"),
                   c="tab:blue" if k == 1 else ("tab:green" if k == 2 else "0.5"), zorder=2)
        if k and int((topo.node_kind == 1).sum()) <= 32:      # names only while they stay legible
            ax.annotate(topo.node_names[i], (x, y), fontsize=6, ha="center", va="bottom", xytext=(0, 4),
                        textcoords="offset points")
    ax.autoscale()
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{topo.name}: link utilisation (max of both directions); squares: switches, dots: accelerators",
                 fontsize=9)
    fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="utilisation (%)", shrink=0.7)
    nodes = np.arange(topo.n_nodes)
    what = "node"
    if topo.n_nodes > 200:          # large fabrics: the switch-to-switch part, where the mesh is
        nodes = np.flatnonzero(topo.node_kind != 0)
        what = "switch / NIC"
    index = np.full(topo.n_nodes, -1)
    index[nodes] = np.arange(len(nodes))
    keep = (index[topo.ch_src] >= 0) & (index[topo.ch_dst] >= 0)
    mat = np.zeros((len(nodes), len(nodes)))
    np.maximum.at(mat, (index[topo.ch_src[keep]], index[topo.ch_dst[keep]]), 100 * util[keep])
    im = axm.imshow(mat, cmap="inferno_r", vmin=0, vmax=100 * vmax, interpolation="nearest")
    axm.set_xlabel(f"to {what}")
    axm.set_ylabel(f"from {what}")
    axm.set_title(f"channel utilisation, {what} x {what} (%)", fontsize=9)
    fig.colorbar(im, ax=axm, shrink=0.7)
    fig.suptitle(title or f"{result.get('model', '')} on {result.get('preset', topo.name)} ({result.get('engine', '')} "
                          f"engine): max {100 * float(util.max()):.2f} %, mean {100 * float(util.mean()):.3f} %")
    return _save(fig, out)


# ---------------------------------------------------------------- tpot

def tpot(results: list[tuple[str, dict]], out: str, title: str | None = None) -> str:
    """TPOT breakdown of replay results (stacked compute + exposed communication), per layer when a result has
    `layers` (a list of {layer, compute_us, exposed_comm_us}), and time in collectives by kind."""
    plt = _plt()
    for label, r in results:
        if "compute_us" not in r or "exposed_comm_us" not in r:
            raise ConfigError(f"{label}: not a `fabric-replay --json` result (no compute_us / exposed_comm_us)")
    layered = [(label, r) for label, r in results if r.get("layers")]
    ncols = 3 if layered else 2
    fig, axes = plt.subplots(1, ncols, figsize=(5 * ncols, 4.5))
    ax = axes[0]
    names = [label for label, _ in results]
    comp = [r["compute_us"] for _, r in results]
    comm = [r["exposed_comm_us"] for _, r in results]
    ax.bar(names, comp, label="compute (critical path)", color="tab:blue")
    ax.bar(names, comm, bottom=comp, label="exposed communication", color="tab:orange")
    for i, (c, e) in enumerate(zip(comp, comm)):
        ax.annotate(f"{c + e:.0f} us\n{100 * e / max(c + e, 1e-9):.1f} % comm", (i, c + e), ha="center",
                    va="bottom", fontsize=8)
    ax.set_ylabel("time per output token (us)")
    ax.set_ylim(0, 1.15 * max(c + e for c, e in zip(comp, comm)))
    ax.set_title("TPOT breakdown")
    ax.legend(fontsize=8, loc="lower right")
    ax.tick_params(axis="x", labelrotation=20, labelsize=7)
    ax = axes[1]
    kinds = sorted({c["kind"] for _, r in results for c in r.get("collectives", [])})
    width = 0.8 / max(len(results), 1)
    for j, (label, r) in enumerate(results):
        per = {k: 0.0 for k in kinds}
        for c in r.get("collectives", []):
            per[c["kind"]] += c["count"] * c["mean_us"]
        ax.bar([i + j * width for i in range(len(kinds))], [per[k] for k in kinds], width, label=label)
    ax.set_xticks([i + width * (len(results) - 1) / 2 for i in range(len(kinds))], kinds)
    ax.set_ylabel("time in collectives, summed (us)")
    ax.set_title("collectives by kind (count x mean)")
    ax.legend(fontsize=7)
    if layered:
        ax = axes[2]
        label, r = layered[0]
        layers = r["layers"]
        xs = [int(x.get("layer", i)) for i, x in enumerate(layers)]     # -1: outside every layer
        c = [x.get("compute_us", 0.0) for x in layers]
        e = [x.get("exposed_comm_us", 0.0) for x in layers]
        ax.bar(xs, c, color="tab:blue", label="compute")
        ax.bar(xs, e, bottom=c, color="tab:orange", label="exposed comm")
        ax.set_xlabel("layer (-1: embedding, head, outside any layer)")
        ax.set_ylabel("us")
        ax.set_title(f"per layer: {label}")
    fig.suptitle(title or "time per output token")
    fig.tight_layout()
    return _save(fig, out)


# ---------------------------------------------------------------- sweep

def _num(v):
    if isinstance(v, (int, float)) or v is None:
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def swept_keys(rows: list[dict]) -> list[str]:
    """The swept keys of a fabric-sweep output: the columns before point_hash."""
    cols = list(rows[0])
    return cols[:cols.index("point_hash")] if "point_hash" in cols else []


def _lines(rows: list[dict], x: str, others: list[str], default: str) -> dict[str, list[dict]]:
    """Rows grouped by the values of `others` (one line each), each group in x order."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(", ".join(f"{k}={r[k]}" for k in others) or default, []).append(r)
    for pts in groups.values():
        pts.sort(key=lambda r: (isinstance(_num(r[x]), str), _num(r[x])))
    return groups


def _value(v):
    """A plotted value, or None for a missing one (an empty CSV cell, a percentile of no requests)."""
    v = _num(v)
    return v if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)) else None


def sweep(rows: list[dict], out: str, x: str | None = None, y: str = "tpot_us", hue: str | None = None,
          title: str | None = None) -> str:
    """y against x, one line per value of `hue` (default: the other swept keys together)."""
    plt = _plt()
    if not rows:
        raise ConfigError("sweep: the results file has no rows")
    keys = swept_keys(rows)
    x = x or (keys[0] if keys else None)
    for name, what in ((x, "--x"), (y, "--y")):
        if name is None or name not in rows[0]:
            cols = ", ".join(list(rows[0])[:40])
            raise ConfigError(f"sweep: {what} {name!r} is not a column; swept keys: {', '.join(keys) or 'none'}; "
                              f"columns include {cols}")
    if hue is not None and hue not in rows[0]:
        raise ConfigError(f"sweep: --hue {hue!r} is not a column")
    others = [hue] if hue else [k for k in keys if k != x]
    groups = _lines(rows, x, others, y)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for g, pts in groups.items():
        ax.plot([_num(r[x]) for r in pts], [_num(r[y]) for r in pts], marker="o", label=g)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(True, alpha=0.3)
    if len(groups) > 1 or others:
        ax.legend(fontsize=8)
    ax.set_title(title or f"{y} vs {x} ({len(rows)} points)")
    return _save(fig, out)


# ---------------------------------------------------------------- serve

LATENCIES = (("ttft_ms", "time to first token"), ("tpot_ms", "time per output token"),
             ("e2e_ms", "end-to-end latency"))
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
SERVE_COLUMNS = ("output_tokens_per_s_per_accelerator", "ttft_ms.p50", "ttft_ms.p99", "tpot_ms.p50", "tpot_ms.p99")


def serve_label(result: dict) -> str:
    """A legend label for a fabric-serve result: plan, preset, the --set overrides and the rate (Poisson's, else
    the mean of the requests served)."""
    parts = [str(result.get("plan", "")), f"on {result.get('preset', '')}"]
    parts += [f"{k}={v}" for k, v in ((result.get("meta") or {}).get("overrides") or {}).items() if k != "sim.seed"]
    wm = result.get("workload_meta") or {}
    rate = wm.get("rate_per_s") or wm.get("mean_rate_per_s")
    if rate:
        parts.append(f"{rate:.3g} req/s")
    return " ".join(p for p in parts if p)


def check_serve_result(result, path: str | Path) -> dict:
    if not isinstance(result, dict) or not all(isinstance(result.get(k), dict) for k, _ in LATENCIES):
        raise ConfigError(f"{path}: not a `fabric-serve --json` result (no ttft_ms / tpot_ms / e2e_ms)")
    return result


def _log_if_wide(ax, axis: str) -> None:
    """A log axis when the data span 8x or more, with plain tick labels (1, 10, 0.5, not 10^0)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    lo, hi = (ax.dataLim.x0, ax.dataLim.x1) if axis == "x" else (ax.dataLim.y0, ax.dataLim.y1)
    if ax.has_data() and lo > 0 and hi >= 8 * lo:
        getattr(ax, f"set_{axis}scale")("log")
        which = getattr(ax, f"{axis}axis")
        which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        if hi < 100 * lo:         # under two decades the powers of 10 alone leave an axis almost unlabelled
            which.set_minor_formatter(FuncFormatter(
                lambda v, _: f"{v:g}" if v > 0 and round(v / 10 ** math.floor(math.log10(v))) in (2, 5) else ""))
        else:
            which.set_minor_formatter(NullFormatter())


def serve_latency(results: list[tuple[str, dict]], out: str, title: str | None = None) -> str:
    """CDFs of TTFT, TPOT and end-to-end latency, one line per fabric-serve result: per request when the result
    carries `per_request`, and its p50 / p90 / p99 as markers (the whole curve when it has only those)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for i, (label, r) in enumerate(results):
        color = f"C{i % 10}"
        per = r.get("per_request") or {}
        for ax, (key, _) in zip(axes, LATENCIES):
            vals = sorted(float(v) for v in per.get(key) or () if v is not None)   # one-token requests: no TPOT
            pct = [(r[key][p], q) for p, q in QUANTILES if r[key].get(p) is not None]
            if vals:
                n = len(vals)
                ax.step(vals, [(k + 1) / n for k in range(n)], where="post", color=color, label=label)
                ax.plot([v for v, _ in pct], [q for _, q in pct], "o", ms=4, color=color)
            elif pct:
                ax.plot([v for v, _ in pct], [q for _, q in pct], "o--", ms=4, color=color, label=label)
    for ax, (key, what) in zip(axes, LATENCIES):
        _log_if_wide(ax, "x")
        ax.set_xlabel(f"{what} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"{key.split('_')[0].upper()} CDF (dots: p50, p90, p99)", fontsize=9)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(title or "served latency")
    fig.tight_layout()
    return _save(fig, out)


def serve_sweep(tables: list[tuple[str, list[dict]]], out: str, x: str | None = None, hue: str | None = None,
                title: str | None = None) -> str:
    """Throughput (output tokens/s per accelerator) and TTFT / TPOT p50 and p99 against the swept load (`x`,
    default serve.rate), one line per value of `hue` (default: the other swept keys together)."""
    plt = _plt()
    for path, rows in tables:
        missing = [c for c in SERVE_COLUMNS if c not in rows[0]]
        if missing:
            raise ConfigError(f"{path}: not a fabric-sweep of served workloads (no column {missing[0]}); "
                              f"`fabric-plot sweep` draws replay sweeps")
    rows = [r for _, rows in tables for r in rows]
    keys = swept_keys(rows)
    x = x or ("serve.rate" if "serve.rate" in keys else (keys[0] if keys else None))
    if x is None or x not in rows[0]:
        raise ConfigError(f"serve: --x {x!r} is not a column; swept keys: {', '.join(keys) or 'none'}")
    if hue is not None and hue not in rows[0]:
        raise ConfigError(f"serve: --hue {hue!r} is not a column")
    groups = _lines(rows, x, [hue] if hue else [k for k in keys if k != x], "served")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    panels = ((axes[0], ("output_tokens_per_s_per_accelerator",), "output tokens/s per accelerator", None),
              (axes[1], ("ttft_ms.p50", "ttft_ms.p99"), "TTFT (ms)", "slo.ttft_ms"),
              (axes[2], ("tpot_ms.p50", "tpot_ms.p99"), "TPOT (ms)", "slo.tpot_ms"))
    for i, (g, pts) in enumerate(groups.items()):
        for ax, cols, _, _ in panels:
            for col, style in zip(cols, ("-", "--")):
                xy = [(_num(r[x]), _value(r[col])) for r in pts]
                xy = [(a, b) for a, b in xy if b is not None]
                ax.plot([a for a, _ in xy], [b for _, b in xy], style, marker="o", ms=4, color=f"C{i % 10}",
                        label=g if style == "-" else None)
    numeric = all(isinstance(_num(r[x]), (int, float)) for r in rows)
    for ax, cols, ylabel, slo in panels:
        targets = {_value(r.get(slo)) for r in rows} - {None} if slo else set()
        for t in targets:
            ax.axhline(t, color="0.4", ls=":", lw=1)
        if numeric:
            _log_if_wide(ax, "x")                   # loads swept in steps of x2
        if len(cols) > 1:
            _log_if_wide(ax, "y")                   # latency grows by orders of magnitude past saturation
            ax.set_title(f"{ylabel.split()[0]}: p50 (solid), p99 (dashed)", fontsize=9)
        ax.set_xlabel("offered load (requests/s)" if x == "serve.rate" else x)
        ax.set_ylabel(ylabel + (" (dotted: SLO)" if targets else ""))
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("throughput", fontsize=9)
    axes[0].legend(fontsize=8)
    fig.suptitle(title or f"served throughput and latency vs {x} ({len(rows)} points)")
    fig.tight_layout()
    return _save(fig, out)
