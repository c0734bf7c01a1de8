"""Permanent faults at run time (fabric.faults, faults.pxi, routing.reroute): links and switches that die, lose
lanes or flap mid-run; the fabric manager reroutes and rewinds flows; nothing is lost or duplicated, or the run
reports a partition (docs/faults.md)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric import sim
from fabric.config import load_config, with_overrides
from fabric.errors import ConfigError
from fabric.faults import PartitionError, parse, resolve
from fabric.network import build
from fabric.routing import check_deadlock_free, cut_off_ranks, path_dead, reroute
from fabric.taskgraph import transfer_graph

from strategies import TOPOLOGIES, permanent_faults


def check_exactly_once(cfg, r):
    """Every byte of every transfer delivered once, in order, into the right memory; nothing lost or leaked."""
    t = r.totals
    assert r.outcome == "done" and t["tasks_left"] == 0 and t["packets_live"] == 0
    assert t["duplicates"] == 0 and t["out_of_order"] == 0
    f = r.faults
    assert f["packets_lost"] == 0 and t["carved"] == t["delivered"] + f["packets_reclaimed"]
    xf = r.transfers
    assert (xf["delivered_B"] == xf["total_B"]).all()
    for i in np.flatnonzero(xf["kind"] != 1):
        assert int(xf["csum"][i]) == sim.expected_csum(int(xf["dst"][i]), int(xf["src"][i]), int(xf["total_B"][i]),
                                                       cfg.txn.max_payload_bytes)
    ls = r.link_state
    dead = np.zeros(len(ls["replay_count"]), bool)
    dead[[i for i in range(len(dead)) if ls["down_until_ps"][i] == np.iinfo(np.int64).max]] = True
    assert (ls["buffer_occupancy"] == 0).all() and (ls["replay_count"] == 0).all()
    assert (ls["credits_available"][~dead] == ls["credit_pool_flits"]).all()
    assert r.counters["credit_errors"].sum() == 0


def all_pairs(topo, nbytes=3000, loads=True):
    R = topo.n_ranks
    src, dst = np.nonzero(~np.eye(R, dtype=bool))
    ops = [0, 1] if loads else [0]
    return transfer_graph(np.tile(src, len(ops)), np.tile(dst, len(ops)), nbytes, np.repeat(ops, len(src)))


# ---------------------------------------------------------------- specs

@pytest.mark.parametrize("spec, words", [
    ("link:sw0-sw1:dwn@100", "not a fault spec"),
    ("link:sw0-sw1:down", "not a fault spec"),
    ("link:sw0-sw1:down@-5", "must be a number"),
    ("link:sw0-sw1:flap@300-100", "come back after"),
    ("link:sw0-sw1:flap@300", "down and up times"),
    ("switch:sw0:lanes=4@10", "only go down"),
    ("link:sw0-sw1:down@1e13", "out of range"),
])
def test_bad_specs_are_one_config_error(spec, words):
    with pytest.raises(ConfigError, match=words):
        parse(spec)


@pytest.mark.parametrize("spec, words", [
    ("link:sw0-sw9:down@1", "no node 'sw9'"),
    ("link:sw0-sw7:down@1", "no link joins sw0 and sw7"),
    ("link:sw0-sw1#2:down@1", "#0..#1"),
    ("switch:acc3:down@1", "not a switch"),
    ("link:acc3-sw0:lanes=9@1", "lanes=9 is out of range"),
    ("link:sw0:down@1", "A-B"),
])
def test_specs_naming_what_the_fabric_lacks_are_refused(spec, words):
    cfg = load_config("sd200")
    with pytest.raises(ConfigError, match=words):
        resolve(parse(spec), build(cfg), cfg)


def test_a_link_means_both_directions_of_every_parallel_link_unless_one_is_picked():
    cfg = load_config("sd200")
    topo = build(cfg)
    both = resolve(parse("link:sw0-sw1:down@1"), topo, cfg)
    one = resolve(parse("link:sw1-sw0#1:down@1"), topo, cfg)
    assert sorted(topo.channel_name(c) for c in both) == ["sw0->sw1", "sw0->sw1#1", "sw1->sw0", "sw1->sw0#1"]
    assert sorted(topo.channel_name(c) for c in one) == ["sw0->sw1#1", "sw1->sw0#1"]


def test_faults_come_from_config_tables_and_bad_tables_are_refused(tmp_path):
    good = tmp_path / "f.toml"
    good.write_text('[[faults]]\nspec = "link:sw0-sw1:down@100"\n[[faults]]\nspec = "switch:sw5:down@200"\n')
    assert load_config("sd200", good).faults == ("link:sw0-sw1:down@100", "switch:sw5:down@200")
    bad = tmp_path / "g.toml"
    bad.write_text('[[faults]]\nwhat = "link:sw0-sw1:down@100"\n')
    with pytest.raises(ConfigError, match=r"\[\[faults\]\]"):
        load_config("sd200", bad)


# ---------------------------------------------------------------- the fabric manager

def test_reroute_avoids_dead_channels_keeps_surviving_candidates_and_stays_deadlock_free():
    topo = build(load_config("sd200"))
    alive = np.ones(topo.n_channels, bool)
    for c in resolve(parse("link:sw0-sw1:down@1"), topo, load_config("sd200")):
        alive[c] = False
    new, broken = reroute(topo, alive)
    assert broken > 0 and not path_dead(new, alive).any()
    check_deadlock_free(new)
    R = topo.n_ranks
    for s, d in [(0, 9), (9, 0), (0, 63), (20, 30)]:
        old = [tuple(p) for p in topo.paths(s, d) if alive[p].all()]
        if old:                                 # a pair with a surviving candidate keeps exactly those
            assert [tuple(p) for p in new.paths(s, d)] == old
        assert new.n_candidates(s, d) > 0
    assert (np.diff(new.pair_ptr).reshape(R, R) > 0).sum() == R * (R - 1)


def test_a_switch_down_cuts_off_its_accelerators_but_not_a_plane_of_a_multi_plane_host():
    topo = build(load_config("sd200"))
    alive = np.ones(topo.n_channels, bool)
    sw = topo.node_names.index("sw5")
    alive[(topo.ch_src == sw) | (topo.ch_dst == sw)] = False
    assert [topo.node_names[r] for r in cut_off_ranks(topo, alive)] == [f"acc{i}" for i in range(40, 48)]
    hgx = build(load_config("dgx-h100"))
    alive = np.ones(hgx.n_channels, bool)
    sw = next(n for n in range(hgx.n_nodes) if hgx.node_kind[n] == 1)
    alive[(hgx.ch_src == sw) | (hgx.ch_dst == sw)] = False
    assert cut_off_ranks(hgx, alive) == []


# ---------------------------------------------------------------- runs

def run_with(cfg, topo, graph, specs):
    return sim.run(with_overrides(cfg, {"faults": tuple(specs)}), topo, graph)


def test_busiest_sd200_link_down_mid_run_loses_nothing_and_reroutes():
    cfg = load_config("sd200")
    topo = build(cfg)
    graph = all_pairs(topo)
    base = sim.run(cfg, topo, graph)
    busiest = int(np.argmax(base.counters["busy_ps"]))
    u, v = topo.node_names[topo.ch_src[busiest]], topo.node_names[topo.ch_dst[busiest]]
    mid = base.now_ps / 2e6
    r = run_with(cfg, topo, graph, [f"link:{u}-{v}:down@{mid:.3f}"])
    check_exactly_once(cfg, r)
    (rec,) = r.faults["applied"]
    assert rec["applied"] and rec["rerouted"]["pairs_rerouted"] > 0 and rec["rerouted"]["flows_moved"] > 0
    assert r.faults["packets_reclaimed"] > 0 and r.faults["flows_rewound"] > 0
    assert rec["detected_us"] == pytest.approx(mid + cfg.manager.detection_ns / 1e3, abs=1e-3)
    assert rec["rerouted"]["at_us"] == pytest.approx(rec["detected_us"] + cfg.manager.route_update_ns / 1e3, abs=1e-3)
    dead = [topo.channel_name(c) for c in range(topo.n_channels) if r.link_state["down_until_ps"][c] == 2**63 - 1]
    assert sorted(dead) == sorted(rec["channels"]) and len(dead) == 4
    assert r.now_ps > base.now_ps          # the step took longer


def test_lane_loss_halves_a_links_rate():
    cfg = load_config("sd200")
    topo = build(cfg)
    graph = transfer_graph([0] * 4, [1] * 4, 200_000, 0)           # acc0 -> acc1 through sw0
    base = sim.run(cfg, topo, graph)
    r = run_with(cfg, topo, graph, [f"link:acc0-sw0:lanes={cfg.phy.lanes // 2}@0"])
    check_exactly_once(cfg, r)
    (rec,) = r.faults["applied"]
    assert rec["gbps_after"] == pytest.approx([g / 2 for g in rec["gbps_before"]])
    chans = [c for c in range(topo.n_channels) if topo.channel_name(c).startswith("acc0->sw0")]
    assert r.counters["busy_ps"][chans].sum() == pytest.approx(2 * base.counters["busy_ps"][chans].sum(), rel=0.02)


def test_a_flapping_link_comes_back_and_carries_traffic_again():
    cfg = load_config("sd200", overrides={"manager.detection_ns": 100, "manager.route_update_ns": 200})
    topo = build(cfg)
    graph = all_pairs(topo, loads=False)
    base = sim.run(cfg, topo, graph)
    t = base.now_ps / 1e6
    r = run_with(cfg, topo, graph, [f"link:sw0-sw1:flap@{t * 0.2:.3f}-{t * 0.4:.3f}"])
    check_exactly_once(cfg, r)
    (rec,) = r.faults["applied"]
    assert "rerouted" in rec and "rerouted_back" in rec and rec["up_us"] == pytest.approx(t * 0.4, abs=1e-3)
    assert r.faults["dead_channels"] == []


def test_a_switch_plane_down_reroutes_and_a_partition_stops_the_run_naming_the_cut_off():
    cfg = load_config("dgx-h100")
    topo = build(cfg)
    graph = all_pairs(topo, nbytes=20000)
    sw = next(topo.node_names[n] for n in range(topo.n_nodes) if topo.node_kind[n] == 1)
    check_exactly_once(cfg, run_with(cfg, topo, graph, [f"switch:{sw}:down@1"]))
    cfg = load_config("sd200", overrides={"topology.sd200.switch_mesh_dims": "4x4x4", "topology.accels_per_domain": 1})
    topo = build(cfg)
    with pytest.raises(PartitionError, match="acc21 cannot reach"):
        run_with(cfg, topo, all_pairs(topo, nbytes=2000, loads=False), ["switch:sw21:down@0.5"])


def test_without_faults_the_run_is_the_one_without_the_fault_machinery():
    cfg = load_config(overrides={"topology.kind": "sd200", "topology.sd200.switch_mesh_dims": "2x2x1",
                                 "topology.accels_per_domain": 2})
    topo = build(cfg)
    graph = all_pairs(topo)
    a, b = sim.run(cfg, topo, graph), sim.run(cfg, topo, graph, permanent=())
    assert a.events == b.events and (a.task_end_ps == b.task_end_ps).all() and a.faults == {}
    late = run_with(cfg, topo, graph, [f"link:sw0-sw1:down@{a.now_ps / 1e6 + 10:.3f}"])
    assert late.events == a.events and (late.task_end_ps == a.task_end_ps).all()
    assert not late.faults["applied"][0]["applied"]


# ---------------------------------------------------------------- random fabrics, random permanent faults

@st.composite
def fault_case(draw):
    over = dict(draw(st.sampled_from(TOPOLOGIES)))
    payload = draw(st.sampled_from([64, 256, 1024]))
    over.update({"txn.max_payload_bytes": payload, "txn.max_read_request_bytes": payload,
                 "txn.read_tags": draw(st.integers(1, 8)),
                 "link.seq_bits": draw(st.integers(3, 12)),
                 "phy.ber": draw(st.sampled_from([0.0, 1e-6])),
                 "manager.detection_ns": draw(st.sampled_from([0.0, 100.0, 1000.0])),
                 "manager.route_update_ns": draw(st.sampled_from([0.0, 500.0, 3000.0])),
                 "sim.seed": draw(st.integers(0, 1000))})
    cfg = load_config(overrides=over)
    topo = build(cfg)
    R = topo.n_ranks
    n = draw(st.integers(1, 24))
    src = np.array(draw(st.lists(st.integers(0, R - 1), min_size=n, max_size=n)), np.int32)
    dst = (src + np.array(draw(st.lists(st.integers(1, R - 1), min_size=n, max_size=n)), np.int32)) % R
    op = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), np.int8)
    nbytes = np.array(draw(st.lists(st.integers(1, 20000), min_size=n, max_size=n)), np.int64)
    return cfg, topo, transfer_graph(src, dst, nbytes, op), draw(permanent_faults(topo))


def run_case(case):
    """Either every byte arrives exactly once, in order, or the run reports a partition; never a hang (the
    watchdog would raise SimulationError) nor a wrong delivery."""
    cfg, topo, graph, specs = case
    try:
        r = run_with(cfg, topo, graph, specs)
    except PartitionError as e:
        assert "cannot reach" in str(e)
        return
    check_exactly_once(cfg, r)


@given(fault_case())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_permanent_faults_on_random_fabrics_lose_nothing_or_report_a_partition(case):
    run_case(case)


@pytest.mark.benchmark
@pytest.mark.timeout(7200)
@given(fault_case())
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_ten_thousand_random_permanent_fault_scenarios(case):
    run_case(case)


# ---------------------------------------------------------------- command line

def invoke(cmd, args):
    from click.testing import CliRunner
    r = CliRunner(mix_stderr=False).invoke(cmd, args) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames \
        else CliRunner().invoke(cmd, args)
    return r, ((r.stderr if hasattr(r, "stderr") and r.stderr else r.output) or "").strip()


@pytest.mark.parametrize("args, needle", [
    (["--fault", "link:sw0-sw1:dwn@100"], "not a fault spec"),
    (["--fault", "link:sw0-sw9:down@100"], "did you mean"),
    (["--fault", "link:sw0-sw1#5:down@100"], "parallel link"),
    (["--fault", "switch:sw5:down@200"], "acc40, acc41"),
    (["--fault", "link:sw0-sw1:down@100", "--engine", "analytic"], "packet engine"),
    (["--fault", "link:sw0-sw1:down@100", "--set", "manager.route_update_ns=2e6"], "sim.watchdog_ns"),
])
def test_replay_fault_errors_are_one_line_and_exit_code_2(args, needle):
    from fabric.cli.replay import main
    r, err = invoke(main, ["--quiet", *args])
    assert r.exit_code == 2, r.output
    assert needle in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_replay_reports_the_fault_in_text_and_json(tmp_path):
    from fabric.cli.replay import main
    out = tmp_path / "r.json"
    r, _ = invoke(main, ["--fault", "link:sw0-sw1:down@4400", "--fault", "link:acc3-sw0#1:lanes=4@50",
                         "--json", str(out)])
    assert r.exit_code == 0, r.output
    import json
    f = json.loads(out.read_text())["faults"]
    assert f["packets_lost"] == 0 and f["packets_duplicated"] == 0 and f["packets_reclaimed"] > 0
    assert f["tpot_us"] > f["tpot_no_fault_us"] and f["tpot_change_us"] == pytest.approx(
        f["tpot_us"] - f["tpot_no_fault_us"])
    down, lanes = f["applied"]
    assert down["rerouted"]["at_us"] > down["detected_us"] > down["at_us"] == 4400
    degraded = [k for k in f["links"] if k["state"] == "degraded"]
    assert [k["channel"] for k in degraded] == ["acc3->sw0#1", "sw0->acc3#1"]
    assert all(k["gbps"] == pytest.approx(k["gbps_nominal"] / 2) for k in degraded)
    assert "rerouted 4460.0 us" in r.output and "0 lost, 0 duplicated" in r.output
    assert "degraded" in r.output and "packets              995904 delivered, 0 dropped" in r.output
