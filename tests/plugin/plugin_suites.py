"""The texts the plugin's end-to-end tests run: workloads, a test file, a whole config, with the one
server table of the tests (`suite_tables`).

Test modules import them by this module's name (`from plugin_suites import ...`): unique across the
test folders, so any of them can be collected together with the others, under xdist too.
"""

from __future__ import annotations

import textwrap

from suite_tables import ONE_SPEC_SERVER, SPEC_SERVERS, TINY_WORKLOAD

__all__ = [
    "ONE_MEASURED_TEST",
    "ONE_SPEC_SERVER",
    "SPEC_SERVERS",
    "STEADY_WORKLOAD",
    "TINY_WORKLOAD",
    "TWO_LEVEL_WORKLOAD",
    "config_text",
]

#: long enough answers (qa prompts, no early stop) that rounds are steady on a loaded machine
STEADY_WORKLOAD = """
[specperf.workloads.default]
prompts = "builtin:qa"
num_requests = 4
max_new_tokens = 32
ignore_eos = true
warmup = 1
"""

#: the tiny workload at two concurrency levels (a sweep)
TWO_LEVEL_WORKLOAD = """
[specperf.workloads.default]
prompts = "builtin:chat"
num_requests = 4
max_new_tokens = 24
warmup = 1
concurrency = [1, 2]
"""

#: one marked test of the 5-step server, with an empty body
ONE_MEASURED_TEST = """
import pytest

@pytest.mark.specperf(server="eagle3-5step")
def test_perf(specperf):
    pass
"""


def config_text(token: str, *, extra: str = "", servers: str = SPEC_SERVERS, workloads: str = TINY_WORKLOAD) -> str:
    return (
        textwrap.dedent(f"""
        [specperf]
        launcher = "sim"
        model = "sim/kimi-k2.5-{token}"
        sim_profile = "kimi-k2.5-tp8"
        sim_time_scale = 0.02
        rounds = 2
        run_to_run_cv = 0
        startup_timeout = 60
        stop_timeout = 10
        """)
        + textwrap.dedent(extra)
        + textwrap.dedent(servers)
        + textwrap.dedent(workloads)
    )
