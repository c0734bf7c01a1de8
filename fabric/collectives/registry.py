"""Every collective kind and its algorithms: the one list, read from the family modules' CORES tables.

KINDS and ALGORITHMS are derived from CORES (kind -> {algorithm name: core function}); the order of KINDS is the
order of the entries below, and of each kind's algorithms the order of its module's CORES.
"""
from __future__ import annotations

from fabric.collectives import allgather, allreduce, alltoall, broadcast, p2p, reduce_scatter

CORES = {"allreduce": allreduce.CORES, "allgather": allgather.CORES, "reduce_scatter": reduce_scatter.CORES,
         "alltoall": alltoall.CORES, "broadcast": broadcast.CORES, "sendrecv": p2p.CORES}
KINDS = tuple(CORES)
ALGORITHMS = {kind: tuple(cores) for kind, cores in CORES.items()}

# Algorithms only a library profile builds (they need the fabric: fabric/collectives/library.py, sliced.py,
# alltoall.LIBRARY_CORES: DeepEP's low-latency all-to-all, which the nccl-like tuner offers where
# collectives.nccl_like.alltoall allows it). Not in
# ALGORITHMS: the sd200 library, the cost model and fixed policies do not know them.
LIBRARY_ALGORITHMS = {"nccl-like": {
    "allreduce": ("hierarchical", "tree", "nvls", "nvls_tree", "sym_oneshot", "sym_nvls"),
    "alltoall": tuple(alltoall.LIBRARY_CORES)}}
