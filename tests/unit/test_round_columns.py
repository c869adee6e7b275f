"""Reading a stored run faster gives what the plain definitions give, on a real SGLang night
(tests/data/real-nights/sglang-cpu-spec/night1-report.json: plain, NGRAM and STANDALONE rounds).

A line keeps its rounds as columns (store/compact.py `columns`); `columns.round_samples` builds the rounds
column by column, and must be what `RoundSample.from_dict` makes of `rows` (the definition it replaces);
`Summary.of` reads each round once, and must be `statistics.fmean` of `Measurement.samples`, which reads
every metric by one getter and must be `Metric.read` per round.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from pytest_specperf.engines.base import SpecCounters
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import METRICS, Measurement, RoundSample
from pytest_specperf.store.columns import round_samples, rows
from pytest_specperf.store.compact import columns
from pytest_specperf.store.records import Summary

NIGHT = Path(__file__).resolve().parents[1] / "data" / "real-nights" / "sglang-cpu-spec" / "night1-report.json"


def real_night() -> list[Measurement]:
    report = json.loads(NIGHT.read_text(encoding="utf-8"))
    return [
        Measurement.from_dict(row, fingerprint=Fingerprint.from_dict(row["fingerprint"]))
        for row in report["measurements"]
    ]


def stored_columns(measurement: Measurement) -> dict[str, list[Any]]:
    """The rounds as a stored line keeps them (`encode_run`: records and derived shares left out)."""
    bodies = [r.to_dict() for r in measurement.rounds]
    for body in bodies:
        body.pop("records")
        body.pop("acceptance_per_position", None)
    return columns(bodies)


def with_counters(measurement: Measurement) -> Measurement:
    """The night's rounds as an engine with speculation counters (vLLM) stores them: per-position counts."""
    rounds = [
        dataclasses.replace(r, spec_counters=SpecCounters(100 + i, 300 + i, 150 + i, (77 + i, 48, 25)))
        for i, r in enumerate(measurement.rounds)
    ]
    return dataclasses.replace(measurement, rounds=rounds)


@pytest.mark.parametrize("server", ["plain", "ngram", "standalone"])
@pytest.mark.parametrize("counters", [False, True], ids=["sglang", "with-counters"])
def test_rounds_built_column_by_column_are_those_of_rows_and_from_dict(server: str, counters: bool) -> None:
    measurement = next(m for m in real_night() if m.key.server == server)
    measurement = with_counters(measurement) if counters else measurement
    table = stored_columns(measurement)
    assert ("spec_counters.accepted_per_position" in table) is counters  # kept as one column per key
    n = len(measurement.rounds)
    built = round_samples(table, n)
    assert built == [RoundSample.from_dict(body) for body in rows(table, n)]
    assert built == [dataclasses.replace(r, records=()) for r in measurement.rounds]


def test_columns_of_another_shape_and_bad_columns_read_as_rows_and_from_dict_read_them() -> None:
    measurement = real_night()[1]
    n = len(measurement.rounds)
    table = stored_columns(measurement)
    uneven = table | {"spec_counters": [None] * (n - 1) + [SpecCounters(1, 3, 2, (1,)).to_dict()]}
    assert round_samples(uneven, n) == [RoundSample.from_dict(body) for body in rows(uneven, n)]
    with pytest.raises(ValueError, match="round column 'cached_tokens' must hold 3 values"):
        round_samples(table | {"cached_tokens": [0, 0]}, n)
    without = {name: column for name, column in table.items() if not name.startswith("tpot_ms.")}
    with pytest.raises(KeyError, match="tpot_ms"):  # what `from_dict` says of a missing latency
        round_samples(without, n)


@pytest.mark.parametrize("server", ["plain", "ngram", "standalone"])
def test_summary_and_samples_are_their_plain_definitions(server: str) -> None:
    measurement = next(m for m in real_night() if m.key.server == server)
    for name, metric in METRICS.items():
        assert measurement.samples(name) == [v for r in measurement.rounds if (v := metric.read(r)) is not None]

    def mean(name: str) -> float | None:
        values = [v for v in measurement.samples(name) if math.isfinite(v)]
        return round(statistics.fmean(values), 4) if values else None

    summary = Summary.of(measurement)
    assert summary == Summary(
        rounds=len(measurement.rounds),
        requests=measurement.request_count,
        errors=measurement.error_count,
        output_throughput=mean("output_throughput"),
        accept_length=mean("accept_length"),
        mean_tpot_ms=mean("mean_tpot_ms"),
        mean_ttft_ms=mean("mean_ttft_ms"),
    )
    assert (summary.accept_length is None) is (server == "plain")
