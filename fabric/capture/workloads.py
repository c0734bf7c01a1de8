"""Built-in workloads at every scale: capture specs (arguments of fabric.capture.capture), not files.

Each names a model, its plan and the preset it is meant for; `tools/capture_workloads.py` captures them (seconds
each) and `fabric-replay FILE --preset PRESET` replays them. 1024 accelerators are reached the way a deployment
would fill them: data-parallel replicas of a 64-rank tensor-parallel group (DeepSeek-R1: 128 heads and 256
experts cap TP at 128 and EP at 256), or replicas of a TP64 x EP256 expert-parallel group.
"""
from __future__ import annotations

WORKLOADS: dict[str, dict] = {
    # DeepSeek-R1 decode, batch 1 per replica, context 4096, on the SD200 accelerator
    "deepseek-r1-tp64-ep128": dict(preset="sd200-128", capture=dict(model="deepseek-r1", tp=64, ep=128, batch=2)),
    "deepseek-r1-tp64-ep256": dict(preset="sd200-256", capture=dict(model="deepseek-r1", tp=64, ep=256, batch=4)),
    "deepseek-r1-tp64-ep256-x2": dict(preset="sd200-512",
                                      capture=dict(model="deepseek-r1", tp=64, ep=256, batch=4, replicas=2)),
    "deepseek-r1-tp64-ep256-x4": dict(preset="sd200-1024",
                                      capture=dict(model="deepseek-r1", tp=64, ep=256, batch=4, replicas=4)),
    "deepseek-r1-dp16-tp64": dict(preset="sd200-1024", capture=dict(model="deepseek-r1", tp=64, replicas=16)),
    # Kimi-K2: 64 heads, 384 experts: TP64 x EP128 (3 experts a rank), 8 replicas fill 1024
    "kimi-k2-tp64-ep128": dict(preset="sd200-128", capture=dict(model="kimi-k2", tp=64, ep=128, batch=2)),
    "kimi-k2-tp64-ep128-x8": dict(preset="sd200-1024",
                                  capture=dict(model="kimi-k2", tp=64, ep=128, batch=2, replicas=8)),
}
DEFAULTS = dict(context=4096, chip="sd200-accelerator", engine="analytic")


def capture_workload(name: str):
    """The Trace of workload `name` (WORKLOADS)."""
    from fabric.capture import capture
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload {name!r}; one of {', '.join(WORKLOADS)}")
    return capture(**dict(DEFAULTS, **WORKLOADS[name]["capture"]))
