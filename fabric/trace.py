"""Trace format v1: per-rank op tables of one decode step, stored in HDF5 (see docs/trace-format.md).

Public API (the replay depends on it):
    read(path) -> Trace          validates; raises TraceError listing every problem
    write(path, trace)           writes a signed, compressed v1 file
    validate(path) -> list[str]  every problem found, each with its location; [] when the file is good
    default_trace_path() -> Path the shipped DeepSeek-R1 TP64 trace

Every failure, including a corrupt, truncated or non-HDF5 file, surfaces as fabric.errors.TraceError.
"""
from __future__ import annotations

import dataclasses

import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fabric.errors import TraceError

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = (1, 1)  # inclusive range this reader understands
FORMAT_NAME = "fabric-trace"

# ---------------------------------------------------------------- code tables (import these, never hard-code)
KIND_NAMES = ("compute", "collective", "send", "recv")
KIND_COMPUTE, KIND_COLLECTIVE, KIND_SEND, KIND_RECV = range(len(KIND_NAMES))

COLL_NAMES = ("none", "allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "sendrecv")
COLL_NONE, COLL_ALLREDUCE, COLL_ALLGATHER, COLL_REDUCE_SCATTER, COLL_ALLTOALL, COLL_BROADCAST, COLL_SENDRECV = \
    range(len(COLL_NAMES))

# column -> numpy dtype; order is the documented order
COLUMNS: dict[str, np.dtype] = {
    "op_id": np.dtype(np.int64),
    "name": np.dtype(object),
    "kind": np.dtype(np.int8),
    "stream": np.dtype(np.int32),
    "duration_ns": np.dtype(np.float64),
    "flops": np.dtype(np.float64),
    "bytes": np.dtype(np.float64),
    "coll_kind": np.dtype(np.int8),
    "coll_bytes": np.dtype(np.int64),
    "group": np.dtype(np.int32),
    "peer": np.dtype(np.int32),
    "layer": np.dtype(np.int32),
    "module": np.dtype(object),
    "dep_ptr": np.dtype(np.int64),
    "dep_idx": np.dtype(np.int64),
}
STRING_COLUMNS = ("name", "module")
ROW_COLUMNS = tuple(c for c in COLUMNS if c not in ("dep_ptr", "dep_idx"))
META_KEYS = ("schema_version", "model", "model_config", "plan", "batch", "context", "chip", "tool", "tool_version")

# Bounds (docs/trace-format.md §Bounds): what the engines represent in int64 picoseconds and bytes without overflow
# over a step, even if every op of a rank ran back to back and every byte crossed a 1 GB/s link (1000 ps/B).
MAX_STREAM = (1 << 16) - 1          # streams per rank are few (CUDA streams); ids index per-rank tables
HOST_STREAM = 1 << 15               # streams from here up are host (CPU) threads: their ops are host time, not
                                    # accelerator compute (a PyTorch trace's CPU operators, fabric.chakra)
MAX_OP_NS = 1e12                    # one op: 1000 s
MAX_RANK_NS = 1e15                  # all compute ops of one rank: 1e18 ps, a quarter of int64's 9.2e18
MAX_OP_BYTES = 1 << 44              # one collective or message: 16 TiB (x group size < 2^54 in the lowering)
MAX_RANK_BYTES = 1 << 50            # all collectives and messages of one rank: 1.1e18 ps at 1000 ps/B
MAX_FLOPS = 1e24
MAX_MEM_BYTES = float(1 << 53)      # a compute op's memory bytes: exact in float64 and int64
MAX_BATCH = 1 << 24
MAX_CONTEXT = 1 << 30
MAX_LAYER = (1 << 24)
MAX_RANKS = 1 << 20                 # ranks in one trace: table_of_rank and the engines' per-rank tables

_MAGIC = b"FABRIC-TRACE\x00"
_USERBLOCK = 512
_MAX_FILE_BYTES = 1 << 31  # refuse to slurp anything larger: no trace of one decode step comes near


@dataclass
class OpTable:
    """One rank's ordered ops as equal-length numpy columns; dependencies as CSR into the same table. Tables that
    read() returns, and the ranks of a capture, share columns, read-only: copy one before changing it."""
    op_id: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    stream: np.ndarray
    duration_ns: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    coll_kind: np.ndarray
    coll_bytes: np.ndarray
    group: np.ndarray
    peer: np.ndarray
    layer: np.ndarray
    module: np.ndarray
    dep_ptr: np.ndarray
    dep_idx: np.ndarray

    def __len__(self) -> int:
        return len(self.op_id)

    def deps(self, i: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[i]:self.dep_ptr[i + 1]]

    def columns(self) -> dict[str, np.ndarray]:
        return {c: getattr(self, c) for c in COLUMNS}

    def same_as(self, other: "OpTable") -> bool:
        return self is other or all(np.array_equal(getattr(self, c), getattr(other, c)) for c in COLUMNS)

    @classmethod
    def from_rows(cls, rows: list[dict], deps: list[list[int]]) -> "OpTable":
        """Build from row dicts (missing keys take neutral defaults) and one dependency list per row."""
        n = len(rows)
        defaults = dict(kind=KIND_COMPUTE, stream=0, duration_ns=0.0, flops=0.0, bytes=0.0, coll_kind=COLL_NONE,
                        coll_bytes=0, group=-1, peer=-1, layer=-1, module="")
        cols = {}
        for c in ROW_COLUMNS:
            if c == "op_id":
                cols[c] = np.arange(n, dtype=np.int64)
            else:
                vals = [r.get(c, defaults.get(c)) for r in rows]
                cols[c] = np.array(vals, dtype=COLUMNS[c]) if n else np.zeros(0, COLUMNS[c])
        ptr = np.zeros(n + 1, np.int64)
        ptr[1:] = np.cumsum([len(d) for d in deps]) if n else []
        idx = np.array([j for d in deps for j in d], dtype=np.int64)
        return cls(dep_ptr=ptr, dep_idx=idx, **cols)


@dataclass
class Trace:
    meta: dict
    n_ranks: int
    groups: list[list[int]]
    ops: list[OpTable] = field(default_factory=list)

    def compute_ns_per_rank(self) -> np.ndarray:
        """Accelerator compute per rank: compute ops on host streams (HOST_STREAM up) are host time."""
        return np.array([float(t.duration_ns[(t.kind == KIND_COMPUTE) & (t.stream < HOST_STREAM)].sum())
                         for t in self.ops])


def replicate(trace: Trace, copies: int) -> Trace:
    """`copies` independent data-parallel replicas of `trace` side by side: replica k holds ranks k*R .. k*R+R-1
    (R = trace.n_ranks) and groups of its own (group ids and peers shifted by k); the replicas never talk to each
    other, as DP serving replicas of one model do. Identical tables stay shared within each replica, so a 1024-rank
    step of 16 TP64 replicas costs 16 x the tables of one, not 1024 x. meta["plan"] gains replicas."""
    copies = int(copies)
    if copies < 1:
        raise ValueError(f"replicas={copies}: one or more, please")
    if copies == 1:
        return trace
    R, G = int(trace.n_ranks), len(trace.groups)
    _check_replicas(trace, copies)
    ops, groups = [], []
    for k in range(copies):
        shifted: dict[int, OpTable] = {}
        for t in trace.ops:
            if id(t) not in shifted:
                group = np.where(t.group >= 0, t.group + k * G, t.group).astype(t.group.dtype)
                peer = np.where(t.peer >= 0, t.peer + k * R, t.peer).astype(t.peer.dtype)
                shifted[id(t)] = dataclasses.replace(t, group=group, peer=peer) if k else t
            ops.append(shifted[id(t)])
        groups += [[int(r) + k * R for r in g] for g in trace.groups]
    meta = dict(trace.meta)
    plan = dict(meta.get("plan") or {})
    plan["replicas"] = copies * int(plan.get("replicas", 1))
    meta["plan"] = plan
    if "batch" in meta and meta["batch"]:
        meta["batch"] = int(meta["batch"]) * copies
    return Trace(meta=meta, n_ranks=R * copies, groups=groups, ops=ops)


def _check_replicas(trace: Trace, copies: int) -> None:
    """Refuse, before building it, a replicated trace past the ranks a trace holds or the memory guard that runs
    have (sim.max_memory_mb's auto value: half of this machine's memory), as replay refuses a run up front.
    The memory is what replicate() makes per copy: each distinct table's shifted group and peer columns and its
    table object, and per rank a list slot and the group lists' entries (an upper bound: 29 MiB estimated for
    16,384 copies of toy-mla tp8 held 20 MiB under tracemalloc, 12 for 4 of DeepSeek-R1 tp64 ep256 held 8.9)."""
    from fabric.config import load_config, resource_limits
    from fabric.errors import ConfigError
    R = int(trace.n_ranks)
    if R * copies > MAX_RANKS:
        raise ConfigError(f"{copies} replicas of a {R}-rank step make {R * copies:,} ranks, more than a trace holds "
                          f"({MAX_RANKS:,}); use at most {MAX_RANKS // R} replicas")
    distinct = {id(t): t for t in trace.ops}.values()
    per_copy_B = sum(t.group.nbytes + t.peer.nbytes + _TABLE_OBJECT_B for t in distinct) + R * _RANK_B
    need_mb = copies * per_copy_B / 2**20
    _, max_mb, how = resource_limits(load_config())
    if need_mb > max_mb:
        raise ConfigError(f"{copies} replicas of a {R}-rank step would hold about {need_mb:,.0f} MiB of op tables, "
                          f"above the memory guard ({max_mb} MiB, half the {how}); use at most "
                          f"{max(int(copies * max_mb / need_mb), 1)} replicas")


_TABLE_OBJECT_B = 1024      # an OpTable and its two shifted columns' array headers (sys.getsizeof: ~0.9 KiB)
_RANK_B = 64                # a rank's slot in ops and its group lists' entries (ints past 256 are objects)


# ---------------------------------------------------------------- writing

def write(path, trace: Trace) -> None:
    """Write `trace` to `path` as a signed v1 file (identical rank tables are stored once)."""
    _write(path, trace)


def _write(path, trace: Trace, check: bool = True, sign: bool = True) -> None:
    """write() with its safety checks switchable, for tests that need broken or unsigned files."""
    import h5py
    if check:
        problems = _check_trace(trace)
        if problems:
            raise TraceError(_summary(f"refusing to write an invalid trace to {path}", problems))
    path = Path(path)
    stored_as = _StoredColumns()
    # each rank's table, or the first equal one before it: found by its columns' keys, then compared (1024
    # distinct tables took 15 s of pairwise comparisons). Equal means the same bytes: a -0.0 where another table
    # has 0.0 is its own table now (the pairwise comparison merged them and lost the sign).
    tables: list[OpTable] = []
    table_of_rank = np.zeros(trace.n_ranks, np.int32)
    first_with: dict[tuple, list[int]] = {}
    for r, t in enumerate(trace.ops):
        same = first_with.setdefault(tuple(stored_as(c, getattr(t, c))[0] for c in COLUMNS), [])
        k = next((k for k in same if tables[k].same_as(t)), None)
        if k is None:
            k = len(tables)
            tables.append(t)
            same.append(k)
        table_of_rank[r] = k
    meta = dict(trace.meta)
    meta["schema_version"] = SCHEMA_VERSION
    tmp = path.with_name(path.name + ".tmp")
    try:
        with h5py.File(tmp, "w", userblock_size=_USERBLOCK if sign else 0, libver="earliest") as f:
            f.attrs["format"] = FORMAT_NAME
            f.attrs["schema_version"] = np.int64(SCHEMA_VERSION)
            f.attrs["meta_json"] = json.dumps(meta, sort_keys=True)
            f.attrs["n_ranks"] = np.int64(trace.n_ranks)
            gptr = np.zeros(len(trace.groups) + 1, np.int64)
            gptr[1:] = np.cumsum([len(g) for g in trace.groups])
            granks = np.array([r for g in trace.groups for r in g], dtype=np.int32)
            f.create_dataset("groups/ptr", data=gptr)
            f.create_dataset("groups/ranks", data=granks)
            f.create_dataset("ops/table_of_rank", data=table_of_rank)
            stored: dict[tuple, object] = {}  # identical columns of different tables are stored once (hard links)
            for k, t in enumerate(tables):
                g = f.create_group(f"ops/tables/{k}")
                for c in COLUMNS:
                    key, data = stored_as(c, getattr(t, c))
                    if key in stored:
                        g[c] = stored[key]
                        continue
                    kw = dict(compression="gzip", compression_opts=6, shuffle=True) if len(data) > 16 else {}
                    h5dt = h5py.string_dtype("utf-8", length=data.dtype.itemsize) if c in STRING_COLUMNS else None
                    stored[key] = g.create_dataset(c, data=data.astype(h5dt) if h5dt is not None else data, **kw)
        if sign:
            _sign(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


class _StoredColumns:
    """A column as the file stores it, and its key (name, dtype, sha256 of the bytes): equal columns, equal keys.
    Strings are UTF-8, as wide as the longest (at least 1 byte). Each column array is encoded and hashed once,
    however many tables hold it (the ranks of a captured step share theirs: fabric.capture.plan)."""

    def __init__(self):
        self._of: dict[tuple, tuple] = {}     # (column, id(array)) -> (array, key, data); the array kept, so
        #                                       its id stays (one array may serve two columns of other dtypes)

    def __call__(self, c: str, a) -> tuple[tuple, np.ndarray]:
        got = self._of.get((c, id(a)))
        if got is None:
            if c in STRING_COLUMNS:
                enc = [str(s).encode("utf-8") for s in a]
                data = np.array(enc, dtype=f"S{max([len(e) for e in enc] + [1])}")
            else:
                data = np.ascontiguousarray(a, dtype=COLUMNS[c])
            got = self._of[c, id(a)] = (a, (c, data.dtype.str, hashlib.sha256(data.tobytes()).hexdigest()), data)
        return got[1], got[2]


def _sign(path) -> None:
    """Write the header line with the sha256 of everything after the user block (files written with one)."""
    with open(path, "r+b") as fh:
        fh.seek(_USERBLOCK)
        digest = hashlib.sha256(fh.read()).hexdigest().encode()
        fh.seek(0)
        fh.write((_MAGIC + b"v1 sha256=" + digest + b"\n").ljust(_USERBLOCK, b"\x00"))


# ---------------------------------------------------------------- reading

def read(path) -> Trace:
    """Read and validate a trace; raises TraceError naming every problem."""
    trace, problems = _load(path)
    if problems:
        raise TraceError(_summary(f"{path} is not a valid trace", problems))
    return trace


def validate(path) -> list[str]:
    """Every problem of the file at `path`, each with its location; an empty list means valid."""
    try:
        _, problems = _load(path)
    except TraceError as exc:
        return [str(exc)]
    return problems


def _summary(head: str, problems: list[str]) -> str:
    shown = problems[:50]
    more = f"; ... and {len(problems) - 50} more" if len(problems) > 50 else ""
    return f"{head} ({len(problems)} problem{'s' if len(problems) != 1 else ''}): " + "; ".join(shown) + more


def _file_bytes(path) -> bytes:
    p = Path(path)
    if not p.exists():
        raise TraceError(f"trace file {str(p)!r} does not exist")
    if p.is_dir():
        raise TraceError(f"{str(p)!r} is a directory, not a trace file")
    try:
        size = p.stat().st_size
        if size > _MAX_FILE_BYTES:
            raise TraceError(f"{p} is {size} bytes, larger than any trace this reader accepts")
        data = p.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read {p}: {exc.strerror or exc}") from None
    if len(data) == 0:
        raise TraceError(f"{p} is empty (0 bytes); re-create it with fabric-capture")
    return data


_HDF5_SIG = b"\x89HDF\r\n\x1a\n"


def _check_signature(path, data: bytes) -> None:
    """Signed files carry sha256 of everything after the user block; check it before HDF5 parses a byte."""
    if data.startswith(_HDF5_SIG):
        return  # plain (unsigned) HDF5, e.g. written by another tool: HDF5's own checks apply
    if not data.startswith(_MAGIC):
        if data[_USERBLOCK:_USERBLOCK + 8] == _HDF5_SIG:
            raise TraceError(f"{path}: the trace header is damaged (file corrupt); re-create it with fabric-capture")
        raise TraceError(f"{path} is not an HDF5 trace file (no HDF5 signature); "
                         f"expected a file written by fabric-capture")
    head = data[:_USERBLOCK]
    line = head[len(_MAGIC):].split(b"\n", 1)[0]
    if not line.startswith(b"v1 sha256=") or len(line) != len(b"v1 sha256=") + 64:
        raise TraceError(f"{path}: the trace header is damaged (file corrupt); re-create it with fabric-capture")
    if len(data) <= _USERBLOCK:
        raise TraceError(f"{path} is truncated ({len(data)} bytes); re-create it with fabric-capture")
    want = line[len(b"v1 sha256="):].decode("ascii", "replace")
    if hashlib.sha256(data[_USERBLOCK:]).hexdigest() != want:
        raise TraceError(f"{path} is corrupt or truncated (checksum mismatch, {len(data)} bytes); "
                         f"re-create it with fabric-capture or copy it again")


def _load(path) -> tuple[Trace | None, list[str]]:
    data = _file_bytes(path)
    _check_signature(path, data)
    try:
        import h5py
    except ImportError:  # pragma: no cover
        raise TraceError("reading traces needs h5py: pip install h5py") from None
    try:
        with h5py.File(io.BytesIO(data), "r") as f:
            return _parse(f)
    except TraceError:
        raise
    except Exception as exc:  # h5py raises OSError, KeyError, ValueError, RuntimeError... on damaged files
        raise TraceError(f"{path} is not a readable HDF5 trace ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); "
                         f"it may be truncated or corrupt: re-create it with fabric-capture") from None


def _attr(f, name, problems):
    if name not in f.attrs:
        problems.append(f"/ attribute {name!r} is missing")
        return None
    return f.attrs[name]


def _dataset(f, key, problems, where=None, ndim=1):
    """Fetch a 1-D dataset `key` of group `f`, checking presence and shape; problems name it as `where`."""
    import h5py
    where = where or key
    obj = f.get(key)
    if obj is None:
        problems.append(f"{where}: dataset is missing")
        return None
    if not isinstance(obj, h5py.Dataset):
        problems.append(f"{where}: is a group, expected a dataset")
        return None
    if len(obj.shape) != ndim:
        problems.append(f"{where}: has shape {obj.shape}, expected {ndim} dimension(s)")
        return None
    return obj


def _check_dtype(where, obj, want: np.dtype, problems) -> bool:
    import h5py
    if want == np.dtype(object):
        if h5py.check_string_dtype(obj.dtype) is None:
            problems.append(f"{where}: dtype {obj.dtype} is wrong, expected a UTF-8 string")
            return False
        return True
    if obj.dtype != want:
        problems.append(f"{where}: dtype {obj.dtype} is wrong, expected {want}")
        return False
    return True


def _parse(f) -> tuple[Trace | None, list[str]]:
    problems: list[str] = []
    fmt = _attr(f, "format", problems)
    if fmt is not None and _s(fmt) != FORMAT_NAME:
        problems.append(f"/ attribute format={_s(fmt)!r}, expected {FORMAT_NAME!r}")
    sv = _attr(f, "schema_version", problems)
    lo, hi = SUPPORTED_SCHEMA_VERSIONS
    if sv is not None:
        # an integer attribute only: int() would read 1.5 (or "1") as version 1
        svi = int(sv) if isinstance(sv, (int, np.integer)) and not isinstance(sv, (bool, np.bool_)) else None
        if svi is None or not lo <= svi <= hi:
            shown = svi if svi is not None else sv.item() if isinstance(sv, np.generic) else _s(sv)
            return None, [f"schema_version {shown!r} is not supported; this reader supports versions {lo} to {hi}"]
    meta = {}
    mj = _attr(f, "meta_json", problems)
    if mj is not None:
        try:
            meta = json.loads(_s(mj))
            if not isinstance(meta, dict):
                raise ValueError
        except (ValueError, TypeError):
            problems.append("/ attribute meta_json is not a JSON object")
            meta = {}
    nr = _attr(f, "n_ranks", problems)
    n_ranks = None
    if nr is not None:
        try:
            n_ranks = int(nr)
            if n_ranks < 1 or n_ranks > 1 << 20:
                raise ValueError
        except (TypeError, ValueError):
            problems.append(f"/ attribute n_ranks={nr!r} must be a positive integer")
            n_ranks = None

    groups: list[list[int]] = []
    gp = _dataset(f, "groups/ptr", problems)
    gr = _dataset(f, "groups/ranks", problems)
    if gp is not None and gr is not None:
        ok = _check_dtype("groups/ptr", gp, np.dtype(np.int64), problems)
        ok &= _check_dtype("groups/ranks", gr, np.dtype(np.int32), problems)
        if ok:
            ptr, rk = gp[()], gr[()]
            if len(ptr) < 1 or ptr[0] != 0 or ptr[-1] != len(rk) or np.any(np.diff(ptr) < 0):
                problems.append("groups/ptr is not a valid CSR pointer into groups/ranks")
            else:
                groups = [rk[ptr[i]:ptr[i + 1]].tolist() for i in range(len(ptr) - 1)]
                for gi, g in enumerate(groups):
                    if n_ranks is not None:
                        bad = [r for r in g if not 0 <= r < n_ranks]
                        if bad:
                            problems.append(f"group {gi}: unknown rank(s) {bad[:5]} (n_ranks={n_ranks})")
                    if len(set(g)) != len(g):
                        problems.append(f"group {gi}: a rank appears twice")
                    if not g:
                        problems.append(f"group {gi}: is empty")

    tor = _dataset(f, "ops/table_of_rank", problems)
    tables: dict[int, OpTable] = {}
    ops: list[OpTable] = []
    if tor is not None and _check_dtype("ops/table_of_rank", tor, np.dtype(np.int32), problems):
        tor = tor[()]
        if n_ranks is not None and len(tor) != n_ranks:
            problems.append(f"ops/table_of_rank has {len(tor)} entries, expected n_ranks={n_ranks}")
        tgroup = f.get("ops/tables")
        if tgroup is None:
            problems.append("ops/tables: group is missing")
        else:
            columns: dict = {}       # each dataset read once, however many tables link it
            for k in sorted(set(tor.tolist())):
                if k < 0 or str(k) not in tgroup:
                    problems.append(f"ops/table_of_rank refers to table {k}, which does not exist")
                    continue
                t = _read_table(tgroup[str(k)], f"ops/tables/{k}", problems, columns)
                if t is not None:
                    tables[k] = t
            if len(tables) == len(set(tor.tolist())):
                ops = [tables[int(k)] for k in tor]
    if problems:
        return None, problems
    trace = Trace(meta=meta, n_ranks=n_ranks, groups=groups, ops=ops)
    problems += _check_trace(trace, table_of_rank=tor)
    return (None if problems else trace), problems


def _s(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _hard_link_address(g, name: str):
    """The file address of the object hard link `name` of group g names (the same for every hard link to it), or
    None (no such link, or a soft or external one)."""
    import h5py
    try:
        info = g.id.links.get_info(name.encode())
    except (KeyError, RuntimeError):
        return None
    return info.u if info.type == h5py.h5l.TYPE_HARD else None


def _read_table(g, where, problems, columns: dict) -> OpTable | None:
    """Table group g; columns: the datasets read so far, by (column, file address of the object a hard link names):
    write() hard-links a column equal to one already stored, and a 1024-rank trace's 15,360 columns are ~400
    datasets. Each is opened, checked and read once and shared, read-only, by every table that links it under the
    same column name (a link under another name is checked as that column)."""
    import h5py
    if not isinstance(g, h5py.Group):
        problems.append(f"{where}: is not a group")
        return None
    cols = {}
    n_before = len(problems)
    for c, dt in COLUMNS.items():
        key = (c, _hard_link_address(g, c))
        if key[1] is not None and key in columns:      # no open: a link's address is 10x cheaper to look up
            cols[c] = columns[key]
            continue
        obj = _dataset(g, c, problems, where=f"{where}/{c}")
        if obj is None:
            continue
        if not _check_dtype(f"{where}/{c}", obj, dt, problems):
            continue
        if c in STRING_COLUMNS:
            cols[c] = np.array(obj.asstr()[()], dtype=object)
        else:
            cols[c] = obj[()]
        cols[c].flags.writeable = False
        if key[1] is not None:
            columns[key] = cols[c]
    if len(problems) > n_before:
        return None
    n = len(cols["op_id"])
    lengths = {c: len(cols[c]) for c in ROW_COLUMNS}
    bad = {c: m for c, m in lengths.items() if m != n}
    if bad:
        problems.append(f"{where}: columns differ in length (op_id has {n}; " +
                        ", ".join(f"{c} has {m}" for c, m in bad.items()) + ")")
        return None
    if len(cols["dep_ptr"]) != n + 1:
        problems.append(f"{where}/dep_ptr: has {len(cols['dep_ptr'])} entries, expected {n + 1} (ops + 1)")
        return None
    return OpTable(**cols)


# ---------------------------------------------------------------- semantic checks (shared by read and write)

_META_TYPES = dict(model=str, chip=str, tool=str, tool_version=str, model_config=dict, plan=dict)
_META_INTS = dict(schema_version=(1, 1 << 16), batch=(1, MAX_BATCH), context=(0, MAX_CONTEXT))


def _check_meta(meta) -> list[str]:
    """Types and ranges of the metadata keys that tools compute with (batch -> tokens/s, context, ...)."""
    if not isinstance(meta, dict):
        return [f"meta_json must be a JSON object, not {type(meta).__name__}"]
    out = []
    for k, (lo, hi) in _META_INTS.items():
        if k not in meta:
            continue
        v = meta[k]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            out.append(f"meta_json {k}={v!r} must be an integer in [{lo}, {hi}]")
        elif not lo <= v <= hi:
            out.append(f"meta_json {k}={v!r} is out of range; allowed [{lo}, {hi}]")
    for k, want in _META_TYPES.items():
        if k in meta and not isinstance(meta[k], want):
            out.append(f"meta_json {k}={meta[k]!r} must be a {'text' if want is str else 'JSON object'}")
    return out


def _check_trace(trace: Trace, table_of_rank=None) -> list[str]:
    problems: list[str] = _check_meta(trace.meta)
    missing = [k for k in META_KEYS if isinstance(trace.meta, dict) and k not in trace.meta]
    if missing:
        problems.append(f"/ meta_json lacks {', '.join(missing)}")
    n_ranks = trace.n_ranks
    if not isinstance(n_ranks, (int, np.integer)) or isinstance(n_ranks, bool) or not 1 <= n_ranks <= MAX_RANKS:
        return problems + [f"n_ranks={n_ranks!r} must be an integer in [1, {MAX_RANKS}]"]
    if len(trace.ops) != n_ranks:
        return problems + [f"trace has {len(trace.ops)} op tables for n_ranks={n_ranks}"]
    checked: dict[tuple, list[str]] = {}
    for r, t in enumerate(trace.ops):
        # read() shares equal columns: the replicas of a step are checked once
        key = tuple(id(getattr(t, c)) for c in _TABLE_CHECKED) + (len(t.group), len(t.peer), len(t.module))
        if key not in checked:
            checked[key] = _check_table(t)
        for p in checked[key]:
            problems.append(f"rank {r} {p}")
        if len(problems) > 200:
            return problems
    # per-rank membership and peer checks: every op at once, then op by op only to name the problems
    members = [set(g) for g in trace.groups]
    for r, t in enumerate(trace.ops if not _refs_ok(trace) else ()):
        coll = np.nonzero(t.kind == KIND_COLLECTIVE)[0]
        for i in coll:
            g = int(t.group[i])
            if not 0 <= g < len(trace.groups):
                problems.append(f"rank {r} op {i} ({t.name[i]}): unknown group {g} ({len(trace.groups)} groups)")
            elif r not in members[g]:
                problems.append(f"rank {r} op {i} ({t.name[i]}): rank is not a member of group {g}")
        p2p = np.nonzero((t.kind == KIND_SEND) | (t.kind == KIND_RECV))[0]
        for i in p2p:
            p = int(t.peer[i])
            if not 0 <= p < n_ranks:
                problems.append(f"rank {r} op {i} ({t.name[i]}): unknown peer rank {p} (n_ranks={n_ranks})")
            elif p == r:
                problems.append(f"rank {r} op {i} ({t.name[i]}): sends to or receives from itself")
        if len(problems) > 200:
            return problems
    if problems:
        return problems
    # collectives: every member of a group issues the same sequence of (kind, bytes) on it (group by group only to
    # name the problems)
    for gi, g in enumerate(trace.groups if not _collectives_agree(trace) else ()):
        seqs = {}
        for r in g:
            t = trace.ops[r]
            sel = (t.kind == KIND_COLLECTIVE) & (t.group == gi)
            seqs[r] = (t.coll_kind[sel], t.coll_bytes[sel], np.nonzero(sel)[0])
        r0 = g[0]
        k0, b0, i0 = seqs[r0]
        for r in g[1:]:
            k, b, idx = seqs[r]
            if len(k) != len(k0):
                problems.append(f"group {gi}: rank {r} issues {len(k)} collectives but rank {r0} issues {len(k0)}")
                continue
            diff = np.nonzero((k != k0) | (b != b0))[0]
            if len(diff):
                j = int(diff[0])
                problems.append(
                    f"group {gi}: collective #{j} disagrees: rank {r0} op {int(i0[j])} is "
                    f"{COLL_NAMES[k0[j]] if 0 <= k0[j] < len(COLL_NAMES) else k0[j]} of {int(b0[j])} B, rank {r} op "
                    f"{int(idx[j])} is {COLL_NAMES[k[j]] if 0 <= k[j] < len(COLL_NAMES) else k[j]} of {int(b[j])} B"
                    + (f" ({len(diff)} positions differ)" if len(diff) > 1 else ""))
    # point to point: sends r->p match receives on p from r, in order and size (ranks with neither skipped, their
    # kind column looked at once however many ranks share it)
    p2p_in: dict[int, bool] = {}
    for r, t in enumerate(trace.ops):
        if not p2p_in.setdefault(id(t.kind), bool(np.any((t.kind == KIND_SEND) | (t.kind == KIND_RECV)))):
            continue
        for p in np.unique(t.peer[t.kind == KIND_SEND]):
            p = int(p)
            sent = t.coll_bytes[(t.kind == KIND_SEND) & (t.peer == p)]
            u = trace.ops[p]
            got = u.coll_bytes[(u.kind == KIND_RECV) & (u.peer == r)]
            if len(sent) != len(got) or np.any(sent != got):
                problems.append(f"rank {r} sends {len(sent)} message(s) to rank {p}, which receives "
                                f"{len(got)} from it with different sizes or count")
        for p in np.unique(t.peer[t.kind == KIND_RECV]):
            p = int(p)
            u = trace.ops[p]
            if not np.any((u.kind == KIND_SEND) & (u.peer == r)):
                problems.append(f"rank {r} receives from rank {p}, which never sends to it")
    return problems


def _refs_ok(trace: Trace) -> bool:
    """Whether every collective op names a group its rank belongs to and every send and receive another existing
    rank: one pass over all ranks' ops at once (op by op, 1024 ranks' 127 k collectives took 0.1 s)."""
    n_ranks, n_groups = trace.n_ranks, len(trace.groups)
    rank, column = _ops_where(trace, (KIND_COLLECTIVE,))
    group = column("group").astype(np.int64)
    if len(group) and (group.min() < 0 or group.max() >= n_groups):
        return False
    member = np.sort(np.concatenate([np.zeros(0, np.int64)] + [gi * n_ranks + np.asarray(g, np.int64)
                                                               for gi, g in enumerate(trace.groups)]))
    key = group * n_ranks + rank
    at = np.minimum(np.searchsorted(member, key), max(len(member) - 1, 0))   # not np.isin: it sorts the
    if len(key) and (not len(member) or not np.array_equal(member[at], key)):  # ops' keys too (1.3 GB at 32 M)
        return False
    rank, column = _ops_where(trace, (KIND_SEND, KIND_RECV))
    peer = column("peer").astype(np.int64)
    return not len(peer) or bool(((peer >= 0) & (peer < n_ranks) & (peer != rank)).all())


def _ops_where(trace: Trace, kinds: tuple[int, ...]):
    """(rank, column): the rank of every op whose kind is in `kinds`, in rank then op order, and a function that
    gathers a column at those ops. Each distinct kind column is searched once, and no column of every op of every
    rank is ever built (262,144 ranks x 1329 ops held 5.5 GB that way, for the 0.2 % of ops that are collectives)."""
    at: dict[int, np.ndarray] = {}
    pos = []
    for t in trace.ops:
        p = at.get(id(t.kind))
        if p is None:
            p = at[id(t.kind)] = np.flatnonzero(np.isin(t.kind, kinds))
        pos.append(p)
    rank = np.repeat(np.arange(len(pos), dtype=np.int64), [len(p) for p in pos])

    def column(c: str) -> np.ndarray:
        return np.concatenate([np.zeros(0, COLUMNS[c])] + [getattr(t, c)[p] for t, p in zip(trace.ops, pos)])
    return rank, column


_TABLE_CHECKED = ("op_id", "name", "kind", "stream", "duration_ns", "flops", "bytes", "coll_kind", "coll_bytes",
                  "layer", "dep_ptr", "dep_idx")       # the columns _check_table reads (of group, peer and module,
#                                                        only the lengths)


def _collectives_agree(trace: Trace) -> bool:
    """Whether every member of every group issues the same sequence of (coll_kind, coll_bytes) on it as the group's
    first member: one pass over all ranks' collective ops at once, sorted by (group, rank) in op order (group by
    group, 131,072 ranks took 10 s). Needs every collective's group valid and its rank a member (_refs_ok)."""
    R = int(trace.n_ranks)
    rank, column = _ops_where(trace, (KIND_COLLECTIVE,))
    key = column("group").astype(np.int64) * R + rank
    o = np.argsort(key, kind="stable")          # stable: each (group, rank) run stays in op order
    key = key[o]
    ck = column("coll_kind")[o]
    cb = column("coll_bytes")[o]
    if not len(key):
        return True
    start = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))     # key is sorted: its runs
    runs, count = key[start], np.diff(np.append(start, len(key)))
    sizes = np.array([len(g) for g in trace.groups], np.int64)
    m_rank = np.concatenate([np.asarray(g, np.int64) for g in trace.groups])
    m_key = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes) * R + m_rank
    at = np.minimum(np.searchsorted(runs, m_key), len(runs) - 1)
    m_count = np.where(runs[at] == m_key, count[at], 0)         # collectives each member issues on the group
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])        # each group's first member, in the member lists
    if np.any(m_count != np.repeat(m_count[first], sizes)):
        return False
    run = np.repeat(np.arange(len(runs)), count)
    ref = np.arange(len(key)) - start[run]                     # each op's place in its run ...
    g = runs // R
    ref += start[np.searchsorted(runs, g * R + m_rank[first][g])][run]    # ... in its group's first member's run
    return bool(np.array_equal(ck, ck[ref]) and np.array_equal(cb, cb[ref]))


def _check_table(t: OpTable) -> list[str]:
    """Problems of one table, each located as 'op i (name): ...' or 'column: ...'."""
    out: list[str] = []
    n = len(t.op_id)

    def rows(mask, what, limit=5):
        bad = np.nonzero(mask)[0]
        if len(bad):
            where = ", ".join(f"op {int(i)} ({t.name[i]})" for i in bad[:limit])
            more = f" and {len(bad) - limit} more" if len(bad) > limit else ""
            out.append(f"{where}{more}: {what}")

    for c in ROW_COLUMNS:
        if len(getattr(t, c)) != n:
            return [f"column {c} has {len(getattr(t, c))} rows, op_id has {n}"]
    rows(t.op_id != np.arange(n), "op_id must equal the row index")
    codes = [f"{k} {name}" for k, name in enumerate(KIND_NAMES)]
    rows((t.kind < 0) | (t.kind >= len(KIND_NAMES)), f"kind must be {', '.join(codes[:-1])} or {codes[-1]}")
    for c, hi, unit in (("duration_ns", MAX_OP_NS, "ns"), ("flops", MAX_FLOPS, ""), ("bytes", MAX_MEM_BYTES, "B")):
        a = getattr(t, c)
        rows(~np.isfinite(a) | (a < 0), f"{c} must be finite and >= 0")
        rows(np.isfinite(a) & (a > hi), f"{c} must be <= {hi:.3g}{' ' + unit if unit else ''} (docs/trace-format.md "
                                        f"§Bounds)")
    rows((t.stream < 0) | (t.stream > MAX_STREAM), f"stream must be in [0, {MAX_STREAM}]")
    rows((t.layer < -1) | (t.layer > MAX_LAYER), f"layer must be -1 (none) or in [0, {MAX_LAYER}]")
    total_ns = float(np.sum(np.where(np.isfinite(t.duration_ns) & (t.duration_ns > 0), t.duration_ns, 0.0)))
    if total_ns > MAX_RANK_NS:
        out.append(f"duration_ns: ops sum to {total_ns:.3g} ns, more than {MAX_RANK_NS:.3g} ns per rank "
                   f"(int64 picoseconds over a step; docs/trace-format.md §Bounds)")
    comp = t.kind == KIND_COMPUTE
    rows(comp & (t.coll_kind != COLL_NONE), "compute op carries a collective kind")
    coll = t.kind == KIND_COLLECTIVE
    rows(coll & ((t.coll_kind < COLL_ALLREDUCE) | (t.coll_kind > COLL_BROADCAST)),
         "collective needs coll_kind 1..5 (allreduce, allgather, reduce_scatter, alltoall, broadcast)")
    p2p = (t.kind == KIND_SEND) | (t.kind == KIND_RECV)
    rows(p2p & (t.coll_kind != COLL_SENDRECV), "send/recv needs coll_kind 6 (sendrecv)")
    rows((coll | p2p) & (t.coll_bytes < 0), "coll_bytes must be >= 0")
    rows((coll | p2p) & (t.coll_bytes > MAX_OP_BYTES), f"coll_bytes must be <= {MAX_OP_BYTES} (16 TiB; "
                                                       f"docs/trace-format.md §Bounds)")
    moved = t.coll_bytes[(coll | p2p) & (t.coll_bytes > 0)]
    total_B = float(np.sum(np.minimum(moved, MAX_OP_BYTES).astype(np.float64)))
    if total_B > MAX_RANK_BYTES:
        out.append(f"coll_bytes: collectives and messages sum to {total_B:.3g} B, more than {MAX_RANK_BYTES} B "
                   f"per rank (docs/trace-format.md §Bounds)")
    # dependencies
    ptr, idx = t.dep_ptr, t.dep_idx
    if len(ptr) != n + 1 or (n + 1 and ptr[0] != 0) or np.any(np.diff(ptr) < 0) or ptr[-1] != len(idx):
        out.append(f"dep_ptr is not a valid CSR pointer ({len(ptr)} entries for {n} ops, "
                   f"last {int(ptr[-1]) if len(ptr) else None}, dep_idx has {len(idx)})")
        return out
    owner = np.repeat(np.arange(n), np.diff(ptr))
    dangling = (idx < 0) | (idx >= n)
    if np.any(dangling):
        bad = np.nonzero(dangling)[0][:5]
        out.append("dangling dependencies: " + ", ".join(
            f"op {int(owner[j])} ({t.name[owner[j]]}) depends on op {int(idx[j])}, which does not exist" for j in bad)
            + (f" and {int(dangling.sum()) - 5} more" if dangling.sum() > 5 else ""))
        return out
    if np.any(idx >= owner):
        cyc = _find_cycle(n, ptr, idx)
        if cyc:
            out.append("cyclic dependencies: " + " -> ".join(f"op {i} ({t.name[i]})" for i in cyc))
    return out


def _find_cycle(n, ptr, idx) -> list[int]:
    """Return one dependency cycle (as op indices) or [] (iterative DFS)."""
    state = np.zeros(n, np.int8)  # 0 new, 1 on stack, 2 done
    for s in range(n):
        if state[s]:
            continue
        stack = [(s, int(ptr[s]))]
        path = [s]
        state[s] = 1
        while stack:
            v, k = stack[-1]
            if k < ptr[v + 1]:
                stack[-1] = (v, k + 1)
                w = int(idx[k])
                if state[w] == 1:
                    return path[path.index(w):] + [w]
                if state[w] == 0:
                    state[w] = 1
                    stack.append((w, int(ptr[w])))
                    path.append(w)
            else:
                state[v] = 2
                stack.pop()
                path.pop()
    return []


# ---------------------------------------------------------------- summaries (fabric-trace info)

def summary(trace: Trace) -> dict:
    """The numbers `fabric-trace info` prints (and writes as JSON): per-rank lists, each figure computed once per
    distinct table and given to every rank that holds it (a 262,144-rank capture is one table per replica, and
    a pass per rank and op in Python took 9 min and 5.5 GB there)."""
    tables, table_of_rank = _summary_tables(trace)
    per_table_ops = np.array([len(t) for t in tables], np.int64)
    by_kind = {name: np.array([np.count_nonzero(t.kind == k) for t in tables], np.int64)
               for k, name in enumerate(KIND_NAMES)}
    coll: dict[tuple[str, int], np.ndarray] = {}
    for j, t in enumerate(tables):
        sel = (t.kind == KIND_COLLECTIVE) | (t.kind == KIND_SEND)
        pairs, counts = np.unique(np.stack([t.coll_kind[sel].astype(np.int64), t.coll_bytes[sel]]), axis=1,
                                  return_counts=True)
        for (kind, nbytes), c in zip(pairs.T.tolist(), counts.tolist()):
            coll.setdefault((COLL_NAMES[kind], nbytes), np.zeros(len(tables), np.int64))[j] = c
    distinct = Trace(meta=trace.meta, n_ranks=len(tables), groups=[], ops=tables)
    compute_us = np.array([round(x / 1e3, 3) for x in distinct.compute_ns_per_rank()])

    def per_rank(a: np.ndarray) -> list:
        return a[table_of_rank].tolist()

    return dict(
        schema_version=int(trace.meta.get("schema_version", SCHEMA_VERSION)),
        model=trace.meta.get("model"),
        plan=trace.meta.get("plan"),
        batch=trace.meta.get("batch"),
        context=trace.meta.get("context"),
        chip=trace.meta.get("chip"),
        ranks=trace.n_ranks,
        groups=len(trace.groups),
        ops_per_rank=per_rank(per_table_ops),
        ops_by_kind={name: per_rank(a) for name, a in by_kind.items()},
        collectives=[dict(kind=k, bytes=b, count_per_rank=per_rank(c)) for (k, b), c in sorted(coll.items())],
        compute_us_per_rank=per_rank(compute_us),
    )


def _summary_tables(trace: Trace) -> tuple[list[OpTable], np.ndarray]:
    """The distinct tables as summary() sees them, and each rank's index into them. A summary reads the kind,
    stream, coll_kind, coll_bytes and duration_ns columns only, so ranks whose tables share those arrays (the
    replicas of a capture differ in group and peer; read() shares equal columns) are one table here."""
    index: dict[tuple, int] = {}
    tables: list[OpTable] = []
    table_of_rank = np.empty(len(trace.ops), np.int64)
    for r, t in enumerate(trace.ops):
        k = index.setdefault((id(t.kind), id(t.stream), id(t.coll_kind), id(t.coll_bytes), id(t.duration_ns)),
                             len(tables))
        if k == len(tables):
            tables.append(t)
        table_of_rank[r] = k
    return tables, table_of_rank


# ---------------------------------------------------------------- shipped trace

DEFAULT_TRACE = "deepseek-r1-decode-tp64.h5"


def default_trace_path() -> Path:
    """The shipped DeepSeek-R1 TP64 decode trace, package data (fabric/data/) so that an installed package has it."""
    from importlib import resources
    p = resources.files("fabric").joinpath("data", DEFAULT_TRACE)
    if not p.is_file():
        raise TraceError(f"the shipped trace {DEFAULT_TRACE} is not installed; regenerate it with "
                         f"`python tools/capture_traces.py`")
    return Path(str(p))
