"""Inputs the project ships, by name: traces (`fabric-trace info toy-mla-tp8`, `fabric-replay llama-3-70b-decode-tp8`,
`replay("toy-mla-tp8", cfg)`) and calibration tables (`fabric-probe collective --compare a100-8x`), so that neither
needs a checkout path.

A trace's name is its file name without .h5: the package's fabric/data/*.h5 (installed with it) and, in a checkout,
the traces/ folder next to the package (traces/README.md; not in the wheel). A calibration table's name is read
from its file name's `<nodes>node_<gpus>x<GPU>` (fabric/data/calibration/README.md): `a100-8x` for one node of 8
A100s, `h200-2x8` for two nodes of 8 H200s; only the nccl-tests outputs, the tables --compare reads. A name that is
an existing file stays that file.
"""
from __future__ import annotations

import difflib
import re
from importlib import resources
from pathlib import Path

from fabric.errors import ConfigError

_TABLE_NAME = re.compile(r"^(\d+)node_(\d+)x([A-Za-z0-9]+?)(?:-|_)")


def _trace_dirs() -> list[Path]:
    """The package's data folder, then a checkout's traces/ (absent from an installed wheel)."""
    data = Path(str(resources.files("fabric").joinpath("data")))
    return [d for d in (data, Path(__file__).resolve().parents[1] / "traces") if d.is_dir()]


def traces() -> dict[str, Path]:
    """name -> file of every shipped trace."""
    out: dict[str, Path] = {}
    for d in _trace_dirs():
        for p in sorted(d.glob("*.h5")):
            out.setdefault(p.stem, p)
    return out


def calibration_tables() -> dict[str, Path]:
    """name -> file of every packaged nccl-tests table (fabric/data/calibration/)."""
    out = {}
    folder = Path(str(resources.files("fabric").joinpath("data", "calibration")))
    for p in sorted(folder.glob("*.txt")):
        m = _TABLE_NAME.match(p.name)
        if m:
            nodes, gpus, gpu = m.groups()
            out[f"{gpu.lower()}-{gpus}x" if nodes == "1" else f"{gpu.lower()}-{nodes}x{gpus}"] = p
    return out


def _resolve(value: str, names: dict[str, Path], what: str) -> str:
    """value itself when it is a file or a path or file name; else the shipped file it names; else one ConfigError
    line listing the names."""
    if Path(value).exists() or "/" in value or "\\" in value:
        return value
    if value in names:
        return str(names[value])
    if Path(value).suffix:              # a file name that does not exist: its reader says so
        return value
    close = difflib.get_close_matches(value, list(names), n=2)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise ConfigError(f"{what} {value!r} is neither a file nor a shipped name; {hint}shipped: {', '.join(names)}")


def trace_path(value: str) -> str:
    """The file a trace argument names: a path, or a shipped trace's name (traces())."""
    return _resolve(value, traces(), "trace")


def calibration_path(value: str) -> str:
    """The file a --compare argument names: a path, or a packaged table's name (calibration_tables())."""
    return _resolve(value, calibration_tables(), "--compare")
