"""Broadcast `direct`: the root stores its M-byte IN buffer into every other rank's OUT (flags folded or following);
a non-root is done when its copy has arrived (one wait), the root when all its stores have landed (its buffer may
be reused). The root's output is its input (in place).
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import FragBuilder
from fabric.taskgraph import BUF_IN, BUF_OUT


def direct(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> list:
    n, root = fb.n, fb.root
    others = np.flatnonzero(np.arange(n) != root)
    issue, seen = fb.xfer(root, others, nbytes, BUF_IN, 0, BUF_OUT, 0)
    fb.edge(ready[root], issue)
    w = fb.wait(others)
    fb.edge(seen, w)
    fb.edge(ready[others], w)
    out: list = [None] * n
    for k, r in enumerate(others):
        out[r] = w[k:k + 1]
    out[root] = np.concatenate([seen, ready[root:root + 1]])
    fb.need(BUF_IN, nbytes)
    fb.need(BUF_OUT, nbytes)
    return out


CORES = {"direct": direct}
