"""Chakra execution traces: export then import gives the same trace; files other tools write import; bad input is
one line and exit 2."""
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fabric import chakra, trace as T
from fabric.chakra import schema as S
from fabric.cli.trace import main as trace_cli
from fabric.errors import TraceError


def same_trace(a: T.Trace, b: T.Trace) -> None:
    assert (a.n_ranks, a.groups, a.meta) == (b.n_ranks, b.groups, b.meta)
    for r, (x, y) in enumerate(zip(a.ops, b.ops)):
        for c in T.COLUMNS:
            assert np.array_equal(getattr(x, c), getattr(y, c)), (r, c)


def mixed_trace() -> T.Trace:
    """4 ranks, three groups, every op kind: compute on two streams, allreduce, allgather, reduce_scatter,
    alltoall, broadcast, and a send/recv ring."""
    groups = [[0, 1, 2, 3], [0, 1], [2, 3]]
    tables = []
    for r in range(4):
        pair = 1 if r < 2 else 2
        rows = [dict(name="gemm", duration_ns=1234.5, flops=3.3e9, bytes=7.5e6, layer=0, module="m.0"),
                dict(name="norm", stream=1, duration_ns=0.25, flops=1.0, bytes=2.0, layer=0),
                dict(name="ar", kind=T.KIND_COLLECTIVE, coll_kind=T.COLL_ALLREDUCE, coll_bytes=14336, group=0),
                dict(name="ag", kind=T.KIND_COLLECTIVE, coll_kind=T.COLL_ALLGATHER, coll_bytes=4040, group=pair),
                dict(name="rs", kind=T.KIND_COLLECTIVE, coll_kind=T.COLL_REDUCE_SCATTER, coll_bytes=3, group=0),
                dict(name="a2a", kind=T.KIND_COLLECTIVE, coll_kind=T.COLL_ALLTOALL, coll_bytes=777, group=0),
                dict(name="bc", kind=T.KIND_COLLECTIVE, coll_kind=T.COLL_BROADCAST, coll_bytes=64, group=pair),
                dict(name="send", kind=T.KIND_SEND, coll_kind=T.COLL_SENDRECV, coll_bytes=4096, peer=(r + 1) % 4),
                dict(name="recv", kind=T.KIND_RECV, coll_kind=T.COLL_SENDRECV, coll_bytes=4096, peer=(r - 1) % 4)]
        deps = [[], [], [0, 1], [2], [3], [4], [5], [6], [6]]
        tables.append(T.OpTable.from_rows(rows, deps))
    meta = dict(schema_version=1, model="mixed", model_config={}, plan=dict(tp=4), batch=2, context=5, chip="h200",
                tool="test", tool_version="0")
    return T.Trace(meta=meta, n_ranks=4, groups=groups, ops=tables)


def test_export_import_round_trip_of_the_shipped_trace(tmp_path):
    tr = T.read(T.default_trace_path())
    paths = chakra.export_trace(tr, tmp_path)
    assert [p.name for p in paths] == [f"fabric.{r}.et" for r in range(tr.n_ranks)]
    same_trace(tr, chakra.import_trace(tmp_path))


def test_export_import_round_trip_of_every_op_kind(tmp_path):
    tr = mixed_trace()
    chakra.export_trace(tr, tmp_path, prefix="mixed")
    back = chakra.import_trace(tmp_path)
    same_trace(tr, back)
    T.write(tmp_path / "back.h5", back)          # and it is a valid trace file
    same_trace(tr, T.read(tmp_path / "back.h5"))


def test_exported_nodes_carry_the_fields_other_tools_read(tmp_path):
    chakra.export_trace(mixed_trace(), tmp_path)
    chunks = list(S.unframe((tmp_path / "fabric.1.et").read_bytes()))
    assert S.GlobalMetadata.FromString(chunks[0]).version == S.CHAKRA_VERSION
    nodes = [S.Node.FromString(c) for c in chunks[1:]]
    attrs = [{a.name: getattr(a, a.WhichOneof("value")) for a in n.attr} for n in nodes]
    assert nodes[0].type == S.COMP_NODE and nodes[0].duration_micros == 1 and attrs[0]["num_ops"] == 3_300_000_000
    assert list(nodes[2].data_deps) == [0, 1]
    ag = attrs[3]     # allgather over 2 ranks: comm_size is the gathered output
    assert nodes[3].type == S.COMM_COLL_NODE and ag["comm_type"] == S.COLLECTIVE_TYPES.index("ALL_GATHER")
    assert ag["comm_size"] == 2 * 4040 and ag["pg_name"] == "1"
    assert nodes[7].type == S.COMM_SEND_NODE and (attrs[7]["comm_src"], attrs[7]["comm_dst"]) == (1, 2)
    assert nodes[8].type == S.COMM_RECV_NODE and (attrs[8]["comm_src"], attrs[8]["comm_dst"]) == (0, 1)


def _write_foreign(d, n_ranks=8, reorder=True):
    """What ASTRA-sim's own generators write: no fabric attributes, sizes as comm_size, nodes in any order."""
    for r in range(n_ranks):
        gemm = S.Node(id=1, name="gemm", type=S.COMP_NODE, duration_micros=10)
        ar = S.Node(id=2, name="allreduce", type=S.COMM_COLL_NODE, data_deps=[1])
        ar.attr.extend([S.AttributeProto(name="comm_type", int64_val=0),
                        S.AttributeProto(name="comm_size", int64_val=1 << 20)])
        ag = S.Node(id=3, name="allgather", type=S.COMM_COLL_NODE, ctrl_deps=[2])
        ag.attr.extend([S.AttributeProto(name="comm_type", int64_val=S.COLLECTIVE_TYPES.index("ALL_GATHER")),
                        S.AttributeProto(name="comm_size", int64_val=n_ranks * 4096)])
        meta = S.GlobalMetadata(version="0.0.4")
        nodes = (ag, ar, gemm) if reorder else (gemm, ar, ag)
        (d / f"astra.{r}.et").write_bytes(b"".join(S.framed(m) for m in (meta, *nodes)))


def test_import_of_a_foreign_trace(tmp_path):
    _write_foreign(tmp_path)
    tr = chakra.import_trace(tmp_path)
    assert tr.n_ranks == 8 and tr.groups == [list(range(8))]
    t = tr.ops[0]
    assert list(t.name) == ["gemm", "allreduce", "allgather"]     # reordered after their dependencies
    assert t.duration_ns[0] == 10_000.0
    assert list(t.coll_bytes[1:]) == [1 << 20, 4096]            # allgather: per-rank contribution
    assert [list(t.deps(i)) for i in range(3)] == [[], [0], [1]]


def test_cli_round_trip_and_replay(tmp_path):
    (tmp_path / "in").mkdir()
    _write_foreign(tmp_path / "in")
    r = CliRunner().invoke(trace_cli, ["import-chakra", str(tmp_path / "in"), "-o", str(tmp_path / "t.h5")])
    assert r.exit_code == 0, r.output
    assert "8 ranks, 24 ops" in r.output
    r = CliRunner().invoke(trace_cli, ["export-chakra", str(tmp_path / "t.h5"), "-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    same_trace(T.read(tmp_path / "t.h5"), chakra.import_trace(tmp_path / "out"))
    from fabric.config import load_config
    from fabric.replay import replay
    res = replay(str(tmp_path / "t.h5"), load_config("dgx-h100"), engine="analytic", preset="dgx-h100")
    assert res["compute_us"] == pytest.approx(10.0) and res["tpot_us"] > res["compute_us"]


@pytest.mark.parametrize("case, message", [
    ("missing_dir", "not a directory"),
    ("empty_dir", "no Chakra files"),
    ("gap", "have no .et file"),
    ("garbage", "not a readable Chakra execution trace"),
    ("truncated", "not a readable Chakra execution trace"),
    ("reduce", "is a REDUCE collective"),
    ("dangling", "which is not in the file"),
    ("cycle", "form a cycle"),
])
def test_bad_chakra_input_is_one_line(tmp_path, case, message):
    d = tmp_path / "in"
    d.mkdir()
    meta = S.framed(S.GlobalMetadata(version="0.0.4"))
    if case == "gap":
        for r in (0, 2):
            (d / f"x.{r}.et").write_bytes(meta)
    elif case == "garbage":
        (d / "x.0.et").write_bytes(b"\xff" * 40)
    elif case == "truncated":
        (d / "x.0.et").write_bytes(meta + S.framed(S.Node(id=1, name="gemm"))[:-2])
    elif case in ("reduce", "dangling", "cycle"):
        a = S.Node(id=1, name="a", type=S.COMM_COLL_NODE if case == "reduce" else S.COMP_NODE,
                   data_deps=[9] if case == "dangling" else [2] if case == "cycle" else [])
        a.attr.append(S.AttributeProto(name="comm_type", int64_val=S.COLLECTIVE_TYPES.index("REDUCE")))
        b = S.Node(id=2, name="b", type=S.COMP_NODE, data_deps=[1])
        (d / "x.0.et").write_bytes(meta + S.framed(a) + S.framed(b))
    src = tmp_path / "nope" if case == "missing_dir" else d
    with pytest.raises(TraceError, match=message):
        chakra.import_trace(src)
    r = CliRunner().invoke(trace_cli, ["import-chakra", str(src), "-o", str(tmp_path / "t.h5")])
    assert r.exit_code == 2 and message in r.output and r.output.count("\n") == 1


def test_metadata_nodes_are_dropped_and_their_dependencies_kept(tmp_path):
    """A metadata node between two ops (as Chakra's PyTorch converter writes process-group records) is no op: the
    op after it waits for the op before it."""
    meta = S.framed(S.GlobalMetadata(version="0.0.4"))
    a = S.Node(id=1, name="a", type=S.COMP_NODE, duration_micros=3)
    m = S.Node(id=2, name="pg", type=S.METADATA_NODE, data_deps=[1])
    m2 = S.Node(id=3, name="pg2", type=S.METADATA_NODE, ctrl_deps=[2])
    b = S.Node(id=4, name="b", type=S.COMP_NODE, duration_micros=5, data_deps=[3])
    (tmp_path / "x.0.et").write_bytes(meta + b"".join(S.framed(n) for n in (b, m2, a, m)))
    t = chakra.import_trace(tmp_path).ops[0]
    assert list(t.name) == ["a", "b"] and [list(t.deps(i)) for i in range(2)] == [[], [0]]


DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def pytorch_dir(tmp_path_factory):
    """Chakra's own PyTorch-derived test trace (one rank), unpacked from the archive Chakra ships it in."""
    d = tmp_path_factory.mktemp("pytorch")
    with tarfile.open(DATA / "chakra_pytorch" / "feeder_tests_trace.tar.gz") as tar:
        tar.extractall(d, filter="data")
    return d / "tests" / "data"


def test_a_trace_recorded_from_pytorch_imports_as_chakras_feeder_reads_it(pytorch_dir):
    tr = chakra.import_trace(pytorch_dir)
    c = tr.meta["chakra_import"]
    # its control edges are PyTorch's call tree: parents not in the file (node 216 -> 3), itself, or both ways
    assert (c["ctrl_deps_absent"], c["ctrl_deps_cyclic"]) == (1660, 554)
    assert (c["cpu_ops"], c["host_us"], c["cpu_ops_as"]) == (2448, 52252, "host")
    t = tr.ops[0]
    host = t.stream >= T.HOST_STREAM
    assert len(t) == 3664 and host.sum() == 2448          # c10d::broadcast_ (a CPU call) is host time too
    assert "c10d::broadcast_(0)" in set(t.name[host]) and not np.any(t.kind[host] != T.KIND_COMPUTE)
    assert set(t.stream[~host]) == {0, 1}                  # its two CUDA streams (tid 7 and 14)
    colls = T.summary(tr)["collectives"]
    assert [(x["kind"], x["bytes"]) for x in colls] == [
        ("allreduce", 8196000), ("allreduce", 9724160), ("allreduce", 26255360), ("allreduce", 26550272),
        ("allreduce", 31502336), ("broadcast", 424), ("broadcast", 212480)]
    gpu_us = float(t.duration_ns[(t.kind == T.KIND_COMPUTE) & ~host].sum()) / 1e3
    assert tr.compute_ns_per_rank()[0] / 1e3 == pytest.approx(gpu_us) and gpu_us == pytest.approx(292828.0)
    dropped = chakra.import_trace(pytorch_dir, cpu_ops="drop")
    assert len(dropped.ops[0]) == 3664 - 2448 and not np.any(dropped.ops[0].stream >= T.HOST_STREAM)
    assert dropped.meta["chakra_import"]["cpu_ops_as"] == "drop"


def test_an_imported_pytorch_trace_exports_and_imports_back_the_same(pytorch_dir, tmp_path):
    """Host ops go out as CPU operators (is_cpu_op) and come back as the same host ops, exactly."""
    tr = chakra.import_trace(pytorch_dir)
    chakra.export_trace(tr, tmp_path)
    chunks = list(S.unframe((tmp_path / "fabric.0.et").read_bytes()))
    host = tr.ops[0].stream >= T.HOST_STREAM
    assert [chakra._attrs(S.Node.FromString(c))["is_cpu_op"] for c in chunks[1:]] == list(host)
    same_trace(tr, chakra.import_trace(tmp_path))


def test_replay_reports_host_time_apart_from_compute(pytorch_dir, tmp_path):
    from fabric.config import load_config
    from fabric.replay import replay
    T.write(tmp_path / "t.h5", chakra.import_trace(pytorch_dir))
    res = replay(str(tmp_path / "t.h5"), load_config("dgx-h100"), engine="analytic", preset="dgx-h100")
    assert res["host_us"] > 0 and "collectives_only" not in res
    assert res["compute_us"] + res["host_us"] + res["exposed_comm_us"] == pytest.approx(res["step_time_us"])
    assert res["compute_busy_us_max_rank"] == pytest.approx(292828.0)   # the GPU kernels alone
    assert all(g["layer"] >= -1 for g in res["layers"])


def test_astra_sim_microbenchmarks_import_and_replay_as_one_collective(tmp_path):
    ar = chakra.import_trace(DATA / "chakra_astra_sim" / "all_reduce_8npus_1MB")
    assert ar.n_ranks == 8 and ar.groups == [list(range(8))]
    assert [(len(t), int(t.coll_kind[0]), int(t.coll_bytes[0])) for t in ar.ops] == [(1, T.COLL_ALLREDUCE, 1 << 20)] * 8
    a2a = chakra.import_trace(DATA / "chakra_astra_sim" / "all_to_all_4npus_1MB")
    assert [int(t.coll_bytes[0]) for t in a2a.ops] == [(1 << 20) // 4] * 4    # comm_size is the whole buffer
    r = CliRunner().invoke(trace_cli, ["import-chakra", str(DATA / "chakra_astra_sim" / "all_reduce_8npus_1MB"),
                                       "-o", str(tmp_path / "ar.h5")])
    assert r.exit_code == 0 and "8 ranks, 8 ops" in r.output and "dropped" not in r.output, r.output
    from fabric.cli.replay import main as replay_cli
    for extra in ([], ["--quiet"]):
        r = CliRunner().invoke(replay_cli, [str(tmp_path / "ar.h5"), "--preset", "dgx-h100", "--engine", "analytic",
                                            *extra])
        assert r.exit_code == 0, r.output
        assert not re.search(r"TPOT +[0-9]", r.output) and "tokens/s" not in r.output
        assert "collectives only" in r.output
        assert re.search(r"time +[0-9.]+ us", r.output)


def test_collectives_without_a_type_go_by_their_name_or_are_skipped(tmp_path):
    """Chakra's PyTorch converter names the type by the kernel's name; a node that names none, or no size, is no
    op (what waited for it waits for what it waited for)."""
    def coll(i, name, deps, size=True):
        n = S.Node(id=i, name=name, type=S.COMM_COLL_NODE, data_deps=deps)
        if size:
            n.attr.append(S.AttributeProto(name="comm_size", int64_val=4096))
        return n
    nodes = [S.Node(id=1, name="gemm", type=S.COMP_NODE, duration_micros=2),
             coll(2, "ncclKernel_AllGather_RING_LL", [1]), coll(3, "ncclDevKernel_SendRecv", [2]),
             coll(4, "mystery_kernel", [3]), coll(5, "all_reduce", [4], size=False),
             S.Node(id=6, name="tail", type=S.COMP_NODE, duration_micros=1, data_deps=[5])]
    (tmp_path / "x.0.et").write_bytes(S.framed(S.GlobalMetadata(version="0.0.4"))
                                      + b"".join(S.framed(n) for n in nodes))
    tr = chakra.import_trace(tmp_path)
    t = tr.ops[0]
    assert list(t.name) == ["gemm", "ncclKernel_AllGather_RING_LL", "ncclDevKernel_SendRecv", "tail"]
    assert list(t.coll_kind[1:3]) == [T.COLL_ALLGATHER, T.COLL_ALLTOALL]
    assert list(t.deps(3)) == [2]
    c = tr.meta["chakra_import"]
    assert (c["comm_by_name"], c["comm_skipped"]) == (2, 2)


def test_an_unknown_cpu_ops_choice_is_refused(tmp_path):
    with pytest.raises(TraceError, match="cpu_ops='keep': choose one of host, drop"):
        chakra.import_trace(tmp_path, cpu_ops="keep")


def test_a_bad_cpu_ops_option_is_one_line(tmp_path):
    r = CliRunner().invoke(trace_cli, ["import-chakra", str(DATA / "chakra_astra_sim" / "all_reduce_8npus_1MB"),
                                       "-o", str(tmp_path / "t.h5"), "--cpu-ops", "keep"])
    assert r.exit_code == 2 and "'keep' is not one of 'host', 'drop'" in r.output and r.output.count("\n") == 1
