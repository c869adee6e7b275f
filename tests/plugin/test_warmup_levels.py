"""The warm-up before each level's first round sends at least the level's concurrency, together.

On a real H200 night (vLLM 0.26.0), 2 warm-up requests never formed a batch of 8: the rounds at
concurrency 8 after them rose 1017 → 1281 → 1686 tok/s. Here a sweep over levels 1 and 2 with
`warmup = 1`: the c2 measurement is warmed up by 2 requests at concurrency 2.
"""

from __future__ import annotations

from plugin_suites import ONE_SPEC_SERVER, TWO_LEVEL_WORKLOAD

SWEEP_TEST = """
import pytest

@pytest.mark.specperf(server="plain")
def test_sweep(specperf):
    pass
"""


def test_each_level_is_warmed_up_at_its_own_concurrency(make_suite) -> None:
    suite = make_suite(SWEEP_TEST, servers=ONE_SPEC_SERVER, workloads=TWO_LEVEL_WORKLOAD)
    result = suite.run("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*plain/default/c1: warmup, 1 request at concurrency 1",
            "*plain/default/c2: warmup, 2 requests at concurrency 2",
        ]
    )
