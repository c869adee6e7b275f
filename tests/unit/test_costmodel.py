"""Unit tests of pytest_specperf.report.costmodel, hand-checked against the story in docs/story.md."""

import math

import numpy as np
import pytest

from pytest_specperf.report.costmodel import (
    FitStatus,
    analyze,
    break_even_accept_length,
    chain_acceptance_rate,
    cycle_time,
    expected_accept_length,
    fit_verify_cost,
    fit_verify_costs,
    group_by_key,
    headroom,
    implied_acceptance,
    propagate,
    speedup_from_throughput,
    speedup_from_tpot,
)
from pytest_specperf.verdict.stats import Estimate

# docs/story.md: Kimi-K2.5 on 8 GPUs, EAGLE-3.
REFERENCE_TOK_S = 62.9  # plain decoding without NCCL tuning
PHANTOM_TPOT_MS = 11.1  # the remembered 90 tok/s, measured with NCCL tuning
CYCLE_5STEP_MS = 29.9  # verify 28.7 + drafting 0.96
TAU_5STEP = 2.1
VERIFY_6_TOKENS_MS, VERIFY_3_TOKENS_MS = 28.7, 25.6
DRAFT_STEP_MS = 0.96 / 5


def interval(value: float, low: float, high: float, n: int = 5, confidence: float = 0.9) -> Estimate:
    return Estimate(value, low, high, n, confidence)


# --- §3 by hand ----------------------------------------------------------------------------------


def ms_per_token(tok_s: float) -> float:
    """At concurrency 1 one stream gets every token: TPOT = 1000 / throughput."""
    return 1000.0 / tok_s


def test_reference_tpot_from_throughput() -> None:
    assert ms_per_token(REFERENCE_TOK_S) == pytest.approx(15.9, abs=0.01)


def test_break_even_accept_length_real_and_phantom() -> None:
    ref_tpot = ms_per_token(REFERENCE_TOK_S)
    real = break_even_accept_length(CYCLE_5STEP_MS, ref_tpot)
    phantom = break_even_accept_length(CYCLE_5STEP_MS, PHANTOM_TPOT_MS)
    assert real.value == pytest.approx(1.88, abs=0.005)
    assert phantom.value == pytest.approx(2.69, abs=0.005)
    # Against the phantom, 2.1 looked like a loss; against the real reference it has headroom.
    assert headroom(TAU_5STEP, phantom).value == pytest.approx(-0.59, abs=0.01)
    assert headroom(TAU_5STEP, real).value == pytest.approx(0.22, abs=0.01)


def test_speedup_three_ways_agree_roughly() -> None:
    ref_tpot = ms_per_token(REFERENCE_TOK_S)
    by_cycle = ref_tpot / (CYCLE_5STEP_MS / TAU_5STEP)  # the TPOT speedup when the cycle comes from a profile
    assert by_cycle == pytest.approx(TAU_5STEP / break_even_accept_length(CYCLE_5STEP_MS, ref_tpot).value)
    assert by_cycle == pytest.approx(1.12, abs=0.01)
    assert speedup_from_throughput(71.0, REFERENCE_TOK_S).value == pytest.approx(1.13, abs=0.01)
    assert speedup_from_throughput(75.9, REFERENCE_TOK_S).value == pytest.approx(1.21, abs=0.01)  # "+20%"
    assert speedup_from_tpot(ref_tpot, 1000 / 71.0).value == pytest.approx(71.0 / REFERENCE_TOK_S)


def test_five_step_cycle_is_consistent_with_its_throughput() -> None:
    # 2.1 tokens per 29.9 ms cycle is ~70 tok/s; the story reports ~71.
    assert cycle_time(TAU_5STEP, ms_per_token(71.0)).value == pytest.approx(CYCLE_5STEP_MS, rel=0.02)


def test_two_step_cycle_is_about_26_ms() -> None:
    fit = fit_verify_cost([(6, VERIFY_6_TOKENS_MS), (3, VERIFY_3_TOKENS_MS)])
    verify_3 = fit.predict(3)
    assert verify_3 is not None
    assert verify_3 + 2 * DRAFT_STEP_MS == pytest.approx(26.0, abs=0.05)
    # From throughput: accept length 1.93-2.30 at 75.9 tok/s brackets the same cycle.
    cycle = cycle_time(interval(2.0, 1.93, 2.30), ms_per_token(75.9))
    assert cycle.low <= 26.0 <= cycle.high
    assert cycle.low == pytest.approx(1.93 * 1000 / 75.9)


def test_verify_fit_two_points_matches_story() -> None:
    fit = fit_verify_cost([(6, VERIFY_6_TOKENS_MS), (3, VERIFY_3_TOKENS_MS)])
    assert fit.status is FitStatus.EXACT
    assert fit.per_token_ms is not None and fit.fixed_ms is not None
    assert fit.per_token_ms.value == pytest.approx(1.03, abs=0.005)
    assert fit.fixed_ms.value == pytest.approx(22.5, abs=0.01)
    share = fit.fixed_share(CYCLE_5STEP_MS)
    assert share is not None and share.value == pytest.approx(0.75, abs=0.005)
    # Exact through two points: no confidence interval, and it says so.
    assert not fit.fixed_ms.bounded and not fit.per_token_ms.bounded and not share.bounded
    assert "no confidence interval" in fit.note
    assert fit.point_fixed_shares == (pytest.approx(22.5 / 25.6), pytest.approx(22.5 / 28.7))
    # The naive "linear in tokens" hypothesis (4.78 ms/token, 3 tokens -> 14.3 ms) was far off.
    naive_per_token = VERIFY_6_TOKENS_MS / 6
    assert round(naive_per_token, 2) == 4.78 and round(3 * naive_per_token, 1) == 14.3
    assert fit.per_token_ms.value < naive_per_token / 4


# --- verify fit ----------------------------------------------------------------------------------


@pytest.mark.parametrize("points", [[], [(6, 28.7)], [(6, 28.7), (6, 28.9), (6, 28.5)]])
def test_verify_fit_not_enough_points(points: list[tuple[float, float]]) -> None:
    fit = fit_verify_cost(points)
    assert fit.status is FitStatus.NOT_ENOUGH_POINTS
    assert fit.fixed_ms is None and fit.per_token_ms is None
    assert fit.predict(4) is None and fit.fixed_share(30.0) is None and fit.point_fixed_shares == ()
    assert fit.note.startswith("not enough points")


def test_verify_fit_three_collinear_points_has_degenerate_intervals() -> None:
    fit = fit_verify_cost([(2, 24.5), (4, 26.5), (6, 28.5)])
    assert fit.status is FitStatus.FITTED
    assert fit.fixed_ms is not None and fit.per_token_ms is not None
    assert fit.fixed_ms.value == pytest.approx(22.5) and fit.per_token_ms.value == pytest.approx(1.0)
    assert fit.fixed_ms.half_width == pytest.approx(0.0, abs=1e-9)


def test_verify_fit_with_repeats_at_two_counts_is_a_real_fit() -> None:
    fit = fit_verify_cost([(3, 25.5), (3, 25.7), (6, 28.7)])
    assert fit.status is FitStatus.FITTED and fit.fixed_ms is not None
    assert fit.fixed_ms.bounded and fit.fixed_ms.low < fit.fixed_ms.value < fit.fixed_ms.high


def test_verify_fit_interval_coverage() -> None:
    rng = np.random.default_rng(11)
    ns = np.array([2.0, 3.0, 4.0, 6.0])
    sims, misses = 2000, 0
    for _ in range(sims):
        fit = fit_verify_cost(zip(ns, 22.5 + 1.0 * ns + rng.normal(0, 0.3, ns.size), strict=True))
        assert fit.per_token_ms is not None
        misses += not fit.per_token_ms.low <= 1.0 <= fit.per_token_ms.high
    assert misses / sims == pytest.approx(0.10, abs=4 * math.sqrt(0.09 / sims))


def test_grouping_by_opaque_key() -> None:
    eagle = ("kimi", "eagle3-draft", 1, "EAGLE3", ("--tp-size", "8"))
    other = ("kimi", "eagle3-draft", 1, "EAGLE3", ("--tp-size", "8", "--enable-dp-attention"))
    entries = [(eagle, 6, 28.7), (other, 4, 20.0), (eagle, 3, 25.6)]
    groups = group_by_key(entries)
    assert groups == {eagle: ((3.0, 25.6), (6.0, 28.7)), other: ((4.0, 20.0),)}
    fits = fit_verify_costs(entries)
    assert fits[eagle].status is FitStatus.EXACT
    assert fits[other].status is FitStatus.NOT_ENOUGH_POINTS


# --- acceptance ----------------------------------------------------------------------------------


def test_implied_acceptance_ends_and_roundtrip() -> None:
    zero, one = implied_acceptance(1.0, 5), implied_acceptance(6.0, 5)
    assert zero.alpha is not None and zero.alpha.value == 0.0
    assert one.alpha is not None and one.alpha.value == 1.0
    for k in (1, 2, 5, 7):
        for alpha in (0.05, 0.3, 0.5349, 0.9, 0.999):
            got = implied_acceptance(expected_accept_length(alpha, k), k).alpha
            assert got is not None and got.value == pytest.approx(alpha, abs=1e-9)
    story = implied_acceptance(TAU_5STEP, 5).alpha
    assert story is not None and story.value == pytest.approx(0.535, abs=0.001)
    # Closed form check: (1 - a^(k+1)) / (1 - a) at that alpha.
    a = story.value
    assert (1 - a**6) / (1 - a) == pytest.approx(TAU_5STEP)


def test_implied_acceptance_out_of_range_or_tree() -> None:
    for tau in (0.9, 6.5):
        result = implied_acceptance(tau, 5)
        assert result.alpha is None and result.reason is not None and "outside [1, 6]" in result.reason
    tree = implied_acceptance(2.5, 4, topk=4)
    assert tree.alpha is None and tree.reason is not None and "topk" in tree.reason
    with pytest.raises(ValueError):
        implied_acceptance(2.0, 0)


def test_implied_acceptance_interval() -> None:
    result = implied_acceptance(interval(2.1, 1.93, 2.30), 5).alpha
    assert result is not None
    low, high = implied_acceptance(1.93, 5).alpha, implied_acceptance(2.30, 5).alpha
    assert low is not None and high is not None
    assert (result.low, result.high) == (pytest.approx(low.value), pytest.approx(high.value))
    clamped = implied_acceptance(interval(1.1, 0.8, 1.4), 5).alpha
    assert clamped is not None and clamped.low == 0.0
    unknown = implied_acceptance(Estimate.unknown(2.1, 1, 0.9), 5).alpha
    assert unknown is not None and (unknown.low, unknown.high) == (0.0, 1.0)


def test_chain_acceptance_rate() -> None:
    assert chain_acceptance_rate(TAU_5STEP, 5).value == pytest.approx(0.22)
    assert chain_acceptance_rate(1.0, 3).value == 0.0
    rate = chain_acceptance_rate(interval(2.0, 1.93, 2.30), 2)
    assert (rate.low, rate.high) == (pytest.approx(0.465), pytest.approx(0.65))


# --- interval propagation ------------------------------------------------------------------------


def test_propagation_labels_and_bounds() -> None:
    tau, tpot = interval(2.0, 1.8, 2.2), interval(14.0, 13.0, 15.0, n=4)
    cycle = cycle_time(tau, tpot)
    assert (cycle.value, cycle.low, cycle.high) == (28.0, pytest.approx(23.4), pytest.approx(33.0))
    assert cycle.confidence == pytest.approx(0.8)  # Bonferroni: 1 - 0.1 - 0.1
    assert cycle.n == 4
    exact_only = cycle_time(2.0, 14.0)
    assert exact_only.confidence == 1.0 and exact_only.n == 0 and exact_only.half_width == 0.0
    one_exact = cycle_time(tau, 14.0)
    assert one_exact.confidence == pytest.approx(0.9) and one_exact.n == 5


def test_propagation_unknown_and_divisor_through_zero() -> None:
    assert not cycle_time(Estimate.unknown(2.0, 1, 0.9), 14.0).bounded
    assert not speedup_from_throughput(70.0, interval(5.0, -1.0, 11.0)).bounded
    assert not speedup_from_throughput(70.0, interval(5.0, 0.0, 10.0)).bounded
    with pytest.raises(ValueError):
        break_even_accept_length(29.9, -15.9)
    assert propagate(lambda x, y: x - y, 3.0, interval(1.0, 0.5, 1.5)).low == pytest.approx(1.5)


def test_analyze_story_and_single_use_of_tau() -> None:
    ref_tpot = ms_per_token(REFERENCE_TOK_S)
    model = analyze(
        TAU_5STEP,
        CYCLE_5STEP_MS / TAU_5STEP,
        ref_tpot,
        throughput=71.0,
        reference_throughput=REFERENCE_TOK_S,
        draft_steps=5,
    )
    assert model.cycle_ms.value == pytest.approx(CYCLE_5STEP_MS)
    assert model.break_even_accept_length.value == pytest.approx(1.88, abs=0.005)
    assert model.headroom.value == pytest.approx(TAU_5STEP - model.break_even_accept_length.value)
    assert model.speedup_tpot.value == pytest.approx(1.12, abs=0.01)
    assert model.speedup_throughput is not None and model.speedup_throughput.value > 1.1
    assert model.implied_acceptance is not None and model.implied_acceptance.alpha is not None
    assert model.acceptance_rate is not None and model.acceptance_rate.value == pytest.approx(0.22)

    tau, tpot = interval(2.1, 2.0, 2.2), interval(14.2, 14.0, 14.4)
    with_ci = analyze(tau, tpot, 15.9)
    naive = headroom(tau, with_ci.break_even_accept_length)
    assert with_ci.headroom.low <= with_ci.headroom.value <= with_ci.headroom.high
    assert with_ci.headroom.half_width < naive.half_width  # τ counted once, not twice
    assert analyze(2.5, 12.0, 15.9, draft_steps=4, topk=4).acceptance_rate is None
