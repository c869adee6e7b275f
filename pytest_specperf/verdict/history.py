"""Tonight against a history of runs: a model with round noise *and* run-to-run variance.

Why: every server start carries its own offset (clocks, NCCL rings, memory layout, the node it
landed on). A comparison with the rounds of one stored run treats that offset as signal, and a
nightly gate then cries wolf: with 2% night-to-night spread a single-baseline check raises a
false REGRESSION on ~2% of checks, a third of 20-check nights (benchmarks/verdict_power.py).

Model, on the log scale (so "ratio" and "percent" mean the same thing whatever the metric's unit)::

    y_i = log(mean of run i's rounds) = mu + b_i + e_i,   b_i ~ N(0, tau^2)   (run offset)
                                                            e_i ~ N(0, v_i)     (round noise of the mean)

`v_i` is the delta-method variance of run i's mean, s_i^2 / (n_i * mean_i^2). Tonight is run 0,
*one more run*, not the mean of infinitely many, so the interval for tonight's ratio to the
segment level ybar = mean(y_1..y_k) is a prediction interval::

    d = y_0 - ybar,   Var(d) = tau^2 + v_0 + (tau^2 + vbar) / k

* k >= `MIN_RUNS` recorded runs: S^2 = sample variance of y_1..y_k estimates tau^2 + vbar, so
  Var(d) = S^2 / k + tau_hat^2 + v_0 with tau_hat^2 = max(0, S^2 - vbar) (method of moments, as
  DerSimonian-Laird). With no round noise this is exactly the textbook prediction interval
  ybar ± t(k-1) · S · sqrt(1 + 1/k); Welch-Satterthwaite combines it with tonight's round noise.
* k < `MIN_RUNS`: two runs say next to nothing about a spread (a 90% interval for a standard
  deviation from 2 runs spans a factor of ~30), so tau is a prior, the config's `run_to_run_cv`,
  taken as known; the report says so and how many recorded runs will replace it.

The ratio reported is exp(d), tonight over the segment's geometric level; its interval is
exp(d ± t · sqrt(Var(d))). The three-way decision and `max_regression` apply to it unchanged
(stats.classify_ratio). Everything here is pure: no pytest, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from pytest_specperf.verdict.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_MAX_ROUNDS,
    Decision,
    Estimate,
    RoundsAdvice,
    _t_quantile,
)

#: Recorded runs a segment needs before its own spread replaces the prior run-to-run CV.
MIN_RUNS: Final = 3


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
class HistoryComparison:
    """Tonight's ratio to the segment level, and what the interval rests on."""

    ratio: Estimate
    level: float  # the segment's geometric level, in the metric's unit
    runs: int  # recorded runs in the segment
    run_cv: float  # run-to-run CV used: estimated from the segment, or the prior
    prior: bool  # True when run_cv is the configured prior (fewer than MIN_RUNS runs)
    fixed_variance: float  # Var(d) that more rounds tonight cannot shrink
    fixed_df: float  # its degrees of freedom (inf for a prior)
    round_cv: float | None  # tonight's round-to-round CV

    @property
    def runs_to_replace_prior(self) -> int:
        """How many more recorded runs until the segment's own spread is used."""
        return max(0, MIN_RUNS - self.runs) if self.prior else 0

    def describe(self) -> str:
        """'4 recorded runs, run-to-run CV 1.2%' or '1 recorded run, prior run-to-run CV 2.0% (...)'."""
        runs = f"{self.runs} recorded run{'s' if self.runs != 1 else ''}"
        if not self.prior:
            return f"{runs}, run-to-run CV {self.run_cv:.1%}"
        more = self.runs_to_replace_prior
        return (
            f"{runs}, prior run-to-run CV {self.run_cv:.1%} (config run_to_run_cv; "
            f"{more} more recorded run{'s replace' if more != 1 else ' replaces'} it)"
        )


def compare_with_history(
    current: Sequence[float],
    runs: Sequence[Sequence[float]],
    prior_cv: float,
    confidence: float = DEFAULT_CONFIDENCE,
) -> HistoryComparison:
    """Tonight's rounds (`current`) against the segment's runs (each a list of round samples)."""
    if not runs:
        raise ValueError("compare_with_history needs at least one recorded run")
    if prior_cv < 0.0:
        raise ValueError(f"prior run-to-run CV must be >= 0, got {prior_cv}")
    tonight = RunLevel.of(current)
    levels = [RunLevel.of(r) for r in runs]
    k = len(levels)
    ybar = math.fsum(r.log_mean for r in levels) / k
    vbar = math.fsum(r.variance for r in levels) / k
    d = tonight.log_mean - ybar
    v0 = tonight.variance
    df0 = tonight.rounds - 1
    if k >= MIN_RUNS:
        s2 = math.fsum((r.log_mean - ybar) ** 2 for r in levels) / (k - 1)
        tau2 = max(0.0, s2 - vbar)
        fixed = tau2 + s2 / k
        fixed_df: float = k - 1
        prior = False
    else:
        tau2 = prior_cv * prior_cv
        fixed = tau2 * (1.0 + 1.0 / k) + vbar / k
        fixed_df = math.inf if vbar == 0.0 else _satterthwaite(
            [(tau2 * (1.0 + 1.0 / k), math.inf), (vbar / k, sum(r.rounds - 1 for r in levels) or 1)]
        )
        prior = True
    n = tonight.rounds
    round_cv = math.sqrt(v0 * n) if n >= 2 else None
    level = math.exp(ybar)
    if n < 2 and fixed == 0.0:
        ratio = Estimate.unknown(math.exp(d), n, confidence)
    else:
        total = fixed + v0
        df = _satterthwaite([(fixed, fixed_df), (v0, df0 if df0 > 0 else math.inf)])
        half = _t_quantile(confidence, df) * math.sqrt(total)
        ratio = Estimate(math.exp(d), math.exp(d - half), math.exp(d + half), n, confidence, round_cv)
    return HistoryComparison(ratio, level, k, math.sqrt(tau2), prior, fixed, fixed_df, round_cv)


def advise_history(
    comparison: HistoryComparison, bound: float, decision: Decision, *, max_rounds: int = DEFAULT_MAX_ROUNDS
) -> RoundsAdvice:
    """Would more rounds tonight decide an INCONCLUSIVE history check? Only tonight's round noise
    shrinks with them; the run-to-run part (`fixed_variance`) does not, and often dominates.

    A night whose point estimate already lies beyond the tolerance gets rounds up to `max_rounds`
    even when the interval is not expected to clear the bound at tonight's estimate: its round
    noise is still a share of the interval (a third at 3% round CV), and the estimate itself moves.
    This is what lifts first-night detection of a -10% change from 68% to 76% with 10 recorded runs
    (benchmarks/verdict_power.py), for +0.0-0.3 rounds per unchanged night."""
    n = comparison.ratio.n
    if decision is not Decision.INCONCLUSIVE:
        return RoundsAdvice(False, None, f"already decided ({decision.value})")
    if comparison.round_cv is None:
        return RoundsAdvice(n < max_rounds, None, f"spread unknown after {n} round(s); more rounds will show it")
    beyond = comparison.ratio.value < bound if bound < 1.0 else comparison.ratio.value > bound
    if beyond and n < max_rounds:
        return RoundsAdvice(
            True, max_rounds, f"tonight's estimate is beyond {bound:g}; up to {max_rounds} rounds shrink its round noise"
        )
    gap = abs(math.log(comparison.ratio.value) - math.log(bound))
    for rounds in range(n + 1, max_rounds + 1):
        v0 = comparison.round_cv**2 / rounds
        df = _satterthwaite([(comparison.fixed_variance, comparison.fixed_df), (v0, rounds - 1)])
        if _t_quantile(comparison.ratio.confidence, df) * math.sqrt(comparison.fixed_variance + v0) < gap:
            return RoundsAdvice(True, rounds, f"round CV {comparison.round_cv:.1%}; ~{rounds} rounds would resolve it")
    return RoundsAdvice(
        False,
        None,
        f"run-to-run variance ({comparison.describe()}) keeps the interval across {bound:g}; "
        f"more rounds tonight cannot resolve it, more recorded nights can",
    )


def _satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance estimates (variance, df) pairs."""
    total = math.fsum(v for v, _ in parts)
    den = math.fsum(v * v / df for v, df in parts if v > 0.0 and math.isfinite(df))
    return total * total / den if den > 0.0 else math.inf


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
    numerator: Sequence[float],
    denominator: Sequence[float],
    run_cv: float,
    confidence: float = DEFAULT_CONFIDENCE,
    spread: SpeedupSpread | None = None,
) -> Estimate:
    """Ratio of two servers' round means where each side is one server start: on the log scale
    Var = v_x + v_y + between, Welch-Satterthwaite df. `between` is the recorded speedups' own
    start-to-start variance (`spread`, k - 1 df) when given, else the prior 2·run_cv² (both starts
    carry their own offset; taken as known).

    With run_cv 0 and no spread this is the log-scale twin of the Fieller ratio interval (stats.ratio_estimate)."""
    x, y = RunLevel.of(numerator), RunLevel.of(denominator)
    d = x.log_mean - y.log_mean
    n = min(x.rounds, y.rounds)
    between, between_df = (spread.variance, spread.df) if spread is not None else (2.0 * run_cv * run_cv, math.inf)
    if n < 2 and between == 0.0:
        return Estimate.unknown(math.exp(d), n, confidence)
    df = _satterthwaite(
        [(between, between_df), (x.variance, x.rounds - 1 or math.inf), (y.variance, y.rounds - 1 or math.inf)]
    )
    half = _t_quantile(confidence, df) * math.sqrt(between + x.variance + y.variance)
    return Estimate(math.exp(d), math.exp(d - half), math.exp(d + half), n, confidence)
