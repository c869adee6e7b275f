"""A check whose value has no spread across rounds is never the reason for a second server start.

Replays the collapse night of a real SGLang server speculating on a CPU (tests/data/real-nights/
sglang-cpu-spec/): an unrelated draft, every request's histogram `[63]`, the accept length 1.0159 in
every one of the night's 9 rounds (greedy: the same outputs, the same verify steps). Its level is the
first night's STANDALONE runs (τ 3.2405 in every round). A second start of such a value measures it
again, exactly; on that night it still took one "to confirm" it (70 s on a CPU, 15 min on a GPU node).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.config.workloads import WorkloadConfig
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.session.looks import Looks
from pytest_specperf.session.outcomes import Outcomes
from pytest_specperf.session.plan import Plan
from pytest_specperf.store.records import Provenance, StoredBaseline, StoredRun, Summary
from pytest_specperf.verdict.nightly import second_start_reasons, without_spread
from pytest_specperf.verdict.verdicts import Verdict

NIGHTS = Path(__file__).parents[1] / "data" / "real-nights" / "sglang-cpu-spec"
KEY = MeasurementKey("standalone", "code", 1)


def _measurement(report: str) -> Measurement:
    document = json.loads((NIGHTS / report).read_text())
    entry = next(m for m in document["measurements"] if m["label"] == KEY.label)
    return Measurement.from_dict(entry)


def _level() -> StoredBaseline:
    """The first night's STANDALONE measurement as the level's two runs (τ 3.2405 in every round)."""
    night1 = _measurement("night1-report.json")
    runs = tuple(
        StoredRun(night1, Summary.of(night1), Provenance(f"2026-12-0{i}T18:00:00+00:00", None, "cpu", "0", f"s{i}"), 0)
        for i in (1, 2)
    )
    return StoredBaseline(night1, Summary.of(night1), runs[-1].provenance, Path("standalone/code-c1.json"), runs)


@dataclass
class Night:
    """The collapse night's rounds, handed out as the session asks for them: the first start's first
    3, its extension to 6, and the second start's 3 (what that night measured after its restart)."""

    rounds: list[Any]
    restarts: list[str] = field(default_factory=list)

    # ---- what Looks asks of the session's measurements, pool and measurer -----------------------

    failures: dict[MeasurementKey, Any] = field(default_factory=dict)

    @property
    def pool(self) -> Night:
        return self

    @property
    def measurer(self) -> Night:
        return self

    def cannot_restart(self, server: str) -> str | None:
        return None

    def restart(self, server: str, why: str) -> None:
        self.restarts.append(why)

    def measured_on_current_start(self, key: MeasurementKey) -> bool:
        return not self.restarts

    def more(self, result: Measurement, measure: Any) -> None:
        measure(None)

    def extend(self, result: Measurement, server: Any, workload: Any, rounds: int) -> None:
        result.rounds.extend(self.rounds[len(result.rounds) : len(result.rounds) + rounds])

    def add_start(self, result: Measurement, server: Any, workload: Any) -> None:
        result.rounds.extend(r for r in self.rounds if r.start == 1)

    # ---- what Looks asks of the stored histories ------------------------------------------------

    def of(self, key: MeasurementKey) -> StoredBaseline:
        return _level()

    def readable(self, key: MeasurementKey) -> StoredBaseline:
        return _level()


def _config() -> SpecperfConfig:
    return SpecperfConfig(
        launcher="sglang",
        rounds=3,
        max_rounds=6,
        servers={"plain": ServerConfig(name="plain"), "standalone": ServerConfig(name="standalone")},
        workloads={"code": WorkloadConfig(name="code", prompts="builtin:code", num_requests=4)},
    )


def _looked(night: Night, first: Measurement) -> tuple[Looks, Verdict]:
    config = _config()
    looks = Looks(config, Plan(config), night, night, Outcomes(), updating=False, strict=False)  # type: ignore[arg-type]
    evaluation = looks.evaluate("test_perf[standalone]", first, None)
    return looks, evaluation.verdict


def test_the_collapse_nights_accept_length_has_no_spread() -> None:
    collapse = _measurement("collapse-report.json")
    taus = collapse.samples("accept_length")
    assert len(taus) == 9 and taus[0] == pytest.approx(64 / 63)
    assert without_spread(taus)
    assert not without_spread(collapse.samples("output_throughput"))  # 90.8 ... 216.2 tok/s
    assert second_start_reasons(
        [("regression:accept_length", taus), ("regression:output_throughput", collapse.samples("output_throughput"))]
    ) == ["regression:output_throughput"]
    assert not without_spread(taus[:1])  # one round shows no spread, nor the want of one


def test_a_deterministic_accept_length_takes_no_second_server_start() -> None:
    """Only the accept length is beyond the level (throughput 115 tok/s against the first night's 123): no
    restart, and the collapse is a REGRESSION on one start (a second start would repeat 1.0159 exactly)."""
    collapse = _measurement("collapse-report.json")
    night = Night(list(collapse.rounds))
    first = replace(collapse, rounds=list(collapse.rounds[:3]))
    looks, verdict = _looked(night, first)
    assert night.restarts == []
    assert first.starts == 1 and len(first.rounds) == 6  # the second look's rounds on the same start
    assert verdict is Verdict.REGRESSION
    assert "accept_length had no spread across 6 rounds" in looks.confirmations[KEY]
    assert looks.second_starts == {}


def test_a_check_that_varies_still_takes_its_second_start() -> None:
    """The same night with its throughput also beyond the level: the restart is for the throughput alone."""
    collapse = _measurement("collapse-report.json")
    slow = [replace(r, output_throughput=r.output_throughput / 4) for r in collapse.rounds]
    night = Night(slow)
    first = replace(collapse, rounds=slow[:3])
    _looked(night, first)
    assert len(night.restarts) == 1
    assert "(regression:output_throughput)" in night.restarts[0]
    assert first.starts == 2
