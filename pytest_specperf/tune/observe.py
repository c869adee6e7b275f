"""What one measurement tells the models: throughput per round, cycle time, and acceptance.

The models read the *median* round (`level`, `cycle`, TTFT and decode time): on a busy machine one round
can run at a fraction of the speed, and a mean would carry that into every prediction; the displayed
measurements (and their intervals) stay the plugin's means.

Definitions (docs/tune.md):

- cycle (ms) = decode time per verify step, per round: sum over requests of (E2E - TTFT) / sum of
  verify steps. The first token comes from the prefill; every later token from a verify step, so this
  is the cost model's cycle (tau x TPOT) with tau counting decode tokens only;
- TTFT and decode time: the median over rounds of each round's mean over its requests (ms); tokens:
  mean completion tokens;
- acceptance: the verify steps by accepted drafts, summed over the requests of a round and averaged
  over rounds (one round's worth of evidence: see tune/acceptance.py); from the responses' histograms,
  else from the server's per-position counters (vLLM), else from the accept length alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_specperf.measure.records import Measurement, RequestRecord, RoundSample
from pytest_specperf.tune.acceptance import histogram_from_accept_length, histogram_from_counters
from pytest_specperf.tune.space import Shape


@dataclass(frozen=True)
class LevelData:
    """One server measured at one objective (workload and concurrency level)."""

    throughput: tuple[float, ...]
    cycle_ms: tuple[float, ...]
    ttft_ms: float  # median round
    decode_ms: float  # median round
    tokens: float
    histogram: tuple[float, ...] | None = None
    histogram_source: str | None = None
    accept_length: float | None = None

    @property
    def rounds(self) -> int:
        return len(self.throughput)

    @property
    def mean_throughput(self) -> float:
        return math.fsum(self.throughput) / len(self.throughput)

    @property
    def level(self) -> float:
        """The median round's throughput: what the models read."""
        return statistics.median(self.throughput)

    @property
    def level_variance(self) -> float:
        """Relative variance of `level` from round to round (0 with one round)."""
        return _relative_variance_of_median(self.throughput)

    @property
    def cycle(self) -> float | None:
        """The median round's cycle (ms), None for a plain server."""
        return statistics.median(self.cycle_ms) if self.cycle_ms else None

    @property
    def cycle_variance(self) -> float:
        return _relative_variance_of_median(self.cycle_ms)

    @property
    def mean_cycle_ms(self) -> float | None:
        return math.fsum(self.cycle_ms) / len(self.cycle_ms) if self.cycle_ms else None

    @property
    def efficiency(self) -> float:
        """Throughput x (TTFT + decode) / tokens: requests in flight on average, less the gaps between them."""
        return self.level * (self.ttft_ms + self.decode_ms) / 1000.0 / max(self.tokens, 1e-9)


def level_data(measurement: Measurement, shape: Shape | None) -> LevelData:
    """The `LevelData` of a measurement; `shape` is None for the reference (plain decoding)."""
    rounds = [r for r in measurement.rounds if _ok(r.records)]
    if not rounds:
        raise ValueError(f"{measurement.key.label}: no round with a finished request")
    records = [rec for r in rounds for rec in _ok(r.records)]
    per_round = [_ok(r.records) for r in rounds]
    data = LevelData(
        throughput=tuple(r.output_throughput for r in rounds),
        cycle_ms=tuple(c for recs in per_round if (c := round_cycle_ms(recs)) is not None),
        ttft_ms=statistics.median(_mean([(x.ttft or 0.0) * 1000.0 for x in recs]) for recs in per_round),
        decode_ms=statistics.median(
            _mean([((x.e2e or 0.0) - (x.ttft or 0.0)) * 1000.0 for x in recs]) for recs in per_round
        ),
        tokens=_mean([float(rec.completion_tokens) for rec in records]),
    )
    if shape is None:
        return data
    histogram, source = round_histogram(rounds, shape)
    accept = [r.accept_length for r in rounds if r.accept_length is not None]
    return LevelData(
        data.throughput, data.cycle_ms, data.ttft_ms, data.decode_ms, data.tokens,
        histogram, source, _mean(accept) if accept else None,
    )  # fmt: skip


def round_cycle_ms(records: Sequence[RequestRecord]) -> float | None:
    """Decode time per verify step over one round's requests (None without verify steps)."""
    verified = [r for r in records if r.verify_ct and r.e2e is not None and r.ttft is not None]
    steps = sum(r.verify_ct or 0 for r in verified)
    if not steps:
        return None
    return 1000.0 * math.fsum((r.e2e or 0.0) - (r.ttft or 0.0) for r in verified) / steps


def round_histogram(rounds: Sequence[RoundSample], shape: Shape) -> tuple[tuple[float, ...] | None, str | None]:
    """Verify steps by accepted drafts, averaged over rounds, and where they came from."""
    per_round: list[list[float]] = []
    for r in rounds:
        verified = [rec for rec in _ok(r.records) if rec.verify_ct]
        if verified and all(rec.accept_histogram for rec in verified):
            per_round.append(_sum_lists([list(rec.accept_histogram or ()) for rec in verified]))
    if per_round and len(per_round) == len(rounds):
        return _mean_lists(per_round), "responses"
    counters = [r.spec_counters for r in rounds if r.spec_counters is not None and r.spec_counters.drafts > 0]
    if counters and len(counters) == len(rounds) and all(c.accepted_per_position for c in counters):
        lists = [list(histogram_from_counters(c.drafts, c.accepted_per_position)) for c in counters]
        return _mean_lists([[float(v) for v in h] for h in lists]), "counters"
    taus = [r.accept_length for r in rounds if r.accept_length is not None]
    steps = [sum(rec.verify_ct or 0 for rec in _ok(r.records)) for r in rounds]
    if taus and any(steps):
        return histogram_from_accept_length(_mean(taus), shape.depth, _mean([float(s) for s in steps])), "accept length"
    return None, None


def _ok(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.ok and r.last_chunk is not None]


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def _sum_lists(lists: Sequence[Sequence[float]]) -> list[float]:
    out = [0.0] * max(len(x) for x in lists)
    for x in lists:
        for i, v in enumerate(x):
            out[i] += v
    return out


def _mean_lists(lists: Sequence[Sequence[float]]) -> tuple[float, ...]:
    total = _sum_lists(lists)
    return tuple(v / len(lists) for v in total)


def _relative_variance_of_median(values: Sequence[float]) -> float:
    """Relative variance of the median of `values`: pi/2 x sigma^2 / n, sigma from the median absolute
    deviation (1.4826 x MAD), so one wild round neither moves the median nor swells its variance."""
    n = len(values)
    if n < 2:
        return 0.0
    median = statistics.median(values)
    if median == 0.0:
        return 0.0
    sigma = 1.4826 * statistics.median(abs(v - median) for v in values)
    if n == 2:
        sigma = abs(values[0] - values[1]) / math.sqrt(2.0)  # the sample sd: a MAD of two points is too small
    return (math.pi / 2.0) * sigma * sigma / (n * median * median)
