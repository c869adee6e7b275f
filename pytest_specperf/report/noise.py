"""What a measurement's rounds say about the measurement itself: a throughput too noisy to resolve the
tolerance (and about how many rounds would), or an engine still warming up, whose rounds move steadily
one way. Lines of the report's warnings (report/analysis.py).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.config.workloads import warmup_count
from pytest_specperf.measure.records import Measurement
from pytest_specperf.verdict.stats import Tolerance, coefficient_of_variation, rounds_to_resolve

NOISY_CV = 0.05
#: `steady_trend`: the fewest rounds a trend is read from, and the share of their variance a line must explain.
TREND_ROUNDS = 3
TREND_FIT = 0.9


def steady_trend(values: Sequence[float]) -> str | None:
    """ "rose" or "fell" when rounds move steadily one way, as an engine still warming up does; else None.

    The rule: at least `TREND_ROUNDS` rounds, every round beyond the one before in the same direction,
    and a straight line through them explaining at least `TREND_FIT` of their variance (what is left
    about the line is small beside the move). A rank test cannot be the rule: a night has 3 rounds, and
    with 3 the smallest p-value Kendall's or Mann-Kendall's test can reach is 1/3. The rule is asked only
    of rounds that spread beyond the noise threshold (`NOISY_CV`): a steady server's rounds at 1% CV may
    fall in order by chance (the plain c8 rounds of the same H200 night, 810.7 ± 7.9 tok/s), but 3 rounds
    in a row moving 26% (1017 → 1281 → 1686 tok/s) are an engine not yet warm, not noise.
    """
    if len(values) < TREND_ROUNDS:
        return None
    steps = [b - a for a, b in itertools.pairwise(values)]
    if not (all(d > 0 for d in steps) or all(d < 0 for d in steps)):
        return None
    x = range(len(values))
    x_mean, y_mean = statistics.fmean(x), statistics.fmean(values)
    sxx = math.fsum((i - x_mean) ** 2 for i in x)
    sxy = math.fsum((i - x_mean) * (v - y_mean) for i, v in zip(x, values, strict=True))
    syy = math.fsum((v - y_mean) ** 2 for v in values)
    explained = sxy * sxy / (sxx * syy) if syy > 0 else 0.0
    if explained < TREND_FIT:
        return None
    return "rose" if steps[0] > 0 else "fell"


def warming_warning(measurement: Measurement, config: SpecperfConfig) -> str | None:
    """'still warming up: rounds rose 1017 → 1281 → 1686 tok/s; raise ...' when a server start's rounds
    spread beyond the noise threshold and move steadily one way (`steady_trend`), else None."""
    for values in measurement.start_samples("output_throughput"):
        cv = coefficient_of_variation(values)
        trend = steady_trend(values) if cv is not None and cv > NOISY_CV else None
        if trend is None:
            continue
        rounds = " → ".join(_tok_s(v) for v in values)
        key = measurement.key
        workload = config.workloads.get(key.workload)
        sent = warmup_count(workload, key.concurrency) if workload is not None else None
        now = f" ({sent} warm-up requests at c{key.concurrency} tonight)" if sent is not None else ""
        return (
            f"{key.label}: still warming up: rounds {trend} {rounds} tok/s; raise `warmup` of workload "
            f"{key.workload!r}{now} until the first round is as fast as the last, rather than adding rounds"
        )
    return None


def _tok_s(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def noise_warning(measurement: Measurement, config: SpecperfConfig) -> list[str]:
    samples = measurement.samples("output_throughput")
    cv = coefficient_of_variation(samples)
    if cv is None or cv <= NOISY_CV:
        return []
    if (warming := warming_warning(measurement, config)) is not None:
        return [warming]  # the spread is the warm-up's, which more rounds would not resolve
    mean = sum(samples) / len(samples)
    needed = rounds_to_resolve(mean, mean * Tolerance(config.max_regression).regression_bound, cv)
    hint = f"; about {needed} rounds would resolve a {config.max_regression:.0%} change" if needed else ""
    return [f"{measurement.key.label}: noisy throughput, CV {cv:.1%} over {len(samples)} rounds{hint}"]
