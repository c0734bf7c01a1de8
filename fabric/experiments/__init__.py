"""Experiments built on the core (was fabric.tools): the probes, named like their commands (probe_link,
probe_latency, probe_collective: `fabric-probe link|latency|collective`), the benchmark suite, the validation
against published figures, the serving experiments, sweeps and plots. The core modules never import from here."""
