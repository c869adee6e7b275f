"""Unit tests of pytest_specperf.verdict.stats: intervals, decisions, round advice."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from pytest_specperf.verdict.stats import (
    DEFAULT_CONFIDENCE,
    Decision,
    Direction,
    Estimate,
    RegressionResult,
    advise_regression,
    advise_rounds,
    classify_ratio,
    coefficient_of_variation,
    decide_range,
    decide_regression,
    decide_threshold,
    mean_estimate,
    percentile,
    ratio_estimate,
    rounds_to_resolve,
)

HIGHER = Direction.HIGHER_IS_BETTER
LOWER = Direction.LOWER_IS_BETTER
SIMS = 4000


def coverage_tolerance(p: float, sims: int = SIMS) -> float:
    """Four binomial standard errors: a correct method fails this about once in 16,000 runs."""
    return 4.0 * math.sqrt(p * (1.0 - p) / sims)


def est(value: float, low: float, high: float, n: int = 5) -> Estimate:
    return Estimate(value, low, high, n, DEFAULT_CONFIDENCE)


# --- summaries -----------------------------------------------------------------------------------


def test_percentile_matches_numpy_linear_method() -> None:
    rng = np.random.default_rng(1)
    for size in (1, 2, 3, 10, 33):
        xs = rng.lognormal(size=size)
        for q in (0, 1, 25, 50, 90, 99, 100):
            assert percentile(xs, q) == pytest.approx(np.percentile(xs, q, method="linear"))


def test_percentile_known_values_and_errors() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([10.0], 99) == 10.0
    assert percentile([1, 2, 3, 4, 5], 90) == pytest.approx(4.6)
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1, 2], 101)
    with pytest.raises(ValueError):
        percentile([1, float("nan")], 50)


def test_coefficient_of_variation() -> None:
    assert coefficient_of_variation([1, 2, 3]) == pytest.approx(0.5)
    assert coefficient_of_variation([7, 7, 7]) == 0.0
    assert coefficient_of_variation([3.0]) is None
    assert coefficient_of_variation([-1, 1]) is None


# --- Estimate ------------------------------------------------------------------------------------


def test_estimate_helpers_and_validation() -> None:
    e = Estimate.exact(2.5)
    assert (e.low, e.high, e.n, e.confidence, e.half_width, e.bounded) == (2.5, 2.5, 0, 1.0, 0.0, True)
    u = Estimate.unknown(1.0, 1, 0.9)
    assert not u.bounded and u.half_width == math.inf
    assert est(1.0, 0.8, 1.4).half_width == pytest.approx(0.3)
    assert est(1.0, 0.9, 1.1).one_sided_confidence == pytest.approx(0.95)
    with pytest.raises(ValueError):
        Estimate(1.0, 2.0, 1.0, 5, 0.9)
    with pytest.raises(ValueError):
        Estimate(1.0, 0.0, 2.0, 5, 1.5)


# --- mean intervals ------------------------------------------------------------------------------


def test_mean_interval_known_value() -> None:
    e = mean_estimate([1, 2, 3, 4, 5], confidence=0.95)
    half = sps.t.ppf(0.975, 4) * math.sqrt(2.5 / 5)
    assert e.value == 3.0
    assert (e.low, e.high) == (pytest.approx(3 - half), pytest.approx(3 + half))
    assert e.n == 5 and e.confidence == 0.95
    assert e.cv == pytest.approx(math.sqrt(2.5) / 3)


def test_mean_single_round_is_unknown_not_zero() -> None:
    e = mean_estimate([42.0])
    assert e.value == 42.0 and e.n == 1 and e.cv is None
    assert (e.low, e.high) == (-math.inf, math.inf)
    assert decide_threshold(e, 1.0, HIGHER) is Decision.MET  # no credible miss, the estimate above
    assert decide_threshold(e, 1.0, HIGHER, strict=True) is Decision.INCONCLUSIVE
    assert decide_threshold(e, 50.0, HIGHER) is Decision.SUSPECT


def test_mean_zero_variance_is_degenerate() -> None:
    e = mean_estimate([0.1, 0.1, 0.1])
    assert e.low == e.value == e.high == 0.1 and e.cv == 0.0
    assert decide_threshold(e, 0.1, HIGHER) is Decision.MET  # thresholds are inclusive


def test_mean_two_rounds_uses_t_with_one_df() -> None:
    e = mean_estimate([9.0, 11.0])
    assert e.half_width == pytest.approx(sps.t.ppf(0.95, 1) * 1.0)


@pytest.mark.parametrize("n", [2, 5, 10])
def test_mean_interval_coverage(n: int) -> None:
    rng = np.random.default_rng(100 + n)
    samples = rng.normal(50.0, 2.0, size=(SIMS, n))
    low_miss = high_miss = 0
    for row in samples:
        e = mean_estimate(row)
        low_miss += e.low > 50.0
        high_miss += e.high < 50.0
    one_sided = (1 - DEFAULT_CONFIDENCE) / 2
    assert (low_miss + high_miss) / SIMS == pytest.approx(1 - DEFAULT_CONFIDENCE, abs=coverage_tolerance(0.1))
    assert low_miss / SIMS == pytest.approx(one_sided, abs=coverage_tolerance(one_sided))
    assert high_miss / SIMS == pytest.approx(one_sided, abs=coverage_tolerance(one_sided))


def test_mean_rejects_empty_and_bad_confidence() -> None:
    with pytest.raises(ValueError):
        mean_estimate([])
    with pytest.raises(ValueError):
        mean_estimate([1, 2], confidence=1.0)


# --- ratio intervals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_num", "cv_num", "n_den", "cv_den"),
    [(5, 0.03, 5, 0.03), (5, 0.10, 5, 0.02), (3, 0.05, 7, 0.05), (10, 0.01, 5, 0.08), (5, 0.3, 5, 0.2)],
)
def test_ratio_interval_coverage(n_num: int, cv_num: float, n_den: int, cv_den: float) -> None:
    rng = np.random.default_rng(n_num * 1000 + n_den)
    true_ratio = 1.2
    num = rng.normal(120.0, 120.0 * cv_num, size=(SIMS, n_num))
    den = rng.normal(100.0, 100.0 * cv_den, size=(SIMS, n_den))
    misses = 0
    for x, y in zip(num, den, strict=True):
        e = ratio_estimate(x, y)
        assert e.low <= e.value <= e.high
        misses += not e.low <= true_ratio <= e.high
    assert misses / SIMS == pytest.approx(1 - DEFAULT_CONFIDENCE, abs=coverage_tolerance(0.1))


def test_ratio_interval_with_two_rounds_each_is_conservative() -> None:
    """Welch df estimated from two rounds per side is often near 1: wider than nominal, never narrower."""
    rng = np.random.default_rng(22)
    num, den = rng.normal(120.0, 6.0, size=(SIMS, 2)), rng.normal(100.0, 5.0, size=(SIMS, 2))
    misses = sum(not e.low <= 1.2 <= e.high for e in map(ratio_estimate, num, den))
    assert misses / SIMS <= (1 - DEFAULT_CONFIDENCE) + coverage_tolerance(0.1)
    assert misses / SIMS >= 0.02


def test_ratio_zero_variance_both_sides_is_degenerate() -> None:
    e = ratio_estimate([110.0] * 5, [100.0] * 5)
    assert e.low == e.value == e.high == pytest.approx(1.1)


def test_ratio_zero_variance_one_side_uses_the_other_sides_df() -> None:
    e = ratio_estimate([100.0, 102.0, 98.0], [50.0] * 5, confidence=0.95)
    half = sps.t.ppf(0.975, 2) * 2.0 / math.sqrt(3) / 50.0  # exact: denominator has no error
    assert e.value == pytest.approx(2.0)
    assert (e.low, e.high) == (pytest.approx(2.0 - half), pytest.approx(2.0 + half))


def test_ratio_single_round_on_either_side_is_unknown() -> None:
    for num, den in (([1.0], [1.0, 1.1, 0.9]), ([1.0, 1.1, 0.9], [1.0]), ([2.0], [1.0])):
        e = ratio_estimate(num, den)
        assert not e.bounded and e.n == 1
    assert ratio_estimate([2.0], [1.0]).value == 2.0


def test_ratio_two_rounds_each() -> None:
    e = ratio_estimate([101.0, 99.0], [100.5, 99.5])
    assert e.bounded and e.low < 1.0 < e.high and e.n == 2


def test_ratio_denominator_near_or_at_zero() -> None:
    assert not ratio_estimate([1.0, 1.1, 0.9], [0.1, -0.1, 0.05]).bounded  # Fieller set unbounded
    e = ratio_estimate([1.0, 2.0], [0.0, 0.0])
    assert e.value == math.inf and not e.bounded
    assert math.isnan(ratio_estimate([0.0, 0.0], [0.0, 0.0]).value)


def test_ratio_interval_is_reciprocal_invariant() -> None:
    """Fieller with Welch df at the point estimate: CI(y/x) is exactly 1/CI(x/y)."""
    x, y = [103.0, 97.0, 105.0, 99.0, 101.0], [80.0, 84.0, 79.0, 90.0, 85.0, 83.0]
    a, b = ratio_estimate(x, y), ratio_estimate(y, x)
    assert (b.low, b.high) == (pytest.approx(1 / a.high), pytest.approx(1 / a.low))


def test_ratio_approaches_delta_method_for_precise_data() -> None:
    rng = np.random.default_rng(7)
    x, y = rng.normal(150, 1.5, 400), rng.normal(100, 1.0, 400)
    e = ratio_estimate(x, y)
    r = x.mean() / y.mean()
    se = r * math.sqrt(x.var(ddof=1) / 400 / x.mean() ** 2 + y.var(ddof=1) / 400 / y.mean() ** 2)
    z = sps.norm.ppf(0.95)
    assert e.low == pytest.approx(r - z * se, rel=1e-4)
    assert e.high == pytest.approx(r + z * se, rel=1e-4)


# --- decisions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "direction", "expected", "strict_expected"),
    [
        ((1.15, 1.2), HIGHER, Decision.MET, Decision.MET),
        ((1.1, 1.2), HIGHER, Decision.MET, Decision.MET),  # inclusive
        ((1.0, 1.2), HIGHER, Decision.MET, Decision.INCONCLUSIVE),  # the estimate on the threshold
        ((1.0, 1.15), HIGHER, Decision.SUSPECT, Decision.SUSPECT),  # the estimate below, not credibly
        ((0.9, 1.05), HIGHER, Decision.MISSED, Decision.MISSED),
        ((0.9, 1.05), LOWER, Decision.MET, Decision.MET),
        ((1.0, 1.2), LOWER, Decision.MET, Decision.INCONCLUSIVE),
        ((1.05, 1.2), LOWER, Decision.SUSPECT, Decision.SUSPECT),
        ((1.12, 1.2), LOWER, Decision.MISSED, Decision.MISSED),
        ((-math.inf, math.inf), HIGHER, Decision.MET, Decision.INCONCLUSIVE),
        ((-math.inf, math.inf), LOWER, Decision.MET, Decision.INCONCLUSIVE),
    ],
)
def test_decide_threshold(
    interval: tuple[float, float], direction: Direction, expected: Decision, strict_expected: Decision
) -> None:
    low, high = interval
    value = (low + high) / 2 if math.isfinite(low) else 1.1
    assert decide_threshold(est(value, low, high), 1.1, direction) is expected
    assert decide_threshold(est(value, low, high), 1.1, direction, strict=True) is strict_expected


@pytest.mark.parametrize(
    ("interval", "lo", "hi", "expected", "strict_expected"),
    [
        ((2.0, 2.5), 1.8, 3.0, Decision.MET, Decision.MET),
        ((1.7, 2.5), 1.8, 3.0, Decision.MET, Decision.INCONCLUSIVE),
        ((2.5, 3.2), 1.8, 3.0, Decision.MET, Decision.INCONCLUSIVE),
        ((2.9, 3.3), 1.8, 3.0, Decision.SUSPECT, Decision.SUSPECT),
        ((1.0, 1.7), 1.8, 3.0, Decision.MISSED, Decision.MISSED),
        ((3.1, 3.3), 1.8, 3.0, Decision.MISSED, Decision.MISSED),
        ((1.0, 4.0), 1.8, 3.0, Decision.MET, Decision.INCONCLUSIVE),
        ((70.0, 80.0), 70.0, None, Decision.MET, Decision.MET),
        ((60.0, 69.0), 70.0, None, Decision.MISSED, Decision.MISSED),
        ((60.0, 69.0), None, 70.0, Decision.MET, Decision.MET),
        ((60.0, 69.0), None, None, Decision.MET, Decision.MET),
    ],
)
def test_decide_range(
    interval: tuple[float, float], lo: float | None, hi: float | None, expected: Decision, strict_expected: Decision
) -> None:
    low, high = interval
    assert decide_range(est((low + high) / 2, low, high), lo, hi) is expected
    assert decide_range(est((low + high) / 2, low, high), lo, hi, strict=True) is strict_expected


def test_decide_range_rejects_empty_range() -> None:
    with pytest.raises(ValueError):
        decide_range(est(1, 0, 2), 3.0, 2.0)


BASE = [100.0, 101.0, 99.0, 100.5, 99.5]


def scaled(factor: float, samples: list[float] = BASE) -> list[float]:
    return [factor * s for s in samples]


def test_regression_higher_is_better() -> None:
    clear_drop = decide_regression(scaled(0.85), BASE, 0.05, HIGHER)
    assert clear_drop.decision is Decision.MISSED and not clear_drop.improved
    assert clear_drop.ratio.value == pytest.approx(0.85)
    assert clear_drop.current is not None and clear_drop.current.value == pytest.approx(85.0)
    same = decide_regression(list(reversed(BASE)), BASE, 0.05, HIGHER)
    assert same.decision is Decision.MET and not same.improved
    better = decide_regression(scaled(1.2), BASE, 0.05, HIGHER)
    assert better.decision is Decision.MET and better.improved
    borderline = decide_regression(scaled(0.95), BASE, 0.05, HIGHER)
    assert borderline.decision is Decision.MET  # the estimate on the bound: within (inclusive)
    assert decide_regression(scaled(0.95), BASE, 0.05, HIGHER, strict=True).decision is Decision.INCONCLUSIVE
    assert decide_regression(scaled(0.945), BASE, 0.05, HIGHER).decision is Decision.SUSPECT


def test_regression_lower_is_better() -> None:
    slower = decide_regression(scaled(1.2), BASE, 0.05, LOWER)
    assert slower.decision is Decision.MISSED and not slower.improved
    faster = decide_regression(scaled(0.8), BASE, 0.05, LOWER)
    assert faster.decision is Decision.MET and faster.improved
    assert (faster.regression_bound, faster.improvement_bound) == (1.05, 0.95)


def test_regression_edge_cases() -> None:
    assert decide_regression([95.0], BASE, 0.05, HIGHER).decision is Decision.MET  # one round: no credible miss
    exact = decide_regression([50.0, 50.0], [100.0, 100.0], 0.5, HIGHER)
    assert exact.decision is Decision.MET and not exact.improved  # degenerate at the bound: inclusive
    at_improvement_bound = decide_regression([150.0] * 3, [100.0] * 3, 0.5, HIGHER)
    assert not at_improvement_bound.improved  # an improvement must exceed the tolerance
    with pytest.raises(ValueError):
        decide_regression(BASE, BASE, 1.0, HIGHER)


def test_classify_ratio_from_an_estimate() -> None:
    result = classify_ratio(est(0.8, 0.75, 0.85), 0.05, HIGHER)
    assert isinstance(result, RegressionResult)
    assert result.decision is Decision.MISSED and result.current is None
    assert result.regression_bound == 0.95


# --- more rounds? --------------------------------------------------------------------------------


def test_rounds_to_resolve_known_case() -> None:
    # Need t(n-1; 0.95) * 0.1 * 1.2 / sqrt(n) < 0.1: n=5 gives 0.114, n=6 gives 0.0987.
    assert rounds_to_resolve(1.2, 1.1, 0.1) == 6
    assert rounds_to_resolve(1.2, 1.2, 0.1) is None  # on the bound
    assert rounds_to_resolve(1.2, 1.1, 0.0) == 2


def test_rounds_to_resolve_with_a_fixed_noisy_baseline() -> None:
    # Baseline alone: t(4) * 0.08 / sqrt(5) * 0.9 = 0.069 > 0.05 gap: no round count can help.
    assert rounds_to_resolve(0.9, 0.95, 0.01, fixed_n=5, fixed_cv=0.08) is None
    n = rounds_to_resolve(0.9, 0.95, 0.03, fixed_n=5, fixed_cv=0.02)
    assert n is not None and 2 <= n <= 10


def test_advise_rounds_messages() -> None:
    e = Estimate(1.13, 1.085, 1.175, 5, DEFAULT_CONFIDENCE, cv=0.041)
    advice = advise_rounds(e, [1.1], Decision.INCONCLUSIVE, max_rounds=20)
    assert advice.helps and advice.rounds_needed == rounds_to_resolve(1.13, 1.1, 0.041) == 9
    assert advice.reason == f"CV 4.1%; ~{advice.rounds_needed} rounds would resolve it"
    capped = advise_rounds(e, [1.1], Decision.INCONCLUSIVE, max_rounds=8)
    assert not capped.helps and capped.reason == "CV 4.1%; ~9 rounds would resolve it, more than max_rounds=8"
    assert not advise_rounds(e, [1.1], Decision.MET).helps
    assert advise_rounds(Estimate.unknown(1.0, 1, 0.9), [1.1], Decision.INCONCLUSIVE).helps
    on_bound = advise_rounds(Estimate(1.1, 1.0, 1.2, 5, 0.9, cv=0.05), [None, 1.1], Decision.INCONCLUSIVE)
    assert not on_bound.helps and on_bound.rounds_needed is None


def test_advise_regression_uses_the_baseline_as_fixed() -> None:
    rng = np.random.default_rng(3)
    base = list(rng.normal(100, 3, 5))
    cur = list(rng.normal(92, 3, 5))
    result = decide_regression(cur, base, 0.05, HIGHER)
    advice = advise_regression(result)
    if not result.decision.settled:
        assert advice.rounds_needed is None or advice.rounds_needed > 5
    else:
        assert not advice.helps
    with pytest.raises(ValueError):
        advise_regression(classify_ratio(est(1, 0.9, 1.1), 0.05, HIGHER))


def test_advise_regression_single_round_baseline() -> None:
    result = decide_regression([93.0, 93.5, 92.5, 93.2, 92.8], [100.0], 0.05, HIGHER)
    assert result.decision is Decision.SUSPECT
    advice = advise_regression(result)
    assert not advice.helps and "baseline's spread is unknown" in advice.reason


def test_advise_regression_hopeless_baseline() -> None:
    noisy_base = [100.0, 92.0, 108.0, 95.0, 105.0]
    result = decide_regression([93.0, 93.5, 92.5, 93.2, 92.8], noisy_base, 0.05, HIGHER)
    assert result.decision is Decision.SUSPECT
    advice = advise_regression(result)
    assert not advice.helps and "baseline" in advice.reason
