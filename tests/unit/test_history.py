"""The history variance model: prediction intervals, the prior, advice; cross-checked with scipy."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from pytest_specperf.verdict.history import MIN_RUNS, RunLevel, advise_history, compare_with_history
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
    current, stored = [99.0, 100.0, 101.0], [[98.0, 100.0, 102.0]]
    got = compare_with_history(current, stored, prior_cv=0.0)
    a, b = RunLevel.of(current).variance, RunLevel.of(stored[0]).variance
    welch_df = (a + b) ** 2 / (a * a / 2 + b * b / 2)
    assert got.fixed_variance == pytest.approx(b)
    assert math.log(got.ratio.high / got.ratio.value) == pytest.approx(stats.t.ppf(0.95, welch_df) * math.sqrt(a + b))


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


def test_advice_says_more_rounds_cannot_beat_run_to_run_variance() -> None:
    got = compare_with_history([95.5, 95.0, 96.0, 95.2, 95.8], [[100.0] * 5], prior_cv=0.02)
    decision = classify_ratio(got.ratio, 0.05, Direction.HIGHER_IS_BETTER).decision
    assert decision is Decision.INCONCLUSIVE
    advice = advise_history(got, 0.95, decision)
    assert not advice.helps and "more rounds tonight cannot resolve it" in advice.reason


def test_advice_counts_rounds_when_round_noise_dominates() -> None:
    got = compare_with_history([90.0, 94.0], [[100.0] * 5], prior_cv=0.001)
    decision = classify_ratio(got.ratio, 0.05, Direction.HIGHER_IS_BETTER).decision
    assert decision is Decision.INCONCLUSIVE
    advice = advise_history(got, 0.95, decision, max_rounds=10)
    assert advice.helps and advice.rounds_needed is not None and 3 <= advice.rounds_needed <= 10


def test_a_night_beyond_the_tolerance_gets_rounds_up_to_the_limit() -> None:
    """Run-to-run variance keeps the interval across the bound, but tonight's estimate is past it:
    more rounds still shrink tonight's share of the interval, so the night gets them."""
    got = compare_with_history([93.5, 93.0, 94.0, 93.2, 93.8], [[100.0] * 5], prior_cv=0.03)
    decision = classify_ratio(got.ratio, 0.05, Direction.HIGHER_IS_BETTER).decision
    assert decision is Decision.INCONCLUSIVE and got.ratio.value < 0.95
    advice = advise_history(got, 0.95, decision, max_rounds=12)
    assert advice.helps and advice.rounds_needed == 12 and "beyond 0.95" in advice.reason
    slower = compare_with_history([107.0, 106.5, 107.5, 106.8, 107.2], [[100.0] * 5], prior_cv=0.03)  # a latency
    latency = classify_ratio(slower.ratio, 0.05, Direction.LOWER_IS_BETTER)
    assert latency.decision is Decision.INCONCLUSIVE
    assert advise_history(slower, latency.regression_bound, latency.decision, max_rounds=12).helps
    assert not advise_history(got, 0.95, decision, max_rounds=5).helps  # no rounds left


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
