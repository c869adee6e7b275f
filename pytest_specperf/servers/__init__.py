"""Servers: launching, process-tree teardown, the pool, and sharing servers across xdist workers."""
