"""fabric-plot serve (issue 30 item 5): latency CDFs of fabric-serve --json results, and throughput and latency
against load of a fabric-sweep over served workloads; wrong inputs are one line and exit 2."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("matplotlib")

from fabric.cli.plot import main as plot_cli  # noqa: E402
from fabric.cli.serve import main as serve_cli  # noqa: E402
from fabric.experiments.sweep import write_rows  # noqa: E402

WORKLOAD = "poisson:rate=400,in=uniform:16-96,out=uniform:2-24"


def ok(r):
    assert r.exit_code == 0, r.output
    return r


def looks_like(path) -> None:
    data = path.read_bytes()
    if path.suffix == ".png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    else:
        assert b"<svg" in data[:2000] and len(data) > 5000


def sweep_rows() -> list[dict]:
    """Rows as fabric-sweep writes them for a [serve] grid: rate x plan, latency growing past saturation."""
    rows = []
    for plan, cap in (("tp=64", 4.0), ("attn=dp,ep=64", 8.0)):
        for rate in (1, 2, 4, 8, 16):
            load = min(rate / cap, 0.99)
            rows.append({"serve.rate": rate, "serve.plan": plan, "point_hash": f"{plan}{rate}",
                         "output_tokens_per_s_per_accelerator": 30.0 * min(rate, cap),
                         "ttft_ms.p50": 200 / (1 - load), "ttft_ms.p99": 900 / (1 - load),
                         "tpot_ms.p50": 20 + 10 * load, "tpot_ms.p99": None if rate == 16 else 40 + 30 * load,
                         "slo.ttft_ms": 2000.0, "slo.tpot_ms": 50.0})
    return rows


def serve_result(plan: str, scale: float, per_request: bool) -> dict:
    """A fabric-serve --json result as far as the plot reads it: latency percentiles and per-request latencies."""
    rng = np.random.default_rng(1)
    lat = {"ttft_ms": 200 * scale * rng.lognormal(0, 0.6, 200), "tpot_ms": 20 * scale * rng.lognormal(0, 0.2, 200),
           "e2e_ms": 4000 * scale * rng.lognormal(0, 0.5, 200)}
    r = {"plan": plan, "preset": "sd200", "workload_meta": {"rate_per_s": 4.0}, "meta": {"overrides": {}}}
    r.update({k: {f"p{q}": float(np.percentile(v, q)) for q in (50, 90, 99)} | {"mean": float(v.mean())}
              for k, v in lat.items()})
    if per_request:
        r["per_request"] = {k: [float(x) for x in v] for k, v in lat.items()}
        r["per_request"]["tpot_ms"][0] = None         # a one-token request has no TPOT
    return r


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("plot-serve")
    (d / "s1.json").write_text(json.dumps(serve_result("tp=64", 1.0, per_request=True)))
    (d / "s2.json").write_text(json.dumps(serve_result("attn=dp,ep=64", 0.5, per_request=False)))
    write_rows(d / "serve.csv", sweep_rows())
    (d / "replay.csv").write_text("phy.lane_rate_gbps,point_hash,tpot_us\n32,a,150.0\n64,b,149.0\n")
    (d / "replay.json").write_text(json.dumps({"tpot_us": 1.0, "compute_us": 1.0, "exposed_comm_us": 0.0}))
    return d


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_latency_cdfs_per_request_and_from_percentiles(results, fmt):
    out = results / f"cdf.{fmt}"
    r = ok(CliRunner().invoke(plot_cli, ["serve", str(results / "s1.json"), str(results / "s2.json"),
                                         "-o", str(out)]))
    assert r.output.strip() == f"wrote {out}"
    looks_like(out)


def test_cdf_of_a_fabric_serve_json(tmp_path):
    ok(CliRunner().invoke(serve_cli, ["--model", "toy-mla", "--plan", "tp=8", "--workload", WORKLOAD,
                                      "--requests", "40", "--seed", "5", "--quiet", "--json", str(tmp_path / "s.json")]))
    out = tmp_path / "cdf.png"
    ok(CliRunner().invoke(plot_cli, ["serve", str(tmp_path / "s.json"), "--label", "toy", "-o", str(out)]))
    looks_like(out)


def test_throughput_and_latency_against_load(results):
    out = results / "load.png"
    ok(CliRunner().invoke(plot_cli, ["serve", str(results / "serve.csv"), "-o", str(out)]))
    looks_like(out)


def test_against_load_from_parquet_with_hue(results):
    pytest.importorskip("pyarrow")
    write_rows(results / "serve.parquet", sweep_rows())
    out = results / "load.svg"
    ok(CliRunner().invoke(plot_cli, ["serve", str(results / "serve.parquet"), "--hue", "serve.plan",
                                     "--title", "toy", "-o", str(out)]))
    looks_like(out)


@pytest.mark.parametrize("files, options, message", [
    (["replay.json"], [], "not a `fabric-serve --json` result"),
    (["replay.csv"], [], "not a fabric-sweep of served workloads (no column output_tokens_per_s_per_accelerator)"),
    (["s1.json", "serve.csv"], [], "not both"),
    (["serve.csv"], ["--x", "nope"], "--x 'nope' is not a column"),
    (["serve.csv"], ["--y", "tpot_us"], "--y applies to `fabric-plot sweep` only"),
    (["s1.json"], ["--x", "serve.rate"], "--x and --hue apply to a fabric-sweep output"),
])
def test_wrong_inputs_are_one_line_and_exit_2(results, files, options, message):
    r = CliRunner().invoke(plot_cli, ["serve", *(str(results / f) for f in files), *options,
                                      "-o", str(results / "x.png")])
    assert r.exit_code == 2 and message in r.output and r.output.count("\n") == 1, r.output
    assert not (results / "x.png").exists()
