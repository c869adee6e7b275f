"""The lossless match rate (k of n outputs equal the reference's) in the terminal and the JSON, passing or not.

Replays the first night of a real SGLang server speculating on a CPU (tests/data/real-nights/
sglang-cpu-spec/night1-report.json: `plain`, `ngram` and `standalone` on `builtin:code`, 4 requests a
round, greedy, 3 rounds). Its records keep each output's hash: on that tiny random model the speculative
servers' greedy outputs differ from plain decoding's in every one of the 12 slots, and nothing in that
night's report said so (no test asked for `lossless`). A passing rate is shown the same way.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.config.workloads import WorkloadConfig
from pytest_specperf.measure.records import Measurement
from pytest_specperf.report.analysis import Report, build_report
from pytest_specperf.report.jsonreport import decode_report, measurement_entry, report_document
from pytest_specperf.report.schema import validate
from pytest_specperf.report.speculative import LOSSLESS_TITLE
from pytest_specperf.report.terminal import Block, summary_blocks
from pytest_specperf.verdict.checks import check_lossless, lossless_match
from pytest_specperf.verdict.stats import Decision

NIGHT = Path(__file__).parents[1] / "data" / "real-nights" / "sglang-cpu-spec" / "night1-report.json"


def _measurements() -> dict[str, Measurement]:
    document = json.loads(NIGHT.read_text())
    return {m["label"]: Measurement.from_dict(m) for m in document["measurements"]}


def _config(temperature: float = 0.0) -> SpecperfConfig:
    return SpecperfConfig(
        launcher="sglang",
        rounds=3,
        servers={name: ServerConfig(name=name) for name in ("plain", "ngram", "standalone")},
        workloads={
            "code": WorkloadConfig(name="code", prompts="builtin:code", num_requests=4, temperature=temperature)
        },
    )


def lossless_block(report: Report) -> Block | None:
    """The summary's lossless block, as the terminal and Markdown print it."""
    return next((b for b in summary_blocks(report) if b.title == LOSSLESS_TITLE), None)


def _report(measurements: dict[str, Measurement], temperature: float = 0.0) -> Report:
    by_key = {m.key: m for m in measurements.values()}
    return build_report(_config(temperature), by_key, {}, {}, {}, updating=False)


def test_the_real_nights_rate_is_in_the_terminal_and_the_json() -> None:
    report = _report(_measurements())
    block = lossless_block(report)
    assert block is not None
    assert block.bullets[0].startswith("ngram/code/c1: 0 of 12 (0.0%); first mismatch: round 1, request 0")
    assert block.bullets[1].startswith("standalone/code/c1: 0 of 12 (0.0%)")
    row = next(r for r in report.rows if r.key.label == "standalone/code/c1")
    entry = measurement_entry(row)
    assert entry["lossless"] == {
        "equal": 0,
        "compared": 12,
        "share": 0.0,
        "first_mismatch": "first mismatch: round 1, request 0",
    }
    reference = next(r for r in report.rows if r.measurement.is_reference)
    assert measurement_entry(reference)["lossless"] is None  # the reference is not compared with itself


def test_a_passing_rate_is_shown_too() -> None:
    """The standalone server's outputs made the reference's: 12 of 12 equal, the check passes, and the
    figure is still in the report (the H200 night's 48 of 48 appeared nowhere)."""
    measurements = _measurements()
    plain = measurements["plain/code/c1"]
    standalone = measurements["standalone/code/c1"]
    same = replace(
        standalone,
        rounds=[
            replace(
                r,
                records=tuple(
                    replace(rec, output_hash=ref.output_hash) for rec, ref in zip(r.records, p.records, strict=True)
                ),
            )
            for r, p in zip(standalone.rounds, plain.rounds, strict=True)
        ],
    )
    assert check_lossless(same, plain, 0.9).decision is Decision.MET
    report = _report({"plain/code/c1": plain, "standalone/code/c1": same})
    block = lossless_block(report)
    assert block is not None and block.bullets == ("standalone/code/c1: 12 of 12 (100.0%)",)
    entry = measurement_entry(next(r for r in report.rows if not r.measurement.is_reference))
    assert entry["lossless"] == {"equal": 12, "compared": 12, "share": 1.0, "first_mismatch": None}


def test_the_check_and_the_report_say_the_same_figure() -> None:
    measurements = _measurements()
    check = check_lossless(measurements["ngram/code/c1"], measurements["plain/code/c1"], 0.9)
    assert check.decision is Decision.MISSED
    assert check.message.startswith("lossless: 0 of 12 outputs (0.0%) equal the reference server's (plain)")
    match = lossless_match(measurements["ngram/code/c1"], measurements["plain/code/c1"])
    assert match is not None and (match.equal, match.compared) == (0, 12)


def test_a_sampled_workload_has_no_rate() -> None:
    """At temperature > 0 outputs differ by design: no figure rather than an alarming one."""
    report = _report(_measurements(), temperature=0.7)
    assert lossless_block(report) is None
    assert all(measurement_entry(r)["lossless"] is None for r in report.rows)


def test_the_rate_survives_the_json_round_trip() -> None:
    """`specperf merge` and `specperf diff` read reports back: the figure stays, in a valid document."""
    report = _report(_measurements())
    document = report_document(report, created="2026-12-04T18:00:00+00:00", host="cpu")
    assert validate(document) == []
    back = decode_report(document)
    assert [r.lossless for r in back.rows] == [r.lossless for r in report.rows]
