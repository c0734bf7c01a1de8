"""Hash everything a packet-engine run produces, over cases that reach every layer of the kernel.

A refactor of the kernel must leave every hash unchanged: the kernel is deterministic bit for bit, so equal hashes
(task start/end times, every per-channel counter, totals, link state, transfers with their checksums, event count,
final time) mean equal behaviour, not merely close numbers.

    python tools/golden_hashes.py --decode --check tools/golden_hashes.json   # against the committed hashes
    python tools/golden_hashes.py > before.json          # on the old kernel
    python tools/golden_hashes.py --check before.json    # on the new one: exit 1 and name the cases that differ
    python tools/golden_hashes.py --decode ...           # add the DeepSeek-R1 decode step (~15 M events)

tools/golden_hashes.json holds the hashes of the current model (all 17 cases); a deliberate model change rewrites it
(`--decode > tools/golden_hashes.json`) in the same commit, with the reason.
"""
from __future__ import annotations

import hashlib
import json
import sys

import click
import numpy as np

from fabric import sim
from fabric._check_build import kernel
from fabric.config import load_config, with_overrides
from fabric.network import build
from fabric.taskgraph import LOAD, all_to_all_graph, transfer_graph
from fabric.trace import default_trace_path

SMALL = {"txn.max_payload_bytes": 256, "txn.max_read_request_bytes": 256}


_HASHED_AS = {"credit_pool_flits": "credit_pool"}


def _digest(eng: "kernel.Engine", addressed: bool = False) -> dict:
    h = hashlib.sha256()
    start, end = eng.task_times()
    parts = {"start": start, "end": end}
    parts.update({"c_" + k: v for k, v in eng.counters().items()})
    # link_state's credit_pool_flits was credit_pool (renamed in issue 29 part 5): hashed under its old name, so the
    # hashes stay comparable across the rename
    parts.update({"l_" + _HASHED_AS.get(k, k): np.asarray(v) for k, v in eng.link_state().items()})
    parts.update({"x_" + k: np.asarray(v) for k, v in eng.transfers().items()})
    for k in sorted(parts):
        h.update(k.encode())
        h.update(np.ascontiguousarray(parts[k]).tobytes())
    h.update(json.dumps(eng.totals(), sort_keys=True, default=int).encode())
    if addressed:         # the ingress ports' translation counts (graphs whose transfers carry addresses)
        h.update(json.dumps(eng.translations(), sort_keys=True, default=int).encode())
    return dict(events=int(eng.events), now_ps=int(eng.now_ps), sha256=h.hexdigest())


SAMPLE_PS = 0     # --sample-ns: link counter sampling on (timelines); it must change no hash


def _run(cfg, topo, graph, faults=()) -> dict:
    kgraph, xlate = sim.kernel_inputs(cfg, topo, graph)     # as sim.run: addressed transfers are translated
    eng = kernel.Engine(sim.kernel_params(cfg), sim.as_arrays(topo), kgraph, False, xlate=xlate)
    if SAMPLE_PS:
        eng.enable_sampling(SAMPLE_PS, 1 << 20)     # a small ring: halving happens too
    for kind, ch, n, k in faults:
        eng.add_fault(sim.FAULTS[kind], ch, n, k)
    while eng.run(max_events=1 << 20) == kernel.PAUSED:
        pass
    return _digest(eng, xlate is not None)


def _link(packets: int, ber: float, faults=()) -> dict:
    cfg = with_overrides(load_config("link"), {"phy.ber": ber})
    return _run(cfg, build(cfg), transfer_graph(0, 1, cfg.txn.max_payload_bytes * packets), faults)


def _both_ways(faults) -> dict:
    """Stores and loads both ways over one link, with deterministic faults on either channel."""
    cfg = with_overrides(load_config("link"), SMALL)
    g = transfer_graph(np.array([0, 1, 0, 1]), np.array([1, 0, 1, 0]), np.array([60000, 50000, 7000, 9000]),
                       np.array([0, 0, LOAD, LOAD], np.int8))
    return _run(cfg, build(cfg), g, faults)


def _mesh(preset: str, nbytes: int, op: int = 0, extra=None) -> dict:
    cfg = load_config(preset, overrides={**SMALL, **(extra or {})})
    topo = build(cfg)
    g = all_to_all_graph(topo.n_ranks, nbytes)
    if op:
        g = transfer_graph(g["rank"], g["peer"], g["nbytes"], np.full(len(g["rank"]), op, np.int8))
    return _run(cfg, topo, g)


def _replay(path: str, preset: str = "sd200") -> dict:
    from fabric.lower import lower
    from fabric.trace import read
    cfg = load_config(preset)
    return _run(cfg, build(cfg), lower(read(path), cfg))


CASES = {
    "link-1e-12": lambda: _link(200_000, 1e-12),
    "link-1e-5": lambda: _link(100_000, 1e-5),
    "link-1e-4": lambda: _link(50_000, 1e-4),
    "faults-corrupt": lambda: _both_ways([("corrupt_flit", 0, 5, 1), ("corrupt_flit", 1, 9, 3)]),
    "faults-burst": lambda: _both_ways([("corrupt_flit", 0, 20, 6)]),
    "faults-lose-ack": lambda: _both_ways([("lose_ack", 1, 2, 1), ("lose_ack", 0, 4, 2)]),
    "faults-lose-credit": lambda: _both_ways([("lose_credit", 1, 3, 1), ("lose_credit", 0, 2, 2)]),
    "faults-retrain": lambda: _both_ways([("retrain", 0, 30, 1), ("retrain", 1, 60, 1)]),
    "oneshot-mesh": lambda: _mesh("mesh-4x4x4", 14336),
    "oneshot-torus": lambda: _mesh("torus-4x4x4", 14336),
    "loads-mesh": lambda: _mesh("mesh-4x4x4", 4096, LOAD),
    "loads-torus": lambda: _mesh("torus-4x4x4", 4096, LOAD),
    "ber-1e-6-mesh": lambda: _mesh("mesh-4x4x4", 4096, extra={"phy.ber": 1e-6}),
    "oneshot-sd200-128": lambda: _mesh("sd200-128", 2048),
    "toy-step": lambda: _replay("traces/toy-mla-tp8.h5"),
    "llama-step": lambda: _replay("traces/llama-3-70b-decode-tp8.h5"),
}
DECODE = {"decode-sd200": lambda: _replay(default_trace_path())}


@click.command()
@click.option("--decode", is_flag=True, help="Also run the DeepSeek-R1 decode step (~15 M events).")
@click.option("--check", "check", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Compare with a JSON file this tool wrote; exit 1 if any case differs.")
@click.option("--sample-ns", type=float, default=0.0,
              help="run with link counter sampling at this interval (timelines; must change no hash)")
def main(decode: bool, check: str | None, sample_ns: float) -> None:
    global SAMPLE_PS
    SAMPLE_PS = int(round(sample_ns * 1000))
    cases = {**CASES, **(DECODE if decode else {})}
    out = {}
    for name, fn in cases.items():
        out[name] = fn()
        print(f"{name:20s} {out[name]['events']:>10d} events  {out[name]['sha256'][:16]}", file=sys.stderr)
    if check is None:
        print(json.dumps(out, indent=1))
        return
    ref = json.loads(open(check).read())
    bad = [k for k in out if k in ref and ref[k] != out[k]]
    missing = [k for k in out if k not in ref]
    print(f"{len(out) - len(bad) - len(missing)} identical, {len(bad)} differ: {', '.join(bad) or '-'}"
          + (f"; not in {check}: {', '.join(missing)}" if missing else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
