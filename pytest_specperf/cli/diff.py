"""`specperf diff OLD NEW`: two JSON reports, stored baseline files or stores, side by side.

Ratios new/old with intervals and fingerprint drift per measurement. A store or a stored baseline
file on the old side is a history: the new side's newest night is judged against it with the tests'
own history check (verdict/checks.py `check_regression`), so `diff` and a test give the same verdict
on the same two histories; two JSON reports are compared round against round. A measurement whose
fingerprint identity differs is INCOMPARABLE: shown, never counted as a regression.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from pytest_specperf.cli.common import OK, REGRESSED, mean_pm, opened_store, shown
from pytest_specperf.cli.setup import Setup, Tolerances
from pytest_specperf.config import values as check
from pytest_specperf.config.location import form_of
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement
from pytest_specperf.report.jsonreport import ReportError, is_report, load_report, read_document
from pytest_specperf.report.terminal import text_table
from pytest_specperf.store.compact import read_history
from pytest_specperf.store.records import KIND as BASELINE_KIND
from pytest_specperf.store.records import StoredBaseline
from pytest_specperf.verdict.checks import JUDGED_METRICS, Limits, check_regression
from pytest_specperf.verdict.drift import FingerprintDiff, diff
from pytest_specperf.verdict.stats import Decision, Estimate, RegressionResult, decide_regression
from pytest_specperf.verdict.verdicts import Verdict, verdict_of


def diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", help="JSON report, stored baseline file, store directory, or git:... store")
    parser.add_argument("new", help="JSON report, stored baseline file, store directory, or git:... store")


@dataclass(frozen=True)
class Side:
    """One side of a diff: where it came from, its measurements by label and, for a store or a stored
    baseline file, the histories they are the newest runs of."""

    path: Path | str
    measurements: dict[str, Measurement]
    histories: dict[str, StoredBaseline] = field(default_factory=dict)


@dataclass(frozen=True)
class Comparison:
    """Old and new measurement of one label: ratios, decisions, drift and the verdict they make."""

    label: str
    old: Measurement
    new: Measurement
    throughput: RegressionResult | None
    accept_length: RegressionResult | None
    drift: FingerprintDiff | None

    @property
    def verdict(self) -> Verdict:
        results = [r for r in (self.throughput, self.accept_length) if r is not None]
        return verdict_of(
            missed=any(r.decision is Decision.MISSED for r in results),
            incomparable=self.drift is not None and not self.drift.comparable,
            suspect=any(r.decision is Decision.SUSPECT for r in results),
            inconclusive=any(r.decision is Decision.INCONCLUSIVE for r in results),
            improved=any(r.improved for r in results),
            new=False,
        )


DIFF_HEADERS = ("measurement", "old tok/s", "new tok/s", "new/old [CI]", "old τ", "new τ", "τ new/old", "result")


def run_diff(args: argparse.Namespace) -> int:
    for name in ("max_regression", "max_regression_accept_length"):  # the config's rule and sentence
        setattr(args, name, check.setting(name, getattr(args, name), f"--{name.replace('_', '-')}"))
    old, new = load_side(args.old), load_side(args.new)
    pairs = pair_up(old, new)
    limits = Limits(args.max_regression, args.max_regression_accept_length, 0.0)
    comparisons = [
        compare(label, a, b, limits, old.histories.get(label), new.histories.get(label)) for label, a, b in pairs
    ]
    print(f"old: {old.path}\nnew: {new.path}")
    basis = "the new run against the old history, as the tests judge it" if old.histories else "rounds of both sides"
    print(
        f"ratios new/old with 90% intervals ({basis}); regression = credibly worse than "
        f"-{args.max_regression:.0%} tok/s or -{args.max_regression_accept_length:.0%} τ"
    )
    print()
    for line in text_table(DIFF_HEADERS, [diff_cells(c) for c in comparisons], (32,)):
        print(line)
    for title, labels in (
        ("only in old", old.measurements.keys() - new.measurements.keys()),
        ("only in new", new.measurements.keys() - old.measurements.keys()),
    ):
        if labels and not (len(old.measurements) == 1 and len(new.measurements) == 1):
            print(f"\n{title}: {', '.join(sorted(labels))}")
    drifted = [c for c in comparisons if c.drift]
    if drifted:
        print("\nfingerprint drift, old → new (identity changes make a comparison INCOMPARABLE):")
        for c in drifted:
            assert c.drift is not None
            print(f"  {c.label}:")
            for line in c.drift.describe().splitlines():
                print(f"    {line}")
    regressed = [c.label for c in comparisons if c.verdict is Verdict.REGRESSION]
    if regressed:
        print(f"\nREGRESSION: {', '.join(regressed)}")
    return REGRESSED if regressed else OK


def load_side(given: str | Path) -> Side:
    """A store (a directory, git:... or a database), a stored baseline file or a JSON report, as measurements
    by label."""
    path = Path(given)
    if form_of(str(given)).scheme != "file" or path.is_dir():
        with opened_store(str(given)) as store:
            histories = store.entries()
        if not histories:
            raise SpecperfError(f"{shown(str(given))}: no stored baselines in this store")
        return _history_side(shown(str(given)), histories)
    if path.suffix == ".jsonl":  # a history of the append-only layout (store/compact.py)
        return _history_side(path, [read_history(path)])
    data = read_document(path)
    if is_report(data):
        found = load_report(path, data).measurements
    elif data.get("kind") == BASELINE_KIND:
        return _history_side(path, [read_history(path)])
    else:
        raise ReportError(f"{path}: neither a pytest-specperf JSON report nor a stored baseline")
    return Side(path, {m.key.label: m for m in found})


def _history_side(path: Path | str, histories: list[StoredBaseline]) -> Side:
    """Histories: each measured as its newest night (every start the night's session stored)."""
    measurements = {h.measurement.key.label: newest_night(h) for h in histories}
    return Side(path, measurements, {h.measurement.key.label: h for h in histories})


def newest_night(history: StoredBaseline) -> Measurement:
    """The newest run of a history with the other runs of its session (a second start), as one
    measurement whose rounds keep their start."""
    newest = history.runs[-1] if history.runs else None
    if newest is None or not newest.provenance.session:
        return history.measurement
    night = [r for r in history.runs if r.provenance.session == newest.provenance.session]
    rounds = [dataclasses.replace(x, start=i) for i, run in enumerate(night) for x in run.measurement.rounds]
    return dataclasses.replace(history.measurement, rounds=rounds)


def pair_up(old: Side, new: Side) -> list[tuple[str, Measurement, Measurement]]:
    """Measurements with the same label; two single measurements are compared whatever their labels."""
    if len(old.measurements) == 1 and len(new.measurements) == 1:
        (a_label, a), (b_label, b) = *old.measurements.items(), *new.measurements.items()
        return [(a_label if a_label == b_label else f"{a_label} → {b_label}", a, b)]
    common = [label for label in new.measurements if label in old.measurements]
    if not common:
        raise SpecperfError(f"{old.path} and {new.path} have no measurement in common")
    return [(label, old.measurements[label], new.measurements[label]) for label in common]


def compare(
    label: str,
    old: Measurement,
    new: Measurement,
    limits: Limits,
    history: StoredBaseline | None = None,
    new_history: StoredBaseline | None = None,
) -> Comparison:
    """New against old: against old's history with the tests' own history check when old is a
    store or a stored baseline file (the runs new shares with it left out), else round against round."""
    drift = None
    if isinstance(old.fingerprint, Fingerprint) and isinstance(new.fingerprint, Fingerprint):
        drift = diff(old.fingerprint, new.fingerprint)
    if drift is not None and not drift.comparable:  # no comparison across setups, as in a test
        return Comparison(label, old, new, None, None, drift)
    if history is not None:
        history = _without(history, new_history)
    results = [_decide(old, new, metric, limits, history) for metric in JUDGED_METRICS]
    return Comparison(label, old, new, results[0], results[1], drift)


def _decide(
    old: Measurement, new: Measurement, metric: str, limits: Limits, history: StoredBaseline | None
) -> RegressionResult | None:
    tolerance = limits.tolerance(metric)
    if history is not None and history.runs:
        check = check_regression(new, history, metric, tolerance)
        if check is None or check.estimate is None:
            return None
        return RegressionResult(
            check.decision, check.improved, check.estimate, tolerance.max_regression, tolerance.direction
        )
    current, stored = new.samples(metric), old.samples(metric)
    if not current or not stored:
        return None
    return decide_regression(current, stored, tolerance.max_regression, tolerance.direction)


def _without(history: StoredBaseline, night: StoredBaseline | None) -> StoredBaseline:
    """`history` less the runs of the newest night of `night` (a store diffed with a later copy of
    itself holds tonight's runs on both sides)."""
    if night is None or not night.runs:
        return history
    newest = night.runs[-1].provenance.session
    ids = {r.provenance.run_id for r in night.runs if r.provenance.session == newest and r.provenance.run_id}
    return dataclasses.replace(history, runs=tuple(r for r in history.runs if r.provenance.run_id not in ids))


def diff_cells(c: Comparison) -> list[str]:
    tp, tau = c.throughput, c.accept_length
    return [
        c.label,
        mean_pm(c.old, "output_throughput", 1),
        mean_pm(c.new, "output_throughput", 1),
        _ratio(tp.ratio) if tp else "-",
        mean_pm(c.old, "accept_length", 2),
        mean_pm(c.new, "accept_length", 2),
        _ratio(tau.ratio) if tau else "-",
        c.verdict.value,
    ]


def _ratio(ratio: Estimate) -> str:
    if not ratio.bounded:
        return f"{ratio.value:.3f} (no CI)"
    return f"{ratio.value:.3f} [{ratio.low:.3f},{ratio.high:.3f}]"


SETUP = Setup(
    run_diff, [diff_arguments, Tolerances(throughput="tolerated throughput loss (default {default:g} = 5%%)")]
)
