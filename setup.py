"""Build the two Cython extensions: the packet kernel and the array passes.

fabric._kernel.kernel (pyx/fabric/_kernel/kernel.pyx) is the event path: Engine and its rooms. fabric._arrays
(pyx/fabric/_arrays.pyx) holds the loops over routes, task graphs and run records that the Python modules beside it
run before or after a simulation; it touches no simulation state. pyx/ mirrors the package path (pyx/fabric/X.pyx ->
fabric.X) so that dotted cimports resolve their .pxd contracts. Each .pyx includes its rooms (.pxi files, one C
translation unit per extension); cythonize follows the includes, so editing a .pxi rebuilds its extension.
FABRIC_DEBUG=1 builds a checked flavour (bounds, initialisation, wraparound checks) into its own build directory,
because Cython does not regenerate C files when only directives change.
"""
import os
import sys

import setuptools

if int(setuptools.__version__.split(".")[0]) < 77:   # pyproject.toml's SPDX licence (PEP 639) needs 77
    sys.exit(f"setuptools {setuptools.__version__} cannot read pyproject.toml's licence (the SPDX form, PEP 639): "
             "pip install 'setuptools>=77' (pip install -e . fetches it by itself)")

import numpy as np  # noqa: E402  (after the check: an old setuptools is the first thing to name)
from Cython.Build import cythonize  # noqa: E402
from setuptools import Extension, setup  # noqa: E402

DEBUG = os.environ.get("FABRIC_DEBUG", "0") == "1"
directives = {
    "language_level": 3,
    "wraparound": DEBUG,
    "boundscheck": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
}
MODULES = ["_kernel.kernel", "_arrays"]   # fabric.<name>, from pyx/fabric/<name as a path>.pyx
extensions = [
    Extension(
        f"fabric.{name}",
        [f"pyx/fabric/{name.replace('.', '/')}.pyx"],
        include_dirs=[np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O0", "-g"] if DEBUG else ["-O3"],
    )
    for name in MODULES
]
setup(
    ext_modules=cythonize(
        extensions,
        include_path=["pyx"],
        compiler_directives=directives,
        build_dir="build/cython-debug" if DEBUG else "build/cython",
    )
)
