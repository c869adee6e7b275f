"""Why a key moved, replayed on real nights: SGLang built for CPU, STANDALONE speculation
(tests/data/real-nights/sglang-cpu-spec/).

The level rests on two nights: the first night's runs are in night1-report.json, round by round; the
second night's (stored at 18:21:20) only as the later reports' history points (mean and interval of 3
rounds per metric). `second_night` rebuilds its rounds from those points: three rounds at the mean and
one standard deviation either side reproduce each point exactly; its first-token time, which the history
does not keep, is the one that reproduces the first-token ratio the real report printed (53.6% [5.4%,
177.0%]). On that level the release before printed, byte for byte, the real night's "prefill or
queueing" sentence.

slower-target: `SGLANG_SPECPROBE_DELAY_MS=15` made the target's every forward 15 ms slower, on both
servers. collapse: a draft that never agrees with the target (τ 3.24 → 1.02).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_specperf.measure.records import Measurement
from pytest_specperf.report.jsonreport import decode_estimate, decode_measurement
from pytest_specperf.store.records import Provenance, StoredBaseline, StoredRun, Summary
from pytest_specperf.verdict.checks import Limits, evaluate
from pytest_specperf.verdict.drift import Change
from pytest_specperf.verdict.explain import explain
from pytest_specperf.verdict.stats import mean_estimate, t_quantile

NIGHT = Path(__file__).parent.parent / "data" / "real-nights" / "sglang-cpu-spec"
#: the second night's first-token time (ms) and its spread, as the real report's ratio implies them
SECOND_NIGHT_TTFT = (15.278, 4.23)


def entry(report: str, server: str) -> dict[str, Any]:
    data = json.loads((NIGHT / report).read_text())
    return next(m for m in data["measurements"] if m["server"] == server)


def night(report: str, server: str) -> Measurement:
    return decode_measurement(entry(report, server))


def _mean_and_sd(point: dict[str, Any]) -> tuple[float, float]:
    """A history point's mean and round standard deviation (its interval is a Student t one)."""
    value = point["value"]
    half = (value["high"] - value["low"]) / 2
    return value["value"], half / t_quantile(value["confidence"], value["n"] - 1) * math.sqrt(value["n"])


def second_night(server: str) -> Measurement:
    """The night stored at 18:21:20, from the history points the slower-target report shows for it."""
    history = entry("slower-target-report.json", server)["history"]
    assert history["output_throughput"][1]["created"] == "2026-12-04T18:21:20+00:00"
    first = night("night1-report.json", server)
    tok, tok_sd = _mean_and_sd(history["output_throughput"][1])
    tpot, tpot_sd = _mean_and_sd(history["mean_tpot_ms"][1])
    rounds = []
    for r, k in zip(first.rounds, (-1, 0, 1), strict=True):
        t = tpot + k * tpot_sd
        ttft = SECOND_NIGHT_TTFT[0] + k * SECOND_NIGHT_TTFT[1] if server != "plain" else r.ttft_ms.mean
        rounds.append(
            dataclasses.replace(
                r,
                output_throughput=tok + k * tok_sd,
                tpot_ms=dataclasses.replace(r.tpot_ms, mean=t),
                ttft_ms=dataclasses.replace(r.ttft_ms, mean=ttft),
                e2e_ms=dataclasses.replace(r.e2e_ms, mean=ttft + 63 * t),  # 64 tokens: the first, then 63 at TPOT
            )
        )
    return dataclasses.replace(first, rounds=rounds)


def level(server: str) -> list[Measurement]:
    return [night("night1-report.json", server), second_night(server)]


def test_the_second_night_is_rebuilt_as_stored() -> None:
    history = entry("slower-target-report.json", "standalone")["history"]
    rebuilt = second_night("standalone")
    for metric in ("output_throughput", "mean_tpot_ms"):
        stored = history[metric][1]["value"]
        found = mean_estimate(rebuilt.samples(metric))
        assert (found.value, found.low, found.high) == pytest.approx((stored["value"], stored["low"], stored["high"]))


def slower_target(tonight: Measurement | None = None) -> Any:
    """The explanation of the slower-target night (or of `tonight`), sized by the night's own verdict
    when `tonight` is not given (its `vs_baseline`), else by the explanation's own ratio."""
    report = entry("slower-target-report.json", "standalone")
    drift = [Change(c["name"], c["old"], c["new"]) for c in report["drift"]]
    verdict = {"verdict": decode_estimate(report["estimates"]["vs_baseline"])} if tonight is None else {}
    return explain(
        tonight or night("slower-target-report.json", "standalone"),
        level("standalone"),
        reference=night("slower-target-report.json", "plain"),
        reference_level=level("plain"),
        drift=drift,
        **verdict,
    )


def test_a_level_whose_nights_differ_5x_cannot_tell_which_part_moved() -> None:
    """The cycle is 25.35 ms tonight against 25.25 and 5.51 ms on the level's nights: nothing can be split
    on that. The first token is not named by elimination (15 ms of a 550 ms request cannot carry -54%);
    the variable that changed on both servers, whose plain decoding slowed with it, is the candidate."""
    found = slower_target()
    assert found.part == "unclear"
    assert found.sentence() == (
        "-54.0%: cannot tell which part moved: the level's nights differ 4.4x (τ 3.24 → 3.24); a candidate "
        "cause, changed on the reference too, whose plain decoding moved with it (TPOT 19.18 ms tonight, "
        "8.32, 2.40 ms on the level's nights): SGLANG_SPECPROBE_DELAY_MS: unset → 15"
    )
    data = found.to_dict()
    assert data["candidates"] == [{"name": "SGLANG_SPECPROBE_DELAY_MS", "old": "unset", "new": "15"}]
    assert data["level_spread"] == pytest.approx(4.4, abs=0.05)


def test_identical_nights_get_the_same_explanation() -> None:
    """Tonight's two server starts, each taken as a night of its own: the same 15 ms slowdown against the
    same history (the release before: "prefill or queueing" for one, "the target model or the node" for
    the other)."""
    tonight = night("slower-target-report.json", "standalone")
    first, second = (slower_target(tonight.of_start(start)) for start in (0, 1))
    assert first.part == second.part == "unclear"
    assert first.causes == second.causes and first.candidates == second.candidates
    said = [e.sentence().split(": ", 1)[1] for e in (first, second)]  # past the size: -52.3% and -54.4%
    assert said[0] == said[1] and said[0].startswith("cannot tell which part moved: the level's nights differ 4.4x")


def judged(report: str) -> Any:
    """The night through the verdict: the history of the two level nights (one session each, with the
    reference's runs of the same sessions), tonight's rounds, the default tolerances."""

    def history(server: str) -> StoredBaseline:
        runs = tuple(
            StoredRun(
                m, Summary.of(m), Provenance(f"2026-12-04T18:{17 + 4 * i}:00+00:00", None, "h", "0.1.0", f"s{i}"), 0
            )
            for i, m in enumerate(level(server))
        )
        return StoredBaseline(runs[-1].measurement, runs[-1].summary, runs[-1].provenance, NIGHT, runs)

    tonight, reference = night(report, "standalone"), night(report, "plain")
    return evaluate(
        tonight,
        reference,
        None,
        Limits.tolerating(0.05, 0.05),
        history("standalone"),
        updating=False,
        reference_baseline=history("plain"),
    )


@pytest.mark.parametrize(
    ("report", "beside"),
    [("slower-target-report.json", "vs baseline -54.0%"), ("collapse-report.json", "vs baseline -45.6%")],
)
def test_the_size_an_explanation_quotes_is_the_verdicts_own(report: str, beside: str) -> None:
    """`why: -57.9%` stood beside `-45.6%` on the collapse night: one report, one figure. The figure the
    verdict gives tonight is the one the real report printed."""
    evaluation = judged(report)
    check = next(c for c in evaluation.checks if c.name == "regression:output_throughput")
    ratio = check.night.comparison.ratio
    assert f"vs baseline {ratio.value - 1:+.1%}" == beside
    assert evaluation.explanation is not None
    assert evaluation.explanation.throughput == ratio
    assert evaluation.explanation.sentence().startswith(f"{ratio.value - 1:+.1%}: ")
