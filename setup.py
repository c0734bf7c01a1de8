"""Build the Cython packet kernel.

pyx/ mirrors the package path (pyx/fabric/_kernel/*.pyx -> fabric._kernel.*) so that dotted cimports resolve
their .pxd contracts. kernel.pyx includes its rooms (pyx/fabric/_kernel/*.pxi, one C translation unit); cythonize
follows the includes, so editing a .pxi rebuilds the extension. FABRIC_DEBUG=1 builds a checked flavour (bounds,
initialisation, wraparound checks) into its own build directory, because Cython does not regenerate C files when only
directives change.
"""
import os

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("FABRIC_DEBUG", "0") == "1"
directives = {
    "language_level": 3,
    "wraparound": DEBUG,
    "boundscheck": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
}
MODULES = ["kernel"]
extensions = [
    Extension(
        f"fabric._kernel.{name}",
        [f"pyx/fabric/_kernel/{name}.pyx"],
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
