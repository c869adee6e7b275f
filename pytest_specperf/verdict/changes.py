"""Change points in a key's run history (throughput, accept length), with tonight appended.

Why: a drift of 1-2% a week never fails a single night's check, and a step that happened three
nights ago is easier to act on when the report names the run it started with. The detector is
`ruptures` (PELT, least-squares cost; Killick et al. 2012), not a hand-written one.

On the log scale (a step of -8% is the same size at 70 tok/s and at 700):

* noise sigma: robust, from the median absolute deviation of first differences
  (MAD / 0.6745 / sqrt 2), so a step does not inflate it; floored at 0.1% (a deterministic
  simulator would otherwise split at every wobble);
* penalty: `PENALTY_FACTOR` · sigma² · ln n. The BIC-like 2 · sigma² · ln n flagged ~30% of
  20-run series without a change (2% noise). Measured with the Welch confirmation below, on
  seeded series of 20 runs with 2% noise (500 without a change, 300 with a -8% step), factor
  3 / 4 / 5 / 6: series falsely flagged 6.4 / 3.8 / 2.4 / 0.8%; a step 6 runs back found
  99 / 99 / 99.7 / 99%; a step 3 runs back 69 / 68 / 67 / 64%. 6 is the default: a false
  "change since ..." every ~125 series costs more trust than finding a step one night later;
* every change PELT proposes must also pass a Welch t test between the segments on either side
  (p < `MAX_P`), so a change needs evidence, not only a cheaper fit. Segments need `MIN_SIZE`
  runs, so a change shows here from its second night; a single bad night is the regression
  check's job (verdict/history.py). benchmarks/verdict_power.py measures both.

Pure: no pytest, no I/O.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import ruptures
from scipy import stats as scipy_stats

from pytest_specperf.verdict.stats import Estimate, ratio_estimate

PENALTY_FACTOR: Final = 6.0
MIN_SIZE: Final = 2
MAX_P: Final = 0.01
SIGMA_FLOOR: Final = 0.001


@dataclass(frozen=True)
class ChangePoint:
    """A step at `index` (the first run after it): the later segment over the earlier one."""

    index: int
    change: Estimate  # ratio of segment means (after / before) with a Fieller interval
    p_value: float

    @property
    def percent(self) -> str:
        return change_percent(self.change)


def change_percent(change: Estimate) -> str:
    """A ratio as a change in percent with its interval: '-8.1% [-9.5, -6.7]'."""
    text = f"{(change.value - 1) * 100:+.1f}%"
    if change.bounded:
        text += f" [{(change.low - 1) * 100:+.1f}, {(change.high - 1) * 100:+.1f}]"
    return text


def robust_sigma(logs: Sequence[float]) -> float:
    """Noise of one value, from the MAD of first differences (a step moves one difference only)."""
    diffs = np.diff(np.asarray(logs, dtype=float))
    if diffs.size == 0:
        return SIGMA_FLOOR
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return max(mad / 0.6745 / math.sqrt(2.0), SIGMA_FLOOR)


def change_points(values: Sequence[float], *, penalty_factor: float = PENALTY_FACTOR) -> list[ChangePoint]:
    """Confirmed change points of a series of positive per-run values, oldest first."""
    xs = [float(v) for v in values]
    if len(xs) < 2 * MIN_SIZE or any(not math.isfinite(v) or v <= 0.0 for v in xs):
        return []
    logs = np.log(np.asarray(xs))
    sigma = robust_sigma(logs)
    penalty = penalty_factor * sigma * sigma * math.log(len(xs))
    ends = ruptures.Pelt(model="l2", min_size=MIN_SIZE, jump=1).fit(logs.reshape(-1, 1)).predict(pen=penalty)
    bounds = [0, *ends]
    found = []
    for i in range(1, len(bounds) - 1):
        before, after = xs[bounds[i - 1] : bounds[i]], xs[bounds[i] : bounds[i + 1]]
        p = _welch_p(before, after)
        if p < MAX_P:
            found.append(ChangePoint(bounds[i], ratio_estimate(after, before), p))
    return found


def _welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Welch p-value; two constant segments that differ are a certain change."""
    if statistics.pvariance(a) == 0.0 and statistics.pvariance(b) == 0.0:
        return 0.0 if statistics.fmean(a) != statistics.fmean(b) else 1.0
    with warnings.catch_warnings():  # a constant segment is no precision problem here
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(scipy_stats.ttest_ind(a, b, equal_var=False).pvalue)
