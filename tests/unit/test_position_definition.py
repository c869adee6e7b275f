"""Acceptance by draft position has one definition and one label wherever it appears (the report, the
JSON, the explanation, the dashboard, `specperf tune`), and the "largest drop" names the position that
lost the most under it (docs/metrics.md, "Acceptance by draft position").

Replays a real SGLang server speculating on a CPU (tests/data/real-nights/sglang-cpu-spec/): the first
night's STANDALONE histograms (per round `[7, 14, 7, 51]` over four requests: shares 0.911 / 0.734 /
0.646, conditional rates 0.911 / 0.806 / 0.879) and the collapse night's `[63]`. The pytest report said
0.91 0.73 0.65 while `specperf tune`, under the same label, said its conditional rates (0.89 0.80 0.87).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_specperf.measure.records import POSITIONS_LABEL, POSITIONS_MEANING, Measurement
from pytest_specperf.report.dashboard.model import gate
from pytest_specperf.report.jsonreport import load_report
from pytest_specperf.report.schema import REPORT_SCHEMA
from pytest_specperf.report.terminal import summary_blocks
from pytest_specperf.store.records import Provenance, StoredBaseline, StoredRun, Summary
from pytest_specperf.tune.acceptance import AcceptanceObservation, fit_acceptance
from pytest_specperf.tune.document import _model
from pytest_specperf.tune.output import model_lines
from pytest_specperf.verdict.checks import Limits
from pytest_specperf.verdict.explain import explain, positions_text
from pytest_specperf.verdict.standing import judge_newest

NIGHTS = Path(__file__).parents[1] / "data" / "real-nights" / "sglang-cpu-spec"
STANDALONE = "standalone/code/c1"


def _measurement(report: str) -> Measurement:
    document = json.loads((NIGHTS / report).read_text())
    return Measurement.from_dict(next(m for m in document["measurements"] if m["label"] == STANDALONE))


def _round_histogram(m: Measurement) -> tuple[int, ...]:
    """The first round's verify steps by drafts accepted, over its requests."""
    records = [r.accept_histogram for r in m.rounds[0].records if r.accept_histogram]
    depth = max(len(h) for h in records)
    return tuple(sum(h[a] for h in records if a < len(h)) for a in range(depth))


def test_the_first_nights_round_is_what_the_docs_quote() -> None:
    night1 = _measurement("night1-report.json")
    assert _round_histogram(night1) == (7, 14, 7, 51)
    assert night1.acceptance_per_position == pytest.approx((72 / 79, 58 / 79, 51 / 79))


def test_the_collapse_is_explained_at_the_position_that_lost_most() -> None:
    """The collapse night against the first night's level: every position lost, position 1 the most (that
    night's explanation had `positions: null`, no per-position part at all)."""
    found = explain(_measurement("collapse-report.json"), [_measurement("night1-report.json")])
    assert found is not None and found.positions is not None
    then, now = found.positions
    assert then == pytest.approx((72 / 79, 58 / 79, 51 / 79)) and now == (0.0, 0.0, 0.0)
    assert found.to_dict()["positions"] == {"level": list(then), "tonight": [0.0, 0.0, 0.0]}
    assert positions_text(then, now) == (
        "; by draft position: 0.91 → 0.00, 0.73 → 0.00, 0.65 → 0.00 "
        "(the largest drop at position 1: 0.91 of the 2.29 accepted drafts per verify step lost)"
    )


def test_a_loss_at_one_position_is_named_there_not_at_the_deepest() -> None:
    """The first night's round with only position 2's acceptance halved (72 steps reached it, 29 instead of
    58 accepted its draft, 25 of those the third as before: [7, 43, 4, 25]): the deeper share falls too,
    by less, so the largest drop is position 2's."""
    then = (72 / 79, 58 / 79, 51 / 79)
    now = (72 / 79, 29 / 79, 25 / 79)
    assert positions_text(then, now).endswith(
        "(the largest drop at position 2: 0.37 of the 0.70 accepted drafts per verify step lost)"
    )
    assert positions_text(then, then).endswith("(no position dropped)")


def _fit_lines() -> tuple[list[str], dict[str, Any]]:
    """`specperf tune`'s model lines and document for the first night's STANDALONE chain alone."""
    histogram = tuple(float(v) for v in _round_histogram(_measurement("night1-report.json")))
    fit = fit_acceptance([AcceptanceObservation(depth=3, width=1.0, histogram=histogram)], 3)
    result: Any = SimpleNamespace(
        forecast=SimpleNamespace(cost={}, acceptance={("draft-slot", "code"): fit}, systematic_sd=0.0)
    )
    return model_lines(result), _model(result)


def test_tune_shows_the_reports_figure_under_the_reports_label() -> None:
    lines, document = _fit_lines()
    line = next(x for x in lines if POSITIONS_LABEL in x)
    prefix = f"  {POSITIONS_LABEL}, code (a chain's, fitted: {POSITIONS_MEANING}): "
    assert line.startswith(prefix)
    shares = [float(v) for v in line.removeprefix(prefix).split(";")[0].split()]
    assert shares == pytest.approx([0.91, 0.73, 0.65], abs=0.03)  # the report's 0.91 0.73 0.65, fitted
    by_position = document["acceptance"][0]["by_position"]
    assert [p["value"] for p in by_position] == pytest.approx(shares, abs=0.005)
    assert all(p["low"] <= p["value"] <= p["high"] for p in by_position)
    rates = [p["value"] for p in document["acceptance"][0]["rates"]]  # the model's conditional rates
    assert rates == pytest.approx([0.91, 0.81, 0.88], abs=0.03)


def test_the_report_and_the_json_schema_use_the_one_label() -> None:
    title = (
        "acceptance by draft position 1, 2, ... (the share of verify steps that accepted at least that many drafts):"
    )
    block = next(b for b in summary_blocks(load_report(NIGHTS / "night1-report.json").report) if b.title == title)
    assert f"{STANDALONE}: 0.91 0.73 0.65" in block.bullets
    entry = REPORT_SCHEMA["$defs"]["measurement"]["properties"]["acceptance_per_position"]
    described = json.dumps(entry)
    assert POSITIONS_MEANING in described and "Acceptance by draft position" in described


def _history() -> StoredBaseline:
    """The first night twice (the level), then the collapse night."""
    night1, collapse = _measurement("night1-report.json"), _measurement("collapse-report.json")
    runs = tuple(
        StoredRun(m, Summary.of(m), Provenance(f"2026-12-0{i}T18:00:00+00:00", None, "cpu", "0", f"s{i}"), 0)
        for i, m in enumerate((night1, night1, collapse), start=1)
    )
    return StoredBaseline(collapse, Summary.of(collapse), runs[-1].provenance, Path("standalone/code-c1.json"), runs)


def test_the_dashboard_shows_the_newest_night_beside_its_level() -> None:
    entry = _history()
    limits = Limits.tolerating(0.05, 0.02)
    shown = gate(entry, judge_newest(entry, "output_throughput", limits), limits)
    assert shown.positions == (
        f"{POSITIONS_LABEL} ({POSITIONS_MEANING}): newest night 0.00 0.00 0.00; its level 0.91 0.73 0.65"
    )
