"""Old name of fabric.experiments (issue 29 part 5), kept for one release: `import fabric.tools.X` loads
fabric/experiments/X.py (the probes are now probe_link, probe_latency, probe_collective). Import fabric.experiments."""
import warnings
from pathlib import Path

__path__ = [str(Path(__file__).resolve().parent.parent / "experiments")]
warnings.warn("fabric.tools is now fabric.experiments; import that", DeprecationWarning, stacklevel=2)
