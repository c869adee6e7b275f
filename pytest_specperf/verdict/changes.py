"""Changes in a key's run history: a step since some run, or a drift, judged against real noise.

Why: a drift of 1-2% a week never fails a single night's check, and a step that happened three
nights ago is easier to act on when the report names the run it started with. But a detector that
assumes independent runs cries wolf on real CI series, whose neighbouring runs correlate at
+0.55..+0.77 (an independent-noise detector named a "change" on 86-93 of 98 unchanged nights of
such a series), and one that is searched in many series every night finds something somewhere.

On the log scale (a step of -8% is the same size at 70 tok/s and at 700), for a series y_1..y_n:

* Outliers: a run far from its neighbours on both sides (`OUTLIER_SIGMAS`) is set aside: a change
  holds on two runs, so one such run is noise (the nightly check judges it).
* Shapes: the best step (the split, >= `MIN_SIZE` runs each side, that explains most of the
  variance) and the least-squares line. A line that fits better than one step but not better than
  two is a staircase, not a drift.
* Noise: sigma from the shape's residuals, unbiased under AR(1) (E[e'e] = sigma^2 tr((I - H) R));
  serial correlation rho from the residuals' lag-1 autocorrelation (the pair across a split left
  out; a second step, when BIC wants one, fitted first), corrected for its small-sample bias and
  raised by `RHO_MARGIN`/sqrt(n): a short series underestimates rho, and correlated runs carry less
  evidence than independent ones. Standard errors use the AR(1) covariance with that rho.
* Significance: Student t with n - 2 df, Bonferroni over the candidate splits and the two shapes,
  at `ALPHA` / `searches` (the plugin passes the number of key series it searches that night).
  Measured (benchmarks/verdict_nights.py): unchanged keys with a change warning within 30 nights
  0.0% on independent nights and ~0.5% on AR(1) nights with rho 0.6.

`credible_drift` asks a narrower question for the verdict: is the change along a line over the
last nights credibly beyond the tolerance? `locate_change` only answers "since when" for a night
that was already flagged. Pure: no pytest, no I/O.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
from scipy.special import stdtr

from pytest_specperf.verdict.stats import DEFAULT_CONFIDENCE, Direction, Estimate, Tolerance, t_quantile

MIN_SIZE: Final = 2
#: Family-wise chance of a false change per night, over every series searched.
ALPHA: Final = 0.001
RHO_MARGIN: Final = 3.5
#: The drift test against the tolerance (`credible_drift`) needs less caution: its question is narrower.
DRIFT_RHO_MARGIN: Final = 0.5
#: Nights a drift test needs: over fewer, a slow swing of correlated noise passes for a line.
DRIFT_NIGHTS: Final = 15
#: How much of a correlated series' slow swings a fitted line absorbs: E[r] ~ rho (1 - ABSORBED / n).
ABSORBED: Final = 5.0
RHO_MAX: Final = 0.9
OUTLIER_SIGMAS: Final = 5.0
SIGMA_FLOOR: Final = 0.001


_MAD: Final = 1.4826


@dataclass(frozen=True)
class ChangePoint:
    """A step at `index` (the first run after it) or a drift since `index`, with its size.

    `change` is the later level over the earlier one (step: the mean after over the mean before;
    drift: the fitted value at the last run over the one at `index`), with its interval.
    """

    index: int
    change: Estimate
    p_value: float
    kind: Literal["step", "drift"] = "step"
    per_run: float | None = None  # a drift's change per run, as a ratio
    variance: float | None = None  # of log(change.value), where the interval can be asked at another confidence
    df: float = math.inf

    @property
    def percent(self) -> str:
        return change_percent(self.change)

    def change_at(self, confidence: float) -> Estimate:
        """`change` with its interval at another confidence (as `HistoryComparison.ratio_at`)."""
        if self.variance is None or self.variance == 0.0:
            return self.change
        d = math.log(self.change.value)
        half = t_quantile(confidence, self.df) * math.sqrt(self.variance)
        return Estimate(self.change.value, math.exp(d - half), math.exp(d + half), self.change.n, confidence)


def change_size(ratio: Estimate, kind: str = "step", per_run: float | None = None) -> str:
    """'-8.1% [-9.5, -6.7]', or for a drift 'drifting -0.30% per run, -9.0% [-11.2, -6.8]'."""
    size = change_percent(ratio)
    if kind == "drift" and per_run is not None:
        return f"drifting {(per_run - 1) * 100:+.2f}% per run, {size}"
    return size


def change_percent(change: Estimate) -> str:
    """A ratio as a change in percent with its interval: '-8.1% [-9.5, -6.7]'."""
    text = f"{(change.value - 1) * 100:+.1f}%"
    if change.bounded:
        text += f" [{(change.low - 1) * 100:+.1f}, {(change.high - 1) * 100:+.1f}]"
    return text


def newest_change(values: Sequence[float], *, searches: int = 1) -> ChangePoint | None:
    """The change in force at the end of a series of positive per-run values (oldest first): the
    newest significant one, found by binary segmentation to the right of each significant split."""
    found = change_points(values, searches=searches, right_only=True)
    return found[-1] if found else None


def change_points(values: Sequence[float], *, searches: int = 1, right_only: bool = False) -> list[ChangePoint]:
    """Significant changes of a series of positive per-run values, oldest first (binary segmentation:
    the best step or drift of the whole series, then of the parts on either side of a step)."""
    xs = [float(v) for v in values]
    if any(not math.isfinite(v) or v <= 0.0 for v in xs):
        return []
    logs = np.log(np.asarray(xs))
    keep = np.flatnonzero(~_isolated_outliers(logs))
    return _segment(logs[keep], keep, searches, right_only)


def step_splits(values: Sequence[float], *, searches: int = 1) -> list[int]:
    """Where a series of positive per-run values splits into levels: the first run after each
    significant step, oldest first (binary segmentation with steps alone: a slow drift shows as a
    staircase, which is how `level.accepted_level` sees it leave the tolerance). Isolated outliers
    split nothing."""
    xs = [float(v) for v in values]
    if any(not math.isfinite(v) or v <= 0.0 for v in xs):
        return []
    logs = np.log(np.asarray(xs))
    keep = np.flatnonzero(~_isolated_outliers(logs))
    return [p.index for p in _segment(logs[keep], keep, searches, False, drift=False)]


def _segment(
    logs: np.ndarray, where: np.ndarray, searches: int, right_only: bool, *, drift: bool = True
) -> list[ChangePoint]:
    found = _best_change(logs, searches, drift=drift)
    if found is None:
        return []
    local, change = found
    point = _at(change, int(where[local]))
    if change.kind == "drift":
        return [point]
    left = [] if right_only else _segment(logs[:local], where[:local], searches, right_only, drift=drift)
    right = _segment(logs[local:], where[local:], searches, right_only, drift=drift)
    return [*left, point, *right]


def _at(change: ChangePoint, index: int) -> ChangePoint:
    return ChangePoint(index, change.change, change.p_value, change.kind, change.per_run)


def _best_change(logs: np.ndarray, searches: int, *, drift: bool = True) -> tuple[int, ChangePoint] | None:
    """The best step and the best line, each tested with the serial correlation of its own
    residuals (a staircase leaves a line wavy residuals, a line leaves a step sloped ones); of the
    significant ones the better fit wins."""
    n = logs.size
    if n < 2 * MIN_SIZE:
        return None
    level = ALPHA / max(1, searches) / (2.0 if drift else 1.0)  # two shapes searched, or steps alone
    plain_step, plain_line = _fit_step(logs, 0.0), _fit_drift(logs, 0.0)
    two = _two_steps(logs) if n >= 3 * MIN_SIZE else (math.inf, logs, 0, 0)
    noise = None
    if 0.0 < two[0] < plain_step.rss and n * math.log(plain_step.rss / two[0]) > 2.0 * math.log(n):  # BIC
        noise = (logs - two[1], (two[2], two[3]))  # a second change: judge the first against the rest
        step_rho = _rho_used(noise[0], 0, margin=RHO_MARGIN, splits=noise[1])
    else:
        step_rho = _rho_used(logs - _fitted(logs, plain_step), plain_step.at, margin=RHO_MARGIN)
    step = _fit_step(logs, step_rho, noise)
    line = _fit_drift(logs, _rho_used(logs - _fitted(logs, plain_line), 0, margin=RHO_MARGIN))
    found = []
    if (p := _p_value(step.t, step.df, n - 2 * MIN_SIZE + 1)) < level:
        found.append((step.rss, step.at, ChangePoint(step.at, _ratio(step.change, step.se, step.df), 2 * p, "step")))
    if drift and (p := _p_value(line.t, line.df, 1)) < level:
        span = n - 1
        change = _ratio(line.change * span, line.se * span, line.df)
        found.append((line.rss, 0, ChangePoint(0, change, 2 * p, "drift", math.exp(line.change))))
    if not found:
        return None
    if found[-1][2].kind == "drift" and two[0] < line.rss:
        found.pop()  # a staircase: a line fits better than one step, but not better than two: no drift
    if not found:
        return None
    _, at, point = min(found, key=lambda f: f[0])
    return at, point


def _two_steps(y: np.ndarray) -> tuple[float, np.ndarray, int, int]:
    """The best fit with three levels (two steps, MIN_SIZE runs each): its residual sum of squares,
    the fitted values and the two splits. Every pair of splits at once (a series of 500 runs is
    125,000 pairs: one array, not a Python loop)."""
    n = y.size
    sums, squares = np.concatenate([[0.0], np.cumsum(y)]), np.concatenate([[0.0], np.cumsum(y * y)])

    def rss(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        total = sums[b] - sums[a]
        return squares[b] - squares[a] - total * total / (b - a)

    firsts = np.arange(MIN_SIZE, n - 2 * MIN_SIZE + 1)
    seconds = np.arange(2 * MIN_SIZE, n - MIN_SIZE + 1)
    if firsts.size == 0 or seconds.size == 0:
        return math.inf, y, MIN_SIZE, n - MIN_SIZE
    i, j = firsts[:, None], seconds[None, :]  # a table of pairs; a second split too close is no pair
    with np.errstate(divide="ignore", invalid="ignore"):  # the pairs too close, set aside below, divide by 0
        middle = rss(i, j)
    totals = rss(np.zeros_like(firsts), firsts)[:, None] + middle + rss(seconds, np.full_like(seconds, n))[None, :]
    totals[j < i + MIN_SIZE] = np.inf
    best = int(np.argmin(totals))  # the first best pair in the order of (first split, second split)
    total, a, b = float(totals.flat[best]), int(firsts[best // seconds.size]), int(seconds[best % seconds.size])
    levels = [(sums[e] - sums[s]) / (e - s) for s, e in ((0, a), (a, b), (b, n))]
    fitted = np.concatenate([np.full(a, levels[0]), np.full(b - a, levels[1]), np.full(n - b, levels[2])])
    return total, fitted, a, b


def credible_drift(
    values: Sequence[float], max_regression: float, *, lower: bool = True, at: Sequence[float] | None = None
) -> ChangePoint | None:
    """A straight line through the series whose change from the first night to the last is credibly
    beyond the tolerance (the 90% interval's near end beyond it), in the bad direction.

    Not a search: one line, one one-sided test at the level of a night's own check. It is how a slow
    drift becomes a REGRESSION: each night within the tolerance of a level that drifts with it,
    the history absorbs it night by night. A question about the tolerance, not about "any change",
    so wandering noise (even correlated, whose standard error the AR(1) model widens) seldom
    crosses it. `at`: each value's night (the starts of one night share it; default: one a night)."""
    xs = [float(v) for v in values]
    if len(xs) < 2 * MIN_SIZE or any(not math.isfinite(v) or v <= 0.0 for v in xs):
        return None
    logs = np.log(np.asarray(xs))
    positions = np.asarray(at if at is not None else range(len(xs)), dtype=float)
    keep = ~_isolated_outliers(logs)
    logs, positions = logs[keep], positions[keep]
    if positions[-1] - positions[0] < DRIFT_NIGHTS - 1:
        return None
    line = _fit_drift(logs, 0.0, positions)
    line = _fit_drift(
        logs, _rho_used(logs - _fitted(logs, line, positions), 0, margin=DRIFT_RHO_MARGIN, absorbed=ABSORBED), positions
    )
    span = float(positions[-1] - positions[0])
    change = _ratio(line.change * span, line.se * span, line.df)
    bound = Tolerance(
        max_regression, Direction.HIGHER_IS_BETTER if lower else Direction.LOWER_IS_BETTER
    ).regression_bound
    beyond = change.high < bound if lower else change.low > bound
    return (
        ChangePoint(0, change, 2.0 * _p_value(line.t, line.df, 1), "drift", math.exp(line.change)) if beyond else None
    )


def _ratio(log_change: float, se: float, df: float) -> Estimate:
    half = t_quantile(DEFAULT_CONFIDENCE, df) * se
    low, high = math.exp(log_change - half), math.exp(log_change + half)
    return Estimate(math.exp(log_change), low, high, 0, DEFAULT_CONFIDENCE)


def _isolated_outliers(logs: np.ndarray) -> np.ndarray:
    """Runs far from their neighbours on *both* sides (the median of up to two before it, and of
    up to two after it), in the same direction: a change holds on two runs, so such a run is noise,
    not a change, while the first run of a step is close to the runs after it. Sigma from the
    first differences (MAD / sqrt 2). The first and the last run are never set aside. The median of
    two is their mean, so every run's neighbours are taken at once (the same floats as a median per
    run, a year of nights in one pass rather than 700 calls of `np.median`)."""
    n = logs.size
    flagged = np.zeros(n, dtype=bool)
    if n < 3:
        return flagged
    diffs = np.diff(logs)
    sigma = max(_MAD * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2.0), SIGMA_FLOOR)
    pairs = (logs[:-1] + logs[1:]) / 2.0  # pairs[k]: the median of runs k and k + 1
    before = np.concatenate([logs[:1], pairs[: n - 3]])  # of runs 1 .. n - 2: the one or two before
    after = np.concatenate([pairs[2 : n - 1], logs[n - 1 :]])  # and the two or one after
    left, right = logs[1:-1] - before, logs[1:-1] - after
    flagged[1:-1] = (left * right > 0.0) & (np.minimum(np.abs(left), np.abs(right)) > OUTLIER_SIGMAS * sigma)
    return flagged


@dataclass(frozen=True)
class _Shape:
    """One shape fitted to a series: its change, residual sum of squares and t statistic."""

    at: int  # a step's first run after it; 0 for a drift
    change: float  # log change: after - before for a step, the slope per run for a drift
    rss: float
    se: float  # standard error of `change`
    t: float
    df: float


def _fit_step(y: np.ndarray, rho: float, noise: tuple[np.ndarray, tuple[int, ...]] | None = None) -> _Shape:
    """The split (>= MIN_SIZE runs each side) that explains most of the variance. `noise`: the
    residuals of a better fit (more levels, split where given) to take sigma from, when the series
    has more than one change: one step's residuals would count the other change as noise."""
    n = y.size
    splits = np.arange(MIN_SIZE, n - MIN_SIZE + 1)
    sums = np.cumsum(y)
    before = sums[splits - 1] / splits
    after = (sums[-1] - sums[splits - 1]) / (n - splits)
    gain = splits * (n - splits) / n * (after - before) ** 2
    best = int(np.argmax(gain))
    j = int(splits[best])
    resid = y - np.where(np.arange(n) < j, before[best], after[best])
    cuts = (j,) if noise is None else noise[1]
    bounds = [0, *cuts, n]
    trace = sum(_quadratic(np.ones(b - a), rho) / (b - a) for a, b in itertools.pairwise(bounds))
    blocks = [np.ones(j), np.ones(n - j)]
    weights = np.concatenate([-blocks[0] / j, blocks[1] / (n - j)])
    shape = _shape(j, float(after[best] - before[best]), resid if noise is None else noise[0], n - trace, weights, rho)
    return dataclasses.replace(shape, rss=float((resid**2).sum()))


def _fit_drift(y: np.ndarray, rho: float, at: np.ndarray | None = None) -> _Shape:
    """The least-squares line through the series (at positions `at`, default 0, 1, 2, ...)."""
    n = y.size
    x = np.arange(n, dtype=float) if at is None else np.asarray(at, dtype=float)
    x = x - x.mean()
    sxx = float((x**2).sum())
    slope = float(((y - y.mean()) * x).sum() / sxx)
    resid = y - y.mean() - slope * x
    trace = _quadratic(np.ones(n), rho) / n + _quadratic(x, rho) / sxx
    return _shape(0, slope, resid, n - trace, x / sxx, rho)


def _shape(at: int, change: float, resid: np.ndarray, left: float, weights: np.ndarray, rho: float) -> _Shape:
    """Sigma from the residuals, unbiased under AR(1): E[e'e] = sigma^2 tr((I - H) R), which for
    correlated runs is well below the n - 2 of independent ones (a residual variance from 15 runs
    at rho 0.6 would otherwise be ~25% low)."""
    n = resid.size
    sigma = max(math.sqrt(float((resid**2).sum()) / left), SIGMA_FLOOR)
    se = sigma * math.sqrt(_quadratic(weights, rho))
    df = float(n - 2)
    return _Shape(at, change, float((resid**2).sum()), se, abs(change) / se, df)


def _fitted(y: np.ndarray, shape: _Shape, at: np.ndarray | None = None) -> np.ndarray:
    """The values `shape` fits to y: two levels split at `shape.at`, or a line (at positions `at`)."""
    n = y.size
    if shape.at:
        return np.where(np.arange(n) < shape.at, y[: shape.at].mean(), y[shape.at :].mean())
    x = np.arange(n, dtype=float) if at is None else np.asarray(at, dtype=float)
    return y.mean() + shape.change * (x - x.mean())


def _rho_used(
    resid: np.ndarray, split: int, *, margin: float = 0.0, absorbed: float = 0.0, splits: tuple[int, ...] = ()
) -> float:
    """Serial correlation of the runs: the lag-1 autocorrelation of the better shape's residuals
    (for a step, the pair across its split left out), corrected for its small-sample bias and
    raised by `RHO_MARGIN`/sqrt(n), within [0, RHO_MAX].

    Residuals of the fitted shape rather than of the series' mean: a real step or drift would
    otherwise pass for correlation and hide itself. A fitted shape also absorbs part of a wandering
    series' slow swings, so the estimate runs low on correlated noise; the margin pays for that
    (measured on AR(1) series with rho 0.6 in benchmarks/verdict_nights.py).
    """
    n = resid.size
    if n <= 2 * MIN_SIZE:
        return RHO_MAX  # too short to tell: the most cautious reading
    den = float((resid**2).sum())
    pairs = resid[1:] * resid[:-1]
    for at in {split, *splits} - {0}:
        pairs[at - 1] = 0.0
    r = float(pairs.sum()) / den if den > 0.0 else 0.0
    unbiased = (n * r + 3.0) / (n - 3.0) / max(0.5, 1.0 - absorbed / n)
    return min(max(unbiased + margin / math.sqrt(n), 0.0), RHO_MAX)


def _quadratic(weights: np.ndarray, rho: float) -> float:
    """w' R w for the AR(1) correlation matrix R (R_st = rho^|s-t|), through the weights' lagged products."""
    n = weights.size
    total = float(weights @ weights)
    power = 1.0
    for h in range(1, n):
        power *= rho
        if power < 1e-12:
            break
        total += 2.0 * power * float(weights[h:] @ weights[: n - h])
    return max(total, 1e-12)


def _p_value(statistic: float, df: float, tests: int) -> float:
    """Two-sided Student t p-value of `statistic`, Bonferroni-adjusted for `tests` candidates."""
    return min(1.0, tests * 2.0 * float(stdtr(df, -statistic)))


def locate_change(values: Sequence[float], *, lower: bool = True) -> ChangePoint | None:
    """Where the change that a flagged night belongs to began: the split that explains most of the
    series, its later part ending with the last value (which may be alone), held against the runs
    before it (runs that are isolated outliers there left out).

    Not a detector: the night was already flagged, so this only answers "since when", with a single
    test at the interval's own level; a split the data do not support gives None (the report then
    says "since tonight"), and so does a split in the other direction (`lower`: the later part is
    the lower one). The series is the current segment, so a change acknowledged with
    `--specperf-update` is not in it.
    """
    xs = [float(v) for v in values]
    if len(xs) < MIN_SIZE + 1 or any(not math.isfinite(v) or v <= 0.0 for v in xs):
        return None
    logs = np.log(np.asarray(xs))
    n = logs.size
    kept = ~_isolated_outliers(logs)
    best: tuple[float, ChangePoint] | None = None
    for j in range(MIN_SIZE, n):
        before, after = logs[:j][kept[:j]], logs[j:][kept[j:]]
        if before.size < MIN_SIZE:
            continue
        change = float(after.mean() - before.mean())
        gain = before.size * after.size / (before.size + after.size) * change * change
        resid = np.concatenate([before - before.mean(), after - after.mean()])
        df = max(1, resid.size - 2)
        sigma = max(math.sqrt(float((resid**2).sum()) / df), SIGMA_FLOOR)
        se = sigma * math.sqrt(1.0 / before.size + 1.0 / after.size)
        estimate = _ratio(change, se, df)
        supported = estimate.high < 1.0 if lower else estimate.low > 1.0
        if supported and (best is None or gain > best[0]):
            best = gain, ChangePoint(j, estimate, 2.0 * _p_value(abs(change) / se, df, 1))
    return best[1] if best else None
