"""Permanent faults and what a run does about them, one module per stage (docs/faults.md):

- `spec`: what a fault is, before any run: the `--fault` / `[[faults]]` syntax (`parse`) and the parts it names on a
  topology (`resolve`);
- `failover`: a fault applied to a running engine, and the fabric manager's reroute around it (`Schedule`, `check`);
- `migration`: a fault that cuts serving ranks off: their work moved to spares, the step run in segments (`run`);
- `stuck`: not a fault but its possible end: what a run that stopped with work pending waits for (`report`, `text`).

The spec names are re-exported here (`from fabric.faults import parse_all`); the other modules are imported by
their own path, since they import the simulator, which imports this package.
"""
from fabric.faults.spec import PartitionError, parse, parse_all, resolve

__all__ = ["PartitionError", "parse", "parse_all", "resolve"]
