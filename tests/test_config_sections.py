"""The config's layout: a topology kind's parameters are its own sub-section ([topology.<kind>], declared with its
builder in fabric/topologies/), a collective library's are [collectives.<library>]; the flat keys they replaced
still work for one release, with one deprecation line per key and process; presets use the new form."""
import dataclasses
import tomllib

import pytest
from click.testing import CliRunner

from fabric import config as C
from fabric import topologies
from fabric.cli.probe import main as probe
from fabric.errors import ConfigError


@pytest.fixture
def fresh(monkeypatch):
    """A process that has printed no deprecation line yet."""
    monkeypatch.setattr(C, "_WARNED", set())


def test_every_kind_is_one_registered_record():
    kinds = topologies.KINDS
    assert {"sd200", "accel_mesh", "accel_torus", "scaleout_roce", "hgx", "link", "switch_torus"} <= set(kinds)
    choices = dict((f.name, f) for f in dataclasses.fields(C.TopologyConfig))["kind"].metadata["choices"]
    assert set(choices) == set(kinds)
    topo = C.FabricConfig().topology
    for k in kinds.values():
        assert callable(k.build) and callable(k.size) and k.routing in ("dor", "updown")
        assert not k.section_name or isinstance(getattr(topo, k.section_name), k.params)
        assert all(hasattr(topo, s) for s in k.reads)
    with pytest.raises(ConfigError, match="has no builder; use one of"):
        topologies.get("dragonfly")


def test_sub_sections_from_toml_set_and_overrides(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[topology]\nkind = "hgx"\n[topology.hgx]\nswitch_planes = 4\nplane_ports = "5,4,4,5"\n'
                 '[topology.scaleout]\nhosts = 2\n[collectives.nccl_like]\nprotocol = "LL"\n')
    cfg = C.load_config(config_file=p, overrides={"topology.ports_per_accel": 18, "topology.scaleout.hosts": "3"})
    assert (cfg.topology.hgx.switch_planes, cfg.topology.scaleout.hosts) == (4, 3)
    assert cfg.collectives.nccl_like.protocol == "LL" and cfg.collectives.library == "sd200"
    assert C.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="did you mean topology.hgx.switch_planes"):
        C.load_config(overrides={"topology.hgx.switch_plane": 2})
    with pytest.raises(ConfigError, match="unknown parameter 'topology.hgx'"):
        C.load_config(overrides={"topology.hgx": 2})
    with pytest.raises(ConfigError, match=r"topology.hgx.switch_planes=0 is out of range"):
        C.load_config(overrides={"topology.hgx.switch_planes": 0})


@pytest.mark.parametrize("old", sorted(C.DEPRECATED))
def test_every_old_flat_key_sets_its_new_keys(old, fresh, capsys):
    new = C.DEPRECATED[old]
    f = C._field(new[0])
    value = f.metadata["choices"][-1] if f.metadata["choices"] else {
        bool: True, str: "3x2x1" if "dims" in old else "4,4", int: 3, float: 0.5}[type(f.default)]
    value = {"link.credit_flits": 4096}.get(old, value)     # a pool must hold the largest packet
    cfg = C.load_config(overrides={old: value})
    for key in new:
        node = cfg
        for part in key.split("."):
            node = getattr(node, part)
        assert node == C._coerce(key, f, value)
    assert C.load_config(overrides={k: value for k in new}) == cfg
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"deprecated: {old} (") and all(k in err[0] for k in new)


def test_deprecation_is_one_line_per_key_and_process(tmp_path, fresh, capsys):
    p = tmp_path / "old.toml"
    p.write_text('[topology]\nscaleout_hosts = 2\nswitch_planes = 4\n[collectives]\nsymmetric = true\n')
    a = C.load_config(preset="dgx-h100", config_file=p)
    b = C.load_config(preset="dgx-h100", config_file=p, overrides={"topology.scaleout_hosts": 2})
    assert a == b and (a.topology.scaleout.hosts, a.topology.hgx.switch_planes) == (2, 4)
    assert a.collectives.nccl_like.symmetric is True
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"deprecated: topology.scaleout_hosts (config file {p}) is now topology.scaleout.hosts; the old key is read "
        f"until the next release",
        f"deprecated: topology.switch_planes (config file {p}) is now topology.hgx.switch_planes; the old key is read "
        f"until the next release",
        f"deprecated: collectives.symmetric (config file {p}) is now collectives.nccl_like.symmetric; the old key is "
        f"read until the next release"]


@pytest.mark.parametrize("preset", C.preset_names())
def test_presets_use_the_new_form(preset, fresh, capsys):
    flat = C._flatten_toml(tomllib.loads(C.preset_text(preset)), preset)
    assert not set(flat) & set(C.DEPRECATED)
    C.load_config(preset=preset)
    assert capsys.readouterr().err == ""


def test_params_shows_sub_sections_grouped_by_unit():
    r = CliRunner().invoke(probe, ["params"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    heads = [line.split()[0] for line in lines if line.startswith("[")]
    assert heads.index("[topology]") < heads.index("[topology.hgx]") < heads.index("[collectives]") \
        < heads.index("[collectives.nccl_like]")
    assert "read by topology.kind scaleout_roce, hgx" in next(x for x in lines if x.startswith("[topology.scaleout]"))
    start = lines.index(next(x for x in lines if x.startswith("[topology.scaleout]")))
    block = lines[start + 1:lines.index(next(x for x in lines[start + 1:] if x.startswith("[")))]
    units = [x.strip() for x in block if x.startswith("  ") and not x.startswith("   ")]
    assert len(units) == len(set(units)) and "ns" in units and "Gb/s" in units     # each unit once: grouped
    ns = block[block.index("  ns") + 1:]
    keys = [x.split()[0] for x in ns if x.startswith("    topology.")]
    assert keys[:2] == ["topology.scaleout.nic_latency_ns", "topology.scaleout.eth_switch_latency_ns"]
    assert "(was topology.scaleout_hosts)" in r.output
