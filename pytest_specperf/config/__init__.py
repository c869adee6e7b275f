"""Configuration: the frozen settings and workloads, loaded from specperf.toml or pyproject.toml."""
