"""The history variance model: prediction intervals, the prior, advice; cross-checked with scipy."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from pytest_specperf.verdict.history import (
    MIN_RUNS,
    RunLevel,
    bimodal,
    compare_with_history,
    reject_outliers,
    smallest_detectable_change,
    spread_lower_bound,
)
from pytest_specperf.verdict.stats import Decision, Direction, classify_ratio


def test_run_level_is_the_delta_method_variance_of_the_log_mean() -> None:
    level = RunLevel.of([98.0, 100.0, 102.0])
    assert level.log_mean == pytest.approx(math.log(100.0))
    assert level.variance == pytest.approx(4.0 / (3 * 100.0**2))  # sample variance 4, 3 rounds
    assert RunLevel.of([5.0]).variance == 0.0
    with pytest.raises(ValueError, match="finite and positive"):
        RunLevel.of([1.0, 0.0])


def test_without_round_noise_it_is_the_textbook_prediction_interval() -> None:
    """Runs of one round each: ybar ± t(k-1)·S·sqrt(1 + 1/k), on the log scale (scipy's t)."""
    values = [100.0, 103.0, 98.0, 101.0, 99.5]
    logs = [math.log(v) for v in values]
    k = len(logs)
    ybar = sum(logs) / k
    s = stats.tstd(logs)
    low, high = stats.t.interval(0.90, k - 1, loc=ybar, scale=s * math.sqrt(1 + 1 / k))
    tonight = 97.0
    got = compare_with_history([tonight], [[v] for v in values], prior_cv=0.02)
    assert not got.prior and got.runs == k
    assert got.ratio.value == pytest.approx(tonight / math.exp(ybar))
    assert got.ratio.low == pytest.approx(tonight / math.exp(high))
    assert got.ratio.high == pytest.approx(tonight / math.exp(low))
    assert got.run_cv == pytest.approx(s)


def test_with_fewer_than_min_runs_the_prior_is_used_and_said() -> None:
    got = compare_with_history([100.0] * 5, [[100.0] * 5], prior_cv=0.02)
    z = stats.norm.ppf(0.95)
    assert got.prior and got.run_cv == 0.02
    assert math.log(got.ratio.high) == pytest.approx(z * 0.02 * math.sqrt(2))
    assert got.runs_to_replace_prior == MIN_RUNS - 1
    assert "prior run-to-run CV 2.0% (config run_to_run_cv; 2 more recorded runs replace it)" in got.describe()
    two = compare_with_history([100.0] * 5, [[100.0] * 5, [101.0] * 5], prior_cv=0.02)
    assert two.runs_to_replace_prior == 1 and "1 more recorded run replaces it" in two.describe()
    three = compare_with_history([100.0] * 5, [[100.0] * 5, [101.0] * 5, [99.0] * 5], prior_cv=0.02)
    assert not three.prior and three.runs_to_replace_prior == 0 and "run-to-run CV 1.0%" in three.describe()


def test_prior_interval_adds_round_noise_of_both_sides() -> None:
    """Below the round CV tonight shows, no prior is believed: a start moves at least as much as its rounds."""
    current, stored = [99.0, 100.0, 101.0], [[98.0, 100.0, 102.0]]
    got = compare_with_history(current, stored, prior_cv=0.0)
    a, b = RunLevel.of(current).variance, RunLevel.of(stored[0]).variance
    tau2 = 3 * a  # tonight's round CV, squared
    assert got.spread_source == "tonight's rounds" and got.run_cv == pytest.approx(math.sqrt(tau2))
    assert got.fixed_variance == pytest.approx(2 * tau2 + b)
    assert got.variance == pytest.approx(2 * tau2 + a + b)


def test_unchanged_night_met_a_ten_percent_drop_missed() -> None:
    rng = random.Random(7)
    runs = [[100.0 * (1 + rng.gauss(0, 0.02)) * (1 + rng.gauss(0, 0.01)) for _ in range(5)] for _ in range(10)]
    same = compare_with_history([100.0 * (1 + rng.gauss(0, 0.01)) for _ in range(5)], runs, prior_cv=0.02)
    assert classify_ratio(same.ratio, 0.05, Direction.HIGHER_IS_BETTER).decision is Decision.MET
    slow = compare_with_history([90.0 * (1 + rng.gauss(0, 0.01)) for _ in range(5)], runs, prior_cv=0.02)
    assert classify_ratio(slow.ratio, 0.05, Direction.HIGHER_IS_BETTER).decision is Decision.MISSED


@pytest.mark.parametrize(("k", "tau"), [(1, 0.02), (10, 0.02), (30, 0.03)])
def test_prediction_interval_covers_tonight_at_its_level(k: int, tau: float) -> None:
    """Seeded Monte Carlo: run offsets with SD tau, round CV 1%, 5 rounds; the 90% interval for
    tonight's ratio to the level covers the true ratio 1 about 90% of the time."""
    rng = random.Random(1000 + k)

    def run() -> list[float]:
        offset = math.exp(rng.gauss(0, tau))
        return [100.0 * offset * (1 + rng.gauss(0, 0.01)) for _ in range(5)]

    trials = 1500
    covered = 0
    for _ in range(trials):
        got = compare_with_history(run(), [run() for _ in range(k)], prior_cv=tau)
        covered += got.ratio.low <= 1.0 <= got.ratio.high
    assert 0.86 <= covered / trials <= 0.95


def test_an_estimate_beyond_the_tolerance_without_credibility_is_suspect() -> None:
    got = compare_with_history([93.5, 93.0, 94.0, 93.2, 93.8], [[100.0] * 5], prior_cv=0.03)
    assert got.ratio.value < 0.95 and got.ratio.high > 0.95
    assert classify_ratio(got.ratio, 0.05, Direction.HIGHER_IS_BETTER).decision is Decision.SUSPECT
    within = compare_with_history([96.5, 96.0, 97.0, 96.2, 96.8], [[100.0] * 5], prior_cv=0.03)
    assert classify_ratio(within.ratio, 0.05, Direction.HIGHER_IS_BETTER).decision is Decision.MET
    strict = classify_ratio(within.ratio, 0.05, Direction.HIGHER_IS_BETTER, strict=True)
    assert strict.decision is Decision.INCONCLUSIVE  # the strict reading wants the whole interval within


def test_a_second_start_halves_tonights_offset_variance() -> None:
    runs = [[100.0 * (1 + 0.01 * i)] * 5 for i in (-2, -1, 0, 1, 2, 0)]
    one = compare_with_history([[97.0] * 5], runs, prior_cv=0.02)
    two = compare_with_history([[97.0] * 5, [97.0] * 5], runs, prior_cv=0.02)
    assert two.starts == 2 and two.ratio.value == pytest.approx(one.ratio.value)
    tau2 = one.run_cv**2
    assert math.log(one.ratio.high / one.ratio.value) ** 2 / math.log(two.ratio.high / two.ratio.value) ** 2 == (
        pytest.approx((tau2 + tau2 / 6) / (tau2 / 2 + tau2 / 6), rel=0.15)  # df differ a little
    )


def test_one_wild_run_is_rejected_and_said() -> None:
    rng = random.Random(3)
    runs = [[100.0 * math.exp(rng.gauss(0, 0.02))] for _ in range(9)] + [[85.0]]
    got = compare_with_history([90.0], runs, prior_cv=0.02)
    assert [r.index for r in got.rejected] == [9] and got.runs == 9
    assert got.rejected[0].ratio < 0.9 and "deleted-residual t" in got.rejected[0].describe()
    assert "1 more rejected as an outlier" in got.describe()
    kept = compare_with_history([90.0], runs, prior_cv=0.02, reject=False)
    assert kept.runs == 10 and kept.ratio.high > got.ratio.high  # the wild run widened the interval
    assert reject_outliers([0.0, 0.01, -0.01, 0.5]) == []  # fewer than five runs: nothing is judged


def test_the_first_run_of_a_segment_is_held_against_the_runs_after_it() -> None:
    levels = [math.log(0.8)] + [math.log(100.0) + 0.005 * math.sin(i) for i in range(8)]
    assert [r.index for r in reject_outliers(levels)] == [0]


@pytest.mark.parametrize("k", [3, 4, 5])
def test_coverage_stays_near_ninety_percent_with_three_to_five_runs(k: int) -> None:
    """Night SD 2%, round CV 3%, 5 rounds: the estimated spread's df keep a 90% interval near 90%."""
    rng = random.Random(200 + k)

    def run() -> list[float]:
        offset = math.exp(rng.gauss(0, 0.02))
        return [100.0 * offset * (1 + rng.gauss(0, 0.03)) for _ in range(5)]

    trials = 2000
    covered = sum(
        (c := compare_with_history(run(), [run() for _ in range(k)], prior_cv=0.02, reject=False)).ratio.low
        <= 1.0
        <= c.ratio.high
        for _ in range(trials)
    )
    assert 0.875 <= covered / trials <= 0.93


def test_the_smallest_detectable_change_shrinks_with_rounds_and_starts() -> None:
    rng = random.Random(9)
    runs = [[100.0 * math.exp(rng.gauss(0, 0.02)) * (1 + rng.gauss(0, 0.03)) for _ in range(5)] for _ in range(10)]
    got = compare_with_history([100.0 * (1 + rng.gauss(0, 0.03)) for _ in range(5)], runs, prior_cv=0.02)
    five = smallest_detectable_change(got, 0.05, rounds=5)
    ten = smallest_detectable_change(got, 0.05, rounds=10)
    two_starts = smallest_detectable_change(got, 0.05, rounds=5, starts=2)
    assert five is not None and ten is not None and two_starts is not None
    assert five < ten < 0.95 and five < two_starts
    latency = smallest_detectable_change(got, 0.05, rounds=5, higher_is_better=False)
    assert latency is not None and latency > 1.05


def test_a_credibly_noisy_key_is_told_apart_from_an_unlucky_estimate() -> None:
    quiet = compare_with_history([100.0], [[100.0 * (1 + 0.02 * math.sin(i))] for i in range(10)], prior_cv=0.02)
    noisy = compare_with_history([100.0], [[100.0 * (1 + 0.12 * math.sin(i))] for i in range(10)], prior_cv=0.02)
    assert spread_lower_bound(quiet) is not None and spread_lower_bound(quiet) < 0.02  # type: ignore[operator]
    assert spread_lower_bound(noisy) is not None and spread_lower_bound(noisy) > 0.05  # type: ignore[operator]
    assert spread_lower_bound(compare_with_history([100.0], [[100.0]], prior_cv=0.02)) is None  # the prior


def test_run_means_in_two_alternating_groups_are_bimodal_a_step_is_not() -> None:
    rng = random.Random(4)
    alternating = [(100.0 if rng.random() < 0.5 else 130.0) * (1 + rng.gauss(0, 0.01)) for _ in range(30)]
    groups = bimodal(alternating)
    assert (
        groups is not None and groups[0] == pytest.approx(100.0, rel=0.02) and groups[1] == pytest.approx(130, rel=0.02)
    )
    assert bimodal([100.0 * (1 + rng.gauss(0, 0.01)) for _ in range(15)] + [130.0] * 15) is None
    assert bimodal([100.0 * math.exp(rng.gauss(0, 0.02)) for _ in range(30)]) is None


def test_speedup_interval_carries_both_start_offsets() -> None:
    from pytest_specperf.verdict.history import speedup_estimate

    got = speedup_estimate([120.0] * 5, [100.0] * 5, run_cv=0.02)
    assert got.value == pytest.approx(1.2)
    assert math.log(got.high / got.value) == pytest.approx(stats.norm.ppf(0.95) * 0.02 * math.sqrt(2))
    rng = random.Random(5)

    def start(level: float) -> list[float]:
        offset = math.exp(rng.gauss(0, 0.02))
        return [level * offset * (1 + rng.gauss(0, 0.01)) for _ in range(5)]

    trials = 1500
    covered = sum(
        (e := speedup_estimate(start(120.0), start(100.0), run_cv=0.02)).low <= 1.2 <= e.high for _ in range(trials)
    )
    assert 0.86 <= covered / trials <= 0.95


def test_speedup_spread_is_the_recorded_speedups_spread_less_their_round_noise() -> None:
    from pytest_specperf.verdict.history import SpeedupSpread

    # one round per run: no round noise, so the spread is the sample variance of the log speedups
    speedups = [1.20, 1.22, 1.19, 1.21]
    pairs = [([100.0 * s], [100.0]) for s in speedups]
    spread = SpeedupSpread.of(pairs)
    assert spread is not None and spread.runs == 4 and spread.df == 3
    assert spread.variance == pytest.approx(stats.tvar([math.log(s) for s in speedups]))
    # round noise explains part of the spread; what is left is the start-to-start part
    noisy = SpeedupSpread.of([([120.0, 121.0], [100.0, 99.0])] * 2 + [([118.0, 119.0], [100.0, 101.0])])
    assert noisy is not None and noisy.variance >= 0.0
    assert SpeedupSpread.of(pairs[: MIN_RUNS - 1]) is None  # below MIN_RUNS: the prior decides


def test_speedup_with_a_recorded_spread_uses_its_degrees_of_freedom() -> None:
    from pytest_specperf.verdict.history import SpeedupSpread, speedup_estimate

    spread = SpeedupSpread(runs=4, variance=0.01**2, df=3.0)
    got = speedup_estimate([120.0] * 5, [100.0] * 5, run_cv=0.02, spread=spread)  # the prior is not used
    assert got.value == pytest.approx(1.2)
    assert math.log(got.high / got.value) == pytest.approx(stats.t.ppf(0.95, 3) * 0.01)
    steady = speedup_estimate([120.0] * 5, [100.0] * 5, run_cv=0.02, spread=SpeedupSpread(4, 0.0, 3.0))
    assert steady.low == steady.high == pytest.approx(1.2)  # recorded starts that never differed


def test_speedup_interval_from_recorded_pairs_covers_the_true_speedup() -> None:
    """Starts with a 2% offset each, 1% round noise: the interval from 5 recorded pairs covers the
    true speedup about as often as its confidence says (t with 4 df, not the normal)."""
    from pytest_specperf.verdict.history import SpeedupSpread, speedup_estimate

    rng = random.Random(11)

    def start(level: float) -> list[float]:
        offset = math.exp(rng.gauss(0, 0.02))
        return [level * offset * (1 + rng.gauss(0, 0.01)) for _ in range(5)]

    trials, covered = 1000, 0
    for _ in range(trials):
        spread = SpeedupSpread.of([(start(120.0), start(100.0)) for _ in range(5)])
        estimate = speedup_estimate(start(120.0), start(100.0), run_cv=0.0, spread=spread)
        covered += estimate.low <= 1.2 <= estimate.high
    assert 0.85 <= covered / trials <= 0.96
