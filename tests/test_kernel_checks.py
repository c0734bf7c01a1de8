"""tools/kernel_checks.py: the shape-aware kernel model against published per-kernel timings, per regime
(docs/compute-model.md §Checks). None of these figures was fitted; the bounds are the documented errors, so a model
change that moves a regime off its published timings fails here, and docs/data/kernel_checks.json must be rewritten
with it."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("kernel_checks", ROOT / "tools" / "kernel_checks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rows(tool):
    return tool.rows()


# geometric-mean |error| per regime, a little above what docs/compute-model.md reports.
# small-kernel-decode (18 rows, 1-256 tokens, CUDA graph, L2 warm): measured 25.7 % geomean since the reductions'
# chains (45.0 % before), largest 60.8 %; the bounds are those plus a small margin (2 and 4 points), so a change that
# moves these rows further off fails here.
BOUNDS = {"prefill-attention": 0.12, "prefill-gemm": 0.12, "decode-gemm": 0.18, "grouped-gemm": 0.17,
          "small-kernel": 0.40, "small-kernel-decode": 0.28}
DECODE_SMALL_MAX = 0.65


def test_every_regime_within_its_documented_error(tool, rows):
    s = tool.summary(rows)
    assert set(s) == set(BOUNDS)
    for regime, bound in BOUNDS.items():
        assert s[regime]["geomean_abs_error"] < bound, (regime, s[regime])


def test_decode_small_kernels_no_row_further_off(tool, rows):
    """Decode-size norms, QK norm, MoE router top-k and SiLU+FP8 (SGLang PRs 24733 / 15835 / 25835, Helion PR 2986):
    not fitted; the norms within -28 / +13 %, the router (eight selection rounds of warp reductions) -7 / +28 %, the
    fused activation 32-61 % fast (no chain explains it). No row may move beyond the largest error measured (60.8 %)
    plus 4 points."""
    dec = [r for r in rows if r["regime"] == "small-kernel-decode"]
    assert len(dec) == 18 and {r["chip"] for r in dec} == {"h100", "h200"}
    assert all(abs(r["error"]) < DECODE_SMALL_MAX for r in dec), [r for r in dec if abs(r["error"]) >= DECODE_SMALL_MAX]


def test_flash_attention_asymptote_from_datasheet_constants(rows):
    """Long non-causal FA3 at head dim 64 / 128 / 256: MMAs at the dense peak plus the exponentials at 3.9 T/s
    (no fitted constant) land within 6 % of the paper's 16k figures."""
    long = [r for r in rows if r["regime"] == "prefill-attention" and "non-causal" in r["shape"]
            and r["shape"].endswith("1 x 16384 tokens") and r["chip"] == "h100"]
    assert len(long) == 3 and all(abs(r["error"]) < 0.06 for r in long), long


def test_published_json_is_the_tool_output(tool, rows):
    """docs/data/kernel_checks.json is what the tool writes now (rerun `python tools/kernel_checks.py --out
    docs/data/kernel_checks.json` after a model change)."""
    on_disk = json.loads((ROOT / "docs" / "data" / "kernel_checks.json").read_text())
    assert on_disk == json.loads(json.dumps(dict(summary=tool.summary(rows), rows=rows)))
