"""fabric: a cycle-approximate emulator of scale-up AI interconnects."""
from fabric.errors import ConfigError, FabricError, RoutingError, SimulationError, TraceError

__version__ = "0.2.0"   # pyproject.toml reads it; pyx/ repeats it (KERNEL_VERSION, ARRAYS_VERSION)
DISTRIBUTION = "scaleup-fabric"   # the name on PyPI; the import package stays `fabric`
__all__ = ["ConfigError", "FabricError", "RoutingError", "SimulationError", "TraceError", "DISTRIBUTION", "__version__"]

