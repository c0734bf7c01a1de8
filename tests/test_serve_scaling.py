"""tools/serve_scaling.py's search on a small model: refused plans are recorded, the ladder climbs until the SLOs are
missed, each size gets a best plan and the 64-vs-16 style ratios come out."""
import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def _tool():
    path = Path(__file__).resolve().parents[1] / "tools" / "serve_scaling.py"
    spec = importlib.util.spec_from_file_location("serve_scaling", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_search_picks_a_plan_per_size():
    from fabric.config import load_config
    tool = _tool()
    cfg = load_config("sd200")
    res = tool.search("toy-mla", [4, 8], requests=30, cfgs={4: cfg, 8: cfg},
                      shapes=("tp={n}", "attn=dp,ep={n}", "attn=tp3,ep={n}"), dtypes=("bf16",),
                      ladder=(1000, 10000, 100000), workload="poisson:rate=1,in=uniform:16-96,out=uniform:2-24",
                      slo=dict(slo_ttft_ms=0.5, slo_tpot_ms=0.2), echo=lambda *_: None)
    rows = res["rows"]
    assert [(r["size"], r["plan"]) for r in rows] == [
        (n, f"{s},weights=bf16") for n in (4, 8) for s in (f"tp={n}", f"attn=dp,ep={n}", f"attn=tp3,ep={n}")]
    refused = [r for r in rows if not r["fits"]]
    assert {r["plan"] for r in refused} == {"attn=tp3,ep=4,weights=bf16", "attn=tp3,ep=8,weights=bf16"}
    assert all(r["refused"] for r in refused)
    for r in rows:
        if r["fits"]:
            assert r["points"] and r["kv_tokens_total"] == r["kv_tokens_per_group"] * r["groups"]
            rates = [p["rate"] for p in r["points"]]
            met = [p["met_fraction"] >= tool.MET for p in r["points"]]
            # the ladder stops at the first rate missed; the best is the highest met
            assert r["best_rate"] == max((x for x, m in zip(rates, met) if m), default=None)
            # every plan here misses at 10,000 requests/s; bisections (geometric) between the last met and the
            # first missed narrow it
            assert rates[:3] == [1000, 10000, 3162.28] and len(rates) == 5
            assert r["best_rate"] < r["first_missed_rate"] <= 10000
    for n in ("4", "8"):
        b = res["best"][n]
        assert b is not None and b["output_tokens_per_s_per_accelerator"] > 0
        assert b["rate"] == max(r.get("best_rate") or 0 for r in rows if r["size"] == int(n))
    # the table renders every row; sizes other than 16 / 64 give no ratio
    assert len(tool.table(res).splitlines()) == 2 + len(rows)
    assert "ratio_64_vs_16" not in res
