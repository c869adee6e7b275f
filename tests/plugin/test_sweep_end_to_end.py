"""Concurrency sweeps end to end: one test per level, each level checked on its own, the crossover said.

Where the crossover lies against the profile's prediction is the simulator's timing fidelity: a
benchmark (benchmarks/sweep_crossover.py, figures in docs/benchmarks.md), since a busy machine's scheduler
moves a measured speedup at this time scale.
"""

from __future__ import annotations

SWEEP = """
[specperf.workloads.default]
prompts = "builtin:qa"
num_requests = 16
max_new_tokens = 32
ignore_eos = true
concurrency = [1, 2, 4, 8]
warmup = 2
"""


def test_sweep_checks_each_level_and_says_where_the_speedup_crosses(make_suite) -> None:
    suite = make_suite(
        """
        import pytest

        # thresholds far on either side of what is measured: met at c1, missed at c8, whatever the load
        @pytest.mark.specperf(min_speedup={1: 0.5, 8: 5.0})
        def test_sweep(specperf):
            pass
        """,
        workloads=SWEEP,
        extra="rounds = 3\n",
    )
    toml = suite.pytester.path / "specperf.toml"
    toml.write_text(
        toml.read_text().replace("sim_time_scale = 0.02", "sim_time_scale = 0.1").replace("rounds = 2\n", "")
    )
    result = suite.run("-v")
    # c1 and c8 are checked per level, c2 and c4 only measured: each level is a test of its own
    result.assert_outcomes(passed=6, failed=2)
    result.stdout.fnmatch_lines(["*test_sweep?eagle3-5step-c8? FAILED*"])
    result.stdout.fnmatch_lines(["*test_sweep?eagle3-5step-c1? PASSED*"])
    result.stdout.fnmatch_lines(["*min_speedup: speedup * over plain * must be >= 5: missed*"])
    text = result.stdout.str()
    crossings = text[text.index("where the speedup crosses 1.0:") :].splitlines()[1:3]
    assert sorted(line.split(":")[0].strip() for line in crossings) == ["eagle3-2step", "eagle3-5step"]
    assert "concurrency sweep, workload default: speedup over plain by concurrency level" in text
