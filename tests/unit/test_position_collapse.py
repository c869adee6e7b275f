"""Acceptance by draft position on a total collapse of acceptance: 0.00 at every drafted position, shown
and failing, never gone.

Replays what a real SGLang server speculating on a CPU said (tests/data/real-nights/sglang-cpu-spec/):
on the collapse night an unrelated draft made every request's `spec_accept_histogram` `[63]` (63 verify
steps, no draft accepted), shorter than the draft of 3 positions its `/server_info` reported
(`speculative_num_steps` 3, `speculative_num_draft_tokens` 4). The first night's STANDALONE runs
(acceptance 0.911 / 0.734 / 0.646) are the level; its NGRAM server drafts 11 positions
(`speculative_num_draft_tokens` 12, `speculative_num_steps` 1: SGLang's `num_draft_tokens // topk`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specperf.engines.base import draft_depth
from pytest_specperf.engines.sglang import SGLang
from pytest_specperf.measure.records import Distribution, Measurement, MeasurementKey, RequestRecord, RoundSample
from pytest_specperf.report.jsonreport import load_report, measurement_entry
from pytest_specperf.report.speculative import POSITIONS_TITLE
from pytest_specperf.report.terminal import summary_blocks
from pytest_specperf.store.records import Provenance, StoredBaseline, StoredRun, Summary
from pytest_specperf.verdict.checks import check_positions
from pytest_specperf.verdict.regression import check_positions_history
from pytest_specperf.verdict.stats import Decision

NIGHTS = Path(__file__).parents[1] / "data" / "real-nights" / "sglang-cpu-spec"
STANDALONE = "standalone/code/c1"


def _document(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((NIGHTS / name).read_text())
    return data


def _measurement(report: str, label: str = STANDALONE) -> Measurement:
    entry = next(m for m in _document(report)["measurements"] if m["label"] == label)
    return Measurement.from_dict(entry)


def _level() -> StoredBaseline:
    """The first night's STANDALONE measurement as the level's two runs."""
    night1 = _measurement("night1-report.json")
    runs = tuple(
        StoredRun(night1, Summary.of(night1), Provenance(f"2026-12-0{i}T18:00:00+00:00", None, "cpu", "0", f"s{i}"), 0)
        for i in (1, 2)
    )
    return StoredBaseline(night1, Summary.of(night1), runs[-1].provenance, Path("standalone/code-c1.json"), runs)


def _probe_measurement() -> Measurement:
    """The probe's per-request records (the histograms as the engine parsed them from `meta_info`) as one
    round, sized as its `/server_info` says."""
    probe = _document("collapse-standalone-probe.json")
    reported = SGLang().reported(probe["server_info"])
    counts = SGLang().spec_counts({"meta_info": probe["direct_meta_info"]}, "generate")
    assert counts is not None and counts.histogram == (63,)  # what the server sent
    records = tuple(
        RequestRecord(
            index=i,
            sent=0.0,
            completion_tokens=r["completion_tokens"],
            verify_ct=r["verify_ct"],
            accept_histogram=tuple(r["accept_histogram"]),
        )
        for i, r in enumerate(probe["records"])
    )
    empty = Distribution()
    sample = RoundSample(0, 1.0, 1.0, len(records), 0, empty, empty, empty, empty, None, None, None, 0, records)
    return Measurement(
        MeasurementKey("standalone", "code", 1),
        "h",
        False,
        rounds=[sample],
        num_steps=reported.num_steps,
        eagle_topk=reported.eagle_topk,
        num_draft_tokens=reported.num_draft_tokens,
        algorithm=reported.algorithm,
    )


def test_the_draft_depth_comes_from_the_servers_sizes() -> None:
    probe = _document("collapse-standalone-probe.json")["server_info"]
    reported = SGLang().reported(probe)
    assert draft_depth(reported.algorithm, reported.num_steps, reported.num_draft_tokens) == 3
    assert draft_depth("NGRAM", 1, 12) == 11  # the first night's NGRAM: 11 positions, num_steps is no depth
    assert draft_depth("EAGLE", 5, 8) == 5  # a tree: no deeper than its steps
    assert draft_depth(None, None, None) is None


def test_histograms_shorter_than_the_draft_count_zeros_at_the_missing_positions() -> None:
    m = _probe_measurement()
    assert m.acceptance_per_position == (0.0, 0.0, 0.0)
    assert m.round_position_shares() == [(0.0, 0.0, 0.0)]


def test_the_collapse_nights_report_shows_zeros_in_the_block_and_the_json() -> None:
    """The night's own report read back: the block and `acceptance_per_position` say 0.00, not nothing
    (that night's JSON had `null`)."""
    assert (
        next(m for m in _document("collapse-report.json")["measurements"] if m["label"] == STANDALONE)[
            "acceptance_per_position"
        ]
        is None
    )
    report = load_report(NIGHTS / "collapse-report.json").report
    block = next(b for b in summary_blocks(report) if b.title == POSITIONS_TITLE)
    assert f"{STANDALONE}: 0.00 0.00 0.00" in block.bullets
    row = next(r for r in report.rows if r.key.label == STANDALONE)
    assert measurement_entry(row)["acceptance_per_position"] == [0.0, 0.0, 0.0]


def test_the_first_nights_acceptance_is_unchanged() -> None:
    """A normal night keeps its figures: STANDALONE 0.911 / 0.734 / 0.646, NGRAM its 11 positions."""
    standalone = _measurement("night1-report.json").acceptance_per_position
    assert standalone == pytest.approx((0.9113924, 0.7341772, 0.6455696))
    ngram = _measurement("night1-report.json", "ngram/code/c1")
    shares = ngram.acceptance_per_position
    assert shares is not None and len(shares) == 11
    assert shares == pytest.approx(
        next(m for m in _document("night1-report.json")["measurements"] if m["label"] == "ngram/code/c1")[
            "acceptance_per_position"
        ]
    )


def test_floors_fail_with_zeros_on_a_collapse() -> None:
    check = check_positions(_measurement("collapse-report.json"), (0.6, 0.4, 0.2))
    assert check.decision is Decision.MISSED
    assert "position 1 0.00" in check.message and "position 3 0.00" in check.message
    assert "reported no acceptance" not in check.message


def test_the_check_against_the_history_fails_with_zeros_on_a_collapse() -> None:
    """Was None (no check at all) on that night: the collapse hid the very check that exists for it."""
    check = check_positions_history(_measurement("collapse-report.json"), _level(), 0.05)
    assert check is not None and check.decision is Decision.MISSED
    assert "position 1 0.00 vs 0.91" in check.message
    assert "position 3 0.00 vs 0.65" in check.message


def test_the_first_night_against_itself_holds() -> None:
    check = check_positions_history(_measurement("night1-report.json"), _level(), 0.05)
    assert check is not None and check.decision is Decision.MET
