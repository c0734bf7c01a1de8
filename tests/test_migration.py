"""Task migration to spare accelerators (fabric.faults.migration, --migrate; docs/faults.md §Task migration): a rank a
fault cuts off hands its unfinished work to a spare and the step finishes, every task completed once, nothing
lost; or one line says no spare is left; never a hang."""
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric import sim
from fabric.faults import migration
from fabric.config import load_config, with_overrides
from fabric.errors import ConfigError
from fabric.faults import PartitionError
from fabric.network import build
from fabric.taskgraph import COMPUTE, TRANSFER

from strategies import permanent_faults
from test_faults import invoke

SMALL = {"topology.kind": "sd200", "topology.sd200.switch_mesh_dims": "2x1x1", "topology.accels_per_domain": 2,
         "manager.migrate": True}


def ring_graph(R: int, layers: int, nbytes: int = 6000, compute_ps: int = 2_000_000, loads: bool = False) -> dict:
    """Per layer, every rank computes, then stores to the next rank; a rank's next compute waits for its own
    compute and for the store into it: a chain of dependencies across ranks, as a decode step's layers. loads:
    every other layer's transfers are loads (rank r reads from r + 1) instead."""
    kind, rank, peer, dur, edges, op = [], [], [], [], [], []
    last = [-1] * R
    for layer in range(layers):
        comp = []
        for r in range(R):
            comp.append(len(kind))
            kind.append(COMPUTE), rank.append(r), peer.append(-1), dur.append(compute_ps), op.append(0)
            edges += [(last[r], comp[r])] if last[r] >= 0 else []
        for r in range(R):
            t = len(kind)
            kind.append(TRANSFER), rank.append(r), peer.append((r + 1) % R), dur.append(0)
            op.append(int(loads and layer % 2))
            edges.append((comp[r], t))
            last[(r + 1) % R] = t
    n = len(kind)
    pred = np.array([a for a, _ in edges], np.int64)
    succ = np.array([b for _, b in edges], np.int64)
    order = np.argsort(pred, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(pred, minlength=n), out=ptr[1:])
    kind = np.array(kind, np.int8)
    return dict(kind=kind, rank=np.array(rank, np.int32), peer=np.array(peer, np.int32),
                stream=np.where(kind == COMPUTE, 0, -1).astype(np.int32),
                nbytes=np.where(kind == TRANSFER, nbytes, 0).astype(np.int64), duration_ps=np.array(dur, np.int64),
                op=np.array(op, np.int8), coll=np.full(n, -1, np.int32), succ_ptr=ptr,
                succ_idx=succ[order].astype(np.int32), n_deps=np.bincount(succ, minlength=n).astype(np.int32))


def migrate(over: dict, specs, graph=None):
    cfg = with_overrides(load_config(overrides={**SMALL, **over}), {"faults": tuple(specs)})
    topo = build(cfg)
    graph = graph if graph is not None else ring_graph(topo.n_ranks - topo.n_spares, 6)
    runs = []
    res, rec = migration.run(cfg, topo, graph, transfers=True, runs=runs)
    return cfg, topo, graph, res, rec, runs


def check_segments(cfg, runs, n_tasks):
    """Each segment delivered what it delivered once and in order, lost nothing (what was in flight when it
    ended is counted as abandoned), into the right memory; the last one finished every task it had; every task of
    the step is kept from exactly one segment."""
    for seg in runs:
        r = seg["result"]
        t, f = r.totals, r.faults
        assert t["duplicates"] == 0 and t["out_of_order"] == 0 and r.counters["credit_errors"].sum() == 0
        assert t["carved"] == t["delivered"] + f.get("packets_reclaimed", 0) + t["packets_live"]
        xf = r.transfers
        whole = (xf["delivered_B"] == xf["total_B"]) & (xf["kind"] != 1)
        for i in np.flatnonzero(whole):
            assert int(xf["csum"][i]) == sim.expected_csum(int(xf["dst"][i]), int(xf["src"][i]),
                                                           int(xf["total_B"][i]), cfg.txn.max_payload_bytes)
    last = runs[-1]["result"]
    assert last.outcome == "done" and last.totals["tasks_left"] == 0 and last.totals["packets_live"] == 0
    kept = np.concatenate([seg["kept"] for seg in runs])
    assert (np.sort(kept) == np.arange(n_tasks)).all()                     # each task completed exactly once


def test_spares_hang_off_the_domain_switches_round_robin_and_only_sd200_has_them():
    topo = build(load_config(overrides={**SMALL, "topology.sd200.spares": 3}))
    assert topo.n_ranks == 7 and topo.n_spares == 3
    assert topo.node_names[4:7] == ["spare0", "spare1", "spare2"]
    sw = [topo.node_names[topo.ch_dst[c]] for c in range(topo.n_channels) if topo.ch_src[c] in (4, 5, 6)]
    assert sw == ["sw0", "sw0", "sw1", "sw1", "sw0", "sw0"]          # ports_per_accel = 2 each
    with pytest.raises(ConfigError, match="sd200 builder only"):
        load_config(overrides={"topology.kind": "accel_mesh", "topology.sd200.spares": 1})


def test_a_cut_off_rank_migrates_to_a_spare_in_its_domain_and_the_step_finishes():
    over = {"topology.sd200.spares": 2, "manager.migration_ns": 20_000}
    specs = ["link:acc1-sw0:down@3"]
    cfg, topo, graph, res, rec, runs = migrate(over, specs)
    check_segments(cfg, runs, len(graph["kind"]))
    (e,) = rec["events"]
    assert e["moves"] == {"acc1": "spare0"}                           # spare0 hangs off sw0, as acc1 does
    assert e["fault_us"] == 3 and e["partition_us"] == pytest.approx(3 + (cfg.manager.detection_ns +
                                                                          cfg.manager.route_update_ns) / 1e3)
    assert e["takeover_us"] == pytest.approx(e["partition_us"] + 20)
    assert (res.task_end_ps >= 0).all() and res.faults["packets_lost"] == 0
    # what the second segment ran started at the takeover, on the spare, never on the cut-off rank
    later = res.task_start_ps >= e["takeover_us"] * 1e6
    assert later.sum() == len(runs[1]["graph"]["kind"])
    assert 1 not in runs[1]["graph"]["rank"].tolist() and 4 in runs[1]["graph"]["rank"].tolist()
    # acc1's tasks kept are those completed before the fault
    on1 = (graph["rank"] == 1) & ~later
    assert (res.task_end_ps[on1] <= 3e6).all()
    base = sim.run(with_overrides(cfg, {"faults": ()}), topo, graph)
    assert rec["step_us"] == pytest.approx(res.task_end_ps.max() / 1e6)
    assert rec["step_us"] > base.now_ps / 1e6 + 20
    assert rec["degraded_us"] == pytest.approx(e["takeover_us"] - 3)
    assert rec["fault_to_end_us"] == pytest.approx(rec["step_us"] - 3)


def test_auto_migration_time_is_the_state_over_the_spares_ports():
    cfg, topo, graph, res, rec, runs = migrate({"topology.sd200.spares": 1}, ["link:acc1-sw0:down@3"])
    (e,) = rec["events"]
    rate = sum(1e3 / topo.ch_ps_per_byte[c] for c in range(topo.n_channels) if topo.ch_src[c] == 4)   # GB/s
    assert e["migration_us"] == pytest.approx(cfg.manager.migration_state_gb / rate * 1e6, rel=1e-6)


def test_a_second_partition_migrates_again_and_without_a_spare_left_one_line_says_so():
    over = {"topology.sd200.spares": 2, "manager.migration_ns": 5000}
    specs = ["link:acc1-sw0:down@1", "link:acc2-sw1:down@100"]
    cfg, topo, graph, res, rec, runs = migrate(over, specs, ring_graph(4, 40, loads=True))
    check_segments(cfg, runs, len(graph["kind"]))
    assert [e["moves"] for e in rec["events"]] == [{"acc1": "spare0"}, {"acc2": "spare1"}]
    with pytest.raises(migration.MigrationError, match="no reachable spare is left for acc2") as err:
        migrate({"topology.sd200.spares": 1, "manager.migration_ns": 5000}, specs, ring_graph(4, 40))
    assert len(str(err.value).splitlines()) == 1


def test_a_switch_down_moves_all_its_ranks_to_spares_elsewhere():
    over = {"topology.sd200.spares": 4, "manager.migration_ns": 5000}
    cfg, topo, graph, res, rec, runs = migrate(over, ["switch:sw1:down@2"])
    check_segments(cfg, runs, len(graph["kind"]))
    (e,) = rec["events"]
    assert e["moves"] == {"acc2": "spare0", "acc3": "spare2"}        # spare1 and spare3 hang off sw1


# ---------------------------------------------------------------- random fabrics, random faults, --migrate

@st.composite
def migration_case(draw):
    over = {**SMALL, "topology.sd200.switch_mesh_dims": draw(st.sampled_from(["2x1x1", "2x2x1", "3x1x1"])),
            "topology.accels_per_domain": draw(st.integers(1, 2)), "topology.sd200.spares": draw(st.integers(0, 3)),
            "topology.ports_per_accel": draw(st.integers(1, 2)),
            "manager.detection_ns": draw(st.sampled_from([0.0, 100.0, 1000.0])),
            "manager.route_update_ns": draw(st.sampled_from([0.0, 500.0, 3000.0])),
            "manager.migration_ns": draw(st.sampled_from([0.0, 1000.0, 30000.0])),
            "txn.max_payload_bytes": draw(st.sampled_from([256, 1024])), "sim.seed": draw(st.integers(0, 1000))}
    cfg = load_config(overrides=over)
    topo = build(cfg)
    graph = ring_graph(topo.n_ranks - topo.n_spares, draw(st.integers(1, 8)), draw(st.integers(1, 20000)),
                       draw(st.sampled_from([0, 500_000, 3_000_000])), draw(st.booleans()))
    return cfg, graph, draw(permanent_faults(topo, horizon_us=30.0))


def run_migration_case(case):
    cfg, graph, specs = case
    cfg = with_overrides(cfg, {"faults": specs})
    topo = build(cfg)
    runs = []
    try:
        res, rec = migration.run(cfg, topo, graph, transfers=True, runs=runs)
    except migration.MigrationError as e:
        assert "no reachable spare is left" in str(e) and len(str(e).splitlines()) == 1
        return
    check_segments(cfg, runs, len(graph["kind"]))
    assert (res.task_end_ps >= 0).all() and (res.task_start_ps <= res.task_end_ps).all()
    assert res.faults["packets_lost"] == 0
    assert len(rec["events"]) >= len(runs) - 1           # a takeover may come after the rest of the step ended
    assert all(e["takeover_us"] > e["partition_us"] >= e["fault_us"] for e in rec["events"])
    pred = np.repeat(np.arange(len(graph["kind"])), np.diff(graph["succ_ptr"]))
    assert (res.task_end_ps[pred] <= res.task_start_ps[graph["succ_idx"]]).all()     # every dependency respected


@given(migration_case())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_faults_with_migration_finish_every_task_once_or_say_no_spare_is_left(case):
    run_migration_case(case)


@pytest.mark.benchmark
@pytest.mark.timeout(7200)
@given(migration_case())
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_ten_thousand_random_migration_scenarios(case):
    run_migration_case(case)


# ---------------------------------------------------------------- command line

@pytest.mark.parametrize("args, needle", [
    (["--fault", "link:acc3-sw0:down@100"], "--set topology.sd200.spares=N"),
    (["--set", "topology.sd200.spares=1", "--fault", "switch:sw5:down@200"], "no reachable spare is left for acc41"),
    (["--set", "topology.sd200.spares=1", "--set", "topology.kind=accel_mesh"], "sd200 builder only"),
    (["--set", "topology.sd200.spares=1", "--timeline", "t.json"], "--timeline cannot draw"),
])
def test_migrate_errors_are_one_line_and_exit_code_2(args, needle, tmp_path, monkeypatch):
    from fabric.cli.replay import main
    monkeypatch.chdir(tmp_path)
    r, err = invoke(main, ["--quiet", "--migrate", *args])
    assert r.exit_code == 2 and needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_replay_migrates_a_cut_off_rank_and_reports_it(tmp_path):
    from fabric.cli.replay import main
    out = tmp_path / "r.json"
    r, _ = invoke(main, ["--migrate", "--fault", "link:acc3-sw0:down@4400", "--set", "topology.sd200.spares=8",
                         "--json", str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads(out.read_text())
    m, f = rep["migration"], rep["faults"]
    (e,) = m["events"]
    assert e["moves"] == {"acc3": "spare0"} and e["fault_us"] == 4400 and e["takeover_us"] > e["partition_us"]
    assert m["tpot_us"] == rep["tpot_us"] > m["tpot_no_fault_us"] + e["migration_us"] * 0.99
    assert m["degraded_us"] == pytest.approx(e["takeover_us"] - 4400)
    assert m["fault_to_end_us"] == pytest.approx(m["tpot_us"] - 4400)
    assert f["packets_lost"] == 0 and f["packets_duplicated"] == 0 and rep["packets_dropped"] == 0
    (rec,) = f["applied"]
    assert rec["rerouted"]["cut_off"] == ["acc3"] and rec["rerouted"]["at_us"] == e["partition_us"]
    assert "acc3 -> spare0" in r.output and "acc3 cut off, migrated" in r.output and "degraded" in r.output


def test_without_migrate_a_partition_still_stops_the_run():
    cfg = with_overrides(load_config(overrides={**SMALL, "manager.migrate": False, "topology.sd200.spares": 2}),
                         {"faults": ("link:acc1-sw0:down@3",)})
    topo = build(cfg)
    with pytest.raises(PartitionError, match="acc1 cannot reach"):
        sim.run(cfg, topo, ring_graph(4, 6))
