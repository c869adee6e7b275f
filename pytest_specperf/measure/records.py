"""Measured records: one request, one round, one measurement.

These are the nouns every other module passes around. They are plain dataclasses that
serialise to JSON-friendly dicts (`to_dict`/`from_dict`) so stored baselines and JSON reports
carry the raw evidence, not just summaries.

Times inside a `RequestRecord` are seconds relative to the start of its round, so records are
comparable across rounds and machines without leaking wall-clock values.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from pytest_specperf.engines.base import SpecCounters, draft_depth
from pytest_specperf.measure.fingerprint import Fingerprint

#: The one label of acceptance by draft position, and what it means (docs/metrics.md): every report,
#: the JSON's descriptions, the dashboard and `specperf tune` say it in these words.
POSITIONS_LABEL = "acceptance by draft position"
POSITIONS_MEANING = "the share of verify steps that accepted at least that many drafts"


def acceptance_from_histograms(
    histograms: Sequence[Sequence[int]], positions: int | None = None
) -> tuple[float, ...] | None:
    """Acceptance by draft position (docs/metrics.md): per position i (1, 2, ...) the share of verify
    steps whose draft was accepted up to i, from histograms of verify steps by drafts accepted (`h[a]`:
    steps that accepted exactly a). A histogram ends at the deepest acceptance its request saw, so the
    positions past every histogram's end, up to the draft's depth `positions`, count zeros: a total
    collapse (`[63]`) reads 0.00 at every position, not nothing. The same definition as counters of
    drafts accepted per position; None when no step was counted or no position is known."""
    depth = max((len(h) for h in histograms), default=0)
    totals = [sum(h[a] for h in histograms if a < len(h)) for a in range(depth)]
    steps = sum(totals)
    count = max(depth - 1, positions or 0)
    if steps == 0 or count < 1:
        return None
    return tuple(sum(totals[i:]) / steps for i in range(1, count + 1))


def padded(shares: tuple[float, ...], positions: int | None) -> tuple[float, ...]:
    """Shares by draft position with zeros for the positions up to `positions` that they end before."""
    missing = (positions or 0) - len(shares)
    return shares + (0.0,) * missing if missing > 0 else shares


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One streamed request, as the client saw it (docs/metrics.md)."""

    index: int
    sent: float
    first_chunk: float | None = None
    last_chunk: float | None = None
    num_chunks: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    verify_ct: int | None = None
    accepted_drafts: int | None = None
    proposed_drafts: int | None = None
    spec_tokens: int | None = None  # tokens emitted by verify steps, where the engine says (vLLM)
    #: verify steps by number of accepted drafts (index = drafts accepted), where the engine reports it
    accept_histogram: tuple[int, ...] | None = None
    finish_reason: str | None = None
    output_hash: str | None = None
    error: str | None = None
    chunk_gaps: tuple[float, ...] = field(default=(), compare=False, repr=False)
    #: the output text, kept in memory for the lossless check's first-divergence message only
    output: str | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft(self) -> float | None:
        """Time to the first non-empty chunk, seconds."""
        return None if self.first_chunk is None else self.first_chunk - self.sent

    @property
    def e2e(self) -> float | None:
        """Time to the last chunk, seconds."""
        return None if self.last_chunk is None else self.last_chunk - self.sent

    @property
    def tpot(self) -> float | None:
        """(E2E - TTFT) / (N - 1): mean time per output token after the first, seconds."""
        if self.completion_tokens < 2 or self.ttft is None or self.e2e is None:
            return None
        return (self.e2e - self.ttft) / (self.completion_tokens - 1)

    @property
    def accept_length(self) -> float | None:
        """This request's own accept length: tokens per verify step (docs/metrics.md)."""
        if not self.verify_ct:
            return None
        return self.verified_tokens / self.verify_ct

    @property
    def verified_tokens(self) -> int:
        """The numerator of τ: the engine's tokens of verify steps (vLLM), else its completion tokens (SGLang)."""
        return self.spec_tokens if self.spec_tokens is not None else self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        """JSON form; chunk gaps are summarised per round, not stored per request."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("chunk_gaps", "output")}
        for key in ("sent", "first_chunk", "last_chunk"):
            if data[key] is not None:
                data[key] = round(data[key], 6)
        if data["spec_tokens"] is None:
            del data["spec_tokens"]  # SGLang's records (and files written before vLLM support) have none
        if data["accept_histogram"] is None:
            del data["accept_histogram"]  # plain servers, and files written before histograms were kept
        else:
            data["accept_histogram"] = list(data["accept_histogram"])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)} - {"chunk_gaps", "output"}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("accept_histogram") is not None:
            values["accept_histogram"] = tuple(values["accept_histogram"])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Mean and percentiles of one latency within one round, in milliseconds."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Distribution:
        return cls(**data)


@dataclass(frozen=True, slots=True)
class RoundSample:
    """One round of a workload against one server: one sample of every metric."""

    index: int
    duration_s: float
    output_throughput: float
    request_count: int
    error_count: int
    ttft_ms: Distribution
    tpot_ms: Distribution
    e2e_ms: Distribution
    chunk_gap_ms: Distribution
    accept_length: float | None
    accept_length_per_request: float | None
    acceptance_rate: float | None
    cached_tokens: int
    records: tuple[RequestRecord, ...] = field(default=(), compare=False, repr=False)
    #: where `accept_length` came from: "responses" (the requests' own counts) or "prometheus" (the
    #: server's counters scraped right before and after the round); None when the round has none
    accept_length_source: str | None = None
    #: the change of the server's speculation counters over this round, where the engine has them (vLLM)
    spec_counters: SpecCounters | None = None
    #: which server start of the night measured this round: 0, or 1 for a second start that confirms
    #: a regression (every start carries its own offset, so the verdict keeps them apart)
    start: int = 0

    def metric(self, name: str) -> float | None:
        """Scalar metric by its report name (see `METRICS`)."""
        return METRICS[name].read(self)

    @property
    def acceptance_per_position(self) -> tuple[float, ...] | None:
        """Per draft position: accepted there / verify steps, from the server's counters (None without)."""
        if self.spec_counters is None or not self.spec_counters.acceptance_per_position:
            return None
        return self.spec_counters.acceptance_per_position

    def position_shares(self, positions: int | None = None) -> tuple[float, ...] | None:
        """This round's acceptance by draft position, up to the draft's depth `positions`: the server's
        counters, else its responses' histograms."""
        counted = self.acceptance_per_position
        if counted is not None:
            return padded(counted, positions)
        return acceptance_from_histograms(
            [rec.accept_histogram for rec in self.records if rec.ok and rec.accept_histogram], positions
        )

    def to_dict(self) -> dict[str, Any]:
        data = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("records", "accept_length_source", "spec_counters", "start")
        }
        for key in ("ttft_ms", "tpot_ms", "e2e_ms", "chunk_gap_ms"):
            data[key] = asdict(data[key])
        data["records"] = [r.to_dict() for r in self.records]
        # written only when known, so SGLang's rounds (and files written before them) keep their shape
        if self.accept_length_source is not None:
            data["accept_length_source"] = self.accept_length_source
        if self.spec_counters is not None:
            data["spec_counters"] = self.spec_counters.to_dict()
            data["acceptance_per_position"] = list(self.acceptance_per_position or ())
        if self.start:
            data["start"] = self.start
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundSample:
        """Fields it does not know are left out. Their names are looked up once, not per round: a
        dashboard reads every round of a year of nights of every key."""
        values = {k: v for k, v in data.items() if k in _ROUND_FIELDS}
        for key in ("ttft_ms", "tpot_ms", "e2e_ms", "chunk_gap_ms"):
            values[key] = Distribution.from_dict(values[key])
        values["records"] = tuple(RequestRecord.from_dict(r) for r in values.get("records", ()))
        if values.get("spec_counters") is not None:
            values["spec_counters"] = SpecCounters.from_dict(values["spec_counters"])
        return cls(**values)


_ROUND_FIELDS = frozenset(f.name for f in fields(RoundSample))


@dataclass(frozen=True, slots=True)
class Metric:
    """A scalar read off a round, and which way is better."""

    name: str
    unit: str
    higher_is_better: bool
    attribute: str
    part: str | None = None

    def read(self, sample: RoundSample) -> float | None:
        value = getattr(sample, self.attribute)
        if self.part is not None:
            value = getattr(value, self.part)
        return value


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("output_throughput", "tok/s", True, "output_throughput"),
        Metric("accept_length", "tok/verify", True, "accept_length"),
        Metric("mean_ttft_ms", "ms", False, "ttft_ms", "mean"),
        Metric("p99_ttft_ms", "ms", False, "ttft_ms", "p99"),
        Metric("mean_tpot_ms", "ms", False, "tpot_ms", "mean"),
        Metric("p99_tpot_ms", "ms", False, "tpot_ms", "p99"),
        Metric("mean_e2e_latency_ms", "ms", False, "e2e_ms", "mean"),
    )
}


#: each metric's value read off a round in one call (`Metric.read`, without its two lookups)
_READERS: dict[str, Callable[[RoundSample], float | None]] = {
    m.name: operator.attrgetter(m.attribute if m.part is None else f"{m.attribute}.{m.part}") for m in METRICS.values()
}


@dataclass(frozen=True, slots=True, order=True)
class MeasurementKey:
    """What a measurement is of: a server config on a workload at one concurrency level.

    Ordered (server, workload, level), so that any collection of keys — e.g. failed measurements —
    sorts for a stable report."""

    server: str
    workload: str
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.server}/{self.workload}/c{self.concurrency}"


@dataclass(slots=True)
class Measurement:
    """Warmup plus N rounds of one workload on one server, shared by every test asking for it.

    Mutable on purpose: adaptive rounds append to `rounds` when a check is inconclusive.
    """

    key: MeasurementKey
    workload_hash: str
    is_reference: bool
    rounds: list[RoundSample] = field(default_factory=list)
    #: what may have disturbed the numbers (sanity checks, overlapping measurements): a run with
    #: warnings is not recorded into a history
    warnings: list[str] = field(default_factory=list)
    #: facts about how it was made that disturbed nothing, e.g. a wait for another session's measurement
    notes: list[str] = field(default_factory=list)
    num_draft_tokens: int | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    algorithm: str | None = None
    fingerprint: Fingerprint | None = None

    def samples(self, metric: str) -> list[float]:
        """Per-round samples of a metric, rounds where it is undefined left out. Read by one attribute
        getter per metric: the verdict and the dashboard ask for every metric of every run of a year."""
        read = _READERS.get(metric) or METRICS[metric].read
        return [v for r in self.rounds if (v := read(r)) is not None]

    @property
    def starts(self) -> int:
        """Server starts the rounds were measured on (2 after a confirmation)."""
        return 1 + max((r.start for r in self.rounds), default=0)

    def start_samples(self, metric: str) -> list[list[float]]:
        """Per-round samples of a metric, one list per server start that has any."""
        found = [
            [v for r in self.rounds if r.start == s and (v := r.metric(metric)) is not None] for s in range(self.starts)
        ]
        return [f for f in found if f]

    def of_start(self, start: int) -> Measurement:
        """The rounds of one server start alone, as a measurement of their own (for storing: a
        stored run is one server start)."""
        rounds = [replace(r, start=0) for r in self.rounds if r.start == start]
        return replace(self, rounds=rounds, warnings=list(self.warnings), notes=list(self.notes))

    @property
    def request_count(self) -> int:
        return sum(r.request_count for r in self.rounds)

    @property
    def accept_length_per_request(self) -> float | None:
        """The mean over rounds of each round's mean of the requests' own τ (SGLang's per-request
        `spec_accept_length`), as the rounds' pooled τ are averaged: shown beside τ where the two differ."""
        means = [r.accept_length_per_request for r in self.rounds if r.accept_length_per_request is not None]
        return sum(means) / len(means) if means else None

    @property
    def accept_length_source(self) -> str | None:
        """Where the rounds' accept lengths came from ("responses", "prometheus"; both joined by "+")."""
        sources = sorted({r.accept_length_source for r in self.rounds if r.accept_length_source})
        return "+".join(s for s in sources if s) or None

    @property
    def spec_counters(self) -> SpecCounters | None:
        """The speculation counters' change over all rounds together (None when no round has them)."""
        deltas = [r.spec_counters for r in self.rounds if r.spec_counters is not None]
        if not deltas:
            return None
        positions = max(len(d.accepted_per_position) for d in deltas)
        return SpecCounters(
            drafts=sum(d.drafts for d in deltas),
            draft_tokens=sum(d.draft_tokens for d in deltas),
            accepted=sum(d.accepted for d in deltas),
            accepted_per_position=tuple(
                sum(d.accepted_per_position[i] for d in deltas if i < len(d.accepted_per_position))
                for i in range(positions)
            ),
        )

    @property
    def draft_positions(self) -> int | None:
        """How many draft positions the server drafts, from its resolved sizes (engines/base.py `draft_depth`);
        the algorithm from the fingerprint where the record does not keep it (a JSON report's entry)."""
        algorithm = self.algorithm
        if algorithm is None and self.fingerprint is not None:
            algorithm = self.fingerprint.identity.get("algorithm")
        return draft_depth(algorithm, self.num_steps, self.num_draft_tokens)

    @property
    def acceptance_per_position(self) -> tuple[float, ...] | None:
        """Acceptance by draft position over all rounds (docs/metrics.md): per position, Σ verify steps
        whose draft was accepted up to it / Σ verify steps, from the server's counters (vLLM), else from
        the responses' histograms (SGLang's `spec_correct_drafts_histogram`), with zeros for the positions
        of the draft that no step reached; None without either."""
        positions = self.draft_positions
        counters = self.spec_counters
        if counters is not None and counters.acceptance_per_position:
            return padded(counters.acceptance_per_position, positions)
        return acceptance_from_histograms(
            [rec.accept_histogram for r in self.rounds for rec in r.records if rec.ok and rec.accept_histogram],
            positions,
        )

    def round_position_shares(self) -> list[tuple[float, ...]]:
        """Each round's acceptance by draft position (one sample per round; rounds without any left out)."""
        positions = self.draft_positions
        return [s for r in self.rounds if (s := r.position_shares(positions)) is not None]

    @property
    def error_count(self) -> int:
        return sum(r.error_count for r in self.rounds)

    @property
    def records(self) -> list[RequestRecord]:
        return [rec for r in self.rounds for rec in r.records]

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.key.server,
            "workload": self.key.workload,
            "concurrency": self.key.concurrency,
            "workload_hash": self.workload_hash,
            "is_reference": self.is_reference,
            "num_steps": self.num_steps,
            "eagle_topk": self.eagle_topk,
            "num_draft_tokens": self.num_draft_tokens,
            "algorithm": self.algorithm,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "fingerprint": self.fingerprint.to_dict() if self.fingerprint is not None else None,
            "rounds": [r.to_dict() for r in self.rounds],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], fingerprint: Fingerprint | None = None) -> Measurement:
        """Inverse of `to_dict`; `fingerprint` stands in for one the document keeps elsewhere (a stored
        run keeps it once, beside the measurement)."""
        if fingerprint is None and data.get("fingerprint"):
            fingerprint = Fingerprint.from_dict(data["fingerprint"])
        return cls(
            key=MeasurementKey(data["server"], data["workload"], int(data["concurrency"])),
            workload_hash=data["workload_hash"],
            is_reference=bool(data["is_reference"]),
            rounds=[RoundSample.from_dict(r) for r in data["rounds"]],
            warnings=list(data.get("warnings", [])),
            notes=list(data.get("notes", [])),
            num_steps=data.get("num_steps"),
            eagle_topk=data.get("eagle_topk"),
            num_draft_tokens=data.get("num_draft_tokens"),
            algorithm=data.get("algorithm"),
            fingerprint=fingerprint,
        )
