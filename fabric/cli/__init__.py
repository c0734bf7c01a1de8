"""Command-line entry points, one module per command; `common` holds what they share. Importing any of them first
checks that `fabric` is this distribution's package (fabric._check_build): a clash with the SSH tool Fabric is one
line and exit code 2, like every other bad input."""
import sys

try:
    import fabric._check_build  # noqa: F401  (the check runs on import)
except ImportError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
