"""What every command shares: one-line errors with exit code 2, the configuration options (--preset, --config,
--set, --seed), --engine, --json output and the progress bar."""
from __future__ import annotations

import contextlib
import functools
import json
import sys
import time

import click

from fabric._process import tune_process
from fabric.config import FabricConfig, load_config, parse_set, with_overrides
from fabric.errors import FabricError

ENGINES = ("packet", "analytic")   # fabric.sim.ENGINES, repeated so that no command loads the kernel to parse


def friendly(fn):
    """Turn the package's own errors (and bad files) into one line on stderr and exit code 2 (a stuck run: its
    report, a block of lines, also written to the command's --json file if it has one)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FabricError as exc:
            click.echo(f"error: {exc}", err=True)
            if getattr(exc, "stuck", None) and kwargs.get("json_path"):   # a stuck run: what it waits for, as JSON
                write_json(kwargs["json_path"], dict(error=str(exc), stuck=exc.stuck), version_meta())
            sys.exit(2)
        except BrokenPipeError:            # output piped into `head` and closed: not an error of ours
            import os
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except OSError as exc:
            click.echo(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), err=True)
            sys.exit(2)
        except UnicodeDecodeError as exc:  # a --chip, --compare, ... file that is not UTF-8 text
            click.echo(f"error: an input file is not UTF-8 text ({exc.encoding} cannot decode byte "
                       f"{exc.object[exc.start:exc.start + 1]!r} at position {exc.start}); save it as UTF-8", err=True)
            sys.exit(2)
    return wrapper


def _print_version(ctx, _param, value):
    if value and not ctx.resilient_parsing:
        from fabric import DISTRIBUTION, __version__
        click.echo(f"{ctx.find_root().info_name or 'fabric'} ({DISTRIBUTION}) {__version__}")
        ctx.exit()


class _OneLine:
    """Usage errors (unknown option, missing argument, bad choice) as one line on stderr and exit code 2, like
    every other bad input; --help and normal runs are unchanged. Every command and group gets --version. `main`,
    where every console script starts, tunes the process first (fabric._process.tune_process)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not any(p.name == "version" for p in self.params):
            self.params.append(click.Option(["--version"], is_flag=True, expose_value=False, is_eager=True,
                                            callback=_print_version, help="print the version and exit"))

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        tune_process()
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


class Command(_OneLine, click.Command):
    pass


class Group(_OneLine, click.Group):
    command_class = Command


def config_options(preset: str | None = "sd200"):
    """--preset/-p, --config, --set and --seed, declared once for every command that builds a fabric; the command
    receives preset, config_file, sets and seed and turns them into a config with `load`."""
    default = "" if preset else "; default: the built-in defaults (those of sd200)"
    options = (
        click.option("--preset", "-p", default=preset, show_default=preset is not None,
                     help=f"fabric preset, one of fabric/presets/ (fabric-probe topology describes it){default}"),
        click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                     help="TOML file of parameter overrides, applied after the preset"),
        click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
                     help="override one parameter, after --config (repeatable; fabric-probe params lists them)"),
        click.option("--seed", type=int, default=None, help="seed of every random stream [default: sim.seed]"),
    )

    def decorate(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn
    return decorate


def load(preset, config_file, sets, seed, overrides: dict | None = None, faults=()) -> FabricConfig:
    """The config the options of `config_options` describe; `overrides` (a command's own options) apply after
    --set, and --seed last; `faults` (--fault specs) join the config's [[faults]]."""
    merged = {**parse_set(sets), **(overrides or {})}
    if seed is not None:
        merged["sim.seed"] = seed
    cfg = load_config(preset=preset, config_file=config_file, overrides=merged)
    from fabric.collectives.library import config_warnings
    for line in config_warnings(cfg):      # runs, but probably not as meant: one line each, on stderr
        click.echo(f"warning: {line}", err=True)
    return with_overrides(cfg, {"faults": cfg.faults + tuple(faults)}) if faults else cfg


def config_label(preset, config_file=None) -> str:
    """What a result's header calls the fabric: the preset, or with a --config file that file over the preset
    (a --config for a DGX node is not "sd200"); --set overrides are in the JSON's meta."""
    from pathlib import Path
    if config_file:
        return f"{Path(config_file).name} over preset {preset}" if preset else Path(config_file).name
    return preset or "defaults"


class Shipped(click.ParamType):
    """A file argument that may also name a file the project ships (fabric.shipped): `toy-mla-tp8` for a trace,
    `a100-8x` for a calibration table; a name that is neither is one line listing the shipped names."""

    def __init__(self, kind: str):
        self.kind = kind
        self.name = kind.upper()

    def convert(self, value, param, ctx):
        from fabric import shipped
        from fabric.errors import ConfigError
        try:
            return (shipped.trace_path if self.kind == "trace" else shipped.calibration_path)(value)
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


TRACE = Shipped("trace")
CALIBRATION_TABLE = Shipped("table")


def fault_option():
    """--fault SPEC (repeatable): a permanent fault at run time (fabric.faults, docs/faults.md)."""
    return click.option("--fault", "faults", multiple=True, metavar="SPEC",
                        help="a link or switch that fails mid-run (repeatable): link:A-B[#k]:down@T, "
                             "link:A-B:lanes=N@T, link:A-B:flap@T1-T2, switch:S:down@T; T in us, node names as "
                             "fabric-probe topology --nodes prints them")


def json_option(help: str = "write the results as JSON"):
    return click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True), default=None,
                        help=help)


def _timeline_path(ctx, param, value):
    if value is not None and not (value.endswith(".json") or value.endswith(".json.gz")):
        raise click.BadParameter(f"{value!r}: a timeline is FILE.json or FILE.json.gz (Chrome trace-event JSON)")
    return value


def timeline_option():
    return click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False, writable=True), default=None,
                        callback=_timeline_path,
                        help="write the run's timeline as Chrome trace-event JSON (FILE.json or FILE.json.gz) for "
                             "Perfetto / chrome://tracing; link counters sampled every report.sample_ns "
                             "(docs/timeline.md)")


def echo_timeline(stats: dict | None) -> None:
    if stats:
        click.echo(f"  timeline             {stats['path']}: {stats['slices']} slices, {stats['flows']} flows, "
                   f"{stats['counter_events']} counter events ({stats['samples']} samples every "
                   f"{stats['sample_ps'] / 1e3:g} ns), {stats['bytes'] / 1e6:.1f} MB in {stats['seconds']:.2f} s")


def engine_option(help: str = "packet: the packet kernel; analytic: alpha-beta over the same routes"):
    return click.option("--engine", type=click.Choice(ENGINES), default="packet", show_default=True, help=help)


@contextlib.contextmanager
def progress_bar(enabled: bool = True):
    """A progress callback for fabric.sim.run that draws a bar on stderr once a run has taken a second, or None
    when disabled or stderr is not a terminal; ends the bar's line on exit."""
    t0 = time.perf_counter()
    shown = False

    def show(events, now_ps, done):
        nonlocal shown
        if time.perf_counter() - t0 < 1.0:
            return
        sys.stderr.write(f"\r[{'#' * int(30 * done):<30s}] {100 * done:5.1f}% tasks  {now_ps / 1e6:9.1f} us simulated  "
                         f"{events / 1e6:7.1f} M events")
        sys.stderr.flush()
        shown = True
    try:
        yield show if enabled and sys.stderr.isatty() else None
    finally:
        if shown:
            sys.stderr.write("\n")


class Size(click.ParamType):
    """A byte count with an optional suffix: 4096, 64K, 16KiB, 1M, 1GB (K/M/G/T = powers of 1024, as nccl-tests)."""
    name = "SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        from fabric.errors import ConfigError
        from fabric.experiments.nccl_tests import parse_size
        try:
            return parse_size(value, f"--{param.name.replace('_', '-')}" if param else "size")
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


SIZE = Size()


@contextlib.contextmanager
def count_bar(total: int, what: str = "points", enabled: bool = True, tick: bool = False):
    """A bar for work counted in items (sweep points, sizes, stages): yields step(n=1, label=None); draws on stderr
    once the work has taken a second, only when stderr is a terminal; with tick, redraws twice a second (elapsed
    time moves while one long item runs); ends the bar's line on exit."""
    import threading
    t0 = time.perf_counter()
    state = dict(done=0, shown=False, label="")
    lock = threading.Lock()
    live = enabled and sys.stderr.isatty() and total > 0

    def draw():
        el = time.perf_counter() - t0
        if not live or el < 1.0:
            return
        done = state["done"]
        eta = f"eta {el / done * (total - done):6.1f} s" if done else ""
        frac = min(1.0, done / total)
        with lock:
            sys.stderr.write(f"\r[{'#' * int(30 * frac):<30s}] {done}/{total} {what}  {el:6.1f} s elapsed  {eta} "
                             f"{state['label']}")
            sys.stderr.flush()
            state["shown"] = True

    def step(n: int = 1, label: str | None = None):
        state["done"] += n
        if label is not None:
            state["label"] = label
        draw()

    stop = threading.Event()
    if live and tick:
        def loop():
            while not stop.wait(0.5):
                draw()
        threading.Thread(target=loop, daemon=True).start()
    try:
        yield step
    finally:
        stop.set()
        if state["shown"]:
            with lock:
                sys.stderr.write("\n")


def provenance(cfg: FabricConfig, preset=None, config_file=None, sets=(), seed=None, overrides=None) -> dict:
    """What produced a result: the effective configuration, the preset, the overrides (--config file, --set and
    the command's own options), the seed, the project version and commit; every --json result carries it as
    "meta"."""
    return dict(version_meta(), preset=preset, config_file=config_file,
                overrides={**parse_set(sets), **(overrides or {})}, seed=cfg.sim.seed, config=cfg.to_dict())


def version_meta(**extra) -> dict:
    """The "meta" of a result that no fabric configuration produced (a compute kernel): version, the source's git
    commit when it runs from a checkout (fabric._source), and inputs."""
    from fabric import DISTRIBUTION, __version__
    from fabric._source import commit
    return dict(version=__version__, distribution=DISTRIBUTION, **({"commit": commit()} if commit() else {}), **extra)


def check_writable(path: str | None, what: str = "--json") -> None:
    """Refuse an output path whose folder does not exist before any work is done."""
    if path:
        import os
        folder = os.path.dirname(os.path.abspath(path)) or "."
        if not os.path.isdir(folder):
            raise FabricError(f"{what} {path!r}: folder {folder!r} does not exist")
        if not os.access(folder, os.W_OK):
            raise FabricError(f"{what} {path!r}: folder {folder!r} is not writable")


def write_json(path: str | None, payload, meta: dict | None = None) -> None:
    """Write payload as JSON; a dict payload gets `meta` (see provenance) under the key "meta"."""
    if path:
        if meta is not None and isinstance(payload, dict):
            payload = {**payload, "meta": meta}
        with open(path, "w") as fh:
            json.dump(payload, fh, indent=2, default=_default)
            fh.write("\n")


def _default(obj):
    import numpy as np
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
