"""Point-to-point Send/Recv as a fragment over 2 ranks (position 0 sends, position 1 receives).

One store of M bytes from the sender's IN into the receiver's OUT. Both sides pay the launch cost; the receiver
waits for the data; the sender completes when the data has landed (a blocking send, as NCCL's on a stream). With
entry_barrier the store first waits for the receiver's ready-to-receive flag (rendezvous).
"""
from __future__ import annotations

import numpy as np

from fabric.collectives._frag import FragBuilder
from fabric.taskgraph import BUF_IN, BUF_OUT


def sendrecv(fb: FragBuilder, ready: np.ndarray, nbytes: int) -> list:
    issue, seen = fb.xfer(0, 1, nbytes, BUF_IN, 0, BUF_OUT, 0)
    fb.edge(ready[0], issue)
    w = fb.wait(1)
    fb.edge(seen, w)
    fb.edge(ready[1], w)
    fb.need(BUF_IN, nbytes)
    fb.need(BUF_OUT, nbytes)
    return [seen, w]


CORES = {"direct": sendrecv}
