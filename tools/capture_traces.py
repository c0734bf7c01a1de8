#!/usr/bin/env python
"""Regenerate every shipped trace (traces/*.h5 and the package copy fabric/data/deepseek-r1-decode-tp64.h5).

    python tools/capture_traces.py            # all
    python tools/capture_traces.py --check    # regenerate into a temp dir and compare with the shipped files

Each entry is exactly the fabric-capture command line recorded in traces/README.md.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# file name -> fabric-capture arguments
TRACES = {
    "deepseek-r1-decode-tp64.h5": dict(model="deepseek-r1", tp=64, ep=1, batch=1, context=4096,
                                       chip="sd200-accelerator"),
    "deepseek-r1-decode-tp8-ep8.h5": dict(model="deepseek-r1", tp=8, ep=8, batch=1, context=4096,
                                          chip="sd200-accelerator"),
    "llama-3-70b-decode-tp8.h5": dict(model="llama-3-70b", tp=8, ep=1, batch=1, context=4096, chip="h200"),
    "qwen3-235b-a22b-decode-tp8.h5": dict(model="qwen3-235b-a22b", tp=8, ep=1, batch=1, context=4096, chip="h200"),
    "toy-mla-tp8.h5": dict(model="toy-mla", tp=8, ep=1, batch=1, context=128, chip="sd200-accelerator"),
}
PACKAGE_COPY = "deepseek-r1-decode-tp64.h5"


def command_line(name: str) -> str:
    a = TRACES[name]
    return (f"fabric-capture --model {a['model']} --tp {a['tp']} --ep {a['ep']} --batch {a['batch']} "
            f"--context {a['context']} --chip {a['chip']} --engine analytic -o traces/{name}")


def generate(out_dir: Path) -> None:
    from fabric import trace as T
    from fabric.capture import capture
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, args in TRACES.items():
        tr = capture(engine="analytic", **args)
        T.write(out_dir / name, tr)
        print(f"{out_dir / name}: {command_line(name)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare regenerated traces with the shipped ones")
    args = ap.parse_args()
    if args.check:
        from fabric import trace as T
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            bad = [n for n in TRACES
                   if not all(a.same_as(b) for a, b in zip(T.read(Path(tmp) / n).ops, T.read(ROOT / "traces" / n).ops))]
        print("differ: " + ", ".join(bad) if bad else "all shipped traces are up to date")
        return 1 if bad else 0
    generate(ROOT / "traces")
    shutil.copyfile(ROOT / "traces" / PACKAGE_COPY, ROOT / "fabric" / "data" / PACKAGE_COPY)
    print(f"copied traces/{PACKAGE_COPY} -> fabric/data/{PACKAGE_COPY}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
