"""Fuzz: mutated and truncated trace files are refused with TraceError (never a crash, never a hang).

Byte-level mutations mostly stop at the signature check; the structured fuzz below (issue 20) edits datasets and
attributes through h5py and re-signs the file, so that what is fuzzed is the parser and the semantic checks: every
file must read as a Trace or raise TraceError, `validate` must agree, and a trace that reads must lower and replay
on the analytic engine (or be refused with a FabricError), never crash, hang or overflow."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("h5py")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fabric import trace as T  # noqa: E402
from fabric.errors import TraceError  # noqa: E402

TOY = Path(__file__).resolve().parent.parent / "traces" / "toy-mla-tp8.h5"
DATA = TOY.read_bytes()
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _check(tmp_path, data: bytes):
    p = tmp_path / "fuzz.h5"
    p.write_bytes(data)
    try:
        tr = T.read(p)
    except TraceError as exc:
        assert str(exc)
        assert T.validate(p)  # validate reports, never raises
        return
    # a mutation that left the file intact (e.g. the same byte, or the header's padding) reads back fine
    assert tr.n_ranks == 8


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, len(DATA) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_files(tmp_path, edits):
    data = bytearray(DATA)
    for pos, val in edits:
        data[pos] = val
    _check(tmp_path, bytes(data))


@FUZZ
@given(cut=st.integers(0, len(DATA) - 1))
def test_truncated_files(tmp_path, cut):
    _check(tmp_path, DATA[:cut])


@FUZZ
@given(junk=st.binary(min_size=0, max_size=2048), keep=st.integers(0, len(DATA)))
def test_appended_and_spliced_junk(tmp_path, junk, keep):
    _check(tmp_path, DATA[:keep] + junk)


# ---------------------------------------------------------------- structured fuzz: mutate the content, re-sign

import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402

import h5py  # noqa: E402
import numpy as np  # noqa: E402

from fabric.errors import FabricError  # noqa: E402

STRUCT_EXAMPLES = int(os.environ.get("FABRIC_FUZZ_EXAMPLES", 300))


def _p2p_trace_bytes() -> bytes:
    """4 ranks with different tables: a collective on two groups, sends and receives, two streams."""
    tables = []
    for r in range(4):
        rows = [dict(name="a", duration_ns=1000.0, flops=2e6, bytes=1e6, layer=0, module="m.a"),
                dict(name="b", stream=1, duration_ns=500.0, layer=0, module="m.b"),
                dict(name="ar", kind=T.KIND_COLLECTIVE, coll_kind=T.COLL_ALLREDUCE, coll_bytes=4096, group=0),
                dict(name="ag", kind=T.KIND_COLLECTIVE, coll_kind=T.COLL_ALLGATHER, coll_bytes=512,
                     group=1 + r // 2)]
        deps = [[], [0], [0], [2, 1]]
        if r % 2 == 0:
            rows.append(dict(name="send", kind=T.KIND_SEND, coll_kind=T.COLL_SENDRECV, coll_bytes=256, peer=r + 1))
        else:
            rows.append(dict(name="recv", kind=T.KIND_RECV, coll_kind=T.COLL_SENDRECV, coll_bytes=256, peer=r - 1))
        deps.append([3])
        tables.append(T.OpTable.from_rows(rows, deps))
    meta = dict(schema_version=1, model="unit", model_config={}, plan=dict(tp=4, ep=1), batch=2, context=8,
                chip="h200", tool="test", tool_version="0")
    tr = T.Trace(meta=meta, n_ranks=4, groups=[[0, 1, 2, 3], [0, 1], [2, 3]], ops=tables)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "p2p.h5"
        T.write(p, tr)
        return p.read_bytes()


BASES = {"toy": DATA, "p2p": _p2p_trace_bytes()}


def _datasets(data: bytes) -> list[str]:
    import io
    out = []
    with h5py.File(io.BytesIO(data), "r") as f:
        f.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset) else None)
    return sorted(out)


PATHS = {k: _datasets(v) for k, v in BASES.items()}
INTS = [0, 1, -1, 2, 3, 4, 7, 8, 9, 63, 64, 255, 2**15 - 1, 2**16, 2**31 - 1, -2**31, 2**40, 2**44 + 1, 2**53,
        2**62, 2**63 - 1, -2**63]
FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, math.nan, math.inf, -math.inf, 1e-300, 5e-324, 1e12, 1e12 + 1, 1e15, 1e30,
          1.7e308]
TEXTS = ["", "x", "é", "\u2603" * 50, "a" * 300, "\x00", "op 0 (a)"]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from(FLOATS)
                           | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                         max_size=3),
                           max_leaves=6)
META_KEYS = list(T.META_KEYS) + ["extra"]


def _value_for(dtype: np.dtype, draw):
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        v = draw(st.one_of(st.sampled_from(INTS), st.integers(-5, 70)))
        return int(np.clip(v, info.min, info.max))
    if dtype.kind == "f":
        return draw(st.one_of(st.sampled_from(FLOATS), st.floats(allow_nan=True, allow_infinity=True)))
    return draw(st.sampled_from(TEXTS)).encode("utf-8")[: max(dtype.itemsize, 1)] if dtype.kind == "S" else \
        draw(st.sampled_from(TEXTS))


def _mutate(f: h5py.File, paths: list[str], draw) -> str:
    """One edit of the open file; returns what it did (for the failure report)."""
    op = draw(st.sampled_from(["set", "set", "set", "resize", "retype", "reshape", "delete", "group", "attr",
                               "meta", "meta", "badbytes"]))
    path = draw(st.sampled_from(paths))
    if op == "attr":
        name = draw(st.sampled_from(["n_ranks", "schema_version", "format", "meta_json", "junk"]))
        value = draw(st.one_of(st.sampled_from(INTS), st.sampled_from(FLOATS), st.sampled_from(TEXTS),
                               st.just(np.array([8, 8])), st.just(np.int32(8)), st.just(b"\xff\xfe")))
        if draw(st.booleans()) and name in f.attrs:
            del f.attrs[name]
            return f"del attr {name}"
        try:
            f.attrs[name] = value
        except (ValueError, TypeError):   # h5py cannot store it (e.g. an embedded NUL): nothing to test
            return f"skip attr {name}={value!r}"
        return f"attr {name}={value!r}"
    if op == "meta":
        try:
            meta = json.loads(f.attrs["meta_json"])
        except Exception:   # an earlier edit broke it
            meta = {}
        key = draw(st.sampled_from(META_KEYS))
        how = draw(st.sampled_from(["set", "del", "raw"]))
        if how == "set" and isinstance(meta, dict):
            meta[key] = draw(JSON_VALUES)
            text = json.dumps(meta, allow_nan=True)
        elif how == "del" and isinstance(meta, dict):
            meta.pop(key, None)
            text = json.dumps(meta)
        else:
            text = draw(st.sampled_from(["", "{", "[]", "null", "1", '{"batch": NaN}', '{"a": Infinity}']))
        f.attrs["meta_json"] = text
        return f"meta_json={text[:200]}"
    obj = f.get(path)
    if not isinstance(obj, h5py.Dataset):
        return f"skip {path}"
    data = obj[()]
    parent, name = path.rsplit("/", 1) if "/" in path else ("/", path)
    g = f[parent]
    if op == "set" and data.ndim == 1 and len(data):
        i = draw(st.integers(0, len(data) - 1))
        v = _value_for(data.dtype, draw)
        data = data.copy()
        data[i] = v
        del g[name]
        g.create_dataset(name, data=data, dtype=obj.dtype)
        return f"{path}[{i}] = {v!r}"
    if op == "badbytes" and data.dtype.kind == "S" and len(data):
        i = draw(st.integers(0, len(data) - 1))
        data = data.copy()
        data[i] = b"\xff\xfe\x80"
        del g[name]
        g.create_dataset(name, data=data, dtype=obj.dtype)
        return f"{path}[{i}] = invalid UTF-8"
    del g[name]
    if op == "resize":
        k = draw(st.integers(0, len(data) + 3))
        new = np.resize(data, k) if len(data) else np.zeros(k, data.dtype)
        g.create_dataset(name, data=new, dtype=obj.dtype)
        return f"{path} resized {len(data)} -> {k}"
    if op == "retype" and data.dtype.kind != "S":
        to = draw(st.sampled_from([np.int8, np.int32, np.int64, np.uint64, np.float32, np.float64]))
        with np.errstate(all="ignore"):
            g.create_dataset(name, data=data.astype(to))
        return f"{path} as {np.dtype(to)}"
    if op == "reshape":
        g.create_dataset(name, data=np.stack([data, data]) if data.dtype.kind != "S" else data.reshape(-1, 1))
        return f"{path} made 2-D"
    if op == "group":
        g.create_group(name)
        return f"{path} replaced by a group"
    return f"deleted {path}"


def _analytic_replay(tr):
    """A trace that reads must lower and run (analytic) or be refused with a FabricError."""
    from fabric import sim
    from fabric.config import load_config
    from fabric.lower import lower
    from fabric.network import build
    if tr.n_ranks > 8:
        return
    cfg = load_config(preset="dgx-h100")
    try:
        graph = lower(tr, cfg)
        res = sim.run(cfg, build(cfg), graph, engine="analytic")
    except FabricError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert res.outcome == "done"
    assert (res.task_end_ps >= res.task_start_ps).all() and (res.task_start_ps >= 0).all()


def _structured_case(data, base):
    raw = BASES[base]
    n = data.draw(st.integers(1, 4), label="edits")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.h5"
        p.write_bytes(raw)
        done = []
        with h5py.File(p, "r+") as f:
            for _ in range(n):
                done.append(_mutate(f, PATHS[base], data.draw))
        T._sign(p)                    # re-sign: the content, not the signature, is what is tested
        note = f"{base}: " + "; ".join(done)
        try:
            tr = T.read(p)
        except TraceError as exc:
            msg = str(exc)
            assert msg and "Traceback" not in msg, note
            problems = T.validate(p)
            assert problems, note
            return
        assert T.validate(p) == [], note
        _analytic_replay(tr)


@settings(max_examples=STRUCT_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data(), base=st.sampled_from(sorted(BASES)))
def test_structured_mutations_resigned(data, base):
    _structured_case(data, base)


@pytest.mark.benchmark
@settings(max_examples=int(os.environ.get("FABRIC_FUZZ_LONG_EXAMPLES", 5000)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data(), base=st.sampled_from(sorted(BASES)))
def test_structured_mutations_resigned_long(data, base):
    _structured_case(data, base)


def test_resigned_pristine_files_read():
    """The re-signing itself is sound: an unmodified file, re-signed, still reads."""
    for base, raw in BASES.items():
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "m.h5"
            p.write_bytes(raw)
            with h5py.File(p, "r+") as f:
                f.attrs["format"] = T.FORMAT_NAME
            T._sign(p)
            assert T.read(p).n_ranks in (8, 4), base
