"""What pytest prints before any test runs: `pytest --markers` from the marker's own declaration, and the
header naming the simulator's profile as every other output does."""

from __future__ import annotations

import pytest

from pytest_specperf.verdict.markers import MARKER_ARGUMENTS, MARKER_KEYS


def test_pytest_markers_lists_every_marker_argument(pytester: pytest.Pytester) -> None:
    """A marker argument missing from `pytest --markers` (as `accept_per_position` once was) fails here."""
    result = pytester.runpytest_subprocess("--markers", "-p", "no:cacheprovider")
    [line] = [line for line in result.outlines if line.startswith("@pytest.mark.specperf(")]
    listed = line.split("(", 1)[1].split(")", 1)[0]
    assert [argument.strip().rstrip("=") for argument in listed.split(",")] == list(MARKER_KEYS)
    assert "accept_per_position=" in listed


def test_pytest_markers_gives_every_marker_argument_its_values(pytester: pytest.Pytester) -> None:
    """Each argument is listed with the values it takes, as its declaration gives them: a user reading
    `pytest --markers` learns that `accept_per_position=True` judges each position against the history."""
    result = pytester.runpytest_subprocess("--markers", "-p", "no:cacheprovider")
    text = " ".join(" ".join(result.outlines).split())  # pytest wraps the help line
    for key, values in MARKER_ARGUMENTS.items():
        assert f"{key}={values}" in text, key
    assert "accept_per_position=True (each draft position against the stored history)" in text


def test_the_header_names_the_default_profile_and_the_gpus_it_models(make_suite) -> None:
    """The header names the profile as the summary does, and says once that it models 8 GPUs while the
    servers are launched for 1 (no `--tp-size`), as their fingerprints will count."""
    result = make_suite("def test_nothing():\n    pass\n").run("--collect-only")
    result.stdout.fnmatch_lines(
        [
            "specperf: SIMULATED servers (pytest_specperf.sim, profile kimi-k2.5-tp8, time scale *; it models 8 GPUs, "
            "the servers are launched for 1 (their fingerprints count those; timings are the profile's)): *"
        ]
    )
