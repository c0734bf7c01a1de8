"""Request streams: a trace in the Azure LLM inference format, or a synthetic open (Poisson) or closed loop.

    parse_workload(spec, requests=None, duration_s=None, rate=None, seed=0) -> Workload

Specs:
    FILE.csv | azure-conv                  TIMESTAMP, ContextTokens, GeneratedTokens per row (azure-conv: the first
                                           10,000 requests of the 2023 conversation trace, fabric/data/workloads/)
    poisson:rate=R,in=D,out=D              open loop, exponential inter-arrival times at R requests/s
    closed:users=U,in=D,out=D[,think=S]    U users, each sends its next request S seconds after its last finished
where D (tokens) is N | uniform:A-B | lognormal:MEAN,SIGMA (MEAN the mean, SIGMA of the log) | empirical:FILE.csv
(draws from that trace's prompt lengths for `in`, output lengths for `out`).

`shared_prefix` ("F" or "F:K") gives any workload shared prompt prefixes: request i's first floor(F x prompt)
tokens are one of K prefixes (drawn uniformly, K = 1 by default), the same tokens as every other request with that
prefix up to the shorter one's length (a system prompt or a few-shot template): a prefix cache reuses their KV.

`rate` rescales a trace's arrival times to that mean rate (requests/s); `requests` keeps the first N, `duration_s`
those arriving before it (a closed loop stops issuing then). Every draw comes from a generator seeded by `seed`.
"""
from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from fabric.errors import ConfigError

DATA = Path(__file__).resolve().parent.parent / "data" / "workloads"
BUILTIN = {"azure-conv": DATA / "azure_conv_2023_10k.csv"}
HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MAX_TOKENS = 10_000_000      # a prompt or output beyond this is a typo, not a request
CLOSED_DEFAULT_REQUESTS = 1000


@dataclass(frozen=True)
class Workload:
    """Requests in arrival order. Open loop: `arrival_s` holds every arrival. Closed loop (`users` > 0): the first
    `users` requests arrive at 0 and request i + users is sent `think_s` after request i finishes (the scheduler
    does that); `arrival_s` is then only the first wave's."""
    name: str
    arrival_s: np.ndarray            # float64 [n], open loop only (closed: zeros)
    prompt_tokens: np.ndarray        # int64 [n]
    output_tokens: np.ndarray        # int64 [n], >= 1
    users: int = 0                   # closed loop: concurrent users (0: open loop)
    think_s: float = 0.0
    duration_s: float | None = None  # closed loop: no request is sent after it
    meta: dict = field(default_factory=dict)
    prefilled: bool = False          # requests arrive with their prompt's KV and first token (a decode pool's)
    prefix_id: np.ndarray | None = None      # int64 [n]: which shared prefix a prompt starts with (shared_prefix)
    prefix_tokens: np.ndarray | None = None  # int64 [n]: how many of its first tokens are that prefix

    @property
    def n(self) -> int:
        return len(self.prompt_tokens)


# ---------------------------------------------------------------- traces

def read_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival s from the first, prompt tokens, output tokens) of an Azure-format CSV; a bad row raises one line
    naming the file and line."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"workload file {str(path)!r} does not exist (a CSV with columns {', '.join(HEADER)}, "
                          f"or a built-in: {', '.join(BUILTIN)})")
    with open(p, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    head = [c.strip() for c in lines[0].split(",")] if lines else []
    if tuple(head) != HEADER:
        raise ConfigError(f"{p}: line 1 is {lines[0][:80]!r} but the header must be {','.join(HEADER)} (the Azure "
                          f"LLM inference trace format)" if lines else f"{p}: the file is empty")
    t, prompt, out = [], [], []
    for no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split(",")
        try:
            if len(cells) != 3:
                raise ValueError(f"{len(cells)} fields, expected 3")
            t.append(_seconds(cells[0].strip()))
            a, b = int(cells[1]), int(cells[2])
        except ValueError as exc:
            raise ConfigError(f"{p}: line {no} ({line[:80]!r}) is not TIMESTAMP,ContextTokens,GeneratedTokens: "
                              f"{exc}") from None
        if not 1 <= a <= MAX_TOKENS or not 1 <= b <= MAX_TOKENS:
            raise ConfigError(f"{p}: line {no}: token counts must be in [1, {MAX_TOKENS}], got {a} and {b}")
        prompt.append(a)
        out.append(b)
    if not t:
        raise ConfigError(f"{p}: no requests after the header")
    arr = np.asarray(t, np.float64)
    if np.any(np.diff(arr) < 0):
        bad = int(np.argmax(np.diff(arr) < 0)) + 3
        raise ConfigError(f"{p}: line {bad}: timestamps must not go back in time")
    return arr - arr[0], np.asarray(prompt, np.int64), np.asarray(out, np.int64)


def _seconds(stamp: str) -> float:
    """'2023-11-16 18:15:46.6805900' -> seconds since 0001-01-01 (fractions of any length; the trace has 7 digits,
    more than datetime parses)."""
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}):(\d{2}):(\d{2}(?:\.\d+)?)", stamp)
    if not m:
        raise ValueError(f"timestamp {stamp!r} is not YYYY-MM-DD HH:MM:SS[.fff]")
    day = datetime.date.fromisoformat(m.group(1)).toordinal()
    h, mi, s = int(m.group(2)), int(m.group(3)), float(m.group(4))
    if h > 23 or mi > 59 or s >= 61:
        raise ValueError(f"timestamp {stamp!r} has an impossible time of day")
    return day * 86400.0 + h * 3600.0 + mi * 60.0 + s


# ---------------------------------------------------------------- token-count distributions

def sampler(text: str, which: str):
    """A function (rng, n) -> int64[n] for one token-count spec; which is "in" or "out" (empirical files)."""
    what = f"{which}={text}"
    try:
        if re.fullmatch(r"\d+", text):
            v = int(text)
            _check_tokens(v, what)
            return lambda rng, n: np.full(n, v, np.int64)
        kind, _, arg = text.partition(":")
        if kind == "uniform":
            a, b = (int(x) for x in arg.split("-"))
            _check_tokens(a, what)
            _check_tokens(b, what)
            if a > b:
                raise ValueError("A must be <= B")
            return lambda rng, n: rng.integers(a, b + 1, n).astype(np.int64)
        if kind == "lognormal":
            mean, sigma = (float(x) for x in arg.split(","))
            if not mean >= 1 or not 0 <= sigma <= 5:
                raise ValueError("MEAN must be >= 1 and SIGMA in [0, 5]")
            mu = np.log(mean) - sigma * sigma / 2     # so that the distribution's mean is MEAN
            return lambda rng, n: np.clip(np.rint(rng.lognormal(mu, sigma, n)), 1, MAX_TOKENS).astype(np.int64)
        if kind == "empirical":
            _, prompt, out = read_trace(arg)
            pool = prompt if which == "in" else out
            return lambda rng, n: pool[rng.integers(0, len(pool), n)]
    except ValueError as exc:
        raise ConfigError(f"workload {what!r}: {exc}; use N, uniform:A-B, lognormal:MEAN,SIGMA or "
                          f"empirical:FILE.csv") from None
    raise ConfigError(f"workload {what!r}: unknown distribution; use N, uniform:A-B, lognormal:MEAN,SIGMA or "
                      f"empirical:FILE.csv")


def _check_tokens(v: int, what: str) -> None:
    if not 1 <= v <= MAX_TOKENS:
        raise ValueError(f"token counts must be in [1, {MAX_TOKENS}]")


def _fields(spec: str, kind: str, allowed: tuple[str, ...], required: tuple[str, ...]) -> dict:
    """'a=1,b=lognormal:5,1' -> {'a': '1', 'b': 'lognormal:5,1'} (a comma starts a new field only before KEY=)."""
    out = {}
    for part in re.split(r",(?=[a-z_]+=)", spec):
        key, eq, value = part.partition("=")
        if not eq or not value:
            raise ConfigError(f"workload {kind}:{spec}: {part!r} is not KEY=VALUE")
        if key not in allowed:
            raise ConfigError(f"workload {kind}: unknown key {key!r}; use {', '.join(allowed)}")
        out[key] = value
    missing = [k for k in required if k not in out]
    if missing:
        raise ConfigError(f"workload {kind}:{spec}: missing {', '.join(missing)} (e.g. {kind}:"
                          + ("rate=5,in=1000,out=200)" if kind == "poisson" else "users=32,in=1000,out=200)"))
    return out


def _positive(value: str, what: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise ConfigError(f"{what}={value!r} is not a number") from None
    if not v > 0 or not np.isfinite(v):
        raise ConfigError(f"{what} must be a positive number, got {value}")
    return v


# ---------------------------------------------------------------- the spec

def parse_workload(spec: str, *, requests: int | None = None, duration_s: float | None = None,
                   rate: float | None = None, seed: int = 0, shared_prefix: str | None = None) -> Workload:
    wl = _parse(spec, requests=requests, duration_s=duration_s, rate=rate, seed=seed)
    return wl if shared_prefix is None else with_shared_prefix(wl, shared_prefix, seed)


def with_shared_prefix(wl: Workload, text: str, seed: int = 0) -> Workload:
    """wl with prefixes per `shared_prefix` text "F[:K]" (module docstring)."""
    frac, _, k = str(text).partition(":")
    try:
        f, k = float(frac), int(k) if k else 1
    except ValueError:
        f, k = -1.0, 0
    if not (0 < f <= 1 and 1 <= k <= 1_000_000):
        raise ConfigError(f"--shared-prefix {text!r} must be F or F:K with F in (0, 1] (the share of each prompt "
                          f"that is a shared prefix) and K >= 1 prefixes, e.g. 0.5 or 0.3:8")
    rng = np.random.default_rng([seed, 0x9F1C])
    ids = rng.integers(0, k, wl.n).astype(np.int64)
    tokens = np.floor(f * wl.prompt_tokens).astype(np.int64)
    return replace(wl, prefix_id=ids, prefix_tokens=tokens,
                               meta=dict(wl.meta, shared_prefix_fraction=f, shared_prefixes=k))


def _parse(spec: str, *, requests: int | None, duration_s: float | None, rate: float | None,
           seed: int) -> Workload:
    if requests is not None and requests < 1:
        raise ConfigError(f"--requests must be >= 1, got {requests}")
    if duration_s is not None and not duration_s > 0:
        raise ConfigError(f"--duration must be > 0 seconds, got {duration_s}")
    if rate is not None and not rate > 0:
        raise ConfigError(f"--rate must be > 0 requests/s, got {rate}")
    rng = np.random.default_rng([seed, 0x5E2E])
    kind, _, rest = spec.partition(":")
    if kind == "poisson":
        f = _fields(rest, kind, ("rate", "in", "out"), ("rate", "in", "out"))
        r = rate if rate is not None else _positive(f["rate"], "poisson rate")
        if requests is None and duration_s is None:
            raise ConfigError("a poisson workload needs --requests N or --duration S")
        n = requests if requests is not None else int(duration_s * r * 1.5 + 100)
        arrival = np.cumsum(rng.exponential(1.0 / r, n))
        arrival -= arrival[0]
        prompt, out = sampler(f["in"], "in")(rng, n), sampler(f["out"], "out")(rng, n)
        wl = Workload(f"poisson:{rest}", arrival, prompt, out, meta=dict(rate_per_s=r))
    elif kind == "closed":
        f = _fields(rest, kind, ("users", "in", "out", "think"), ("users", "in", "out"))
        users = _positive(f["users"], "closed users")
        if users != int(users) or users > 1_000_000:
            raise ConfigError(f"closed users must be a whole number in [1, 1000000], got {f['users']}")
        think = float(f.get("think", 0.0))
        if think < 0:
            raise ConfigError(f"closed think must be >= 0 s, got {think}")
        if rate is not None:
            raise ConfigError("--rate rescales an open workload's arrivals; a closed loop's rate follows from its "
                              "users (change users=U)")
        n = requests if requests is not None else CLOSED_DEFAULT_REQUESTS
        prompt, out = sampler(f["in"], "in")(rng, n), sampler(f["out"], "out")(rng, n)
        return Workload(f"closed:{rest}", np.zeros(n), prompt, out, users=int(users), think_s=think,
                        duration_s=duration_s, meta=dict(users=int(users), think_s=think))
    else:
        path = BUILTIN.get(spec, spec)
        if not str(path).endswith(".csv") and spec not in BUILTIN:
            raise ConfigError(f"workload {spec!r} is not a CSV file, a built-in ({', '.join(BUILTIN)}), "
                              f"poisson:rate=R,in=N,out=M or closed:users=U,in=N,out=M")
        arrival, prompt, out = read_trace(path)
        meta = dict(file=str(path), requests_in_file=len(prompt))
        if requests is not None:        # the rate is the one of the requests served
            arrival, prompt, out = arrival[:requests], prompt[:requests], out[:requests]
        if rate is not None:
            span = arrival[-1]
            if span <= 0:
                raise ConfigError(f"--rate cannot rescale {spec}: its requests arrive at once")
            scale = (len(arrival) - 1) / span / rate   # the trace's mean rate -> rate
            arrival = arrival * scale
            meta["rate_scale"] = scale
        wl = Workload(spec, arrival, prompt, out, meta=meta)
    keep = np.ones(wl.n, bool)
    if duration_s is not None:
        keep &= wl.arrival_s < duration_s
    idx = np.flatnonzero(keep)
    if requests is not None:
        idx = idx[:requests]
    if not len(idx):
        raise ConfigError(f"workload {spec!r} has no request in the first {duration_s} s")
    return Workload(wl.name, wl.arrival_s[idx], wl.prompt_tokens[idx], wl.output_tokens[idx], meta=dict(
        wl.meta, requests=len(idx), mean_rate_per_s=float((len(idx) - 1) / wl.arrival_s[idx][-1])
        if len(idx) > 1 and wl.arrival_s[idx][-1] > 0 else None))
