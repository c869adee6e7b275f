"""What one measurement tells the models: throughput per round, cycle time, and acceptance.

The models read the *median* round (`level`, `cycle_at`, TTFT and E2E): on a busy machine one round can
run at a fraction of the speed, and a mean would carry that into every prediction; the displayed
measurements (and their intervals) stay the plugin's means.

Definitions (docs/tune.md):

- cycle (ms) = decode time per verify step, per round: (mean E2E - TTFT) / mean verify steps over the
  round's requests. The first token comes from the prefill, every later one from a verify step, so this
  is the cost model's cycle (tau x TPOT) with tau counting decode tokens only. The TTFT subtracted is
  the objective's (`cycle_at`), chosen by the model: the lowest of the measured servers' median TTFTs.
  A stream that arrives late (an API server starved of CPU sends a whole answer at once) inflates its
  TTFT and shrinks its decode time by the same amount; its E2E stays right, and so does a cycle with a
  TTFT that streamed properly;
- TTFT and E2E: the median over rounds of each round's mean over its requests (ms); tokens: mean
  completion tokens;
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
    #: per round, over the requests with verify steps: mean E2E (ms) and mean verify steps (empty: plain)
    round_e2e_ms: tuple[float, ...]
    round_verify_steps: tuple[float, ...]
    ttft_ms: float  # median round
    e2e_ms: float  # median round
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

    def cycles(self, ttft_ms: float) -> tuple[float, ...]:
        """Each round's cycle (ms) with `ttft_ms` as the time to the first token."""
        pairs = zip(self.round_e2e_ms, self.round_verify_steps, strict=True)
        return tuple((e2e - ttft_ms) / steps for e2e, steps in pairs if steps > 0)

    def cycle_at(self, ttft_ms: float) -> float | None:
        """The median round's cycle (ms), None for a plain server."""
        cycles = self.cycles(ttft_ms)
        return statistics.median(cycles) if cycles else None

    def cycle_variance_at(self, ttft_ms: float) -> float:
        return _relative_variance_of_median(self.cycles(ttft_ms))

    @property
    def mean_cycle_ms(self) -> float | None:
        """The mean cycle with this server's own TTFT (what the progress lines show)."""
        cycles = self.cycles(self.ttft_ms)
        return math.fsum(cycles) / len(cycles) if cycles else None

    @property
    def efficiency(self) -> float:
        """Throughput x E2E / tokens: requests in flight on average, less the gaps between them."""
        return self.level * self.e2e_ms / 1000.0 / max(self.tokens, 1e-9)


def level_data(measurement: Measurement, shape: Shape | None) -> LevelData:
    """The `LevelData` of a measurement; `shape` is None for the reference (plain decoding)."""
    rounds = [r for r in measurement.rounds if _ok(r.records)]
    if not rounds:
        raise ValueError(f"{measurement.key.label}: no round with a finished request")
    records = [rec for r in rounds for rec in _ok(r.records)]
    per_round = [_ok(r.records) for r in rounds]
    verified = [[x for x in recs if x.verify_ct and x.e2e is not None] for recs in per_round]
    verified = [recs for recs in verified if recs]
    data = LevelData(
        throughput=tuple(r.output_throughput for r in rounds),
        round_e2e_ms=tuple(_mean([(x.e2e or 0.0) * 1000.0 for x in recs]) for recs in verified),
        round_verify_steps=tuple(_mean([float(x.verify_ct or 0) for x in recs]) for recs in verified),
        ttft_ms=statistics.median(_mean([(x.ttft or 0.0) * 1000.0 for x in recs]) for recs in per_round),
        e2e_ms=statistics.median(_mean([(x.e2e or 0.0) * 1000.0 for x in recs]) for recs in per_round),
        tokens=_mean([float(rec.completion_tokens) for rec in records]),
    )
    if shape is None:
        return data
    histogram, source = round_histogram(rounds, shape)
    accept = [r.accept_length for r in rounds if r.accept_length is not None]
    return LevelData(
        data.throughput,
        data.round_e2e_ms,
        data.round_verify_steps,
        data.ttft_ms,
        data.e2e_ms,
        data.tokens,
        histogram,
        source,
        _mean(accept) if accept else None,
    )


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
