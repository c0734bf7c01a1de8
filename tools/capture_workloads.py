#!/usr/bin/env python
"""Capture the built-in workloads at 128-1024 ranks (fabric/capture/workloads.py) into a directory.

    python tools/capture_workloads.py [--out DIR] [NAME ...]     # default: all, into ./workloads
    fabric-replay DIR/NAME.h5 --preset PRESET [--engine analytic]

The specs, not the files, are what the project ships: a 1024-rank trace takes ~1 s to capture here.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from fabric import trace as T
    from fabric.capture.workloads import WORKLOADS, capture_workload
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"workloads (default all): {', '.join(WORKLOADS)}")
    ap.add_argument("--out", default="workloads", help="directory to write NAME.h5 into")
    args = ap.parse_args()
    unknown = [n for n in args.names if n not in WORKLOADS]
    if unknown:                # before anything is captured: one line naming the known ones (exit 2)
        ap.error(f"unknown workload(s) {', '.join(map(repr, unknown))}; choose from {', '.join(WORKLOADS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.names or list(WORKLOADS):
        t0 = time.perf_counter()
        tr = capture_workload(name)
        path = out / f"{name}.h5"
        T.write(path, tr)
        print(f"{path}: {tr.n_ranks} ranks, preset {WORKLOADS[name]['preset']} ({time.perf_counter() - t0:.1f} s): "
              f"fabric-replay {path} --preset {WORKLOADS[name]['preset']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
