#!/usr/bin/env python
"""Regenerate every shipped trace: traces/*.h5, and fabric/data/deepseek-r1-decode-tp64.h5 (package data, so that
an installed package finds it through fabric.trace.default_trace_path()).

    python tools/capture_traces.py            # all
    python tools/capture_traces.py --check    # regenerate into a temp dir and compare with the shipped files

Each entry is exactly the fabric-capture command line recorded in traces/README.md.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# shipped file (relative to the project root) -> fabric-capture arguments
TRACES = {
    "fabric/data/deepseek-r1-decode-tp64.h5": dict(model="deepseek-r1", tp=64, ep=1, batch=1, context=4096,
                                                   chip="sd200-accelerator"),
    # 8 ranks cannot hold DeepSeek-R1 (164 GiB of weights per rank against 64 GiB): this trace exists for its
    # expert-parallel traffic pattern, so its capture says explicitly that it oversubscribes memory
    "traces/deepseek-r1-decode-tp8-ep8.h5": dict(model="deepseek-r1", tp=8, ep=8, batch=1, context=4096,
                                                 chip="sd200-accelerator", allow_oversubscribe=True),
    "traces/llama-3-70b-decode-tp8.h5": dict(model="llama-3-70b", tp=8, ep=1, batch=1, context=4096, chip="h200"),
    "traces/qwen3-235b-a22b-decode-tp8.h5": dict(model="qwen3-235b-a22b", tp=8, ep=1, batch=1, context=4096,
                                                 chip="h200"),
    "traces/toy-mla-tp8.h5": dict(model="toy-mla", tp=8, ep=1, batch=1, context=128, chip="sd200-accelerator"),
}


def command_line(path: str) -> str:
    a = TRACES[path]
    return (f"fabric-capture --model {a['model']} --tp {a['tp']} --ep {a['ep']} --batch {a['batch']} "
            f"--context {a['context']} --chip {a['chip']} --engine analytic"
            f"{' --allow-oversubscribe' if a.get('allow_oversubscribe') else ''} -o {path}")


def generate(out_root: Path) -> None:
    from fabric import trace as T
    from fabric.capture import capture
    for path, args in TRACES.items():
        out = out_root / path
        out.parent.mkdir(parents=True, exist_ok=True)
        T.write(out, capture(engine="analytic", **args))
        print(f"{out}: {command_line(path)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare regenerated traces with the shipped ones")
    args = ap.parse_args()
    if args.check:
        from fabric import trace as T
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            bad = [p for p in TRACES
                   if not all(a.same_as(b) for a, b in zip(T.read(Path(tmp) / p).ops, T.read(ROOT / p).ops))]
        print("differ: " + ", ".join(bad) if bad else "all shipped traces are up to date")
        return 1 if bad else 0
    generate(ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
