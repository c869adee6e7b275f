"""Unit tests of pytest_specperf.report.sweep: crossover interpolation and best config per level."""

import math

import pytest

from pytest_specperf.report.sweep import (
    Certainty,
    CrossoverKind,
    best_config_per_level,
    find_crossover,
)
from pytest_specperf.verdict.stats import Estimate

LEVELS = (1, 4, 16, 64)


def e(value: float, half: float = 0.1) -> Estimate:
    return Estimate(value, value - half, value + half, 5, 0.9)


def curve(*values: float, half: float = 0.1) -> dict[float, Estimate]:
    return {c: e(v, half) for c, v in zip(LEVELS, values, strict=False)}


# --- crossover -----------------------------------------------------------------------------------


def test_crossover_interpolates_in_log2_concurrency() -> None:
    c = find_crossover(curve(1.4, 1.2, 0.8, 0.6))
    assert c.kind is CrossoverKind.CROSSES and not c.non_monotone
    assert c.concurrency == pytest.approx(8.0)  # halfway between 4 and 16 in log2
    assert c.low == pytest.approx(2**2.5)  # lows 1.1 -> 0.7
    assert c.high == pytest.approx(2**3.5)  # highs 1.3 -> 0.9
    assert c.levels == (1.0, 4.0, 16.0, 64.0)
    assert c.describe() == "crosses 1.0 at concurrency ~8 (5.66 to 11.3)"


def test_crossover_exactly_at_a_level() -> None:
    c = find_crossover(curve(1.3, 1.0, 0.7))
    assert c.kind is CrossoverKind.CROSSES and c.concurrency == pytest.approx(4.0)


def test_crossover_bounds_reaching_past_the_measured_levels() -> None:
    c = find_crossover(curve(1.05, 0.7, 0.5, half=0.2))
    assert c.kind is CrossoverKind.CROSSES
    assert c.low == -math.inf  # even at concurrency 1 the low bound is below 1
    assert c.high == pytest.approx(2 ** (2 * 0.25 / 0.35))
    assert c.describe().endswith("(<1 to 2.69)")


def test_crossover_above_everywhere() -> None:
    c = find_crossover(curve(1.5, 1.4, 1.3, 1.2))
    assert c.kind is CrossoverKind.ABOVE_ALL and c.concurrency == math.inf
    assert (c.low, c.high) == (math.inf, math.inf)
    assert c.describe() == "above 64"
    near = find_crossover(curve(1.5, 1.3, 1.15, 1.05))
    assert near.kind is CrossoverKind.ABOVE_ALL
    assert near.low == pytest.approx(2 ** (4 + 2 * 0.05 / 0.1)) and near.high == math.inf
    assert near.describe() == "above 64 (could be as low as 32)"


def test_crossover_below_everywhere() -> None:
    c = find_crossover(curve(0.9, 0.8, 0.7, 0.6, half=0.05))
    assert c.kind is CrossoverKind.BELOW_ALL and c.concurrency == -math.inf
    assert (c.low, c.high) == (-math.inf, -math.inf)
    assert c.describe() == "below 1"
    near = find_crossover(curve(0.95, 0.85, 0.7))
    assert near.high == pytest.approx(2 ** (2 * 0.05 / 0.1))
    assert near.describe() == "below 1 (could be as high as 2)"


def test_crossover_non_monotone_reports_first_downward_crossing() -> None:
    c = find_crossover(curve(1.3, 0.9, 1.1, 0.8))
    assert c.kind is CrossoverKind.CROSSES and c.non_monotone
    assert c.concurrency == pytest.approx(2**1.5)
    assert c.low == pytest.approx(2.0)  # lows 1.2 -> 0.8
    assert c.high == pytest.approx(2 ** (4 + 2 * 0.2 / 0.3))  # highs touch 1.0 at 4, fall at 16 -> 64
    assert c.describe().endswith("; non-monotone")
    rises_then_falls = find_crossover(curve(0.9, 1.2, 0.8))
    assert rises_then_falls.kind is CrossoverKind.CROSSES and rises_then_falls.non_monotone
    assert rises_then_falls.concurrency == pytest.approx(2 ** (2 + 2 * 0.2 / 0.4))


def test_crossover_upward_only() -> None:
    c = find_crossover(curve(0.8, 0.9, 1.2))
    assert c.kind is CrossoverKind.CROSSES_UPWARD and not c.non_monotone
    assert c.concurrency == pytest.approx(2 ** (2 + 2 * 0.1 / 0.3))
    assert c.low < c.concurrency < c.high
    assert c.describe().startswith("rises above 1.0")


def test_crossover_with_unknown_intervals_and_unsorted_input() -> None:
    c = find_crossover({16: Estimate.unknown(0.8, 1, 0.9), 1: Estimate.unknown(1.2, 1, 0.9)})
    assert c.kind is CrossoverKind.CROSSES and c.concurrency == pytest.approx(4.0)
    assert (c.low, c.high) == (-math.inf, math.inf)


def test_crossover_single_level_and_errors() -> None:
    assert find_crossover({8: e(1.2)}).kind is CrossoverKind.ABOVE_ALL
    assert find_crossover({8: e(0.5)}).describe() == "below 8"
    with pytest.raises(ValueError):
        find_crossover({})
    with pytest.raises(ValueError):
        find_crossover({0: e(1.2), 4: e(0.8)})


# --- best config per level -----------------------------------------------------------------------


def test_best_config_clear_and_overlapping() -> None:
    winners = best_config_per_level(
        {
            "plain": {1: e(62.9, 1.0), 16: e(600.0, 10.0)},
            "eagle3-5step": {1: e(71.0, 1.5), 16: e(590.0, 12.0)},
            "eagle3-2step": {1: e(75.9, 1.5), 16: e(520.0, 10.0)},
        }
    )
    assert [w.concurrency for w in winners] == [1.0, 16.0]
    low, high = winners
    assert (low.best, low.runner_up, low.certainty) == ("eagle3-2step", "eagle3-5step", Certainty.CLEAR)
    assert low.throughput.value == 75.9 and low.runner_up_throughput is not None
    assert (high.best, high.runner_up, high.certainty) == ("plain", "eagle3-5step", Certainty.OVERLAPPING)


def test_best_config_single_config_and_partial_levels() -> None:
    winners = best_config_per_level({"a": {1: e(10.0), 4: e(30.0)}, "b": {4: e(20.0)}})
    assert winners[0].certainty is Certainty.SOLE and winners[0].runner_up is None
    assert winners[1].best == "a" and winners[1].certainty is Certainty.CLEAR


def test_best_config_ties_are_deterministic() -> None:
    winners = best_config_per_level({"zeta": {1: e(50.0)}, "alpha": {1: e(50.0)}, "mid": {1: e(40.0)}})
    (w,) = winners
    assert (w.best, w.tied_with, w.certainty) == ("alpha", ("zeta",), Certainty.TIED)
    assert w.runner_up == "zeta"


def test_best_config_unknown_intervals_overlap() -> None:
    winners = best_config_per_level({"a": {1: Estimate.unknown(80.0, 1, 0.9)}, "b": {1: e(60.0)}})
    assert winners[0].best == "a" and winners[0].certainty is Certainty.OVERLAPPING
    assert best_config_per_level({}) == ()
