"""Trace format v1: round trip, validation (every problem, with its location), refusal of bad files, CLI."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

h5py = pytest.importorskip("h5py")

from click.testing import CliRunner  # noqa: E402

from fabric import trace as T  # noqa: E402
from fabric.errors import TraceError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "traces" / "toy-mla-tp8.h5"


def small_trace(n_ranks=2) -> T.Trace:
    """compute -> allreduce -> compute on stream 0, plus one op on stream 1; rank 0 sends to rank 1."""
    tables = []
    for r in range(n_ranks):
        rows = [dict(name="a", duration_ns=1000.0, flops=2e6, bytes=1e6, layer=0, module="m.a"),
                dict(name="b", kind=T.KIND_COMPUTE, stream=1, duration_ns=500.0, layer=0, module="m.b"),
                dict(name="ar", kind=T.KIND_COLLECTIVE, coll_kind=T.COLL_ALLREDUCE, coll_bytes=14336, group=0),
                dict(name="c", duration_ns=10.0, layer=1, module="m.c")]
        deps = [[], [0], [0], [2, 1]]
        if r == 0:
            rows.append(dict(name="send", kind=T.KIND_SEND, coll_kind=T.COLL_SENDRECV, coll_bytes=64, peer=1))
        else:
            rows.append(dict(name="recv", kind=T.KIND_RECV, coll_kind=T.COLL_SENDRECV, coll_bytes=64, peer=0))
        deps.append([3])
        tables.append(T.OpTable.from_rows(rows, deps))
    meta = dict(schema_version=1, model="unit", model_config={}, plan=dict(tp=n_ranks, ep=1), batch=1, context=8,
                chip="h200", tool="test", tool_version="0")
    return T.Trace(meta=meta, n_ranks=n_ranks, groups=[list(range(n_ranks))], ops=tables)


def test_round_trip(tmp_path):
    tr = small_trace()
    p = tmp_path / "t.h5"
    T.write(p, tr)
    back = T.read(p)
    assert back.n_ranks == 2 and back.groups == [[0, 1]]
    assert back.meta["model"] == "unit" and back.meta["plan"] == {"tp": 2, "ep": 1}
    for a, b in zip(tr.ops, back.ops):
        assert a.same_as(b)
        for c, dt in T.COLUMNS.items():
            assert getattr(b, c).dtype == dt, c
    assert sorted(back.ops[0].deps(3).tolist()) == [1, 2]
    assert T.validate(p) == []


def test_replicated_ranks_share_one_table(tmp_path):
    tr = T.read(TOY)
    assert tr.n_ranks == 8
    assert all(t is tr.ops[0] for t in tr.ops)  # stored once, returned per rank
    with h5py.File(TOY, "r") as f:
        assert list(f["ops/tables"].keys()) == ["0"]
        assert f["ops/table_of_rank"][()].tolist() == [0] * 8


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_equal_rank_tables_are_stored_once_in_first_seen_order(tmp_path_factory, pattern):
    """Rank r gets variant pattern[r]: variants 0 and 3 are equal tables (separate objects), 1 differs from 0 only
    in a string column, 2 only in a duration. The file holds each distinct table once, numbered by first use, and
    every rank reads back its own."""
    def table(v):
        return T.OpTable.from_rows([dict(name="a", duration_ns=2000.0 if v == 2 else 1000.0,
                                         module="m.b" if v == 1 else "m.a")], [[]])
    variants = [table(v) for v in range(4)]
    meta = dict(schema_version=1, model="unit", model_config={}, plan=dict(tp=len(pattern), ep=1), batch=1,
                context=8, chip="h200", tool="test", tool_version="0")
    tr = T.Trace(meta=meta, n_ranks=len(pattern), groups=[list(range(len(pattern)))],
                 ops=[variants[v] for v in pattern])
    p = tmp_path_factory.mktemp("dedupe") / "t.h5"
    T.write(p, tr)
    first: list[int] = []                       # distinct variants in first-use order (3 is 0)
    for v in pattern:
        if (0 if v == 3 else v) not in first:
            first.append(0 if v == 3 else v)
    with h5py.File(p, "r") as f:
        assert len(f["ops/tables"].keys()) == len(first)
        assert f["ops/table_of_rank"][()].tolist() == [first.index(0 if v == 3 else v) for v in pattern]
    back = T.read(p)
    assert all(b.same_as(variants[v]) for b, v in zip(back.ops, pattern))


def test_one_array_in_two_columns_and_a_column_linked_to_another(tmp_path):
    """write() keys what it stores by column and array, so one array serving two columns of different dtypes is
    stored as each; read() checks a dataset under every column name that links it."""
    z = np.zeros(1, np.int64)
    t = T.OpTable.from_rows([dict(name="a", duration_ns=1.0)], [[]])
    shared = T.OpTable(**dict(t.columns(), dep_ptr=t.dep_ptr, dep_idx=t.dep_idx, coll_bytes=z, layer=z))
    tr = small_trace(1)
    p = tmp_path / "t.h5"
    T.write(p, T.Trace(meta=tr.meta, n_ranks=1, groups=[[0]], ops=[shared]))
    back = T.read(p).ops[0]
    assert back.layer.dtype == np.int32 and back.coll_bytes.dtype == np.int64
    q = tmp_path / "u.h5"
    T._write(q, T.Trace(meta=tr.meta, n_ranks=1, groups=[[0]], ops=[t]), sign=False)
    with h5py.File(q, "r+") as f:
        g = f["ops/tables/0"]
        del g["layer"]
        g["layer"] = g["name"]
    assert T.validate(q) == ["ops/tables/0/layer: dtype |S1 is wrong, expected int32"]


def test_default_trace_is_the_one_shipped_package_data():
    import tomllib
    p = T.default_trace_path()
    assert p.is_file() and p.name == "deepseek-r1-decode-tp64.h5"
    assert p.parent == ROOT / "fabric" / "data"
    assert not (ROOT / "traces" / p.name).exists()          # one copy
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "data/*.h5" in pyproject["tool"]["setuptools"]["package-data"]["fabric"]   # a wheel ships it


def test_write_refuses_invalid_trace(tmp_path):
    tr = small_trace()
    tr.ops[1].dep_idx[0] = 99
    with pytest.raises(TraceError, match="refusing to write"):
        T.write(tmp_path / "bad.h5", tr)
    assert not (tmp_path / "bad.h5").exists()


# ---------------------------------------------------------------- validation: every problem, located

def _broken(tmp_path, mutate, trace=None) -> list[str]:
    p = tmp_path / "b.h5"
    T._write(p, trace or small_trace(), check=False)
    with h5py.File(p, "r+") as f:
        mutate(f)
    T._sign(p)
    return T.validate(p)


def test_missing_dataset_and_wrong_dtype_reported_together(tmp_path):
    def mutate(f):
        del f["ops/tables/0/flops"]
        kind = f["ops/tables/0/kind"][()]
        del f["ops/tables/0/kind"]
        f["ops/tables/0/kind"] = kind.astype(np.int32)
    problems = _broken(tmp_path, mutate)
    assert any("ops/tables/0/flops: dataset is missing" in p for p in problems)
    assert any("ops/tables/0/kind: dtype int32 is wrong, expected int8" in p for p in problems)
    with pytest.raises(TraceError) as ei:
        T.read(tmp_path / "b.h5")
    assert "2 problems" in str(ei.value) and "flops" in str(ei.value) and "kind" in str(ei.value)


def test_dangling_dependency(tmp_path):
    tr = small_trace()
    tr.ops[0].dep_idx[0] = 42
    problems = _broken(tmp_path, lambda f: None, tr)
    assert any("rank 0" in p and "depends on op 42, which does not exist" in p for p in problems)


def test_cyclic_dependency(tmp_path):
    tr = small_trace()
    t = tr.ops[1]
    t.dep_ptr = np.array([0, 1, 2, 3, 5, 6])
    t.dep_idx = np.array([3, 0, 0, 2, 1, 3])  # op 0 now depends on op 3: 0 -> 3 -> 2 -> 0
    problems = _broken(tmp_path, lambda f: None, tr)
    assert any(p.startswith("rank 1 cyclic dependencies: op 0 (a)") for p in problems), problems


def test_collective_disagreement_and_unknown_rank(tmp_path):
    tr = small_trace()
    tr.ops[1].coll_bytes[2] = 8192
    tr.groups = [[0, 1, 5]]
    problems = _broken(tmp_path, lambda f: None, tr)
    assert any("group 0: unknown rank(s) [5]" in p for p in problems), problems
    tr.groups = [[0, 1]]
    problems = _broken(tmp_path, lambda f: None, tr)
    assert any("group 0: collective #0 disagrees" in p and "14336 B" in p and "8192 B" in p for p in problems)


def test_collective_order_disagreement(tmp_path):
    tr = small_trace()
    t = tr.ops[1]
    t.coll_kind[2] = T.COLL_ALLGATHER
    problems = _broken(tmp_path, lambda f: None, tr)
    assert any("allreduce of 14336 B" in p and "allgather of 14336 B" in p for p in problems), problems


def test_unmatched_send_and_bad_peer(tmp_path):
    tr = small_trace()
    tr.ops[1].coll_bytes[4] = 32
    problems = _broken(tmp_path, lambda f: None, tr)
    assert any("rank 0 sends 1 message(s) to rank 1" in p for p in problems), problems
    tr = small_trace()
    tr.ops[0].peer[4] = 7
    problems = _broken(tmp_path, lambda f: None, tr)
    assert any("unknown peer rank 7" in p for p in problems), problems


def test_unsupported_schema_version(tmp_path):
    problems = _broken(tmp_path, lambda f: f.attrs.__setitem__("schema_version", 7))
    assert problems == ["schema_version 7 is not supported; this reader supports versions 1 to 1"]


def test_column_length_and_code_problems(tmp_path):
    def mutate(f):
        g = f["ops/tables/0"]
        name = g["name"][()]
        del g["name"]
        g["name"] = name[:2]
    problems = _broken(tmp_path, mutate)
    assert any("columns differ in length" in p and "name has 2" in p for p in problems), problems
    tr = small_trace()
    tr.ops[0].kind[0] = 9
    tr.ops[0].duration_ns[1] = np.nan
    problems = _broken(tmp_path, lambda f: None, tr)
    assert any("op 0 (a): kind must be" in p for p in problems)
    assert any("op 1 (b): duration_ns must be finite" in p for p in problems)


# ---------------------------------------------------------------- refusal of damaged files

@pytest.mark.parametrize("content", [b"", b"hello world\n" * 100, b"\x89HDF\r\n\x1a\n" + b"\x00" * 64])
def test_not_hdf5_is_trace_error(tmp_path, content):
    p = tmp_path / "x.h5"
    p.write_bytes(content)
    with pytest.raises(TraceError):
        T.read(p)
    assert T.validate(p)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        T.read(tmp_path / "nope.h5")
    with pytest.raises(TraceError, match="directory"):
        T.read(tmp_path)


def test_checksum_catches_flipped_byte(tmp_path):
    p = tmp_path / "t.h5"
    shutil.copy(TOY, p)
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x40
    p.write_bytes(bytes(data))
    with pytest.raises(TraceError, match="checksum mismatch"):
        T.read(p)


def test_unsigned_files_are_read_and_truncations_refused(tmp_path):
    p = tmp_path / "u.h5"
    T._write(p, T.read(TOY), sign=False)
    assert p.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
    assert T.read(p).n_ranks == 8
    data = p.read_bytes()
    for cut in (len(data) - 1, len(data) // 2, 100, 8):
        q = tmp_path / f"cut{cut}.h5"
        q.write_bytes(data[:cut])
        with pytest.raises(TraceError):
            T.read(q)


# ---------------------------------------------------------------- CLI

def test_cli_info_json(tmp_path):
    from fabric.cli.trace import main
    out = tmp_path / "info.json"
    res = CliRunner().invoke(main, ["info", str(T.default_trace_path()), "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "allreduce" in res.output and "14,336 B" in res.output and "64 ranks" in res.output
    s = json.loads(out.read_text())
    for k in ("schema_version", "model", "ranks", "ops_by_kind", "collectives", "compute_us_per_rank"):
        assert k in s
    assert s["ranks"] == 64 and s["model"] == "deepseek-r1" and len(s["compute_us_per_rank"]) == 64
    assert {"kind": "allreduce", "bytes": 14336, "count_per_rank": [123] * 64} in s["collectives"]
    assert {"kind": "allgather", "bytes": 4040, "count_per_rank": [1] * 64} in s["collectives"]


def test_cli_validate(tmp_path):
    from fabric.cli.trace import main
    res = CliRunner().invoke(main, ["validate", str(TOY)])
    assert res.exit_code == 0 and "valid" in res.output
    _broken(tmp_path, lambda f: f["ops/tables/0/dep_idx"].__setitem__(0, 999))
    res = CliRunner().invoke(main, ["validate", str(tmp_path / "b.h5")])
    assert res.exit_code == 1
    assert "depends on op 999" in res.output


def test_cli_bad_files_exit_2_one_line(tmp_path):
    from fabric.cli.trace import main
    bad = tmp_path / "x.h5"
    bad.write_text("not a trace")
    for args in (["info", str(bad)], ["info", str(tmp_path / "missing.h5")]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2
        assert res.output.startswith("error: ") and res.output.count("\n") == 1
        assert "Traceback" not in res.output


def test_replicate_places_independent_copies_side_by_side():
    """replicate: k copies of a trace on consecutive rank blocks, groups and peers shifted, tables shared within a
    replica; lowering gives k times the tasks of one."""
    from pathlib import Path

    from fabric.lower import lower
    from fabric.trace import read, replicate
    tr = read(str(Path(__file__).resolve().parent.parent / "traces" / "toy-mla-tp8.h5"))
    r = replicate(tr, 3)
    assert r.n_ranks == 3 * tr.n_ranks and len(r.groups) == 3 * len(tr.groups)
    assert r.groups[len(tr.groups)] == [x + tr.n_ranks for x in tr.groups[0]]
    assert r.meta["plan"]["replicas"] == 3
    t1 = r.ops[tr.n_ranks]
    assert (t1.group[t1.group >= 0] >= len(tr.groups)).all()
    assert len({id(t) for t in r.ops}) == 3 * len({id(t) for t in tr.ops})
    assert lower(r).n_tasks == 3 * lower(tr).n_tasks
    assert replicate(tr, 1) is tr


def _summary_by_rank(tr) -> dict:
    """summary()'s per-rank figures the slow way, op by op (what it computed before issue 33 item 3)."""
    coll: dict = {}
    for r, t in enumerate(tr.ops):
        for i in np.nonzero((t.kind == T.KIND_COLLECTIVE) | (t.kind == T.KIND_SEND))[0]:
            coll.setdefault((T.COLL_NAMES[int(t.coll_kind[i])], int(t.coll_bytes[i])), [0] * tr.n_ranks)[r] += 1
    return dict(ops_per_rank=[len(t) for t in tr.ops],
                ops_by_kind={n: [int(np.sum(t.kind == k)) for t in tr.ops] for k, n in enumerate(T.KIND_NAMES)},
                collectives=[dict(kind=k, bytes=b, count_per_rank=c) for (k, b), c in sorted(coll.items())],
                compute_us_per_rank=[round(x / 1e3, 3) for x in tr.compute_ns_per_rank()])


def test_summary_per_distinct_table_equals_the_rank_by_rank_one():
    """Issue 33 item 3: summary() works per distinct table; its figures are those of a pass over every rank, for a
    read trace, replicas (tables that share all but group and peer) and ranks with tables of their own (sends)."""
    from fabric.capture import capture
    sends = T.Trace(meta=dict(model="x"), n_ranks=3, groups=[], ops=[
        T.OpTable.from_rows([dict(name="a", duration_ns=1.5)], [[]]),
        T.OpTable.from_rows([dict(name="s", kind=T.KIND_SEND, coll_kind=T.COLL_SENDRECV, coll_bytes=8, peer=0),
                             dict(name="c", duration_ns=2000.25)], [[], [0]]),
        T.OpTable.from_rows([dict(name="a", duration_ns=1.5)], [[]])])
    for tr in (T.read(TOY), T.replicate(capture("deepseek-r1", tp=64), 3), capture("toy-mla", tp=8, ep=8, batch=4),
               sends):
        s = T.summary(tr)
        assert {k: s[k] for k in _summary_by_rank(tr)} == _summary_by_rank(tr)
    assert T.summary(sends)["collectives"] == [dict(kind="sendrecv", bytes=8, count_per_rank=[0, 1, 0])]


def test_summary_of_131072_ranks_is_quick():
    """Issue 33 item 3: 16,384 replicas of toy-mla tp8 (131,072 ranks) summarise in well under a second (the pass
    over every rank and op took ~35 s; fabric-capture --replicas 4096 of DeepSeek-R1 tp64, 9 min)."""
    import time
    tr = T.replicate(T.read(TOY), 16384)
    t0 = time.perf_counter()
    s = T.summary(tr)
    assert time.perf_counter() - t0 < 3.0
    assert len(s["ops_per_rank"]) == 131072 and s["compute_us_per_rank"][-1] == s["compute_us_per_rank"][0]


def test_replicas_past_the_rank_bound_or_the_memory_guard_are_refused_up_front(monkeypatch):
    """Issue 33 item 3: replicate() refuses, before building anything, more ranks than a trace holds and copies
    whose tables would pass the memory guard (sim.max_memory_mb's auto value), each in one line naming the fix."""
    import time

    import fabric.config
    from fabric.capture import capture
    from fabric.errors import ConfigError
    tr = capture("deepseek-r1", tp=64)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"more than a trace holds \(1,048,576\); use at most 16384 replicas"):
        T.replicate(tr, 16385)
    monkeypatch.setattr(fabric.config, "resource_limits", lambda c: (c.sim.max_events, 64, "machine memory 128 MiB"))
    with pytest.raises(ConfigError, match=r"about 246 MiB of op tables, above the memory guard \(64 MiB.*use at "
                                          r"most 42\d\d replicas"):
        T.replicate(tr, 16384)      # 10.6 kB of group and peer columns, a table and 64 ranks a copy: 15.4 kB
    assert time.perf_counter() - t0 < 1.0
    assert T.replicate(tr, 8).n_ranks == 512


def test_collective_sequences_checked_at_once_as_group_by_group():
    """Issue 33 item 3: _collectives_agree (all ranks' collectives at once) says yes exactly when the group-by-group
    check finds nothing: a member with one byte more, another kind, one collective less, or none on its group."""
    import dataclasses
    tr = T.replicate(T.read(TOY), 3)

    def changed(rank, **cols):
        ops = list(tr.ops)
        ops[rank] = dataclasses.replace(ops[rank], **cols)
        return T.Trace(tr.meta, tr.n_ranks, tr.groups, ops)

    t = tr.ops[11]
    i = int(np.flatnonzero(t.kind == T.KIND_COLLECTIVE)[2])
    more = t.coll_bytes.copy()
    more[i] += 1
    other = t.coll_kind.copy()
    other[i] = T.COLL_ALLGATHER if other[i] != T.COLL_ALLGATHER else T.COLL_ALLREDUCE
    fewer = t.kind.copy()
    fewer[i] = T.KIND_COMPUTE
    none = np.where(t.kind == T.KIND_COLLECTIVE, T.KIND_COMPUTE, t.kind).astype(t.kind.dtype)
    cases = [tr, changed(11, coll_bytes=more), changed(8, coll_bytes=more), changed(11, coll_kind=other),
             changed(11, kind=fewer, coll_kind=np.where(fewer == T.KIND_COMPUTE, 0, t.coll_kind).astype(np.int8)),
             changed(11, kind=none, coll_kind=np.zeros_like(t.coll_kind))]
    got = [T._collectives_agree(c) for c in cases]
    assert got == [True, False, False, False, False, False]
    for c, agree in zip(cases, got):
        assert agree == (not any(p.startswith("group ") for p in T._check_trace(c)))
