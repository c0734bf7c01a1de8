"""Fuzz: mutated and truncated trace files are refused with TraceError (never a crash, never a hang)."""
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
