"""Slips a new user makes in a config that runs anyway (issue 32 item 6): each gets one warning line naming the key
and the fix; the presets get none."""
import pytest
from click.testing import CliRunner

from fabric.cli.probe import main as probe
from fabric.collectives.library import config_warnings
from fabric.config import describe, load_config, preset_names

H100_NODE = {"topology.kind": "hgx", "topology.accels_per_domain": 8, "topology.ports_per_accel": 18,
             "phy.lanes": 2, "phy.lane_rate_gbps": 100.0}


@pytest.mark.parametrize("preset", preset_names())
def test_presets_raise_no_warning(preset):
    assert config_warnings(load_config(preset)) == []


def test_nvswitch_node_left_on_the_sd200_library_names_collectives_library():
    got = config_warnings(load_config(overrides={**H100_NODE, "switch.reduction": True}))
    assert len(got) == 1 and "collectives.library = sd200" in got[0] and "nccl-like" in got[0]
    assert config_warnings(load_config(overrides={**H100_NODE, "switch.reduction": True,
                                                  "collectives.library": "nccl-like"})) == []


def test_reduction_left_out_where_the_switch_generation_has_it():
    got = config_warnings(load_config(overrides={**H100_NODE, "collectives.library": "nccl-like"}))
    assert len(got) == 1 and "switch.reduction" in got[0] and "NVLink4" in got[0]
    # NVLink3 (A100's NVSwitch gen2) has no in-switch reduction: off is right there
    a100 = {**H100_NODE, "phy.lanes": 4, "phy.lane_rate_gbps": 50.0, "collectives.library": "nccl-like"}
    assert config_warnings(load_config(overrides=a100)) == []


def test_the_cli_prints_the_warnings_and_still_runs(tmp_path):
    p = tmp_path / "node.toml"
    p.write_text('[topology]\nkind = "hgx"\naccels_per_domain = 8\nports_per_accel = 18\n'
                 '[phy]\nlanes = 2\nlane_rate_gbps = 100.0\n')
    r = CliRunner().invoke(probe, ["collective", "--config", str(p), "--op", "allreduce",
                                  "--bytes", "1K", "--ranks", "8", "--quiet"])
    assert r.exit_code == 0, r.output + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and all(ln.startswith("warning: ") for ln in lines)
    assert "collectives.library" in lines[0] and "switch.reduction" in lines[1]


def test_params_no_longer_recommends_double_counted_launch_and_step():
    rows = {r["key"]: r for r in describe()}
    for key in ("collectives.launch_ns", "collectives.step_ns"):
        reason = rows[key]["reason"]
        assert "6600" not in reason and "set 600" not in reason and "collectives.library = nccl-like" in reason
