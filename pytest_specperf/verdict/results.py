"""One check's result, and how a check's message writes a value: shared by the checks of a test
(checks.py) and the checks against the stored history (regression.py)."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_specperf.measure.records import Measurement
from pytest_specperf.verdict.nightly import NightVerdict
from pytest_specperf.verdict.stats import Decision, Estimate


@dataclass(frozen=True)
class CheckResult:
    """One check of one test: what was checked, the decision, and a sentence saying why.

    `night` is the nightly verdict behind a check against the stored history (the change in force,
    rejected runs, the confirmation, what the key can detect); `start_sensitive` says whether a
    server start's own offset can explain a miss, so that a second start can confirm it.
    """

    name: str
    decision: Decision
    message: str
    estimate: Estimate | None = None
    improved: bool = False
    night: NightVerdict | None = None
    start_sensitive: bool = False

    @property
    def beyond(self) -> bool:
        """The estimate on the bad side (SUSPECT or MISSED)."""
        return self.decision in (Decision.SUSPECT, Decision.MISSED)


def fmt(estimate: Estimate, digits: int = 2) -> str:
    """'71.02 [70.10, 71.90]': a value with its interval (or 'n=1, no interval')."""
    value = f"{estimate.value:.{digits}f}"
    if not estimate.bounded:
        return f"{value} (n={estimate.n}, no interval yet)"
    return f"{value} [{estimate.low:.{digits}f}, {estimate.high:.{digits}f}]"


def rounds_text(measurement: Measurement) -> str:
    """'5 rounds', or '10 rounds on 2 server starts'."""
    text = f"{len(measurement.rounds)} rounds"
    return text if measurement.starts == 1 else f"{text} on {measurement.starts} server starts"
