"""Bad inputs a new user tries (issue 20): each one ends as one line on stderr and exit code 2 (or a correct run),
in under 10 s, never a hang, a traceback, a MemoryError or a silently wrong number."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

h5py = pytest.importorskip("h5py")

from click.testing import CliRunner  # noqa: E402

from fabric import trace as T  # noqa: E402
from fabric.config import idle_gap_ns, load_config  # noqa: E402
from fabric.errors import ConfigError  # noqa: E402

LIMIT_S = 10.0


def two_rank_trace(coll_bytes=14336, duration_ns=1000.0, stream=0, meta=None, kind=T.COLL_ALLREDUCE) -> T.Trace:
    """compute -> collective -> compute on each of 2 ranks."""
    tables = []
    for _ in range(2):
        rows = [dict(name="a", duration_ns=duration_ns, stream=stream, module="m.a"),
                dict(name="ar", kind=T.KIND_COLLECTIVE, coll_kind=kind, coll_bytes=coll_bytes, group=0),
                dict(name="c", duration_ns=10.0, module="m.c")]
        tables.append(T.OpTable.from_rows(rows, [[], [0], [1]]))
    m = dict(schema_version=1, model="unit", model_config={}, plan=dict(tp=2, ep=1), batch=1, context=8,
             chip="h200", tool="test", tool_version="0")
    m.update(meta or {})
    return T.Trace(meta=m, n_ranks=2, groups=[[0, 1]], ops=tables)


def write_unchecked(path, trace):
    """A signed file whose content the writer's checks would refuse: what a buggy or hostile tool writes."""
    T._write(path, trace, check=False)
    return str(path)


def one_line_exit_2(result, *needles):
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "Traceback" not in result.output
    for n in needles:
        assert n in err, err
    return err


def invoke(main, args):
    t0 = time.perf_counter()
    r = CliRunner().invoke(main, args, catch_exceptions=True)
    assert time.perf_counter() - t0 < LIMIT_S, f"{args} took {time.perf_counter() - t0:.1f} s"
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise AssertionError(f"{args} raised {type(r.exception).__name__}: {r.exception}")
    return r


def replay_main():
    from fabric.cli.replay import main
    return main


# ---------------------------------------------------------------- traces that validate but cannot be replayed

BAD_TRACES = {
    "collective-2^62-bytes": (dict(coll_bytes=1 << 62), "coll_bytes must be <="),
    "compute-1e30-ns": (dict(duration_ns=1e30), "duration_ns must be <="),
    "stream-2^31-1": (dict(stream=2**31 - 1), "stream must be in"),
    "batch-lots": (dict(meta=dict(batch="lots")), "batch='lots' must be an integer"),
    "batch-negative": (dict(meta=dict(batch=-3)), "batch=-3 is out of range"),
    "batch-bool": (dict(meta=dict(batch=True)), "batch=True must be an integer"),
    "context-float": (dict(meta=dict(context=1.5)), "context=1.5 must be an integer"),
}


@pytest.mark.parametrize("engine", ["analytic", "packet"])
@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_bad_trace_is_one_line(tmp_path, case, engine):
    kw, needle = BAD_TRACES[case]
    p = write_unchecked(tmp_path / "bad.h5", two_rank_trace(**kw))
    assert T.validate(p), "the validator must refuse it"
    one_line_exit_2(invoke(replay_main(), [p, "--engine", engine, "--quiet", "-p", "dgx-h100"]), needle)
    with pytest.raises(T.TraceError, match="refusing to write"):     # and the writer refuses to write it
        T.write(tmp_path / "w.h5", two_rank_trace(**kw))


def test_per_rank_totals_are_bounded(tmp_path):
    # each op within bounds, their sum is not: 1e12 ns x 2000 ops would overflow int64 ps on one rank's stream
    rows = [dict(name=f"op{i}", duration_ns=T.MAX_OP_NS) for i in range(int(T.MAX_RANK_NS / T.MAX_OP_NS) + 1)]
    t = T.OpTable.from_rows(rows, [[]] * len(rows))
    tr = two_rank_trace()
    tr.ops = [t, t]
    problems = T._check_trace(tr)
    assert any("per rank" in p for p in problems), problems


def test_largest_valid_values_replay_correctly(tmp_path):
    """At the bounds a trace still replays (analytic) with a positive, finite time: the bounds are not too wide."""
    tr = two_rank_trace(coll_bytes=T.MAX_OP_BYTES, duration_ns=T.MAX_OP_NS, stream=T.MAX_STREAM,
                        meta=dict(batch=T.MAX_BATCH))
    p = tmp_path / "edge.h5"
    T.write(p, tr)
    r = invoke(replay_main(), [str(p), "--engine", "analytic", "--quiet", "-p", "dgx-h100"])
    assert r.exit_code == 0, r.output
    tpot = float(r.stdout.split()[1])
    assert T.MAX_OP_NS / 1e3 < tpot < 1e13, r.stdout      # more than the 1000 s compute op, in us; no wrap


# ---------------------------------------------------------------- sizes refused up front, with the estimate

def test_1tb_collective_is_refused_with_estimate(tmp_path):
    p = tmp_path / "tb.h5"
    T.write(p, two_rank_trace(coll_bytes=1 << 40))
    err = one_line_exit_2(invoke(replay_main(), [str(p), "--quiet", "-p", "dgx-h100"]),
                          "kernel events", "sim.max_events")
    assert "packets" in err and "--set sim.max_events=" in err


def test_1tb_collective_runs_on_the_analytic_engine(tmp_path):
    p = tmp_path / "tb.h5"
    T.write(p, two_rank_trace(coll_bytes=1 << 40))
    r = invoke(replay_main(), [str(p), "--quiet", "--engine", "analytic", "-p", "dgx-h100"])
    assert r.exit_code == 0, r.output
    assert float(r.stdout.split()[1]) > 1e3            # > 1 ms for a TiB


def test_explicit_max_events_lets_a_run_through(tmp_path):
    from fabric import sim
    from fabric.network import build
    from fabric.taskgraph import transfer_graph
    cfg = load_config(preset="link", overrides={"sim.max_events": 1000})
    with pytest.raises(ConfigError, match="sim.max_events=1000"):
        sim.run(cfg, build(cfg), transfer_graph(0, 1, 4096 * 1000))
    cfg = load_config(preset="link", overrides={"sim.max_events": 10**6})
    assert sim.run(cfg, build(cfg), transfer_graph(0, 1, 4096 * 1000)).outcome == "done"


def test_estimate_matches_measured_packets():
    from fabric import sim
    from fabric.network import build
    from fabric.taskgraph import all_to_all_graph
    cfg = load_config(preset="mesh-4x4x4", overrides={"txn.max_payload_bytes": 256,
                                                      "txn.max_read_request_bytes": 256})
    topo = build(cfg)
    g = all_to_all_graph(topo.n_ranks, 4096)
    est = sim.estimate(cfg, topo, g)
    res = sim.run(cfg, topo, g)
    assert est["packets"] == res.totals["carved"]
    assert est["packet_hops"] == res.counters["packets"].sum()
    assert 0.5 * res.events <= est["events"] <= 3 * res.events


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(-5, 1 << 40), st.integers(0, 15),
                          st.integers(-1, 15), st.integers(-9, 10 ** 6)), min_size=1, max_size=40))
def test_transfer_load_is_the_estimate_formula(tasks):
    """The estimate's one pass in C (arrays.transfer_load) gives the formula it states, written in numpy."""
    from fabric._check_build import arrays
    from fabric.network import shared
    topo = shared(load_config(preset="mesh-4x4x4"))
    kind, op, nb, rank, peer, dur = (np.array(c) for c in zip(*tasks))
    R, pay, mrrs, pp = topo.n_ranks, 256, 512, topo.path_ptr
    x = kind == 1
    b = np.maximum(nb[x], 0).astype(np.float64)
    pk = np.ceil(b / pay) + np.where(op[x] == 1, np.ceil(b / mrrs), 0.0)
    first = topo.pair_ptr[np.clip(rank[x], 0, R - 1) * R + np.clip(peer[x], 0, R - 1)]
    hops = np.maximum(pp[first + 1] - pp[first], 1)
    got = arrays.transfer_load(kind, op, nb, rank, peer, dur, topo.pair_ptr, pp, R, pay, mrrs)
    assert got == (pk.sum(), (pk * hops).sum(), b.sum(), int(x.sum()), float(np.maximum(dur, 0).sum()))
    unrouted = arrays.transfer_load(kind, op, nb, rank, peer, dur, None, None, R, pay, mrrs)
    assert unrouted[1] == pk.sum()


def test_link_probe_trillion_packets():
    from fabric.cli.probe import main
    one_line_exit_2(invoke(main, ["link", "--packets", "1000000000000"]), "kernel events", "sim.max_events")


def test_huge_switch_mesh_is_refused_before_building():
    from fabric.cli.probe import main
    one_line_exit_2(invoke(main, ["topology", "-p", "sd200", "--set", "topology.sd200.switch_mesh_dims=32x32x32"]),
                    "MiB", "sim.max_memory_mb")


def test_huge_accel_mesh_is_refused_before_building():
    from fabric.network import build
    with pytest.raises(ConfigError, match="sim.max_memory_mb"):
        build(load_config(overrides={"topology.kind": "accel_mesh", "topology.accel_mesh.mesh_dims": "64x64x64"}))


# ---------------------------------------------------------------- configuration and input files

CONFIG_TOML = {
    "lanes-true": ("[phy]\nlanes = true\n", "phy.lanes=True is not a valid int"),
    "ber-true": ("[phy]\nber = false\n", "phy.ber=False is not a valid float"),
    "wrap-int": ("[topology.accel_mesh]\nwrap = 1\n", "topology.accel_mesh.wrap=1 is not a valid bool"),
    "kind-int": ("[topology]\nkind = 3\n", "topology.kind=3 is not a valid str"),
    "lanes-array": ("[phy]\nlanes = [8]\n", "phy.lanes=[8] is not a valid int"),
    "seed-float": ("[sim]\nseed = 1.5\n", "sim.seed=1.5 is not a valid int"),
    # issue 33 item 5: a TOML file is typed, a string is no number or boolean; every error at once, with its line
    "ber-string": ("[phy]\nber = \"1e-6\"\n", "line 2: phy.ber='1e-6' is a TOML string where a number belongs"),
    "wrap-string": ("[topology.accel_mesh]\nwrap = \"yes\"\n", "line 2: topology.accel_mesh.wrap='yes' is a TOML "
                                                             "string where a boolean belongs"),
    "two-errors": ("[phy]\nlanes = \"8\"\n[sim]\nseed = -1\n", "2 errors: line 2: phy.lanes='8'"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_TOML))
def test_config_types_are_strict(tmp_path, case):
    from fabric.cli.probe import main
    text, needle = CONFIG_TOML[case]
    p = tmp_path / "c.toml"
    p.write_text(text)
    one_line_exit_2(invoke(main, ["topology", "--config", str(p)]), needle)


@pytest.mark.parametrize("value", [1.5, "1"])
def test_schema_version_must_be_an_integer(tmp_path, value):
    """int() would read 1.5 or "1" as version 1 (issue 33 item 5)."""
    p = write_unchecked(tmp_path / "sv.h5", two_rank_trace())
    with h5py.File(p, "r+") as f:
        f.attrs["schema_version"] = value
    T._sign(p)
    one_line_exit_2(invoke(replay_main(), [p, "--engine", "analytic", "--quiet"]),
                    f"schema_version {value!r} is not supported")


@pytest.mark.parametrize("args,needle", [
    (["--shape", "1000000000000,1000000000000"], "beyond the bounds of one op of a trace (FLOPs 2e+24 > 1e+24"),
    (["--shape", "99999999999999999999999,2"], "--shape=99999999999999999999999 is larger than any kernel"),
    (["--op", "attention", "--ctx", "100000000000000000000"], "--ctx=100000000000000000000 is larger"),
    (["--shape", "8,8", "--tokens", str(1 << 60)], f"--tokens={1 << 60} is larger"),
])
def test_kernel_probe_shapes_get_the_size_guard(args, needle):
    from fabric.cli.probe import main
    one_line_exit_2(invoke(main, ["kernel", *args]), needle)


@pytest.mark.parametrize("command,args,needle", [
    ("trace", ["info", "toy-mla"], "trace 'toy-mla' is neither a file nor a shipped name; did you mean toy-mla-tp8?"),
    ("replay", ["llama-70b", "--quiet"], "trace 'llama-70b' is neither a file nor a shipped name"),
    ("probe", ["collective", "--op", "allreduce", "--compare", "a100"], "did you mean a100-8x?"),
])
def test_a_shipped_name_with_a_typo_lists_the_names(command, args, needle):
    """Issue 33 item 6: traces and calibration tables by name; a wrong name is one line with the shipped ones."""
    import importlib
    one_line_exit_2(invoke(importlib.import_module(f"fabric.cli.{command}").main, args), needle, "shipped: ")


def test_hf_config_folder_without_config_json(tmp_path):
    from fabric.cli.capture import main
    one_line_exit_2(invoke(main, ["--hf-config", str(tmp_path), "--tp", "8", "-o", str(tmp_path / "t.h5")]),
                    "holds no config.json")


def test_a_package_overwritten_by_the_ssh_tool_is_one_line(tmp_path):
    """Issue 33 item 1 (tests/test_import_clash.py has the rest): fabric/__init__.py and fabric/config.py of the
    SSH tool Fabric in place of ours: a command says so in one line with the fix, exit code 2."""
    from test_import_clash import OVERWRITTEN, _installed, _run
    r = _run(_installed(tmp_path, OVERWRITTEN), "from fabric.cli.probe import main; main(['presets'])")
    assert r.returncode == 2 and r.stderr.startswith("error: the imported package `fabric`"), r.stderr
    assert r.stderr.count("\n") == 1 and "pip install --force-reinstall --no-deps -e ." in r.stderr


def test_numbers_from_set_still_parse():
    cfg = load_config(overrides={"phy.lanes": "4", "phy.ber": "1e-9", "topology.accel_mesh.wrap": "true",
                                 "sim.watchdog_ns": "1e6", "phy.flit_bytes": np.int64(128)})
    assert cfg.phy.lanes == 4 and cfg.phy.ber == 1e-9 and cfg.topology.accel_mesh.wrap is True
    assert cfg.phy.flit_bytes == 128


NOT_UTF8 = b"[phy]\nlanes = 8 # \xff\xfe caf\xe9\n"


def test_non_utf8_config(tmp_path):
    from fabric.cli.probe import main
    p = tmp_path / "latin1.toml"
    p.write_bytes(NOT_UTF8)
    one_line_exit_2(invoke(main, ["topology", "--config", str(p)]), "not UTF-8")


def test_non_utf8_chip(tmp_path):
    from fabric.cli.probe import main
    p = tmp_path / "chip.toml"
    p.write_bytes(NOT_UTF8)
    one_line_exit_2(invoke(main, ["kernel", "--chip", str(p), "--shape", "1024,1024"]), "UTF-8")


def test_bench_unknown_case():
    from fabric.cli.bench import main
    one_line_exit_2(invoke(main, ["--case", "bogus"]), "unknown bench case 'bogus'", "oneshot-64")


@pytest.mark.parametrize("value", ["1", "100", "5000"])
def test_watchdog_below_idle_gap_is_refused(value):
    from fabric.cli.probe import main
    one_line_exit_2(invoke(main, ["link", "--packets", "10", "--set", f"sim.watchdog_ns={value}"]),
                    "sim.watchdog_ns", "longest idle gap")


def test_watchdog_at_idle_gap_runs_a_healthy_link():
    """The smallest accepted watchdog does not kill a healthy run, even one that replays."""
    from fabric.experiments.probe_link import probe_link
    gap = idle_gap_ns(load_config(preset="link"))
    cfg = load_config(preset="link", overrides={"sim.watchdog_ns": gap, "phy.ber": 1e-7})
    r = probe_link(cfg, None, 2000)
    assert r["packets_delivered"] == 2000 and r["replays"] >= 1


def test_idle_gap_grows_with_the_timers():
    a = idle_gap_ns(load_config())
    b = idle_gap_ns(load_config(overrides={"link.retrain_ns": 1e6, "sim.watchdog_ns": 1e7}))
    assert b - a == pytest.approx(1e6 - 5000)
    with pytest.raises(ConfigError, match="longest idle gap"):
        load_config(overrides={"link.retrain_ns": 1e7})           # default watchdog 1 ms < a 10 ms retrain


def test_limits_have_unit_help_and_reason():
    from fabric.config import describe, resource_limits
    rows = {r["key"]: r for r in describe()}
    for k in ("sim.max_events", "sim.max_memory_mb"):
        assert rows[k]["unit"] and rows[k]["help"] and rows[k]["reason"] and rows[k]["default"] == 0
    ev, mb, how = resource_limits(load_config())
    assert ev >= 1e9 and mb >= 256 and "memory" in how
    assert resource_limits(load_config(overrides={"sim.max_events": 5, "sim.max_memory_mb": 7}))[:2] == (5, 7)


def test_json_meta_round_trip_of_bounds(tmp_path):
    """The limits the validator applies are documented where the format is."""
    from pathlib import Path
    doc = (Path(__file__).resolve().parent.parent / "docs" / "trace-format.md").read_text()
    assert "§Bounds" in doc or "## Bounds" in doc
    for v in (str(T.MAX_STREAM), "16 TiB"):
        assert v in doc, v
    assert json.loads(json.dumps(T._check_meta(dict(batch=1)))) == []


def test_lowering_bounds_the_collective_size():
    from fabric.lower import MAX_FRAGMENT_BYTES, fragment_nbytes
    assert fragment_nbytes("allgather", T.MAX_OP_BYTES, 8) == T.MAX_OP_BYTES * 8
    with pytest.raises(T.TraceError, match="2\\^52"):
        fragment_nbytes("alltoall", T.MAX_OP_BYTES, 1 << 20)      # 2^64 B: would wrap an int64
    assert MAX_FRAGMENT_BYTES * 1000 < 2**63


def test_graph_that_could_overflow_the_clock_is_refused():
    """A task graph built through the API (no trace validator in the way) is still bounded by the run."""
    from fabric import sim
    from fabric.network import build
    from fabric.taskgraph import transfer_graph
    cfg = load_config(preset="link")
    for engine in ("analytic", "packet"):
        with pytest.raises(ConfigError, match="int64 picosecond clock"):
            sim.run(cfg, build(cfg), transfer_graph(0, 1, 1 << 61), engine=engine)


# ---------------------------------------------------------------- the test harness itself (tests/conftest.py)

def _harness_run(tmp_path, body: str, **env):
    """Run a test file under a copy of tests/conftest.py in a fresh pytest; (returncode, stdout + stderr)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    shutil.copy(Path(__file__).resolve().parent / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_harness_probe.py").write_text(body)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                        "-c", os.devnull, str(tmp_path)],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, **env), cwd=tmp_path)
    return p.returncode, p.stdout + p.stderr


def test_harness_time_limit_memory_cap_and_seed(tmp_path):
    """A hanging test, a hypothesis one included, fails with TestTimeout, a runaway allocation with MemoryError, and
    the session prints the hypothesis seed it was given."""
    t0 = time.perf_counter()
    rc, out = _harness_run(tmp_path, "import time\n"
                                     "import numpy as np\n"
                                     "from hypothesis import given, strategies as st\n"
                                     "def test_hangs():\n    time.sleep(30)\n"
                                     "def test_eats_memory():\n    np.ones(1 << 33)\n"
                                     "@given(st.integers())\ndef test_prop(x):\n    pass\n"
                                     "@given(st.integers())\ndef test_prop_hangs(x):\n    time.sleep(30)\n",
                           FABRIC_TEST_TIMEOUT="1", FABRIC_TEST_MEM_MB="4096", FABRIC_TEST_SEED="12345")
    assert time.perf_counter() - t0 < 30       # a hanging hypothesis test too fails at its limit, not shrinking on
    assert rc == 1, out
    assert "TestTimeout" in out and "test_hangs ran past its 1 s limit" in out, out
    assert "test_prop_hangs ran past its 1 s limit" in out and "stuck past" not in out, out
    assert "MemoryError" in out, out
    assert "FABRIC_TEST_SEED=12345" in out, out
    assert "3 failed, 1 passed" in out, out


def test_harness_ends_a_hang_inside_c_with_its_stack(tmp_path):
    """A test that SIGALRM cannot interrupt (here it blocks the signal, as a loop in C holds it off) ends the
    process after the grace time, with the test's name, the seed and its stack on the terminal's stderr."""
    t0 = time.perf_counter()
    rc, out = _harness_run(tmp_path, "import signal, time\n"
                                     "def test_stuck_in_c():\n"
                                     "    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
                                     "    time.sleep(30)\n",
                           FABRIC_TEST_TIMEOUT="1", FABRIC_TEST_HANG_GRACE="2", FABRIC_TEST_SEED="777")
    assert time.perf_counter() - t0 < 20 and rc != 0, out
    assert "test_stuck_in_c is stuck past its 1 s limit" in out and "hypothesis seed 777" in out, out
    assert 'test_harness_probe.py", line 4 in test_stuck_in_c' in out, out


def test_harness_seed_replays_the_same_examples(tmp_path):
    """The printed seed is enough to draw the same examples again (FABRIC_TEST_SEED)."""
    body = ("from hypothesis import given, settings, strategies as st\n"   # no example database: replays
            "@settings(database=None)\n@given(st.integers())\ndef test_prop(x):\n"   # from it are not the seed's
            f"    open({str(tmp_path / 'drawn.txt')!r}, 'a').write(f'{{x}}\\n')\n")
    runs = []
    for seed in ("4242", "4242", "4243"):
        (tmp_path / "drawn.txt").write_text("")
        rc, out = _harness_run(tmp_path, body, FABRIC_TEST_SEED=seed)
        assert rc == 0, out
        runs.append((tmp_path / "drawn.txt").read_text())
    assert runs[0] == runs[1] and runs[0] != runs[2] and runs[0].count("\n") >= 10
