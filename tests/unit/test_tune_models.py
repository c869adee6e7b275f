"""The pure models of `specperf tune`: per-position acceptance and the cycle-cost fit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_specperf.tune.acceptance import (
    AcceptanceObservation,
    _neg_log_posterior,
    fit_acceptance,
    histogram_from_accept_length,
    histogram_from_counters,
    tokens_per_verify,
)
from pytest_specperf.tune.cost import CyclePoint, fit_cycle_cost, terms_for
from pytest_specperf.tune.observe import LevelData
from pytest_specperf.tune.space import Shape

RATES = (0.64, 0.55, 0.30, 0.22, 0.20, 0.18)


def chain_histogram(rates: tuple[float, ...], steps: float, width: float = 1.0, gain: float = 1.0) -> tuple[float, ...]:
    """Expected verify steps by accepted drafts for conditional `rates` on a tree of `width`."""
    r = [1.0 - (1.0 - q) ** (width**gain) for q in rates]
    probs, reach = [], 1.0
    for rate in r:
        probs.append(reach * (1.0 - rate))
        reach *= rate
    return tuple(steps * p for p in [*probs, reach])


def test_the_gradient_is_the_derivative_of_the_posterior() -> None:
    data = [
        ((np.array([30.0, 14.0, 5.0]), np.array([20.0, 16.0, 9.0])), 0.0),
        ((np.array([40.0, 25.0]), np.array([10.0, 15.0])), math.log(2.5)),
    ]
    theta = np.array([0.3, -0.2, 0.5, 0.1])
    _, grad = _neg_log_posterior(theta, data, 3)
    numeric = []
    for i in range(len(theta)):
        e = np.zeros(len(theta))
        e[i] = 1e-6
        numeric.append((_neg_log_posterior(theta + e, data, 3)[0] - _neg_log_posterior(theta - e, data, 3)[0]) / 2e-6)
    assert grad == pytest.approx(numeric, rel=1e-5, abs=1e-6)


def test_a_deep_chain_gives_every_positions_acceptance() -> None:
    fit = fit_acceptance([AcceptanceObservation(6, 1.0, chain_histogram(RATES, 5000))], 6)
    assert fit.rates[:3] == pytest.approx(RATES[:3], abs=0.01)
    for true, (q, low, high) in zip(RATES, fit.rate_intervals(), strict=True):
        assert low < true < high and low < q < high  # deep positions are reached rarely: wider, but right
    # tokens per verify of a shallower chain follow from the same rates
    expected = 1 + 0.64 + 0.64 * 0.55
    assert fit.tokens_per_verify(2, 1.0) == pytest.approx(expected, abs=0.01)


def test_a_tree_teaches_the_gain_of_its_width() -> None:
    """Siblings that are alike (gain 0.6): a chain alone would overrate the tree, chain + tree get it right."""
    chain = AcceptanceObservation(6, 1.0, chain_histogram(RATES, 4000))
    tree = AcceptanceObservation(3, 4.0, chain_histogram(RATES[:3], 4000, width=4.0, gain=0.6))
    fit = fit_acceptance([chain, tree], 6)
    assert fit.gain == pytest.approx(0.6, abs=0.05)
    r = [1 - (1 - q) ** (4**0.6) for q in RATES[:3]]
    truth = 1 + r[0] + r[0] * r[1] + r[0] * r[1] * r[2]
    assert fit.tokens_per_verify(3, 4.0) == pytest.approx(truth, abs=0.02)
    alone = fit_acceptance([chain], 6)
    assert alone.tokens_per_verify(3, 4.0) > truth + 0.1  # independence overrates alike siblings


def test_positions_nobody_reached_keep_a_wide_prior() -> None:
    fit = fit_acceptance([AcceptanceObservation(2, 1.0, chain_histogram(RATES[:2], 3000))], 6)
    intervals = fit.rate_intervals()
    assert intervals[0][2] - intervals[0][1] < 0.05  # measured
    assert intervals[4][2] - intervals[4][1] > 0.8  # never reached: almost anything
    draws = tokens_per_verify(fit.sample(np.random.default_rng(0), 400), 6, 6, 1.0)
    assert np.percentile(draws, 95) - np.percentile(draws, 5) > 0.3


def test_counters_and_accept_lengths_become_histograms() -> None:
    # vLLM: 10 steps; 6 accepted position 1, 3 position 2, 1 position 3
    assert histogram_from_counters(10, [6, 3, 1]) == (4, 3, 2, 1)
    hist = histogram_from_accept_length(2.2, 3, 100.0)
    assert sum(hist) == pytest.approx(100.0)
    assert sum(a * n for a, n in enumerate(hist)) / 100.0 + 1 == pytest.approx(2.2, abs=1e-6)


def test_cost_terms_are_the_ones_the_space_can_tell_apart() -> None:
    chains = [Shape(s, 1, s + 1) for s in range(1, 7)]
    assert terms_for(chains) == ("fixed", "per draft step")
    trees = [*chains, Shape(3, 4, 10), Shape(2, 2, 3)]
    assert terms_for(trees) == ("fixed", "per draft token", "per draft step")
    assert terms_for([Shape(3, 4, n) for n in range(2, 12)]) == ("fixed", "per draft token")


def cycle(shape: Shape) -> float:
    return 22.7 + 1.0333 * shape.draft_tokens + 0.192 * shape.steps


def test_the_cost_fit_recovers_fixed_and_per_token_costs() -> None:
    shapes = [Shape(6, 1, 7), Shape(6, 4, 25), Shape(1, 1, 2), Shape(3, 4, 10)]
    fit = fit_cycle_cost([CyclePoint(s, cycle(s), 1e-8) for s in shapes], terms_for(shapes), 16.0)
    fixed, per_token, per_step = (fit.coefficient(t) for t in fit.terms)
    assert fixed is not None and per_token is not None and per_step is not None
    assert fixed[0] == pytest.approx(22.7, abs=0.01) and per_token[0] == pytest.approx(1.0333, abs=1e-3)
    assert per_step[0] == pytest.approx(0.192, abs=1e-3)
    assert fit.predict(Shape(2, 1, 3)) == pytest.approx(cycle(Shape(2, 1, 3)), abs=0.01)


def test_too_few_configs_give_wide_intervals_not_a_guess() -> None:
    shapes = [Shape(6, 1, 7), Shape(1, 1, 2)]  # two chains cannot separate draft tokens from steps
    terms = ("fixed", "per draft token", "per draft step")
    fit = fit_cycle_cost([CyclePoint(s, cycle(s), 4e-4) for s in shapes], terms, 16.0)
    assert fit.sd(Shape(2, 1, 3)) < 2.0  # on the line through the two chains: known
    assert fit.sd(Shape(2, 4, 9)) > 10.0  # off it: the data say nothing


def test_points_that_scatter_more_than_their_noise_widen_the_fit() -> None:
    shapes = [Shape(s, 1, s + 1) for s in range(1, 7)]
    wobble = [0.0, 3.0, -3.0, 3.0, -3.0, 0.0]
    calm = fit_cycle_cost([CyclePoint(s, cycle(s), 1e-4) for s in shapes], terms_for(shapes), 16.0)
    noisy = fit_cycle_cost(
        [CyclePoint(s, cycle(s) + w, 1e-4) for s, w in zip(shapes, wobble, strict=True)], terms_for(shapes), 16.0
    )
    assert noisy.misfit > 10 and noisy.sd(Shape(4, 1, 5)) > 5 * calm.sd(Shape(4, 1, 5))


def test_the_models_read_the_median_round() -> None:
    """One round at a third of the speed (a busy machine) moves neither the level nor its variance much."""
    verify = (60.0,) * 4
    steady = LevelData((100.0, 101.0, 99.0, 100.5), (140.0, 141.2, 138.8, 140.6), verify, 20.0, 140.0, 128.0)
    disturbed = LevelData((100.0, 101.0, 33.0, 100.5), (140.0, 141.2, 380.0, 140.6), verify, 20.0, 140.0, 128.0)
    assert disturbed.level == pytest.approx(steady.level, rel=0.01)
    assert disturbed.cycle_at(20.0) == pytest.approx(steady.cycle_at(20.0), rel=0.01)
    assert disturbed.level_variance < 4 * steady.level_variance
    assert disturbed.mean_throughput < 0.85 * steady.mean_throughput  # the plugin's mean does move


def test_a_late_stream_keeps_its_cycle() -> None:
    """An answer that arrives all at once (the API server starved of CPU) has a huge TTFT and a tiny
    decode time, but its E2E is right: with the objective's TTFT, its cycle is what it was."""
    on_time = LevelData((100.0, 100.0), (140.0, 140.0), (60.0, 60.0), 20.0, 140.0, 128.0)
    late = LevelData((100.0, 100.0), (140.0, 140.0), (60.0, 60.0), 138.0, 140.0, 128.0)
    assert late.cycle_at(20.0) == on_time.cycle_at(20.0) == pytest.approx(2.0)
    assert late.mean_cycle_ms == pytest.approx(2.0 / 60.0)  # its own TTFT would make it 60 times shorter
