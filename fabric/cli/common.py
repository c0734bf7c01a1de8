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
        except BrokenPipeError:            # output piped into `head` and closed: not an error of ours
            import os
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except OSError as exc:
            click.echo(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), err=True)
            sys.exit(2)
    return wrapper


class _OneLine:
    """Usage errors (unknown option, missing argument, bad choice) as one line on stderr and exit code 2, like
    every other bad input; --help and normal runs are unchanged."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


class Command(_OneLine, click.Command):
    pass


class Group(_OneLine, click.Group):
    command_class = Command


def check_writable(path: str | None, what: str = "--json") -> None:
    """Refuse an output path whose folder does not exist before any work is done."""
    if path:
        import os
        folder = os.path.dirname(os.path.abspath(path)) or "."
        if not os.path.isdir(folder):
            raise FabricError(f"{what} {path!r}: folder {folder!r} does not exist")
        if not os.access(folder, os.W_OK):
            raise FabricError(f"{what} {path!r}: folder {folder!r} is not writable")


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
