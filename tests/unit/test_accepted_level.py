"""The accepted level on the series that broke the old one: each numbered cause of a red night without
cause, replayed through `specperf backtest`'s replay (the verdict engine a test runs) on seeded or
public series. Pure: no process, no socket."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from pytest_specperf.verdict.backtest import Row, read_series, replay
from pytest_specperf.verdict.history import reject_outliers
from pytest_specperf.verdict.nightly import PastRun, Tolerance, judge_night
from pytest_specperf.verdict.stats import Decision, Direction
from pytest_specperf.verdict.verdicts import Verdict

DATA = Path(__file__).resolve().parent.parent / "data" / "real-series"
TOLERANCE = Tolerance(0.05)


def rows(values: list[float], updates: tuple[int, ...] = ()) -> list[Row]:
    return [Row(i, (v,), update=i in updates) for i, v in enumerate(values)]


def noisy(n: int, sd: float, seed: int, level: float = 100.0) -> list[float]:
    rng = random.Random(seed)
    return [level * math.exp(rng.gauss(0.0, sd)) for _ in range(n)]


def test_a_mixed_runner_pool_does_not_ratchet_the_level() -> None:
    """Cause 1: a key whose starts land on a slow pool (-20%) one night in three. Counting only the runs
    that came out well climbed the level to the fast pool, and every slow night became a REGRESSION;
    the spread the gate uses must hold both pools."""
    rng = random.Random(7)
    values = [100.0 * (0.8 if rng.random() < 1 / 3 else 1.0) * math.exp(rng.gauss(0.0, 0.01)) for _ in range(80)]
    result = replay(rows(values), TOLERANCE)
    red = [n.row.index for n in result.nights if n.outcome is Verdict.REGRESSION]
    assert red == [] or red[-1] < 15, red  # the first slow nights may be flagged; none once both pools were seen
    last = result.nights[-1].verdict
    assert last is not None and last.comparison is not None and last.comparison.run_cv > 0.05


def test_losing_an_improvement_is_not_a_regression() -> None:
    """Cause 2: 15 nights at +15%, then back to the accepted level: IMPROVED while it lasts, and no
    REGRESSION when it goes (the level is the one the team accepted)."""
    values = noisy(20, 0.01, seed=3) + [v * 1.15 for v in noisy(15, 0.01, seed=4)] + noisy(15, 0.01, seed=5)
    result = replay(rows(values), TOLERANCE)
    outcomes = [n.outcome for n in result.nights]
    assert Verdict.REGRESSION not in outcomes
    assert outcomes[22:35].count(Verdict.IMPROVED) >= 10
    back = result.nights[40].verdict
    assert back is not None and back.back_since is not None


def test_an_unacknowledged_regression_stays_red_and_names_the_same_run() -> None:
    """Causes 3 and 6: a -12% step at night 15, never acknowledged. Every night after it is a REGRESSION
    "since run 15", for longer than the history keeps nights, and no night starts a new segment."""
    values = noisy(15, 0.006, seed=11) + [v * 0.88 for v in noisy(100, 0.006, seed=12)]
    result = replay(rows(values), TOLERANCE, history=30)
    after = result.nights[15:]
    assert all(n.outcome is Verdict.REGRESSION for n in after), [n.outcome.value for n in after]
    assert {n.change_point for n in after} == {15}
    assert all(n.outcome is not Verdict.NEW for n in result.nights[1:])


@pytest.mark.slow
def test_tigerbeetles_step_unattended_is_red_since_run_15_until_the_key_moves_again() -> None:
    _, series, _ = read_series(DATA / "tigerbeetle_load_accepted.csv", value="load_accepted_tx_per_s")
    result = replay(series, TOLERANCE)
    nights = {n.row.index: n for n in result.nights}
    assert nights[15].outcome is Verdict.REGRESSION
    red = [n for i, n in nights.items() if 15 <= i < 61 and n.outcome is Verdict.REGRESSION]
    assert len(red) == 46 and {n.change_point for n in red} == {15}
    assert all(n.outcome is not Verdict.NEW for n in result.nights[1:])


@pytest.mark.parametrize("runs", [10, 30])
def test_a_clean_history_keeps_its_runs(runs: int) -> None:
    """Cause 4: a per-run test at a fixed quantile repeated over k runs rejected a run from 9.8% of clean
    10-run and 28.7% of clean 30-run histories; with the Bonferroni bound at most 1%."""
    rng = random.Random(runs)
    trials = 2000
    lost = sum(bool(reject_outliers([rng.gauss(0.0, 0.02) for _ in range(runs)])) for _ in range(trials))
    assert lost <= 0.01 * trials


def test_an_improvement_does_not_widen_the_interval() -> None:
    """Cause 5: after TigerBeetle's +16% at run 71 (unacknowledged), the level and its spread stay those of
    the runs before it: tonight's interval is as narrow as the key is quiet, not +-20-50%."""
    _, series, _ = read_series(DATA / "tigerbeetle_load_accepted.csv", value="load_accepted_tx_per_s")
    result = replay(series[:95], TOLERANCE)
    for night in result.nights[75:95]:
        assert night.verdict is not None and night.verdict.comparison is not None
        ratio = night.verdict.comparison.ratio
        assert ratio.high / ratio.low < 1.06, (night.row.index, ratio)


def test_a_regression_that_holds_on_its_runs_together_is_red_every_night() -> None:
    """-7% on a quiet key: single nights are often only SUSPECT; once the step test sees the change, the
    change's runs together are credibly beyond the tolerance, and each night is a REGRESSION since it."""
    values = noisy(30, 0.01, seed=21) + [v * 0.93 for v in noisy(20, 0.01, seed=22)]
    result = replay(rows(values), TOLERANCE)
    tail = result.nights[40:]
    assert all(n.outcome is Verdict.REGRESSION for n in tail), [n.outcome.value for n in tail]
    assert {n.change_point for n in tail} == {30}


def test_lower_is_better_mirrors_every_rule() -> None:
    values = noisy(20, 0.01, seed=31) + [v * 1.12 for v in noisy(10, 0.01, seed=32)]
    result = replay(rows(values), Tolerance(0.05, Direction.LOWER_IS_BETTER))
    assert all(n.outcome is Verdict.REGRESSION for n in result.nights[20:])
    assert {n.change_point for n in result.nights[21:]} == {20}


def test_a_regression_needs_the_keys_own_spread() -> None:
    """With fewer than three runs the spread is the configured prior: beyond the tolerance is SUSPECT."""
    verdict = judge_night([[80.0, 81.0, 79.0]], [PastRun((100.0, 101.0, 99.0))], TOLERANCE)
    assert verdict.decision is Decision.SUSPECT


def test_a_young_regression_is_judged_by_its_nights_not_its_starts() -> None:
    """A -8% change two nights old, each of its nights measured on two server starts (a night at start SD
    2%): the second start of its first night came out near the tolerance (-5.3%), so start by start the
    change began a night later, that night's first start joined the level, and tonight was only SUSPECT.
    Taken by night, both nights were beyond the tolerance: out of the level, and tonight is a REGRESSION
    since the change's first run."""
    level = (1.002, 1.028, 0.98, 1.022, 0.994, 0.994, 1.042, 1.003, 0.999, 1.016)
    rounds = (0.99, 1.01, 1.0, 1.005, 0.995)
    history = [PastRun(tuple(v * f for f in rounds), night=f"n{i}") for i, v in enumerate(level)]
    changed = {"a": (0.943, 0.955), "b": (0.932, 0.901)}
    history += [PastRun(tuple(v * f for f in rounds), night=night) for night, starts in changed.items() for v in starts]
    verdict = judge_night([[v * f for f in rounds] for v in (0.913, 0.911)], history, TOLERANCE)
    assert verdict.level is not None and verdict.level.change_runs == (10, 11, 12, 13)
    assert verdict.decision is Decision.MISSED
    assert verdict.since is not None and verdict.since.index == 10


@pytest.mark.parametrize(("past_nights", "expected"), [(("a", "b"), Decision.MISSED), (("a",), Decision.SUSPECT)])
def test_a_young_change_of_two_nights_is_judged_with_its_runs(past_nights: tuple[str, ...], expected: Decision) -> None:
    """A -7% change too young for the step test: tonight alone lands near the tolerance (SUSPECT), but
    taken with the change's past runs it is clearly beyond it. Two past nights are enough to judge the
    change on its runs together (REGRESSION since its first run); one past night is not, since one odd
    night may be the node, not the code."""
    level = (1.001, 1.01, 0.99, 1.008, 1.02, 1.009, 1.034, 0.981, 1.001, 0.984)
    rounds = (0.99, 1.01, 1.0, 1.005, 0.995)
    history = [PastRun(tuple(v * f for f in rounds), night=f"n{i}") for i, v in enumerate(level)]
    changed = {"a": (0.904, 0.953), "b": (0.924, 0.928)}
    history += [PastRun(tuple(v * f for f in rounds), night=night) for night in past_nights for v in changed[night]]
    verdict = judge_night([[v * f for f in rounds] for v in (0.93, 0.965)], history, TOLERANCE)
    assert verdict.decision is expected
    assert verdict.by_change is (expected is Decision.MISSED)
    if expected is Decision.MISSED:
        assert verdict.since is not None and verdict.since.index == 10


def test_a_change_probably_beyond_the_tolerance_and_certainly_a_change_is_a_regression() -> None:
    """-7% tonight on two server starts against a key that spreads 1.6% from run to run: certainly a
    change (one-sided 99%) and beyond the 5% tolerance at one-sided 90%, not at 95%. Asking 95% of the
    tolerance question left a -8% change unflagged after three nights in 27.5% of simulated keys
    (benchmarks/verdict_nights.py); the change question already holds the false alarms."""
    level = (1.001, 1.01, 0.99, 1.008, 1.02, 1.009, 1.034, 0.981, 1.001, 0.984)
    rounds = (0.99, 1.01, 1.0, 1.005, 0.995)
    history = [PastRun(tuple(v * f for f in rounds), night=f"n{i}") for i, v in enumerate(level)]
    verdict = judge_night([[v * f for f in rounds] for v in (0.937, 0.932)], history, TOLERANCE)
    assert verdict.comparison is not None and verdict.comparison.ratio.high > 0.95  # not at one-sided 95%
    assert verdict.decision is Decision.MISSED and verdict.confirmed is True


@pytest.mark.slow
def test_the_quoted_smallest_detectable_change_is_flagged_four_nights_in_five_on_a_noisy_key() -> None:
    """A key that spreads 20% from run to run: the change the report quotes as flagged by one night
    with 80% must be. On such a key the change question (one-sided 99%) binds, not the tolerance;
    quoted from the tolerance's bound alone, the change was flagged on 64% of these nights."""
    rng = random.Random(17)

    def rounds(level: float) -> list[float]:
        return [level * (1 + rng.gauss(0.0, 0.03)) for _ in range(5)]

    flagged = nights = 0
    for _ in range(12):  # keys: the quote is conditional on a key's history
        history = [PastRun(tuple(rounds(100.0 * math.exp(rng.gauss(0.0, 0.2))))) for _ in range(30)]
        quoted = judge_night([rounds(100.0)], history, TOLERANCE).detectable
        assert quoted is not None
        for _ in range(50):  # one start cannot prove a change on such a key: the quote is for two starts
            tonight = [rounds(100.0 * quoted * math.exp(rng.gauss(0.0, 0.2))) for _ in range(2)]
            flagged += judge_night(tonight, history, TOLERANCE).decision is Decision.MISSED
            nights += 1
    assert 0.75 <= flagged / nights <= 0.9
