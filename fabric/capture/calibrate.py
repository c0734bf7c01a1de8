"""Calibration of the shape-aware kernel model (fabric.capture.kernels) on measured kernels, with leave-one-out.

    python -m fabric.capture.calibrate          # fit h200 on docs/sources.md §H200 GEMV, print the leave-one-out table

Fitted constants: [kernels] sm_gbps and bw_eta of a chip profile; everything else (SM count, tile shapes, bytes in
flight, round trips, split-K rule, launch cost) is fixed beforehand, and the kernel pipeline latency follows from
sm_gbps (latency_ns = round_trips x gemv_inflight / sm_gbps). The fit minimises the sum of squared log errors
(relative errors, so the 1.8 GB GEMV does not outweigh the 3.7 MB one) over a grid, then refines around the best
point. docs/compute-model.md reports the result; tests/test_kernel_model.py checks that the shipped h200 profile
holds the constants this fit returns and reproduces the rows.
"""
from __future__ import annotations

import math

import numpy as np

from fabric.capture.kernels import WEIGHT_BYTES, matrix_parts, params_of

# BF16 GEMV, batch 1, one NVIDIA H200, inside a CUDA graph, L2 defeated (docs/sources.md §H200 GEMV): K, N, us
H200_GEMV = ((7168, 2112, 13.5), (7168, 576, 7.8), (256, 7168, 3.7), (7168, 4096, 20.0), (7168, 129280, 408.0))
H200_TINY_KERNEL_US = 0.95   # the same source: a tiny elementwise kernel in a CUDA graph, end to end

GRID = dict(sm_gbps=np.geomspace(5.0, 400.0, 400), bw_eta=np.arange(0.80, 1.0001, 0.0025))


def _times(chip, rows, beta, eta) -> np.ndarray:
    """Predicted GEMV times (us) of `rows` for arrays beta (sm_gbps) / eta (bw_eta) broadcast together: graph
    launch mode, the same equations as fabric.capture.kernels._finish (tests check the two agree)."""
    kp = params_of(chip)
    fixed = kp.launch_ns["graph"]
    q, qg = kp.gemv_inflight_kib * 1024, kp.gemm_inflight_kib * 1024
    lam = kp.round_trips * q / beta                        # latency_ns, derived from beta (Little's law)
    out = []
    for K, N, _ in rows:
        parts = matrix_parts(chip, kp, 1, 1, K, N, WEIGHT_BYTES["bf16"], "bf16")
        b_unit = beta if parts["path"] == "gemv" else beta * qg / q
        t = fixed + lam + _mem(kp, chip.hbm_gbps, parts, b_unit, eta)
        for _name, p in parts["extra"]:
            t = t + fixed + _mem(kp, chip.hbm_gbps, p, beta, eta)
        out.append(t / 1e3)
    return np.stack(np.broadcast_arrays(*out))


def _mem(kp, hbm, parts, beta, eta):
    waves = math.ceil(parts["ctas"] / kp.sms)
    b, total = parts["b"], parts["total"]
    return np.maximum(waves * b / beta, b / beta + total / (eta * hbm))


def fit(chip, rows=H200_GEMV) -> dict:
    """Least-squares (log error) fit of sm_gbps and bw_eta on `rows`; returns them, the derived latency and the
    relative errors."""
    measured = np.array([r[2] for r in rows])[:, None, None]
    beta, eta = np.meshgrid(GRID["sm_gbps"], GRID["bw_eta"], indexing="ij")
    for _ in range(3):   # grid, then two finer grids around the best point
        cost = (np.log(_times(chip, rows, beta, eta) / measured) ** 2).sum(axis=0)
        i = np.unravel_index(np.argmin(cost), cost.shape)
        b0, e0 = float(beta[i]), float(eta[i])
        span_b = (np.log(beta.max()) - np.log(beta.min())) / 8
        span_e = (eta.max() - eta.min()) / 8
        beta, eta = np.meshgrid(np.exp(np.linspace(np.log(b0) - span_b, np.log(b0) + span_b, 81)),
                                np.clip(np.linspace(e0 - span_e, e0 + span_e, 81), 0.5, 1.0), indexing="ij")
    pred = _times(chip, rows, b0, e0)
    kp = params_of(chip)
    return dict(sm_gbps=b0, bw_eta=e0, latency_ns=kp.round_trips * kp.gemv_inflight_kib * 1024 / b0,
                errors=[float(p / r[2] - 1) for p, r in zip(pred, rows)])


def leave_one_out(chip, rows=H200_GEMV) -> list[dict]:
    """Fit on all rows but one and predict the held-back one, for each row in turn."""
    out = []
    for i, row in enumerate(rows):
        f = fit(chip, rows[:i] + rows[i + 1:])
        pred = float(_times(chip, [row], f["sm_gbps"], f["bw_eta"])[0])
        out.append(dict(row=row, predicted_us=pred, error=pred / row[2] - 1, fit=f))
    return out


def main() -> None:
    from fabric.capture.chips import load_chip
    chip = load_chip("h200")
    f = fit(chip)
    print(f"fit on all {len(H200_GEMV)} rows: sm_gbps={f['sm_gbps']:.2f} bw_eta={f['bw_eta']:.4f} "
          f"(derived latency_ns={f['latency_ns']:.0f})")
    shipped = chip
    for (K, N, us), e in zip(H200_GEMV, f["errors"]):
        print(f"  {K:>6} -> {N:<7} measured {us:7.1f} us  fit {us * (1 + e):7.1f} us  {100 * e:+6.1f} %")
    print("leave-one-out (fit on the other rows, predict this one):")
    for r in leave_one_out(shipped):
        K, N, us = r["row"]
        g = r["fit"]
        print(f"  {K:>6} -> {N:<7} measured {us:7.1f} us  predicted {r['predicted_us']:7.1f} us  "
              f"{100 * r['error']:+6.1f} %   (latency_ns={g['latency_ns']:.0f} sm_gbps={g['sm_gbps']:.2f} "
              f"bw_eta={g['bw_eta']:.4f})")


if __name__ == "__main__":
    main()
