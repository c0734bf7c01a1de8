"""glibc's malloc thresholds, set from Python (a no-op where mallopt is missing: not glibc). Two users with opposite
needs: the commands give large arrays their own mappings so freed memory leaves the process (fabric.cli.common);
sweep workers keep them in the heap so one replay's arrays are reused by the next (fabric.tools.sweep)."""
from __future__ import annotations

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def set_thresholds(trim: int | None = None, mmap: int | None = None) -> None:
    """mallopt(M_TRIM_THRESHOLD, trim) and mallopt(M_MMAP_THRESHOLD, mmap), each only when given."""
    try:
        import ctypes
        import ctypes.util
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        if trim is not None:
            libc.mallopt(M_TRIM_THRESHOLD, trim)
        if mmap is not None:
            libc.mallopt(M_MMAP_THRESHOLD, mmap)
    except (OSError, AttributeError):    # pragma: no cover - not glibc
        pass
