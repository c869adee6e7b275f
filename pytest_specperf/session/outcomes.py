"""What the tests of each measurement came to: their verdicts, and the errors that stand for them."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.verdict.verdicts import Verdict


@dataclass
class Outcomes:
    """Verdicts by measurement (one per test of it), and why a test of it errored."""

    verdicts: dict[MeasurementKey, list[Verdict]] = field(default_factory=dict)
    #: a test errored inside the plugin (an unreadable baseline, a server that died in a second look)
    test_errors: dict[MeasurementKey, str] = field(default_factory=dict)
    #: errors the xdist workers reported (the controller's summary shows them)
    worker_errors: dict[MeasurementKey, str] = field(default_factory=dict)

    def add(self, key: MeasurementKey, verdict: Verdict) -> None:
        self.verdicts.setdefault(key, []).append(verdict)

    def of(self, key: MeasurementKey) -> list[Verdict]:
        return self.verdicts.get(key, [])

    def record_error(self, key: MeasurementKey, reason: str) -> None:
        """A test of `key` errored inside the plugin: its row says ERROR, and why (the first line)."""
        self.add(key, Verdict.ERROR)
        self.test_errors.setdefault(key, reason.strip().splitlines()[0] if reason.strip() else "error")
