"""Issue 33 item 1: the SSH tool Fabric (PyPI `fabric`) ships fabric/__init__.py and fabric/config.py too, and
installing it next to scaleup-fabric overwrites them. Every command and the modules that load the kernel say so in
one line with the fix (exit code 2 for a command), instead of an ImportError from deep inside; and no message
sends a user to the bare `fabric[...]` extra, which installs the SSH tool."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "fabric"

# what the SSH tool's wheel puts in those two files, in miniature (fabric 3.x: __init__ imports .config)
SSH_INIT = 'from .config import Config\n__version__ = "3.2.2"\n__all__ = ["Config"]\n'
SSH_CONFIG = 'class Config:\n    """Fabric\'s Invoke-based configuration."""\n'


def _installed(tmp_path: Path, replace: dict[str, str | None]) -> Path:
    """A copy of the package (links to its files) under tmp_path/fabric with `replace`'s files swapped for the
    given text, or deleted where the text is None."""
    dst = tmp_path / "fabric"
    dst.mkdir()
    for entry in PKG.iterdir():
        if entry.name not in replace and entry.name != "__pycache__":
            (dst / entry.name).symlink_to(entry)
    for name, text in replace.items():
        if text is not None:
            (dst / name).write_text(text)
    return tmp_path


# an editable install's finder would fill in a deleted module from the checkout; a wheel install has none
NO_EDITABLE = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path "
               "if 'editable' not in getattr(f, '__name__', type(f).__name__).lower()]\n")


def _run(root: Path, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", NO_EDITABLE + code], cwd=root, env=env, capture_output=True,
                          text=True, timeout=60)


OVERWRITTEN = {"__init__.py": SSH_INIT, "config.py": SSH_CONFIG}
UNINSTALLED = {"__init__.py": None, "config.py": None}    # `pip uninstall fabric` deletes the shared files


@pytest.mark.parametrize("state,word", [(OVERWRITTEN, "another package's"), (UNINSTALLED, "missing")])
def test_a_command_says_what_replaced_the_package_in_one_line(tmp_path, state, word):
    root = _installed(tmp_path, state)
    r = _run(root, "from fabric.cli.replay import main; main(['--help'])")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("error: the imported package `fabric`") and "is not scaleup-fabric" in lines[0]
    assert "fabric/__init__.py and fabric/config.py are " + word in lines[0]
    assert "pip install --force-reinstall --no-deps -e ." in lines[0] and "pip uninstall fabric" in lines[0]


def test_the_message_names_the_installed_ssh_tool(tmp_path):
    """With the SSH tool's metadata next to the package (pip installed it there), the line names it and its
    version."""
    root = _installed(tmp_path, OVERWRITTEN)
    info = root / "fabric-3.2.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fabric\nVersion: 3.2.2\n")
    r = _run(root, "from fabric.cli.trace import main; main(['--help'])")
    assert r.returncode == 2 and "are the SSH tool Fabric's (3.2.2, PyPI `fabric`)" in r.stderr, r.stderr


def test_the_library_import_names_the_clash(tmp_path):
    """Only config.py replaced (the package's own __init__ kept): importing a module that loads the kernel raises
    ImportError with the same line, before the ImportError fabric.config would give."""
    root = _installed(tmp_path, {"config.py": SSH_CONFIG})
    r = _run(root, "import fabric.replay")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: the imported package `fabric`") and "fabric/config.py is another" in last
    assert "__init__.py" not in last


def test_the_intact_package_passes_the_check(tmp_path):
    root = _installed(tmp_path, {})
    r = _run(root, "from fabric.cli.replay import main; main(['--version'])")
    assert r.returncode == 0 and "scaleup-fabric" in r.stdout, r.stderr


def test_no_message_names_the_bare_fabric_extra():
    """`pip install 'fabric[capture]'` installs the SSH tool: every hint names scaleup-fabric[...]."""
    bare = re.compile(r"(?<![\w-])fabric\[")
    hits = [f"{p.relative_to(PKG.parent)}:{i}" for p in sorted(PKG.rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if bare.search(line)]
    assert not hits, f"messages naming the bare `fabric[...]` extra: {hits}"
