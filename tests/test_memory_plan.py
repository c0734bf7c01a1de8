"""Per-rank memory of a plan (fabric/capture/memory.py) and capture's refusal of plans that do not fit."""
from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from fabric.capture import Plan, capture, load_chip
from fabric.capture.memory import memory_plan
from fabric.capture.spec import builtin_config, spec_from_config
from fabric.errors import ConfigError

GIB = 2.0 ** 30


@pytest.fixture(scope="module")
def ds():
    return spec_from_config(builtin_config("deepseek-r1"), "deepseek-r1")


def _params(spec) -> float:
    """DeepSeek-V3/R1 parameters of the 61 decoder layers + embedding + LM head, counted from the config alone
    (independently of the logical graph the memory plan walks)."""
    h, L = spec.hidden, spec.layers
    attn = (h * (spec.q_lora + spec.kv_lora + spec.rope) + spec.q_lora * spec.heads * (spec.nope + spec.rope)
            + spec.kv_lora * spec.heads * (spec.nope + spec.v_dim) + spec.heads * spec.v_dim * h)
    dense = 3 * h * spec.inter
    moe = (spec.n_experts + spec.n_shared) * 3 * h * spec.moe_inter + h * spec.n_experts
    n_dense = len(spec.dense_layers)
    return L * attn + n_dense * dense + (L - n_dense) * moe + 2 * spec.vocab * h


def test_deepseek_parameter_count(ds):
    total = _params(ds)
    assert total / 1e9 == pytest.approx(671, rel=0.005)    # the published 671B (the 14B MTP layer is not counted)
    one_rank = memory_plan(ds, Plan(tp=1), load_chip("h200"))
    assert one_rank["weights_gib"] * GIB == pytest.approx(2 * total, rel=0.001)


def test_deepseek_bf16_16_refused_64_fits(ds):
    sd = load_chip("sd200-accelerator")
    assert sd.memory_gib == 64.0
    for plan in (Plan(tp=16), Plan(tp=16, ep=16)):
        m = memory_plan(ds, plan, sd)
        assert m["fits"] is False and m["total_gib"] > 64
        with pytest.raises(ConfigError) as exc:
            capture("deepseek-r1", tp=plan.tp, ep=plan.ep, allow_oversubscribe=False)
        msg = str(exc.value)
        assert "\n" not in msg
        assert f"{m['total_gib']:.1f} GiB" in msg and "has 64.0 GiB" in msg
        assert "more ranks" in msg and "--weight-dtype fp8 fits" in msg and "--allow-oversubscribe" in msg
    m64 = memory_plan(ds, Plan(tp=64), sd)
    assert m64["fits"] is True and 20 < m64["weights_gib"] < 23
    capture("deepseek-r1", tp=64, allow_oversubscribe=False)
    # the weight dtype is what must change for 16 accelerators: FP8 fits
    assert memory_plan(ds, Plan(tp=16, weight_dtype="fp8"), sd)["fits"] is True
    capture("deepseek-r1", tp=16, weight_dtype="fp8", allow_oversubscribe=False)
    # oversubscription is allowed when asked for (and by the library default, for existing recipes)
    assert capture("deepseek-r1", tp=16, allow_oversubscribe=True).n_ranks == 16


def test_weights_by_dtype(ds):
    h200 = load_chip("h200")
    w = {d: memory_plan(ds, Plan(tp=8, ep=8, weight_dtype=d), h200) for d in ("bf16", "fp8", "int8", "int4")}
    assert w["fp8"]["weights_gib"] == pytest.approx(w["bf16"]["weights_gib"] / 2, rel=0.01)
    assert w["int8"]["weights_gib"] == pytest.approx(w["fp8"]["weights_gib"], rel=0.01)
    assert w["int4"]["weights_gib"] == pytest.approx(w["bf16"]["weights_gib"] / 4, rel=0.05)
    assert w["int4"]["scales_gib"] > w["fp8"]["scales_gib"] > 0 == w["bf16"]["scales_gib"]
    assert set(w["fp8"]["weights_by_dtype_gib"]) == {"fp8", "bf16"}      # embedding and norms stay BF16
    with pytest.raises(ConfigError, match="weight dtype"):
        capture("toy-mla", tp=8, weight_dtype="fp4")


def test_kv_cache_scales_with_context_and_batch(ds):
    chip = load_chip("sd200-accelerator")
    m = memory_plan(ds, Plan(tp=64, context=4096), chip)
    assert m["kv_bytes_per_token"] == 61 * (512 + 64) * 2         # one MLA latent per token per layer, BF16
    assert m["kv_cache_gib"] * GIB == pytest.approx(4097 * 61 * 576 * 2)
    m2 = memory_plan(ds, Plan(tp=64, context=8193, batch=4), chip)
    assert m2["kv_cache_gib"] == pytest.approx(m["kv_cache_gib"] * 2 * 4)
    # data-parallel attention replicas split the batch: TP8 x EP64 with batch 64 keeps 8 sequences per rank
    m3 = memory_plan(ds, Plan(tp=8, ep=64, batch=64, context=4096), chip)
    assert m3["kv_tokens"] == 4097 * 8


def test_gqa_kv_heads_sharded():
    spec = spec_from_config(builtin_config("llama-3-70b"), "llama-3-70b")
    h200 = load_chip("h200")
    m = memory_plan(spec, Plan(tp=8, context=4096), h200)
    assert m["kv_bytes_per_token"] == 80 * 2 * 1 * 128 * 2       # one of 8 KV heads per rank
    assert m["fits"] and m["weights_gib"] == pytest.approx(70.6e9 * 2 / 8 / GIB, rel=0.02)
    big = memory_plan(spec, Plan(tp=8, context=4096, batch=512), h200)
    assert big["kv_cache_gib"] == pytest.approx(512 * m["kv_cache_gib"])


def test_breakdown_adds_up_and_unknown_capacity(ds, tmp_path):
    chip = load_chip("h200")
    m = memory_plan(ds, Plan(tp=8, ep=8, batch=8), chip)
    parts = m["weights_gib"] + m["kv_cache_gib"] + m["activations_gib"] + m["workspace_gib"] + m["reserved_gib"]
    assert m["total_gib"] == pytest.approx(parts)
    assert m["activations_gib"] > 0 and m["workspace_gib"] > 0 and m["headroom_gib"] == pytest.approx(
        141.0 - m["total_gib"])
    nocap = dataclasses.replace(chip, memory_gib=0.0)
    assert memory_plan(ds, Plan(tp=1), nocap)["fits"] is None              # unknown capacity: no refusal


def test_cli_capture_memory(tmp_path):
    from fabric import trace as T
    from fabric.cli.capture import main
    out = tmp_path / "t.h5"
    res = CliRunner().invoke(main, ["--model", "deepseek-r1", "--tp", "16", "-o", str(out)])
    assert res.exit_code == 2 and res.output.startswith("error: the plan does not fit in memory")
    assert res.output.count("\n") == 1 and not out.exists()
    res = CliRunner().invoke(main, ["--model", "deepseek-r1", "--tp", "16", "--allow-oversubscribe", "-o", str(out)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["--model", "deepseek-r1", "--tp", "16", "--weight-dtype", "int4", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert T.read(out).meta["plan"]["weight_dtype"] == "int4"
    res = CliRunner().invoke(main, ["--model", "toy-mla", "--tp", "8", "--weight-dtype", "fp4", "-o", str(out)])
    assert res.exit_code == 2 and res.output.startswith("error: ")
