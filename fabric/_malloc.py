"""glibc's malloc thresholds, set from Python (a no-op where mallopt is missing: not glibc). Every command keeps
freed arrays of up to 32 MiB in the heap (arrays_from_heap), so the next arrays of a run reuse their pages instead
of mapping and faulting in new ones; sweep and validate workers also keep the heap across runs
(reuse_freed_arrays)."""
from __future__ import annotations

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def set_thresholds(trim: int | None = None, mmap: int | None = None) -> None:
    """mallopt(M_TRIM_THRESHOLD, trim) and mallopt(M_MMAP_THRESHOLD, mmap), each only when given."""
    try:
        import ctypes
        libc = ctypes.CDLL(None)     # the process's own symbols, libc's among them (find_library runs ldconfig: 30 ms)
        if trim is not None:
            libc.mallopt(M_TRIM_THRESHOLD, trim)
        if mmap is not None:
            libc.mallopt(M_MMAP_THRESHOLD, mmap)
    except (OSError, AttributeError):    # pragma: no cover - not glibc
        pass


def arrays_from_heap() -> None:
    """Both thresholds fixed high (mmap 32 MiB: glibc's largest on 64-bit; trim 256 MiB), so that freed arrays stay
    in the heap and the next ones reuse their pages instead of mapping and zeroing new ones. glibc's own dynamic
    thresholds start at 128 KiB and only rise as large blocks are freed, so a run's early arrays would each be a
    fresh mapping. Costs resident memory of up to the trim threshold."""
    set_thresholds(trim=256 << 20, mmap=32 << 20)


def reuse_freed_arrays() -> None:
    """arrays_from_heap, and lowering no longer hands its freed heap back (fabric.lower): for a process that runs
    many replays (page faults: a run of many replays spends a fifth of its time there)."""
    if not _REUSING:
        _REUSING.append(True)
        arrays_from_heap()


def reusing_freed_arrays() -> bool:
    """Whether this process called reuse_freed_arrays (then nothing should hand its freed heap back: malloc_trim)."""
    return bool(_REUSING)


_REUSING: list = []
