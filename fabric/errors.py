"""The package's own exceptions: every bad input surfaces as one of these, never as a deep traceback."""


class FabricError(Exception):
    """Base class; the CLI prints its message on one line and exits with code 2."""


class ConfigError(FabricError, ValueError):
    """A parameter is unknown, of the wrong type or outside its allowed range."""


class TraceError(FabricError):
    """A trace file is missing, corrupt, truncated, not HDF5, or fails validation."""


class RoutingError(FabricError):
    """The fabric manager cannot route the topology, or its routes could deadlock."""


class SimulationError(FabricError):
    """The kernel stopped abnormally: the watchdog saw no progress, or an invariant broke. `stuck`: what a stuck
    run waits for (fabric.faults.stuck.report; {} if not that), for a command's --json."""

    def __init__(self, message: str, stuck: dict | None = None):
        super().__init__(message)
        self.stuck = stuck or {}
