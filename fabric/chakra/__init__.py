"""Chakra execution traces (the format ASTRA-sim and its users exchange) to and from fabric traces.

`export_trace(trace, out_dir)` writes one `<prefix>.<rank>.et` file per rank; `import_trace(in_dir)` reads such a
directory back into a `fabric.trace.Trace`. docs/trace-format.md §Chakra says how every column maps. Export then
import gives the same ops, sizes and dependencies: the Chakra fields carry what other tools read (`duration_micros`,
`num_ops`, `tensor_size`, `comm_type`, `comm_size`, `comm_src`, `comm_dst`, `pg_name`), and `fabric.*` attributes
carry the exact values that Chakra's fields would round (durations in ns, flops as a double, the group id).
"""
from __future__ import annotations

import heapq
import json
import re
from pathlib import Path

import numpy as np

from fabric import __version__, trace as T
from fabric.errors import TraceError

try:
    from fabric.chakra import schema as S
except ImportError as exc:  # protobuf missing: one line that says how to get it
    raise TraceError("Chakra import/export needs the protobuf package: pip install 'scaleup-fabric[chakra]' "
                     f"(or pip install protobuf) ({exc})") from None

# fabric collective kind -> Chakra CollectiveCommType, and the factor from coll_bytes to comm_size (the larger of
# the two buffers, the size ASTRA-sim's collective model takes: allgather's output, reduce_scatter's input)
_TO_CHAKRA = {T.COLL_ALLREDUCE: ("ALL_REDUCE", False), T.COLL_ALLGATHER: ("ALL_GATHER", True),
              T.COLL_REDUCE_SCATTER: ("REDUCE_SCATTER", True), T.COLL_ALLTOALL: ("ALL_TO_ALL", True),
              T.COLL_BROADCAST: ("BROADCAST", False)}
_FROM_CHAKRA = {S.COLLECTIVE_TYPES.index(name): (kind, scaled) for kind, (name, scaled) in _TO_CHAKRA.items()}
_FILE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et$")
U64_MAX = (1 << 64) - 1


def _attr(name, **value):
    return S.AttributeProto(name=name, **value)


def _metadata(trace: T.Trace) -> bytes:
    return S.framed(S.GlobalMetadata(version=S.CHAKRA_VERSION, attr=[
        _attr("fabric.meta_json", string_val=json.dumps(trace.meta, sort_keys=True)),
        _attr("fabric.groups", string_val=json.dumps(trace.groups)),
        _attr("fabric.n_ranks", int64_val=trace.n_ranks)]))


def _node(t: T.OpTable, i: int, rank: int, sizes: np.ndarray) -> bytes:
    kind = int(t.kind[i])
    n = S.Node(id=i, name=str(t.name[i]), data_deps=[int(d) for d in t.deps(i)],
               duration_micros=int(round(float(t.duration_ns[i]) / 1e3)))
    attrs = [_attr("is_cpu_op", bool_val=bool(t.stream[i] >= T.HOST_STREAM)),     # host ops: CPU operators
             _attr("fabric.stream", int32_val=int(t.stream[i])),
             _attr("fabric.layer", int32_val=int(t.layer[i])), _attr("fabric.module", string_val=str(t.module[i]))]
    if kind == T.KIND_COMPUTE:
        n.type = S.COMP_NODE
        attrs += [_attr("num_ops", uint64_val=min(int(t.flops[i]), U64_MAX)),
                  _attr("tensor_size", uint64_val=min(int(t.bytes[i]), U64_MAX)),
                  _attr("fabric.duration_ns", double_val=float(t.duration_ns[i])),
                  _attr("fabric.flops", double_val=float(t.flops[i])),
                  _attr("fabric.bytes", double_val=float(t.bytes[i]))]
    elif kind == T.KIND_COLLECTIVE:
        coll = int(t.coll_kind[i])
        name, scaled = _TO_CHAKRA[coll]
        group = int(t.group[i])
        size = int(t.coll_bytes[i]) * (int(sizes[group]) if scaled else 1)
        n.type = S.COMM_COLL_NODE
        attrs += [_attr("comm_type", int64_val=S.COLLECTIVE_TYPES.index(name)), _attr("comm_size", int64_val=size),
                  _attr("pg_name", string_val=str(group)), _attr("fabric.group", int32_val=group),
                  _attr("fabric.coll_bytes", int64_val=int(t.coll_bytes[i]))]
    else:
        send = kind == T.KIND_SEND
        peer = int(t.peer[i])
        n.type = S.COMM_SEND_NODE if send else S.COMM_RECV_NODE
        src, dst = (rank, peer) if send else (peer, rank)
        attrs += [_attr("comm_src", int64_val=src), _attr("comm_dst", int64_val=dst),
                  _attr("comm_size", int64_val=int(t.coll_bytes[i])), _attr("comm_tag", int64_val=0)]
    n.attr.extend(attrs)
    return S.framed(n)


def export_trace(trace: T.Trace, out_dir, prefix: str = "fabric") -> list[Path]:
    """Write one Chakra ET file per rank into out_dir (created if missing); returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sizes = np.array([len(g) for g in trace.groups], np.int64)
    head = _metadata(trace)
    paths, done = [], {}
    for rank, t in enumerate(trace.ops):
        # ranks sharing one table (a TP trace) differ only in the ranks named by their send/recv nodes
        body = done.get(id(t)) if not np.any(t.kind >= T.KIND_SEND) else None
        if body is None:
            body = b"".join(_node(t, i, rank, sizes) for i in range(len(t)))
            done[id(t)] = body
        p = out / f"{prefix}.{rank}.et"
        p.write_bytes(head + body)
        paths.append(p)
    return paths


def _rank_files(in_dir) -> list[Path]:
    d = Path(in_dir)
    if not d.is_dir():
        raise TraceError(f"{d}: not a directory; give the directory that holds the <prefix>.<rank>.et files")
    found = {}
    for p in d.iterdir():
        m = _FILE.match(p.name)
        if m:
            found.setdefault(m["prefix"], {})[int(m["rank"])] = p
    if not found:
        raise TraceError(f"{d}: no Chakra files named <prefix>.<rank>.et")
    if len(found) > 1:
        raise TraceError(f"{d}: files of several traces ({', '.join(sorted(found))}); keep one prefix per directory")
    (prefix, ranks), = found.items()
    missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
    if missing:
        raise TraceError(f"{d}: ranks {missing[:8]} of {prefix} have no .et file; ranks must be 0..N-1")
    return [ranks[r] for r in range(len(ranks))]


def _attrs(msg) -> dict:
    out = {}
    for a in msg.attr:
        which = a.WhichOneof("value")
        v = getattr(a, which) if which else None
        out[a.name] = list(v.values) if which == "int64_list" else v
    return out


def _read_rank(path: Path, data: bytes) -> tuple[dict, list]:
    try:
        chunks = list(S.unframe(data))
        if not chunks:
            raise ValueError("the file is empty")
        meta = _attrs(S.GlobalMetadata.FromString(chunks[0]))
        nodes = [S.Node.FromString(c) for c in chunks[1:]]
    except Exception as exc:  # DecodeError, ValueError: a file that is not a Chakra ET file
        raise TraceError(f"{path}: not a readable Chakra execution trace ({exc})") from None
    return meta, nodes


# Chakra's PyTorch converter names a collective by its kernel or call (pytorch_converter.get_collective_comm_type):
# the first of these found in the name, lowered and without "_" or "-", gives its type
_BY_NAME = (("allreduce", "ALL_REDUCE"), ("alltoall", "ALL_TO_ALL"), ("allgather", "ALL_GATHER"),
            ("reducescatter", "REDUCE_SCATTER"), ("broadcast", "BROADCAST"))
CPU_OPS = ("host", "drop")      # import_trace's cpu_ops: what becomes of a PyTorch trace's CPU operators
# what import_trace counts (meta["chakra_import"], with host_us: the CPU operators' time)
IMPORT_COUNTS = ("ctrl_deps_absent", "ctrl_deps_cyclic", "comm_by_name", "comm_skipped", "cpu_ops")


def _comm_type_by_name(name: str) -> int | None:
    low = name.replace("_", "").replace("-", "").lower()
    for key, ctype in _BY_NAME:
        if key in low:
            return S.COLLECTIVE_TYPES.index(ctype)
    return S.COLLECTIVE_TYPES.index("ALL_TO_ALL") if "ncclDevKernel_SendRecv" in name else None


def _classify(nodes, cpu_ops: str, counts: dict) -> list:
    """Per node: "op" (an accelerator op), "host" (a CPU operator kept as host time) or None (no op: metadata, a
    dropped CPU operator, a collective without a type fabric can tell). A CPU operator that is a communication node
    is the host's call (c10d::broadcast_); the collective itself is its GPU kernel, a node of its own."""
    out = []
    for n in nodes:
        a = _attrs(n)
        if n.type == S.METADATA_NODE:
            out.append(None)
        elif a.get("is_cpu_op"):
            counts["cpu_ops"] += 1
            counts["host_us"] += n.duration_micros
            out.append("host" if cpu_ops == "host" else None)
        elif n.type == S.COMM_COLL_NODE and "comm_type" not in a:
            ctype = _comm_type_by_name(n.name) if "comm_size" in a else None
            counts["comm_by_name" if ctype is not None else "comm_skipped"] += 1
            if ctype is not None:
                n.attr.append(S.AttributeProto(name="comm_type", int64_val=ctype))
            out.append("op" if ctype is not None else None)
        else:
            out.append("op")
    return out


def _ordered(nodes, kinds, path, counts: dict) -> tuple[list, dict]:
    """Nodes in an order where each comes after its dependencies (file order where it already is): ops of one
    stream run in table order, so a node listed before one it waits for would wait for ever. Nodes of no op (kinds
    None) are dropped: what waited for one waits for what it waited for. Control dependencies are kept where they
    can be, and dropped and counted where not (Chakra's feeder reads data dependencies only; PyTorch's converter
    writes a node's parent operator in the call tree there, which may be left out of the file, be the node itself
    or wait for it): on nodes not in the file or the node itself, and, when every node left waits, those of the
    first node in the file whose data dependencies are met. Returns the nodes kept with their kinds and, by node
    id, the ids of the kept nodes each depends on."""
    pos = {}
    for k, n in enumerate(nodes):
        if n.id in pos:
            raise TraceError(f"{path}: node id {n.id} appears twice")
        pos[n.id] = k
    dangling = [(n.id, d) for n in nodes for d in n.data_deps if d not in pos]
    if dangling:
        raise TraceError(f"{path}: node {dangling[0][0]} depends on node {dangling[0][1]}, which is not in the file")
    deps, n_data = [], []
    for n in nodes:
        ctrl = [d for d in n.ctrl_deps if d in pos and d != n.id]
        counts["ctrl_deps_absent"] += len(n.ctrl_deps) - len(ctrl)
        deps.append([pos[d] for d in (*n.data_deps, *ctrl)])
        n_data.append(len(n.data_deps))
    succ = [[] for _ in nodes]
    left = [len(d) for d in deps]
    left_data = list(n_data)            # a node whose data dependencies are met waits on control edges only
    for k, ds in enumerate(deps):
        for j, d in enumerate(ds):
            succ[d].append((k, j < n_data[k]))
    ready = [k for k in range(len(nodes)) if not left[k]]
    ctrl_only = [k for k in range(len(nodes)) if left[k] and not left_data[k]]
    heapq.heapify(ready)
    heapq.heapify(ctrl_only)
    order, at = [], [-1] * len(nodes)
    while len(order) < len(nodes):
        if not ready:                   # stuck: the control edges close a cycle (PyTorch's converter writes some
            while ctrl_only and (at[ctrl_only[0]] >= 0 or left[ctrl_only[0]] <= 0):   # that point both ways)
                heapq.heappop(ctrl_only)
            if not ctrl_only:
                raise TraceError(f"{path}: the dependencies form a cycle")
            k = heapq.heappop(ctrl_only)
            counts["ctrl_deps_cyclic"] += left[k]   # the feeder would not wait for them either
            left[k] = 0
            heapq.heappush(ready, k)
        k = heapq.heappop(ready)
        at[k] = len(order)
        order.append(k)
        for s, data in succ[k]:
            if at[s] >= 0 or left[s] <= 0:
                continue
            left[s] -= 1
            left_data[s] -= data
            if not left[s]:
                heapq.heappush(ready, s)
            elif data and not left_data[s]:
                heapq.heappush(ctrl_only, s)
    deps = [[d for d in ds if at[d] < at[k]] for k, ds in enumerate(deps)]   # without the edges dropped above
    through = {}                        # a node of no op -> the kept nodes it stands for (its dependencies)
    kept, kept_deps = [], {}
    for k in order:                     # dependencies first, so `through` is complete when it is read
        ids = set()
        for d in deps[k]:
            ids.update(through[d] if kinds[d] is None else (nodes[d].id,))
        if kinds[k] is None:
            through[k] = ids
        else:
            kept.append((nodes[k], kinds[k]))
            kept_deps[nodes[k].id] = ids
    return kept, kept_deps


def _streams(kept) -> dict:
    """(kind, tid) -> stream for nodes without fabric.stream that name their thread (`tid`: a PyTorch trace's CUDA
    stream or CPU thread): accelerator streams from 0 and host threads from HOST_STREAM, each in the order of ids."""
    tids = {}
    for n, kind, a in kept:
        if "fabric.stream" not in a and "tid" in a:
            tids.setdefault(kind, set()).add(int(a["tid"]))
    base = {"op": 0, "host": T.HOST_STREAM}
    return {(kind, t): base[kind] + i for kind, ts in tids.items() for i, t in enumerate(sorted(ts))}


def _row(n, a: dict, groups: dict, path, stream: int, host: bool) -> dict:
    row = dict(name=n.name, stream=int(a.get("fabric.stream", stream)), layer=int(a.get("fabric.layer", -1)),
               module=str(a.get("fabric.module", "host" if host else "")))
    if host:                            # host time: the CPU is busy, no accelerator flops or bytes
        row.update(kind=T.KIND_COMPUTE, duration_ns=float(a.get("fabric.duration_ns", n.duration_micros * 1e3)))
    elif n.type in (S.COMP_NODE, S.MEM_LOAD_NODE, S.MEM_STORE_NODE):
        row.update(kind=T.KIND_COMPUTE, duration_ns=float(a.get("fabric.duration_ns", n.duration_micros * 1e3)),
                   flops=float(a.get("fabric.flops", a.get("num_ops", 0))),
                   bytes=float(a.get("fabric.bytes", a.get("tensor_size", 0))))
    elif n.type == S.COMM_COLL_NODE:
        ctype = int(a.get("comm_type", -1))
        if ctype not in _FROM_CHAKRA:
            name = S.COLLECTIVE_TYPES[ctype] if 0 <= ctype < len(S.COLLECTIVE_TYPES) else ctype
            raise TraceError(f"{path}: node {n.id} ({n.name}) is a {name} collective; fabric replays "
                             f"{', '.join(v[0] for v in _TO_CHAKRA.values())}")
        kind, scaled = _FROM_CHAKRA[ctype]
        pg = str(a.get("pg_name", ""))
        row.update(kind=T.KIND_COLLECTIVE, coll_kind=kind, group=groups.setdefault(pg, len(groups)),
                   coll_bytes=int(a["fabric.coll_bytes"]) if "fabric.coll_bytes" in a else int(a.get("comm_size", 0)),
                   _scaled=scaled and "fabric.coll_bytes" not in a)
    elif n.type in (S.COMM_SEND_NODE, S.COMM_RECV_NODE):
        send = n.type == S.COMM_SEND_NODE
        row.update(kind=T.KIND_SEND if send else T.KIND_RECV, coll_kind=T.COLL_SENDRECV,
                   coll_bytes=int(a.get("comm_size", 0)), peer=int(a.get("comm_dst" if send else "comm_src", -1)))
    else:
        name = S.NODE_TYPES[n.type] if 0 <= n.type < len(S.NODE_TYPES) else n.type
        raise TraceError(f"{path}: node {n.id} ({n.name}) is a {name}; fabric replays compute, collective, "
                         "send and receive nodes")
    return row


def import_trace(in_dir, cpu_ops: str = "host") -> T.Trace:
    """Read a directory of Chakra ET files (one per rank) into a Trace; TraceError naming the file and node for
    anything fabric cannot replay. Traces that fabric wrote come back exactly; others get their communicator groups
    from `pg_name` (each name one group of the ranks that use it; none: all ranks) and default metadata.

    What a trace recorded from PyTorch holds beyond that is imported as Chakra's own feeder reads it, and counted
    in meta["chakra_import"]: control dependencies on nodes not in the file are dropped; a collective without a
    comm_type gets the type its name gives or is skipped; CPU operators (is_cpu_op) are host time on host streams
    (trace.HOST_STREAM up: they delay the kernels that wait for them but are no accelerator compute), or with
    cpu_ops="drop" are left out, what waited for them waiting for what they waited for."""
    if cpu_ops not in CPU_OPS:
        raise TraceError(f"cpu_ops={cpu_ops!r}: choose one of {', '.join(CPU_OPS)}")
    files = _rank_files(in_dir)
    meta0 = None
    groups_of = {}                      # pg_name -> group id (fabric's own traces: the id itself)
    tables, members, parsed = [], {}, {}
    totals = dict.fromkeys(IMPORT_COUNTS + ("host_us",), 0)
    for rank, path in enumerate(files):
        data = path.read_bytes()
        if data not in parsed:          # the ranks of a TP trace have identical files: parse one
            counts = dict.fromkeys(totals, 0)
            meta, nodes = _read_rank(path, data)
            kept, node_deps = _ordered(nodes, _classify(nodes, cpu_ops, counts), path, counts)
            kept = [(n, kind, _attrs(n)) for n, kind in kept]
            streams = _streams(kept)
            where = {n.id: k for k, (n, _, _) in enumerate(kept)}
            rows = [_row(n, a, groups_of, path, streams.get((kind, int(a.get("tid", -1))),
                                                            T.HOST_STREAM if kind == "host" else 0), kind == "host")
                    for n, kind, a in kept]
            parsed[data] = (meta, rows, [sorted(where[d] for d in node_deps[n.id]) for n, _, _ in kept], counts)
        meta, rows, deps, counts = parsed[data]
        for k, v in counts.items():
            totals[k] += v
        meta0 = meta0 if meta0 is not None else meta
        for r in rows:
            if r["kind"] == T.KIND_COLLECTIVE:
                members.setdefault(r["group"], set()).add(rank)
        tables.append((rows, deps))
    if "fabric.groups" in meta0:
        groups = json.loads(meta0["fabric.groups"])
        gid = {str(g): g for g in range(len(groups))}
        remap = {v: int(gid.get(k, v)) for k, v in groups_of.items()}
    else:
        groups = [sorted(members.get(g, range(len(files)))) for g in range(len(groups_of))]
        remap = {g: g for g in groups_of.values()}
    ops, built = [], {}
    for rows, deps in tables:
        if id(rows) not in built:       # ranks with identical files share one table, as fabric.trace.read gives
            for r in rows:
                if r["kind"] == T.KIND_COLLECTIVE:
                    r["group"] = remap[r["group"]]
                    if r.pop("_scaled"):
                        r["coll_bytes"] //= max(len(groups[r["group"]]), 1)
            built[id(rows)] = T.OpTable.from_rows(rows, deps)
        ops.append(built[id(rows)])
    meta = json.loads(meta0["fabric.meta_json"]) if "fabric.meta_json" in meta0 else dict(
        schema_version=T.SCHEMA_VERSION, model=Path(in_dir).name, model_config={},
        plan=dict(tp=len(files), ep=1, dp=1, n_ranks=len(files)), batch=1, context=0, chip="unknown",
        tool="chakra-import", tool_version=__version__)
    changed = any(totals[k] for k in IMPORT_COUNTS if k != "cpu_ops") or (cpu_ops == "drop" and totals["cpu_ops"])
    if "fabric.meta_json" not in meta0 or changed:   # a trace fabric wrote keeps its meta unless the import changed it
        meta["chakra_import"] = dict(totals, cpu_ops_as=cpu_ops)
    trace = T.Trace(meta=meta, n_ranks=len(files), groups=groups, ops=ops)
    problems = T._check_trace(trace)
    if problems:
        raise TraceError(f"{in_dir}: the imported trace is not valid: {problems[0]}"
                         + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return trace
