"""What every command shares: one-line errors with exit code 2, --set parsing, JSON output."""
from __future__ import annotations

import functools
import json
import sys

import click

from fabric.errors import FabricError


def friendly(fn):
    """Turn the package's own errors (and bad files) into one line on stderr and exit code 2."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FabricError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except OSError as exc:
            click.echo(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), err=True)
            sys.exit(2)
    return wrapper


def write_json(path: str | None, payload) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(payload, fh, indent=2, default=_default)
            fh.write("\n")


def _default(obj):
    import numpy as np
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
