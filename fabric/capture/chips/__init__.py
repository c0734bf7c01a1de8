"""Chip profiles: the compute-time model of one accelerator, read from fabric/capture/chips/<name>.toml.

    t = max(flops / (eta_c(flops) * peak[dtype]), bytes / (eta_m(bytes) * hbm)) + fixed_kernel_ns
    eta(x) = eta_min + (eta_max - eta_min) / (1 + (x_half / x) ** power)

Every parameter is documented (unit and reason) in its TOML file. Optional sections: [memory] (capacity, for
fabric.capture.memory), [launch] and [kernels] (the shape-aware model of fabric.capture.kernels; docs/compute-model.md).
`kernel_time_ns` above is the roofline-with-efficiencies model; `[chip] cost_model` names the model capture uses for
this chip by default ("roofline", or "shape" for the profiles rebuilt on the shape-aware model).
"""
from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from fabric.capture.kernels import LAUNCH_MODES, KernelParams
from fabric.errors import ConfigError

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp32": 4, "int4": 0.5}


def _eta(x: float, lo: float, hi: float, half: float, power: float) -> float:
    if x <= 0:
        return lo
    return lo + (hi - lo) / (1.0 + (half / x) ** power)


@dataclass(frozen=True)
class ChipProfile:
    name: str
    description: str
    hbm_gbps: float                     # GB/s, peak HBM bandwidth
    eta_m_max: float
    eta_m_min: float
    eta_m_half_bytes: float             # B
    eta_m_power: float
    eta_c_max: float
    eta_c_min: float
    eta_c_half_flops: float             # FLOP
    eta_c_power: float
    peak_tflops: dict = field(default_factory=dict)  # dtype -> TFLOP/s
    fixed_kernel_ns: float = 0.0        # ns per kernel
    reduce_fused: bool = True           # collective reductions run inside the communication kernel
    memory_gib: float = 0.0             # GiB of accelerator memory (0: unknown, no capacity check)
    reserved_gib: float = 0.0           # GiB the runtime keeps (context, library workspaces, buffers)
    kernels: KernelParams | None = None  # shape-aware model (fabric.capture.kernels); None without [kernels]
    cost_model: str = "roofline"        # capture's default kernel cost model for this chip ([chip] cost_model)

    @property
    def per_kernel_ns(self) -> float:
        """The fixed cost every kernel pays under this chip's default cost model: [kernel] fixed_ns (roofline) or
        the [launch] cost of its launch mode (shape); the constant calibrated on a published step time."""
        return self.kernels.fixed_ns(self.kernels.launch_mode) if self.cost_model == "shape" else self.fixed_kernel_ns

    def with_per_kernel_ns(self, ns: float) -> ChipProfile:
        """This profile with `per_kernel_ns` replaced (sensitivity studies, refits)."""
        if self.cost_model == "roofline":
            return replace(self, fixed_kernel_ns=float(ns))
        mode = "graph" if self.kernels.launch_mode == "graph" else "queue"
        return replace(self, kernels=replace(self.kernels, launch_ns={**self.kernels.launch_ns, mode: float(ns)}))

    def eta_m(self, nbytes: float) -> float:
        return _eta(nbytes, self.eta_m_min, self.eta_m_max, self.eta_m_half_bytes, self.eta_m_power)

    def eta_c(self, flops: float) -> float:
        return _eta(flops, self.eta_c_min, self.eta_c_max, self.eta_c_half_flops, self.eta_c_power)

    def memory_time_ns(self, nbytes: float) -> float:
        return 0.0 if nbytes <= 0 else nbytes / (self.eta_m(nbytes) * self.hbm_gbps)  # GB/s == B/ns

    def compute_time_ns(self, flops: float, dtype: str = "bf16") -> float:
        if flops <= 0:
            return 0.0
        peak = self.peak_tflops.get(dtype)
        if peak is None:
            raise ConfigError(f"chip {self.name} has no peak for dtype {dtype!r} "
                              f"(known: {', '.join(sorted(self.peak_tflops))})")
        return flops / (self.eta_c(flops) * peak * 1e3)  # TFLOP/s == 1e3 FLOP/ns

    def kernel_time_ns(self, flops: float, nbytes: float, dtype: str = "bf16") -> float:
        """Time of one kernel: roofline with size-dependent efficiencies plus the fixed per-kernel cost."""
        return max(self.compute_time_ns(flops, dtype), self.memory_time_ns(nbytes)) + self.fixed_kernel_ns

    def reduce_time_ns(self, out_bytes: float, n_inputs: int, dtype: str = "bf16", fused: bool | None = None) -> float:
        """Local reduction of `n_inputs` buffers of `out_bytes` each into one: reads n, writes 1.

        For collective lowering: memory time of the bytes touched, plus the fixed kernel cost unless the reduction
        is fused into the communication kernel (the profile's [reduce] fused, overridable per call)."""
        elems = out_bytes / DTYPE_BYTES.get(dtype, 2)
        t = max(self.compute_time_ns(elems * max(n_inputs - 1, 0), dtype),
                self.memory_time_ns(out_bytes * (n_inputs + 1)))
        fused = self.reduce_fused if fused is None else fused
        return t + (0.0 if fused else self.fixed_kernel_ns)

    def to_dict(self) -> dict:
        from dataclasses import asdict
        return asdict(self)


def chip_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir() if p.name.endswith(".toml"))


def _num(d: dict, key: str, where: str, lo: float = 0.0, hi: float = math.inf, lo_open=False) -> float:
    if key not in d:
        raise ConfigError(f"chip profile {where}: missing {key}")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < lo or v > hi \
            or (lo_open and v == lo):
        raise ConfigError(f"chip profile {where}: {key}={v!r} must be a number in "
                          f"{'(' if lo_open else '['}{lo}, {hi}]")
    return float(v)


def load_chip(name: str) -> ChipProfile:
    """A built-in profile by name (h200, h100, a100, sd200-accelerator) or a path to a TOML file of the same layout."""
    if name.endswith(".toml") and Path(name).is_file():
        text, where = Path(name).read_text(), name
    else:
        if name not in chip_names():
            close = difflib.get_close_matches(name, chip_names(), n=2)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise ConfigError(f"unknown chip profile {name!r}{hint} (available: {', '.join(chip_names())}, "
                              f"or a path to a .toml file)")
        text, where = resources.files(__name__).joinpath(f"{name}.toml").read_text(), name
    try:
        d = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"chip profile {where} is not valid TOML: {exc}") from None
    try:
        hbm, comp, peak, kern = d["hbm"], d["compute"], d["peak_tflops"], d["kernel"]
    except KeyError as exc:
        raise ConfigError(f"chip profile {where}: missing section [{exc.args[0]}]") from None
    peaks = {k: _num(peak, k, where + " [peak_tflops]", lo=0.0, lo_open=True) for k in peak}
    return ChipProfile(
        name=str(d.get("chip", {}).get("name", Path(name).stem)),
        description=str(d.get("chip", {}).get("description", "")),
        hbm_gbps=_num(hbm, "gbps", where + " [hbm]", lo=0.0, lo_open=True),
        eta_m_max=_num(hbm, "eta_max", where + " [hbm]", lo=0.0, hi=1.0, lo_open=True),
        eta_m_min=_num(hbm, "eta_min", where + " [hbm]", lo=0.0, hi=1.0, lo_open=True),
        eta_m_half_bytes=_num(hbm, "half_bytes", where + " [hbm]"),
        eta_m_power=_num(hbm, "power", where + " [hbm]", lo=0.0, lo_open=True),
        eta_c_max=_num(comp, "eta_max", where + " [compute]", lo=0.0, hi=1.0, lo_open=True),
        eta_c_min=_num(comp, "eta_min", where + " [compute]", lo=0.0, hi=1.0, lo_open=True),
        eta_c_half_flops=_num(comp, "half_flops", where + " [compute]"),
        eta_c_power=_num(comp, "power", where + " [compute]", lo=0.0, lo_open=True),
        peak_tflops=peaks,
        fixed_kernel_ns=_num(kern, "fixed_ns", where + " [kernel]"),
        reduce_fused=bool(d.get("reduce", {}).get("fused", True)),
        memory_gib=_num(d["memory"], "gib", where + " [memory]", lo=0.0, lo_open=True) if "memory" in d else 0.0,
        reserved_gib=_num(d["memory"], "reserved_gib", where + " [memory]") if "memory" in d else 0.0,
        kernels=_kernel_params(d, where),
        cost_model=_default_cost_model(d, where),
    )


def _default_cost_model(d: dict, where: str) -> str:
    model = _choice(d.get("chip", {}), "cost_model", where + " [chip]", ("roofline", "shape"), "roofline")
    if model == "shape" and "kernels" not in d:
        raise ConfigError(f"chip profile {where}: [chip] cost_model = \"shape\" needs a [kernels] section "
                          f"(docs/compute-model.md)")
    return model


_KERNEL_INTS = ("sms", "gemv_max_tokens", "gemv_tile_n", "gemm_tile_m", "gemm_tile_n", "gemm_tile_n_min", "mma_pad_m",
                "splitk_min_k", "splitk_max", "attn_tile_m", "attn_block_n", "elem_per_cta")


def _choice(d: dict, key: str, where: str, choices: tuple, default: str) -> str:
    v = d.get(key, default)
    if v not in choices:
        raise ConfigError(f"chip profile {where}: {key}={v!r} must be one of {', '.join(choices)}")
    return v


def _kernel_params(d: dict, where: str) -> KernelParams | None:
    """[kernels] and [launch] of a profile, or None when the profile has no [kernels] section."""
    if "kernels" not in d:
        return None
    k, la = d["kernels"], d.get("launch")
    if la is None:
        raise ConfigError(f"chip profile {where}: [kernels] needs a [launch] section (graph_ns, queue_ns, eager_ns)")
    ints = {}
    for key in _KERNEL_INTS:
        v = _num(k, key, where + " [kernels]", lo=1.0)
        if v != int(v):
            raise ConfigError(f"chip profile {where} [kernels]: {key}={v!r} must be an integer")
        ints[key] = int(v)
    return KernelParams(
        sm_gbps=_num(k, "sm_gbps", where + " [kernels]", lo=0.0, lo_open=True),
        bw_eta=_num(k, "bw_eta", where + " [kernels]", lo=0.0, hi=1.0, lo_open=True),
        gemv_inflight_kib=_num(k, "gemv_inflight_kib", where + " [kernels]", lo=0.0, lo_open=True),
        gemm_inflight_kib=_num(k, "gemm_inflight_kib", where + " [kernels]", lo=0.0, lo_open=True),
        round_trips=_num(k, "round_trips", where + " [kernels]"),
        l2_mib=_num(k, "l2_mib", where + " [kernels]"),
        l2_latency_ratio=_num(k, "l2_latency_ratio", where + " [kernels]", lo=0.0, hi=1.0, lo_open=True),
        exp_tops=_num(k, "exp_tops", where + " [kernels]", lo=0.0, lo_open=True),
        exchange_ns=_num(k, "exchange_ns", where + " [kernels]"),
        l2_gbps=_num(k, "l2_gbps", where + " [kernels]"),
        splitk_reduce=_choice(k, "splitk_reduce", where + " [kernels]", ("kernel", "fused"), "kernel"),
        attn_combine=_choice(k, "attn_combine", where + " [kernels]", ("kernel", "fused"), "kernel"),
        launch_mode=_choice(la, "mode", where + " [launch]", LAUNCH_MODES, "graph"),
        launch_ns={m: _num(la, f"{m}_ns", where + " [launch]") for m in LAUNCH_MODES},
        **ints)
