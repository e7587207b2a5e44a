"""The kernel: the compile cache, cache hits, digest hints, run plans, static shapes."""
