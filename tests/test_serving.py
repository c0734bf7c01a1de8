"""Serving experiments (fabric.experiments.serving; docs/sources.md §SD200 serving): 16 vs 64 accelerators, TPOT over a
growing context, batch sweep. Analytic capture and analytic replay engines."""
from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("h5py")

from fabric.experiments import serving as S  # noqa: E402


def test_16_cards_need_smaller_weights():
    wd, bf16 = S.fitting_dtype(16)
    assert not bf16["fits"] and bf16["total_gib"] > 64
    assert wd == "fp8"
    assert S.fitting_dtype(64)[0] == "bf16"
    assert S.max_batch(16, context=5120, weight_dtype="bf16") == 0
    assert S.max_batch(64, context=5120, weight_dtype="bf16") > S.max_batch(16, context=5120, weight_dtype="fp8") > 0


def test_scaling_16_vs_64():
    t0 = time.perf_counter()
    r = S.scaling_16_vs_64(like_for_like=False)
    assert time.perf_counter() - t0 < 20
    assert len(r["rows"]) == 2 and len(r["speedups"]) == 1
    json.dumps(r)
    assert r["weight_dtype_16"] == "fp8" and "fp8" in r["change_for_16"]
    r16, r64 = r["rows"][0], r["rows"][1]
    assert (r16["ranks"], r16["weight_dtype"], r16["fits"]) == (16, "fp8", True)
    assert (r64["ranks"], r64["weight_dtype"], r64["fits"]) == (64, "bf16", True)
    for s in r["speedups"]:
        assert s["tpot_speedup"] > 0.9 and s["throughput_speedup"] > 1.0


def test_tpot_grows_with_context():
    r = S.context_growth(samples=3)
    json.dumps(r)
    tp = [x["tpot_us"] for x in r["rows"]]
    assert [x["context"] for x in r["rows"]] == [4096, 4608, 5120]
    assert tp[0] < tp[1] < tp[2]
    assert tp[0] < r["tpot_mean_us"] < tp[-1]
    assert r["tokens_per_s"] == pytest.approx(1e6 / r["tpot_mean_us"])


def test_throughput_per_node_grows_with_batch():
    r = S.batch_sweep(batches=(1, 8, 64))
    json.dumps(r)
    node = [x["tokens_per_s_per_node"] for x in r["rows"]]
    user = [x["tokens_per_s_per_user"] for x in r["rows"]]
    assert all(a < b for a, b in zip(node, node[1:]))
    assert all(a > b for a, b in zip(user, user[1:]))
    assert all(x["fits"] for x in r["rows"])
