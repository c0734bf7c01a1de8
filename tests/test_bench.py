"""Smoke test of the benchmark suite: the quick cases run and produce well-formed rows (no timing assertions)."""
import json

import pytest
from click.testing import CliRunner

from fabric.cli.bench import main
from fabric.experiments import bench


def test_oneshot_message_scaling():
    assert bench.oneshot_bytes(64) == 14336
    assert bench.oneshot_name(64) == "oneshot-64"
    for n in (128, 256, 512, 1024):
        b = bench.oneshot_bytes(n)
        assert b % bench.PKT_B == 0 and b <= 14336 * 64 // n
        assert bench.oneshot_name(n) == f"oneshot-{n}-{b}B"


def test_scaling_exponent_of_a_linear_cost():
    rows = [dict(case=f"oneshot-{n}", packets=n * 1000, packet_hops=n * n, events=n ** 3, wall_s=n * 0.01)
            for n in (64, 128, 256)]
    assert abs(bench.scaling_exponent(rows) - 1.0) < 1e-9
    assert abs(bench.scaling_exponent(rows, "packet_hops") - 0.5) < 1e-9
    assert abs(bench.scaling_exponent(rows, of="events") - 3.0) < 1e-9
    assert "events ~ packets^3.00" in bench.render([dict(r, events_per_s=1.0, packet_hops_per_s=1.0, peak_rss_mb=1.0)
                                                    for r in rows])


def test_capture_case_times_capture_write_and_read():
    """capture-1024's stages, here on the 128-rank kimi-k2 workload (the case itself takes the 1024-rank one)."""
    bench.check_cases(["capture-1024"])
    res = bench.capture_stages("kimi-k2-tp64-ep128")
    assert list(res.stages) == ["capture", "write", "read"] and res.events == 0
    assert res.wall_s == pytest.approx(sum(res.stages.values()))
    row = dict(case="capture-1024", packets=0, packet_hops=0, events=0, wall_s=res.wall_s, events_per_s=0.0,
               packet_hops_per_s=0.0, peak_rss_mb=1.0, stages=res.stages, process_s=1.0)
    text = bench.render([row])
    assert "capture-1024: end to end" in text and "wall s above: run" not in text


def test_quick_suite_runs(tmp_path):
    out = tmp_path / "bench.json"
    res = CliRunner().invoke(main, ["--quick", "--json", str(out)])
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())
    assert [r["case"] for r in rows] == bench.QUICK
    for r in rows:
        assert tuple(r) == bench.ROW_KEYS
        assert r["events"] > 0 and r["wall_s"] >= 0 and r["peak_rss_mb"] > 0
        if r["case"] != "decode-sd200-analytic":
            assert r["packet_hops"] >= r["packets"] > 0
    assert "oneshot-64" in res.output and "peak RSS MB" in res.output


def test_repeat_reports_the_fastest_of_identical_runs(monkeypatch):
    calls = []

    def fake(case):
        calls.append(case)
        return dict(case=case, packets=10, packet_hops=30, events=100, wall_s=[0.3, 0.1, 0.2][len(calls) - 1],
                    events_per_s=0.0, packet_hops_per_s=0.0, peak_rss_mb=[50.0, 40.0, 60.0][len(calls) - 1])
    monkeypatch.setattr(bench, "run_case", fake)
    (row,) = bench.run_suite(cases=["link-quick"], repeat=3)
    assert calls == ["link-quick"] * 3 and row["wall_s"] == 0.1 and row["peak_rss_mb"] == 60.0
    assert "fastest of 3 runs" in bench.render([row], 3)


def test_repeat_refuses_runs_that_disagree(monkeypatch):
    events = iter([100, 101])
    monkeypatch.setattr(bench, "run_case", lambda case: dict(case=case, packets=1, packet_hops=1, events=next(events),
                                                             wall_s=0.1, events_per_s=0, packet_hops_per_s=0,
                                                             peak_rss_mb=1))
    with pytest.raises(RuntimeError, match="disagree"):
        bench.run_suite(cases=["link-quick"], repeat=2)
    assert CliRunner().invoke(main, ["--repeat", "0"]).exit_code == 2
