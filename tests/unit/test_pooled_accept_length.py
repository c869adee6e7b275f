"""τ is pooled (Σ tokens / Σ verify steps), and the mean of the requests' own τ is shown beside it where
the two differ (docs/metrics.md).

Replays a real night: SGLang built for CPU speculating with NGRAM and STANDALONE, 4 requests of 64
tokens, 3 rounds (`night1-report.json`, the plugin's own JSON report, whose records are what it read
from each request's final `meta_info`), and one direct `/generate` of another night whose `meta_info`
carries SGLang's own per-request `spec_accept_length` (`slower-target-standalone-probe.json`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specperf.engines import engine_for
from pytest_specperf.measure.records import Measurement, MeasurementKey, RequestRecord
from pytest_specperf.measure.rounds import summarise_round
from pytest_specperf.report.jsonreport import load_report, summary_json
from pytest_specperf.report.terminal import render_markdown, render_text, summary_blocks

NIGHTS = Path(__file__).parent.parent / "data" / "real-nights" / "sglang-cpu-spec"
NIGHT1 = NIGHTS / "night1-report.json"


def _entry(server: str) -> dict[str, Any]:
    document = json.loads(NIGHT1.read_text())
    (entry,) = [m for m in document["measurements"] if m["server"] == server]
    return entry


def _replayed(server: str) -> Measurement:
    """The night's request records summarised again, round by round, as the plugin does."""
    entry = _entry(server)
    rounds = [
        summarise_round(r["index"], [RequestRecord.from_dict(rec) for rec in r["records"]], entry["num_steps"], None)
        for r in entry["rounds"]
    ]
    return Measurement(MeasurementKey(server, "code", 1), entry["workload_hash"], False, rounds=rounds)


@pytest.mark.parametrize(
    ("server", "tokens", "steps", "per_request"),
    [
        ("ngram", 768, 396, (64 / 37 + 64 / 42 + 64 / 24 + 64 / 29) / 4),
        ("standalone", 768, 237, None),
    ],
)
def test_tau_is_pooled_and_the_per_request_mean_is_kept_beside_it(
    server: str, tokens: int, steps: int, per_request: float | None
) -> None:
    measurement = _replayed(server)
    records = [rec for r in measurement.rounds for rec in r.records]
    assert (sum(r.completion_tokens for r in records), sum(r.verify_ct or 0 for r in records)) == (tokens, steps)
    summary = summary_json(measurement)
    assert summary["accept_length"] == pytest.approx(tokens / steps)  # NGRAM 1.9394, STANDALONE 3.2405
    mean = per_request if per_request is not None else sum(r.accept_length or 0 for r in records) / len(records)
    assert summary["accept_length_per_request"] == pytest.approx(mean)
    assert measurement.accept_length_per_request == pytest.approx(mean)
    assert abs(mean - tokens / steps) > 0.02  # the night's NGRAM: 2.0318 against 1.9394


def test_the_per_request_tau_is_sglangs_own_spec_accept_length() -> None:
    """SGLang's `spec_accept_length` of one request is N / V, the figure whose mean differs from τ."""
    probe = json.loads((NIGHTS / "slower-target-standalone-probe.json").read_text())
    meta = probe["direct_meta_info"]
    counts = engine_for("sglang").spec_counts({"meta_info": meta}, "generate")
    assert counts is not None and counts.verify_steps == meta["spec_verify_ct"] == 19
    record = RequestRecord(0, 0.0, completion_tokens=meta["completion_tokens"], verify_ct=counts.verify_steps)
    assert record.accept_length == pytest.approx(meta["spec_accept_length"])  # 64 / 19 = 3.368


def test_the_terminal_shows_both_figures_where_they_differ() -> None:
    report = load_report(NIGHT1).report
    text = "\n".join(render_text(summary_blocks(report)))
    assert "ngram/code/c1: τ 1.94; the requests' own τ average 2.03" in text
    assert "standalone/code/c1: τ 3.24; the requests' own τ average 3.27" in text
    assert "plain/code/c1: τ" not in text  # a plain server has no per-request τ
    assert "the requests' own τ average 2.03" in render_markdown(summary_blocks(report))


def test_a_gap_below_rounding_shows_tau_alone() -> None:
    """The same night with every request's verify steps made equal (33 each: 396 over 12 requests): the
    mean of the requests' τ is then τ itself, and τ stands alone."""
    entry = _entry("ngram")
    for r in entry["rounds"]:
        for rec in r["records"]:
            rec["verify_ct"] = 33
        r["accept_length_per_request"] = r["accept_length"] = 64 / 33
    document = json.loads(NIGHT1.read_text())
    document["measurements"] = [entry]
    loaded = load_report(NIGHT1, document)
    text = "\n".join(render_text(summary_blocks(loaded.report)))
    assert "own τ average" not in text
