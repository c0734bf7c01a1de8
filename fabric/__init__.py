"""fabric: a cycle-approximate emulator of scale-up AI interconnects."""
from fabric.errors import ConfigError, FabricError, RoutingError, SimulationError, TraceError

__version__ = "0.1.0"
__all__ = ["ConfigError", "FabricError", "RoutingError", "SimulationError", "TraceError", "__version__"]
