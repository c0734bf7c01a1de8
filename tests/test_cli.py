"""Command-line behaviour: outputs, JSON keys, and one-line errors with exit code 2 for bad input."""
import json

import pytest
from click.testing import CliRunner

from fabric.cli.probe import main as probe


def run(args):
    return CliRunner().invoke(probe, args, catch_exceptions=False)


def test_link_json_has_the_promised_keys(tmp_path):
    out = tmp_path / "link.json"
    r = run(["link", "--packets", "500", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    for key in ("payload_efficiency", "payload_efficiency_model", "goodput_gbps", "raw_gbps", "packets_sent",
                "packets_delivered", "packets_dropped", "duplicates", "out_of_order", "flits_corrupted", "naks",
                "replays", "replay_timeouts", "retrains", "credit_stall_ns", "events", "wall_s"):
        assert key in data, key
    assert data["packets_dropped"] == 0 and data["duplicates"] == 0


def test_link_reports_framing_at_any_size_and_pre_and_post_fec_rates(tmp_path):
    out = tmp_path / "link.json"
    r = run(["link", "--payload-bytes", "224", "--packets", "500", "--ber", "1e-5", "--set", "phy.fec_n=544",
             "--set", "phy.ge_bad_ber=1e-4", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["payload_efficiency_alone_model"] < data["payload_efficiency_model"]
    assert data["fec"] == "RS(544,514) m=10 t=15" and data["post_fec_flit_error"] < data["pre_fec_flit_error"]
    assert data["burst_bad_ber"] == 1e-4 and 0 < data["burst_bad_fraction"] < 1
    assert "one packet alone" in r.output and "before RS(544,514)" in r.output and "burst errors" in r.output


@pytest.mark.parametrize("args, needle", [
    (["link", "--set", "phy.fec_n=544", "--set", "phy.fec_k=600"], "phy.fec_n"),
    (["link", "--set", "phy.lane_rate_gbps=-5"], "phy.lane_rate_gbps"),
    (["link", "--set", "link.credit_pool_flits=-1"], "link.credit_pool_flits"),
    (["link", "--set", "link.credit_pool_flits=8"], "link.credit_pool_flits"),
    (["link", "--set", "txn.max_payload_bytes=65536", "--set", "link.credit_pool_flits=128"], "link.credit_pool_flits"),
    (["link", "--set", "txn.max_payload_bytes=65536", "--set", "link.replay_buffer_flits=256"],
     "link.replay_buffer_flits"),
    (["link", "--ber", "1.5"], "phy.ber"),
    (["link", "--ber", "-1e-9"], "phy.ber"),
    (["link", "--set", "phy.bre=1e-9"], "did you mean phy.ber"),
    (["link", "--set", "phy.lanes=many"], "phy.lanes"),
    (["link", "--set", "nonsense"], "section.key=value"),
    (["link", "--payload-bytes", "0"], "--payload-bytes"),
    (["link", "--packets", "0"], "--packets"),
    (["latency", "--src", "0", "--dst", "99"], "--dst"),
    (["latency", "--preset", "sd2000", "--src", "0", "--dst", "1"], "did you mean sd200"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, needle):
    r = CliRunner(mix_stderr=False).invoke(probe, args) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames \
        else CliRunner().invoke(probe, args)
    assert r.exit_code == 2, r.output
    err = (r.stderr if hasattr(r, "stderr") and r.stderr else r.output).strip()
    assert needle in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_latency_breakdown_adds_up(tmp_path):
    out = tmp_path / "lat.json"
    r = run(["latency", "--src", "0", "--dst", "63", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert abs(sum(data["breakdown"].values()) - data["latency_ns"]) < 0.1
    assert abs(data["breakdown"]["queueing_ns"]) < 1.0
    assert data["path"][0] == "acc0" and data["path"][-1] == "acc63"


def test_params_lists_every_parameter_with_reason():
    r = run(["params"])
    assert r.exit_code == 0
    assert "phy.ber" in r.output and "reason:" in r.output


def test_parsing_a_command_loads_no_kernel_and_its_choices_are_the_library_lists():
    """Commands import the kernel only when they run, so --engine and --op repeat two lists; they must match."""
    import subprocess
    import sys

    from fabric import sim
    from fabric.cli.common import ENGINES
    from fabric.cli.probe_collective import OPS
    from fabric.experiments.probe_collective import OPS as PROBE_OPS
    assert ENGINES == sim.ENGINES and OPS == PROBE_OPS
    code = ("import sys, fabric.cli.probe, fabric.cli.replay, fabric.cli.validate, fabric.cli.bench; "
            "assert 'fabric._kernel.kernel' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_importing_a_command_tunes_nothing_running_one_does():
    """Process tuning (fabric._process) is a call each command run makes, not a side effect of importing it."""
    import subprocess
    import sys
    code = ("import fabric.cli.probe, fabric.cli.replay, fabric.experiments.bench; from fabric import _process; "
            "assert not _process._TUNED; from fabric.cli.probe import main; "
            "main(['params'], standalone_mode=False); assert _process._TUNED")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
