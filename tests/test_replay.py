"""Replay end to end: report contents, zero drops, the critical-path identity, engine agreement, bad input."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from fabric import collectives, sim
from fabric.cli.replay import main as replay_cli
from fabric.config import load_config
from fabric.network import build
from fabric.replay import replay
from fabric.taskgraph import GraphBuilder

TOY = "traces/toy-mla-tp8.h5"


@pytest.fixture(scope="module")
def toy_reports():
    cfg = load_config(preset="sd200")
    return {e: replay(TOY, cfg, engine=e) for e in ("packet", "analytic")}


def test_report_has_the_promised_keys(toy_reports):
    r = toy_reports["packet"]
    for key in ("tpot_us", "tokens_per_s", "step_time_us", "compute_us", "exposed_comm_us", "comm_fraction",
                "collectives", "links", "packets_delivered", "packets_dropped", "packets_duplicated", "events",
                "wall_s", "engine", "preset", "seed"):
        assert key in r, key
    assert r["packets_dropped"] == 0 and r["packets_duplicated"] == 0 and r["packets_delivered"] > 0


def test_step_is_compute_plus_exposed_comm_on_the_critical_path(toy_reports):
    for r in toy_reports.values():
        assert r["compute_us"] + r["exposed_comm_us"] == pytest.approx(r["step_time_us"], abs=1e-6)
        assert 0 < r["compute_us"] <= r["step_time_us"]
        assert r["tokens_per_s"] == pytest.approx(r["batch"] / (r["tpot_us"] * 1e-6))


def test_collective_overheads_count_as_communication_on_the_critical_path():
    """compute 10 us -> AllReduce (1 us launch, transfers, reduce) -> compute 10 us on two ranks: the critical path
    holds exactly 20 us of model compute; the collective, launch included, is exposed communication."""
    from fabric.report import critical_path
    from fabric.taskgraph import COMPUTE
    cfg = load_config(preset="sd200", overrides={"collectives.launch_ns": 1000.0})
    b = GraphBuilder(2)
    before = b.add_tasks(COMPUTE, [0, 1], stream=0, duration_ps=10_000_000)
    start, done, _ = b.add_fragment(collectives.template("allreduce", "oneshot", 4096, 2, cfg), [0, 1])
    after = b.add_tasks(COMPUTE, [0, 1], stream=0, duration_ps=10_000_000)
    b.add_edges(before, start)
    b.add_edges(done, after)
    g = b.build()
    for engine in ("packet", "analytic"):
        r = sim.run(cfg, build(cfg), g, engine=engine)
        cp = critical_path(g, r.task_start_ps, r.task_end_ps)
        assert cp["compute_ps"] == 20_000_000
        assert cp["comm_ps"] == r.task_end_ps.max() - 20_000_000 >= 1_000_000


def test_run_step_is_the_step_replay_reports(toy_reports):
    """fabric.replay.run_step, the one step pipeline: the graph, run and critical-path split replay reports, each
    stage handed to the timer as it ends, in order (the kernel's run is the RunResult's wall time)."""
    from fabric import trace as tracemod
    from fabric.replay import run_step
    stages = []
    run = run_step(tracemod.read(TOY), load_config(preset="sd200"), "analytic",
                   timer=lambda stage, seconds: stages.append((stage, seconds)))
    r = toy_reports["analytic"]
    assert (run.summary["step_us"], run.summary["compute_us"], run.summary["exposed_comm_us"]) == \
        (r["tpot_us"], r["compute_us"], r["exposed_comm_us"])
    assert run.result.engine == "analytic" and run.graph.n_tasks == r["tasks"] and "layers" not in run.summary
    assert [s for s, _ in stages] == ["lower", "engine", "run", "report"] and min(t for _, t in stages) >= 0
    assert dict(stages)["run"] == run.result.wall_s and dict(stages)["lower"] == run.lower_s
    assert run.baseline_us is None and run.migration is None and run.recorded is None


def test_collective_bytes_by_kind():
    """A one-shot AllReduce of M bytes over n ranks stores M (and the folded flag) from each rank to each other
    one; a step's bytes add up over its kinds."""
    from fabric import trace as tracemod
    from fabric.lower import lower
    from fabric.report import collective_bytes
    from fabric.taskgraph import TRANSFER
    cfg = load_config(preset="sd200")
    n, M = 4, 4096
    assert collective_bytes(one_collective("allreduce", "oneshot", M, n, cfg)) == \
        {"allreduce": n * (n - 1) * (M + cfg.collectives.flag_bytes)}
    g = lower(tracemod.read(TOY), cfg)
    got = collective_bytes(g)
    assert set(got) == {m.kind for m in g.coll_meta} == {"allreduce", "allgather"}
    assert sum(got.values()) == g.nbytes[(g.kind == TRANSFER) & (g.coll >= 0)].sum()
    assert collective_bytes(GraphBuilder(2).build()) == {}


def test_engines_agree_on_the_toy_step(toy_reports):
    p, a = toy_reports["packet"]["step_time_us"], toy_reports["analytic"]["step_time_us"]
    assert abs(p - a) / p < 0.10


def one_collective(kind, algorithm, nbytes, n, cfg):
    frag = collectives.template(kind, algorithm, nbytes, n, cfg)
    b = GraphBuilder(n)
    b.add_fragment(frag, np.arange(n))
    return b.build()


@pytest.mark.parametrize("kind, algorithm, nbytes", [
    ("allreduce", "oneshot", 4096), ("allreduce", "twoshot", 14336), ("allreduce", "ring", 262144),
    ("allreduce", "halving_doubling", 65536), ("allgather", "direct", 65536), ("allgather", "ring", 65536),
    ("reduce_scatter", "direct", 65536), ("alltoall", "direct", 65536), ("broadcast", "direct", 16384),
])
def test_packet_and_analytic_engines_agree_within_10_percent(kind, algorithm, nbytes):
    """On an uncongested fabric (8 ranks in one host domain, behind one switch) the engines agree."""
    cfg = load_config(preset="sd200")
    topo = build(cfg)
    g = one_collective(kind, algorithm, nbytes, 8, cfg)
    t = {e: sim.run(cfg, topo, g, engine=e).task_end_ps.max() for e in ("packet", "analytic")}
    assert abs(t["packet"] - t["analytic"]) / t["packet"] < 0.10, t


def test_golden_toy_step(toy_reports):
    """Regression: the toy trace's step on sd200 (update deliberately when the model changes)."""
    assert toy_reports["packet"]["step_time_us"] == pytest.approx(GOLDEN_TOY_PACKET_US, rel=1e-3)
    assert toy_reports["analytic"]["step_time_us"] == pytest.approx(GOLDEN_TOY_ANALYTIC_US, rel=1e-3)


def test_same_seed_same_report():
    cfg = load_config(preset="sd200", overrides={"phy.ber": 1e-7})
    a, b = replay(TOY, cfg), replay(TOY, cfg)
    assert a["step_time_us"] == b["step_time_us"] and a["events"] == b["events"]
    assert a["links"] == b["links"]


@pytest.mark.parametrize("args, needle", [
    (["--preset", "sd2000"], "did you mean sd200"),
    (["--set", "phy.lane_rate=3"], "did you mean phy.lane_rate_gbps"),
    (["--set", "phy.lanes=eight"], "phy.lanes"),
    (["--set", "switch.latency_ns=-1"], "switch.latency_ns"),
    (["no-such-file.h5"], "no-such-file.h5"),
    (["README.md"], "README.md"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    r = CliRunner().invoke(replay_cli, args)
    assert r.exit_code == 2, r.output
    out = (getattr(r, "stderr", "") or r.output).strip()
    assert needle in out and len(out.splitlines()) == 1 and "Traceback" not in out


def test_json_output(tmp_path):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(replay_cli, [TOY, "--engine", "analytic", "--quiet", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["engine"] == "analytic" and data["preset"] == "sd200" and data["tpot_us"] > 0


GOLDEN_TOY_PACKET_US = 180.621283     # sd200 defaults, seed 1, traces/toy-mla-tp8.h5 (last moved when the
GOLDEN_TOY_ANALYTIC_US = 180.644283   # sd200-accelerator moved to the shape-aware kernel model, issue 17)
