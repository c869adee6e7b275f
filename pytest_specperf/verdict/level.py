"""The accepted level of a key: which of its runs tonight is held against, and the change in force.

Why: a level that some nights move and others do not ratchets. If runs that came out better count
and runs that came out worse do not, a key with two runner pools climbs to the fast pool and from
then on every ordinary night is a REGRESSION; if every run counts, an unacknowledged regression
becomes the new normal within a window. The rule here decides by *where a run lies in the series*,
never by which side of the baseline it fell, and lets only a person move the level:

1. The segment starts where a person accepted a level (`--specperf-update`).
2. Its runs, tonight included, are split at the credible steps of the series (`changes.step_splits`:
   binary segmentation, AR(1)-aware, Bonferroni over the splits; a lone wild run splits nothing).
3. The first part is the accepted level. A later part whose median run lies within the tolerance of
   it, or within the accepted runs' own spread (`_shift`), belongs to the accepted level too: the
   level may wander within the tolerance, and a key whose runner pools mix differently for a while
   has not changed. A part beyond both (either way) is a change nobody accepted: its runs count in
   neither the level nor the spread, and the change is *in force* while the series ends in it
   ("since run 15", the same run every night, until a person accepts it or the key comes back:
   "back to the accepted level"). A change too young for the step test is the streak of newest runs
   that were each probably a change beyond the tolerance (`_streak`).
4. Of the accepted runs, the newest `SPREAD_RUNS` give the spread and the newest `LEVEL_RUNS` the
   level; one wild run among them is rejected with a Bonferroni bound (`history.reject_outliers`),
   unless tonight looks like it (`_like`: then it is a mode of the key). The spread rests on more
   runs than the level because a key's spread is a property of the key — a second runner pool that
   shows up one night in five is in it — while its level may wander.

Pure: no pytest, no I/O.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from scipy.special import stdtrit

from pytest_specperf.store.records import LEVEL_RUNS
from pytest_specperf.verdict.changes import step_splits
from pytest_specperf.verdict.history import MIN_RUNS, Rejection, reject_outliers
from pytest_specperf.verdict.stats import Tolerance

#: Accepted runs the run-to-run spread rests on (the newest).
SPREAD_RUNS: Final = 90
#: One-sided level of "a part's typical run is beyond the accepted runs' spread" (`_shift`): the
#: REGRESSION's question; and of "a newest run was probably a change" (`_streak`): the SUSPECT's.
PART_QUANTILE: Final = 0.99
STREAK_QUANTILE: Final = 0.975


@dataclass(frozen=True)
class AcceptedLevel:
    """The runs of a segment (indices, oldest first; tonight is the last value and never among them)
    that tonight is held against, and the change nobody accepted that the series ends in, if any."""

    level_runs: tuple[int, ...]
    spread_runs: tuple[int, ...]
    rejected: tuple[Rejection, ...]  # index: into the segment's values
    change_runs: tuple[int, ...] = ()  # past runs of the change in force (tonight not among them)
    change_shift: float = 0.0  # their mean log level less the accepted level's (0: no change in force)
    established: bool = False  # the change is a part between credible steps, not only a young streak
    splits: tuple[int, ...] = ()
    back_since: int | None = None  # the run the key came back within the tolerance at, after a change

    @property
    def change_at(self) -> int | None:
        """The first run of the change in force."""
        return self.change_runs[0] if self.change_runs else None

    def holds(self, ratio: float) -> bool:
        """Tonight, at `ratio` to the accepted level, is nearer the change's level than the accepted
        one: it belongs to the change (a lone wild run followed by a normal night is no change)."""
        if not self.change_runs or ratio <= 0.0:
            return False
        d = math.log(ratio)
        return d * self.change_shift > 0.0 and abs(d) > abs(self.change_shift) / 2.0


def accepted_level(
    values: Sequence[float], tolerance: float, *, searches: int = 1, nights: Sequence[object] | None = None
) -> AcceptedLevel:
    """The accepted level of a segment whose last value is tonight (positive per-run values, oldest first).

    Two ways a run is out of the level, both by its place in the series: it lies in a part (between
    credible steps) that is a change nobody accepted (`_shift`), or it ends the series in a streak of
    runs beyond the tolerance on one side (`_streak`): a change too young for the step test, which
    tonight may confirm. Either way, which side it is on does not matter."""
    past = len(values) - 1
    logs = [math.log(v) for v in values]
    splits = tuple(step_splits(values, searches=searches)) if len(values) >= 4 else ()
    parts = list(zip((0, *splits), (*splits, len(values)), strict=True))
    accepted = list(range(*parts[0]))
    change: list[int] = []
    sign = 0
    back_since: int | None = None
    for part in parts[1:]:
        shift = _shift(logs, accepted, part, tolerance)
        if shift == 0:
            accepted.extend(range(*part))
            back_since = part[0] if change else back_since
            change, sign = [], 0
        elif not change or shift != sign:
            change, sign = list(range(*part)), shift
        else:
            change.extend(range(*part))
    runs = [i for i in accepted if i < past]
    established = bool(change)
    if not change:
        streak, sign = _streak(logs, runs, tolerance, nights)
        change, runs = list(streak), [i for i in runs if i not in streak]
    runs = runs[-SPREAD_RUNS:]
    rejected = [
        r
        for r in (reject_outliers([logs[i] for i in runs]) if runs else [])
        if not _like(logs[past], logs[runs[r.index]], [logs[i] for i in runs])
    ]
    out = {r.index for r in rejected}
    kept = tuple(i for j, i in enumerate(runs) if j not in out)
    rejections = tuple(Rejection(runs[r.index], r.t, r.limit, r.ratio) for r in rejected)
    change_runs = tuple(i for i in change if i < past)
    level_runs = kept[-LEVEL_RUNS:]
    change_shift = 0.0
    if change_runs and level_runs:
        change_shift = statistics.fmean(logs[i] for i in change_runs) - statistics.fmean(logs[i] for i in level_runs)
    established = established and bool(change_runs)
    back = None if change_runs else back_since
    return AcceptedLevel(level_runs, kept, rejections, change_runs, change_shift, established, splits, back)


def _like(tonight: float, outlier: float, runs: Sequence[float]) -> bool:
    """Tonight lies on the wild run's side of the runs' median, at least half as far: the run was the
    first of a mode that recurs (a second runner pool), not an accident, and stays in the spread."""
    middle = statistics.median(runs)
    far, near = outlier - middle, tonight - middle
    return far * near > 0.0 and abs(near) >= abs(far) / 2.0


def _streak(
    logs: Sequence[float], runs: Sequence[int], tolerance: float, nights: Sequence[object] | None = None
) -> tuple[tuple[int, ...], int]:
    """The longest run of newest nights that each, against the accepted runs before all of them, were
    probably a change beyond the tolerance (`_beyond` at `STREAK_QUANTILE`, a night's starts taken
    together), all on one side, with that side (+1/-1); ((), 0) when there is none. What their own
    nights saw, asked again: a change too young for the step test, which tonight may confirm. Never
    half the runs or more: that is the level, not a change of it. `nights` names each run's night
    (the runs of one session are its server starts); without it each run is a night of its own."""
    groups = _newest_nights(runs, nights)
    counts = list(itertools.accumulate(len(group) for group in groups))
    longest = next((count for count, size in enumerate(counts) if 2 * size >= len(runs)), len(groups))
    for count in range(longest, 0, -1):  # the longest streak that holds: tried longest first
        streak = {i for group in groups[:count] for i in group}
        before = [logs[i] for i in runs if i not in streak]
        side = 0
        for group in groups[:count]:  # every night on one side; the first that is not ends the try
            found = _beyond(statistics.fmean(logs[i] for i in group), before, tolerance, STREAK_QUANTILE, robust=True)
            if found == 0 or side not in (0, found):
                side = 0
                break
            side = found
        if side:
            return tuple(sorted(streak)), side
    return (), 0


def _newest_nights(runs: Sequence[int], nights: Sequence[object] | None) -> list[list[int]]:
    """`runs` grouped by night, newest night first: consecutive runs of one night are one group."""
    groups: list[list[int]] = []
    previous: object = None
    for i in reversed(runs):
        night = nights[i] if nights is not None and nights[i] is not None else ("run", i)
        if groups and night == previous:
            groups[-1].append(i)
        else:
            groups.append([i])
        previous = night
    return groups


def _beyond(value: float, before: Sequence[float], tolerance: float, quantile: float, *, robust: bool = False) -> int:
    """+1 or -1 when a log value lies beyond the tolerance of the mean of the newest `LEVEL_RUNS` of
    `before` and beyond their prediction bound (t at `quantile` · s · sqrt(1 + 1/k), s from the newest
    `SPREAD_RUNS`), else 0; 0 with fewer than `MIN_RUNS` runs before it (no spread to judge by).
    `robust`: the median and 1.4826 MAD instead, so a lone wild run among them moves neither."""
    spread = list(before[-SPREAD_RUNS:])
    if len(spread) < MIN_RUNS:
        return 0
    recent = spread[-LEVEL_RUNS:]
    level = statistics.median(recent) if robust else statistics.fmean(recent)
    shift = value - level
    low, high = Tolerance(tolerance).log_band
    if low <= shift <= high:
        return 0
    k = min(len(spread), LEVEL_RUNS)
    middle = statistics.median(spread)
    sd = 1.4826 * statistics.median(abs(x - middle) for x in spread) if robust else statistics.stdev(spread)
    reach = float(stdtrit(len(spread) - 1, quantile)) * sd * math.sqrt(1 + 1 / k)
    return 0 if abs(shift) <= reach else (1 if shift > 0 else -1)


def _shift(logs: Sequence[float], accepted: Sequence[int], part: tuple[int, int], tolerance: float) -> int:
    """+1 or -1 when a part is a change nobody accepted, else 0: its median run beyond the tolerance
    *and* beyond the accepted runs' prediction bound at `PART_QUANTILE` (`_beyond`) — the question a
    single night is asked, put to the part's typical run. A real step moves every run of its part past
    both; a key whose runner pools mix differently for a while moves its median, not past the spread
    the key has shown, and stays accepted (a plain window would follow it the same way)."""
    runs = [logs[i] for i in accepted[-SPREAD_RUNS:]]
    out = {r.index for r in reject_outliers(runs)}
    kept = [y for j, y in enumerate(runs) if j not in out]
    return _beyond(_median(logs, part), kept, tolerance, PART_QUANTILE) if kept else 0


def _median(logs: Sequence[float], part: tuple[int, int]) -> float:
    """A part's level: its median, so a lone wild run inside it does not move it."""
    return statistics.median(logs[part[0] : part[1]])
