"""Design-space sweeps: a grid of replay points run in parallel on Dask distributed (`fabric-sweep`).

A grid file (TOML):

    [sweep]
    trace = "default"          # the shipped DeepSeek-R1 step; or a path (relative to the grid file); or a
                               # [capture] table (model, tp, ep, batch, context, chip, ... of fabric-capture)
    preset = ["sd200"]         # a value or a list of values (a list is swept)
    engine = "analytic"        # "analytic" | "packet", or a list
    seed = 1                   # or a list of seeds
    mode = "product"           # "product" of the [grid] lists, or "zip" (all lists of the same length)
    [set]                      # fixed --set overrides applied to every point (optional)
    "collectives.library" = "sd200"
    [grid]                     # swept keys: any `section.key` of `fabric-probe params`, "capture.KEY" (a key of
    "phy.lane_rate_gbps" = [32, 64]   # the [capture] table), or preset / engine / seed / trace
    "switch.latency_ns" = [100, 200]

A served workload instead of a replayed step: a [serve] table (no trace) of fabric-serve's arguments, each of
which [grid] can sweep as "serve.KEY" (with fabric keys, preset, engine and seed as above):

    [serve]
    model = "deepseek-r1"      # or hf_config = "config.json" (relative to the grid file)
    plan = "tp=64"
    workload = "azure-conv"    # a CSV (relative to the grid file), poisson:..., closed:...
    requests = 2000            # or duration = S
    slo_ttft_ms = 2000
    slo_tpot_ms = 50
    [grid]
    "serve.rate" = [1, 2, 4, 8]
    "serve.plan" = ["tp=64", "attn=dp,ep=64"]

Every point is one replay (or one fabric.serve run); its row holds every swept value (column = the swept key), the
point's hash, the project version and git commit (empty outside a checkout), seed, wall time, every result field of
`fabric-replay --json` (or of `fabric-serve --json`; nested ones flattened with dots, lists as JSON text), the
capture or serve arguments (`capture.KEY`, `serve.KEY`) and the full effective configuration (columns
`config.SECTION.KEY`, and `config.SECTION.SUB.KEY` for a sub-section such as [topology.sd200]). A point is
identified by the hash of its
effective configuration, trace (or capture or serve arguments) and engine; points already in the output file are
skipped (resume). A point that fails is reported and left out of the file, so the
next run retries it.
"""
from __future__ import annotations

import csv
import hashlib
import itertools
import json
import logging
import os
import re
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from fabric.errors import ConfigError

SPECIAL = ("trace", "preset", "engine", "seed")
ENGINES = ("packet", "analytic")
HASH = "point_hash"
# [serve] keys: fabric-serve's options (--slo-ttft-ms -> slo_ttft_ms) -> their type; preset, engine and seed are
# [sweep] keys shared with replay points, so that a grid sweeps them the same way for both
SERVE_KEYS = dict(model=str, hf_config=str, chip=str, plan=str, workload=str, requests=int, duration=float,
                  rate=float, slo_ttft_ms=float, slo_tpot_ms=float, token_budget=int, max_seqs=int, balance=str)
BALANCE = ("least_tokens", "round_robin")
RESULT_ONLY = ("channel_utilisation", "layers", "per_request")   # per channel / layer / request: in --json only


@dataclass(frozen=True)
class Point:
    swept: dict                  # swept key -> value, in grid order
    trace: str | None            # path, or None = the shipped default
    capture: dict | None         # fabric-capture arguments when the trace is captured
    preset: str
    engine: str
    seed: int | None
    sets: dict = field(default_factory=dict)   # section.key -> value, fixed sets then swept ones
    serve: dict | None = None    # fabric-serve arguments (SERVE_KEYS) when the point serves a workload

    def config(self):
        from fabric.config import load_config
        over = dict(self.sets)
        if self.seed is not None:
            over["sim.seed"] = self.seed
        return load_config(preset=self.preset, overrides=over)

    def key(self) -> str:
        """Hash of the effective configuration, trace (or capture or serve arguments) and engine."""
        cfg = self.config()
        what = dict(config=cfg.to_dict(), trace=self.trace or "default", capture=self.capture, engine=self.engine)
        if self.serve is not None:      # only then: replay points keep the hashes of files written before
            what["serve"] = self.serve
        blob = json.dumps(what, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_grid(path: str | Path) -> list[Point]:
    """The points of a grid file, in order."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"grid file {str(path)!r} does not exist")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return grid_points(data, base=path.parent)


def grid_points(data: dict, base: Path | str = ".") -> list[Point]:
    unknown = set(data) - {"sweep", "grid", "set", "capture", "serve"}
    if unknown:
        raise ConfigError(f"grid: unknown table(s) {', '.join(sorted(unknown))}; use [sweep], [grid], [set], "
                          f"[capture], [serve]")
    sw = dict(data.get("sweep", {}))
    grid = dict(data.get("grid", {}))
    fixed = {str(k): v for k, v in data.get("set", {}).items()}
    capture = data.get("capture")
    if isinstance(sw.get("trace"), dict):
        capture = sw.pop("trace")
    serve = data.get("serve")
    if serve is not None:
        if not isinstance(serve, dict):
            raise ConfigError("grid: serve must be a table ([serve]) of fabric-serve arguments")
        if capture is not None or "trace" in sw or "trace" in grid:
            raise ConfigError("grid: a [serve] table serves a workload; it takes no trace or [capture] "
                              "(the plan and model say what runs)")
        for k in serve:
            _serve_key(k, "[serve]")
    mode = sw.pop("mode", "product")
    if mode not in ("product", "zip"):
        raise ConfigError(f"[sweep] mode={mode!r} must be 'product' or 'zip'")
    for k in list(sw):
        if k not in SPECIAL:
            raise ConfigError(f"[sweep] unknown key {k!r}; allowed: {', '.join(SPECIAL)}, mode (parameters go in "
                              f"[grid] or [set])")
        if isinstance(sw[k], list) and len(sw[k]) > 1:
            if k in grid:
                raise ConfigError(f"{k!r} is both a list in [sweep] and a key of [grid]")
            grid[k] = sw.pop(k)
        elif isinstance(sw[k], list):
            if not sw[k]:
                raise ConfigError(f"[sweep] {k} is an empty list")
            sw[k] = sw[k][0]
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"[grid] {k!r} must be a non-empty list of values")
        if k.startswith("capture.") and capture is None:
            raise ConfigError(f"[grid] {k!r} sweeps a capture argument but there is no [capture] table")
        if k.startswith("serve."):
            if serve is None:
                raise ConfigError(f"[grid] {k!r} sweeps a fabric-serve argument but there is no [serve] table")
            _serve_key(k[len("serve."):], "[grid]")
    keys = list(grid)
    if mode == "zip":
        lens = {len(grid[k]) for k in keys}
        if len(lens) > 1:
            raise ConfigError(f"mode = 'zip' needs lists of one length; got {sorted(lens)}")
        combos = list(zip(*(grid[k] for k in keys))) if keys else [()]
    else:
        combos = list(itertools.product(*(grid[k] for k in keys)))
    base = Path(base)
    points = []
    for combo in combos:
        val = dict(zip(keys, combo))
        trace = val.get("trace", sw.get("trace", "default"))
        cap = srv = None
        if serve is not None:
            srv = _serve_args({**serve, **{k[len("serve."):]: v for k, v in val.items() if k.startswith("serve.")}},
                              base)
            trace = None
        elif capture is not None and ("trace" not in val and "trace" not in sw):
            cap = dict(capture)
            cap.update({k[len("capture."):]: v for k, v in val.items() if k.startswith("capture.")})
            trace = None
        elif trace in (None, "default"):
            trace = None
        else:
            trace = _resolve(trace, base)
        engine = val.get("engine", sw.get("engine", "analytic"))
        if engine not in ENGINES:
            raise ConfigError(f"engine={engine!r} must be one of {', '.join(ENGINES)}")
        seed = val.get("seed", sw.get("seed"))
        sets = dict(fixed)
        sets.update({k: v for k, v in val.items() if k not in SPECIAL and not k.startswith(("capture.", "serve."))})
        preset = str(val.get("preset", sw.get("preset", "sd200")))
        points.append(Point(swept=val, trace=trace, capture=cap, preset=preset, engine=engine,
                            seed=None if seed is None else int(seed), sets=sets, serve=srv))
    checked: set = set()
    for p in points:      # validate every point's configuration (and serve arguments) before any work starts
        cfg = p.config()
        if p.serve is not None:
            _check_serve(p.serve, cfg.sim.seed, checked)
    return points


def _resolve(path, base: Path) -> str:
    """A path named in the grid file, relative to the grid file."""
    return str(path) if os.path.isabs(str(path)) else str((base / str(path)).resolve())


def _serve_key(key: str, where: str) -> None:
    if key not in SERVE_KEYS:
        hint = " (a [sweep] key: preset, engine and seed apply to replay and serve points alike)" \
            if key in SPECIAL else ""
        raise ConfigError(f"{where} unknown fabric-serve argument {key!r}{hint}; use {', '.join(SERVE_KEYS)}")


def _serve_args(args: dict, base: Path) -> dict:
    """One point's fabric-serve arguments, typed, with the files they name resolved against the grid file."""
    out = {}
    for k, v in args.items():
        want = SERVE_KEYS[k]
        ok = isinstance(v, str) if want is str else (
            isinstance(v, (int, float)) and not isinstance(v, bool) and (want is float or float(v).is_integer()))
        if not ok:
            kind = {str: "a string", int: "a whole number", float: "a number"}[want]
            raise ConfigError(f"serve.{k} = {v!r} must be {kind}")
        out[k] = want(v)
    if "requests" in out and "duration" in out:
        raise ConfigError("serve: give requests or duration, not both")
    if out.get("balance", BALANCE[0]) not in BALANCE:
        raise ConfigError(f"serve.balance = {out['balance']!r} must be one of {', '.join(BALANCE)}")
    for k in ("slo_ttft_ms", "slo_tpot_ms", "token_budget", "max_seqs"):
        if k in out and not out[k] > 0:
            raise ConfigError(f"serve.{k} = {out[k]} must be > 0")
    if "hf_config" in out:
        out["hf_config"] = _resolve(out["hf_config"], base)
    if "workload" in out:       # a trace file, or the empirical token-count files inside a spec
        w = out["workload"]
        if w.endswith(".csv") and ":" not in w:
            w = _resolve(w, base)
        out["workload"] = re.sub(r"empirical:([^,]+)", lambda m: f"empirical:{_resolve(m.group(1), base)}", w)
    return out


def _check_serve(args: dict, seed: int, checked: set) -> None:
    """What fabric.serve parses before it runs (model, plan, workload), once per distinct input, so that a typo
    stops the sweep before any point runs."""
    from fabric.capture import resolve_model
    from fabric.serve.plan import parse_plan
    from fabric.serve.workload import parse_workload
    model = ("model", args.get("model"), args.get("hf_config"))
    if model not in checked:
        checked.add(model)
        resolve_model(model[1] or (None if model[2] else "deepseek-r1"), model[2])
    plan = ("plan", args.get("plan", "tp=64"))
    if plan not in checked:
        checked.add(plan)
        parse_plan(plan[1])
    wl = ("workload", args.get("workload", "azure-conv"), args.get("requests"), args.get("duration"),
          args.get("rate"), seed)
    if wl not in checked:
        checked.add(wl)
        parse_workload(wl[1], requests=wl[2], duration_s=wl[3], rate=wl[4], seed=seed)


def _flatten(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)):
        out[prefix] = json.dumps(value, default=str)
    else:
        out[prefix] = value


def _capture_trace(cap: dict, cache: str) -> str:
    """Capture the trace of a [capture] table once per distinct table (cached by hash in `cache`)."""
    from fabric import trace as T
    from fabric.capture import capture
    args = dict(cap)
    h = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"capture-{h}.h5")
    if not os.path.exists(path):
        model = args.pop("model", None)
        hf = args.pop("hf_config", None)
        tmp = f"{path}.{os.getpid()}.tmp"
        T.write(tmp, capture(model, hf, **args))
        os.replace(tmp, path)
    return path


_TUNED = False


def _tune_malloc() -> None:
    """Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which (as any explicit threshold) turns off
    glibc's dynamic mmap threshold: every large numpy array is then a fresh mmap and page faults, and a replay runs
    1.4-1.8x slower. Raise both thresholds (glibc only) so the arrays of one replay are reused by the next; this
    also speeds up the serial path (~20 %). Results are unchanged."""
    global _TUNED
    if _TUNED:
        return
    _TUNED = True
    from fabric._malloc import reuse_freed_arrays
    reuse_freed_arrays()


# the [serve] keys that make a fabric.serve.Deployment (with the config, preset and engine); the others are the
# workload's. Points that differ only in the workload (a sweep over load) share one deployment in a process: its
# step model's grid is simulated once, and results are the same as from a fresh one (the grid is fixed, made on
# demand)
DEPLOYMENT_KEYS = ("model", "hf_config", "chip", "plan", "token_budget")
_DEPLOYMENTS: dict = {}       # deployment key -> Deployment, the most recently used last
_KEEP_DEPLOYMENTS = 4


def _deployment_key(point: Point) -> str | None:
    if point.serve is None:
        return None
    return json.dumps([{k: point.serve.get(k) for k in DEPLOYMENT_KEYS}, point.preset, point.engine,
                       point.config().to_dict()], sort_keys=True, default=str)


def _serve(point: Point, cfg) -> dict:
    from fabric.serve import Deployment
    args = dict(point.serve)
    made = {k: args.pop(k) for k in DEPLOYMENT_KEYS if k in args}
    key = _deployment_key(point)
    dep = _DEPLOYMENTS.pop(key, None)
    if dep is None:
        dep = Deployment(**made, preset=point.preset, cfg=cfg, engine=point.engine, seed=cfg.sim.seed)
    _DEPLOYMENTS[key] = dep
    while len(_DEPLOYMENTS) > _KEEP_DEPLOYMENTS:
        _DEPLOYMENTS.pop(next(iter(_DEPLOYMENTS)))
    if "duration" in args:
        args["duration_s"] = args.pop("duration")
    return dep.serve(args.pop("workload", "azure-conv"), **args)


def run_point(point: Point, cache: str = ".fabric-sweep-cache") -> dict:
    """Replay (or serve) one point; returns its row (see the module docstring)."""
    import fabric
    from fabric._source import commit
    _tune_malloc()
    t0 = time.perf_counter()
    cfg = point.config()
    if point.serve is not None:
        r = _serve(point, cfg)
    else:
        from fabric.replay import replay
        trace = point.trace if point.capture is None else _capture_trace(point.capture, cache)
        r = replay(trace, cfg, engine=point.engine, preset=point.preset)
    row = {k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in point.swept.items()}
    row[HASH] = point.key()
    row["version"] = fabric.__version__
    row["commit"] = commit() or ""
    row["seed"] = cfg.sim.seed
    row["point_wall_s"] = time.perf_counter() - t0
    res: dict = {}
    _flatten("", {k: v for k, v in r.items() if k not in RESULT_ONLY}, res)
    for k, v in res.items():
        if k not in row:
            row[k] = v
    if point.capture is not None:
        _flatten("capture", point.capture, row)
    if point.serve is not None:
        args: dict = {}
        _flatten("serve", point.serve, args)
        row.update((k, v) for k, v in args.items() if k not in row)   # a swept one keeps the grid's spelling
    _flatten("config", cfg.to_dict(), row)
    return row


# ---------------------------------------------------------------- output

def read_rows(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        return pq.read_table(path).to_pylist()
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def write_rows(path: str | Path, rows: list[dict]) -> None:
    """Write every row (columns: the union, in first-seen order) atomically: a temporary file, then a rename."""
    path = Path(path)
    cols: dict[str, None] = {}
    for r in rows:
        cols.update(dict.fromkeys(r))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        data = {}
        for c in cols:
            vals = [r.get(c) for r in rows]
            kinds = {type(v) for v in vals if v is not None}
            if len(kinds) > 1 and not kinds <= {int, float}:
                vals = [None if v is None else str(v) for v in vals]   # mixed: resumed CSV-typed values
            elif kinds == {int, float}:
                vals = [None if v is None else float(v) for v in vals]
            data[c] = vals
        pq.write_table(pa.table(data), tmp)
    else:
        with open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(cols), restval="")
            w.writeheader()
            w.writerows(rows)
    os.replace(tmp, path)


def check_output(path: str) -> None:
    if Path(path).suffix not in (".csv", ".parquet"):
        raise ConfigError(f"--out {path!r}: write .csv or .parquet")
    if Path(path).suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError("--out *.parquet needs pyarrow: pip install 'scaleup-fabric[sweep]' (or write .csv)") \
                from None


# ---------------------------------------------------------------- running

def _warm() -> None:
    _tune_malloc()
    import fabric.replay  # noqa: F401


def run_serial(points: list[Point], cache: str = ".fabric-sweep-cache") -> list[dict]:
    return [run_point(p, cache) for p in points]


def _write_new(out: str, rows: list[dict], had: int) -> None:
    if len(rows) > had:     # nothing new: leave the file as it is (or absent)
        write_rows(out, rows)


def _why(exc: BaseException) -> str:
    """One line for a failed point: the package's own message, else the exception's type and message."""
    from fabric.errors import FabricError
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return text if isinstance(exc, FabricError) else f"{type(exc).__name__}: {text}".rstrip(": ")


def run_sweep(points: list[Point], out: str, *, scheduler: str | None = None, workers: int | None = None,
              progress=None, flush_s: float = 2.0, cache: str | None = None, serial: bool = False) -> dict:
    """Run the points not yet in `out` on Dask (an existing scheduler, or a LocalCluster of `workers` processes,
    one thread each; default: one per core), or one by one in this process (`serial`); rows are written as they
    complete (at most every flush_s) and at the end. A point that raises is left out of the file (the next run
    retries it) and listed in `failed` as (point, one-line reason); the others are kept. progress(n) is called
    for the points already in `out` and per finished point. Returns counts, failures and wall time."""
    check_output(out)
    if not serial:
        try:
            from dask.distributed import Client, LocalCluster, as_completed
        except ImportError:
            raise ConfigError("fabric-sweep needs dask distributed: pip install 'scaleup-fabric[sweep]'") from None
    cache = cache or str(Path(out).resolve().parent / ".fabric-sweep-cache")
    done_rows = read_rows(out)
    have = {str(r.get(HASH)) for r in done_rows}
    keyed = [(p.key(), p) for p in points]
    seen, pending = set(), []
    for k, p in keyed:
        if k not in have and k not in seen:
            seen.add(k)
            pending.append(p)
    group: dict = {}     # a deployment's points together (for its reuse), the groups in grid order
    pending.sort(key=lambda p: group.setdefault(_deployment_key(p), len(group)))
    skipped = len(points) - len(pending)
    if progress and skipped:
        progress(skipped)
    t0 = time.perf_counter()
    if not pending:
        return dict(points=len(points), run=0, skipped=skipped, failed=[], wall_s=0.0, workers=0)
    rows, failed = list(done_rows), []
    last = time.perf_counter()

    def finished(point, row=None, exc=None):
        nonlocal last
        if exc is None:
            rows.append(row)
        else:
            failed.append((point, _why(exc)))
        if progress:
            progress(1)
        if row is not None and time.perf_counter() - last > flush_s:
            write_rows(out, rows)
            last = time.perf_counter()

    if serial:
        try:
            for p in pending:
                try:
                    row = run_point(p, cache)
                except Exception as exc:        # noqa: BLE001 - one bad point must not stop the others
                    finished(p, exc=exc)
                else:
                    finished(p, row)
        finally:
            _write_new(out, rows, len(done_rows))
        return dict(points=len(points), run=len(pending), skipped=skipped, failed=failed,
                    wall_s=time.perf_counter() - t0, workers=1)
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        n = workers or cores
        n = max(1, min(n, len(pending)))
        # silence_logs: a failed point is one line of ours (finished), not the worker's ERROR log with its traceback
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.CRITICAL)
        client = Client(cluster)
        client.run(_warm)          # every worker imports the replay stack once, before the points arrive
    try:
        nworkers = len(client.scheduler_info().get("workers", {}))
        futures = client.map(run_point, pending, cache=cache, pure=False)
        point_of = {f.key: p for f, p in zip(futures, pending)}
        for fut in as_completed(futures):
            try:
                row = fut.result()
            except Exception as exc:            # noqa: BLE001 - raised in the worker, re-raised here
                finished(point_of[fut.key], exc=exc)
            else:
                finished(point_of[fut.key], row)
    finally:
        _write_new(out, rows, len(done_rows))     # what completed, also when the sweep is stopped
        client.close()
        if cluster is not None:
            cluster.close()
    return dict(points=len(points), run=len(pending), skipped=skipped, failed=failed,
                wall_s=time.perf_counter() - t0, workers=nworkers)
