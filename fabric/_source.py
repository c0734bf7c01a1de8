"""Which source produced a result: the git commit of the checkout this package runs from, for every result's meta."""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path


@functools.cache
def commit() -> str | None:
    """The commit of the git checkout holding this package (an editable install), with "-dirty" when tracked files
    differ from it; None when the package is not in a checkout (an installed wheel: its version says what it is)
    or git cannot tell. Asked once per process."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30, check=True)
        dirty = subprocess.run([*git, "diff", "--quiet", "HEAD", "--"], capture_output=True, timeout=30).returncode
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty == 1 else "")
