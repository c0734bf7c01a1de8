"""Golden values of the validated figures (fabric/experiments/validate.py, docs/calibration.md): they must not drift.

Fast cases only: the analytic engine for TPOT, single collectives and probes on the packet engine."""
import json

import pytest
from click.testing import CliRunner

from fabric.config import load_config
from fabric.experiments import validate as V
from fabric.experiments.probe_collective import bus_factor, probe_collective, sizes

REL = 0.03   # golden tolerance: a behaviour-preserving kernel change stays well inside it


@pytest.fixture(scope="module")
def sd():
    return load_config("sd200")


def test_tpot_analytic_golden(sd):
    r = V.replay_trace(V.shipped_trace(), sd, "analytic")
    assert r["tpot_us"] == pytest.approx(8924.6, rel=REL)
    # the step is mostly compute, so TPOT alone would hide a communication regression: hold the split too
    assert r["comm_us"] == pytest.approx(462.0, rel=REL)
    assert r["comm_fraction"] < 0.10                      # figure 2 holds on the fast engine too


def _digest(obj) -> str:
    """sha256 of every array and scalar reachable from a dataclass / dict / list (a Trace, a Topology)."""
    import dataclasses
    import hashlib

    import numpy as np
    h = hashlib.sha256()

    def walk(x):
        if dataclasses.is_dataclass(x):
            x = vars(x)
        if isinstance(x, dict):
            for k in sorted(x, key=str):
                h.update(str(k).encode())
                walk(x[k])
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, np.ndarray):
            h.update(str(x.dtype).encode() + np.ascontiguousarray(x).tobytes())
        else:
            h.update(repr(x).encode())
    walk(obj)
    return h.hexdigest()


def test_replays_leave_the_shared_trace_and_network_as_they_were(sd):
    """validate reads the shipped trace once per process (its workers inherit it) and replays on the shared network:
    a replay must read both, never write them, or the next run on the same objects would differ."""
    from fabric.network import shared
    tr, topo = V._shipped(), shared(sd)
    before = _digest(tr), _digest(topo)
    first = V.replay_trace(tr, sd, "analytic")
    assert (_digest(tr), _digest(topo)) == before
    assert V.replay_trace(V.shipped_trace(), sd, "analytic")["tpot_us"] == first["tpot_us"]


def test_allreduce_14k_golden(sd):
    """Figure 3: the unoptimised baseline is the nccl-like library (was an ad-hoc ring set: 146.0 us, HD 21.8 us)."""
    opt, a = V.allreduce_us(sd, V.AR_BYTES)
    un, b = V.allreduce_us(load_config("sd200", overrides=V.UNOPT), V.AR_BYTES)
    hd, c = V.allreduce_us(load_config("sd200", overrides=V.UNOPT_HD), V.AR_BYTES)
    assert (a, b, c.split("/")[0]) == ("twoshot", "ring/LL/1", "halving_doubling")
    assert opt == pytest.approx(3.74, rel=REL)
    assert un == pytest.approx(95.7, rel=REL)
    assert hd == pytest.approx(19.7, rel=0.05)


def test_scaleout_baseline_runs_nccl_like():
    """Figure 5's scale-out system: scaleout-roce with the nccl-like library (double binary tree across the 8
    hosts: 2 x log2(8) network steps where the hierarchical form's rail rings take 2 x 7; 138.4 us before it)."""
    t, a = V.allreduce_us(load_config(V.SCALEOUT_PRESET, overrides=V.UNOPT), 16384, "analytic")
    assert a == "tree/LL/4" and t == pytest.approx(73.7, rel=REL)


def test_calibration_rows_exist():
    """One row per published collective table, each packaged with the project (CI has no shared/ folder)."""
    assert len(V.CALIBRATION) == 7
    for t in V.CALIBRATION:
        assert (V.CALIBRATION_DIR / t.file).is_file()
        meas = V.calibration_measurements(t)
        assert meas and all(us > 0 for _, _, us in meas)
        assert t.tolerance == (0.10 if t.nodes == 1 else 0.20)
    sizes_of = {t.key: len(V.calibration_measurements(t)) for t in V.CALIBRATION}
    assert sizes_of == {"a100_1x8_g8": 25, "b200_1x8_sym": 31, "h200_2x8_roce": 25, "h200_2x1_roce": 24,
                        "a100ib_1x8": 6, "a100ib_2x1": 6, "a100ib_2x8": 9}


def test_calibration_a100_row_within_tolerance():
    t = next(t for t in V.CALIBRATION if t.key == "a100_1x8_g8")
    r = V.calibration_row(t, "analytic")
    assert r["engine"] == "analytic" and r["sizes"] == 25 and r["system"] == "dgx-a100 gpus_per_process=8"
    assert r["within_tolerance"] and r["geomean_error"] < r["tolerance"] == 0.10
    assert r["geomean_error"] == pytest.approx(0.064, abs=0.01)
    assert "a100_1x8_g8" in V.format_calibration([r])


def test_calibration_rows_within_tolerance_and_misses_reported():
    """The calibration tables are within their tolerance on the analytic engine (the mscclpp 2x1 A100 IB table, 21.5 %
    before the nccl-like AllToAll was paced by its copy loop, included; the B200 symmetric-kernel table was 193 %
    before the symmetric run mode and NVLS; the H200 2x8 table, 17 s of its sizes up to 16 GB, is left to
    fabric-validate); a row above its tolerance is printed as MISS."""
    rows = V.calibration_rows("analytic", [t for t in V.CALIBRATION if t.key != "h200_2x8_roce"], jobs=1)
    for r in rows:
        assert r["within_tolerance"] and r["geomean_error"] < r["tolerance"], (r["key"], r["geomean_error"])
    assert "MISS" not in V.format_calibration(rows)
    assert "MISS" in V.format_calibration([dict(rows[0], within_tolerance=False)])


def test_policy_tier_crossover(sd):
    """The auto tiers over all 64 ranks sit at the packet engine's crossovers (docs/collectives.md §Paths): two-shot
    by loads or stores to 2 MiB, ring at 4 MiB; at every size
    the choice costs the packet engine < 10 % over its fastest (at 2 MiB, where the analytic engine prices two-shot
    11 % below the packet engine, §Both engines at 64 ranks, two-shot takes 7 % longer than ring)."""
    choice = {m: probe_collective(sd, "allreduce", m)["algorithm"] for m in (256 << 10, 1 << 20, 2 << 20, 4 << 20)}
    assert [choice[m][:7] for m in (256 << 10, 1 << 20)] == ["twoshot", "twoshot"] and choice[4 << 20] == "ring"
    for m, alg in choice.items():
        t = {a: probe_collective(sd, "allreduce", m, algorithm=a)["time_us"] for a in ("twoshot", "twoshot_load",
                                                                                       "ring")}
        assert t[alg] < 1.10 * min(t.values()), (m, alg, t)


def test_latency_golden(sd):
    r = V.latency_ns(sd)
    assert r["hops"] == 5 and r["latency_ns"] == pytest.approx(735.0, rel=0.01)


def test_payload_efficiency_golden():
    r = V.link_efficiency(load_config("link"), packets=2000)
    assert r["payload_efficiency"] == pytest.approx(0.9650, abs=0.002)


def test_verdict_reads_published_only_when_judging():
    row = V._verdict("latency", "x", 0.70, "packet")
    assert row["within_tolerance"] and row["published"] == 0.69 and row["unit"] == "us"
    assert not V._verdict("tpot", "x", 7.0, "packet")["within_tolerance"]
    assert V._verdict("comm_share", "x", 4.0, "packet")["within_tolerance"]
    assert not V._verdict("payload_eff", "x", 95.0, "packet")["within_tolerance"]


def test_bus_factor_and_sizes():
    assert bus_factor("allreduce", 64) == pytest.approx(2 * 63 / 64)
    assert bus_factor("alltoall", 64) == pytest.approx(63 / 64)
    assert sizes(16384, 65536) == [16384, 32768, 65536]


def test_collective_cli_json(tmp_path):
    from fabric.cli.probe_collective import collective_cmd
    out = tmp_path / "c.json"
    r = CliRunner().invoke(collective_cmd, ["--op", "allreduce", "--min-bytes", "8192", "--max-bytes", "16384",
                                            "--ranks", "8", "--json", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["rows"]      # {"rows": [...], "meta": {...}} (issue 22 item 4)
    assert [x["bytes"] for x in rows] == [8192, 16384]
    assert set(rows[0]) == {"bytes", "time_us", "algbw_gbps", "busbw_gbps", "algorithm", "protocol", "channels"}
    assert rows[0]["busbw_gbps"] == pytest.approx(rows[0]["algbw_gbps"] * 2 * 7 / 8)
    bad = CliRunner().invoke(collective_cmd, ["--op", "allreduce"])
    assert bad.exit_code == 2


def test_serving_rows_judge_the_published_serving_figures(monkeypatch):
    """Figures 8 and 9 come from fabric.experiments.serving (run in tests/test_serving.py); here only their judging."""
    from fabric.experiments import serving as S
    fake = dict(scaling=dict(engine="analytic", change_for_16="weights in fp8",
                             speedups=[dict(compare="64 x bf16 vs 16 x fp8", tpot_speedup=1.1,
                                            throughput_speedup=1.5)]),
                context=dict(engine="analytic", tpot_mean_us=8900.0, tpot_first_us=8860.0, tpot_last_us=8950.0,
                             tokens_per_s=112.4),
                batch=dict(rows=[dict(batch=1, tpot_us=8865.0, tokens_per_s_per_user=112.8,
                                      tokens_per_s_per_node=112.8, memory_gib=23.7)]))
    monkeypatch.setattr(S, "serving", lambda engine="analytic", run_step=None: fake)
    rows = []
    V.serving_rows(rows)
    by = {r["key"]: r for r in rows}
    assert not by["speedup_16_64"]["within_tolerance"] and by["speedup_16_64"]["emulated"] == 1.5
    assert by["tpot_1024"]["within_tolerance"] and by["tpot_1024"]["emulated"] == pytest.approx(8.9)
    assert "112.8" in V.format_batch_sweep(fake["batch"]).splitlines()[1]


def test_each_distinct_serving_step_runs_once():
    """validate runs the serving experiments' steps ahead, in its pool: a step asked with its defaults spelled out is
    the same step, and the experiments' repeats (batch 1 at context 4096 in all three) run once."""
    assert V._step_key(64) == V._step_key(64, batch=1, context=4096, weight_dtype="bf16")
    assert V._step_key(64, batch=2) != V._step_key(64)
    from fabric.experiments import serving as S
    asked = []

    def record(tp, **kw):
        asked.append(V._step_key(tp, **kw))
        return __import__("collections").defaultdict(lambda: 1.0)
    S.serving(run_step=record)
    steps = V._serving_steps()
    assert sorted(steps) == sorted(set(asked)) and len(steps) < len(asked)


def test_runs_are_distinct_longest_first_and_cover_every_table_size():
    runs = V.runs(sensitivity=True)
    assert len(set(runs)) == len(runs)
    costs = [V._cost(r) for r in runs]
    assert costs == sorted(costs, reverse=True)
    cal = [r for r in runs if r[0] == "calibration"]
    assert len(cal) == sum(len(V.calibration_measurements(t)) for t in V.CALIBRATION)
    assert sum(r[0] == "sensitivity" for r in runs) == 2 * len(V.SENSITIVITY)
    assert ("replay",) in runs and not any(r[0] == "sensitivity" and r[1] is None for r in runs)
    assert not any(r[0] in ("step", "sensitivity") for r in V.runs(serving=False))


def test_calibration_row_is_its_points():
    """A calibration row built from its sizes run one by one (as validate's pool does) is calibration_row."""
    t = next(t for t in V.CALIBRATION if t.key == "a100ib_1x8")
    pts = [V.calibration_point(t, i) for i in range(len(V.calibration_measurements(t)))]
    assert V._calibration_summary(t, pts, "analytic") == V.calibration_row(t)
