"""One night of one key's metric against its history: the decision, the change in force, and what
the history keeps of the night. The one verdict engine the tests, `specperf backtest` and
benchmarks/verdict_nights.py all run.

Tonight is held against the *accepted level* (verdict/level.py: the runs of the segment a person
accepted, split at the credible steps of the series; parts beyond the tolerance are a change nobody
accepted and count in neither the level nor the spread). Two questions decide a night:

* **Is it a change at all?** Tonight's prediction interval against the level at
  `CHANGE_CONFIDENCE` (two-sided 98%: each end a one-sided 99% bound, the plain t-test a
  Bencher-style gate runs) lies wholly on the bad side of the level.
* **Is it beyond the tolerance?** The same interval at `BEYOND_CONFIDENCE` (two-sided 80%: each end
  one-sided 90%) lies wholly beyond `max_regression`.

REGRESSION needs both, and — while the spread is still the configured prior (fewer than
`history.MIN_RUNS` runs: a guess, not evidence; real CI keys spread 20% where it says 2%) — a second
server start tonight that is beyond the tolerance on its own too, unless tonight's value has no spread
across its rounds (a deterministic accept length: a second start would measure it again, exactly, so
it is never the reason for one, `second_start_reasons`). SUSPECT is an estimate beyond the
tolerance that is probably (`SUSPECT_CONFIDENCE`) a change, or any such estimate on the prior. A SUSPECT night that
belongs to a change in force is judged with that change's runs, tonight's included: a change beyond
the tolerance that no single night proves is proven by the nights since it began (on a server start that
measures several keys, when it is a change for the server as a whole, as a REGRESSION on one start
must be), and named "since" its first run on every night until a person accepts it.

A night is looked at twice at most, each look fixed in advance (no optional stopping): after
`rounds` rounds on the first server start; when that look is not MET, after the start is extended
to `max_rounds` rounds and — if still not MET and the server can be restarted — after `rounds` more
rounds on a second server start, deciding on both starts (`looked`, `Restarts`); a SUSPECT night
restarts a server only when it is a change for the server as a whole (`worth_a_restart`). Only the
last look decides a REGRESSION, and a REGRESSION on two starts stands only if the second is beyond
the tolerance on its own: a second start tells a slow start from a slow server.

What the history keeps (`stored_status`) is every night, marked with its decision; the mark is for
people and for keeping the accepted level's runs when a history is trimmed, not for the level: which
runs count is decided from the series each night, the same way whichever side a run fell on.

Pure: no pytest, no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, TypeVar

from pytest_specperf.verdict.changes import ChangePoint
from pytest_specperf.verdict.history import (
    MIN_RUNS,
    HistoryComparison,
    NightLevel,
    compare_with_history,
    smallest_detectable_change,
    spread_lower_bound,
)
from pytest_specperf.verdict.level import SPREAD_RUNS, AcceptedLevel, accepted_level
from pytest_specperf.verdict.stats import (
    DEFAULT_CONFIDENCE,
    TWO_SIDED_80,
    TWO_SIDED_95,
    TWO_SIDED_98,
    Decision,
    Direction,
    Estimate,
    Tolerance,
    satterthwaite,
    t_quantile,
)

#: The confidence (two-sided) of "tonight differs from the level at all" for a REGRESSION: one-sided
#: 99%, the plain t-test's.
CHANGE_CONFIDENCE: Final = TWO_SIDED_98
#: The confidence (two-sided) of "tonight is beyond the tolerance" for a REGRESSION (and of "beyond the
#: improvement bound" for IMPROVED): one-sided 90%. The change question holds the false alarms; this
#: one keeps a change within the tolerance from failing a key. At one-sided 95% a -8% change (3% past
#: a 5% tolerance: about one start-to-start spread) was flagged within three nights in 72.5% of trials.
BEYOND_CONFIDENCE: Final = TWO_SIDED_80
#: ... and for a SUSPECT (which on a GPU asks for a second server start): one-sided 97.5%. A night
#: that is probably a change beyond the tolerance is worth a second look; only a certain one fails.
SUSPECT_CONFIDENCE: Final = TWO_SIDED_95
#: ... and for "is this server start off?" (`server_change`), shared among the keys the start measures:
#: the change question's, one-sided 99% for the server as a whole. Why not the SUSPECT confidence: the
#: answer yes costs a server start (15 minutes and more on a GPU), and a suite of 5 servers x 20
#: unchanged keys at a 5% start spread, asked at one-sided 97.5%, took 0.12 second starts a night
#: (benchmarks/verdict_nights.py, 500 suites; the budget is 0.1), at 99% 0.06 (300 suites). What it
#: costs: the first night of a whole server's speedup 10% lower turns the suite red less often (80% ->
#: 44% of 100 suites at a 2% start spread), its first three nights about as often (99% -> 95%).
SERVER_CONFIDENCE: Final = CHANGE_CONFIDENCE

#: A change too young for the step test is judged with its own runs once it was seen on this many
#: past nights: one odd night may be the node; two in a row are the key.
CHANGE_NIGHTS: Final = 2

#: A key whose start-to-start CV is credibly above tolerance / BLIND_RATIO: one start's offset alone
#: is beyond the tolerance on most nights, and one value judged alone is at most SUSPECT there.
BLIND_RATIO: Final = 1.0

#: Rounds whose values differ by at most this share of the value measured the same value (float noise of
#: a ratio of counts, not a spread).
SAME_VALUE: Final = 1e-9

L = TypeVar("L")


class RunStatus(Enum):
    """How a stored night was judged: ACCEPTED (within the tolerance), SUSPECT (beyond it, not
    credibly), REFUSED (a REGRESSION). For people, and for trimming (store/records.py `kept_runs` keeps a
    segment's first accepted runs): which runs count in the level is decided from the series (level.py)."""

    ACCEPTED = "accepted"
    SUSPECT = "suspect"
    REFUSED = "refused"

    @property
    def counted(self) -> bool:
        return self is RunStatus.ACCEPTED


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
    comparison: HistoryComparison | None  # None with no accepted run (NEW)
    change: ChangePoint | None = None  # the change nobody accepted that tonight belongs to (either way)
    since: ChangePoint | None = None  # where tonight's regression began, when tonight is beyond the tolerance
    by_change: bool = False  # REGRESSION because the change in force is credibly beyond the tolerance
    detectable: float | None = None  # the change (ratio) one night flags with 80%
    values: tuple[float, ...] = field(default=(), repr=False)  # the segment's run means, tonight last
    confirmed: bool | None = None  # with a second start: did it confirm the first? (None: one start)
    first_start: float | None = None  # the first start alone over the level, when a second was made
    level: AcceptedLevel | None = field(default=None, repr=False)

    @property
    def regression(self) -> bool:
        return self.decision is Decision.MISSED

    @property
    def back_since(self) -> int | None:
        """The run since which the key is back within the tolerance of the accepted level, after a
        change nobody accepted (an improvement lost, a regression gone): not a REGRESSION."""
        return self.level.back_since if self.level is not None else None


@dataclass(frozen=True)
class Look:
    """Tonight against the accepted level: the comparison and what it says."""

    comparison: HistoryComparison
    decision: Decision
    improved: bool


def judge_night(
    tonight: Sequence[Sequence[float]],
    history: Sequence[PastRun],
    tolerance: Tolerance,
    *,
    strict: bool = False,
    searches: int = 1,
    rounds: int | None = None,
    starts_planned: int = 1,
    earlier: Sequence[PastRun] = (),
    floors: Sequence[tuple[float, str]] = (),
    keys: int = 1,
) -> NightVerdict:
    """Tonight (round samples per server start) against the current segment's runs, oldest first.

    `searches` is how many series are searched for changes tonight (keys x metrics): the step test
    that splits the series is corrected for it. `rounds`/`starts_planned` are what the smallest
    detectable change is quoted for (a night's plan, not what it used). `earlier`: the key's runs
    before the current segment (the level a person accepted before this one): while the segment has
    too few runs for a spread, theirs is the key's (an update moves the level, not the key's noise).
    `floors`: (CV, where it was seen) the assumed spread may not be below (the reference's movement).
    `keys`: the keys the server start measures tonight: a REGRESSION on one start, or one that the
    nights of a change in force make of a SUSPECT night, must be a change for the server as a whole
    (`server_change`), as the second start that would confirm it must.
    """
    tonight_mean = math.exp(NightLevel.of(tonight).log_mean)
    values = (*(_mean(r.samples) for r in history), tonight_mean)
    if not history:
        return NightVerdict(Decision.MET, False, None, values=values)
    level = accepted_level(values, tolerance.max_regression, searches=searches, nights=[r.night for r in history])
    look = decide(tonight, history, level, tolerance, strict=strict, earlier=earlier, floors=floors)
    if look is None:
        return NightVerdict(Decision.MET, False, None, values=values, level=level)
    confirmed, first_start = None, None
    if len(tonight) > 1:
        look, confirmed, first_start = _confirm(look, tonight, history, level, tolerance, strict, earlier, floors)
    decision, improved, by_change = look.decision, look.improved, False
    if decision is Decision.MISSED and not _stands(look, tonight, confirmed, tolerance, keys):
        decision = Decision.SUSPECT  # only a second start that agrees, or the nights of the change, prove it
    change = None
    if level.holds(look.comparison.ratio.value):
        change = _change_in_force(tonight, history, level)
        worse, better = _classify_change(change, tolerance)
        seen = level.established or _nights(history, level.change_runs) >= CHANGE_NIGHTS
        if decision is Decision.SUSPECT and worse and seen and _off_for_the_server(change.change_at, keys):
            decision, by_change = Decision.MISSED, True
        improved = improved or (level.established and better)
    since = None
    if decision in (Decision.MISSED, Decision.SUSPECT):
        since = change if change is not None else ChangePoint(len(history), look.comparison.ratio, math.nan)
    comparison = look.comparison
    detectable = _detectable(look, tolerance, rounds, starts_planned)
    return NightVerdict(
        decision, improved, comparison, change, since, by_change, detectable, values, confirmed, first_start, level
    )


def _detectable(look: Look, tolerance: Tolerance, rounds: int | None, starts_planned: int) -> float | None:
    """The change (ratio) one night flags with 80%, for the night's plan (None on the prior)."""
    comparison = look.comparison
    if comparison.prior:
        return None
    return smallest_detectable_change(
        comparison,
        tolerance.max_regression,
        rounds=rounds or comparison.ratio.n,
        starts=max(starts_planned, 2) if _one_start_cannot_tell(look, tolerance) else starts_planned,
        higher_is_better=tolerance.direction is Direction.HIGHER_IS_BETTER,
        confidence=BEYOND_CONFIDENCE,
        change_confidence=CHANGE_CONFIDENCE,
    )


def decide(
    tonight: Sequence[Sequence[float]],
    history: Sequence[PastRun],
    level: AcceptedLevel,
    tolerance: Tolerance,
    *,
    strict: bool = False,
    earlier: Sequence[PastRun] = (),
    floors: Sequence[tuple[float, str]] = (),
) -> Look | None:
    """Tonight against the accepted level's runs (no change look); None without one."""
    if not level.level_runs:
        return None
    spread = [history[i].samples for i in level.spread_runs]
    before = [r.samples for r in earlier if r.status.counted][-SPREAD_RUNS:]
    if len(spread) < MIN_RUNS <= len(before):
        spread = before  # the key's own spread, measured before its level was last accepted
    comparison = compare_with_history(
        tonight,
        [history[i].samples for i in level.level_runs],
        tolerance.prior_cv,
        reject=False,
        spread_runs=spread,
        floors=floors,
    )
    decision, improved = classify(comparison, tolerance, strict=strict)
    return Look(comparison, decision, improved)


def classify(comparison: HistoryComparison, tolerance: Tolerance, *, strict: bool = False) -> tuple[Decision, bool]:
    """(decision, improved) of one comparison: the two questions of the module docstring."""
    ratio, beyond, wide = (
        comparison.ratio,
        comparison.ratio_at(BEYOND_CONFIDENCE),
        comparison.ratio_at(CHANGE_CONFIDENCE),
    )
    worse, better = tolerance.bounds
    changed = _bad(wide, 1.0, tolerance, credibly=True)
    alone = comparison.starts == 1 and _blind(comparison, tolerance)  # one value mostly its start's offset
    probably = _bad(
        comparison.ratio_at(CHANGE_CONFIDENCE if alone else SUSPECT_CONFIDENCE), 1.0, tolerance, credibly=True
    )
    if _bad(beyond, worse, tolerance, credibly=True) and changed:
        decision = Decision.MISSED
    elif _bad(ratio, worse, tolerance) and probably:
        decision = Decision.SUSPECT
    elif strict and not _good(ratio, worse, tolerance, credibly=True):
        decision = Decision.INCONCLUSIVE
    else:
        decision = Decision.MET
    improved = _good(beyond, better, tolerance, credibly=True, strictly=True)
    return decision, improved and _good(wide, 1.0, tolerance, credibly=True, strictly=True)


def _stands(
    look: Look, tonight: Sequence[Sequence[float]], confirmed: bool | None, tolerance: Tolerance, keys: int
) -> bool:
    """Whether a REGRESSION of the last look stands as one. A second start that agreed proves it; so does
    one start of a value without spread (a second start would measure it again). Otherwise one start
    cannot prove it while the spread is assumed or too wide (`_one_start_cannot_tell`), nor when, among
    the `keys` keys its server start measures, it is not a change for the server as a whole
    (`server_change`): asked at one key's 99%, the change question has as many chances a night as the
    server has keys, and a REGRESSION on one start asks for the second start that the server's
    question would refuse a SUSPECT night (at a 5% start spread, 0.5 restarts a night for 100 keys)."""
    if confirmed is True or (len(tonight) == 1 and without_spread(tonight[0])):
        return True
    if _one_start_cannot_tell(look, tolerance):
        return False
    return confirmed is not None or server_change(look.comparison, keys)


def server_change(comparison: HistoryComparison, keys: int) -> bool:
    """Tonight is a change for the server as a whole when it measures `keys` keys: its interval at the
    change question's confidence shared among them (`SERVER_CONFIDENCE`; Bonferroni: one-sided 99% for
    one key, 99.95% for 20) lies wholly off the level. Why: whether a start is off is the server's
    question, and each of its keys asks it; asked by each at one key's confidence, a server of 20
    unchanged keys hears yes 20 times as often."""
    return _off_for_the_server(comparison.ratio_at, keys)


def _off_for_the_server(interval_at: Callable[[float], Estimate], keys: int) -> bool:
    """An estimate's interval (`interval_at(confidence)`) at `SERVER_CONFIDENCE` shared among the
    server's `keys` keys lies wholly off the level: `server_change`'s question, which a change in force
    must answer too before its nights make a REGRESSION of a SUSPECT night (`judge_night`)."""
    server = interval_at(1.0 - (1.0 - SERVER_CONFIDENCE) / max(keys, 1))
    return not server.low <= 1.0 <= server.high


def _one_start_cannot_tell(look: Look, tolerance: Tolerance) -> bool:
    """One start cannot prove a REGRESSION: while the spread is assumed, not measured (a prior is a guess;
    real keys spread 20% where it says 2%), or on a key whose measured spread is credibly too wide to
    show a change of the tolerance (one value judged alone is then mostly its start's offset: the red
    nights of real CI series with a 15-20% run-to-run CV were single-night outliers). A second start
    that agrees, or the nights of the change together, prove it."""
    return look.comparison.prior or _blind(look.comparison, tolerance)


def _blind(comparison: HistoryComparison, tolerance: Tolerance) -> bool:
    """The key's measured start-to-start spread is credibly wider than the tolerance: one start's
    offset alone is beyond it on most nights. Such a night is SUSPECT only when it is certainly a change
    (the question a REGRESSION asks), and a REGRESSION needs a second start or a second night."""
    low = spread_lower_bound(comparison)
    return low is not None and low > tolerance.max_regression / BLIND_RATIO


def _bad(estimate: Estimate, bound: float, tolerance: Tolerance, *, credibly: bool = False) -> bool:
    """The estimate (or, `credibly`, its whole interval) on the bad side of `bound`."""
    if tolerance.direction is Direction.HIGHER_IS_BETTER:
        return (estimate.high if credibly else estimate.value) < bound
    return (estimate.low if credibly else estimate.value) > bound


def _good(
    estimate: Estimate, bound: float, tolerance: Tolerance, *, credibly: bool = False, strictly: bool = False
) -> bool:
    """The estimate (or its whole interval) on the good side of `bound` (inclusive unless `strictly`)."""
    if tolerance.direction is Direction.HIGHER_IS_BETTER:
        x = estimate.low if credibly else estimate.value
        return x > bound if strictly else x >= bound
    x = estimate.high if credibly else estimate.value
    return x < bound if strictly else x <= bound


def _change_in_force(
    tonight: Sequence[Sequence[float]], history: Sequence[PastRun], level: AcceptedLevel
) -> ChangePoint:
    """The change tonight belongs to, as one estimate: the mean of its runs (tonight's starts among
    them) against the accepted level's, Welch: each side with its own spread, so runs that vary more
    than the key's (a mode that comes and goes) carry less evidence than runs of a clean step. Never
    less than the key's spread, though: two or three runs that happen to lie close together say
    nothing of the key's noise, and taken at their own spread an unchanged key at a 5% start spread
    whose last nights read -11%, -12% and -10% was a change "certain" at 99%."""
    after = [math.log(_mean(history[i].samples)) for i in level.change_runs]
    after += [math.log(_mean(s)) for s in tonight]
    before = [math.log(_mean(history[i].samples)) for i in level.level_runs]
    spread = [math.log(_mean(history[i].samples)) for i in level.spread_runs]
    d = statistics.fmean(after) - statistics.fmean(before)
    own, key = _variance(after), _variance(spread)
    parts = [
        (max(own, key) / len(after), len(after) - 1 if own >= key else len(spread) - 1),
        (key / len(before), len(spread) - 1),
    ]
    variance = math.fsum(v for v, _ in parts)
    df = max(1.0, satterthwaite([(v, d) for v, d in parts if math.isfinite(v)])) if math.isfinite(variance) else 1.0
    if not math.isfinite(variance):
        estimate = Estimate.unknown(math.exp(d), len(after), DEFAULT_CONFIDENCE)
        return ChangePoint(level.change_at or 0, estimate, math.nan)
    half = t_quantile(DEFAULT_CONFIDENCE, df) * math.sqrt(variance)
    estimate = Estimate(math.exp(d), math.exp(d - half), math.exp(d + half), len(after), DEFAULT_CONFIDENCE)
    return ChangePoint(level.change_at or 0, estimate, math.nan, "step", None, variance, df)


def _classify_change(change: ChangePoint, tolerance: Tolerance) -> tuple[bool, bool]:
    """(credibly worse, credibly better) than the tolerance allows, for a change in force: the two
    questions a night is asked, put to the change's runs together."""
    if not change.change.bounded:
        return False, False
    worse, better = tolerance.bounds
    beyond, wide = change.change_at(BEYOND_CONFIDENCE), change.change_at(CHANGE_CONFIDENCE)
    return (
        _bad(beyond, worse, tolerance, credibly=True) and _bad(wide, 1.0, tolerance, credibly=True),
        _good(beyond, better, tolerance, credibly=True, strictly=True)
        and _good(wide, 1.0, tolerance, credibly=True, strictly=True),
    )


def _confirm(
    look: Look,
    tonight: Sequence[Sequence[float]],
    history: Sequence[PastRun],
    level: AcceptedLevel,
    tolerance: Tolerance,
    strict: bool,
    earlier: Sequence[PastRun] = (),
    floors: Sequence[tuple[float, str]] = (),
) -> tuple[Look, bool, float]:
    """A REGRESSION on several starts stands only if the last start is beyond the tolerance on its
    own: averaging one wild start with a normal one would otherwise still flag the night."""
    first = decide(tonight[:1], history, level, tolerance, strict=strict, earlier=earlier, floors=floors)
    last = decide(tonight[-1:], history, level, tolerance, strict=strict, earlier=earlier, floors=floors)
    assert first is not None and last is not None
    on_its_own = last.decision in (Decision.SUSPECT, Decision.MISSED) or _bad(
        last.comparison.ratio, tolerance.regression_bound, tolerance
    )
    if look.decision is Decision.MISSED and not on_its_own:
        return last, False, first.comparison.ratio.value
    return look, on_its_own, first.comparison.ratio.value


def _variance(logs: Sequence[float]) -> float:
    """The sample variance, infinite with fewer than two values (no spread to go by)."""
    return statistics.variance(logs) if len(logs) > 1 else math.inf


def _nights(history: Sequence[PastRun], runs: Sequence[int]) -> int:
    """How many nights `runs` (indices into `history`) were measured on: a session's starts are one."""
    return len({history[i].night if history[i].night is not None else i for i in runs})


def _mean(samples: Sequence[float]) -> float:
    return math.fsum(samples) / len(samples)


def without_spread(samples: Sequence[float]) -> bool:
    """Whether a value is the same in every round (at least two): a deterministic value, such as the
    accept length of greedy decoding (the same outputs, the same verify steps, round after round).
    Another server start measures it again, exactly: it can neither confirm nor refute it."""
    if len(samples) < 2:
        return False
    scale = max(abs(x) for x in samples)
    return max(samples) - min(samples) <= SAME_VALUE * scale


def second_start_reasons(beyond: Sequence[tuple[str, Sequence[float]]]) -> list[str]:
    """The checks (name, the round samples of its value) a second server start could confirm: those
    beyond their threshold whose value varies from round to round. A check whose value has no spread
    (`without_spread`) is never a reason for one: on a GPU node a start costs many minutes, and it
    would measure the same value again."""
    return [name for name, samples in beyond if not without_spread(samples)]


def worth_a_restart(verdict: NightVerdict, keys: int = 1) -> bool:
    """Whether a night beyond the tolerance may restart its server for a second look, when the server
    measures `keys` keys tonight.

    Why: a restart is a question asked of the server (is this start off?), and each of its keys can ask
    it. Asked by every SUSPECT key at the SUSPECT question's confidence, a server of 20 unchanged keys
    would be restarted about 20 times as often as a server of one. For a SUSPECT night the question is
    the server's: asked at `SERVER_CONFIDENCE` for the server as a whole (Bonferroni over its keys:
    one-sided 99% for one key, 99.95% for 20), so the server's false restarts stay about those of
    one key, while a real change of a key, whose interval lies far from the level, still asks for one.
    A REGRESSION always asks (a second start that disagrees is what keeps an unchanged key from
    failing): judged with the same `keys` (`judge_night`), one on a single start is a change for the
    server as a whole already, else it is SUSPECT. A night held by the change in force (a change for
    the server as a whole, `judge_night`) asks too."""
    if verdict.decision not in (Decision.SUSPECT, Decision.MISSED):
        return False
    comparison = verdict.comparison
    if keys <= 1 or verdict.decision is Decision.MISSED or verdict.by_change or comparison is None:
        return True
    return server_change(comparison, keys)


def looked(
    look: Callable[[], L],
    *,
    settled: Callable[[L], bool],
    extend: Callable[[], bool],
    confirmable: Callable[[L], bool],
    second_start: Callable[[L], bool],
) -> L:
    """A night's looks, fixed in advance: `look` after the first rounds; when not `settled`, again after
    `extend` added rounds to the same start (False: it could not); when still not settled and a start's
    offset could explain it (`confirmable`), again after `second_start` measured on another server
    start (False: none could be had). The schedule the session follows (session/looks.py) and the one
    benchmarks/verdict_nights.py replays: one code path."""
    result = look()
    if not settled(result) and extend():
        result = look()
    if not settled(result) and confirmable(result) and second_start(result):
        result = look()
    return result


@dataclass
class Restarts:
    """Which second looks restart a server: one restart confirms every key measured on the start before
    it (such a key gets its second start on the new one, without another restart), once per server
    and night, at most `limit` per session. The session's rule (session/looks.py) and
    benchmarks/verdict_nights.py's.

    Why once per server: a restart asks the server "is this start off?", and its second start answers
    for the server. The session measures a server's keys one test after another, so the keys after the
    restart are on the new start; restarted again for each of them, a server whose speedup fell 10% on
    its 20 keys took a second start for key after key up to the cap, every night until a person
    accepted the change (3.33 second starts a night for a 5 x 20 key suite at a 2% start spread, 1.70
    once per server; benchmarks/verdict_nights.py), each up to 15 minutes on a GPU node. Such a key is
    decided on its one start: a change for the server as a whole stands on it (`judge_night(keys=...)`),
    else it is SUSPECT until its nights prove it. The reference's second start for a speedup's second
    draw (session/looks.py `_reference_again`) is apart: it is the draw, not a question of its own."""

    limit: int
    restarted: set[str] = field(default_factory=set)

    @property
    def used(self) -> int:
        """Restarts spent tonight: one per server restarted."""
        return len(self.restarted)

    def ask(self, *, on_current_start: bool, cannot: str | None = None, server: str = "") -> tuple[bool, str | None]:
        """(restart now?, why no second start can be had): a key measured on the start running now needs
        a restart, which `cannot` (the pool's reason), a restart of `server` tonight already, or the
        session's cap may refuse; a key measured on an earlier start is measured again on the current one."""
        if not on_current_start:
            return False, None
        if cannot is not None:
            return False, cannot
        if server in self.restarted:
            return False, f"{server or 'the server'} was restarted once tonight already (one second start per server)"
        if self.used >= self.limit:
            return False, f"the session already restarted {self.used} server(s) (max_restarts = {self.limit})"
        self.restarted.add(server)
        return True, None


def stored_status(final: Decision) -> RunStatus:
    """How tonight's server starts are marked in the history: REFUSED when the night is a REGRESSION,
    SUSPECT when it ends beyond the tolerance without being credibly so, else ACCEPTED. The mark
    does not decide whether a run counts in the level (verdict/level.py does, from the series)."""
    if final is Decision.MISSED:
        return RunStatus.REFUSED
    return RunStatus.SUSPECT if final is Decision.SUSPECT else RunStatus.ACCEPTED
