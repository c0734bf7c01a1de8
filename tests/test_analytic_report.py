"""Issue 33 item 4: the analytic engine's text report prints what that engine measures (its transfers), not the
packet engine's fields as zeros ("max util 0.00 %", "0 delivered")."""
import json
import re
from pathlib import Path

from click.testing import CliRunner

from fabric.cli.replay import main as replay_cli

TOY = str(Path(__file__).parent.parent / "traces" / "toy-mla-tp8.h5")


def _run(tmp_path, engine):
    out = tmp_path / f"{engine}.json"
    r = CliRunner().invoke(replay_cli, [TOY, "--engine", engine, "--json", str(out)])
    assert r.exit_code == 0, r.output
    return r.output, json.loads(out.read_text())


def test_analytic_report_shows_its_transfers_not_zero_packet_fields(tmp_path):
    text, res = _run(tmp_path, "analytic")
    assert "max util" not in text and "delivered" not in text and "retransmissions" not in text
    x = res["transfers"]
    assert x["count"] == 336 and x["bytes"] == sum(res_bytes for res_bytes in _collective_bytes())
    assert 0 < x["mean_us"] <= x["max_us"] and abs(x["total_us"] - x["mean_us"] * x["count"]) < 1e-6
    line = re.search(r"transfers +(\d+) timed alpha-beta: ([\d,]+) B, mean ([\d.]+) us, max ([\d.]+) us", text)
    assert line and int(line[1]) == x["count"] and int(line[2].replace(",", "")) == x["bytes"]
    assert float(line[4]) == round(x["max_us"], 2)
    assert "--engine packet measures links" in text


def test_packet_report_keeps_links_and_packets_and_counts_the_same_transfers(tmp_path):
    text, res = _run(tmp_path, "packet")
    assert re.search(r"links +max util \d+\.\d\d %", text) and res["links"]["max_utilisation"] > 0
    assert re.search(r"packets +[1-9]\d* delivered", text)
    assert "timed alpha-beta" not in text
    _, analytic = _run(tmp_path, "analytic")
    assert {k: res["transfers"][k] for k in ("count", "bytes")} == \
        {k: analytic["transfers"][k] for k in ("count", "bytes")}


def _collective_bytes():
    from fabric import trace as T
    from fabric.config import load_config
    from fabric.lower import lower
    from fabric.report import collective_bytes
    return collective_bytes(lower(T.read(TOY), load_config(preset="sd200"))).values()
