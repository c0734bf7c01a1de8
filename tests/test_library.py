"""Collective library profiles (fabric/collectives/library.py): sd200 vs nccl-like, protocols, the tuner, and the
8 B AllReduce decomposed into launch + steps x (software + fabric) with nothing counted twice."""
import dataclasses
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric import collectives, sim
from fabric.collectives import library as lib
from fabric.collectives.symbolic import check
from fabric.config import CollectivesConfig, NcclLikeConfig, load_config, parse_set
from fabric.errors import ConfigError
from fabric.taskgraph import COMPUTE, TRANSFER
from fabric.experiments.probe_collective import probe_collective

SD = load_config(preset="sd200")
NCCL = load_config(preset="sd200", overrides={"collectives.library": "nccl-like"})


def nccl(**kw):
    """sd200 under the nccl-like library with [collectives] keys ([collectives.nccl_like]'s by their own name)."""
    own = {f.name for f in dataclasses.fields(NcclLikeConfig)}
    return load_config(preset="sd200", overrides={"collectives.library": "nccl-like",
                                                  **{f"collectives.{'nccl_like.' * (k in own)}{k}": v
                                                     for k, v in kw.items()}})


def data_transfers(frag):
    t = frag.task_kind == TRANSFER
    return frag.task_nbytes[t], frag.sem.length[t]


def test_profiles_switch_with_set():
    cfg = load_config(preset="sd200", overrides=parse_set(["collectives.library=nccl-like"]))
    assert cfg.collectives.library == "nccl-like"
    c = collectives.choose("allreduce", 14336, 8, cfg)
    assert c.algorithm == "ring" and c.protocol in lib.PROTOCOLS and c.channels >= 1
    s = collectives.choose("allreduce", 14336, 8, SD, oracle=sim.analytic_times)
    assert (s.algorithm, s.protocol, s.channels) == ("twoshot", "", 0)
    assert set(collectives.PROFILES) == set(lib.LIBRARIES) == {"sd200", "nccl-like"}
    for k, c in lib.NCCL_LIKE.items():      # every profile value says what, unit, why
        assert c.unit and c.help and c.reason, k


def test_unknown_library_is_a_one_line_config_error():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"collectives.library": "mpich"})
    msg = str(exc.value)
    assert "\n" not in msg and "collectives.library" in msg and "nccl-like" in msg


def test_sd200_profile_is_unchanged():
    """library = sd200 (the default) builds exactly what the config without the key builds: one protocol, flags
    folded (payload + flag_bytes), launch_ns and step_ns as configured."""
    explicit = load_config(preset="sd200", overrides={"collectives.library": "sd200",
                                                      "collectives.nccl_like.protocol": "LL"})
    for kind, alg, nb in [("allreduce", "oneshot", 4096), ("allreduce", "twoshot", 14336),
                          ("allreduce", "ring", 1 << 20), ("allgather", "direct", 65536)]:
        a = collectives.build(kind, alg, nb, 8, SD)
        b = collectives.build(kind, alg, nb, 8, explicit)
        for f in ("task_kind", "task_nbytes", "duration_ps", "edge_src", "edge_dst"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f
        nbytes, length = data_transfers(a)
        assert (nbytes == length + SD.collectives.flag_bytes).all()
        assert collectives.select(kind, nb, 8, SD, oracle=sim.analytic_times) == \
               collectives.select(kind, nb, 8, explicit, oracle=sim.analytic_times)


@pytest.mark.parametrize("proto, factor", [("LL", 2.0), ("LL128", 128 / 120), ("Simple", 1.0)])
def test_protocol_inflates_wire_bytes(proto, factor):
    M = 8 * 120 * 64          # chunks of whole LL (4 B) and LL128 (120 B) payloads
    frag = collectives.build("allreduce", "ring", M, 8, NCCL, choice=lib.Choice("ring", proto, 1))
    nbytes, length = data_transfers(frag)
    pay = length > 0
    extra = NCCL.collectives.flag_bytes if proto == "Simple" else 0
    assert np.allclose(nbytes[pay], length[pay] * factor + extra)
    assert nbytes.sum() >= length.sum() * factor


def test_tuner_picks_ll_for_small_and_simple_for_large():
    small = collectives.choose("allreduce", 8, 8, NCCL)
    large = collectives.choose("allreduce", 1 << 30, 8, NCCL)
    assert (small.algorithm, small.protocol, small.channels) == ("ring", "LL", 1)
    assert (large.algorithm, large.protocol) == ("ring", "Simple")
    assert large.channels == lib.value("max_channels")
    # forced protocol and algorithm
    assert collectives.choose("allreduce", 8, 8, nccl(protocol="Simple")).protocol == "Simple"
    assert collectives.choose("allreduce", 8, 8, nccl(policy="twoshot")).algorithm == "twoshot"


def test_probe_reports_protocol_and_channels():
    r = probe_collective(NCCL, "allreduce", 8, ranks=8)
    assert (r["algorithm"], r["protocol"], r["channels"]) == ("ring", "LL", 1)


@pytest.mark.parametrize("engine", ["packet", "analytic"])
def test_8B_allreduce_decomposes_into_launch_and_steps_nothing_counted_twice(engine):
    """8 ranks on one switch (sd200 domain 0), ring LL: time = launch + 14 x (software + fabric hop), where
    software = h_LL - t_fab (the fitted per-step time less the fabric's own zero-load hop). The result equals the
    fitted model's L + 14 h_LL up to the serialisation difference between the 8 B LL line sent and the 64 B store
    t_fab is taken at; adding the fabric on top of h_LL (the old double count) would be 14 t_fab more."""
    cfg = nccl(protocol="LL")
    n, steps = 8, 14
    r = probe_collective(cfg, "allreduce", 8, ranks=n, engine=engine)
    view = lib.fabric_view(cfg)
    L, h = lib.value("launch_ns"), lib.value("h_LL_ns")
    t_fab = view.hop_ps(0, 1, 64) / 1e3                  # what the software cost is reduced by
    t_hop = view.hop_ps(0, 1, 8) / 1e3                   # what the fabric takes for the 8 B line it sends
    sw = lib.step_software_ns(view, "LL", 0, 1)
    assert sw == pytest.approx(h - t_fab) and sw > 0
    frag = collectives.build("allreduce", "ring", 8, n, cfg)
    assert frag.duration_ps[frag.task_kind == COMPUTE].max() == round(L * 1e3)    # launch: software only
    decomposed = L + steps * (sw + t_hop)
    # + the per-step local work (a poll and a 3 B reduction: tasks of a few ps), which lies on the step's path
    # when the wait and the transfer end together (8 B and 64 B both take one whole flit)
    local = frag.duration_ps[(frag.task_kind != TRANSFER) & (frag.duration_ps < 1000)].max() / 1e3
    assert decomposed - 0.05 <= r["time_us"] * 1e3 <= decomposed + steps * 2 * local + 0.05
    fitted = L + steps * h
    assert abs(r["time_us"] * 1e3 - fitted) < steps * 5.0                         # 8 B vs 64 B serialisation
    assert r["time_us"] * 1e3 < fitted + steps * t_fab * 0.5                       # no double count


def test_negative_software_is_clamped_with_a_warning(monkeypatch):
    monkeypatch.setitem(lib.NCCL_LIKE, "h_LL_ns", lib.Const(100.0, "ns", "test", "test"))
    view = lib.FabricView(NCCL)
    with pytest.warns(UserWarning, match="clamped"):
        assert lib.step_software_ns(view, "LL", 0, 1) == 0.0


def test_sliced_ring_pipelines_large_calls():
    """A 64 MiB ring moves slices, and the time is within 15% of the bound 2(n-1)/n M / injection rate (the fitted
    GPU-side fraction eta_nvl of the rank's link rate; an unsliced ring would add a chunk's time per step)."""
    cfg = nccl(protocol="Simple")
    M, n, ch = 64 << 20, 8, 2
    choice = lib.Choice("ring", "Simple", ch)
    frag = collectives.build("allreduce", "ring", M, n, cfg, choice=choice)
    assert lib.n_slices((M // n), "Simple", ch) == 4          # 8 MiB chunks in slices of 2 x 1 MiB
    assert (frag.task_kind == TRANSFER).sum() == 2 * (n - 1) * n * ch * 4
    r = probe_collective(cfg, "allreduce", M, ranks=n, engine="analytic")
    view = lib.fabric_view(cfg)
    assert lib.inject_gbps(view, "Simple", 0, 1) == pytest.approx(lib.value("eta_nvl") * view.rank_gbps(0))
    bound_us = 2 * (n - 1) / n * M / lib.inject_gbps(view, "Simple", 0, 1) / 1e3     # the GPU-side cap
    assert bound_us < r["time_us"] < 1.15 * bound_us


@st.composite
def nccl_cases(draw):
    kind = draw(st.sampled_from(["allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast"]))
    n = draw(st.integers(2, 12))
    return kind, n, draw(st.integers(0, 3000)), draw(st.sampled_from(lib.PROTOCOLS)), draw(st.integers(1, 3))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nccl_cases())
def test_nccl_like_fragments_are_correct(case):
    """The symbolic checker proves every nccl-like fragment (slices forced small) computes its collective."""
    kind, n, M, proto, ch = case
    old = dict(lib.NCCL_LIKE)
    try:
        for p in lib.PROTOCOLS:    # tiny slices so that small calls are cut into several
            lib.NCCL_LIKE[f"slice_{p}_bytes"] = lib.Const(40, "B", "test", "test")
        cfg = nccl(protocol=proto)
        alg = collectives.select(kind, M, n, cfg)
        choice = lib.Choice(alg, proto, ch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            frag = collectives.build(kind, alg, M, n, cfg, choice=choice)
        g = frag.to_graph(ranks=np.arange(n), n_ranks=64)
        g.validate()
        check(g)
    finally:
        lib.NCCL_LIKE.clear()
        lib.NCCL_LIKE.update(old)


def test_library_keys_are_documented_config():
    f = {x.name: x for x in dataclasses.fields(CollectivesConfig)}
    assert f["library"].metadata["choices"] == lib.LIBRARIES
    own = {x.name: x for x in dataclasses.fields(NcclLikeConfig)}
    assert own["protocol"].metadata["choices"] == ("auto",) + lib.PROTOCOLS


ROCE = load_config(preset="scaleout-roce", overrides={"collectives.library": "nccl-like"})


def test_multi_node_uses_the_hierarchical_form_and_it_is_correct():
    """Across NIC-joined domains the tuner picks the hierarchical AllReduce for small calls (2(g-1) intra + 2(N-1)
    network steps instead of the ring's chain through ~2N(n-1)/n network hops), which is faster there; the fragment
    proves correct for uneven sizes and several channels."""
    n = 16
    c = collectives.choose("allreduce", 8, n, ROCE)
    assert (c.algorithm, c.protocol) == ("hierarchical", "LL")
    hier = probe_collective(ROCE, "allreduce", 8, ranks=n, engine="analytic")
    ring = probe_collective(ROCE, "allreduce", 8, ranks=n, engine="analytic", algorithm="ring")
    assert hier["algorithm"] == "hierarchical" and hier["time_us"] < ring["time_us"]
    for M, ch in [(0, 1), (7, 3), (1000, 2), (4099, 1)]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            frag = collectives.build("allreduce", "hierarchical", M, n, ROCE,
                                     choice=lib.Choice("hierarchical", "Simple", ch))
        g = frag.to_graph(ranks=np.arange(n), n_ranks=64)
        g.validate()
        check(g)
    with pytest.raises(ConfigError):          # nccl-like only
        collectives.build("allreduce", "hierarchical", 64, n, SD)


def test_network_step_software_is_a_delay_on_the_data_path():
    """Through a NIC the step's software (h + d_net - t_fab) delays the data, it does not occupy the rank: a ring
    step chain does not pay it at every step of the rank after the crossing."""
    view = lib.fabric_view(ROCE)
    assert view.crosses_nic(7, 8) and not view.crosses_nic(0, 1)
    sw = lib.step_software_ns(view, "LL", 7, 8)
    assert sw == pytest.approx(lib.value("h_LL_ns") + lib.value("d_net_ns") - view.hop_ps(7, 8) / 1e3)
    ring = probe_collective(ROCE, "allreduce", 8, ranks=16, engine="analytic", algorithm="ring")
    # 30 steps: far below 30 network steps, above 2 of them
    net_step = lib.value("h_LL_ns") + lib.value("d_net_ns")
    assert lib.value("launch_ns") + 28 * lib.value("h_LL_ns") + 2 * net_step < ring["time_us"] * 1e3 < \
        lib.value("launch_ns") + 30 * net_step / 2


def test_lowering_a_trace_with_the_nccl_like_library():
    from fabric.lower import lower
    from fabric.trace import read
    g = lower(read("traces/toy-mla-tp8.h5"), NCCL, semantics=True)
    check(g)


def test_alltoall_posts_remote_sends_in_sequence():
    """nccl-like AllToAll across two domains: each rank's 8 sends through its NIC are posted one after the other
    (o_p2p_ns each), so the call takes at least launch + 8 posts; inside one domain nothing is posted."""
    r = probe_collective(ROCE, "alltoall", 1024 * 16, ranks=16, engine="analytic")
    assert r["time_us"] * 1e3 > lib.value("launch_ns") + 8 * lib.value("o_p2p_ns")
    frag = collectives.build("alltoall", "direct", 1024 * 8, 8, ROCE)
    assert (frag.duration_ps == round(lib.value("o_p2p_ns") * 1e3)).sum() == 0


def test_frag_builder_single_edges_and_per_pair_lookups_equal_the_plain_forms():
    """The builder's shortcuts (single edges kept as ints; NIC crossings and software asked once per rank pair of a
    call) give what edges added as arrays and the per-pair calls give."""
    from fabric.collectives._frag import FragBuilder
    hgx = load_config(preset="hgx-h200-2x8-roce", overrides={"collectives.library": "nccl-like"})
    view = lib.FabricView(hgx)
    frags = []
    for single in (True, False):
        fb = FragBuilder("allreduce", "ring", 16, 1024, hgx.collectives, semantics=False,
                         choice=lib.Choice("ring", "LL", 1), view=view)
        start, ready = fb.prologue()
        a, b = fb.join(np.arange(16)), fb.join(np.arange(16))
        for s, d in zip(a.tolist(), b.tolist()):
            fb.edge(s, d) if single else fb.edge(np.array([s]), np.array([d]))
        fb.edge(ready, a)
        frags.append(fb.finish(start, b))
        rng = np.random.default_rng(0)
        s, d = rng.integers(0, 16, 200), rng.integers(0, 16, 200)
        assert fb.crosses_all(s, d).tolist() == [fb.crosses(int(x), int(y)) for x, y in zip(s, d)]
        assert fb.crosses_all(s, d).any() and not fb.crosses_all(s, d).all()
        assert fb.software_all(s, d).tolist() == [fb.software_ns(int(x), int(y)) for x, y in zip(s, d)]
    assert np.array_equal(frags[0].edge_src, frags[1].edge_src)
    assert np.array_equal(frags[0].edge_dst, frags[1].edge_dst)
