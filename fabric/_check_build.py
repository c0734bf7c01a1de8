"""Import a compiled extension, or explain how to build it (a missing or stale extension is not a traceback).

Two extensions, each loaded when first named (`from fabric._check_build import kernel` or `... import arrays`):
`kernel`, fabric._kernel.kernel, the packet kernel (Engine, the event path); `arrays`, fabric._arrays, the array
passes over routes, task graphs and run records that fabric's Python modules run before and after a simulation.

Importing this module first checks that the imported `fabric` package is this distribution's (`foreign_install`):
the SSH tool Fabric (PyPI `fabric`) ships fabric/__init__.py and fabric/config.py too, and installing it next to
scaleup-fabric overwrites them. The modules that load an extension import this one before fabric.config, and
fabric.cli checks before any command, so the clash is one line naming the fix, not an ImportError from deep inside.
"""
import importlib
import importlib.util
import sys

DISTRIBUTION = "scaleup-fabric"   # fabric/__init__.py's DISTRIBUTION, and the marker fabric/config.py's text holds
_OWN_FILES = ("__init__.py", "config.py")   # the files the SSH tool's wheel ships as well
_HOW = (
    "Build it from the project root with `pip install -e .` (or `python setup.py build_ext --inplace`); "
    "a C compiler and Cython>=3 are needed."
)
# name -> (module, what it is, its version attribute)
_EXTENSIONS = {
    "kernel": ("fabric._kernel.kernel", "compiled packet kernel", "KERNEL_VERSION"),
    "arrays": ("fabric._arrays", "compiled array passes", "ARRAYS_VERSION"),
}


def foreign_install() -> str | None:
    """None when the imported `fabric` is this distribution's package; else one line saying which of its files are
    another package's or missing (fabric/__init__.py must define DISTRIBUTION, fabric/config.py's text must name it),
    whose they are (the installed distributions' metadata) and the fix."""
    pkg = sys.modules.get("fabric")
    bad, missing = [], []
    if getattr(pkg, "DISTRIBUTION", None) != DISTRIBUTION:
        (bad if getattr(pkg, "__file__", None) else missing).append("fabric/__init__.py")
    try:
        spec = importlib.util.find_spec("fabric.config")
    except ValueError:              # imported, but without a spec
        spec = None
    try:
        with open(spec.origin, encoding="utf-8", errors="replace") as fh:
            ours = DISTRIBUTION in fh.read()
    except (AttributeError, OSError, TypeError):   # no such module, or no file behind it
        ours = False
    if not ours:
        (bad if spec is not None else missing).append("fabric/config.py")
    return _clash(next(iter(getattr(pkg, "__path__", ())), "?"), bad, missing) if bad or missing else None


def _clash(folder: str, bad: list[str], missing: list[str]) -> str:
    # only on this path: importing metadata costs a few ms at every start
    from importlib import metadata
    try:
        owner = f"the SSH tool Fabric's ({metadata.version('fabric')}, PyPI `fabric`)"
    except metadata.PackageNotFoundError:
        owner = "another package's (the SSH tool Fabric, PyPI `fabric`, ships both)"
    try:
        metadata.distribution(DISTRIBUTION)
        fix = "reinstall it with `pip install --force-reinstall --no-deps -e .` in the checkout (or that on the wheel)"
    except metadata.PackageNotFoundError:
        fix = f"{DISTRIBUTION} is not installed: `pip install -e .` in the checkout (or `pip install {DISTRIBUTION}`)"
    gone = "missing (uninstalling the SSH tool Fabric deletes the files both wheels ship)"
    what = [f"{' and '.join(files)} {'are' if len(files) > 1 else 'is'} {state}"
            for files, state in ((bad, owner), (missing, gone)) if files]
    return (f"the imported package `fabric` ({folder}) is not {DISTRIBUTION}: {'; '.join(what)}; {fix}, and keep the "
            f"SSH tool in another environment (`pip uninstall fabric` deletes the shared files)")


def _load(name: str):
    module, what, version = _EXTENSIONS[name]
    try:
        ext = importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only on a broken install
        raise ImportError(f"fabric's {what} ({module}) is missing or does not load ({exc}). {_HOW}") from None
    package = sys.modules["fabric"].__version__
    if getattr(ext, version, None) != package:  # pragma: no cover
        raise ImportError(
            f"fabric's {what} ({module}) is stale (built for {getattr(ext, version, '?')}, "
            f"package is {package}). {_HOW}"
        )
    return ext


def __getattr__(name: str):
    if name not in _EXTENSIONS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    ext = globals()[name] = _load(name)
    return ext


if (_problem := foreign_install()):
    raise ImportError(_problem)
