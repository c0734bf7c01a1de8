"""A command's process, tuned for long runs over large arrays: `tune_process()`, called once by every entry point
when it starts (the commands' shared click class, fabric.cli.common; fabric-bench's child process) and never by
importing anything, so a library caller's process stays as it was. Results are unaffected; only time and memory
change."""
from __future__ import annotations

import atexit
import sys

_TUNED: list = []


def tune_process() -> None:
    """On Linux, arrays reuse freed heap pages and skip transparent huge pages; at exit, the interpreter's final
    collections skip every object. Once per process (later calls do nothing)."""
    if _TUNED:
        return
    _TUNED.append(True)
    if sys.platform.startswith("linux"):
        _arrays_reuse_freed_pages()
        _arrays_on_small_pages()
    atexit.register(_exit_without_collecting)


def _arrays_reuse_freed_pages() -> None:
    """Arrays of up to 32 MiB come from the heap, and freed ones stay there for the next (fabric._malloc
    .arrays_from_heap): a split run's parts (fabric.parts) each build and drop an engine of the same shape, and
    lowering's temporaries come and go. With every array over 1 MiB a mapping of its own, returned when freed (this
    setting's predecessor), fabric-replay of the 1024-rank DP16 step spent 1.5 M page faults and 3 s of system time:
    analytic engine 6.9-7.0 -> 6.1-6.6 s end to end (1.46 -> 0.83 M faults), packet engine 18.6 -> 16.4 s, peak RSS
    2.45 -> 2.6 GB (measured alternately on this 2-core VM); the shipped step's peak (176 MB) and time are unchanged.
    Commands only (not the library)."""
    from fabric._malloc import arrays_from_heap
    arrays_from_heap()


def _arrays_on_small_pages() -> None:
    """numpy asks for transparent huge pages on every large array (madvise), and where the kernel's THP defrag
    setting is "madvise" (a common default, and this VM's) the first touch of each 2 MiB page compacts memory
    synchronously: a fresh 1.28 GB array took 4.1 s to fill with them, 0.9 s without. Commands turn the request
    off, as NUMPY_MADVISE_HUGEPAGE=0 would: fabric-bench replay-1024-analytic 6.3-9.6 -> 5.8-6.2 s end to end,
    the shipped step no slower (measured alternately, 3 runs each). The private numpy hook is looked up, and skipped
    where it is missing."""
    import numpy as np
    hook = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if hook is not None:
        hook(False)


def _exit_without_collecting() -> None:
    """At interpreter exit (atexit runs before the shutdown's collections), move every object to the collector's
    permanent generation: the collections that tear the modules down then skip them (fabric-replay's exit 0.06-0.2
    -> 0.02-0.04 s). Objects are still freed as their references go; only cyclic garbage left at exit is not
    collected, which the process's end reclaims, and every file a command writes is closed by then (`with`)."""
    import gc
    gc.freeze()
