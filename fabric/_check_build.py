"""Import a compiled extension, or explain how to build it (a missing or stale extension is not a traceback).

Two extensions, each loaded when first named (`from fabric._check_build import kernel` or `... import arrays`):
`kernel`, fabric._kernel.kernel, the packet kernel (Engine, the event path); `arrays`, fabric._arrays, the array
passes over routes, task graphs and run records that fabric's Python modules run before and after a simulation.
"""
import importlib

from fabric import __version__

_HOW = (
    "Build it from the project root with `pip install -e .` (or `python setup.py build_ext --inplace`); "
    "a C compiler and Cython>=3 are needed."
)
# name -> (module, what it is, its version attribute)
_EXTENSIONS = {
    "kernel": ("fabric._kernel.kernel", "compiled packet kernel", "KERNEL_VERSION"),
    "arrays": ("fabric._arrays", "compiled array passes", "ARRAYS_VERSION"),
}


def _load(name: str):
    module, what, version = _EXTENSIONS[name]
    try:
        ext = importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only on a broken install
        raise ImportError(f"fabric's {what} ({module}) is missing or does not load ({exc}). {_HOW}") from None
    if getattr(ext, version, None) != __version__:  # pragma: no cover
        raise ImportError(
            f"fabric's {what} ({module}) is stale (built for {getattr(ext, version, '?')}, "
            f"package is {__version__}). {_HOW}"
        )
    return ext


def __getattr__(name: str):
    if name not in _EXTENSIONS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    ext = globals()[name] = _load(name)
    return ext
