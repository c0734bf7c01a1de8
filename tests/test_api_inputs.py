"""Issue 33 item 6: the Python API and the commands take what a user has at hand. replay() runs an in-memory Trace
(what capture() returns) as well as a file or a shipped trace's name; a result is labelled with the config it ran
(a --config for a DGX node is not "sd200"); --hf-config takes a model folder and names the model from its config;
shipped traces and calibration tables are named without a checkout path."""
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabric import shipped, trace as T
from fabric.capture import capture, resolve_model
from fabric.config import load_config, preset_of
from fabric.errors import ConfigError, TraceError
from fabric.replay import replay

MODELS = Path(__file__).resolve().parents[1] / "fabric" / "capture" / "models"


@pytest.fixture(scope="module")
def toy():
    return capture("toy-mla", tp=8, context=128)


def test_replay_takes_an_in_memory_trace_like_its_file(toy, tmp_path):
    cfg = load_config("dgx-h100")
    T.write(tmp_path / "toy.h5", toy)
    from_file = replay(str(tmp_path / "toy.h5"), cfg, engine="analytic")
    in_memory = replay(toy, cfg, engine="analytic")
    assert in_memory["trace"] is None and from_file["trace"] == str(tmp_path / "toy.h5")
    assert in_memory["tpot_us"] == from_file["tpot_us"] > 0 and in_memory["model"] == "toy-mla"


def test_replay_refuses_a_broken_trace_and_other_things(toy):
    broken = T.Trace(meta=dict(toy.meta, batch=-1), n_ranks=toy.n_ranks, groups=toy.groups, ops=toy.ops)
    with pytest.raises(TraceError, match="the in-memory trace is not valid .*batch=-1"):
        replay(broken, load_config("dgx-h100"), engine="analytic")
    with pytest.raises(ConfigError, match="not a dict"):
        replay({"ops": []}, load_config("dgx-h100"), engine="analytic")


def test_the_result_is_labelled_with_the_config_it_ran(toy):
    assert replay(toy, load_config("dgx-h100"), engine="analytic")["preset"] == "dgx-h100"
    custom = load_config("dgx-h100", overrides={"phy.ber": 1e-9})
    assert preset_of(custom) is None and preset_of(load_config("sd200", overrides={"sim.seed": 9})) == "sd200"
    assert replay(toy, custom, engine="analytic")["preset"] == "custom hgx config"


def test_a_config_run_names_its_file_in_the_header(tmp_path):
    from fabric.cli.replay import main
    p = tmp_path / "dgx-node.toml"
    p.write_text('[topology]\nkind = "hgx"\n')
    r = CliRunner().invoke(main, ["toy-mla-tp8", "--engine", "analytic", "--config", str(p), "--json",
                                  str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("toy-mla on dgx-node.toml over preset sd200 (8 ranks"), r.stdout
    assert json.loads((tmp_path / "r.json").read_text())["meta"]["config"]["topology"]["kind"] == "hgx"


def test_hf_config_takes_a_model_folder_and_names_the_model_from_it(tmp_path):
    folder = tmp_path / "snapshots" / "0123abcd"
    folder.mkdir(parents=True)
    shutil.copy(MODELS / "toy-mla.json", folder / "config.json")
    name, cfg = resolve_model(hf_config=str(folder))
    assert name == "deepseek_v3" and cfg["model_type"] == "deepseek_v3"       # from the config, not "0123abcd"
    named = dict(json.loads((MODELS / "toy-mla.json").read_text()), _name_or_path="org/Toy-MLA")
    (folder / "config.json").write_text(json.dumps(named))
    assert capture(hf_config=str(folder), tp=8, context=128).meta["model"] == "org/Toy-MLA"
    with pytest.raises(ConfigError, match="holds no config.json"):
        resolve_model(hf_config=str(tmp_path))


def test_shipped_traces_and_tables_by_name():
    assert "toy-mla-tp8" in shipped.traces() and "deepseek-r1-decode-tp64" in shipped.traces()
    assert Path(shipped.trace_path("toy-mla-tp8")).name == "toy-mla-tp8.h5"
    assert Path(shipped.calibration_path("a100-8x")).name == "1node_8xA100-SXM4-80GB_allreduce_8B-128MB.txt"
    assert set(shipped.calibration_tables()) >= {"a100-8x", "b200-8x", "h200-2x8", "h200-2x1"}
    assert shipped.trace_path("no/such.h5") == "no/such.h5"          # a path stays a path: its reader says more
    with pytest.raises(ConfigError, match="did you mean toy-mla-tp8"):
        shipped.trace_path("toy-mla")


def test_commands_take_the_names():
    from fabric.cli.trace import main as trace_main
    r = CliRunner().invoke(trace_main, ["info", "toy-mla-tp8"])
    assert r.exit_code == 0 and "model toy-mla, 8 ranks" in r.stdout, r.output
    from fabric.experiments import nccl_tests
    assert nccl_tests.read(shipped.calibration_path("a100-8x")).rows
