"""Command-line entry points, one module per command; `common` holds what they share."""
