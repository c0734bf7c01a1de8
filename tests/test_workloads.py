"""The built-in workloads at 128-1024 ranks (fabric.capture.workloads) and the script that captures them."""
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("h5py")

from fabric import trace as T  # noqa: E402
from fabric.capture.workloads import WORKLOADS  # noqa: E402
from fabric.config import load_config  # noqa: E402
from fabric.network import shared  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "capture_workloads.py"


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_each_workload_fits_its_preset(name):
    """A workload's ranks (max(tp, ep) per replica, times the replicas) fill its preset's serving accelerators."""
    spec = WORKLOADS[name]
    c = spec["capture"]
    ranks = max(c["tp"], c.get("ep", 1)) * c.get("replicas", 1)
    topo = shared(load_config(preset=spec["preset"]))
    assert ranks == topo.n_ranks - topo.n_spares, name


def test_script_captures_a_workload_and_refuses_unknown_names(tmp_path):
    bad = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "no-such", "kimi-k2-tp64-ep128"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown workload(s) 'no-such'" in bad.stderr
    assert not list(tmp_path.iterdir())           # refused before anything was captured
    ok = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "kimi-k2-tp64-ep128"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    path = tmp_path / "kimi-k2-tp64-ep128.h5"
    assert f"fabric-replay {path} --preset sd200-128" in ok.stdout
    tr = T.read(path)
    assert tr.n_ranks == 128 and tr.meta["model"] == "kimi-k2"
