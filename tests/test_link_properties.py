"""Data-link invariants under random traffic, buffer sizes, sequence widths, BER and injected faults."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fabric import phy, sim
from fabric._check_build import kernel
from fabric.config import load_config, with_overrides
from fabric.taskgraph import transfer_graph
from fabric.experiments.probe_link import two_node_topology
from strategies import link_configs, link_faults, link_traffic


def time_bound_ps(cfg, graph, faults, result):
    """A generous bound on the simulated duration: every packet alone on the link for a whole Ack and credit
    round trip (stop-and-wait, as with a one-packet window), plus every recovery at its worst cost."""
    packets = (-(-graph["nbytes"] // cfg.txn.max_payload_bytes) * (1 + graph["op"])).sum()
    one_way_ns = phy.link_latency_ps(cfg) / 1000 + cfg.link.control_wire_bytes * 8 / phy.data_gbps(cfg)
    round_trip_ns = 2 * (one_way_ns + cfg.phy.flit_bytes * 8 / phy.data_gbps(cfg)) + cfg.link.ack_timer_ns \
        + cfg.link.credit_update_ns
    wire_ps = (graph["nbytes"].sum() * 2 + (64 + cfg.phy.flit_bytes) * packets) * 8000 / phy.data_gbps(cfg) * 1.1 \
        + packets * round_trip_ns * 1000
    recoveries = len(faults) + result.counters["flits_corrupted"].sum() + result.counters["ctrl_lost"].sum() + 1
    per_recovery = (cfg.link.replay_timer_ns * (cfg.link.replay_limit + 1) + cfg.link.retrain_ns
                    + cfg.link.credit_refresh_ns) * 1000
    return wire_ps + recoveries * per_recovery + 1e6


def check_clean_end(cfg, graph, result):
    t = result.totals
    assert result.outcome == "done"
    assert t["tasks_left"] == 0
    sent = int(result.counters["packets"].sum())
    assert t["delivered"] == sent, "every packet delivered exactly once"
    assert t["duplicates"] == 0 and t["out_of_order"] == 0
    assert t["packets_live"] == 0
    assert np.array_equal(result.transfers["delivered_B"], result.transfers["total_B"])
    ls = result.link_state
    assert (ls["credits_available"] == ls["credit_pool_flits"]).all(), "credits end where they started"
    assert (ls["buffer_occupancy"] == 0).all()
    assert (ls["replay_count"] == 0).all()
    assert result.counters["credit_errors"].sum() == 0, "credits never negative nor above the pool"


@given(cfg=link_configs(), graph=link_traffic(), faults=link_faults())
@settings(max_examples=300)
def test_exactly_once_in_order_and_credits_restored(cfg, graph, faults):
    result = sim.run(cfg, two_node_topology(cfg), graph, faults=faults)
    check_clean_end(cfg, graph, result)
    assert result.now_ps <= time_bound_ps(cfg, graph, faults, result), "the run ends within the computed bound"


@given(cfg=link_configs(max_ber=0.0), graph=link_traffic())
@settings(max_examples=30)
def test_error_free_link_never_replays(cfg, graph):
    result = sim.run(cfg, two_node_topology(cfg), graph)
    check_clean_end(cfg, graph, result)
    assert result.counters["replays"].sum() == 0
    assert result.counters["units"].sum() == result.counters["packets"].sum()


def test_each_fault_kind_is_exercised_and_recovered():
    cfg = load_config(overrides={"txn.max_payload_bytes": 256, "txn.max_read_request_bytes": 256})
    topo = two_node_topology(cfg)
    graph = transfer_graph(0, 1, 256 * 400)
    cases = {
        "corrupt_flit": ([("corrupt_flit", 0, 10, 1)], "naks"),
        "burst": ([("corrupt_flit", 0, 20, 6)], "naks"),
        "lose_ack": ([("lose_ack", 0, 3, 1)], "ctrl_lost"),
        "lose_credit": ([("lose_credit", 0, 2, 1)], "ctrl_lost"),
        "retrain": ([("retrain", 0, 200_000, 1)], "retrains"),
    }
    for name, (faults, counter) in cases.items():
        r = sim.run(cfg, topo, graph, faults=faults)
        check_clean_end(cfg, graph, r)
        assert r.counters[counter][0] >= 1, name


def test_lost_nak_is_recovered_by_the_replay_timer():
    cfg = load_config(overrides={"txn.max_payload_bytes": 256, "link.ack_every_packets": 1000})
    graph = transfer_graph(0, 1, 256 * 50)
    # flit 5 corrupted -> the receiver's Nak is the first Ack/Nak message it sends; lose it
    r = sim.run(cfg, two_node_topology(cfg), graph, faults=[("corrupt_flit", 0, 5, 1), ("lose_ack", 0, 1, 1)])
    check_clean_end(cfg, graph, r)
    assert r.counters["replay_timeouts"][0] >= 1


def test_replay_limit_forces_a_retrain():
    cfg = load_config(overrides={"txn.max_payload_bytes": 256, "link.replay_limit": 2})
    graph = transfer_graph(0, 1, 256 * 40)
    # a long burst: every replay pass is corrupted again until the limit retrains the link
    faults = [("corrupt_flit", 0, 4, 400)]
    r = sim.run(cfg, two_node_topology(cfg), graph, faults=faults)
    check_clean_end(cfg, graph, r)
    assert r.counters["retrains"][0] >= 1


def test_tiny_sequence_space_wraps_many_times():
    cfg = load_config(overrides={"txn.max_payload_bytes": 64, "link.seq_bits": 2, "phy.ber": 1e-5})
    graph = transfer_graph(0, 1, 64 * 500)
    r = sim.run(cfg, two_node_topology(cfg), graph)
    check_clean_end(cfg, graph, r)
    assert r.counters["packets"][0] == 500 and r.counters["replays"][0] > 0


class LinkMachine(RuleBasedStateMachine):
    """Steps one link a few events at a time and checks the invariants at every stop, not only at the end."""

    @rule(cfg=link_configs(max_ber=1e-5), graph=link_traffic(), faults=link_faults())
    @precondition(lambda self: not hasattr(self, "eng"))
    def start(self, cfg, graph, faults):
        self.cfg = cfg
        self.eng = kernel.Engine(sim.kernel_params(cfg), sim.as_arrays(two_node_topology(cfg)), graph)
        for kind, ch, n, k in faults:
            self.eng.add_fault(sim.FAULTS[kind], ch, n, k)
        self.delivered = 0
        self.done = False

    @rule(n=st.integers(1, 200))
    @precondition(lambda self: hasattr(self, "eng"))
    def step(self, n):
        self.done = self.eng.run(max_events=n) == kernel.DONE

    @invariant()
    def credits_within_pool_and_order_kept(self):
        if not hasattr(self, "eng"):
            return
        ls = self.eng.link_state()
        assert (ls["credits_available"] >= 0).all() and (ls["credits_available"] <= ls["credit_pool_flits"]).all()
        assert (ls["buffer_occupancy"] >= 0).all() and (ls["buffer_occupancy"] <= ls["credit_pool_flits"]).all()
        t = self.eng.totals()
        assert t["duplicates"] == 0 and t["out_of_order"] == 0
        assert t["delivered"] >= self.delivered
        self.delivered = t["delivered"]

    def teardown(self):
        if hasattr(self, "eng"):
            while (outcome := self.eng.run(max_events=1_000_000)) == kernel.PAUSED:   # slices: a livelock stays
                pass                                                                 # interruptible (conftest)
            assert outcome == kernel.DONE
            t = self.eng.totals()
            assert t["tasks_left"] == 0 and t["packets_live"] == 0


TestLinkMachine = LinkMachine.TestCase
TestLinkMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


# ---------------------------------------------------------------- credits and the duplicate window (issue 33 item 8)

@given(cfg=link_configs(), graph=link_traffic(), faults=link_faults(), spare=st.integers(0, 4),
       slices=st.lists(st.integers(1, 37), min_size=1, max_size=8))
@settings(max_examples=120, deadline=None)
def test_credits_never_negative_nor_above_the_pool_at_any_stop(cfg, graph, faults, spare, slices):
    """At every stop of a run (slices of a few events, then to the end), with a credit pool of the largest packet's
    flits and 0-4 more (credits bind; a packet of several flits may not go on fewer): each VC's credits available
    and the receiver's buffer occupancy lie in [0, credit pool], and the kernel's own credit checks never fired."""
    cfg = with_overrides(cfg, {"link.credit_pool_flits": phy.packet_flits(cfg, cfg.txn.max_payload_bytes) + spare})
    eng = kernel.Engine(sim.kernel_params(cfg), sim.as_arrays(two_node_topology(cfg)), graph)
    for kind, ch, n, k in faults:
        eng.add_fault(sim.FAULTS[kind], ch, n, k)
    outcome = kernel.PAUSED
    for n in [*slices] * 200 + [1 << 40]:
        if outcome != kernel.PAUSED:
            break
        outcome = eng.run(max_events=n)
        ls = eng.link_state()
        pool = ls["credit_pool_flits"]
        assert (ls["credits_available"] >= 0).all() and (ls["credits_available"] <= pool).all()
        assert (ls["buffer_occupancy"] >= 0).all() and (ls["buffer_occupancy"] <= pool).all()
        assert eng.counters()["credit_errors"].sum() == 0
    assert outcome == kernel.DONE


@st.composite
def lost_acks(draw):
    """Lost Acks only (on either channel, runs of 1-6 from the n-th): the sender's replay timer resends units the
    receiver already holds."""
    return [("lose_ack", draw(st.integers(0, 1)), draw(st.integers(1, 40)), draw(st.integers(1, 6)))
            for _ in range(draw(st.integers(1, 3)))]


@given(cfg=link_configs(max_ber=0.0), graph=link_traffic(), faults=lost_acks())
@settings(max_examples=120, deadline=None)
def test_the_duplicate_window_discards_every_resent_unit_and_naks_none(cfg, graph, faults):
    """Without bit errors or retrains, every unit sent again after a lost Ack reaches a receiver that already has
    it: each is a duplicate (within the half of the sequence space behind the expected number), discarded and
    acknowledged again, never a Nak (which is for a unit missing ahead) and never delivered twice."""
    cfg = with_overrides(cfg, {"link.replay_timer_ns": 300.0})      # resends soon after a lost Ack
    r = sim.run(cfg, two_node_topology(cfg), graph, faults=faults)
    check_clean_end(cfg, graph, r)
    c = r.counters
    if c["retrains"].sum() == 0:        # a retrain drops the units in flight: those are resent, not duplicates
        assert np.array_equal(c["dups_discarded"], c["units"] - c["packets"])
    assert c["naks"].sum() == 0
