"""fabric._check_build: each compiled extension loads when first named, and a missing one is a readable ImportError
that says how to build it, not a traceback from deep inside an import."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("name,module", [("kernel", "fabric._kernel.kernel"), ("arrays", "fabric._arrays")])
def test_a_missing_extension_says_how_to_build_it(name, module):
    code = (f"import sys; sys.modules[{module!r}] = None\n"         # what an unbuilt extension looks like to import
            f"try:\n    from fabric._check_build import {name}\n"
            f"except ImportError as e:\n    print(e)\nelse:\n    raise SystemExit('imported')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert module in out and "is missing" in out and "python setup.py build_ext --inplace" in out


def test_each_extension_loads_only_when_named():
    code = ("import sys\nfrom fabric._check_build import arrays\n"
            "assert 'fabric._arrays' in sys.modules and 'fabric._kernel.kernel' not in sys.modules\n"
            "from fabric._check_build import kernel\nassert kernel.Engine and arrays.csr_of_blocks")
    subprocess.run([sys.executable, "-c", code], check=True)
