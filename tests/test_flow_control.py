"""Flow control sized from the fabric (issue 16 item 3): credit pools, replay buffers and end-to-end windows default
to bandwidth x round trip (0 = auto, fabric.sim.flow_control); an explicit value that caps a link or pair warns once."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fabric import phy, sim
from fabric.config import load_config
from fabric.network import build
from fabric.experiments.probe_link import probe_link

FAST = {"phy.lanes": 32, "phy.lane_rate_gbps": 112.0}          # 448 GB/s per direction
OLD = {"link.credit_pool_flits": 128, "link.replay_buffer_flits": 256, "endpoint.e2e_window_bytes": 131072}


def fc(preset, overrides=None, warn=False):
    cfg = load_config(preset, overrides=overrides or {})
    return sim.flow_control(cfg, build(cfg), warn=warn)


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(sim, "_WARNED", set())


def test_defaults_are_auto():
    cfg = load_config()
    assert cfg.link.credit_pool_flits == 0 and cfg.link.replay_buffer_flits == 0 and cfg.endpoint.e2e_window_bytes == 0
    params = sim.kernel_params(cfg)
    assert params["credit_pool_flits"] > 0 and params["replay_buffer_flits"] > 0 and params["e2e_window_B"] > 0


def test_auto_values_scale_with_rate():
    base, fast = fc("link"), fc("link", FAST)
    assert fast["credit_pool_flits"] > 2 * base["credit_pool_flits"]
    assert fast["replay_buffer_flits"] > base["replay_buffer_flits"]
    assert fast["e2e_window_B"] > base["e2e_window_B"]


def test_auto_values_scale_with_latency():
    base, long_ = fc("link"), fc("link", {"phy.cable_m": 40.0})
    assert long_["credit_pool_flits"] > 2 * base["credit_pool_flits"]
    assert long_["replay_buffer_flits"] > 2 * base["replay_buffer_flits"]
    slow_switch = fc("sd200", {"switch.latency_ns": 1000.0})
    assert slow_switch["credit_pool_flits"] > fc("sd200")["credit_pool_flits"]
    assert slow_switch["e2e_window_B"] > 3 * fc("sd200")["e2e_window_B"]


def test_credit_round_trip_follows_the_kernel():
    """acc0->sw0 on sd200: packet + PHY/wire + switch + next flit (cut-through) + one flit and PHY/wire back."""
    cfg = load_config("sd200")
    topo = build(cfg)
    R, T = phy.credit_round_trips(cfg, topo)
    c = next(i for i in range(topo.n_channels) if topo.channel_name(i) == "acc0->sw0")
    flit, lat, sw = 4000, phy.link_latency_ps(cfg), phy.ps(cfg.switch.latency_ns)
    assert R[c] == pytest.approx(T[c] + lat + sw + flit + flit + lat)
    # to the accelerator: freed on delivery, no switch
    c = next(i for i in range(topo.n_channels) if topo.channel_name(i) == "sw0->acc0")
    assert R[c] == pytest.approx(T[c] + lat + flit + lat)


def test_sd200_auto_values_cover_the_round_trips():
    got = fc("sd200")
    # 64 GB/s x 224 ns credit round trip = 14.3 KiB = 3.4 packets of 17 flits -> x1.25 -> 5 packets, for each of
    # the 21 other ports of a domain switch (16 accelerator ports + 6 mesh links, less the way back)
    assert got["credit_pool_flits"] == 85 * 21
    # the old 128 KiB window held a two-port pair (124 GB/s of payload, 1.15 us data + grant) to ~63%
    assert 200_000 < got["e2e_window_B"] < 300_000
    capped = fc("sd200", {"endpoint.e2e_window_bytes": 131072})
    assert capped["e2e_window_B_cap"]["gbps"] < 0.7 * capped["e2e_window_B_cap"]["of_gbps"]


def test_switch_inputs_hold_a_round_trip_per_output():
    """A switch input's buffer feeds every other port of the switch; a rank's feeds nothing onward. Where nothing
    forwards (two accelerators, one link) the pool is the bare rate need."""
    cfg = load_config("sd200")
    topo = build(cfg)
    out = phy.buffer_outputs(topo)
    name = topo.channel_name
    into_switch = [c for c in range(topo.n_channels) if name(c).endswith("->sw0")]
    assert into_switch and all(out[c] == 21 for c in into_switch)
    assert all(out[c] == 1 for c in range(topo.n_channels) if topo.ch_dst[c] < topo.n_ranks)
    link = load_config("link")
    R, T = phy.credit_round_trips(link, build(link))
    P = phy.packet_flits(link, link.txn.max_payload_bytes)
    assert fc("link")["credit_pool_flits"] == P * int(np.ceil(phy.FC_MARGIN * R / T - 1e-9).max())


def test_explicit_small_value_warns_once_naming_the_parameter(capsys):
    cfg = load_config("link", overrides={**FAST, "link.credit_pool_flits": 64})
    topo = build(cfg)
    sim.kernel_params(cfg, topo)
    sim.kernel_params(cfg, topo)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("warning: link.credit_pool_flits=64 caps acc0->acc1 at ")
    assert "of 448 GB/s" in err[0] and "use 0 (auto" in err[0]


def test_no_warnings_silences_a_cap_set_on_purpose_only_inside(capsys):
    """fabric-validate's sensitivity points halve the credit pool on purpose: no warning inside sim.no_warnings(),
    and the same config still warns outside it (nothing was remembered as already said)."""
    cfg = load_config("link", overrides={**FAST, "link.credit_pool_flits": 64})
    topo = build(cfg)
    with sim.no_warnings():
        sim.kernel_params(cfg, topo)
    assert capsys.readouterr().err == ""
    sim.kernel_params(cfg, topo)
    assert capsys.readouterr().err.startswith("warning: link.credit_pool_flits=64 caps")


def test_explicit_window_warns_naming_the_pair(capsys):
    cfg = load_config("sd200", overrides={"endpoint.e2e_window_bytes": 65536})
    sim.kernel_params(cfg, build(cfg))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: endpoint.e2e_window_bytes=65536 caps acc")


def test_explicit_large_value_is_silent(capsys):
    cfg = load_config("link", overrides={"link.credit_pool_flits": 4096, "link.replay_buffer_flits": 4096,
                                         "endpoint.e2e_window_bytes": 1 << 24})
    params = sim.kernel_params(cfg, build(cfg))
    assert params["credit_pool_flits"] == 4096 and params["e2e_window_B"] == 1 << 24
    assert capsys.readouterr().err == ""


def test_auto_is_silent_and_predicted_cap_matches_the_kernel(capsys):
    """The warning's figure is what the link probe then measures (within the framing and a few %)."""
    long_fast = {**FAST, "phy.cable_m": 10.0}
    got = fc("link", {**long_fast, **OLD})
    cap = got["credit_pool_flits_cap"]["gbps"]
    measured = probe_link(load_config("link", overrides={**long_fast, "link.replay_buffer_flits": 4096,
                                                         "link.credit_pool_flits": 128}), packets=3000)
    assert measured["goodput_gbps"] / 8 == pytest.approx(cap * phy.payload_efficiency(load_config()), rel=0.05)


@pytest.mark.parametrize("extra", [{}, {"phy.cable_m": 10.0}, {"phy.cable_m": 20.0}])
def test_fast_link_reaches_its_rate_with_auto_defaults(extra, capsys):
    cfg = load_config("link", overrides={**FAST, **extra})
    got = probe_link(cfg, packets=3000)
    assert got["goodput_gbps"] >= 0.9 * got["raw_gbps"]
    assert got["credit_stall_ns"] == 0
    assert capsys.readouterr().err == ""


def test_fast_long_link_was_capped_by_the_old_defaults(capsys):
    cfg = load_config("link", overrides={**FAST, "phy.cable_m": 10.0, **OLD})
    got = probe_link(cfg, packets=3000)
    assert got["goodput_gbps"] < 0.5 * got["raw_gbps"]
    err = capsys.readouterr().err
    assert "link.credit_pool_flits=128 caps acc0->acc1" in err and "link.replay_buffer_flits=256 caps" in err


def test_fast_switch_port_reaches_its_rate():
    """A 448 GB/s accelerator port through the sd200 switch (credit round trip 161 ns): auto sizes 374 flits."""
    from fabric.taskgraph import transfer_graph
    cfg = load_config("sd200", overrides=FAST)
    topo = build(cfg)
    nbytes = 4096 * 2000
    res = sim.run(cfg, topo, transfer_graph(0, 1, nbytes))
    t_ns = phy.ns(int(res.task_end_ps.max()))
    assert nbytes / t_ns >= 0.9 * 448 * phy.payload_efficiency(cfg)


def test_config_rejects_negative_and_too_small_values():
    from fabric.errors import ConfigError
    with pytest.raises(ConfigError, match="link.credit_pool_flits"):
        load_config(overrides={"link.credit_pool_flits": -1})
    with pytest.raises(ConfigError, match="link.credit_pool_flits"):
        load_config(overrides={"link.credit_pool_flits": 8})
    with pytest.raises(ConfigError, match="endpoint.e2e_window_bytes"):
        load_config(overrides={"endpoint.e2e_window_bytes": 100})


@pytest.mark.parametrize("preset", ["dgx-a100", "dgx-b200", "dgx-h100", "hgx-h100-2x8-ib", "hgx-h100-ib",
                                    "hgx-h200-2x8-roce", "hgx-h800-ib"])
def test_nvlink_ib_roce_presets_have_no_e2e_window(preset, capsys):
    """NVLink and IB/RoCE RDMA writes have link-level credits only: endpoint.e2e_grants = false gives the kernel a
    window no run fills, with no cap and no warning; a window set with it is refused."""
    from fabric.errors import ConfigError
    got = fc(preset, warn=True)
    assert not load_config(preset).endpoint.e2e_grants
    assert got["e2e_window_B"] == sim.NO_E2E_WINDOW_B and got["e2e_window_B_cap"] is None
    assert capsys.readouterr().err == ""
    with pytest.raises(ConfigError, match="endpoint.e2e_grants=true"):
        load_config(preset, overrides={"endpoint.e2e_window_bytes": 1 << 26})


def test_other_presets_keep_their_grants():
    assert fc("sd200")["e2e_window_B"] == fc("sd200")["e2e_window_B_auto"]
    assert fc("scaleout-roce")["e2e_window_B"] == 1 << 24                       # its own 16 MiB, on purpose


def test_2x8_ring_at_256mb_is_not_held_by_a_window():
    """A 256 MB ring on hgx-h100-2x8-ib: analytic / packet measured 0.944 without a window, 0.749 with the auto
    window (sized for the zero-load round trip; the rails queue and the loaded round trip outgrows it)."""
    import warnings
    from fabric.experiments.probe_collective import probe_collective
    cfg = load_config("hgx-h100-2x8-ib")
    topo = build(cfg)
    with warnings.catch_warnings():     # nccl-like's clamp notice where a fabric hop exceeds a fitted step
        warnings.simplefilter("ignore", UserWarning)
        us = {e: probe_collective(cfg, "allreduce", 256 << 20, engine=e, topo=topo, algorithm="ring")["time_us"]
              for e in ("packet", "analytic")}
    assert us["analytic"] / us["packet"] > 0.92, us


@settings(max_examples=8, deadline=None)
@given(credit=st.integers(0, 4), replay=st.integers(0, 4), window=st.integers(0, 4))
def test_analytic_engine_ignores_flow_control(credit, replay, window):
    """kernel_params(engine="analytic") leaves the flow-control sizes unresolved: the analytic engine's times and
    events are the same whatever they are (here: from one packet to far past the auto values)."""
    from fabric._check_build import kernel
    from fabric.network import shared
    from fabric.taskgraph import all_to_all_graph
    base = load_config("sd200")
    topo, graph = shared(base), all_to_all_graph(16, 70_000)
    ref = kernel.Engine(sim.kernel_params(base, topo), sim.as_arrays(topo), graph, True)
    ref.run()
    largest = phy.packet_flits(base, base.txn.max_payload_bytes)
    cfg = load_config("sd200", overrides={"link.credit_pool_flits": credit * 4 * largest,
                                          "link.replay_buffer_flits": replay * 4 * largest,
                                          "endpoint.e2e_window_bytes": window * 65536})
    eng = kernel.Engine(sim.kernel_params(cfg, topo, engine="analytic"), sim.as_arrays(topo), graph, True)
    eng.run()
    assert eng.events == ref.events > 0
    for a, b in zip(eng.task_times(), ref.task_times()):
        assert (a == b).all() and (a >= 0).all()          # every task ran


def _round_trips_numpy(pair_ptr, path_ptr, path_ch, lat, node_lat, dst, flit, T, rate):
    """The per-pair D, G and B of fabric.phy.e2e_round_trips written in numpy (reduceat, bincount): the definition
    arrays.pair_round_trips must match bit for bit."""
    lens = np.diff(path_ptr)
    ok = lens > 0
    starts = path_ptr[:-1][ok]
    hop_node = node_lat[dst[path_ch]]
    first = np.minimum(T, flit)[path_ch]
    lat_sum = np.add.reduceat(lat[path_ch], starts)
    node_sum = np.add.reduceat(hop_node, starts) - hop_node[path_ptr[1:][ok] - 1]
    D, G = np.zeros(len(lens)), np.zeros(len(lens))
    D[ok] = np.maximum.reduceat(T[path_ch], starts) + (np.add.reduceat(first, starts) - first[starts]) + lat_sum \
        + node_sum
    G[ok] = lat_sum + np.add.reduceat(flit[path_ch], starts) + node_sum
    counts = np.diff(pair_ptr)
    has = counts > 0
    Dp, Gp = np.zeros(len(counts)), np.zeros(len(counts))
    Dp[has] = np.maximum.reduceat(D, pair_ptr[:-1][has])
    Gp[has] = np.maximum.reduceat(G, pair_ptr[:-1][has])
    pair_of_path = np.repeat(np.arange(len(counts)), counts)[ok]
    B = np.full(len(counts), np.inf)
    for idx in (path_ptr[:-1][ok], path_ptr[1:][ok] - 1):
        key = np.unique(pair_of_path * len(T) + path_ch[idx])
        B = np.minimum(B, np.bincount(key // len(T), weights=rate[key % len(T)], minlength=len(counts)))
    return Dp, Gp, B


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.lists(st.integers(0, 5), max_size=150), max_size=4), min_size=1, max_size=9),
       st.lists(st.floats(0.5, 2000.0), min_size=6, max_size=6), st.integers(0, 2 ** 32 - 1))
def test_pair_round_trips_is_the_numpy_formula_bit_for_bit(pairs, times, seed):
    """Paths of 0 to 150 hops (numpy's pairwise sums change shape at 8 and 128 terms), pairs of 0 to 4 candidates,
    fractional channel times: the C pass gives numpy's floats exactly (flow control is rounded from them)."""
    from fabric._check_build import arrays
    rng = np.random.default_rng(seed)
    paths = [p for pair in pairs for p in pair]
    pair_ptr = np.r_[0, np.cumsum([len(pair) for pair in pairs])].astype(np.int64)
    path_ptr = np.r_[0, np.cumsum([len(p) for p in paths])].astype(np.int64)
    path_ch = np.array([c for p in paths for c in p], np.int32)
    T = np.array(times)
    flit, lat = T * rng.uniform(0.01, 2.0, 6), rng.uniform(0.0, 5e4, 6)
    node_lat, dst = rng.uniform(0.0, 3e5, 4), rng.integers(0, 4, 6).astype(np.int32)
    args = (pair_ptr, path_ptr, path_ch, lat, node_lat, dst, flit, T, 4096.0 / T)
    for got, want in zip(arrays.pair_round_trips(*args), _round_trips_numpy(*args)):
        assert got.tobytes() == want.tobytes()
