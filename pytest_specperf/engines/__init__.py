"""Engines: everything that differs between serving engines, behind one small interface.

The rest of the plugin asks an `Engine` how to launch a server, when it is ready, how to send a
request, where a response says how many tokens were verified, and how to clear its cache. SGLang is
the primary engine (and what the simulator speaks); vLLM is the second.
"""

from pytest_specperf.engines.base import Engine, SpecCounts, engine_for, engine_names

__all__ = ["Engine", "SpecCounts", "engine_for", "engine_names"]
