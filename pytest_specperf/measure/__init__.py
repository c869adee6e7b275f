"""Measurement: the HTTP transport, the load driver, rounds and their records."""
