# The array passes: loops over a topology's routes, a task graph's tasks and edges, a finished run's task records
# and the address map that run once per route entry, task or edge (15-50 M of them at 1024 ranks), in C, for the
# Python modules beside this extension (fabric/routing.py, phy.py, taskgraph.py, lower.py, sim.py, parts.py,
# report.py, address.py). Pure functions of numpy arrays, with the GIL (their loops release it): no simulation
# state, no Engine; the event path is the other extension's (fabric._kernel.kernel, pyx/fabric/_kernel/).
#
# One extension, one C translation unit: the rooms below are include files, one per family of passes, each opening
# with what it computes and for whom. The Python definition of each pass is its docstring (or a reference in the
# module it serves); tests compare the two.
from libc.string cimport memcpy, memmove
from libc.math cimport ceil, INFINITY
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT64_MAX
import numpy as np

from fabric._kernel.types cimport T_TRANSFER      # task kinds: the task-graph contract (docs/contracts.md)

cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil

ARRAYS_VERSION = "0.2.0"

include "_arrays/route_tables.pxi"    # routing.py, phy.py: dimension-order tables, channel dependencies, round trips
include "_arrays/graph_build.pxi"     # taskgraph.py, lower.py: stamped fragments' columns, op dependencies, edge CSRs
include "_arrays/graph_parts.pxi"     # sim.py, parts.py: a planned graph's transfer load, its parts and their CSRs
include "_arrays/critical_path.pxi"   # report.py: the critical path walk, collective spans, compute totals
include "_arrays/addresses.pxi"       # address.py: global -> host addresses
