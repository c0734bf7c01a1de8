"""The host tier's timing on the fabric (fabric.serve.tier.HostTier): its linear fits against the engine at sizes it
did not probe, one rank and a whole domain at once, on both engines; and its bad inputs."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from fabric.config import load_config, with_overrides
from fabric.errors import ConfigError
from fabric.serve.plan import parse_plan
from fabric.serve.tier import OFFLOAD, RELOAD, HostTier

KV = SimpleNamespace(bytes_per_token=70_272.0)       # DeepSeek-R1's MLA latent, bf16, 61 layers: 576 x 2 x 61


@pytest.fixture(scope="module", params=["analytic", "packet"])
def tier(request):
    return HostTier(load_config("sd200"), parse_plan("attn=dp,ep=64"), KV, request.param)


@pytest.mark.parametrize("direction", [OFFLOAD, RELOAD])
def test_the_fit_matches_the_engine_off_its_probes(tier, direction):
    for ranks, tokens in (([3], 3000), (list(range(8, 16)), 1500), ([0, 9], 700)):
        groups = ranks                                          # attn=dp: group g is rank g
        model = tier.time_us([(g, tokens, direction) for g in groups])
        engine = tier.simulate(direction, ranks, tokens)
        assert model == pytest.approx(engine, rel=0.05), (ranks, tokens)


def test_a_domain_shares_its_host_memory_links(tier):
    one = tier.time_us([(0, 4096, OFFLOAD)])
    eight = tier.time_us([(g, 4096, OFFLOAD) for g in range(8)])          # one host domain's ranks
    apart = tier.time_us([(g, 4096, OFFLOAD) for g in range(0, 64, 8)])   # one rank in each domain
    assert apart == pytest.approx(one, rel=1e-9) and eight > 2 * one


def test_tier_bytes_and_capacity(tier):
    assert tier.bytes([(0, 10, OFFLOAD), (1, 5, RELOAD)]) == (10 * KV.bytes_per_token, 5 * KV.bytes_per_token)
    hm = tier.cfg.topology.host_memory
    per_rank = hm.gib_per_node * 2**30 * hm.nodes_per_domain / tier.cfg.topology.accels_per_domain
    assert tier.tokens_per_group == int(per_rank // KV.bytes_per_token)


def test_a_tier_that_cannot_hold_a_token_is_refused():
    cfg = with_overrides(load_config("sd200"), {"topology.host_memory.gib_per_node": 1})
    with pytest.raises(ConfigError, match="gib_per_node"):
        HostTier(cfg, parse_plan("attn=dp,ep=64"), SimpleNamespace(bytes_per_token=2.0**40))


def test_kv_tier_host_on_a_fabric_without_host_memory_nodes_is_one_line():
    r = subprocess.run([sys.executable, "-c", "from fabric.cli.serve import main; main()", "--preset", "dgx-h100",
                        "--model", "toy-mla", "--plan", "tp=8", "--kv-tier", "host", "--workload",
                        "poisson:rate=5,in=100,out=10", "--requests", "5"], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "host_memory" in lines[0] and "Traceback" not in r.stderr


def test_a_replicated_latent_goes_out_once_and_comes_back_to_every_rank():
    """tp=8 with MLA: each rank stores 1/8 of the latent and loads all of it back; the group holds 8x the tokens a
    rank's share of host memory would give one whole copy per rank."""
    cfg, plan = load_config("sd200"), parse_plan("tp=8")
    mla = HostTier(cfg, plan, KV, replicated=True)
    split = HostTier(cfg, plan, KV, replicated=False)
    assert mla.bytes([(0, 100, OFFLOAD)]) == (100 * KV.bytes_per_token, 0.0)
    assert mla.bytes([(0, 100, RELOAD)]) == (0.0, 800 * KV.bytes_per_token)
    assert mla.tokens_per_group == pytest.approx(8 * split.tokens_per_group, rel=1e-6)
    assert mla.time_us([(0, 4096, OFFLOAD)]) < split.time_us([(0, 4096, OFFLOAD)])
