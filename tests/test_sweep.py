"""fabric-sweep (issue 22 item 3): grids, Dask LocalCluster rows equal serial runs, resume, CSV and Parquet."""
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabric.errors import ConfigError
from fabric.experiments import sweep as S

TOY = str(Path(__file__).parent.parent / "traces" / "toy-mla-tp8.h5")
VOLATILE = {"point_wall_s", "wall_s", "lower_s"}     # wall-clock figures differ from run to run by nature

ISSUE_GRID = """
[sweep]
trace = "default"          # the shipped DeepSeek-R1 step; or a path, or a [capture] table
preset = ["sd200"]
engine = "analytic"
[grid]                     # the product of these lists
"phy.lane_rate_gbps" = [32, 64]
"switch.latency_ns" = [100, 200]
"""


def toy_grid(tmp_path, extra=""):
    g = tmp_path / "grid.toml"
    g.write_text(textwrap.dedent(f"""
        [sweep]
        trace = "{TOY}"
        preset = "sd200"
        engine = "analytic"
        [grid]
        "phy.lane_rate_gbps" = [32, 64]
        "switch.latency_ns" = [100, 400]
        """) + extra)
    return g


def test_issue_grid_parses_to_four_points(tmp_path):
    g = tmp_path / "grid.toml"
    g.write_text(ISSUE_GRID)
    pts = S.load_grid(g)
    assert [p.swept for p in pts] == [{"phy.lane_rate_gbps": a, "switch.latency_ns": b}
                                      for a in (32, 64) for b in (100, 200)]
    assert all(p.trace is None and p.engine == "analytic" and p.preset == "sd200" for p in pts)
    assert len({p.key() for p in pts}) == 4
    assert pts[0].config().phy.lane_rate_gbps == 32 and pts[3].config().switch.latency_ns == 200


def test_zip_mode_lists_in_sweep_and_errors():
    pts = S.grid_points({"sweep": {"engine": ["analytic", "packet"], "mode": "zip", "seed": [1, 2]},
                         "grid": {"phy.ber": [1e-12, 1e-9]}})
    assert [(p.engine, p.seed, p.sets["phy.ber"]) for p in pts] == [("analytic", 1, 1e-12), ("packet", 2, 1e-9)]
    with pytest.raises(ConfigError, match="one length"):
        S.grid_points({"sweep": {"mode": "zip"}, "grid": {"phy.ber": [1, 2], "phy.lanes": [1]}})
    with pytest.raises(ConfigError, match="unknown parameter"):
        S.grid_points({"grid": {"phy.no_such_key": [1, 2]}})
    with pytest.raises(ConfigError, match="unknown key"):
        S.grid_points({"sweep": {"model": "x"}})
    with pytest.raises(ConfigError, match="non-empty list"):
        S.grid_points({"grid": {"phy.lanes": 4}})


def _same(parallel: list[dict], serial: list[dict], as_text: bool) -> None:
    by_hash = {str(r["point_hash"]): r for r in parallel}
    assert len(by_hash) == len(serial) == len(parallel)
    for s in serial:
        p = by_hash[s["point_hash"]]
        assert set(p) == set(s)
        for k, v in s.items():
            if k not in VOLATILE:
                assert p[k] == (str(v) if as_text else v), k


def test_local_cluster_of_two_workers_equals_serial_runs(tmp_path):
    pytest.importorskip("dask.distributed")
    pts = S.load_grid(toy_grid(tmp_path))
    serial = S.run_serial(pts)
    out = tmp_path / "results.csv"
    info = S.run_sweep(pts, str(out), workers=2)
    assert info["run"] == 4 and info["workers"] == 2
    rows = S.read_rows(out)
    _same(rows, serial, as_text=True)
    row = rows[0]
    for col in ("phy.lane_rate_gbps", "switch.latency_ns", "version", "seed", "point_wall_s", "tpot_us",
                "links.max_utilisation", "config.phy.lane_rate_gbps", "config.sim.seed"):
        assert col in row, col
    assert row["config.phy.lane_rate_gbps"] == row["phy.lane_rate_gbps"] + ".0"
    assert S.run_sweep(pts, str(out), workers=2)["run"] == 0      # resume: nothing left to run


def test_resume_runs_only_new_points_and_parquet(tmp_path):
    pytest.importorskip("dask.distributed")
    pytest.importorskip("pyarrow")
    pts = S.load_grid(toy_grid(tmp_path))
    out = tmp_path / "results.parquet"
    assert S.run_sweep(pts[:2], str(out), workers=2)["run"] == 2
    info = S.run_sweep(pts, str(out), workers=2)
    assert info["run"] == 2 and info["skipped"] == 2
    rows = S.read_rows(out)
    _same(rows, S.run_serial(pts), as_text=False)


def test_cli_runs_the_issue_example(tmp_path, monkeypatch):
    pytest.importorskip("dask.distributed")
    from fabric.cli.sweep import main
    monkeypatch.chdir(tmp_path)
    Path("grid.toml").write_text(ISSUE_GRID)
    r = CliRunner().invoke(main, ["grid.toml", "--out", "results.csv", "--workers", "2"])
    assert r.exit_code == 0, r.output
    assert "4 points: 4 run, 0 already in results.csv" in r.output
    rows = S.read_rows("results.csv")
    assert len(rows) == 4 and {r["model"] for r in rows} == {"deepseek-r1"}
    r = CliRunner().invoke(main, ["grid.toml", "--out", "results.csv"])
    assert "0 run, 4 already in results.csv" in r.output


def test_cli_rejects_bad_output_and_grid(tmp_path):
    from fabric.cli.sweep import main
    g = toy_grid(tmp_path)
    r = CliRunner().invoke(main, [str(g), "--out", str(tmp_path / "r.xlsx")])
    assert r.exit_code == 2 and ".csv or .parquet" in r.output
    r = CliRunner().invoke(main, [str(tmp_path / "missing.toml"), "--out", str(tmp_path / "r.csv")])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_dry_run_lists_points(tmp_path):
    from fabric.cli.sweep import main
    r = CliRunner().invoke(main, [str(toy_grid(tmp_path)), "--out", str(tmp_path / "r.csv"), "--dry-run"])
    assert r.exit_code == 0 and r.output.strip().endswith("4 points")


@pytest.mark.benchmark
def test_sixteen_analytic_points_on_two_workers_under_0_6x_serial(tmp_path):
    """Issue 22 target, on a quiet machine with >= 2 free cores: 16 analytic points of the shipped DeepSeek-R1 step
    on a LocalCluster of 2 workers (cluster start included) in < 0.6x the wall time of `fabric-replay` run once per
    point, one after another. Also prints the ratio to an in-process serial loop (no interpreter start per point)."""
    import subprocess
    import sys
    import time
    pytest.importorskip("dask.distributed")
    pts = S.grid_points({"sweep": {"trace": "default", "preset": "sd200", "engine": "analytic"},
                         "grid": {"phy.lane_rate_gbps": [16, 32, 64, 128], "switch.latency_ns": [100, 200, 300, 400]}})
    exe = str(Path(sys.executable).with_name("fabric-replay"))
    t0 = time.perf_counter()
    for p in pts:
        sets = [a for k, v in p.sets.items() for a in ("--set", f"{k}={v}")]
        subprocess.run([exe, "--engine", "analytic", "--quiet", *sets], check=True, capture_output=True)
    one_by_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    S.run_serial(pts)
    serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    S.run_sweep(pts, str(tmp_path / "r.csv"), workers=2)
    parallel = time.perf_counter() - t0
    print(f"\n16 points: one by one {one_by_one:.1f} s, in-process serial {serial:.1f} s, 2 workers {parallel:.1f} s "
          f"({parallel / one_by_one:.2f}x, {parallel / serial:.2f}x)")
    assert parallel < 0.6 * one_by_one


def test_capture_table_points(tmp_path):
    pts = S.grid_points({"sweep": {"engine": "analytic"},
                         "capture": {"model": "toy-mla", "tp": 8, "batch": 1, "context": 128},
                         "grid": {"capture.batch": [1, 4]}})
    assert [p.capture["batch"] for p in pts] == [1, 4] and pts[0].key() != pts[1].key()
    rows = S.run_serial(pts, cache=str(tmp_path / "cache"))
    assert [r["batch"] for r in rows] == [1, 4] and [r["capture.batch"] for r in rows] == [1, 4]
    assert len(list((tmp_path / "cache").glob("capture-*.h5"))) == 2


def test_a_failed_point_keeps_the_others_on_dask(tmp_path):
    """A point that raises in its worker is reported and left out of the file; the others are written."""
    pytest.importorskip("dask.distributed")
    pts = S.grid_points({"sweep": {"engine": "analytic"}, "grid": {"trace": [TOY, "missing.h5"]}}, base=tmp_path)
    out = tmp_path / "r.csv"
    info = S.run_sweep(pts, str(out), workers=1)
    assert info["run"] == 2 and [p.swept["trace"] for p, _ in info["failed"]] == ["missing.h5"]
    assert "missing.h5" in info["failed"][0][1] and "\n" not in info["failed"][0][1]
    assert [r["trace"] for r in S.read_rows(out)] == [TOY]
    info = S.run_sweep(pts, str(out), serial=True)              # a rerun retries only the failed point
    assert info["run"] == 1 and info["skipped"] == 1 and len(info["failed"]) == 1


def test_a_failed_point_on_dask_is_one_line_and_the_others_are_saved(tmp_path):
    """Issue 33 item 4: the worker's ERROR log (with its traceback text) stays quiet; stderr holds one line per
    failed point, and the finished point is in the file."""
    import subprocess
    import sys
    pytest.importorskip("dask.distributed")
    g = tmp_path / "grid.toml"
    g.write_text(f'[sweep]\nengine = "analytic"\n[grid]\ntrace = ["{TOY}", "missing.h5"]\n')
    exe = str(Path(sys.executable).with_name("fabric-sweep"))
    r = subprocess.run([exe, str(g), "--out", str(tmp_path / "r.csv"), "--workers", "1", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [line for line in r.stderr.strip().splitlines()
                                             if line.startswith("error: point ")], r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "missing.h5" in r.stderr
    assert [row["trace"] for row in S.read_rows(tmp_path / "r.csv")] == [TOY]
