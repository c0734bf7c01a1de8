"""fabric: a cycle-approximate emulator of scale-up AI interconnects."""
from fabric.errors import ConfigError, FabricError, RoutingError, SimulationError, TraceError

__version__ = "0.1.0"   # the one place the version is written (pyproject.toml reads it)
DISTRIBUTION = "scaleup-fabric"   # the name on PyPI; the import package stays `fabric`
__all__ = ["ConfigError", "FabricError", "RoutingError", "SimulationError", "TraceError", "DISTRIBUTION", "__version__"]

