"""Issue 22 item 4 and 6: --version on every command, `fabric-probe presets`, `fabric-probe params --json`, size
suffixes, results that carry their configuration, and the packaging (one version, a distribution name)."""
import importlib
import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import fabric
from fabric.cli.probe import main as probe_cli
from fabric.cli.replay import main as replay_cli
from fabric.config import preset_names

ROOT = Path(__file__).parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS = PYPROJECT["project"]["scripts"]
TOY = str(ROOT / "traces" / "toy-mla-tp8.h5")


def _entry(target):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_version_on_every_command(name):
    r = CliRunner().invoke(_entry(SCRIPTS[name]), ["--version"], prog_name=name)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == f"{name} ({fabric.DISTRIBUTION}) {fabric.__version__}"


def test_version_on_subcommands():
    r = CliRunner().invoke(probe_cli, ["collective", "--version"], prog_name="fabric-probe")
    assert r.exit_code == 0 and fabric.__version__ in r.output


def test_packaging_one_version_and_a_free_distribution_name():
    assert PYPROJECT["project"]["name"] == fabric.DISTRIBUTION != "fabric"
    assert "version" in PYPROJECT["project"]["dynamic"] and "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fabric.__version__"}
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    # the SPDX form (PEP 639; setuptools >= 77 reads it): the TOML-table form is deprecated
    assert PYPROJECT["project"]["license"] == "Apache-2.0" and PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert any(r.replace(" ", "").startswith("setuptools>=7") and int(r.split(">=")[1].split(".")[0]) >= 77
               for r in PYPROJECT["build-system"]["requires"])
    assert fabric.__version__ in (ROOT / "CHANGELOG.md").read_text()
    for extra in ("plot", "sweep"):
        assert set(PYPROJECT["project"]["optional-dependencies"][extra]) <= \
            set(PYPROJECT["project"]["optional-dependencies"]["test"])
    for name in ("fabric-plot", "fabric-sweep"):
        assert name in SCRIPTS


def test_presets_one_line_each():
    r = CliRunner().invoke(probe_cli, ["presets"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert [line.split()[0] for line in lines] == preset_names()
    sd200 = next(line for line in lines if line.split()[0] == "sd200")
    assert "64 accel" in sd200 and "SD200" in sd200


def test_params_json():
    r = CliRunner().invoke(probe_cli, ["params", "--json"])
    assert r.exit_code == 0
    rows = json.loads(r.output)
    assert {"key", "default", "unit", "range", "help", "reason"} <= set(rows[0])
    assert "phy.lane_rate_gbps" in {x["key"] for x in rows}


@pytest.mark.parametrize("text, want", [("64", 64), ("4K", 4096), ("16KiB", 16384), ("1M", 1 << 20),
                                        ("2MB", 2 << 20)])
def test_size_suffixes(text, want, tmp_path):
    out = tmp_path / "l.json"
    r = CliRunner().invoke(probe_cli, ["latency", "--src", "0", "--dst", "1", "--bytes", text, "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["bytes"] == want


def test_bad_size_is_one_line():
    r = CliRunner().invoke(probe_cli, ["latency", "--src", "0", "--dst", "1", "--bytes", "lots"])
    assert r.exit_code == 2 and "not a size" in r.output


def test_json_results_carry_config_preset_overrides_seed_version(tmp_path):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(replay_cli, [TOY, "--engine", "analytic", "--quiet", "--set", "switch.latency_ns=300",
                                        "--seed", "7", "--json", str(out)])
    assert r.exit_code == 0, r.output
    meta = json.loads(out.read_text())["meta"]
    assert meta["version"] == fabric.__version__ and meta["preset"] == "sd200" and meta["seed"] == 7
    assert meta["overrides"] == {"switch.latency_ns": "300"}
    assert meta["config"]["switch"]["latency_ns"] == 300 and meta["config"]["sim"]["seed"] == 7
    for args in (["link", "--packets", "200"], ["latency", "--src", "0", "--dst", "9"],
                 ["collective", "--op", "allgather", "--ranks", "8", "--bytes", "1K", "--engine", "analytic"]):
        r = CliRunner().invoke(probe_cli, args + ["--json", str(out)])
        assert r.exit_code == 0, r.output
        meta = json.loads(out.read_text())["meta"]
        assert meta["version"] == fabric.__version__ and "phy" in meta["config"], args


def test_replay_json_splits_the_critical_path_per_layer(tmp_path):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(replay_cli, [TOY, "--quiet", "--json", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    layers = d["layers"]
    assert [x["layer"] for x in layers] == sorted(x["layer"] for x in layers) and len(layers) > 1
    assert sum(x["compute_us"] for x in layers) == pytest.approx(d["compute_us"])
    assert sum(x["exposed_comm_us"] for x in layers) == pytest.approx(d["exposed_comm_us"])
    assert len(d["channel_utilisation"]) == d["links"]["channels"]


def test_the_released_version_heads_the_changelog():
    """A tag-ready release: the version leaves 0.1.0 and the CHANGELOG's first versioned section (an Unreleased one
    may sit above it) is that version, dated."""
    assert fabric.__version__ != "0.1.0"
    first = next(line for line in (ROOT / "CHANGELOG.md").read_text().splitlines()
                 if re.match(r"## \d+\.\d+", line))
    assert re.fullmatch(rf"## {re.escape(fabric.__version__)} - \d{{4}}-\d{{2}}-\d{{2}}", first), first


def test_manylinux_wheels_are_configured():
    cibw = PYPROJECT["tool"]["cibuildwheel"]
    assert all("manylinux" in b for b in cibw["build"].split()) and "cp311" in cibw["build"]
    assert cibw["linux"]["manylinux-x86_64-image"].startswith("manylinux_")
    assert "fabric-replay" in " ".join(cibw["test-command"])


def test_results_carry_the_source_commit(tmp_path, monkeypatch):
    """In a checkout the meta names the commit (and whether the tree differed from it); outside one, the version
    alone."""
    from fabric import _source
    from fabric.cli.common import version_meta
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        pytest.skip("not a git checkout")
    _source.commit.cache_clear()
    out = tmp_path / "r.json"
    r = CliRunner().invoke(replay_cli, [TOY, "--engine", "analytic", "--quiet", "--json", str(out)])
    assert r.exit_code == 0, r.output
    meta = json.loads(out.read_text())["meta"]
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", meta["commit"]) and meta["commit"][:40] == head.stdout.strip()
    assert version_meta()["commit"] == meta["commit"]
    monkeypatch.setattr(_source, "__file__", str(tmp_path / "site-packages" / "fabric" / "_source.py"))
    _source.commit.cache_clear()
    try:
        assert _source.commit() is None and "commit" not in version_meta()
        assert version_meta()["version"] == fabric.__version__
    finally:
        _source.commit.cache_clear()


def test_setup_py_names_the_setuptools_it_needs(monkeypatch):
    """`python setup.py build_ext --inplace` with a setuptools too old for the SPDX licence is one line naming the
    fix (setuptools' own error is a page of JSON schema)."""
    import runpy

    import setuptools
    monkeypatch.setattr(setuptools, "__version__", "65.5.0")
    with pytest.raises(SystemExit, match=r"setuptools 65\.5\.0 .* pip install 'setuptools>=77'"):
        runpy.run_path(str(ROOT / "setup.py"))
