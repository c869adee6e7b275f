"""Engines: everything that differs between serving engines, behind one small interface.

The rest of the plugin asks an `Engine` how to launch a server, which flags are valid, when it is
ready, how a failed start reads, how to send a request, where a response says how many tokens were
verified, what the server says it runs, and how to clear its cache. SGLang is the primary engine
(and what the simulator speaks); vLLM is the second. `register_engine` adds one.
"""

from pytest_specperf.engines.base import (
    Engine,
    ReportedSettings,
    SpecCounters,
    SpecCounts,
    engine_for,
    engine_names,
    register_engine,
    unregister_engine,
)
from pytest_specperf.engines.flags import EngineFlags

__all__ = [
    "Engine",
    "EngineFlags",
    "ReportedSettings",
    "SpecCounters",
    "SpecCounts",
    "engine_for",
    "engine_names",
    "register_engine",
    "unregister_engine",
]
