"""`specperf merge A.json B.json ... -o ALL.json`: the JSON reports of shards run on several
machines (`--specperf-servers`), as one report."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from pytest_specperf.cli.common import OK
from pytest_specperf.cli.setup import Output, Setup
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.report.analysis import Report, Row, sweep_summaries
from pytest_specperf.report.jsonreport import LoadedReport, fit_json, load_report, report_document, write_json
from pytest_specperf.report.terminal import pm, render_text, summary_blocks


def merge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", type=Path, help="JSON reports (--specperf-json) of the shards")


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
        sources.append(
            {
                "path": str(part.path),
                "host": part.document.get("host"),
                "created": part.document.get("created"),
                "measurements": [row.key.label for row in part.report.rows],
            }
        )
    return sources


SETUP = Setup(
    run_merge,
    [
        merge_arguments,
        Output("where to write the merged JSON report", flags=("-o", "--output"), metavar=None, required=True),
    ],
)
