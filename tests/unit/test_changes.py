"""Change points of a run history: a step or a drift, judged on independent and correlated noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_specperf.verdict.changes import change_points, locate_change, newest_change


def noisy(n: int, sd: float, seed: int, step_at: int | None = None, step: float = 0.0, rho: float = 0.0) -> list[float]:
    """Runs around 100 with log-normal noise (AR(1) with `rho`), optionally stepping by `step` at `step_at`."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal(n)
    y = np.empty(n)
    y[0] = e[0]
    for t in range(1, n):
        y[t] = rho * y[t - 1] + math.sqrt(1 - rho * rho) * e[t]
    logs = sd * y
    if step_at is not None:
        logs[step_at:] += math.log(1 + step)
    return (100 * np.exp(logs)).tolist()


def test_a_big_step_is_named_at_the_run_it_began_with() -> None:
    found = newest_change(noisy(20, 0.01, seed=3, step_at=14, step=-0.12))
    assert found is not None and found.kind == "step" and found.index == 14
    assert found.change.high < 0.92 and found.change.low > 0.84


def test_a_change_needs_two_runs() -> None:
    assert newest_change([100.0] * 12 + [80.0]) is None
    assert newest_change([100.0] * 12 + [80.0, 80.0]) is not None


def test_unchanged_independent_series_are_seldom_flagged() -> None:
    flagged = sum(newest_change(noisy(25, 0.02, seed=s)) is not None for s in range(300))
    assert flagged <= 3


def test_correlated_noise_is_not_taken_for_a_change() -> None:
    """Neighbouring runs of real CI series correlate at +0.55..+0.77: wandering is not a step."""
    independent_test = sum(newest_change(noisy(25, 0.02, seed=s, rho=0.6)) is not None for s in range(300))
    assert independent_test <= 6


def test_a_steady_drift_is_reported_as_a_drift() -> None:
    values = [100 * math.exp(-0.004 * i) * (1 + 0.004 * math.sin(i * 2.3)) for i in range(30)]
    found = newest_change(values)
    assert found is not None and found.kind == "drift" and found.per_run is not None
    assert found.per_run == pytest.approx(math.exp(-0.004), abs=0.0005)
    assert found.change.value == pytest.approx(math.exp(-0.004 * 29), abs=0.01)


def test_more_searches_ask_for_more_evidence() -> None:
    values = noisy(24, 0.01, seed=5, step_at=16, step=-0.08)
    alone, among_many = newest_change(values), newest_change(values, searches=10_000)
    assert alone is not None and among_many is None


def test_one_wild_run_is_not_a_change_and_does_not_hide_one() -> None:
    values = noisy(20, 0.005, seed=1)
    values[8] *= 0.6
    assert newest_change(values) is None
    values[15:] = [v * 0.88 for v in values[15:]]
    found = newest_change(values)
    assert found is not None and found.index == 15


def test_binary_segmentation_finds_a_change_and_its_undoing() -> None:
    values = noisy(36, 0.005, seed=4, step_at=12, step=-0.15)
    values[24:] = [v / 0.85 for v in values[24:]]
    assert [c.index for c in change_points(values)] == [12, 24]
    newest = newest_change(values)
    assert newest is not None and newest.index == 24 and newest.change.value > 1.1


def test_locate_names_where_a_flagged_night_began() -> None:
    values = noisy(15, 0.005, seed=2, step_at=13, step=-0.1)
    found = locate_change(values)
    assert found is not None and found.index == 13
    assert locate_change([*noisy(15, 0.005, seed=2)[:-1], 100.0]) is None  # nothing to locate
