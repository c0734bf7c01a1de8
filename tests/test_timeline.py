"""Timelines (fabric/timeline.py, docs/timeline.md): the Chrome trace-event file's tracks, slice counts and time
bounds; the kernel's link sampling (sample.pxi) bounded and without effect on results."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from click.testing import CliRunner

from fabric import sim, timeline
from fabric._check_build import kernel
from fabric.config import load_config
from fabric.lower import lower
from fabric.network import build
from fabric.taskgraph import COMPUTE, REDUCE, all_to_all_graph
from fabric.trace import read

TOY = "traces/toy-mla-tp8.h5"


def _load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _nesting_ok(slices) -> bool:
    """Slices of one track nest (no partial overlap): what Perfetto's JSON importer requires."""
    stack: list[float] = []
    for s in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1] <= s["ts"] + 1e-9:
            stack.pop()
        if stack and s["ts"] + s["dur"] > stack[-1] + 1e-6:
            return False
        stack.append(s["ts"] + s["dur"])
    return True


@pytest.fixture(scope="module")
def toy():
    cfg = load_config("sd200", overrides={"report.sample_ns": 200})
    tr = read(TOY)
    graph = lower(tr, cfg)
    with timeline.recording() as runs:
        res = sim.run(cfg, build(cfg), graph)
    return cfg, tr, graph, res, runs[-1]


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_replay_timeline_tracks_counts_and_bounds(toy, tmp_path, suffix):
    cfg, tr, graph, res, run = toy
    path = tmp_path / ("t" + suffix)
    stats = timeline.write(str(path), run, trace=tr)
    d = _load(path)
    ev = d["traceEvents"]
    R = tr.n_ranks
    L = build(cfg).n_ranks                      # the links process follows the fabric's accelerators
    step_us = res.task_end_ps.max() / 1e6
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert [procs[r] for r in range(R)] == [f"rank {r}" for r in range(R)] and procs[L] == "links"
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    for r in range(R):                          # a track per stream, collectives, their sends
        names = {n for (p, _), n in threads.items() if p == r}
        assert {"stream 0", "collectives", "collective sends"} <= names
    X = [e for e in ev if e["ph"] == "X"]
    # slice counts: every compute / reduce task on a stream, a collective slice per (instance, rank)
    on_stream = int(((graph.stream >= 0) & ((graph.kind == COMPUTE) | (graph.kind == REDUCE))).sum())
    assert sum(1 for e in X if e["tid"] < timeline.COLL_TID) == on_stream == stats["stream_slices"]
    n_coll = sum(len(m.ranks) for m in graph.coll_meta)
    assert sum(1 for e in X if timeline.COLL_TID <= e["tid"] < timeline.SEND_TID) == n_coll
    coll = [e for e in X if e["tid"] == timeline.COLL_TID]
    assert {"algorithm", "protocol", "bytes", "ranks"} <= set(coll[0]["args"])
    named = [e for e in X if e["tid"] < timeline.COLL_TID and "layer" in e["args"]]
    assert len(named) == int(((graph.kind == COMPUTE) & (graph.coll < 0)).sum())
    assert {"flops", "bytes", "module"} <= set(named[0]["args"])
    assert {e["name"] for e in named} <= set(np.concatenate([t.name for t in tr.ops]).tolist())
    # every slice of a rank lies inside the step
    for e in X:
        assert 0 <= e["pid"] < R and e["dur"] >= 0
        assert -1e-6 <= e["ts"] and e["ts"] + e["dur"] <= step_us + 1e-6
    # tracks nest; every flow starts inside a slice of its track and ends inside one of its track
    by_track: dict = {}
    for e in X:
        by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    assert all(_nesting_ok(v) for v in by_track.values())
    flows_s = {e["id"]: e for e in ev if e["ph"] == "s"}
    flows_f = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert flows_s and flows_s.keys() == flows_f.keys() and len(flows_s) == stats["flows"]
    for fid, s in flows_s.items():
        f = flows_f[fid]
        assert f["ts"] >= s["ts"] and f["bp"] == "e"
        for p in (s, f):
            assert any(x["ts"] - 1e-6 <= p["ts"] <= x["ts"] + x["dur"] + 1e-6 for x in by_track[(p["pid"], p["tid"])])
    # counters: a track per used link, from the kernel's samples
    C = [e for e in ev if e["ph"] == "C"]
    assert C and all(e["pid"] == L for e in C)
    assert {"util %", "queue", "credit stall %", "replays"} == set(C[0]["args"])
    used = int(((res.counters["packets"] > 0) | (res.counters["queue_max"] > 0)).sum())
    assert len({e["name"] for e in C}) == used
    assert max(e["args"]["util %"] for e in C) > 0


def test_sampling_changes_nothing_and_is_bounded():
    cfg = load_config("mesh-4x4x4", overrides={"txn.max_payload_bytes": 256, "txn.max_read_request_bytes": 256})
    topo = build(cfg)
    g = sim.as_arrays(all_to_all_graph(topo.n_ranks, 4096))
    out = []
    for sample_ps, cap_bytes in ((0, 0), (5_000, 1 << 30), (50, 64 * topo.n_channels * 32)):
        eng = kernel.Engine(sim.kernel_params(cfg), sim.as_arrays(topo), g, False)
        if sample_ps:
            eng.enable_sampling(sample_ps, cap_bytes)
        while eng.run(max_events=1 << 16) == kernel.PAUSED:
            pass
        start, end = eng.task_times()
        out.append((eng.events, eng.now_ps, start.copy(), end.copy(), {k: v.copy() for k, v in eng.counters().items()},
                    eng.samples()))
    for o in out[1:]:
        assert o[0] == out[0][0] and o[1] == out[0][1]
        assert np.array_equal(o[2], out[0][2]) and np.array_equal(o[3], out[0][3])
        assert all(np.array_equal(o[4][k], out[0][4][k]) for k in o[4])
    P, S = out[1][5]
    assert P == 5_000 and len(S) == out[0][1] // 5_000            # a row per interval, none missed
    busy = out[0][4]["busy_ps"]
    assert (S[-1, :, 0] <= busy).all() and (np.diff(S[:, :, 0], axis=0) >= 0).all()
    P2, S2 = out[2][5]                                             # small ring: halved until it fits
    assert len(S2) <= 64 and P2 > 50 and (P2 // 50) & (P2 // 50 - 1) == 0
    assert len(S2) == out[0][1] // P2
    # a halved ring holds the rows a ring sampled at the doubled interval would: rows at multiples of P2
    idx = np.arange(1, len(S2) + 1) * P2 // 5_000 - 1
    ok = (np.arange(1, len(S2) + 1) * P2) % 5_000 == 0
    assert np.array_equal(S2[ok], S[idx[ok]])


def test_cli_timelines(tmp_path):
    from fabric.cli.probe import main as probe
    from fabric.cli.replay import main as replay
    runner = CliRunner()
    p = tmp_path / "r.json.gz"
    r = runner.invoke(replay, [TOY, "--quiet", "--timeline", str(p)])
    assert r.exit_code == 0, r.output
    assert any(e["ph"] == "X" for e in _load(p)["traceEvents"])
    for args in (["collective", "--op", "allreduce", "--bytes", "64K", "--quiet", "--ranks", "8"],
                 ["latency", "--src", "0", "--dst", "3", "--set", "report.sample_ns=20"],
                 ["link", "--packets", "500"]):
        p = tmp_path / f"{args[0]}.json"
        r = runner.invoke(probe, args + ["--timeline", str(p)])
        assert r.exit_code == 0, r.output
        ev = _load(p)["traceEvents"]
        assert any(e["ph"] == "X" for e in ev) and any(e["ph"] in "sf" for e in ev), args
        assert "timeline" in r.output
    r = runner.invoke(replay, [TOY, "--quiet", "--timeline", str(tmp_path / "x.txt")])
    assert r.exit_code != 0 and "FILE.json" in r.output
