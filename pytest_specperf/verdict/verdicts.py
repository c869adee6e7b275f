"""The verdicts, and the one precedence between them.

Tests, report rows, the worst-of summary, `specperf diff` and `specperf backtest` all take a
verdict from `verdict_of` and compare verdicts with `SEVERITY`: two places that ordered them
differently once skipped a test whose row said REGRESSION.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Final


class Verdict(Enum):
    PASS = "PASS"
    REGRESSION = "REGRESSION"
    IMPROVED = "IMPROVED"
    SUSPECT = "SUSPECT"
    INCONCLUSIVE = "INCONCLUSIVE"
    INCOMPARABLE = "INCOMPARABLE"
    NEW = "NEW"
    ERROR = "ERROR"


#: Verdicts from the worst to the best.
SEVERITY: Final = (
    Verdict.ERROR,
    Verdict.REGRESSION,
    Verdict.INCOMPARABLE,
    Verdict.SUSPECT,
    Verdict.INCONCLUSIVE,
    Verdict.IMPROVED,
    Verdict.NEW,
    Verdict.PASS,
)


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The worst of some verdicts (PASS for none)."""
    return min(verdicts, key=SEVERITY.index, default=Verdict.PASS)


def verdict_of(
    *, missed: bool, incomparable: bool, suspect: bool, inconclusive: bool, improved: bool, new: bool
) -> Verdict:
    """The verdict of a set of checks.

    A check that failed is a REGRESSION even when the baseline is incomparable: checks against a
    stored baseline are not made across setups, so what failed (a speedup, a range, the error rate)
    is valid on its own. Then INCOMPARABLE, SUSPECT (an estimate beyond a threshold, not credibly),
    INCONCLUSIVE (the strict reading only), IMPROVED, NEW, PASS.
    """
    flags = (
        (missed, Verdict.REGRESSION),
        (incomparable, Verdict.INCOMPARABLE),
        (suspect, Verdict.SUSPECT),
        (inconclusive, Verdict.INCONCLUSIVE),
        (improved, Verdict.IMPROVED),
        (new, Verdict.NEW),
    )
    return next((verdict for flag, verdict in flags if flag), Verdict.PASS)
