"""Golden values of the validated figures (fabric/tools/validate.py, docs/calibration.md): they must not drift.

Fast cases only: the analytic engine for TPOT, single collectives and probes on the packet engine."""
import json

import pytest
from click.testing import CliRunner

from fabric.config import load_config
from fabric.tools import validate as V
from fabric.tools.collective_probe import bus_factor, probe_collective, sizes

REL = 0.03   # golden tolerance: a behaviour-preserving kernel change stays well inside it


@pytest.fixture(scope="module")
def sd():
    return load_config("sd200")


def test_tpot_analytic_golden(sd):
    r = V.replay_trace(V.shipped_trace(), sd, "analytic")
    assert r["tpot_us"] == pytest.approx(8865.4, rel=REL)
    # the step is mostly compute, so TPOT alone would hide a communication regression: hold the split too
    assert r["comm_us"] == pytest.approx(402.8, rel=REL)
    assert r["comm_fraction"] < 0.10                      # figure 2 holds on the fast engine too


def test_allreduce_14k_golden(sd):
    opt, a = V.allreduce_us(sd, V.AR_BYTES)
    un, b = V.allreduce_us(load_config("sd200", overrides=V.UNOPT), V.AR_BYTES)
    hd, _ = V.allreduce_us(load_config("sd200", overrides=V.UNOPT_HD), V.AR_BYTES)
    assert (a, b) == ("twoshot", "ring")
    assert opt == pytest.approx(3.74, rel=REL)
    assert un == pytest.approx(146.0, rel=REL)
    assert hd == pytest.approx(21.8, rel=0.05)


def test_policy_tier_crossover(sd):
    """The policy's two-shot/ring threshold sits at the measured crossover (docs/calibration.md)."""
    assert probe_collective(sd, "allreduce", 512 << 10)["algorithm"] == "twoshot"
    assert probe_collective(sd, "allreduce", 1 << 20)["algorithm"] == "ring"
    t = {(m, a): probe_collective(sd, "allreduce", m, algorithm=a)["time_us"]
         for m in (256 << 10, 2 << 20) for a in ("twoshot", "ring")}
    assert t[(256 << 10, "twoshot")] < t[(256 << 10, "ring")]
    assert t[(2 << 20, "ring")] < t[(2 << 20, "twoshot")]


def test_latency_golden(sd):
    r = V.latency_ns(sd)
    assert r["hops"] == 5 and r["latency_ns"] == pytest.approx(721.5, rel=0.01)


def test_payload_efficiency_golden():
    r = V.link_efficiency(load_config("link"), packets=2000)
    assert r["payload_efficiency"] == pytest.approx(0.9650, abs=0.002)


def test_verdict_reads_published_only_when_judging():
    row = V._verdict("latency", "x", 0.70, "packet")
    assert row["within_tolerance"] and row["published"] == 0.69 and row["unit"] == "us"
    assert not V._verdict("tpot", "x", 7.0, "packet")["within_tolerance"]
    assert V._verdict("comm_share", "x", 4.0, "packet")["within_tolerance"]
    assert not V._verdict("payload_eff", "x", 95.0, "packet")["within_tolerance"]


def test_bus_factor_and_sizes():
    assert bus_factor("allreduce", 64) == pytest.approx(2 * 63 / 64)
    assert bus_factor("alltoall", 64) == pytest.approx(63 / 64)
    assert sizes(16384, 65536) == [16384, 32768, 65536]


def test_collective_cli_json(tmp_path):
    from fabric.cli.probe_collective import collective_cmd
    out = tmp_path / "c.json"
    r = CliRunner().invoke(collective_cmd, ["--op", "allreduce", "--min-bytes", "8192", "--max-bytes", "16384",
                                            "--ranks", "8", "--json", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())
    assert [x["bytes"] for x in rows] == [8192, 16384]
    assert set(rows[0]) == {"bytes", "time_us", "algbw_gbps", "busbw_gbps", "algorithm", "protocol", "channels"}
    assert rows[0]["busbw_gbps"] == pytest.approx(rows[0]["algbw_gbps"] * 2 * 7 / 8)
    bad = CliRunner().invoke(collective_cmd, ["--op", "allreduce"])
    assert bad.exit_code == 2
