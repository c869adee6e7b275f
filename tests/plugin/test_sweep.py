"""Concurrency sweeps end to end: per-level tests, the crossover, and per-level `min_speedup`."""

from __future__ import annotations

import math
import re

from pytest_specperf.sim.profile import SpecConfig, load_profile
from pytest_specperf.stats import Estimate
from pytest_specperf.sweep import find_crossover

LEVELS = (1, 2, 4, 8)
SWEEP = """
[specperf.workloads.default]
prompts = "builtin:qa"
num_requests = 16
max_new_tokens = 32
ignore_eos = true
concurrency = [1, 2, 4, 8]
warmup = 2
"""


def analytic_crossover(steps: int, draft_tokens: int, prompt_tokens: int) -> float:
    """The crossover the profile predicts, interpolated between the same levels as the measurement."""
    profile = load_profile("kimi-k2.5-tp8")
    spec = SpecConfig("EAGLE3", steps, 1, draft_tokens)
    speedups = {}
    for level in LEVELS:
        shape = {"concurrency": level, "prompt_tokens": prompt_tokens, "output_tokens": 32, "num_requests": 16}
        ratio = profile.predicted_round_throughput(spec, **shape) / profile.predicted_round_throughput(None, **shape)
        speedups[level] = Estimate.exact(ratio)
    return find_crossover(speedups).concurrency


def test_sweep_finds_the_crossover_and_checks_each_level(make_suite) -> None:
    suite = make_suite(
        """
        import pytest

        @pytest.mark.specperf(min_speedup={1: 1.05, 8: 1.0})
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
    # c1 and c8 are checked per level: speculation pays at 1 and loses at 8 on this profile
    result.assert_outcomes(passed=6, failed=2)
    result.stdout.fnmatch_lines(["*test_sweep?eagle3-5step-c8? FAILED*"])
    result.stdout.fnmatch_lines(["*test_sweep?eagle3-5step-c1? PASSED*"])
    found = {}
    for line in result.outlines:
        match = re.search(
            r"(eagle3-\dstep): speedup crosses 1\.0 at concurrency ~([\d.]+) \(([\d.]+) to ([\d.]+)\)", line
        )
        if match:
            found[match[1]] = tuple(float(v) for v in match.groups()[1:])
    assert set(found) == {"eagle3-5step", "eagle3-2step"}
    for name, steps, draft in (("eagle3-5step", 5, 6), ("eagle3-2step", 2, 3)):
        value, low, high = found[name]
        expected = analytic_crossover(steps, draft, prompt_tokens=20)  # qa prompts; prefill is ~all fixed cost
        # the measured interval, widened by a quarter octave for the prediction's own model error
        assert low * 2**-0.25 <= expected <= high * 2**0.25, (name, expected, found[name])
        assert math.isfinite(value)
