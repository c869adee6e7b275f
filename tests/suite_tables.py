"""The server table and the tune table the tests run, written once: every folder that writes a
specperf.toml builds it from these (`tests/conftest.py` puts this folder on the path).

`SPEC_SERVERS` is the story's suite: the reference and two EAGLE-3 configs on the simulator's
draft. `tune_config` is a `specperf tune` suite on the simulator: the reference, one EAGLE-3 base
config and a workload at two concurrency levels, with the `[specperf.tune]` table last so a test
appends the axes it varies.
"""

from __future__ import annotations

SPEC_SERVERS = """
[specperf.servers.plain]

[specperf.servers.eagle3-5step]
algorithm = "EAGLE3"
draft_model = "sim/kimi-k2.5-eagle3"
num_steps = 5
eagle_topk = 1
num_draft_tokens = 6

[specperf.servers.eagle3-2step]
algorithm = "EAGLE3"
draft_model = "sim/kimi-k2.5-eagle3"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3
"""

#: the reference and the 5-step config only
ONE_SPEC_SERVER = SPEC_SERVERS[: SPEC_SERVERS.index("[specperf.servers.eagle3-2step]")]

#: four short chat answers after one warmup request: the smallest workload a session measures
TINY_WORKLOAD = """
[specperf.workloads.default]
prompts = "builtin:chat"
num_requests = 4
max_new_tokens = 24
warmup = 1
"""

_TUNE_CONFIG = """
[specperf]
launcher = "sim"
model = "moonshotai/Kimi-K2.5"
{settings}
[specperf.servers.plain]

[specperf.servers.eagle3]
algorithm = "EAGLE3"
draft_model = "org/kimi-k2.5-eagle3"
num_steps = 5
eagle_topk = 1
num_draft_tokens = 6

[specperf.workloads.chat]
prompts = "builtin:qa"
num_requests = {num_requests}
concurrency = [1, 8]

[specperf.tune]
base = "eagle3"
workloads = ["chat"]
"""


def tune_config(*, num_requests: int = 4, rounds: int | None = None) -> str:
    """The tune suite, its `[specperf.tune]` table open for the axes a test adds."""
    settings = "" if rounds is None else f"rounds = {rounds}\n"
    return _TUNE_CONFIG.format(settings=settings, num_requests=num_requests)
