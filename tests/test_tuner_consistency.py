"""The library never picks an algorithm its own engine runs slower (issue 32 item 2): on every preset and at every
size class, what `collectives.choose` picks (with the pipeline's oracle, the analytic engine) is within 2 % of the
fastest candidate's simulated time, every candidate timed alone on the same engine (the sd200 tiers: on the packet
engine where the analytic engine's times are within collectives.sd200.tier_check_margin of each other)."""
import warnings

import pytest

from fabric import collectives, sim
from fabric.collectives import library, policy
from fabric.config import load_config, preset_names

SIZES_B = [8 << (3 * k) for k in range(10)] + [64 << 20]   # 8 B, 64 B, ... 1 GiB (one per factor 8) and the
# issue's 64 MiB, where the estimate misranks nvls_tree first on the 2x8 presets and by most (1.26x) on hgx-h800-ib
TOLERANCE = 1.02
EST_CUT = 3.0


def _all_times(kind: str, nbytes: int, n: int, cfg) -> dict:
    """{candidate: simulated us} of every candidate the library could run for this call."""
    if cfg.collectives.library == "sd200":
        # the analytic engine's times, those it cannot tell apart (tier_check_margin) replaced by the packet engine's
        g = policy.grid_size(nbytes)
        t = policy.times(kind, g, n, cfg, oracle=sim.analytic_times)
        least = min(t.values())
        near = [a for a in t if t[a] <= least * (1 + cfg.collectives.sd200.tier_check_margin)]
        if len(near) > 1:
            t.update(policy.times(kind, g, n, cfg, oracle=sim.packet_times, names=near))
        return t
    view = library.fabric_view(cfg)
    pairs = library.candidates(kind, nbytes, n, cfg.collectives, view)
    # candidates the estimate puts at 3x the least or more are left out (LL rings at 1 GiB: 2 M tasks, 5 s each);
    # the estimate's worst pessimism about a simulated winner is 2.0x (direct all-to-all at 512 MiB on hgx-h800-ib)
    est = [library.estimate_ns(kind, a, p, nbytes, n, view) for a, p in pairs]
    pairs = [c for c, e in zip(pairs, est) if e < EST_CUT * min(est)]
    frags = [collectives.template(kind, a, nbytes, n, cfg, choice=library.Choice(
        a, p, library.channels_for(nbytes, p, n, a, cfg.collectives))) for a, p in pairs]
    return dict(zip(pairs, sim.analytic_times(cfg, frags)))


def _ranks(cfg) -> int:
    from fabric.network import shared
    return shared(cfg).n_ranks


def _kinds(cfg) -> tuple:
    """What the library chooses among on this preset: AllReduce's tiers / algorithms, the nccl-like rings'
    protocols, and the all-to-all where the deployment may run DeepEP's kernels (collectives.nccl_like.alltoall)."""
    if cfg.collectives.library == "sd200":
        return ("allreduce",)
    return ("allreduce", "allgather", "reduce_scatter") + (("alltoall",) if cfg.collectives.nccl_like.alltoall
                                                           == "auto" else ())


CASES = [(p, k) for p in preset_names() for k in _kinds(load_config(p))]


@pytest.mark.parametrize("preset,kind", CASES)
def test_choice_within_2_percent_of_the_fastest_candidate(preset, kind):
    cfg = load_config(preset)
    if cfg.collectives.library == "sd200" and (cfg.collectives.sd200.oneshot_max_bytes
                                               or cfg.collectives.sd200.twoshot_max_bytes):
        pytest.skip("fixed tiers: the preset chose its algorithms by size")
    # the sd200 library's auto tier is the oracle's least time at the size's power of two by construction
    # (policy.fastest): a group of 64 checks it as well as 1024 ranks would, at a fraction of the time
    n = min(_ranks(cfg), 64) if cfg.collectives.library == "sd200" else _ranks(cfg)
    if n < 2:
        pytest.skip("one accelerator: no collective")
    bad = []
    with warnings.catch_warnings():       # nccl-like's clamp notice where a fabric hop exceeds a fitted step
        warnings.simplefilter("ignore", UserWarning)
        for nb in SIZES_B:
            if cfg.collectives.library == "sd200" and nb > cfg.collectives.sd200.tier_check_max_bytes:
                continue        # scaled from the check at that size: test_tier_check_ratio_settles
            ch = collectives.choose(kind, nb, n, cfg, oracle=sim.analytic_times)
            t = _all_times(kind, nb, n, cfg)
            got = t[ch.algorithm] if cfg.collectives.library == "sd200" else t[(ch.algorithm, ch.protocol)]
            best = min(t, key=t.get)
            if got > TOLERANCE * t[best]:
                bad.append(f"{kind} {nb} B: {ch} {got:.2f} us, {best} {t[best]:.2f} us")
    assert not bad, "\n".join(bad)


def test_the_64mb_2x8_case_that_picked_nvls_tree():
    """The issue's case: the estimate ranks nvls_tree first at 64 MiB on hgx-h100-2x8-ib, the engine runs it 15 %
    slower than tree; with the oracle the tuner runs the faster one, without it the estimate's pick stands."""
    cfg = load_config("hgx-h100-2x8-ib")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert library.tune("allreduce", 64 << 20, 16, cfg).algorithm == "nvls_tree"
        checked = library.tune("allreduce", 64 << 20, 16, cfg, oracle=sim.analytic_times)
    assert (checked.algorithm, checked.protocol) == ("tree", "LL128")


def test_tier_check_ratio_settles():
    """Above collectives.sd200.tier_check_max_bytes the tiers scale a candidate's analytic time by its packet /
    analytic ratio at that size: two-shot over the 4x4x4 mesh (the analytic engine's largest miss, no finite switch
    buffers) has the same ratio within 3 % at twice the size, and the tier runs ring there, as the packet engine
    orders them."""
    cfg = load_config("mesh-4x4x4")
    cap = cfg.collectives.sd200.tier_check_max_bytes
    ratio = []
    for nb in (cap, 2 * cap):
        a = policy.times("allreduce", nb, 64, cfg, oracle=sim.analytic_times, names=("twoshot", "ring"))
        p = policy.times("allreduce", nb, 64, cfg, oracle=sim.packet_times, names=("twoshot", "ring"))
        ratio.append(p["twoshot"] / a["twoshot"])
        assert p["ring"] < p["twoshot"] and a["twoshot"] < a["ring"]       # the analytic engine misorders them
    assert ratio[1] == pytest.approx(ratio[0], rel=0.03) and ratio[0] > 1.2
    assert collectives.select("allreduce", 1 << 30, 64, cfg, oracle=sim.analytic_times) == "ring"
