"""Issue 33 item 5: a TOML file is typed, so a string where a number or boolean belongs is refused there (the
--set text form keeps its conversion); every error of a config file is reported at once with its line; and the
flow-control warning of a small replay buffer is the rate the link then runs at."""
import pytest

from fabric import phy, sim
from fabric.config import _key_lines, load_config
from fabric.errors import ConfigError
from fabric.experiments.probe_link import probe_link
from fabric.network import build

BAD = """# three mistakes and a good key
[phy]
ber = "1e-6"
lanes = 8

[topology.accel_mesh]
wrap = "yes"

[link]
seq_bits = 99
"""


def _load(tmp_path, text):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return load_config(config_file=p), p


def test_every_error_of_a_file_at_once_with_its_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, BAD)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"config file {tmp_path / 'c.toml'}: 3 errors: ")
    assert "line 3: phy.ber='1e-6' is a TOML string where a number belongs; write ber = 1e-6, without quotes" in msg
    assert "line 7: topology.accel_mesh.wrap='yes' is a TOML string where a boolean belongs" in msg
    assert "line 10: link.seq_bits=99 is out of range" in msg


@pytest.mark.parametrize("text,needle", [
    ('[phy]\nlanes = "8"\n', "line 2: phy.lanes='8' is a TOML string where a whole number belongs; write lanes = 8"),
    ('[sim]\nwatchdog_ns = "1e6"\n', "line 2: sim.watchdog_ns='1e6' is a TOML string"),
    ('[switch]\nreduction = "true"\n', "write reduction = true, without quotes"),
    ('[link]\nbogus = 1\n', "line 2: unknown parameter 'link.bogus'"),
    ('phy = 3\n', "line 1: top-level key 'phy' must be a [section] table"),
    ('[phy]\nflit_overhead_bytes = 300\n', "c.toml: phy.flit_overhead_bytes=300 must be smaller than"),
])
def test_one_error_names_the_file_and_line(tmp_path, text, needle):
    with pytest.raises(ConfigError, match=None) as e:
        _load(tmp_path, text)
    assert needle in str(e.value) and "c.toml" in str(e.value), str(e.value)


def test_the_set_text_form_still_converts(tmp_path):
    cfg = load_config(overrides={"phy.ber": "1e-6", "topology.accel_mesh.wrap": "yes", "phy.lanes": "4"})
    assert cfg.phy.ber == 1e-6 and cfg.topology.accel_mesh.wrap is True and cfg.phy.lanes == 4
    cfg, _ = _load(tmp_path, "[phy]\nber = 1e-6\nlanes = 4\n[topology.accel_mesh]\nwrap = true\n")
    assert cfg.phy.ber == 1e-6 and cfg.topology.accel_mesh.wrap is True and cfg.phy.lanes == 4


def test_key_lines_follow_tables_and_dotted_keys():
    text = '[phy]\nber = 1\n\n[topology.accel_mesh] # c\nwrap = true\n[[faults]]\nspec = "x"\n[link]\n"seq_bits" = 3\n'
    assert _key_lines(text) == {"phy": 1, "phy.ber": 2, "topology.accel_mesh": 4, "topology.accel_mesh.wrap": 5,
                                "faults": 6, "faults.spec": 7, "link": 8, "link.seq_bits": 9}


@pytest.mark.parametrize("packets", [1, 2])
def test_replay_buffer_warning_is_the_rate_the_link_runs_at(packets, capsys):
    """A replay buffer of one or two max packets: the kernel sends while the next packet fits (cap // P packets
    unacknowledged), so the warning's cap is what the link probe measures (wire rate x framing), not 0 GB/s."""
    base = load_config("link")
    flits = packets * phy.packet_flits(base, base.txn.max_payload_bytes)
    cfg = load_config("link", overrides={"link.replay_buffer_flits": flits})
    cap = sim.flow_control(cfg, build(cfg), warn=False)["replay_buffer_flits_cap"]
    measured = probe_link(cfg, packets=2000)["goodput_gbps"] / 8
    assert cap["gbps"] > 0
    assert measured == pytest.approx(cap["gbps"] * phy.payload_efficiency(cfg), rel=0.05)
