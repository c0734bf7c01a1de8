"""fabric-sweep over served workloads (issue 30 item 5): a [serve] table of fabric-serve's arguments, swept as
serve.KEY with fabric keys; rows hold the swept values and the flattened results; resume; a failed point keeps the
others; bad grids are one line and exit 2."""
import math
import textwrap

import pytest
from click.testing import CliRunner

import fabric.serve
from fabric.cli.sweep import main as sweep_cli
from fabric.errors import ConfigError
from fabric.experiments import sweep as S

WORKLOAD = "poisson:rate=400,in=uniform:16-96,out=uniform:2-24"
SERVE = f"""
[sweep]
preset = "sd200"
engine = "analytic"
seed = 5
[serve]
model = "toy-mla"
plan = "tp=8"
workload = "{WORKLOAD}"
requests = 40
slo_ttft_ms = 50
slo_tpot_ms = 5
"""


def grid(tmp_path, body: str, name="grid.toml") -> str:
    g = tmp_path / name
    g.write_text(textwrap.dedent(SERVE + body))
    return str(g)


def test_serve_grid_points_sweep_serve_and_fabric_keys(tmp_path):
    pts = S.load_grid(grid(tmp_path, """
        [grid]
        "serve.rate" = [100, 800]
        "serve.plan" = ["tp=8", "tp=4"]
        "phy.lane_rate_gbps" = [32, 128]
        """))
    assert len(pts) == 8 and len({p.key() for p in pts}) == 8
    p = pts[-1]
    assert p.swept == {"serve.rate": 800, "serve.plan": "tp=4", "phy.lane_rate_gbps": 128}
    assert p.serve == dict(model="toy-mla", plan="tp=4", workload=WORKLOAD, requests=40, slo_ttft_ms=50.0,
                           slo_tpot_ms=5.0, rate=800.0)
    assert p.sets == {"phy.lane_rate_gbps": 128} and p.trace is None and p.capture is None
    assert p.config().sim.seed == 5


def test_files_a_serve_table_names_are_relative_to_the_grid_file(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "trace.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                              "2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:50.99,396,109\n")
    pts = S.grid_points({"serve": {"model": "toy-mla"},
                         "grid": {"serve.workload": ["t/trace.csv", "poisson:rate=1,in=empirical:t/trace.csv,out=4"],
                                  "serve.requests": [2]}}, base=tmp_path)
    trace = str(tmp_path / "t" / "trace.csv")
    assert [p.serve["workload"] for p in pts] == [trace, f"poisson:rate=1,in=empirical:{trace},out=4"]
    assert pts[0].swept["serve.workload"] == "t/trace.csv"          # the column keeps the grid's spelling


@pytest.mark.parametrize("data, message", [
    ({"sweep": {"trace": "default"}, "serve": {"model": "toy-mla"}}, "takes no trace"),
    ({"serve": {"model": "toy-mla"}, "capture": {"model": "toy-mla"}}, "takes no trace"),
    ({"serve": {"modle": "toy-mla"}}, "unknown fabric-serve argument 'modle'"),
    ({"serve": {"model": "toy-mla"}, "grid": {"serve.engine": ["analytic"]}}, "a [sweep] key"),
    ({"grid": {"serve.rate": [1, 2]}}, "there is no [serve] table"),
    ({"serve": {"requests": 4, "duration": 2.0}}, "requests or duration, not both"),
    ({"serve": {"requests": "many"}}, "serve.requests = 'many' must be a whole number"),
    ({"serve": {"requests": 4}, "grid": {"serve.slo_ttft_ms": [100, -1]}}, "serve.slo_ttft_ms = -1.0 must be > 0"),
    ({"serve": {"balance": "random"}}, "must be one of least_tokens, round_robin"),
    ({"serve": {"model": "no-such-model", "requests": 4}}, "no-such-model"),
    ({"serve": {"model": "toy-mla", "requests": 4}, "grid": {"serve.plan": ["tp=8", "tq=8"]}}, "unknown key 'tq'"),
    ({"serve": {"model": "toy-mla", "workload": "poisson:rate=4,in=8"}}, "missing out"),
    ({"serve": "toy-mla"}, "must be a table"),
])
def test_bad_serve_grids_are_refused_before_any_point_runs(data, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        S.grid_points(data)


def test_cli_bad_serve_grid_is_one_line_and_exit_2(tmp_path):
    r = CliRunner().invoke(sweep_cli, [grid(tmp_path, '[grid]\n"serve.rate" = [0]\n'), "--out",
                                       str(tmp_path / "r.csv"), "--serial"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "--rate must be > 0" in r.output, r.output
    assert not (tmp_path / "r.csv").exists()


def test_serial_sweep_of_served_points_writes_rows_and_resumes(tmp_path):
    g = grid(tmp_path, """
        [grid]
        "serve.rate" = [100, 800]
        "phy.lane_rate_gbps" = [32, 128]
        """)
    out = str(tmp_path / "serve.csv")
    r = CliRunner().invoke(sweep_cli, [g, "--out", out, "--serial", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "4 points: 4 run, 0 already in" in r.output
    rows = S.read_rows(out)
    assert [(row["serve.rate"], row["phy.lane_rate_gbps"]) for row in rows] == \
        [("100", "32"), ("800", "32"), ("100", "128"), ("800", "128")]     # a deployment's points together
    cols = list(rows[0])
    assert cols[:3] == ["serve.rate", "phy.lane_rate_gbps", "point_hash"]
    for col in ("output_tokens_per_s_per_accelerator", "ttft_ms.p50", "ttft_ms.p99", "tpot_ms.p99", "e2e_ms.p90",
                "goodput_requests_per_s", "fabric_bytes.tp_collectives", "slo.met_fraction", "serve.model",
                "serve.plan", "serve.requests", "config.phy.lane_rate_gbps", "config.sim.seed"):
        assert col in cols, col
    assert not any(c.startswith("per_request") for c in cols)       # per request: in fabric-serve --json only
    assert all(row["finished"] == "40" and row["seed"] == "5" and row["plan"] == "tp=8" for row in rows)
    tput = {(row["serve.rate"], row["phy.lane_rate_gbps"]): float(row["output_tokens_per_s"]) for row in rows}
    assert tput[("800", "32")] > 2 * tput[("100", "32")]
    # the row of a point that reused its deployment is the result of fabric.serve run afresh
    direct = fabric.serve(model="toy-mla", plan="tp=8", workload=WORKLOAD, requests=40, rate=800, seed=5,
                          slo_ttft_ms=50, slo_tpot_ms=5, cfg=S.load_grid(g)[3].config())
    row = rows[3]
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert all(math.isclose(float(row[f"{key}.{p}"]), direct[key][p], rel_tol=1e-12) for p in direct[key])
    assert float(row["output_tokens_per_s"]) == pytest.approx(direct["output_tokens_per_s"], rel=1e-12)
    r = CliRunner().invoke(sweep_cli, [g, "--out", out, "--serial", "--quiet"])
    assert r.exit_code == 0 and "4 points: 0 run, 4 already in" in r.output


def test_a_failed_point_is_reported_and_the_others_kept(tmp_path):
    g = grid(tmp_path, """
        [set]
        "phy.lane_rate_gbps" = 32
        [grid]
        "serve.rate" = [100]
        "serve.plan" = ["tp=8", "tp=3"]
        """)
    out = tmp_path / "serve.csv"
    r = CliRunner().invoke(sweep_cli, [g, "--out", str(out), "--serial", "--quiet"])
    assert r.exit_code == 1, r.output
    assert "2 points: 2 run (1 failed), 0 already in" in r.stdout
    (line,) = r.stderr.splitlines()
    assert line.startswith("error: point ") and "serve.plan=tp=3" in line and "does not divide the 8 heads" in line
    assert [row["serve.plan"] for row in S.read_rows(out)] == ["tp=8"]
    r = CliRunner().invoke(sweep_cli, [g, "--out", str(out), "--serial", "--quiet"])
    assert r.exit_code == 1 and "2 points: 1 run (1 failed), 1 already in" in r.stdout     # only it, again


def test_dry_run_lists_serve_points(tmp_path):
    g = grid(tmp_path, '[grid]\n"serve.rate" = [100, 800]\n')
    r = CliRunner().invoke(sweep_cli, [g, "--out", str(tmp_path / "r.csv"), "--dry-run"])
    assert r.exit_code == 0 and "serve.rate=800" in r.output and r.output.strip().endswith("2 points")
    assert not (tmp_path / "r.csv").exists()
