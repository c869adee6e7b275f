"""Concurrency sweeps end to end: per-level tests, the crossover, and per-level `min_speedup`."""

from __future__ import annotations

import math
import re

from pytest_specperf.report.sweep import find_crossover
from pytest_specperf.sim.profile import SpecConfig
from pytest_specperf.sim.profile_files import load_profile
from pytest_specperf.verdict.stats import Estimate

LEVELS = (1, 2, 4, 8)
#: How far the engine's measured throughput strays from the profile's analytic models: up to 3% in
#: benchmarks/sim_fidelity.py (ratios 0.972-0.999), so a speedup (a ratio of two) is within ~3%.
MODEL_ERROR = 0.03
SWEEP = """
[specperf.workloads.default]
prompts = "builtin:qa"
num_requests = 16
max_new_tokens = 32
ignore_eos = true
concurrency = [1, 2, 4, 8]
warmup = 2
"""


def analytic_crossovers(steps: int, draft_tokens: int, prompt_tokens: int) -> tuple[float, float]:
    """The range of crossovers the profile predicts, interpolated like the measurement.

    Steady-state decoding (no prefill, a full batch all the time) and the closed-loop round model
    (prefills stall decoding, a round starts with every client at once) bracket what the engine does;
    each curve is also moved by the models' own error (MODEL_ERROR) before it is interpolated.
    """
    profile = load_profile("kimi-k2.5-tp8")
    spec = SpecConfig("EAGLE3", steps, 1, draft_tokens)
    decode, rounds = {}, {}
    for level in LEVELS:
        decode[level] = Estimate.exact(
            profile.predicted_decode_throughput(spec, level) / profile.predicted_decode_throughput(None, level)
        )
        shape = {"concurrency": level, "prompt_tokens": prompt_tokens, "output_tokens": 32, "num_requests": 16}
        ratio = profile.predicted_round_throughput(spec, **shape) / profile.predicted_round_throughput(None, **shape)
        rounds[level] = Estimate.exact(ratio)
    ends = [
        find_crossover({level: Estimate.exact(e.value * factor) for level, e in curve.items()}).concurrency
        for curve in (decode, rounds)
        for factor in (1 - MODEL_ERROR, 1 + MODEL_ERROR)
    ]
    return min(ends), max(ends)


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
        lower, upper = analytic_crossovers(steps, draft, prompt_tokens=20)  # qa prompts; prefill ~ fixed cost
        # the measured interval must overlap the range the profile's two limiting cases predict
        assert low <= upper and lower <= high, (name, (lower, upper), found[name])
        assert math.isfinite(value)
