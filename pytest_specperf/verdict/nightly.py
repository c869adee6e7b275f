"""One night of one key's metric against its history: the decision, the change in force, and what
the history keeps of the night. The one verdict engine the tests, `specperf backtest` and
benchmarks/verdict_power.py all run.

A night is looked at twice at most, each look fixed in advance (no optional stopping):

1. after `rounds` rounds on the first server start;
2. when that look is not MET: after the start is extended to `max_rounds` rounds, and — if that
   still is not MET and the server can be restarted — after `rounds` more rounds on a second
   server start, deciding on both starts (`second_look`). Only the last look decides a REGRESSION.

A second start is what tells a slow start from a slow server: tonight's own start offset is in
every interval whatever the history knows, and with a 2% night-to-night spread it alone caps the
first-night detection of a -10% change at ~75%, while a heavy-tailed offset makes a false
REGRESSION far likelier than a normal one.

What the history keeps (`stored_status`): every night. A night within the tolerance counts in the
level and the spread; a SUSPECT night (beyond the tolerance, not credibly) and a REGRESSION night
(kept as *refused*) count in neither, but they are in the series change points search, so a change
is named "since" the night it began, and a change beyond the tolerance that no single night proves
becomes a REGRESSION once it holds on two runs.

Pure: no pytest, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from pytest_specperf.verdict.changes import ChangePoint, credible_drift, locate_change, newest_change
from pytest_specperf.verdict.history import (
    MIN_RUNS,
    HistoryComparison,
    NightLevel,
    compare_with_history,
    robust_spread,
    smallest_detectable_change,
)
from pytest_specperf.verdict.stats import Decision, Direction, RegressionResult, classify_ratio


class RunStatus(Enum):
    """How a stored run counts: ACCEPTED in the level and the spread; SUSPECT and REFUSED in neither,
    but in the series change points search."""

    ACCEPTED = "accepted"
    SUSPECT = "suspect"
    REFUSED = "refused"

    @property
    def counted(self) -> bool:
        return self is RunStatus.ACCEPTED


class SecondLook(Enum):
    """What a night whose first look was not MET does next."""

    NONE = "none"  # decided at the first look
    EXTEND = "extend"  # more rounds on the same start, then decide
    RESTART = "restart"  # more rounds on the same start; if still not MET, a second start


@dataclass(frozen=True)
class PastRun:
    """A stored run as the verdict engine sees it: its samples of the metric, and how it counts."""

    samples: tuple[float, ...]
    status: RunStatus = RunStatus.ACCEPTED
    night: str | None = None  # the session that stored it: the starts of one night share it


@dataclass(frozen=True)
class NightVerdict:
    """The decision of one night on one metric, and what it rests on."""

    decision: Decision
    improved: bool
    comparison: HistoryComparison | None  # None with no counted run (NEW)
    change: ChangePoint | None = None  # the change in force in the current segment, tonight included
    since: ChangePoint | None = None  # where tonight's regression began, when it is one
    by_change: bool = False  # REGRESSION because a change or drift in force lies beyond the tolerance
    detectable: float | None = None  # the change (ratio) one night flags with 80%
    values: tuple[float, ...] = field(default=(), repr=False)  # the series searched, tonight last
    confirmed: bool | None = None  # with a second start: did it confirm the first? (None: one start)
    first_start: float | None = None  # the first start alone over the level, when a second was made
    streak: int = 0  # earlier runs beyond the tolerance the decision also rests on
    returns: int = 0  # runs of the segment beyond the tolerance after which the key came back (`flapping`)

    @property
    def flapping(self) -> bool:
        """The key keeps leaving its level and coming back: at least 3 (and a fifth of the segment's
        runs) were SUSPECT or refused and followed by accepted ones. Its nights are not telling a
        change from its own noise: it cannot show a change of the tolerance."""
        return self.returns >= max(3, len(self.values) // 5)

    @property
    def regression(self) -> bool:
        return self.decision is Decision.MISSED


@dataclass(frozen=True)
class Tolerance:
    """How far a metric may move, which way is good, and the prior spread while the history is short."""

    max_regression: float
    direction: Direction = Direction.HIGHER_IS_BETTER
    prior_cv: float = 0.02


Look = tuple[HistoryComparison, RegressionResult]


def judge_night(
    tonight: Sequence[Sequence[float]],
    history: Sequence[PastRun],
    tolerance: Tolerance,
    *,
    strict: bool = False,
    searches: int = 1,
    rounds: int | None = None,
    starts_planned: int = 1,
) -> NightVerdict:
    """Tonight (round samples per server start) against the current segment's runs, oldest first.

    * The level: `stats.classify_ratio` on the history comparison of every start of tonight.
    * A second start confirms a REGRESSION only if it is beyond the tolerance on its own too; else
      the first start was slow, and tonight is judged by the second alone ("not confirmed").
    * A SUSPECT night after SUSPECT or refused ones is judged with them (`_streak`): a change that
      no single night proves is proven by the nights since it began.
    * A change in force whose size lies beyond the tolerance makes a REGRESSION as well, once it
      holds on two runs (tonight and the night before); so does a drift whose size over the series
      is credibly beyond it (`changes.credible_drift`).

    `searches` is how many series are searched for changes tonight (keys x metrics): the change
    test is corrected for it. `rounds`/`starts_planned` are what the smallest detectable change is
    quoted for (a night's plan, not what it used).
    """
    level = NightLevel.of(tonight)
    values = (*(_mean(r.samples) for r in history), math.exp(level.log_mean))
    look = decide(tonight, history, tolerance, strict=strict)
    if look is None:
        return NightVerdict(Decision.MET, False, None, values=values)
    confirmed, first_start = None, None
    if len(tonight) > 1:
        look, confirmed, first_start = _confirm(look, tonight, history, tolerance, strict)
    look, streak = _with_streak(look, tonight, history, tolerance, strict)
    comparison, result = look
    lower = tolerance.direction is Direction.HIGHER_IS_BETTER
    change = newest_change(values, searches=searches)
    by_change = (
        change is not None and change.kind == "step" and _beyond(change, tolerance) and change.index <= len(values) - 2
    )
    if not by_change and result.decision is not Decision.MISSED:
        drift = credible_drift(values, tolerance.max_regression, lower=lower, at=_night_positions(history))
        if drift is not None:
            change, by_change = drift, True
    decision = Decision.MISSED if by_change else result.decision
    since = None
    if decision is not Decision.MET:
        since = change if by_change else locate_change(values, lower=lower)
    detectable = smallest_detectable_change(
        comparison, tolerance.max_regression, rounds=rounds or comparison.ratio.n, starts=starts_planned,
        higher_is_better=tolerance.direction is Direction.HIGHER_IS_BETTER,
    ) if comparison.runs >= MIN_RUNS else None  # fmt: skip
    return NightVerdict(
        decision, result.improved, comparison, change, since, by_change, detectable, values,
        confirmed, first_start, streak, _returns(history),
    )  # fmt: skip


def decide(
    tonight: Sequence[Sequence[float]], history: Sequence[PastRun], tolerance: Tolerance, *, strict: bool = False
) -> Look | None:
    """Tonight's level against the counted runs alone (no change search); None without one."""
    counted = [r.samples for r in history if r.status.counted]
    if not counted:
        return None
    floor = 0.0
    if _returns(history):  # runs left out, and the key came back after them: a censored sample (robust_spread)
        floor = robust_spread([math.log(_mean(r.samples)) for r in history])
    comparison = compare_with_history(tonight, counted, tolerance.prior_cv, spread_floor=floor)
    return comparison, classify_ratio(comparison.ratio, tolerance.max_regression, tolerance.direction, strict=strict)


def _confirm(
    look: Look, tonight: Sequence[Sequence[float]], history: Sequence[PastRun], tolerance: Tolerance, strict: bool
) -> tuple[Look, bool, float]:
    """A REGRESSION on several starts stands only if the last start is beyond the tolerance on its
    own: averaging one wild start with a normal one would otherwise still flag the night."""
    first = decide(tonight[:1], history, tolerance, strict=strict)
    last = decide(tonight[-1:], history, tolerance, strict=strict)
    assert first is not None and last is not None
    on_its_own = last[1].decision in (Decision.SUSPECT, Decision.MISSED)
    if look[1].decision is Decision.MISSED and not on_its_own:
        return last, False, first[0].ratio.value
    return look, on_its_own, first[0].ratio.value


def _with_streak(
    look: Look, tonight: Sequence[Sequence[float]], history: Sequence[PastRun], tolerance: Tolerance, strict: bool
) -> tuple[Look, int]:
    """A SUSPECT night judged together with the uncounted (SUSPECT or refused) runs right before it:
    each of them is one more server start of the same, changed, server. One test, made only when
    tonight is beyond the tolerance itself, so an unchanged key (whose SUSPECT nights are rare and
    seldom back to back) almost never gets here."""
    streak: list[tuple[float, ...]] = []
    for run in reversed(history):
        if run.status.counted:
            break
        streak.append(run.samples)
    if look[1].decision is not Decision.SUSPECT or not streak:
        return look, 0
    wider = decide([*tonight, *reversed(streak)], history, tolerance, strict=strict)
    assert wider is not None
    return (wider, len(streak)) if wider[1].decision is Decision.MISSED else (look, 0)


def _beyond(change: ChangePoint, tolerance: Tolerance) -> bool:
    """A change whose estimated size lies beyond the tolerance, in the bad direction."""
    if tolerance.direction is Direction.HIGHER_IS_BETTER:
        return change.change.value < 1.0 - tolerance.max_regression
    return change.change.value > 1.0 + tolerance.max_regression


def _returns(history: Sequence[PastRun]) -> int:
    """Uncounted (SUSPECT or refused) runs with an accepted run after them."""
    last_counted = max((i for i, r in enumerate(history) if r.status.counted), default=-1)
    return sum(1 for r in history[:last_counted] if not r.status.counted)


def _night_positions(history: Sequence[PastRun]) -> list[int]:
    """Each run's night, counted from the first, tonight last: a second start shares its night's."""
    positions: list[int] = []
    for i, run in enumerate(history):
        same = i > 0 and run.night is not None and run.night == history[i - 1].night
        positions.append(positions[-1] if same else (positions[-1] + 1 if positions else 0))
    return [*positions, (positions[-1] + 1) if positions else 0]


def _mean(samples: Sequence[float]) -> float:
    return math.fsum(samples) / len(samples)


def second_look(first: Decision, *, can_restart: bool) -> SecondLook:
    """What follows a first look: nothing after MET; more rounds, then a second server start when
    one is possible and the estimate is on the bad side (SUSPECT or MISSED)."""
    if first is Decision.MET:
        return SecondLook.NONE
    if first in (Decision.SUSPECT, Decision.MISSED) and can_restart:
        return SecondLook.RESTART
    return SecondLook.EXTEND


def stored_status(final: Decision) -> RunStatus:
    """How tonight's server starts enter the history: REFUSED when the night is a REGRESSION,
    SUSPECT when it ends beyond the tolerance without being credibly so, else ACCEPTED.

    A SUSPECT night is kept but left out of the level and the spread like a refused one. Counting it
    would let a real change that the first night does not prove blind the gate for the nights
    after (two starts at -10% among ten runs triple the estimated spread); leaving it out biases
    nothing measurable, since with a second start an unchanged night ends SUSPECT well under 1%
    of the time (benchmarks/verdict_nights.py).
    """
    if final is Decision.MISSED:
        return RunStatus.REFUSED
    return RunStatus.SUSPECT if final is Decision.SUSPECT else RunStatus.ACCEPTED
