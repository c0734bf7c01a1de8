"""Tools built on the core: the probes (one link, one latency, one collective), the benchmark suite and the
validation against published figures. The core modules never import from here."""
