"""glibc's malloc thresholds, set from Python (a no-op where mallopt is missing: not glibc). Two users with opposite
needs: the commands give large arrays their own mappings so freed memory leaves the process (fabric.cli.common);
sweep and validate workers keep them in the heap so one run's arrays are reused by the next (reuse_freed_arrays)."""
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


def reuse_freed_arrays() -> None:
    """Both thresholds raised (32 MiB: glibc's largest mmap threshold on 64-bit), so that freed arrays stay in the
    heap and the next run's arrays reuse their pages instead of mapping and zeroing new ones (page faults: a run of
    many replays spends a fifth of its time there). Costs resident memory of up to the trim threshold."""
    if not _REUSING:
        _REUSING.append(True)
        set_thresholds(trim=256 << 20, mmap=32 << 20)


def reusing_freed_arrays() -> bool:
    """Whether this process called reuse_freed_arrays (then nothing should hand its freed heap back: malloc_trim)."""
    return bool(_REUSING)


_REUSING: list = []
