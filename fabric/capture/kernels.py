"""Shape-aware kernel cost model: the time of one kernel from its shape, not only from its bytes and flops.

docs/compute-model.md derives every equation and lists every constant with its source. In short, for a kernel cut
into C CTAs (thread blocks) spread over the chip's `sms` compute units:

    W      = ceil(C / sms)                              waves of CTAs over the compute units
    b      = bytes one CTA streams from HBM (its slice of the weights or of the KV cache)
    beta_sm= sm_gbps (GEMV-class kernels, fitted) or gemm_inflight / latency (pipelined GEMM and attention)
    t_lat  = W * b / beta_sm                            Little's law: one unit keeps a bounded number of bytes in
                                                        flight, so it streams at most beta_sm = in-flight / latency
    t_bw   = b / beta_sm + D / (eta * hbm)              the first CTA's serial stream (pipeline fill), then all D
                                                        bytes at the sustained HBM ceiling
    t_mem  = max(t_lat, t_bw)
    t_comp = W * (flops_per_cta / (peak[dtype] / sms * eta_c) + e / (B / sms))
                                                        tiles padded to the MMA shape, wave-quantised; a GEMM
                                                        tile's output store e follows its main loop
    body   = latency_ns + max(t_mem, t_comp)            latency_ns = round_trips x gemv_inflight / beta_sm: the
                                                        prologue of a matrix / attention kernel (load the
                                                        activations, then the first weights); 0 for small kernels
    time   = launch(mode, body) + extra kernels (split-K reduce, split-KV combine) unless fused

Launch modes (chip profile [launch]): "graph" (CUDA-graph replay: graph_ns + body), "queue" (one kernel pushed to a
command queue by a native runtime: queue_ns + body), "eager" (a framework issuing each op from the host: the GPU
waits for the host, max(queue_ns + body, eager_ns)).

Kernel shapes:
  matrix     G independent (M x K) @ (K x N) products (linear: G = 1; batched / grouped GEMM: G > 1).
             M <= gemv_max_tokens runs as a GEMV-class kernel (gemv_tile_n outputs per CTA, the whole K per CTA),
             larger M as a tiled GEMM (gemm_tile_m rows; the N tile from gemm_tile_n_min to gemm_tile_n with the
             fewest waves, then the fullest last wave). Few output tiles and a long K: split-K into S
             slices (enough CTAs for one wave, each slice >= splitk_min_k) and a reduce kernel over S fp32 partials.
  attention  decode attention over L cached tokens (flash-decoding / split-KV): one CTA per (sequence, KV group,
             KV split); a combine kernel merges the splits. Prefill attention (a mixed step's prompt tokens,
             FlashAttention): one CTA per (query tile, head), each over the keys its tokens attend to in blocks that
             cost two MMAs at the dense peak then their exponentials at exp_tops; CTAs list-scheduled.
  rows       one CTA per row (RMSNorm, softmax, top-k, embedding gather).
  elementwise elem_per_cta elements per CTA (activations, RoPE, residual add, copy / cat).
             Rows and elementwise kernels read an input their producer just wrote from L2 when it fits (l2_mib):
             the same stream over the shorter L2 latency (sm_gbps / l2_latency_ratio), under the L2's ceiling
             (l2_gbps): t_mem = max(W * b / beta_l2, D / l2_gbps).
             A rows kernel's reductions (a norm's sum of squares, a top-k's selection rounds) form a serial chain
             of dependent exchanges between its threads on top of the stream: exchanges x exchange_ns.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from fabric.errors import ConfigError

LAUNCH_MODES = ("graph", "eager", "queue")
OPS = ("linear", "bmm", "grouped", "attention", "norm", "softmax", "topk", "elementwise", "copy", "embedding")
# bytes per weight element; int4 packs two per byte (group scales are counted by fabric.capture.memory)
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp32": 4.0}
# the tensor-core input type a weight dtype runs at: int4 weights are dequantised to BF16 in registers (W4A16)
COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "int4": "bf16", "fp32": "fp32"}
ACT = 2  # activations and KV cache are BF16
VECTOR_BYTES = 16   # the widest load one thread issues (128-bit): a row kernel gives each thread one such vector
WARP = 32           # threads of a warp: a warp reduction is log2(32) = 5 shuffle steps
# dependent exchanges of one reduction: a warp's 5 shuffle steps; over several warps, each warp's 5 steps, its partial
# to shared memory, a barrier, warp 0's 5 steps over the partials, the result to shared memory, a barrier, every
# thread's read of it (the two-level block reduce of RMSNorm kernels: 10 shuffles, 2 shared-memory rounds, 2 barriers)
WARP_REDUCE_EXCHANGES = 5
BLOCK_REDUCE_EXCHANGES = 14


@dataclass(frozen=True)
class KernelParams:
    """The [kernels] and [launch] sections of a chip profile (units and reasons in the TOML files)."""
    sms: int                          # compute units (SMs)
    sm_gbps: float                    # GB/s (== B/ns) one unit streams in a GEMV: bytes in flight / memory latency
    bw_eta: float                     # fraction of peak HBM bandwidth sustained by a long stream
    gemv_inflight_kib: float = 32.0   # KiB one unit keeps in flight in a GEMV-class (register-load) kernel
    gemm_inflight_kib: float = 128.0  # KiB in flight in a pipelined (TMA, multi-stage) GEMM or attention kernel
    round_trips: float = 2.0          # dependent memory round trips of a matrix / attention kernel's prologue
    gemv_max_tokens: int = 8
    gemv_tile_n: int = 8
    gemm_tile_m: int = 128
    gemm_tile_n: int = 128
    gemm_tile_n_min: int = 16         # narrowest GEMM N tile (and the step between the tiles a library offers)
    mma_pad_m: int = 8
    splitk_min_k: int = 1024
    splitk_max: int = 16
    splitk_reduce: str = "kernel"     # "kernel": a separate reduce kernel; "fused": reduced in the GEMM's epilogue
    attn_tile_m: int = 64
    attn_block_n: int = 64
    attn_combine: str = "kernel"      # split-KV combine: "kernel" or "fused"
    elem_per_cta: int = 4096
    l2_mib: float = 0.0               # MiB of L2: a small kernel's input just written by its producer is read from
    #                                   L2 when it fits (0: no cache modelled, inputs stream from HBM)
    l2_latency_ratio: float = 1.0     # loaded L2-hit latency over the loaded HBM latency (mem_latency_ns)
    exp_tops: float = 0.0             # T exp/s of the special-function units (FlashAttention's softmax); 0: none
    exchange_ns: float = 0.0          # ns of one dependent exchange between a CTA's threads (a shuffle step, a
    #                                   shared-memory round, a barrier): a small kernel's reductions cost these
    l2_gbps: float = 0.0              # GB/s the L2 serves in all: the ceiling of a small kernel whose data is L2-
    #                                   resident (0: the HBM ceiling)
    launch_mode: str = "graph"
    launch_ns: dict = field(default_factory=dict)   # mode -> ns

    @property
    def mem_latency_ns(self) -> float:
        """Loaded memory latency implied by Little's law: bytes in flight / bandwidth of one unit."""
        return self.gemv_inflight_kib * 1024 / self.sm_gbps

    @property
    def latency_ns(self) -> float:
        """Pipeline latency of a matrix / attention kernel beyond the launch: `round_trips` memory latencies
        (load the activations, then the first weights; the reduction and store overlap the tail)."""
        return self.round_trips * self.mem_latency_ns

    @property
    def gemm_sm_gbps(self) -> float:
        """What one unit streams in a pipelined GEMM / attention kernel: more bytes in flight, same latency."""
        return self.gemm_inflight_kib * 1024 / self.mem_latency_ns

    def fixed_ns(self, mode: str) -> float:
        mode = mode or self.launch_mode
        if mode not in LAUNCH_MODES:
            raise ConfigError(f"launch mode {mode!r} is not one of {', '.join(LAUNCH_MODES)}")
        return self.launch_ns["graph" if mode == "graph" else "queue"]


# ---------------------------------------------------------------- the two regimes, shared by every kernel shape

def _stream(kp: KernelParams, hbm_gbps, ctas: int, b: float, total: float, sm_gbps=None, bw_eta=None):
    """Memory time of `ctas` CTAs each streaming `b` bytes, `total` bytes in all: (t_mem, t_lat, t_bw).

    Works on numpy arrays of sm_gbps / bw_eta too (the calibration fits them on a grid)."""
    beta = kp.sm_gbps if sm_gbps is None else sm_gbps
    eta = kp.bw_eta if bw_eta is None else bw_eta
    if ctas <= 0 or total <= 0:
        z = np.zeros_like(np.asarray(beta, float)) if isinstance(beta, np.ndarray) else 0.0
        return z, z, z
    waves = math.ceil(ctas / kp.sms)
    t_lat = waves * b / beta
    t_bw = b / beta + total / (eta * hbm_gbps)
    return np.maximum(t_lat, t_bw), t_lat, t_bw


def _compute(chip, kp: KernelParams, ctas: int, flops_per_cta: float, dtype: str, epilogue_bytes: float = 0.0) \
        -> float:
    """Wave-quantised MMA time; a GEMM tile's output store (`epilogue_bytes`, at the unit's share of the HBM
    ceiling) follows its main loop rather than overlapping it."""
    if ctas <= 0 or flops_per_cta <= 0:
        return 0.0
    peak = chip.peak_tflops.get(dtype)
    if peak is None:
        raise ConfigError(f"chip {chip.name} has no peak for dtype {dtype!r} "
                          f"(known: {', '.join(sorted(chip.peak_tflops))})")
    per_unit = peak * 1e3 / kp.sms * chip.eta_c_max          # FLOP/ns of one unit at the sustained rate
    store = epilogue_bytes / (kp.bw_eta * chip.hbm_gbps / kp.sms) if epilogue_bytes else 0.0
    return math.ceil(ctas / kp.sms) * (flops_per_cta / per_unit + store)


def _pad(x: int, m: int) -> int:
    return -(-x // m) * m


def params_of(chip) -> KernelParams:
    kp = getattr(chip, "kernels", None)
    if kp is None:
        raise ConfigError(f"chip profile {chip.name} has no [kernels] section: the shape-aware model needs its "
                          f"compute units, per-unit bandwidth and tile shapes (see fabric/capture/chips/h200.toml)")
    return kp


# ---------------------------------------------------------------- kernel shapes

def linear_dims(style: str, d: dict, shard) -> tuple[int, int]:
    """(in, out) of a linear op on one rank: column-parallel (and vocab) layers shard the output, row-parallel ones
    the input; `shard(n)` is n over the op's tensor-parallel degree, rounded up."""
    i, out = d["in"], d["out"]
    if style in ("colwise", "vocab"):
        out = shard(out)
    elif style == "rowwise":
        i = shard(i)
    return i, out


def matrix_parts(chip, kp: KernelParams, G: int, M: int, K: int, N: int, wbytes: float, dtype: str,
                 fused_reduce: bool | None = None) -> dict:
    """Tiles, split-K, waves and per-CTA work of G (M x K) @ (K x N) products; no times (see `_finish`)."""
    gemv = M <= kp.gemv_max_tokens
    tile_m = min(kp.gemm_tile_m, _pad(M, kp.mma_pad_m))
    tile_n = kp.gemv_tile_n if gemv else _gemm_tile_n(kp, G * math.ceil(M / tile_m), N)
    tiles = G * math.ceil(M / tile_m) * math.ceil(N / tile_n)
    split = 1
    if tiles < kp.sms:
        split = max(1, min(kp.sms // tiles, K // kp.splitk_min_k, kp.splitk_max))
    k_chunk = math.ceil(K / split)
    ctas = tiles * split
    b = k_chunk * min(tile_n, N) * wbytes        # a CTA's serial HBM stream: its weight slice (the activation
    #                                             slice is shared by every CTA and hits in L2)
    total = G * K * N * wbytes + G * M * (K + N) * ACT
    flops_cta = 2.0 * tile_m * min(tile_n, N) * k_chunk
    fused = (kp.splitk_reduce == "fused") if fused_reduce is None else fused_reduce
    extra = []
    if split > 1:
        partial = split * G * M * N * 4
        if fused:
            total += partial                      # partial sums accumulated in place (atomics / serial epilogue)
        else:
            extra.append(("splitk_reduce", _elementwise_parts(kp, split * G * M * N, partial + G * M * N * ACT,
                                                              float(G * M * N * split))))
    return dict(kind="matrix", path="gemv" if gemv else "gemm", tile=(tile_m, tile_n), tiles=tiles, split=split,
                ctas=ctas, b=b, total=total, flops_cta=flops_cta, dtype=dtype, latency=True, extra=extra,
                flops=2.0 * G * M * K * N, bytes=total, beta=kp.sm_gbps if gemv else kp.gemm_sm_gbps,
                epilogue_bytes=0.0 if gemv else tile_m * min(tile_n, N) * (4 if split > 1 else ACT))


def _gemm_tile_n(kp: KernelParams, row_tiles: int, N: int) -> int:
    """The N tile a GEMM library picks for `row_tiles` rows of M tiles: from gemm_tile_n_min to gemm_tile_n in steps
    of gemm_tile_n_min, the fewest waves over the units, then the fullest last wave, then the widest tile."""
    def key(tn):
        tiles = row_tiles * math.ceil(N / tn)
        waves = math.ceil(tiles / kp.sms)
        return waves, -(tiles - (waves - 1) * kp.sms), -tn
    return min(range(kp.gemm_tile_n_min, kp.gemm_tile_n + 1, kp.gemm_tile_n_min), key=key)


def attention_parts(chip, kp: KernelParams, seqs: int, groups: int, heads_per_group: int, ctx: int,
                    row_bytes: float, dk: int, dv: int, fused_combine: bool | None = None,
                    max_split: int | None = None) -> dict:
    """Decode attention (flash-decoding): `seqs` sequences x `groups` KV groups, each of `heads_per_group` query
    heads, over `ctx` cached tokens of `row_bytes` each; split along the KV to fill the compute units.
    `max_split` caps the KV split (1: a kernel without split-KV, e.g. a framework's memory-efficient attention)."""
    units = max(1, seqs * groups)
    blocks = max(1, math.ceil(ctx / kp.attn_block_n))
    split = max(1, min(math.ceil(kp.sms / units), blocks))
    if max_split is not None:
        split = max(1, min(split, int(max_split)))
    chunk = math.ceil(ctx / split)
    ctas = units * split
    hq = heads_per_group
    b = chunk * row_bytes + hq * dk * ACT
    total = units * ctx * row_bytes + units * hq * (dk + dv) * ACT
    m = _pad(hq, kp.attn_tile_m)                          # query heads padded to the kernel's row tile
    flops_cta = 2.0 * m * chunk * (dk + dv)
    fused = (kp.attn_combine == "fused") if fused_combine is None else fused_combine
    extra = []
    if split > 1:
        partial = units * split * hq * (dv + 1) * 4       # fp32 partial outputs and log-sum-exp per split
        if fused:
            total += partial
        else:
            extra.append(("splitkv_combine", _elementwise_parts(kp, units * split * hq * dv,
                                                                partial + units * hq * dv * ACT,
                                                                float(units * split * hq * dv * 3))))
    return dict(kind="attention", path="split-kv", tile=(m, kp.attn_block_n), tiles=units, split=split, ctas=ctas,
                b=b, total=total, flops_cta=flops_cta, dtype="bf16", latency=True, extra=extra,
                flops=2.0 * units * hq * ctx * (dk + dv), bytes=total, beta=kp.gemm_sm_gbps)


def _lpt_makespan(work, units: int) -> float:
    """Makespan of CTAs of `work` ns each on `units` compute units, longest first, each to the least-loaded unit
    (FlashAttention launches the longest causal tiles first); rounds of `units` CTAs keep this numpy, not per CTA."""
    w = np.sort(np.asarray(work, float))[::-1]
    load = np.zeros(units)
    for i in range(0, len(w), units):
        chunk = w[i:i + units]
        load.sort()
        load[:len(chunk)] += chunk
    return float(load.max())


def prefill_attention_parts(chip, kp: KernelParams, tokens: int, seqs: int, heads: int, ctx: float,
                            cta_row_bytes: float, kv_bytes: float, dk: int, dv: int, causal: bool = True) -> dict:
    """Prefill attention (FlashAttention forward) of `tokens` prompt tokens in `seqs` sequences, `ctx` keys per
    query on average: one CTA per (query tile of gemm_tile_m tokens of one sequence, head), each over its keys in
    blocks of gemm_tile_n. A block costs its two MMAs at the dense peak plus its exponentials on the special-function
    units (exp_tops), one after the other; each CTA pays the prologue (round_trips memory latencies: Q, then the
    first K/V block). Causal: a sequence's prefix P = ctx - (its tokens + 1) / 2 is recovered from the mean, tile i
    sees P + (i + 1) x tile_m keys (diagonal blocks computed whole); the CTAs are list-scheduled longest first.
    HBM serves each sequence's KV (`kv_bytes` in all) once, the other tiles and heads hit L2."""
    bm, bn = kp.gemm_tile_m, kp.gemm_tile_n
    per_seq = math.ceil(tokens / seqs)
    tiles = math.ceil(per_seq / bm)
    if causal:
        prefix = max(0.0, ctx - (per_seq + 1) / 2)
        keys = np.minimum(prefix + bm * np.arange(1, tiles + 1), prefix + per_seq)
    else:
        keys = np.full(tiles, float(ctx))
    blocks = np.ceil(keys / bn)
    peak = chip.peak_tflops["bf16"] * 1e3 / kp.sms                      # FLOP/ns of one unit
    t_block = 2.0 * bm * bn * (dk + dv) / peak + (bm * bn / (kp.exp_tops * 1e3 / kp.sms) if kp.exp_tops else 0.0)
    work = kp.latency_ns + blocks * t_block                            # ns per CTA of each tile
    ctas = seqs * tiles * heads
    b = float(keys.max()) * cta_row_bytes + bm * dk * ACT
    total = kv_bytes + tokens * heads * (dk + dv) * ACT
    return dict(kind="attention", path="flash-prefill", tile=(bm, bn), tiles=ctas, split=1, ctas=ctas, b=b,
                total=total, flops_cta=2.0 * bm * float(keys.mean()) * (dk + dv), dtype="bf16", latency=False,
                extra=[], flops=2.0 * tokens * heads * ctx * (dk + dv), bytes=total, beta=kp.gemm_sm_gbps,
                t_comp_ns=_lpt_makespan(np.repeat(work, seqs * heads), kp.sms))


def _small_beta(kp: KernelParams, src: str) -> float:
    """What one unit streams in a small kernel: the GEMV-class rate, over the shorter L2 latency when its input was
    just written by the kernel before it and still sits in L2 (src "l2")."""
    return kp.sm_gbps / kp.l2_latency_ratio if src == "l2" else kp.sm_gbps


def input_source(kp: KernelParams, in_bytes: float) -> str:
    """Where a small kernel's input lives when its producer ran just before: "l2" if it fits the L2, else "hbm"."""
    return "l2" if in_bytes <= kp.l2_mib * 2 ** 20 else "hbm"


def reduce_exchanges(threads: int) -> int:
    """Dependent exchanges of one reduction over `threads` threads: a warp's shuffles, or the two-level block
    reduce."""
    return WARP_REDUCE_EXCHANGES if threads <= WARP else BLOCK_REDUCE_EXCHANGES


def norm_exchanges(width: int, reductions: int = 1) -> int:
    """A row kernel over `width` BF16 values, one 16-byte vector a thread (at most 1024 threads): `reductions`
    block-wide reductions (a norm's sum of squares: 1; a softmax's max then sum: 2)."""
    threads = min(1024, -(-width * ACT // VECTOR_BYTES))
    return reductions * reduce_exchanges(threads)


def topk_exchanges(experts: int, k: int, n_group: int = 1, topk_group: int = 1) -> int:
    """A router's top-k over `experts` scores of one token: k selection rounds, each a max then the lowest index
    holding it (two dependent reductions), then the sum that renormalises the k weights; group-limited routing
    (n_group > 1) first takes each group's top two (two reductions) and topk_group rounds over the groups. One warp
    a token while the scores fit 16 a lane (SGLang's Triton router, num_warps = 1 up to 512 experts), a block
    reduce beyond."""
    reductions = 2 * k + 1 + (2 + 2 * topk_group if n_group > 1 else 0)
    return reductions * reduce_exchanges(-(-experts // 16))


def _rows_parts(kp: KernelParams, rows: int, nbytes: float, flops: float, src: str = "hbm",
                exchanges: int = 0) -> dict:
    rows = max(1, int(rows))
    return dict(kind="rows", path="row-per-cta", tile=None, tiles=rows, split=1, ctas=rows, b=nbytes / rows,
                total=nbytes, flops_cta=0.0, dtype="fp32", latency=False, extra=[], flops=flops, bytes=nbytes,
                beta=_small_beta(kp, src), src=src, exchanges=exchanges)


def _elementwise_parts(kp: KernelParams, elems: int, nbytes: float, flops: float, src: str = "hbm") -> dict:
    ctas = max(1, math.ceil(elems / kp.elem_per_cta))
    return dict(kind="elementwise", path="elementwise", tile=None, tiles=ctas, split=1, ctas=ctas, b=nbytes / ctas,
                total=nbytes, flops_cta=0.0, dtype="fp32", latency=False, extra=[], flops=flops, bytes=nbytes,
                beta=_small_beta(kp, src), src=src)


def _finish(chip, kp: KernelParams, parts: dict, launch: str | None) -> dict:
    """Times of one kernel (and its extra kernels) from its parts; every time in ns."""
    mode = launch or kp.launch_mode
    fixed = kp.fixed_ns(mode)
    beta = parts.get("beta", kp.sm_gbps)
    t_mem, t_lat, t_bw = (float(x) for x in _stream(kp, chip.hbm_gbps, parts["ctas"], parts["b"], parts["total"],
                                                    sm_gbps=beta))
    if parts.get("src") == "l2" and kp.l2_gbps > 0:   # L2-resident: each unit's stream or the L2's own ceiling
        t_bw = parts["total"] / kp.l2_gbps
        t_mem = max(t_lat, t_bw)
    chain = parts.get("exchanges", 0) * kp.exchange_ns
    if "t_comp_ns" in parts:       # scheduled per CTA by its shape (prefill attention)
        t_comp = parts["t_comp_ns"]
    elif parts["kind"] in ("matrix", "attention"):
        t_comp = _compute(chip, kp, parts["ctas"], parts["flops_cta"], parts["dtype"], parts.get("epilogue_bytes", 0.0))
    else:  # vector work on the CUDA cores: flops at the fp32 peak over the CTAs' units
        n_units = min(parts["ctas"], kp.sms)
        t_comp = parts["flops"] / (chip.peak_tflops.get("fp32", 1.0) * 1e3 * n_units / kp.sms) \
            if parts["flops"] > 0 else 0.0
    lat = kp.latency_ns if parts["latency"] else 0.0
    body = lat + max(t_mem, t_comp) + chain
    if mode == "eager":
        own = max(fixed + body, kp.launch_ns["eager"])
    else:
        own = fixed + body
    sub = [_finish(chip, kp, p, mode) | {"name": name} for name, p in parts["extra"]]
    total = own + sum(s["time_ns"] for s in sub)
    if chain >= max(t_mem, t_comp):
        regime = "latency"          # the reductions' serial chain of exchanges outlasts the stream
    elif t_comp >= t_mem:
        regime = "compute"
    elif t_lat >= t_bw or parts["b"] / beta >= parts["total"] / (kp.bw_eta * chip.hbm_gbps):
        regime = "latency"          # too few CTAs in flight, or one CTA's serial stream dominates (Little's law)
    else:
        regime = "bandwidth"
    if own - body >= body:
        regime = "launch"
    return dict(time_ns=float(total), time_us=float(total) / 1e3, fixed_ns=float(own - body),
                fixed_total_ns=float(own - body) + sum(s["fixed_total_ns"] for s in sub), latency_ns=lat,
                sync_ns=float(chain),
                memory_ns=float(t_mem),
                compute_ns=float(t_comp), regime=regime, kernels=1 + sum(s["kernels"] for s in sub),
                ctas=parts["ctas"], waves=math.ceil(parts["ctas"] / kp.sms), split=parts["split"],
                tiles=parts["tiles"], tile=parts["tile"], path=parts["path"], launch=mode,
                flops=float(parts["flops"]), bytes=float(parts["bytes"]), extra=sub)


# ---------------------------------------------------------------- public entry points

def predict(chip, op: str, *, shape: tuple = (), tokens: int = 1, dtype: str = "bf16", launch: str | None = None,
            groups: int = 1, ctx: int = 0, heads: int = 1, kv_heads: int = 1, head_dim: int = 128,
            rope: int = 0, fused: bool | None = None, phase: str = "decode", seqs: int = 1,
            inputs: str = "hbm", topk: int = 8) -> dict:
    """Predicted time of one op on `chip` with its breakdown (every time in ns, plus time_us).

    op        linear | bmm | grouped (shape IN,OUT; `groups` products; `dtype` the weight dtype)
              attention (heads / kv_heads / head_dim of this rank, ctx cached tokens; MLA: kv_heads=1, head_dim =
              kv_lora, rope = rope dims, the latent shared by every head)
              attention, phase "prefill": causal FlashAttention forward of `tokens` prompt tokens split evenly over
              `seqs` sequences, ctx = the keys a sequence's last prompt token sees (its prefix + its tokens); MLA
              in the multi-head form (head_dim = the per-head nope / v size, rope the shared rope dims)
              norm | softmax | topk | embedding (shape WIDTH: one row of WIDTH per token)
              elementwise | copy (shape ELEMENTS per token)
    tokens    rows of the activation (batch x tokens per sequence at decode)
    fused     True: split-K reduce / split-KV combine inside the kernel (a serving engine's fused kernels);
              False: as separate kernels; None: the chip profile's choice
    topk      topk: experts each token selects (8: DeepSeek-V3/R1's num_experts_per_tok), ungrouped
    inputs    norm | softmax | topk | elementwise | copy: "hbm" (a standalone kernel, as a benchmark that flushes
              the cache runs it) or "l2" (written by the kernel just before, as in a decode step)
    """
    kp = params_of(chip)
    if op not in OPS:
        raise ConfigError(f"unknown op {op!r}; use one of {', '.join(OPS)}")
    if dtype not in WEIGHT_BYTES:
        raise ConfigError(f"dtype {dtype!r} is not supported; use one of {', '.join(WEIGHT_BYTES)}")
    if not isinstance(tokens, int) or tokens < 1:
        raise ConfigError(f"--tokens={tokens!r} must be a positive integer")
    shape = tuple(shape)
    if any((not isinstance(x, int)) or x < 1 for x in shape):
        raise ConfigError(f"--shape {','.join(map(str, shape))}: every dimension must be a positive integer")
    need = {"linear": 2, "bmm": 2, "grouped": 2, "attention": 0}.get(op, 1)
    if op != "attention" and len(shape) != need:
        raise ConfigError(f"--op {op} needs --shape with {need} dimension{'s' if need > 1 else ''} "
                          f"({'IN,OUT' if need == 2 else 'WIDTH'}), got {len(shape)}")
    if phase not in ("decode", "prefill"):
        raise ConfigError(f"--phase {phase!r} must be decode or prefill")
    if inputs not in ("hbm", "l2"):
        raise ConfigError(f"--inputs {inputs!r} must be hbm or l2")
    w = WEIGHT_BYTES[dtype]
    src = inputs
    if op in ("linear", "bmm", "grouped"):
        K, N = shape
        parts = matrix_parts(chip, kp, groups, tokens, K, N, w, COMPUTE_DTYPE[dtype], fused)
    elif op == "attention":
        if ctx < 1 or heads < 1 or kv_heads < 1 or heads % kv_heads:
            raise ConfigError(f"attention needs ctx >= 1 and heads ({heads}) a multiple of kv_heads ({kv_heads})")
        if phase == "prefill":
            parts = _prefill_parts(chip, kp, tokens, seqs, ctx, heads, kv_heads, head_dim, rope)
        elif rope:   # MLA: one latent of head_dim (kv_lora) + rope per token, shared by every head
            parts = attention_parts(chip, kp, tokens, 1, heads, ctx, (head_dim + rope) * ACT, head_dim + rope,
                                    head_dim, fused)
        else:
            parts = attention_parts(chip, kp, tokens, kv_heads, heads // kv_heads, ctx, 2 * head_dim * ACT,
                                    head_dim, head_dim, fused)
    elif op in ("norm", "softmax"):
        (W,) = shape
        parts = _rows_parts(kp, tokens, 2 * tokens * W * ACT + W * ACT, 5.0 * tokens * W, src,
                            norm_exchanges(W, 1 if op == "norm" else 2))
    elif op == "topk":
        (E,) = shape
        if not isinstance(topk, int) or not 1 <= topk <= E:
            raise ConfigError(f"--topk={topk!r} must be an integer from 1 to the experts ({E})")
        parts = _rows_parts(kp, tokens, tokens * E * 4 + E * 4 + tokens * topk * 8,
                            tokens * E * max(1.0, math.log2(E)) * 2, src, topk_exchanges(E, topk))
    elif op == "embedding":
        (W,) = shape
        parts = _rows_parts(kp, tokens, 2 * tokens * W * ACT + tokens * 8, 0.0)
    else:  # elementwise / copy: read and write every element once (elementwise: two inputs)
        (E,) = shape
        n_in = 2 if op == "elementwise" else 1
        parts = _elementwise_parts(kp, tokens * E, (n_in + 1) * tokens * E * ACT, float(tokens * E), src)
    out = _finish(chip, kp, parts, launch)
    out.update(op=op, shape=list(shape), tokens=tokens, dtype=dtype, chip=chip.name)
    return out


def _prefill_parts(chip, kp: KernelParams, tokens: int, seqs: int, ctx: int, heads: int, kv_heads: int,
                   head_dim: int, rope: int) -> dict:
    """predict's prefill attention: `tokens` split over `seqs` sequences whose last token sees `ctx` keys."""
    if not isinstance(seqs, int) or seqs < 1 or tokens % seqs:
        raise ConfigError(f"--seqs={seqs!r} must be a positive integer dividing --tokens={tokens}")
    per_seq = tokens // seqs
    if ctx < per_seq:
        raise ConfigError(f"--ctx={ctx} must be at least the prompt tokens per sequence ({per_seq}): the last "
                          f"prompt token sees its prefix and every prompt token")
    mean_keys = ctx - (per_seq - 1) / 2
    if rope:      # MLA, multi-head form: per-head keys (nope + the shared rope) and values after kv_b_proj
        dk, dv = head_dim + rope, head_dim
        row, kv = (dk + dv) * ACT, seqs * ctx * (heads * (head_dim + head_dim) + rope) * ACT
    else:
        dk = dv = head_dim
        row, kv = 2 * head_dim * ACT, seqs * ctx * kv_heads * 2 * head_dim * ACT
    return prefill_attention_parts(chip, kp, tokens, seqs, heads, mean_keys, row, kv, dk, dv)


def logical_op_time(chip, op, t_shard: int, b: int, wdtype: str, moe: dict | None = None,
                    launch: str | None = None, fused: bool | None = None, flops: float | None = None,
                    nbytes: float | None = None) -> dict:
    """The shape-aware time of one logical op (fabric.capture.graph) on one rank: the same sharding as
    fabric.capture.plan.kernel_cost, costed by shape. `flops` and `nbytes` (kernel_cost's values) are needed for the
    small ops whose traffic that function already spells out (RoPE, embedding, top-k, MoE combine).
    Returns `predict`'s breakdown."""
    kp = params_of(chip)
    d = op.dims
    w = WEIGHT_BYTES[wdtype]
    cd = COMPUTE_DTYPE[wdtype]
    sh = lambda n: -(-n // t_shard)  # noqa: E731
    o = op.op
    if o == "norm":
        n = d["n"] if op.style == "replicated" else sh(d["n"])
        rows, width = b * n, d["width"]
        parts = _rows_parts(kp, rows, (4 if d["add"] else 2) * rows * width * ACT + width * ACT, 4.0 * rows * width,
                            input_source(kp, (2 if d["add"] else 1) * rows * width * ACT), norm_exchanges(width))
    elif o == "linear":
        i, out = linear_dims(op.style, d, sh)
        parts = matrix_parts(chip, kp, 1, b, i, out, w, cd, fused)
    elif o == "qkv_linear":
        q, kv = d["heads"] // t_shard, sh(d["kv_heads"])
        parts = matrix_parts(chip, kp, 1, b, d["in"], (q + 2 * kv) * d["head_dim"], w, cd, fused)
    elif o == "router":
        parts = matrix_parts(chip, kp, 1, b, d["in"], d["experts"], w, cd, fused)
    elif o == "mla_absorb_k":
        parts = matrix_parts(chip, kp, d["heads"] // t_shard, b, d["nope"], d["kv_lora"], w, cd, fused)
    elif o == "mla_absorb_v":
        parts = matrix_parts(chip, kp, d["heads"] // t_shard, b, d["kv_lora"], d["v_dim"], w, cd, fused)
    elif o == "mla_attention":
        hl = d["heads"] // t_shard
        parts = attention_parts(chip, kp, b, 1, hl, d["ctx"], (d["kv_lora"] + d["rope"]) * ACT,
                                d["kv_lora"] + d["rope"], d["kv_lora"], fused)
    elif o == "gqa_attention":
        hl, kv = d["heads"] // t_shard, sh(d["kv_heads"])
        parts = attention_parts(chip, kp, b, kv, max(1, hl // kv), d["ctx"], 2 * d["head_dim"] * ACT,
                                d["head_dim"], d["head_dim"], fused)
    elif o == "mla_kv_up":          # b: the KV tokens the prefill attention reads
        parts = matrix_parts(chip, kp, 1, b, d["kv_lora"], d["heads"] // t_shard * (d["nope"] + d["v_dim"]), w, cd,
                             fused)
    elif o == "mla_prefill_attention":     # per-head keys (nope + the shared rope) and values, after mla_kv_up
        hl = d["heads"] // t_shard
        parts = prefill_attention_parts(chip, kp, b, d["seqs"], hl, d["ctx"],
                                        (d["nope"] + d["rope"] + d["v_dim"]) * ACT,
                                        d["kv"] * (hl * (d["nope"] + d["v_dim"]) + d["rope"]) * ACT,
                                        d["nope"] + d["rope"], d["v_dim"])
    elif o == "gqa_prefill_attention":
        hl, kv, hd = d["heads"] // t_shard, sh(d["kv_heads"]), d["head_dim"]
        parts = prefill_attention_parts(chip, kp, b, d["seqs"], hl, d["ctx"], 2 * hd * ACT,
                                        d["kv"] * kv * 2 * hd * ACT, hd, hd)
    elif o in ("experts_gate_up", "experts_down"):
        pairs, active, ep = moe["pairs"], moe["active"], moe["ep"]
        inter = d["inter"] if ep > 1 else sh(d["inter"])
        wo = 2 * inter if o == "experts_gate_up" else d["hidden"]
        wi = d["hidden"] if o == "experts_gate_up" else inter
        if active <= 0:   # no token routed here: the grouped GEMM is still launched and exits at once
            return _finish(chip, kp, _elementwise_parts(kp, 1, 0.0, 0.0), launch)
        parts = matrix_parts(chip, kp, active, max(1, -(-pairs // active)), wi, wo, w, cd, fused)
    elif o in ("act", "experts_act"):
        width = d["width"] if o == "act" and op.style == "replicated" else (
            sh(d["width"]) if o == "act" else (d["inter"] if moe["ep"] > 1 else sh(d["inter"])))
        rows = b if o == "act" else moe["pairs"]
        parts = _elementwise_parts(kp, rows * width, 3 * rows * width * ACT, 3.0 * rows * width,
                                   input_source(kp, 2 * rows * width * ACT))
    elif o in ("rope_mla", "rope_gqa", "embedding", "topk", "moe_combine"):
        if flops is None or nbytes is None:
            raise ConfigError(f"logical op {op.name} ({o}): pass its flops and bytes (fabric.capture.plan.kernel_cost)")
        if o == "embedding":        # a gather from the table in HBM
            parts = _rows_parts(kp, b, nbytes, flops)
        elif o == "topk":           # the router's logits, just written
            parts = _rows_parts(kp, b, nbytes, flops, input_source(kp, nbytes),
                                topk_exchanges(d["experts"], d["topk"], d["n_group"], d["topk_group"]))
        else:
            elems = max(1, int(nbytes // (3 * ACT)))
            parts = _elementwise_parts(kp, elems, nbytes, flops, input_source(kp, nbytes))
    else:
        raise ConfigError(f"the shape-aware model has no rule for logical op type {o!r} ({op.name})")
    return _finish(chip, kp, parts, launch)


def describe(chip) -> dict:
    """The chip's kernel-model parameters as a plain dict, with the derived latencies (for --json output, docs)."""
    kp = params_of(chip)
    return asdict(kp) | dict(mem_latency_ns=kp.mem_latency_ns, latency_ns=kp.latency_ns,
                             gemm_sm_gbps=kp.gemm_sm_gbps)
