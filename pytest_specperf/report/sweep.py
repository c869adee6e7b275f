"""Concurrency sweeps: where speculation stops paying, and which server is fastest at each load.

Why: speculative decoding trades spare compute for latency. At low concurrency the GPU has compute
to spare and a good draft wins; as batches grow, verify work competes with real tokens and the
speedup falls below 1. Users need the *crossover* concurrency (to route traffic or pick a config
per load) and, at each level, which server is fastest and whether the data can actually tell.

Crossover: the point where the speedup curve crosses 1.0, interpolated linearly in log2(concurrency)
between measured levels (sweeps are geometric: 1, 4, 16, 64). Its interval comes from inverting the
speedup intervals: the lower end is where the curve of interval *lows* crosses 1, the upper end
where the curve of interval *highs* does. That is a pointwise, not simultaneous, band, so read it as
"where the evidence places the crossing", at roughly the speedup intervals' confidence.
Open ends use infinities on the concurrency scale: -inf means "below the lowest level measured",
+inf "above the highest". They order correctly and never pretend to a number nobody measured.

Best config: the highest mean throughput at each level. Its certainty is judged by interval
overlap with the runner-up. Non-overlap is a conservative sign of a real difference; overlap does
not prove there is none, it means this data cannot order the two.

Pure: no pytest, no I/O.
"""

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from pytest_specperf.verdict.stats import Estimate


class CrossoverKind(Enum):
    """Where the speedup curve meets 1.0."""

    CROSSES = "crosses"  # falls below 1.0 between two measured levels (the expected shape)
    CROSSES_UPWARD = "crosses upward"  # only rises through 1.0: speculation pays only under load
    ABOVE_ALL = "above"  # speedup >= 1 at every level: the crossover lies above the highest
    BELOW_ALL = "below"  # speedup < 1 at every level: the crossover lies below the lowest


@dataclass(frozen=True)
class Crossover:
    """The concurrency where speedup crosses 1.0, with an interval (see module doc for ±inf)."""

    kind: CrossoverKind
    concurrency: float
    low: float
    high: float
    non_monotone: bool
    levels: tuple[float, ...]

    def describe(self) -> str:
        """One line for reports, e.g. 'crosses 1.0 at concurrency ~8 (5.66 to 11.3)'."""
        if self.kind is CrossoverKind.ABOVE_ALL:
            text = f"above {_fmt(self.levels[-1])}"
            text += "" if self.low == math.inf else f" (could be as low as {self._end(self.low)})"
        elif self.kind is CrossoverKind.BELOW_ALL:
            text = f"below {_fmt(self.levels[0])}"
            text += "" if self.high == -math.inf else f" (could be as high as {self._end(self.high)})"
        else:
            way = "rises above" if self.kind is CrossoverKind.CROSSES_UPWARD else "crosses"
            band = f"{self._end(self.low)} to {self._end(self.high)}"
            text = f"{way} 1.0 at concurrency ~{_fmt(self.concurrency)} ({band})"
        return text + ("; non-monotone" if self.non_monotone else "")

    def _end(self, c: float) -> str:
        if c == -math.inf:
            return f"<{_fmt(self.levels[0])}"
        if c == math.inf:
            return f">{_fmt(self.levels[-1])}"
        return _fmt(c)


def find_crossover(speedups: Mapping[float, Estimate]) -> Crossover:
    """Crossover of one speculative config, given its speedup Estimate at each concurrency level.

    Non-monotone curves report the *first* downward crossing and set ``non_monotone``; a curve that
    only rises through 1.0 is CROSSES_UPWARD (an unusual shape worth a look, but not flagged as
    non-monotone if it rises steadily).
    """
    if not speedups:
        raise ValueError("find_crossover: no concurrency levels")
    levels = tuple(sorted(float(c) for c in speedups))
    if levels[0] <= 0.0:
        raise ValueError(f"concurrency levels must be > 0, got {levels[0]}")
    ests = [speedups[c] for c in sorted(speedups)]
    xs = [math.log2(c) for c in levels]
    values, lows, highs = [e.value for e in ests], [e.low for e in ests], [e.high for e in ests]
    wiggly = _non_monotone(values)
    j = _first_down(values)
    if j is not None:
        kind, x, band = CrossoverKind.CROSSES, _interpolate(xs, values, j), _band(xs, j, lows, highs)
    elif all(v >= 1.0 for v in values):
        kind, x, band = CrossoverKind.ABOVE_ALL, math.inf, _band(xs, len(xs) - 1, lows, highs)
    elif all(v < 1.0 for v in values):
        kind, x, band = CrossoverKind.BELOW_ALL, -math.inf, _band(xs, -1, lows, highs)
    else:
        # Starts below 1, ends above, never falls back: mirror the curve (2 - y) to reuse the code;
        # the mirrored lows are 2 - highs and vice versa.
        mirrored = [2.0 - v for v in values]
        j = _first_down(mirrored)
        if j is None:  # unreachable: a curve neither all-above nor all-below crosses somewhere
            raise AssertionError(values)
        kind, x = CrossoverKind.CROSSES_UPWARD, _interpolate(xs, mirrored, j)
        band = _band(xs, j, [2.0 - h for h in highs], [2.0 - lo for lo in lows])
    return Crossover(kind, _level(x), band[0], band[1], wiggly, levels)


def _first_down(ys: Sequence[float]) -> int | None:
    """Index i of the first segment where the curve goes from >= 1 to < 1."""
    return next((i for i in range(len(ys) - 1) if ys[i] >= 1.0 > ys[i + 1]), None)


def _interpolate(xs: Sequence[float], ys: Sequence[float], i: int) -> float:
    """log2-concurrency where segment i crosses 1.0; an infinite end (unknown interval) gives the
    segment's far end, the conservative answer for the upper band."""
    frac = (ys[i] - 1.0) / (ys[i] - ys[i + 1])
    if math.isnan(frac):
        frac = 1.0
    return xs[i] + frac * (xs[i + 1] - xs[i])


def _band(xs: Sequence[float], j: int, lows: Sequence[float], highs: Sequence[float]) -> tuple[float, float]:
    """Interval for a crossing in segment j (j = -1: before the first level; len-1: after the last).

    Upper end: the first downward crossing of the highs from segment j on. Lower end: the start of
    the run of lows below 1 that contains the point just after the crossing.
    """
    start = max(j, 0)
    if highs[start] < 1.0:
        high = -math.inf
    else:
        k = next((i for i in range(start, len(xs) - 1) if highs[i] >= 1.0 > highs[i + 1]), None)
        high = math.inf if k is None else _level(_interpolate(xs, highs, k))
    m = min(j + 1, len(xs) - 1)
    if lows[m] >= 1.0:
        return math.inf, high
    while m > 0 and lows[m - 1] < 1.0:
        m -= 1
    low = -math.inf if m == 0 else _level(_interpolate(xs, lows, m - 1))
    return low, high


def _level(x: float) -> float:
    return x if math.isinf(x) else 2.0**x


def _non_monotone(ys: Sequence[float]) -> bool:
    steps = [b - a for a, b in itertools.pairwise(ys)]
    return any(s > 0 for s in steps) and any(s < 0 for s in steps)


def _fmt(c: float) -> str:
    return f"{c:.3g}"


# --- best config per level -----------------------------------------------------------------------


class Certainty(Enum):
    """How sure the pick of the fastest config at one level is."""

    SOLE = "sole"  # only one config was measured at this level
    CLEAR = "clear"  # the winner's interval lies wholly above the runner-up's
    OVERLAPPING = "overlapping"  # intervals overlap: the order may be noise
    TIED = "tied"  # equal mean throughput


@dataclass(frozen=True)
class LevelWinner:
    """The fastest config at one concurrency level, the runner-up, and how sure the pick is."""

    concurrency: float
    best: str
    throughput: Estimate
    runner_up: str | None
    runner_up_throughput: Estimate | None
    certainty: Certainty
    tied_with: tuple[str, ...] = ()


def best_config_per_level(throughputs: Mapping[str, Mapping[float, Estimate]]) -> tuple[LevelWinner, ...]:
    """For each level any config was measured at: the config with the highest mean throughput.

    Ties (equal means, to float noise) go to the first name in sorted order, with the others listed
    in ``tied_with``, so the output does not depend on dict order.
    """
    levels = sorted({float(c) for curve in throughputs.values() for c in curve})
    return tuple(_winner(level, throughputs) for level in levels)


def _winner(level: float, throughputs: Mapping[str, Mapping[float, Estimate]]) -> LevelWinner:
    measured = [(name, est) for name, curve in throughputs.items() for c, est in curve.items() if c == level]
    ranked = sorted(measured, key=lambda item: (-item[1].value, item[0]))
    best, top = ranked[0]
    if len(ranked) == 1:
        return LevelWinner(level, best, top, None, None, Certainty.SOLE)
    tied = tuple(name for name, est in ranked[1:] if math.isclose(est.value, top.value, rel_tol=1e-9))
    second, second_est = ranked[1]
    if tied:
        certainty = Certainty.TIED
    elif top.low > second_est.high:
        certainty = Certainty.CLEAR
    else:
        certainty = Certainty.OVERLAPPING
    return LevelWinner(level, best, top, second, second_est, certainty, tied)
