"""What a pytest-xdist worker hands the controller when it is done: a typed record, sent as JSON.

A worker measures and judges its share of the tests but neither stores nor reports: the controller
does both, once, after every worker handed in its measurements, their verdicts and what happened
along the way (errors, pool events, second server starts). xdist carries it in `workeroutput`,
which must be JSON-able; every entry is an object with named fields, keyed by its measurement.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.verdict.verdicts import Verdict


def key_dict(key: MeasurementKey) -> dict[str, Any]:
    return {"server": key.server, "workload": key.workload, "concurrency": key.concurrency}


def key_of(data: Mapping[str, Any]) -> MeasurementKey:
    return MeasurementKey(str(data["server"]), str(data["workload"]), int(data["concurrency"]))


@dataclass(frozen=True)
class WorkerPayload:
    """One worker's results for the controller's summary and store."""

    measurements: tuple[Measurement, ...] = ()
    verdicts: Mapping[MeasurementKey, tuple[Verdict, ...]] = field(default_factory=dict)
    #: measurements that could not be made, or whose tests errored: the first line of why
    errors: Mapping[MeasurementKey, str] = field(default_factory=dict)
    #: restarts, and stops that left a process or GPU memory behind
    pool_warnings: tuple[str, ...] = ()
    #: why a night was decided on one server start
    confirmations: Mapping[MeasurementKey, str] = field(default_factory=dict)
    #: keys measured again on a second server start
    second_starts: tuple[MeasurementKey, ...] = ()
    #: the tests of each key the session's plan holds (every worker plans every test): a session cut
    #: short stores a key only once a verdict per test came in (session `unfinished`) ...
    tests: Mapping[MeasurementKey, int] = field(default_factory=dict)
    #: ... the measurements this worker was cut short in, as (rounds completed, rounds planned) ...
    cut: Mapping[MeasurementKey, tuple[int, int]] = field(default_factory=dict)
    #: ... and the rounds such a first measurement completed
    partial: tuple[Measurement, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "measurements": [m.to_dict() for m in self.measurements],
                "verdicts": [
                    {"key": key_dict(k), "verdicts": [v.value for v in vs]} for k, vs in self.verdicts.items()
                ],
                "errors": [{"key": key_dict(k), "reason": why} for k, why in self.errors.items()],
                "pool_warnings": list(self.pool_warnings),
                "confirmations": [{"key": key_dict(k), "why": why} for k, why in self.confirmations.items()],
                "second_starts": [key_dict(k) for k in self.second_starts],
                "tests": [{"key": key_dict(k), "tests": n} for k, n in self.tests.items()],
                "cut": [{"key": key_dict(k), "rounds": r, "planned": n} for k, (r, n) in self.cut.items()],
                "partial": [m.to_dict() for m in self.partial],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> WorkerPayload:
        data = json.loads(text)
        return cls(
            measurements=tuple(Measurement.from_dict(m) for m in data["measurements"]),
            verdicts={key_of(e["key"]): tuple(Verdict(v) for v in e["verdicts"]) for e in data["verdicts"]},
            errors={key_of(e["key"]): str(e["reason"]) for e in data["errors"]},
            pool_warnings=tuple(data["pool_warnings"]),
            confirmations={key_of(e["key"]): str(e["why"]) for e in data["confirmations"]},
            second_starts=tuple(key_of(k) for k in data["second_starts"]),
            tests={key_of(e["key"]): int(e["tests"]) for e in data.get("tests", [])},
            cut={key_of(e["key"]): (int(e["rounds"]), int(e["planned"])) for e in data.get("cut", [])},
            partial=tuple(Measurement.from_dict(m) for m in data.get("partial", [])),
        )
