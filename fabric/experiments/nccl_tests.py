"""Reading nccl-tests output (all_reduce_perf and friends) and comparing predictions with it.

    table = read("all_reduce.txt")     # -> NcclTable(op, rows, ranks, source)
    table.rows[0].measured_us          # the smaller of the out-of-place and in-place time
    geomean_error(pred_us, meas_us)    # exp(mean |ln(pred / meas)|) - 1

The format (nccl-tests src/common.cu): comment lines start with '#'; each data row is

    size  count  type  redop  root  time algbw busbw #wrong  time algbw busbw #wrong
          (B)   (elements)           -------- out-of-place -------  --------- in-place ---------

with time in microseconds and algbw/busbw in GB/s. Older versions and some collectives print no root column (12
fields); `#wrong` may read N/A when the run did not check results. Anything else in a file (headers of a copied
page, an "NCCL version" line, notes) is skipped; a file without a single data row is not nccl-tests output. Also
used by fabric-validate.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from fabric.errors import ConfigError

# nccl-tests binary stem -> the collective's name in fabric.collectives
BINARIES = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
            "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv"}

_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text, name: str = "size") -> int:
    """A byte count as nccl-tests takes it: 8, 64K, 1M, 1G (K/M/G/T = powers of 1024; a trailing B is allowed)."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE.fullmatch(str(text))
        if not m:
            raise ConfigError(f"{name}={text!r} is not a size; use bytes with an optional K, M or G suffix "
                              f"(powers of 1024), e.g. 8, 64K, 1G")
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
        if not value.is_integer():
            raise ConfigError(f"{name}={text!r} is not a whole number of bytes")
        value = int(value)
    if value < 1:
        raise ConfigError(f"{name}={text!r} is out of range; allowed >= 1 B")
    return value


@dataclass(frozen=True)
class NcclRow:
    size: int                 # bytes (nccl-tests convention for the op)
    count: int                # elements
    type: str
    redop: str
    root: int                 # -1 when the op has none (or the column is absent)
    oop_time_us: float
    oop_algbw: float
    oop_busbw: float
    ip_time_us: float | None  # None when the row has out-of-place figures only
    ip_algbw: float | None
    ip_busbw: float | None

    @property
    def measured_us(self) -> float:
        """The smaller of the out-of-place and in-place time (both measure the same call)."""
        return self.oop_time_us if self.ip_time_us is None else min(self.oop_time_us, self.ip_time_us)


@dataclass
class NcclTable:
    source: str
    op: str | None                      # allreduce, allgather, ... when the file says which binary ran
    rows: list[NcclRow] = field(default_factory=list)
    ranks: int | None = None            # from busbw / algbw (the bus factor), when the op is known
    table: int = 1                      # which run of the file (1-based)
    tables: int = 1                     # runs the file holds

    @property
    def sizes(self) -> list[int]:
        return [r.size for r in self.rows]


def _num(tok: str) -> float:
    if tok.upper() == "N/A":
        return math.nan
    return float(tok)


def _row(tokens: list[str]) -> NcclRow | None:
    if len(tokens) not in (8, 9, 12, 13) or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tokens[2]) or not re.fullmatch(r"[A-Za-z_]+", tokens[3]):
        return None
    has_root = len(tokens) in (9, 13)
    rest = tokens[5:] if has_root else tokens[4:]
    try:
        root = int(tokens[4]) if has_root else -1
        vals = [_num(t) for t in rest]
    except ValueError:
        return None
    oop = vals[0:3]
    ip = vals[4:7] if len(vals) == 8 else [None, None, None]
    if not all(math.isfinite(v) and v >= 0 for v in oop + [v for v in ip if v is not None]):
        return None
    return NcclRow(int(tokens[0]), int(tokens[1]), tokens[2], tokens[3], root, *oop, *ip)


def _op_of(text: str, source: str) -> str | None:
    """The collective: from the binary the file names (all_reduce_perf), else from the file name (allreduce)."""
    m = re.search(r"Collective test starting:\s*([a-z_]+?)_perf", text) or re.search(r"\b([a-z_]+?)_perf\b", text)
    if m and m.group(1) in BINARIES:
        return BINARIES[m.group(1)]
    name = Path(source).name.lower().replace("_", "").replace("-", "")
    for stem, op in BINARIES.items():
        if op in ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast") and \
                stem.replace("_", "") in name:
            return op
    return None


def bus_factor(op: str | None, n: int) -> float:
    """nccl-tests' busbw / algbw: allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n; else 1."""
    if n <= 1:
        return 1.0
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def _ranks(op: str | None, rows: list[NcclRow]) -> int | None:
    """The group size that the printed bus factor implies (rows with algbw >= 1 GB/s, where rounding is small)."""
    if op not in ("allreduce", "allgather", "reduce_scatter", "alltoall"):
        return None
    ratios = [r.oop_busbw / r.oop_algbw for r in rows if r.oop_algbw >= 1.0]
    if not ratios:
        return None
    f = sorted(ratios)[len(ratios) // 2]
    k = 2.0 if op == "allreduce" else 1.0            # f = k (n - 1) / n  ->  n = k / (k - f)
    if f >= k - 1e-6:
        return None
    n = round(k / (k - f))
    return n if n >= 2 and abs(bus_factor(op, n) - f) < 0.02 else None


# a launcher's tag in front of every line: Open MPI --tag-output "[1,0]<stdout>:", Slurm srun --label "0: "
_RANK_TAG = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:)")


def _is_header(s: str) -> bool:
    """nccl-tests' column header comment (# size count type redop ...), which every run prints once."""
    words = s.lstrip("#").split()
    return len(words) >= 3 and words[:3] == ["size", "count", "type"]


def _tables(text: str) -> list[dict]:
    """The runs in `text`, in order: {rows, line (1-based, of the first row), text (the run's lines)}. A run ends at
    its summary (# Avg bus bandwidth), at the next column header, or where sizes start again (a size below the
    previous row's); lines may carry a launcher's rank tag."""
    tables, cur, seg = [], None, []

    def close():
        nonlocal cur, seg
        if cur is not None and cur["rows"]:
            cur["text"] = "\n".join(seg)
            tables.append(cur)
            seg = []
        cur = None

    for no, line in enumerate(text.splitlines(), 1):
        s = _RANK_TAG.sub("", line, count=1).strip()
        if not s:
            continue
        if s.startswith("#"):
            if cur is not None and (_is_header(s) or "Collective test starting" in s):
                close()
            seg.append(s)
            if "Avg bus bandwidth" in s:
                close()
            continue
        seg.append(s)
        r = _row(s.split())
        if r is None:
            continue
        if cur is not None and cur["rows"] and r.size < cur["rows"][-1].size:
            close()
        if cur is None:
            cur = dict(rows=[], line=no)
        cur["rows"].append(r)
    close()
    return tables


def _label(t: dict, i: int, op: str | None) -> str:
    lo, hi = t["rows"][0].size, t["rows"][-1].size
    return f"{i}: {op or 'collective ?'} {lo}-{hi} B, {len(t['rows'])} rows from line {t['line']}"


def parse(text: str, source: str = "<text>", table: int | None = None) -> NcclTable:
    """The data rows of one nccl-tests run in `text`; ConfigError if there is none. A file holding several runs
    (several column headers or summaries, or sizes that start again) needs `table` (1-based): merged, the last row
    of each size would win silently. Lines with a launcher's rank tag ("0: ", "[1,0]<stdout>:") are read."""
    tables = _tables(text)
    if not tables:
        raise ConfigError(f"{source} has no nccl-tests rows (size count type redop root time algbw busbw ...)")
    file_op = _op_of(text, source)
    ops = [_op_of(t["text"], "") or file_op for t in tables]
    if table is None and len(tables) > 1:
        listing = "; ".join(_label(t, i + 1, o) for i, (t, o) in enumerate(zip(tables, ops)))
        raise ConfigError(f"{source} holds {len(tables)} nccl-tests runs ({listing}); choose one with --table N "
                          f"(fabric-probe collective) or keep one run in the file")
    k = 1 if table is None else int(table)
    if not 1 <= k <= len(tables):
        raise ConfigError(f"--table={k} is out of range; {source} holds {len(tables)} nccl-tests "
                          f"run{'s' if len(tables) > 1 else ''} (1..{len(tables)})")
    rows, op = tables[k - 1]["rows"], ops[k - 1]
    return NcclTable(source=source, op=op, rows=rows, ranks=_ranks(op, rows), table=k, tables=len(tables))


def read(path: str | Path, table: int | None = None) -> NcclTable:
    """parse() of a file (`table`: which run of a file holding several, 1-based)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--compare file {str(p)!r} does not exist")
    try:
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise ConfigError(f"--compare file {str(p)!r} cannot be read: {exc.strerror or exc}") from None
    return parse(text, str(p), table)


def geomean_error(predicted, measured) -> float:
    """exp(mean |ln(predicted / measured)|) - 1 over pairs of times (0 = exact; 0.1 = 10% typical error)."""
    pairs = [(p, m) for p, m in zip(predicted, measured) if p > 0 and m > 0]
    if not pairs:
        raise ConfigError("no sizes to compare (every time is zero)")
    return math.exp(sum(abs(math.log(p / m)) for p, m in pairs) / len(pairs)) - 1.0
