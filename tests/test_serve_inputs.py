"""fabric-serve's inputs: workloads (Azure CSV, Poisson, closed loop, distributions) and plans, and every bad one
refused in one line with exit code 2 before anything is written."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from fabric.errors import ConfigError
from fabric.serve.plan import check_plan, parse_plan
from fabric.serve.workload import BUILTIN, parse_workload, read_trace


def test_shipped_trace_reads_as_published():
    t, prompt, out = read_trace(BUILTIN["azure-conv"])
    assert len(t) == 10_000 and t[0] == 0 and np.all(np.diff(t) >= 0)
    assert 1000 < prompt.mean() < 1300 and 150 < out.mean() < 300       # README: 1,155 and 211 over the file
    assert 1780 < t[-1] < 1790                                          # 18:15:46.68 -> 18:45:34.11


def test_rate_rescales_arrivals():
    wl = parse_workload("azure-conv", requests=500, rate=20.0)
    assert wl.n == 500 and abs(wl.meta["mean_rate_per_s"] - 20.0) < 1e-9


def test_duration_keeps_early_arrivals():
    wl = parse_workload("azure-conv", duration_s=60.0)
    assert wl.arrival_s.max() < 60.0 and wl.n > 100


def test_poisson_is_seeded_and_has_its_rate():
    a = parse_workload("poisson:rate=50,in=uniform:10-20,out=lognormal:100,0.5", requests=4000, seed=3)
    b = parse_workload("poisson:rate=50,in=uniform:10-20,out=lognormal:100,0.5", requests=4000, seed=3)
    c = parse_workload("poisson:rate=50,in=uniform:10-20,out=lognormal:100,0.5", requests=4000, seed=4)
    assert np.array_equal(a.arrival_s, b.arrival_s) and not np.array_equal(a.arrival_s, c.arrival_s)
    assert abs(4000 / a.arrival_s[-1] - 50) < 5
    assert a.prompt_tokens.min() >= 10 and a.prompt_tokens.max() <= 20
    assert abs(a.output_tokens.mean() - 100) < 5                        # MEAN is the mean


def test_empirical_draws_from_a_trace(tmp_path):
    f = tmp_path / "w.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,7,3\n"
                 "2023-11-16 18:15:47.1,9,5\n")
    wl = parse_workload(f"closed:users=2,in=empirical:{f},out=empirical:{f}", requests=50)
    assert set(wl.prompt_tokens) <= {7, 9} and set(wl.output_tokens) <= {3, 5} and wl.users == 2


@pytest.mark.parametrize("text, ranks, dp", [("tp=64", 64, 1), ("attn=dp,ep=64", 64, 64), ("attn=tp8,ep=64", 64, 8),
                                             ("tp=16,replicas=4", 16, 1), ("attn=dp,ep=16,tbo=on", 16, 16)])
def test_plans(text, ranks, dp):
    p = parse_plan(text)
    assert p.ranks == ranks and p.dp == dp


BAD_CSV = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,7,3\n2023-11-16 18:15:47.1,nine,5\n"


@pytest.mark.parametrize("args, message", [
    (["--workload", "{csv}"], "line 3"),
    (["--workload", "poisson:rate=-1,in=10,out=10", "--requests", "5"], "positive"),
    (["--workload", "poisson:rate=0,in=10,out=10", "--requests", "5"], "positive"),
    (["--rate", "0"], "--rate must be > 0"),
    (["--slo-ttft-ms", "0"], "--slo-ttft-ms must be > 0"),
    (["--slo-tpot-ms", "-3"], "--slo-tpot-ms must be > 0"),
    (["--plan", "tp=64,color=red"], "unknown key 'color'"),
    (["--plan", "tp=3"], "does not divide the 128 heads"),
    (["--plan", "attn=dp,ep=48"], "does not divide the 256 routed experts"),
    (["--plan", "tp=64,replicas=2"], "needs 128 ranks"),
    (["--plan", "tp=8", "--model", "deepseek-r1"], "does not fit in memory"),
    (["--workload", "nope.txt"], "not a CSV file"),
    (["--workload", "poisson:rate=5,in=10"], "missing out"),
    (["--workload", "poisson:rate=5,in=gamma:3,out=10", "--requests", "3"], "unknown distribution"),
    (["--workload", "poisson:rate=5,in=10,out=20000000", "--requests", "3"], "token counts"),
    (["--workload", "poisson:rate=5,in=1000000,out=10", "--requests", "3"], "could never finish"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    from fabric.cli.serve import main
    csv = tmp_path / "bad.csv"
    csv.write_text(BAD_CSV)
    out = tmp_path / "r.json"
    args = [a.replace("{csv}", str(csv)) for a in args] + ["--json", str(out), "--quiet"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], res.output
    assert not out.exists()


def test_plan_against_model():
    from fabric.capture import resolve_model
    from fabric.capture.spec import spec_from_config
    spec = spec_from_config(resolve_model("llama-3-70b")[1], "llama-3-70b")
    with pytest.raises(ConfigError, match="dense"):
        check_plan(parse_plan("attn=tp8,ep=64"), spec, 64, "sd200")
