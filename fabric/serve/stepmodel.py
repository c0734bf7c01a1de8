"""Step times of a plan without simulating every step: the step pipeline (capture -> lower -> engine, via
fabric.replay.run_step) on a grid, memoised and interpolated.

A serving step is one forward pass of every attention group's batch: decode tokens (each reading its sequence's KV)
and chunked-prefill tokens (attending to their prompt so far). The groups run in lock step (the experts' all-to-all
joins them): the busiest group sets the time of everything it runs alone (attention, dense layers, shared experts),
while the routed experts see the tokens of all groups. The step time is modelled as

    t = S(m) + G(n) - G(m) + A(n, c) + P(T, q) - L(n) + L(n - T + s)

- n: tokens of the busiest group (decode + prefill), m: the mean over groups (n = m without data-parallel
  attention). Every GEMM, norm, router, expert and collective scales with them. S(m) is the simulated step of m
  decode tokens per group at context 0 (the whole pipeline), for m on N_GRID, linear between plus the bend of a
  rank's summed kernel time there (captured on the finer N_FINE: the chord of a convex or concave curve misses it;
  not under expert parallelism, where a capture costs as much as a simulated step);
- G(n): a rank's summed kernel time outside the routed experts at n tokens, from the capture: what the busiest
  group adds to a step of m even tokens (its own kernels lie on the critical path, the experts' do not grow);
- c: KV tokens the busiest group's decode attention reads per step token (the sum of its decode sequences'
  contexts / n: a decode-only step of n sequences at context c reads the same KV, and decode attention is bound by
  that read). A(n, c): what that context adds. Context changes only the attention kernels: no collective, no other
  kernel, and the attention kernels sit on every rank's critical path (each layer waits for its attention). So A is
  the growth of a rank's summed kernel time between the captures at (n, c) and (n, 0): a capture, no simulation
  (checked against simulated steps in docs/serving.md: equal to 0.1 us). c in C_GRID, linear between;
- T prompt tokens of s prompts in the busiest group, attending to q keys each on average: P(T, q), the prefill
  attention kernels (the latent's up-projection over the KV read and the attention; fabric.capture.plan) of a
  capture with T prompt tokens at q, T on N_GRID and q in C_GRID, bilinear. The KV they read is T + the prompts'
  prefix (q - (T + 1) / 2 when positive: one prompt's chunk after its prefix);
- L(n): the LM head's kernel time at n tokens: a prompt needs its last token's logits only, so a step of n tokens
  runs it on n - T + s (L from the captures of S and G).
Grid points are made on demand (only the n a run reaches) and kept. `direct` simulates one step exactly (the mixed
step captured as it is, every group alike) and is the reference for the interpolation error (docs/serving.md).

Two-batch overlap (plan tbo=on): two micro-batches of n/2, one's communication under the other's compute:
t = C + max(C, E), with C and E the compute and exposed communication of the n/2-token step.
Fabric bytes by class (TP collectives, expert all-to-all, other) come from the simulated steps S(m), linear in m.
"""
from __future__ import annotations

import bisect
import time
from dataclasses import dataclass

import numpy as np

from fabric.capture import Plan, capture as capture_trace
from fabric.capture.plan import decode_attention_ns

C_GRID = (0, 256, 1024, 2048, 4096, 8192, 16384, 65536)   # decode contexts captured (KV tokens read per step token)
MAX_STEP_TOKENS = 32768          # per attention group: a prefill grid step adds one decode token to it
# step tokens simulated: powers of sqrt(2), rounded. Step time is concave in n where MoE layers are (more tokens
# wake more experts, each read once), so linear interpolation runs under it; powers of 2 were up to 3.7 % low on
# DeepSeek-R1 tp=64 decode steps, powers of sqrt(2) stay within 1 % (docs/serving.md)
N_GRID = tuple(sorted({round(2 ** (k / 2)) for k in range(2 * 15 + 1)}))
# kernel sums (captures, no simulation) on powers of 2^(1/8): between two simulated steps a step's kernels grow as
# they do, not linearly (GEMMs turning compute-bound make it convex, experts waking up concave)
N_FINE = tuple(sorted({round(2 ** (k / 8)) for k in range(8 * 15 + 1)}))
CLASSES = ("tp_collectives", "expert_alltoall", "other")
_CLASS_OF = {"allreduce": 0, "allgather": 0, "reduce_scatter": 0, "broadcast": 0, "alltoall": 1}


@dataclass(frozen=True)
class Point:
    step_us: float
    compute_us: float
    comm_us: float                 # exposed communication
    bytes_by_class: tuple          # fabric bytes per CLASSES


def fabric_bytes(graph) -> tuple:
    """Bytes the step's transfers carry, by CLASSES (fabric.report.collective_bytes, and what no collective moves)."""
    from fabric.report import collective_bytes
    from fabric.taskgraph import TRANSFER
    out = [0, 0, 0]
    for kind, nbytes in collective_bytes(graph).items():
        out[_CLASS_OF.get(kind, 2)] += nbytes
    out[2] += int(graph.nbytes[(graph.kind == TRANSFER) & (graph.coll < 0)].sum())
    return tuple(float(x) for x in out)


class StepModel:
    """Step time of `plan` (fabric.serve.plan.ServePlan) on the fabric `cfg` describes."""

    def __init__(self, model: str | None, hf_config: str | None, spec, plan, chip, cfg, engine: str = "analytic",
                 seed: int = 0, on_point=None):
        self.model, self.hf_config, self.spec, self.plan, self.chip = model, hf_config, spec, plan, chip
        self.cfg, self.engine, self.seed = cfg, engine, seed
        self.on_point = on_point                   # called (steps simulated so far, seconds) after each one
        # ("s", n): simulated steps; ("k", n, c): kernel sums of captures; ("a", n, c), ("p", t, q): attention
        self.points: dict[tuple, Point | dict | float] = {}
        # kernel sums between simulated steps: on N_FINE where a capture is cheap; under expert parallelism a capture
        # costs ~0.4 s (every rank's expert table), and the simulated grid's own captures serve (no bend)
        self.kernel_grid = N_FINE if plan.ep == 1 else N_GRID
        self.sim_s = 0.0

    # ---------------------------------------------------------------- the pipeline

    def capture(self, decode: int, context: int, prefill: int = 0, prefill_context: float = 0.0,
                prefill_kv: int = 0, prompts: int = 1):
        """The Trace of one step: every group `decode` sequences at `context` plus `prefill` prompt tokens of
        `prompts` prompts attending to `prefill_context` keys each on average and reading `prefill_kv` KV tokens."""
        p = self.plan
        extra = dict(prefill_tokens=prefill, prefill_context=prefill_context, prefill_kv_tokens=prefill_kv,
                     prefill_seqs=prompts) if prefill else {}
        return capture_trace(self.model, self.hf_config, tp=p.attn_tp, ep=p.ep, batch=p.dp * decode,
                       context=int(context), chip=self.chip, weight_dtype=p.weight_dtype, seed=self.seed, **extra)

    def simulate(self, decode: int, context: int, prefill: int = 0, prefill_context: float = 0.0,
                 prefill_kv: int = 0, prompts: int = 1) -> Point:
        """One step captured as it is and run on the engine."""
        return self._run(self.capture(decode, context, prefill, prefill_context, prefill_kv, prompts))

    def _run(self, tr) -> Point:
        from fabric.errors import ConfigError
        from fabric.replay import run_step
        t0 = time.perf_counter()
        try:
            run = run_step(tr, self.cfg, engine=self.engine)
        except ConfigError as exc:     # a run-size guard: say which step of the serving run asked for it
            b = tr.meta.get("plan", {})
            raise ConfigError(f"the step model's step of {b.get('batch_per_replica', '?')} decode + "
                              f"{b.get('prefill_tokens', 0)} prompt tokens per group: {exc}; or use --engine "
                              f"analytic or a smaller --token-budget") from None
        s = run.summary
        pt = Point(float(s["step_us"]), float(s["compute_us"]), float(s["exposed_comm_us"]), fabric_bytes(run.graph))
        self.sim_s += time.perf_counter() - t0
        return pt

    @staticmethod
    def _kernel_us(tr) -> dict:
        """Rank 0's summed kernel time (us): "all", "group" (outside the routed experts), "lm_head", "prefill" (the
        prefill attention's rows): what a change confined to critical-path kernels adds."""
        cols = tr.ops[0].columns()
        dur, names = cols["duration_ns"], cols["name"].astype(str)
        return {"all": float(dur.sum()) / 1e3,
                "group": float(dur[~np.char.startswith(names, "experts_")].sum()) / 1e3,
                "lm_head": float(dur[names == "lm_head"].sum()) / 1e3,
                "prefill": float(dur[np.char.startswith(names, "prefill_")].sum()) / 1e3}

    def _base(self, n: int) -> Point:
        """S(n), simulated."""
        key = ("s", n)
        if key not in self.points:
            tr = self.capture(n, 0)
            self.points[("k", n, 0)] = self._kernel_us(tr)
            self.points[key] = self._run(tr)
            self._tick()
        return self.points[key]

    def _kernels(self, n: int, c: int) -> dict:
        """_kernel_us of the decode step of n tokens at context c (captured)."""
        key = ("k", n, c)
        if key not in self.points:
            self.points[key] = self._kernel_us(self.capture(n, c))
        return self.points[key]

    def _attention(self, n: int, c: int) -> float:
        """A rank's decode-attention kernel time (us) with n sequences at context c in its group, as the capture
        costs it (fabric.capture.plan.decode_attention_ns), at n itself: attention kernels jump where their tiles
        need one more wave of the chip."""
        key = ("a", n, c)
        if key not in self.points:
            p = self.plan
            cp = Plan(tp=p.attn_tp, batch=n, context=int(c), weight_dtype=p.weight_dtype, seed=self.seed,
                      cost_model=self.chip.cost_model)
            self.points[key] = decode_attention_ns(self.spec, cp, self.chip) / 1e3
        return self.points[key]

    def _context(self, n: int, c: int) -> float:
        """A(n, c): us that decode context c adds to the step of n tokens."""
        return 0.0 if c == 0 else self._attention(n, c) - self._attention(n, 0)

    def _prefill(self, t: int, q: int) -> float:
        """P(t, q): us of the prefill attention of t prompt tokens attending to q keys each (one prompt), captured on
        one attention group alone, as _attention."""
        key = ("p", t, q)
        if key not in self.points:
            q = max(float(q), 1.0)              # a prompt token attends at least to itself
            kv = t + int(max(0.0, q - (t + 1) / 2))
            p = self.plan
            tr = capture_trace(self.model, self.hf_config, tp=p.attn_tp, ep=1, batch=1, context=0, chip=self.chip,
                               weight_dtype=p.weight_dtype, seed=self.seed, prefill_tokens=t, prefill_context=q,
                               prefill_kv_tokens=kv)
            self.points[key] = self._kernel_us(tr)["prefill"]
        return self.points[key]

    def _tick(self) -> None:
        if self.on_point is not None:
            self.on_point(self.simulated, self.sim_s)

    @property
    def simulated(self) -> int:
        """Steps simulated on the engine so far."""
        return sum(1 for k in self.points if k[0] == "s")

    def _on_grid(self, n: float, what: str, grid=None) -> float:
        """A kernel sum of the decode step at context 0 (`what`: a _kernel_us key) on `grid` (default: the kernel
        grid), linear between."""
        lo, hi, w = self._n_bracket(n, grid or self.kernel_grid)
        a = self._kernels(lo, 0)[what]
        return a if w == 0 else (1 - w) * a + w * self._kernels(hi, 0)[what]

    # ---------------------------------------------------------------- interpolation

    @staticmethod
    def _n_bracket(n: float, grid=N_GRID) -> tuple:
        """(n_lo, n_hi, weight of n_hi) on `grid`."""
        n = min(max(n, 1.0), MAX_STEP_TOKENS)
        i = bisect.bisect_left(grid, n)
        if grid[i] == n:
            return grid[i], grid[i], 0.0
        lo, hi = grid[i - 1], grid[i]
        return lo, hi, (n - lo) / (hi - lo)

    def _decode(self, n: float, m: float, c) -> np.ndarray:
        """S(m) + G(n) - G(m) + A(n, c) for an array of c: rows [step, compute, comm, bytes by class...]."""
        c = np.atleast_1d(np.asarray(c, np.float64))
        lo, hi, w = self._n_bracket(m)
        base = np.zeros(3 + len(CLASSES))
        for nn, a in ((lo, 1 - w), (hi, w)):
            if a:
                p = self._base(nn)
                base += a * np.array((p.step_us, p.compute_us, p.comm_us) + p.bytes_by_class)
        # S between its grid points follows the kernels' own curve (N_FINE), not the chord
        bend = self._on_grid(m, "all") - self._on_grid(m, "all", N_GRID) if w else 0.0
        grow = bend + (self._on_grid(n, "group") - self._on_grid(m, "group") if n > m else 0.0)
        grid = np.asarray(C_GRID, np.float64)
        hi_c = np.clip(np.searchsorted(grid, c, side="left"), 1, len(grid) - 1)   # beyond the last: extrapolate
        lo_c = hi_c - 1
        wc = (c - grid[lo_c]) / (grid[hi_c] - grid[lo_c])
        nn = max(int(round(n)), 1)
        add = np.zeros(len(grid))
        for j in np.unique(np.concatenate([lo_c[wc != 1], hi_c[wc != 0]])):
            add[j] = self._context(nn, int(grid[j]))
        ctx = add[lo_c] * (1 - wc) + add[hi_c] * wc
        extra = grow + ctx
        out = np.repeat(base[:, None], len(c), axis=1)
        out[0] += extra
        out[1] += extra
        return out

    def _prefill_at(self, t: float, q: float) -> float:
        """P(t, q) bilinear on N_GRID x C_GRID (beyond the last q: the last two extrapolate)."""
        grid = C_GRID
        j = min(max(bisect.bisect_left(grid, q), 1), len(grid) - 1)
        wq = (q - grid[j - 1]) / (grid[j] - grid[j - 1])
        lo, hi, w = self._n_bracket(t)
        out = 0.0
        for tt, a in ((lo, 1 - w), (hi, w)):
            if a:
                for qq, b in ((grid[j - 1], 1 - wq), (grid[j], wq)):
                    if b:
                        out += a * b * self._prefill(tt, qq)
        return out

    def step(self, tokens: int, decode_kv: int = 0, pairs: float = 0.0, mean_tokens: float | None = None,
             prefill: int = 0, prompts: int = 0) -> tuple[float, float, tuple]:
        """(step us, exposed communication us, bytes by class) of a step whose busiest group runs `tokens` tokens,
        `prefill` of them from `prompts` prompts whose attention makes `pairs` (query, key) pairs, its decode
        attention reading `decode_kv` KV tokens in all; `mean_tokens` per group over all groups (default: `tokens`,
        all alike). Under tbo=on the step runs as two halves."""
        n = tokens
        m = n if mean_tokens is None else min(mean_tokens, n)
        if n <= 0:
            return 0.0, 0.0, (0.0,) * len(CLASSES)
        half = 0.5 if self.plan.tbo and n >= 2 else 1.0
        d = self._decode(n * half, max(m * half, 1.0), decode_kv / n)[:, 0]
        step, compute, comm = d[0], d[1], d[2]
        if prefill:
            t = max(prefill * half, 1.0)
            extra = self._prefill_at(t, pairs / prefill) \
                - self._on_grid(n * half, "lm_head") + self._on_grid(max(n * half - t + prompts * half, 1.0), "lm_head")
            step, compute = step + extra, compute + extra
        if half < 1.0:
            step, comm = compute + max(compute, comm), max(0.0, comm - compute)
        return float(step), float(comm), tuple(float(x) / half for x in d[3:])

    def decode_times(self, tokens: int, decode_kv: np.ndarray, mean_tokens: float | None = None) \
            -> tuple[np.ndarray, np.ndarray]:
        """(step us, exposed communication us) of decode-only steps (step's arguments), one per entry of
        decode_kv."""
        n = tokens
        m = n if mean_tokens is None else min(mean_tokens, n)
        half = 0.5 if self.plan.tbo and n >= 2 else 1.0
        d = self._decode(n * half, max(m * half, 1.0), np.asarray(decode_kv, np.float64) / n)
        if half < 1.0:
            return d[1] + np.maximum(d[1], d[2]), np.maximum(0.0, d[2] - d[1])
        return d[0], d[2]

    def direct(self, decode: int, context: int, prefill: int = 0, prefill_context: float = 0.0,
               prefill_kv: int = 0, prompts: int = 1) -> float:
        """The step simulated exactly (every group alike, uniform decode context), for the interpolation error."""
        return self.simulate(decode, context, prefill, prefill_context, prefill_kv, prompts).step_us
