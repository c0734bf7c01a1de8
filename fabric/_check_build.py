"""Import the compiled kernel, or explain how to build it (a missing or stale extension is not a traceback)."""
from fabric import __version__

_HOW = (
    "Build it from the project root with `pip install -e .` (or `python setup.py build_ext --inplace`); "
    "a C compiler and Cython>=3 are needed."
)

try:
    from fabric._kernel import kernel as _kernel
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise ImportError(f"fabric's compiled packet kernel is missing or does not load ({exc}). {_HOW}") from None

if getattr(_kernel, "KERNEL_VERSION", None) != __version__:  # pragma: no cover
    raise ImportError(
        f"fabric's compiled packet kernel is stale (built for {getattr(_kernel, 'KERNEL_VERSION', '?')}, "
        f"package is {__version__}). {_HOW}"
    )

kernel = _kernel
