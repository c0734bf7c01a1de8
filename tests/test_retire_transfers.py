"""Transfer records built at issue and released once done (Engine retire_transfers, what sim.run does when no
per-transfer table is asked for) change no result.

Each record is a function of its task, so building it when the task is issued instead of at set-up must give the
same run: task times, counters, link state, totals, translation counts and event counts, on random fabrics with
stores, loads and link faults, on lowered decode steps (addressed transfers, shadow windows, in-switch legs) and
on graphs of several record chunks. And every record must be released exactly once: none held after a run that
finished (a record released twice or never would leave its chunk's count off zero)."""
import numpy as np
import pytest
from hypothesis import given, settings

from fabric import sim
from fabric._check_build import kernel
from fabric.config import load_config
from fabric.lower import lower
from fabric.network import build
from fabric.taskgraph import LOAD, transfer_graph
from fabric.trace import read

from strategies import fabric_case


def run_engine(cfg, topo, graph, faults=(), retire=False):
    kgraph, xlate = sim.kernel_inputs(cfg, topo, sim.as_arrays(graph))
    eng = kernel.Engine(sim.kernel_params(cfg, topo), sim.as_arrays(topo), kgraph, False, xlate=xlate,
                        options=kernel.EngineOptions(retire_transfers=retire))
    for kind, ch, n, k in faults:
        eng.add_fault(sim.FAULTS[kind], int(ch), int(n), int(k))
    while eng.run(max_events=50_000) == kernel.PAUSED:
        pass
    start, end = eng.task_times()
    arrays = dict(start=start.copy(), end=end.copy())
    arrays.update({"c_" + k: v.copy() for k, v in eng.counters().items()})
    arrays.update({"l_" + k: np.asarray(v) for k, v in eng.link_state().items()})
    state = dict(totals=eng.totals(), now=eng.now_ps, events=eng.events, translations=eng.translations())
    return state, arrays, eng


def assert_retiring_changes_nothing(cfg, topo, graph, faults=()):
    kept, retired = run_engine(cfg, topo, graph, faults), run_engine(cfg, topo, graph, faults, retire=True)
    assert kept[0] == retired[0]
    assert kept[1].keys() == retired[1].keys()
    for k in kept[1]:
        assert np.array_equal(kept[1][k], retired[1][k]), k
    if kept[0]["totals"]["tasks_left"] == 0:
        assert retired[2].transfer_records_held() == 0
    return retired


@given(fabric_case())
@settings(max_examples=40, deadline=None)
def test_retiring_changes_nothing_on_random_fabrics_with_errors(case):
    cfg, topo, graph, faults = case
    assert_retiring_changes_nothing(cfg, topo, graph, faults)


@pytest.mark.parametrize("path", ["traces/toy-mla-tp8.h5", "traces/llama-3-70b-decode-tp8.h5"])
def test_retiring_changes_nothing_on_lowered_steps(path):
    cfg = load_config("sd200")
    assert_retiring_changes_nothing(cfg, build(cfg), lower(read(path), cfg))


def test_retiring_changes_nothing_over_many_chunks():
    """Stores and loads (a load is two records, its response flow numbered after every task's own) of random
    sizes over several chunks of records, some of them local or to no rank (Unsupported Requests)."""
    cfg = load_config("mesh-4x4x4", overrides={"txn.max_payload_bytes": 256, "txn.max_read_request_bytes": 256})
    topo = build(cfg)
    rng = np.random.default_rng(7)
    n = 40_000
    src = rng.integers(0, topo.n_ranks, n).astype(np.int32)
    dst = rng.integers(0, topo.n_ranks, n).astype(np.int32)
    dst[rng.random(n) < 0.01] = topo.n_ranks + 3                  # no such rank
    op = np.where(rng.random(n) < 0.3, LOAD, 0).astype(np.int8)
    graph = transfer_graph(src, dst, rng.integers(1, 2000, n).astype(np.int64), op)
    retired = assert_retiring_changes_nothing(cfg, topo, graph)
    assert retired[2].transfer_records_held() == 0 and retired[0]["totals"]["tasks_left"] == 0


def test_sim_run_without_a_transfer_table_retires_records():
    cfg = load_config("sd200")
    topo, graph = build(cfg), lower(read("traces/toy-mla-tp8.h5"), cfg)
    kept, retired = sim.run(cfg, topo, graph), sim.run(cfg, topo, graph, transfers=False)
    assert retired.transfers == {} and kept.transfers
    for a, b in ((kept.task_start_ps, retired.task_start_ps), (kept.task_end_ps, retired.task_end_ps)):
        assert np.array_equal(a, b)
    assert (kept.events, kept.now_ps, kept.totals, kept.translation) == \
        (retired.events, retired.now_ps, retired.totals, retired.translation)


def test_an_engine_that_retires_refuses_what_reads_every_record():
    cfg = load_config("mesh-4x4x4")
    topo = build(cfg)
    eng = kernel.Engine(sim.kernel_params(cfg, topo), sim.as_arrays(topo),
                        sim.as_arrays(transfer_graph(0, 1, 4096)), False,
                        options=kernel.EngineOptions(retire_transfers=True))
    eng.run()
    with pytest.raises(RuntimeError, match="retire_transfers"):
        eng.transfers()
    with pytest.raises(ValueError, match="retire_transfers=False"):
        eng.kill_channel(0)
