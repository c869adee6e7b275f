"""The `specperf` command: read stored baselines and JSON reports without running pytest.

    specperf show [STORE]                         stored baselines as a table (default store: .specperf)
    specperf history [SERVER[/WORKLOAD]]          each stored history as a series of runs, with its
                     [--store DIR]                segments and change points
    specperf diff OLD NEW                         two JSON reports, stored baseline files or stores, side
                                                  by side: ratios with intervals, fingerprint drift
    specperf merge A.json B.json ... -o ALL.json  reports of shards run on several machines, as one report
    specperf schema                               the JSON Schema (draft 2020-12) of JSON reports
    specperf tune [--dry-run] [--json PATH]       find the best speculative config in a few server starts
                                                  ([specperf.tune] in the config file; see its --help)

Exit codes:
    0  done (diff: no measurement credibly regressed)
    1  diff: a measurement credibly regressed beyond the tolerance (throughput or accept length)
    2  usage error, or a file that is missing, corrupt, not ours, of a newer schema version, or
       (merge) two reports holding different measurements of the same speculative config

`diff` judges a change like the plugin does (stats.decide_regression on the per-round samples, the
same default tolerances); a measurement whose fingerprint identity differs is INCOMPARABLE: shown,
never counted as a regression.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.records import Measurement
from pytest_specperf.report.analysis import Report, Row, sweep_summaries
from pytest_specperf.report.jsonreport import (
    LoadedReport,
    ReportError,
    fit_json,
    is_report,
    load_report,
    read_document,
    report_document,
    write_json,
)
from pytest_specperf.report.schema import REPORT_SCHEMA
from pytest_specperf.report.terminal import pm, render_text, summary_blocks, text_table
from pytest_specperf.tune.command import add_tune_parser
from pytest_specperf.verdict.changes import change_points
from pytest_specperf.verdict.checks import Verdict, verdict_of
from pytest_specperf.verdict.fingerprint import UNSET, Fingerprint, FingerprintDiff, diff
from pytest_specperf.verdict.stats import (
    Decision,
    Direction,
    Estimate,
    RegressionResult,
    decide_regression,
    mean_estimate,
    ratio_estimate,
)
from pytest_specperf.verdict.store import KIND as BASELINE_KIND
from pytest_specperf.verdict.store import BaselineStore, StoredBaseline, StoredRun, read_baseline
from pytest_specperf.verdict.trends import paired_runs

OK, REGRESSED, FAILED = 0, 1, 2
EXIT_CODES = """exit codes:
  0  done (diff: no measurement credibly regressed)
  1  diff: a measurement credibly regressed beyond the tolerance (throughput or accept length)
  2  usage error; a missing, corrupt, foreign or newer-schema file; conflicting measurements (merge)"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (SpecperfError, OSError) as exc:
        print(f"specperf: error: {exc}", file=sys.stderr)
        return FAILED


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="specperf", description=__doc__.split("\n\n")[0], epilog=EXIT_CODES, formatter_class=formatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{show,history,diff,merge,schema,tune}")

    show = commands.add_parser("show", help="stored baselines as a table", epilog=EXIT_CODES, formatter_class=formatter)
    show.add_argument("store", nargs="?", default=".specperf", help="store directory (default: .specperf)")
    show.set_defaults(run=run_show)

    history = commands.add_parser(
        "history", help="stored run histories with segments and change points", epilog=EXIT_CODES,
        formatter_class=formatter,
    )  # fmt: skip
    history.add_argument("select", nargs="?", default="", metavar="SERVER[/WORKLOAD]", help="default: every key")
    history.add_argument("--store", default=".specperf", help="store directory (default: .specperf)")
    history.set_defaults(run=run_history)

    compare = commands.add_parser(
        "diff",
        help="compare two JSON reports, stored baseline files or stores",
        epilog=EXIT_CODES,
        formatter_class=formatter,
    )
    compare.add_argument("old", type=Path, help="JSON report, stored baseline file, or store directory")
    compare.add_argument("new", type=Path, help="JSON report, stored baseline file, or store directory")
    compare.add_argument(
        "--max-regression",
        type=float,
        default=SpecperfConfig.max_regression,
        metavar="F",
        help=f"tolerated throughput loss (default {SpecperfConfig.max_regression:g} = 5%%)",
    )
    compare.add_argument(
        "--max-regression-accept-length",
        type=float,
        default=SpecperfConfig.max_regression_accept_length,
        metavar="F",
        help=f"tolerated accept-length loss (default {SpecperfConfig.max_regression_accept_length:g})",
    )
    compare.set_defaults(run=run_diff)

    merge = commands.add_parser(
        "merge", help="combine the JSON reports of shards into one", epilog=EXIT_CODES, formatter_class=formatter
    )
    merge.add_argument("reports", nargs="+", type=Path, help="JSON reports (--specperf-json) of the shards")
    merge.add_argument("-o", "--output", type=Path, required=True, help="where to write the merged JSON report")
    merge.set_defaults(run=run_merge)

    schema = commands.add_parser("schema", help="print the JSON Schema of --specperf-json reports")
    schema.set_defaults(run=run_schema)

    add_tune_parser(commands, formatter)
    return parser


def run_schema(args: argparse.Namespace) -> int:
    """For validators in other languages, or `check-jsonschema --schemafile`."""
    print(json.dumps(REPORT_SCHEMA, indent=2))
    return OK


# --- show --------------------------------------------------------------------------------------------


STORE_LAYOUT = "stored baselines live in <store>/<server>/*.json, the simulator's in <store>/sim/<server>/*.json"
SHOW_HEADERS = ("server", "workload", "c", "tok/s", "τ", "rounds", "stored", "fingerprint")
SHOW_WIDTHS = (20, 12, None, None, None, None, None, 52)


def run_show(args: argparse.Namespace) -> int:
    root = Path(args.store)
    if not root.is_dir():
        raise SpecperfError(f"{root}: no such store directory ({STORE_LAYOUT})")
    entries = BaselineStore(root).entries()
    if not entries:
        print(f"no stored baselines in {root}")
        return OK
    print(f"stored baselines in {root}:")
    for line in text_table(SHOW_HEADERS, [show_cells(e) for e in entries], SHOW_WIDTHS):
        print(line)
    return OK


# --- history -----------------------------------------------------------------------------------------


HISTORY_HEADERS = ("run", "stored", "commit", "segment", "tok/s", "TPOT ms", "τ", "speedup", "rounds", "change")
#: the change column wraps, so a run with changes in several series keeps the table within 120 columns
HISTORY_WIDTHS = (None,) * 9 + (31,)
#: series searched for change points, with the short name the change column uses
HISTORY_SERIES = (
    ("output_throughput", "tok/s"),
    ("mean_tpot_ms", "TPOT"),
    ("accept_length", "τ"),
    ("speedup", "speedup"),
)


def run_history(args: argparse.Namespace) -> int:
    root = Path(args.store)
    if not root.is_dir():
        raise SpecperfError(f"{root}: no such store directory ({STORE_LAYOUT})")
    server, _, workload = args.select.partition("/")
    stored = BaselineStore(root).entries()
    entries = [
        e for e in stored
        if server in ("", e.measurement.key.server) and workload in ("", e.measurement.key.workload)
    ]  # fmt: skip
    if not entries:
        print(f"no stored history{f' for {args.select}' if args.select else ''} in {root}")
        return OK
    for entry in entries:
        reference = _reference_history(entry, stored)
        print(f"{entry.measurement.key.label}: {len(entry.runs)} runs, {entry.path}")
        if reference is not None:
            print(f"speedup over {reference.measurement.key.server}: its runs stored by the same session")
        for line in text_table(HISTORY_HEADERS, history_rows(entry, reference), HISTORY_WIDTHS):
            print(line)
        print()
    return OK


def _reference_history(entry: StoredBaseline, stored: Sequence[StoredBaseline]) -> StoredBaseline | None:
    """The stored reference of the same workload and level (for speedups), if the store has one."""
    key = entry.measurement.key
    if entry.measurement.is_reference:
        return None
    return next(
        (
            e for e in stored
            if e.measurement.is_reference and e.measurement.key.workload == key.workload
            and e.measurement.key.concurrency == key.concurrency
        ),
        None,
    )  # fmt: skip


def history_rows(entry: StoredBaseline, reference: StoredBaseline | None = None) -> list[list[str]]:
    """One row per run, oldest first: throughput, TPOT, accept length and (with the reference's
    history) the speedup over the reference run of the same session; a run where a change point
    starts in one of these series (within its segment), or where a segment starts, says so."""
    runs = list(entry.runs)
    partners = {id(run): ref for run, ref in paired_runs(runs, reference.runs if reference is not None else ())}
    speedups: dict[int, Estimate] = {}
    for run in runs:
        partner = partners.get(id(run))
        if partner is not None:
            x, y = run.measurement.samples("output_throughput"), partner.measurement.samples("output_throughput")
            if x and y:
                speedups[id(run)] = ratio_estimate(x, y)

    def value(run: StoredRun, metric: str) -> float | None:
        if metric == "speedup":
            found = speedups.get(id(run))
            return found.value if found is not None else None
        return run.summary_value(metric)

    marks: dict[int, list[str]] = {}
    for index, run in enumerate(runs):
        if index and run.segment != runs[index - 1].segment:
            marks.setdefault(index, []).append("new segment (--specperf-update)")
    for segment in sorted({r.segment for r in runs}):
        for metric, name in HISTORY_SERIES:
            members = [i for i, r in enumerate(runs) if r.segment == segment and value(r, metric) is not None]
            values = [value(runs[i], metric) for i in members]
            for change in change_points([v for v in values if v is not None]):
                marks.setdefault(members[change.index], []).append(f"{name} {change.percent}")
    rows = []
    for index, run in enumerate(runs):
        m = run.measurement
        rows.append([
            str(index + 1), run.provenance.created[:10], (run.provenance.git_commit or "-")[:7], str(run.segment),
            _mean_pm(m, "output_throughput", 1), _mean_pm(m, "mean_tpot_ms", 2), _mean_pm(m, "accept_length", 2),
            pm(speedups[id(run)], 3) if id(run) in speedups else "-", str(len(m.rounds)),
            "; ".join(marks.get(index, [])),
        ])  # fmt: skip
    return rows


def show_cells(entry: StoredBaseline) -> list[str]:
    m = entry.measurement
    return [
        m.key.server,
        m.key.workload,
        str(m.key.concurrency),
        _mean_pm(m, "output_throughput", 1),
        _mean_pm(m, "accept_length", 2),
        str(len(m.rounds)),
        entry.provenance.created[:10],
        fingerprint_line(m.fingerprint),
    ]


def _mean_pm(m: Measurement, metric: str, digits: int) -> str:
    samples = m.samples(metric)
    return pm(mean_estimate(samples), digits) if samples else "-"


def fingerprint_line(fingerprint: object) -> str:
    """The fingerprint's summary, plus the simulator's time scale (it scales every number)."""
    if not isinstance(fingerprint, Fingerprint):
        return "-"
    scale = fingerprint.identity.get("sim_time_scale", UNSET)
    return fingerprint.summary() + ("" if scale == UNSET else f", time scale {scale}")


# --- diff --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One side of a diff: where it came from and its measurements by label."""

    path: Path
    measurements: dict[str, Measurement]


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
            inconclusive=any(r.decision is Decision.INCONCLUSIVE for r in results),
            improved=any(r.improved for r in results),
            new=False,
        )


DIFF_HEADERS = ("measurement", "old tok/s", "new tok/s", "new/old [CI]", "old τ", "new τ", "τ new/old", "result")


def run_diff(args: argparse.Namespace) -> int:
    for name in ("max_regression", "max_regression_accept_length"):
        value = getattr(args, name)
        if not 0 <= value < 1:
            raise SpecperfError(f"--{name.replace('_', '-')} must be a fraction in [0, 1), got {value}")
    old, new = load_side(args.old), load_side(args.new)
    pairs = pair_up(old, new)
    comparisons = [
        compare(label, a, b, args.max_regression, args.max_regression_accept_length) for label, a, b in pairs
    ]
    print(f"old: {old.path}\nnew: {new.path}")
    print(f"ratios new/old with 90% intervals; regression = credibly worse than -{args.max_regression:.0%} tok/s "
          f"or -{args.max_regression_accept_length:.0%} τ")  # fmt: skip
    print()
    for line in text_table(DIFF_HEADERS, [diff_cells(c) for c in comparisons], (32,)):
        print(line)
    for title, labels in (("only in old", old.measurements.keys() - new.measurements.keys()),
                          ("only in new", new.measurements.keys() - old.measurements.keys())):  # fmt: skip
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


def load_side(path: Path) -> Side:
    """A store directory, a stored baseline file or a JSON report, as measurements by label."""
    if path.is_dir():
        found = [b.measurement for b in BaselineStore(path).entries()]
        if not found:
            raise SpecperfError(f"{path}: no stored baselines in this directory")
    else:
        data = read_document(path)
        if is_report(data):
            found = load_report(path, data).measurements
        elif data.get("kind") == BASELINE_KIND:
            found = [read_baseline(path).measurement]
        else:
            raise ReportError(f"{path}: neither a pytest-specperf JSON report nor a stored baseline")
    return Side(path, {m.key.label: m for m in found})


def pair_up(old: Side, new: Side) -> list[tuple[str, Measurement, Measurement]]:
    """Measurements with the same label; two single measurements are compared whatever their labels."""
    if len(old.measurements) == 1 and len(new.measurements) == 1:
        (a_label, a), (b_label, b) = *old.measurements.items(), *new.measurements.items()
        return [(a_label if a_label == b_label else f"{a_label} → {b_label}", a, b)]
    common = [label for label in new.measurements if label in old.measurements]
    if not common:
        raise SpecperfError(f"{old.path} and {new.path} have no measurement in common")
    return [(label, old.measurements[label], new.measurements[label]) for label in common]


def compare(label: str, old: Measurement, new: Measurement, max_tp: float, max_tau: float) -> Comparison:
    def decide(metric: str, tolerance: float) -> RegressionResult | None:
        current, stored = new.samples(metric), old.samples(metric)
        if not current or not stored:
            return None
        return decide_regression(current, stored, tolerance, Direction.HIGHER_IS_BETTER)

    drift = None
    if isinstance(old.fingerprint, Fingerprint) and isinstance(new.fingerprint, Fingerprint):
        drift = diff(old.fingerprint, new.fingerprint)
    if drift is not None and not drift.comparable:  # no comparison across setups, as in a test
        return Comparison(label, old, new, None, None, drift)
    return Comparison(label, old, new, decide("output_throughput", max_tp), decide("accept_length", max_tau), drift)


def diff_cells(c: Comparison) -> list[str]:
    tp, tau = c.throughput, c.accept_length
    return [
        c.label,
        _mean_pm(c.old, "output_throughput", 1),
        _mean_pm(c.new, "output_throughput", 1),
        _ratio(tp.ratio) if tp else "-",
        _mean_pm(c.old, "accept_length", 2),
        _mean_pm(c.new, "accept_length", 2),
        _ratio(tau.ratio) if tau else "-",
        c.verdict.value,
    ]


def _ratio(ratio: Estimate) -> str:
    if not ratio.bounded:
        return f"{ratio.value:.3f} (no CI)"
    return f"{ratio.value:.3f} [{ratio.low:.3f},{ratio.high:.3f}]"


# --- merge -------------------------------------------------------------------------------------------


class MergeConflict(SpecperfError):
    """Two shards hold different measurements of the same speculative config, workload and level."""


def run_merge(args: argparse.Namespace) -> int:
    loaded = [load_report(path) for path in args.reports]
    report, sources = merge_reports(loaded)
    stores = {lr.document.get("store") for lr in loaded}
    store = stores.pop() if len(stores) == 1 else None
    write_json(args.output, report_document(report, store=store, sources=sources))
    lines = [f"{s['path']} ({s.get('host', '?')}, {s.get('created', '?')})" for s in sources]
    for line in render_text(summary_blocks(report, store=store, sources=lines)):
        print(line)
    print(f"\nwrote the merged report ({len(report.rows)} measurements from {len(loaded)} reports) to {args.output}")
    return OK


def merge_reports(loaded: Sequence[LoadedReport]) -> tuple[Report, list[dict[str, object]]]:
    """One report from several: rows keep the speedups their own session measured.

    The same label in two reports is fine when both copies are identical (the same file twice) or
    when it is the reference: every shard measures its own, and its speedups are against that one,
    so all copies are kept and a warning says so. Any other duplicate is a `MergeConflict`.
    """
    rows: list[Row] = []
    seen: dict[str, tuple[Row, Path]] = {}
    references: dict[str, list[tuple[Row, Path]]] = {}
    merged = Report()
    for part in loaded:
        for row in part.report.rows:
            label = row.key.label
            if label in seen and _same(seen[label][0], row):
                continue
            if label in seen and not (row.measurement.is_reference and seen[label][0].measurement.is_reference):
                raise MergeConflict(
                    f"{label} is in both {seen[label][1]} and {part.path} with different measurements: merge "
                    "reports of shards that ran different server configs (--specperf-servers), or leave one out"
                )
            seen.setdefault(label, (row, part.path))
            if row.measurement.is_reference:
                references.setdefault(label, []).append((row, part.path))
            rows.append(row)
        _absorb(merged, part.report)
    merged.rows = sorted(
        rows, key=lambda r: (not r.measurement.is_reference, r.key.server, r.key.workload, r.key.concurrency)
    )
    merged.warnings += [_reference_note(label, copies) for label, copies in references.items() if len(copies) > 1]
    merged.warnings += _model_notes(loaded)
    merged.sweeps = sweep_summaries(merged.rows)
    summaries = [lr.report.fingerprint_summary for lr in loaded if lr.report.fingerprint_summary]
    merged.fingerprint_summary = "; ".join(dict.fromkeys(summaries)) or None
    merged.simulated = any(lr.report.simulated for lr in loaded)
    return merged, _sources(loaded)


def _model_notes(loaded: Sequence[LoadedReport]) -> list[str]:
    """Shards measured on different models do not belong in one table: say so (the merge goes on)."""
    models: dict[str, list[str]] = {}
    for part in loaded:
        for row in part.report.rows:
            fingerprint = row.measurement.fingerprint
            model = fingerprint.identity.get("model") if isinstance(fingerprint, Fingerprint) else None
            if model:
                models.setdefault(model, []).append(str(part.path))
    if len(models) < 2:
        return []
    listed = "; ".join(f"{model} ({', '.join(dict.fromkeys(paths))})" for model, paths in sorted(models.items()))
    return [f"the merged reports were measured on {len(models)} different models: {listed}"]


def _same(a: Row, b: Row) -> bool:
    return a.measurement.to_dict() == b.measurement.to_dict()


def _absorb(merged: Report, part: Report) -> None:
    """Fits, drift, warnings and saved baselines of one shard, without duplicates."""
    known_fits = [fit_json(f) for f in merged.fits]
    merged.fits += [f for f in part.fits if fit_json(f) not in known_fits]
    for label, changes in part.drift.items():
        merged.drift.setdefault(label, changes)
    merged.warnings += [w for w in part.warnings if w not in merged.warnings]
    for key, reason in part.errors.items():
        merged.errors.setdefault(key, reason)
    merged.saved += [s for s in part.saved if s not in merged.saved]


def _reference_note(label: str, copies: list[tuple[Row, Path]]) -> str:
    where = ", ".join(f"{path.name}: {pm(row.throughput)} tok/s" for row, path in copies)
    return f"{label}: measured as the reference in {len(copies)} shards ({where}); each shard's speedups use its own"


def _sources(loaded: Sequence[LoadedReport]) -> list[dict[str, object]]:
    """The original shards: a merged input contributes the shards it was merged from."""
    sources: list[dict[str, object]] = []
    for part in loaded:
        nested = part.document.get("sources") or []
        if nested:
            sources += [dict(s) for s in nested]
            continue
        sources.append({
            "path": str(part.path),
            "host": part.document.get("host"),
            "created": part.document.get("created"),
            "measurements": [row.key.label for row in part.report.rows],
        })  # fmt: skip
    return sources


if __name__ == "__main__":
    sys.exit(main())
