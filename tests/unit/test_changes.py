"""Change points over run histories: found where a step is, rare where none is (seeded)."""

from __future__ import annotations

import random

import pytest

from pytest_specperf.verdict.changes import change_points, robust_sigma


def noisy(n: int, cv: float, seed: int, step_at: int | None = None, step: float = 0.0) -> list[float]:
    rng = random.Random(seed)
    level = [1 + (step if step_at is not None and i >= step_at else 0.0) for i in range(n)]
    return [100.0 * lv * (1 + rng.gauss(0, cv)) for lv in level]


def test_an_eight_percent_step_is_found_where_it_is() -> None:
    found = change_points(noisy(20, 0.02, seed=3, step_at=14, step=-0.08))
    assert [c.index for c in found] == [14]
    assert -0.13 < found[0].change.value - 1 < -0.04
    assert found[0].percent.startswith("-")


def test_false_changes_are_rare_on_series_without_one() -> None:
    """Seeded: 200 series of 20 runs with 2% noise; the Welch-confirmed PELT flags few of them."""
    flagged = sum(bool(change_points(noisy(20, 0.02, seed=s))) for s in range(200))
    assert flagged / 200 <= 0.02


def test_steps_are_mostly_found() -> None:
    found = sum(any(abs(c.index - 14) <= 1 for c in change_points(noisy(20, 0.02, s, 14, -0.08))) for s in range(100))
    assert found >= 80


def test_a_deterministic_series_splits_only_at_its_step() -> None:
    assert change_points([70.0] * 6 + [63.0] * 3)[0].index == 6
    assert change_points([70.0] * 9) == []


@pytest.mark.parametrize("values", [[], [1.0, 2.0, 3.0], [1.0, 0.0, 1.0, 1.0, 2.0]])
def test_too_short_or_invalid_series_have_no_change(values: list[float]) -> None:
    assert change_points(values) == []


def test_robust_sigma_ignores_a_single_step() -> None:
    logs = [0.0] * 10 + [-0.1] * 10
    assert robust_sigma(logs) == pytest.approx(0.001)  # the floor: only one difference moved
