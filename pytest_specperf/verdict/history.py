"""Tonight against a history of runs: a model with round noise *and* run-to-run variance.

Why: every server start carries its own offset (clocks, NCCL rings, memory layout, the node it
landed on). A comparison with the rounds of one stored run treats that offset as signal, and a
nightly gate then cries wolf: with 2% night-to-night spread a single-baseline check raises a
false REGRESSION on ~2% of checks, a third of 20-check nights (benchmarks/verdict_power.py).

Model, on the log scale (so "ratio" and "percent" mean the same thing whatever the metric's unit)::

    y_i = log(mean of run i's rounds) = mu + b_i + e_i,   b_i ~ N(0, tau^2)   (one server start)
                                                            e_i ~ N(0, v_i)     (round noise of the mean)

`v_i` is the delta-method variance of run i's mean, s_i^2 / (n_i * mean_i^2). Tonight is one more
run — or the mean of s runs when it was confirmed on a second server start (`NightLevel`) — so the
interval for tonight's ratio to the segment level ybar = mean(y_1..y_k) is a prediction interval::

    d = y_0 - ybar,   Var(d) = tau^2 / s + v_0 + (tau^2 + vbar) / k

* k >= `MIN_RUNS` runs: S^2 = sample variance of y_1..y_k estimates tau^2 + vbar, so
  tau_hat^2 = max(0, S^2 - vbar) (method of moments, as DerSimonian-Laird) and
  Var(d) = tau_hat^2 / s + S^2 / k + v_0. With s = 1 and no round noise this is exactly the
  textbook prediction interval ybar ± t(k-1) · S · sqrt(1 + 1/k). Degrees of freedom: Welch-
  Satterthwaite over the parts, S^2 with k - 1 (`_fixed_part`).
* k < `MIN_RUNS`: two runs say next to nothing about a spread (a 90% interval for a standard
  deviation from 2 runs spans a factor of ~30), so tau is a prior, the config's `run_to_run_cv`,
  taken as known — but never below what tonight shows (`floors`): the round-to-round CV of tonight's
  starts (a start moves at least as much as its rounds do: eager mode on a small model read 19% from
  round to round and -17% from one start to the next, where the default prior says 2%) and, for a
  speculative key, how far the reference moved in the same session (the node's speed is in both).
  The report says which it was (`spread_source`) and how many recorded runs will replace it.

The history defends itself (`reject_outliers`): one bad recorded run would otherwise inflate S and
blind the gate (a -15% run among 10 drops first-night detection of a -10% change from 75% to ~1%).
A run whose deleted residual lies beyond t_0.999(k - 2) is left out of the level and the spread;
it stays in the file, and the report names it.

The ratio reported is exp(d), tonight over the segment's geometric level; its interval is
exp(d ± t · sqrt(Var(d))). The decision and `max_regression` apply to it unchanged
(stats.classify_ratio). Everything here is pure: no pytest, no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from scipy.special import chdtri

from pytest_specperf.verdict.stats import DEFAULT_CONFIDENCE, Estimate, Tolerance, satterthwaite, t_quantile

#: Recorded runs a segment needs before its own spread replaces the prior run-to-run CV.
MIN_RUNS: Final = 3
#: Runs a segment needs before one of them can be rejected as an outlier.
MIN_RUNS_TO_REJECT: Final = 5
#: Family-wise chance that a clean history loses a run: the deleted-residual test of m runs is made at
#: REJECT_ALPHA / (2m) per side (Bonferroni), so a clean history of 10, 30 or 90 runs loses one in about
#: 0.5% of cases (a fixed per-run quantile lost one from a tenth of 10-run and 29% of 30-run ones).
REJECT_ALPHA: Final = 0.005
#: More runs than this beyond the bound are no outliers but a mode of the key (a second runner pool):
#: they stay, and widen the spread as they should.
MAX_OUTLIERS: Final = 1
#: Power the smallest detectable change is quoted at.
DETECTION_POWER: Final = 0.80
#: Where a spread came from (`HistoryComparison.spread_source`), besides "k stored runs".
PRIOR_SOURCE: Final = "prior"
ROUNDS_SOURCE: Final = "tonight's rounds"
REFERENCE_SOURCE: Final = "the reference's movement"


@dataclass(frozen=True)
class RunLevel:
    """One run seen from the history: log of its round mean and that mean's (relative) variance."""

    log_mean: float
    variance: float  # delta-method variance of log(mean): s^2 / (n * mean^2); 0 with one round
    rounds: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> RunLevel:
        xs = [float(x) for x in samples]
        if not xs or any(not math.isfinite(x) or x <= 0.0 for x in xs):
            raise ValueError(f"run samples must be finite and positive, got {xs}")
        n = len(xs)
        mean = math.fsum(xs) / n
        if n < 2 or all(x == xs[0] for x in xs):
            return cls(math.log(mean), 0.0, n)
        var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
        return cls(math.log(mean), var / (n * mean * mean), n)


@dataclass(frozen=True)
class NightLevel:
    """Tonight: the mean of one or more server starts' log means (a confirmation adds a start)."""

    log_mean: float
    variance: float  # round noise of the mean over starts: sum(v_j) / s^2
    df: float  # its degrees of freedom (inf without round noise)
    starts: int
    rounds: int  # rounds of every start together

    @classmethod
    def of(cls, starts: Sequence[Sequence[float]]) -> NightLevel:
        if not starts:
            raise ValueError("tonight needs at least one start with samples")
        levels = [RunLevel.of(s) for s in starts]
        s = len(levels)
        variance = math.fsum(r.variance for r in levels) / (s * s)
        df = satterthwaite([(r.variance / (s * s), r.rounds - 1 if r.rounds > 1 else math.inf) for r in levels])
        return cls(math.fsum(r.log_mean for r in levels) / s, variance, df, s, sum(r.rounds for r in levels))


@dataclass(frozen=True)
class Rejection:
    """A recorded run left out of the level and the spread: its deleted residual t beyond `limit`."""

    index: int  # in the runs handed to `compare_with_history`
    t: float
    limit: float
    ratio: float  # the run over the level of the others

    def describe(self) -> str:
        return (
            f"{self.ratio - 1:+.1%} against the other runs (deleted-residual t = {self.t:+.1f}, limit {self.limit:.2f})"
        )


def reject_outliers(levels: Sequence[float], *, min_runs: int = MIN_RUNS_TO_REJECT) -> list[Rejection]:
    """Runs (log levels) that do not belong with the others, worst first, one at a time.

    Each run is held against the mean and spread of the *others* (the deleted residual
    t_i = (y_i - ybar_-i) / (s_-i · sqrt(1 + 1/(m-1))), Student t with m - 2 df for a normal history),
    so a wild run cannot hide by inflating the spread it is judged by. The worst beyond the
    1 - `REJECT_ALPHA` / (2m) point of t(m - 2) goes — a Bonferroni bound over the m runs tested,
    since the worst of m is what is tested — and the rest is tested again, while at least
    `min_runs` are left to judge by. One wild run goes; more than `MAX_OUTLIERS` are a mode that
    recurs (a mixed runner pool), and all stay: that is the key's spread, not an accident. Every
    run is tested, the first of a segment too: the run that `--specperf-update` started the segment
    with is held against the runs after it. Two-sided: a fast outlier widens the spread as much as
    a slow one.
    """
    kept = list(range(len(levels)))
    rejected: list[Rejection] = []
    while len(kept) > min_runs:
        m = len(kept)
        limit = _one_sided_t(1.0 - REJECT_ALPHA / (2.0 * m), m - 2)
        worst = _worst(levels, kept)
        if not abs(worst.t) > limit:
            break
        rejected.append(Rejection(worst.index, worst.t, limit, worst.ratio))
        kept.remove(worst.index)
        if len(rejected) > MAX_OUTLIERS:
            return []
    return rejected


#: how close to the largest a run's t found from the sums must come to be computed exactly (`_worst`)
_NEAR_WORST: Final = 1e-6


def _worst(levels: Sequence[float], kept: Sequence[int]) -> Rejection:
    """The run of `kept` with the largest |deleted residual t|: the one `max` over `_deleted_residual`
    of every run finds, first of equals. Each run's t is first had from the sums of all the runs at
    once (O(m), not O(m^2): a segment of a year of nights is 130,000 terms a pass otherwise); only
    the runs within `_NEAR_WORST` of the largest are computed as `_deleted_residual` does, so the run
    chosen and its numbers are that function's. Where leaving a run out leaves next to no spread,
    the sums would lose digits, and every run is computed exactly; where the runs are all equal (a
    plain server's accept length), every run's t is the first's."""
    ys = [levels[i] for i in kept]
    if len(set(ys)) == 1:
        return _deleted_residual(levels, kept, kept[0])
    m = len(ys)
    mean = math.fsum(ys) / m
    deviations = [y - mean for y in ys]
    total = math.fsum(d * d for d in deviations)
    scale = m / (m - 1)
    rests = [total - d * d * scale for d in deviations]  # squares about the others' mean, each run left out
    if min(rests) <= 1e-6 * total:
        return max((_deleted_residual(levels, kept, i) for i in kept), key=lambda r: abs(r.t))
    sizes = [abs(d) * scale / math.sqrt(rest) for d, rest in zip(deviations, rests, strict=True)]
    bound = max(sizes) * (1.0 - _NEAR_WORST)
    near = [i for i, size in zip(kept, sizes, strict=True) if size >= bound]
    return max((_deleted_residual(levels, kept, i) for i in near), key=lambda r: abs(r.t))


def _deleted_residual(levels: Sequence[float], kept: Sequence[int], i: int) -> Rejection:
    others = [levels[j] for j in kept if j != i]
    m = len(others)
    mean = math.fsum(others) / m
    sd = math.sqrt(math.fsum((y - mean) ** 2 for y in others) / (m - 1))
    gap = levels[i] - mean
    t = gap / (sd * math.sqrt(1.0 + 1.0 / m)) if sd > 0.0 else (math.copysign(math.inf, gap) if gap else 0.0)
    return Rejection(i, t, math.nan, math.exp(gap))


@dataclass(frozen=True)
class HistoryComparison:
    """Tonight's ratio to the segment level, and what the interval rests on."""

    ratio: Estimate
    level: float  # the segment's geometric level, in the metric's unit
    runs: int  # recorded runs the level rests on
    run_cv: float  # run-to-run CV used: estimated from the history, or the prior
    prior: bool  # True when run_cv is the configured prior (fewer than MIN_RUNS runs)
    fixed_variance: float  # Var(d) that more rounds tonight cannot shrink (one start)
    fixed_df: float  # its degrees of freedom (inf for a prior)
    round_cv: float | None  # tonight's round-to-round CV (first start)
    starts: int = 1
    rejected: tuple[Rejection, ...] = ()
    run_variance: float | None = None  # S^2 of the runs' log levels (None below MIN_RUNS runs)
    round_variance: float = 0.0  # their mean round noise, vbar
    serial: float = 1.0  # how much the runs' correlation in time widened the interval (serial_factor)
    spread_runs: int = 0  # recorded runs the spread rests on (at least `runs`)
    variance: float = math.inf  # Var(d), tonight's rounds included
    df: float = math.inf  # its degrees of freedom
    spread_source: str = PRIOR_SOURCE  # where run_cv came from: the prior, what tonight showed, or the runs

    @property
    def runs_to_replace_prior(self) -> int:
        """How many more recorded runs until the segment's own spread is used."""
        return max(0, MIN_RUNS - self.runs) if self.prior else 0

    def ratio_at(self, confidence: float) -> Estimate:
        """The same ratio with its interval at another confidence: the verdict asks two questions of
        one comparison (is tonight beyond the tolerance at the configured confidence, and is it a
        change at all at `verdicts.CHANGE_CONFIDENCE`)."""
        if not self.ratio.bounded or not math.isfinite(self.variance):
            return Estimate.unknown(self.ratio.value, self.ratio.n, confidence, self.ratio.cv)
        d = math.log(self.ratio.value)
        half = t_quantile(confidence, self.df) * math.sqrt(self.variance)
        return Estimate(
            self.ratio.value, math.exp(d - half), math.exp(d + half), self.ratio.n, confidence, self.ratio.cv
        )

    def describe(self) -> str:
        """'4 recorded runs, run-to-run CV 1.2%' or '1 recorded run, prior run-to-run CV 2.0% (...)': the
        baseline's side only (tonight's rounds and starts are said beside tonight's value)."""
        runs = f"{self.runs} recorded run{'s' if self.runs != 1 else ''}"
        if self.spread_runs > self.runs:
            runs += f" (the spread from {self.spread_runs})"
        if self.rejected:
            runs += (
                f" ({len(self.rejected)} more rejected as {'an outlier' if len(self.rejected) == 1 else 'outliers'})"
            )
        if not self.prior:
            if self.spread_runs > self.runs and self.runs < MIN_RUNS:
                return f"{runs}, run-to-run CV {self.run_cv:.1%} from the key's runs before the level was accepted"
            return f"{runs}, run-to-run CV {self.run_cv:.1%}"
        more = self.runs_to_replace_prior
        source = (
            "prior run-to-run CV {:.1%} (config run_to_run_cv"
            if self.spread_source == PRIOR_SOURCE
            else f"assumed run-to-run CV {{:.1%}} (what {self.spread_source} showed, above the prior"
        ).format(self.run_cv)
        return f"{runs}, {source}; {more} more recorded run{'s replace' if more != 1 else ' replaces'} it)"


def compare_with_history(
    current: Sequence[float] | Sequence[Sequence[float]],
    runs: Sequence[Sequence[float]],
    prior_cv: float,
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    reject: bool = True,
    spread_runs: Sequence[Sequence[float]] | None = None,
    serial: bool = True,
    floors: Sequence[tuple[float, str]] = (),
) -> HistoryComparison:
    """Tonight (round samples, or one list per server start) against the level of `runs` (each a
    list of round samples). Outliers among the runs are left out when `reject` (`reject_outliers`).
    `spread_runs`: the runs the run-to-run spread is estimated from, when it rests on more runs than
    the level (`level.accepted_level`: the level follows the newest 30, the spread the newest 90, so
    a key with two runner pools shows both in its spread). `serial`: widen the interval for runs that
    are credibly correlated in time (`serial_factor`). `floors`: (CV, where it was seen) that the prior
    may not be below (the reference's movement tonight); tonight's round CV is always one."""
    if not runs:
        raise ValueError("compare_with_history needs at least one recorded run")
    if prior_cv < 0.0:
        raise ValueError(f"prior run-to-run CV must be >= 0, got {prior_cv}")
    starts = _starts(current)
    tonight = NightLevel.of(starts)
    levels, rejected = _without_outliers(runs, reject)
    spread = [RunLevel.of(r) for r in spread_runs] if spread_runs else levels
    k = len(levels)
    ybar = math.fsum(r.log_mean for r in levels) / k
    d = tonight.log_mean - ybar
    factor = serial_factor([r.log_mean for r in spread]) if serial else 1.0
    first = RunLevel.of(starts[0])
    round_cv = math.sqrt(first.variance * first.rounds) if first.rounds >= 2 else None
    prior_cv, source = assumed_spread(prior_cv, [*floors, (_round_cv(starts), ROUNDS_SOURCE)])
    part = _fixed_part(k, spread, prior_cv, tonight.starts, factor)
    if not part.prior:
        source = f"{len(spread)} stored runs"
    ratio, total, df = _night_ratio(d, part, tonight, starts, confidence, round_cv)
    single = _fixed_part(k, spread, prior_cv, 1, factor)
    return HistoryComparison(
        ratio,
        math.exp(ybar),
        k,
        math.sqrt(part.tau2),
        part.prior,
        single.variance,
        single.df,
        round_cv,
        tonight.starts,
        tuple(rejected),
        part.s2,
        part.vbar,
        factor,
        len(spread),
        total,
        df,
        source,
    )


def _without_outliers(runs: Sequence[Sequence[float]], reject: bool) -> tuple[list[RunLevel], list[Rejection]]:
    """Each run's level, and the outliers among them (left out of the levels) when `reject`."""
    levels = [RunLevel.of(r) for r in runs]
    rejected = reject_outliers([r.log_mean for r in levels]) if reject else []
    out = {r.index for r in rejected}
    return [r for i, r in enumerate(levels) if i not in out], rejected


def _night_ratio(
    d: float,
    part: _FixedPart,
    tonight: NightLevel,
    starts: Sequence[Sequence[float]],
    confidence: float,
    round_cv: float | None,
) -> tuple[Estimate, float, float]:
    """Tonight's ratio exp(d) to the level with its interval, the interval's variance (inf when it is
    unknown: no spread anywhere and a start of one round) and its degrees of freedom."""
    n = tonight.rounds
    total = part.variance + tonight.variance
    df = satterthwaite([(part.variance, part.df), (tonight.variance, tonight.df)])
    if tonight.variance == 0.0 and part.variance == 0.0 and min(len(s) for s in starts) < 2:
        return Estimate.unknown(math.exp(d), n, confidence), math.inf, df
    half = t_quantile(confidence, df) * math.sqrt(total)
    return Estimate(math.exp(d), math.exp(d - half), math.exp(d + half), n, confidence, round_cv), total, df


def assumed_spread(prior_cv: float, floors: Sequence[tuple[float, str]]) -> tuple[float, str]:
    """The start-to-start CV assumed while a key's own runs cannot say it, and where it came from: the
    configured prior, unless tonight shows more (a floor, as (CV, where it was seen)). A constant
    is a guess that reality has exceeded eightfold; what tonight shows is evidence."""
    cv, source = prior_cv, PRIOR_SOURCE
    for floor, where in floors:
        if math.isfinite(floor) and floor > cv:
            cv, source = floor, where
    return cv, source


def _round_cv(starts: Sequence[Sequence[float]]) -> float:
    """The largest round-to-round CV among tonight's starts (0 with one round each)."""
    found = [RunLevel.of(s) for s in starts]
    return max((math.sqrt(r.variance * r.rounds) for r in found if r.rounds >= 2), default=0.0)


def _starts(current: Sequence[float] | Sequence[Sequence[float]]) -> list[list[float]]:
    """One list of samples per server start (a flat list is one start)."""
    if current and isinstance(current[0], Sequence):
        return [[float(x) for x in s] for s in current]  # type: ignore[union-attr]
    return [[float(x) for x in current]]  # type: ignore[arg-type]


@dataclass(frozen=True)
class _FixedPart:
    """What tonight's rounds cannot shrink: the start offset and the level's own error."""

    tau2: float  # run-to-run (start-to-start) variance
    variance: float  # Var(d) less tonight's round noise
    df: float
    prior: bool
    s2: float | None  # the spread runs' S^2 (None with the prior)
    vbar: float  # their mean round noise


def _fixed_part(k: int, spread: Sequence[RunLevel], prior_cv: float, starts: int, serial: float) -> _FixedPart:
    """tau^2 / s + S^2 / k, from the spread runs' S^2 (k_s - 1 df) and their mean round noise vbar.

    With m = len(spread) >= MIN_RUNS: tau_hat^2 / s + S^2 / k = S^2 (1/s + 1/k) - vbar / s, where S^2
    has m - 1 degrees of freedom and vbar (the runs' mean round noise) their pooled rounds:
    Satterthwaite over the two (floored at 1). Counting S^2's m - 1 alone overstates the df when
    round noise is a large share. `serial` (>= 1) widens the whole for runs correlated in time.
    Below MIN_RUNS the spread is the prior, taken as known.
    """
    m = len(spread)
    mean = math.fsum(r.log_mean for r in spread) / m
    vbar = math.fsum(r.variance for r in spread) / m
    vbar_df = float(sum(r.rounds - 1 for r in spread)) or math.inf
    if m >= MIN_RUNS:
        s2 = math.fsum((r.log_mean - mean) ** 2 for r in spread) / (m - 1)
        tau2 = max(0.0, s2 - vbar)
        if tau2 == 0.0:
            return _FixedPart(0.0, serial * s2 / k, max(1.0, (m - 1) / serial), False, s2, vbar)
        parts = [(s2 * (1.0 / starts + 1.0 / k), float(m - 1)), (-vbar / starts, vbar_df)]
        variance = tau2 / starts + s2 / k
        return _FixedPart(tau2, serial * variance, max(1.0, satterthwaite(parts) / serial), False, s2, vbar)
    tau2 = prior_cv * prior_cv
    variance = tau2 * (1.0 / starts + 1.0 / k) + vbar / k
    df = satterthwaite([(tau2 * (1.0 / starts + 1.0 / k), math.inf), (vbar / k, vbar_df)])
    return _FixedPart(tau2, variance, df, True, None, vbar)


def serial_factor(log_levels: Sequence[float]) -> float:
    """How much wider a night's interval must be when the runs wander together: (1 + r) / (1 - r)
    for r, the lag-1 autocorrelation of the runs less 1.645 / sqrt(k) (only credible correlation
    counts, so independent runs keep 1). Real CI series correlate at +0.55..+0.77 from one run to the
    next (a machine's state drifts): their spread within a window understates how far the level
    wanders, and a night in a slow swing would otherwise pass for a regression."""
    k = len(log_levels)
    if k < 2 * MIN_RUNS:
        return 1.0
    mean = math.fsum(log_levels) / k
    centred = [y - mean for y in log_levels]
    den = math.fsum(c * c for c in centred)
    if den == 0.0:
        return 1.0
    r = math.fsum(a * b for a, b in itertools.pairwise(centred)) / den
    low = min(r - 1.645 / math.sqrt(k), 0.9)
    return (1.0 + low) / (1.0 - low) if low > 0.0 else 1.0


def smallest_detectable_change(
    comparison: HistoryComparison,
    max_regression: float,
    *,
    rounds: int,
    starts: int = 1,
    higher_is_better: bool = True,
    confidence: float = DEFAULT_CONFIDENCE,
    change_confidence: float | None = None,
) -> float | None:
    """The change (as a ratio, e.g. 0.90 for -10%) that a night of `rounds` rounds on `starts`
    server starts flags as a REGRESSION with `DETECTION_POWER`, given this history.

    A night is flagged when its interval at `confidence` (two-sided) clears the tolerance,
    d + t·SE < log(1 - m), and — with `change_confidence` — its interval at that confidence clears
    the level, d + t'·SE < 0: on a noisy key the second binds. Both are bounds on the same d, so with
    the true change D, d ~ N(D, SE), P(flag) = 0.8 at D = min(log(1 - m) - t·SE, -t'·SE) - z_0.8·SE.
    SE takes tonight's round noise at the planned rounds (the first start's round CV) and the
    history's fixed part. None when tonight's round noise is unknown (one round).
    """
    if comparison.round_cv is None and comparison.round_variance > 0.0:
        return None  # tonight's round noise unknown (one round) while the runs have some
    tau2 = comparison.run_cv**2
    fixed = comparison.fixed_variance - tau2 + tau2 / starts
    noise = (comparison.round_cv or 0.0) ** 2 / (rounds * starts)
    df = satterthwaite([(fixed, comparison.fixed_df), (noise, max(1, starts * (rounds - 1)))])
    se = math.sqrt(fixed + noise)
    z = _one_sided_t(DETECTION_POWER, math.inf) * se
    beyond = t_quantile(confidence, df) * se
    changed = t_quantile(change_confidence, df) * se if change_confidence is not None else 0.0
    low, high = Tolerance(max_regression).log_band
    if higher_is_better:
        return math.exp(min(low - beyond, -changed) - z)
    return math.exp(max(high + beyond, changed) + z)


def spread_lower_bound(comparison: HistoryComparison, confidence: float = 0.90) -> float | None:
    """A lower confidence bound of the run-to-run CV (rounds' noise removed): S^2 (k - 1) / chi2
    (the upper `confidence` point) less the round noise. None while the spread is a prior. A key
    is only called too noisy when it credibly is: the estimate from 10 runs scatters by +-25%."""
    if comparison.run_variance is None:
        return None
    k = comparison.runs
    effective = comparison.run_variance * comparison.serial  # runs that wander together see less
    low = effective * (k - 1) / float(chdtri(k - 1, 1.0 - confidence)) - comparison.round_variance
    return math.sqrt(max(0.0, low))


def bimodal(values: Sequence[float], *, separation: float = 5.0, share: float = 0.2) -> tuple[float, float] | None:
    """Two groups of run values that alternate in time (so not a step, which change points name):
    the best split of the sorted log values, each group at least `share` of the runs (and 3),
    Ashman's D = sqrt(2) |m1 - m2| / sqrt(s1^2 + s2^2) above `separation`, and at least three
    switches between the groups in run order. Their geometric means, low first; None otherwise."""
    logs = [math.log(v) for v in values if v > 0.0 and math.isfinite(v)]
    n = len(logs)
    smallest = max(3, math.ceil(share * n))
    if n < 2 * smallest:
        return None
    ordered = sorted(logs)
    best: tuple[float, float, float] | None = None
    for j in range(smallest, n - smallest + 1):
        low, high = ordered[:j], ordered[j:]
        m1, m2 = math.fsum(low) / len(low), math.fsum(high) / len(high)
        v = _var(low, m1) + _var(high, m2)
        d = math.sqrt(2.0) * (m2 - m1) / math.sqrt(v) if v > 0.0 else math.inf
        if best is None or d > best[0]:
            best = (d, m1, m2)
    assert best is not None
    d, m1, m2 = best
    if not d > separation:
        return None
    cut = (m1 + m2) / 2.0
    sides = [y > cut for y in logs]
    switches = sum(1 for a, b in itertools.pairwise(sides) if a != b)
    return (math.exp(m1), math.exp(m2)) if switches >= 3 else None


def _var(xs: Sequence[float], mean: float) -> float:
    return math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0


def _one_sided_t(quantile: float, df: float) -> float:
    """The `quantile` point of Student t with df degrees of freedom (normal for inf)."""
    return t_quantile(2.0 * quantile - 1.0, df)


@dataclass(frozen=True)
class SpeedupSpread:
    """How much a speedup differs from one pair of server starts to the next, from recorded pairs.

    Each recorded pair (a speculative run and the reference run of the same session) gives a log
    speedup r_i = y_spec,i - y_ref,i with round-noise variance w_i = v_spec,i + v_ref,i. Their sample
    variance S^2 estimates the start-to-start variance of a speedup plus the mean round noise, so
    (method of moments, as for a single server) variance = max(0, S^2 - mean w), with k - 1 degrees
    of freedom. It replaces the prior 2 · run_cv^2 (two starts, each with its own offset).
    """

    runs: int
    variance: float  # start-to-start variance of a log speedup
    df: float

    @property
    def cv(self) -> float:
        return math.sqrt(self.variance)

    @classmethod
    def of(cls, pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> SpeedupSpread | None:
        """From (speculative samples, reference samples) per recorded pair; None below `MIN_RUNS` pairs."""
        if len(pairs) < MIN_RUNS:
            return None
        levels = [(RunLevel.of(x), RunLevel.of(y)) for x, y in pairs]
        logs = [x.log_mean - y.log_mean for x, y in levels]
        k = len(logs)
        mean = math.fsum(logs) / k
        s2 = math.fsum((r - mean) ** 2 for r in logs) / (k - 1)
        noise = math.fsum(x.variance + y.variance for x, y in levels) / k
        return cls(k, max(0.0, s2 - noise), float(k - 1))


def speedup_estimate(
    numerator: Sequence[float] | Sequence[Sequence[float]],
    denominator: Sequence[float] | Sequence[Sequence[float]],
    run_cv: float,
    confidence: float = DEFAULT_CONFIDENCE,
    spread: SpeedupSpread | None = None,
) -> Estimate:
    """Ratio of two servers' levels where each side is one server start (or the mean of several,
    lists per start): on the log scale Var = v_x + v_y + between, Welch-Satterthwaite df.
    `between` is the recorded speedups' own start-to-start variance (`spread`, k - 1 df) when given,
    else the prior 2·run_cv² (both starts carry their own offset; taken as known); a side measured
    on s starts carries 1/s of its share.

    With run_cv 0 and no spread this is the log-scale twin of the Fieller ratio interval (stats.ratio_estimate)."""
    x, y = NightLevel.of(_starts(numerator)), NightLevel.of(_starts(denominator))
    d = x.log_mean - y.log_mean
    n = min(x.rounds, y.rounds)
    share = 0.5 * (1.0 / x.starts + 1.0 / y.starts)
    if spread is not None:
        between, between_df = spread.variance * share, spread.df
    else:
        between, between_df = 2.0 * run_cv * run_cv * share, math.inf
    if n < 2 and between == 0.0 and x.variance == 0.0 and y.variance == 0.0:
        return Estimate.unknown(math.exp(d), n, confidence)
    df = satterthwaite([(between, between_df), (x.variance, x.df), (y.variance, y.df)])
    half = t_quantile(confidence, df) * math.sqrt(between + x.variance + y.variance)
    return Estimate(math.exp(d), math.exp(d - half), math.exp(d + half), n, confidence)
