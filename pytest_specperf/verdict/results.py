"""One check's result, and how a check's message writes a value: shared by the checks of a test
(checks.py) and the checks against the stored history (regression.py)."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_specperf.measure.records import Measurement
from pytest_specperf.verdict.history import MIN_RUNS
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


def capped_by(night: NightVerdict | None) -> str | None:
    """Why a night judged on one server start against a short history could be at most SUSPECT, in the
    words a table row has room for ('1 start, < 3 runs'); None when nothing capped it.

    A REGRESSION needs a measured start-to-start spread (`history.MIN_RUNS` runs) or a second server
    start that agrees (verdict/nightly.py): a row without either says so beside its SUSPECT, so that a
    larger drop reading SUSPECT beside a smaller one reading REGRESSION explains itself."""
    if night is None or night.decision is not Decision.SUSPECT or night.comparison is None:
        return None
    if night.confirmed is not None or not night.comparison.prior:
        return None
    return f"1 start, < {MIN_RUNS} runs"
