"""fabric-plot (issue 22 item 2): every kind renders to PNG and SVG from the JSON / tables the commands write."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("matplotlib")

from fabric.cli.plot import main as plot_cli  # noqa: E402
from fabric.cli.probe import main as probe_cli  # noqa: E402
from fabric.cli.replay import main as replay_cli  # noqa: E402

ROOT = Path(__file__).parent.parent
TOY = str(ROOT / "traces" / "toy-mla-tp8.h5")
MEASURED = str(ROOT / "fabric" / "data" / "calibration" / "1node_8xA100-SXM4-80GB_allreduce_8B-128MB.txt")


def ok(r):
    assert r.exit_code == 0, r.output
    return r


def looks_like(path: Path) -> None:
    data = path.read_bytes()
    if path.suffix == ".png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    else:
        assert b"<svg" in data[:2000] and len(data) > 5000


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("plot")
    for name, preset in (("c1.json", "sd200"), ("c2.json", "scaleout-roce")):
        ok(CliRunner().invoke(probe_cli, ["collective", "--op", "allreduce", "--ranks", "8", "--engine", "analytic",
                                          "--min-bytes", "1K", "--max-bytes", "1M", "--preset", preset,
                                          "--json", str(d / name)]))
    ok(CliRunner().invoke(replay_cli, [TOY, "--quiet", "--json", str(d / "r1.json")]))
    ok(CliRunner().invoke(replay_cli, [TOY, "--quiet", "--engine", "analytic", "--set", "phy.lane_rate_gbps=32",
                                       "--json", str(d / "r2.json")]))
    (d / "sweep.csv").write_text("phy.lane_rate_gbps,switch.latency_ns,point_hash,tpot_us,comm_fraction\n"
                                 "32,100,a,150.0,0.05\n32,200,b,151.0,0.06\n64,100,c,149.0,0.04\n"
                                 "64,200,d,150.5,0.05\n")
    return d


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_collective_with_measured_overlay(results, fmt):
    out = results / f"coll.{fmt}"
    ok(CliRunner().invoke(plot_cli, ["collective", str(results / "c1.json"), str(results / "c2.json"),
                                     "--measured", MEASURED, "-o", str(out)]))
    looks_like(out)


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_links_heatmap_on_the_topology(results, fmt):
    out = results / f"links.{fmt}"
    ok(CliRunner().invoke(plot_cli, ["links", str(results / "r1.json"), "-o", str(out)]))
    looks_like(out)


@pytest.mark.parametrize("preset", ["dgx-h100", "torus-4x4x4"])
def test_links_layout_places_every_node(preset):
    from fabric.config import load_config
    from fabric.network import build
    from fabric.experiments.plot import layout
    topo = build(load_config(preset=preset))
    pos = layout(topo)
    assert set(pos) == set(range(topo.n_nodes))
    assert len(set(pos.values())) == topo.n_nodes      # no two nodes drawn on one spot


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_tpot_breakdown(results, fmt, tmp_path):
    layered = json.loads((results / "r1.json").read_text())
    layered["layers"] = [dict(layer=i, compute_us=10.0 + i, exposed_comm_us=1.0) for i in range(4)]
    (tmp_path / "layered.json").write_text(json.dumps(layered))
    out = results / f"tpot.{fmt}"
    ok(CliRunner().invoke(plot_cli, ["tpot", str(results / "r1.json"), str(results / "r2.json"),
                                     str(tmp_path / "layered.json"), "-o", str(out)]))
    looks_like(out)


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_sweep_any_field_vs_any_swept_key(results, fmt):
    out = results / f"sweep.{fmt}"
    ok(CliRunner().invoke(plot_cli, ["sweep", str(results / "sweep.csv"), "--x", "switch.latency_ns",
                                     "--y", "comm_fraction", "-o", str(out)]))
    looks_like(out)


def test_bad_inputs_are_one_line_errors(results):
    r = CliRunner().invoke(plot_cli, ["sweep", str(results / "sweep.csv"), "--y", "nope", "-o",
                                      str(results / "x.png")])
    assert r.exit_code == 2 and "'nope' is not a column" in r.output
    r = CliRunner().invoke(plot_cli, ["tpot", str(results / "c1.json"), "-o", str(results / "x.png")])
    assert r.exit_code == 2 and "not a `fabric-replay --json` result" in r.output
    r = CliRunner().invoke(plot_cli, ["tpot", str(results / "r1.json"), "-o", str(results / "x.pdf")])
    assert r.exit_code == 2 and ".png or .svg" in r.output


@pytest.mark.parametrize("content, why", [
    ({"meta": {"op": "allreduce"}}, "(no rows)"),
    ({"rows": [{"bytes": 8}]}, "(row 0 has no number in time_us, busbw_gbps)"),
    ({"rows": [{"bytes": 8, "time_us": 1.0, "busbw_gbps": 2.0}, {"bytes": 16, "busbw_gbps": 2.0}]},
     "(row 1 has no number in time_us)"),
    ([1, 2], "(row 0 has no number in bytes, time_us, busbw_gbps)"),
    ("text", "(a JSON str)"),
])
def test_collective_without_rows_or_time_is_one_line_naming_the_input(tmp_path, content, why):
    """Issue 33 item 4: a JSON without rows, or rows without time_us (KeyError tracebacks before), is one line
    naming the file and the input expected, exit 2."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(content))
    r = CliRunner().invoke(plot_cli, ["collective", str(bad), "-o", str(tmp_path / "x.png")])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and r.exception is not None
    assert r.output.startswith(f"error: {bad}: not a `fabric-probe collective --json` result {why}; expected "
                               '{"rows": [{"bytes": N, "time_us": N, "busbw_gbps": N, ...}, ...]}'), r.output
    assert not (tmp_path / "x.png").exists()


def test_links_of_an_analytic_result_is_refused(results):
    """Issue 33 item 4: the analytic engine occupies no link, so its links plot would be all zeros: refused in one
    line that names the engine to use; a packet-engine result of the same trace draws."""
    r = CliRunner().invoke(plot_cli, ["links", str(results / "r2.json"), "-o", str(results / "an.png")])
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert "analytic-engine result has no link utilisation" in r.output and "--engine packet" in r.output
    ok(CliRunner().invoke(plot_cli, ["links", str(results / "r1.json"), "-o", str(results / "pk.png")]))
