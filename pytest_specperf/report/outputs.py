"""What the plugin writes at the end of a session: JSON report, Markdown, Bencher Metric Format, plots.

`write_outputs` is the one entry point (plugin.py calls it); each output is written by its own job,
so one that cannot be written does not cost the others. The JSON report itself (its encoding,
reading and schema) is `jsonreport` and `schema`; the plots are `plots`, imported only when asked
for, so a session without `--specperf-plot` never needs matplotlib.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specperf.common.jsonfile import clean
from pytest_specperf.errors import SpecperfError
from pytest_specperf.report.analysis import Report, ShownStore
from pytest_specperf.report.jsonreport import report_document, write_json
from pytest_specperf.verdict.stats import Estimate

# --- Bencher Metric Format -----------------------------------------------------------------------------

#: BMF measure name → (Row attribute, unit): the unit is in the docs, BMF itself carries none.
BMF_MEASURES = {
    "throughput": ("throughput", "output tok/s"),
    "accept-length": ("accept_length", "tokens per verify step"),
    "tpot": ("tpot_ms", "ms"),
    "ttft": ("ttft_ms", "ms"),
    "speedup": ("speedup", "x over the reference"),
}


def bmf_document(report: Report) -> dict[str, dict[str, dict[str, float]]]:
    """`{"server/workload/cN": {measure: {"value", "lower_value", "upper_value"}}}`.

    Bounds are the report's confidence interval; they are left out when it is unknown (one round),
    and a measure is left out when it was not measured (no accept length on a plain server).
    """
    out: dict[str, dict[str, dict[str, float]]] = {}
    for row in report.rows:
        measures = {}
        for measure, (attribute, _) in BMF_MEASURES.items():
            metric = _bmf_metric(getattr(row, attribute))
            if metric is not None:
                measures[measure] = metric
        out[row.key.label] = measures
    return out


def _bmf_metric(estimate: Estimate | None) -> dict[str, float] | None:
    if estimate is None or not math.isfinite(estimate.value):
        return None
    metric = {"value": estimate.value}
    if estimate.bounded:
        metric.update(lower_value=estimate.low, upper_value=estimate.high)
    return metric


# --- Markdown ------------------------------------------------------------------------------------------


def markdown_text(report: Report, *, store: ShownStore | None = None, sources: Sequence[str] = ()) -> str:
    from pytest_specperf.report.terminal import render_markdown, summary_blocks

    return render_markdown(summary_blocks(report, store=store, sources=sources, full=True))


def write_markdown(path: Path, text: str) -> list[str]:
    """Write the Markdown file (`--specperf-markdown`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return [f"specperf: wrote Markdown summary to {path}"]


def append_step_summary(path: Path, text: str) -> list[str]:
    """In a GitHub Actions job the summary goes onto the run's page by itself ($GITHUB_STEP_SUMMARY)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text + "\n")
    return [f"specperf: appended the Markdown summary to $GITHUB_STEP_SUMMARY ({path})"]


# --- the session's outputs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputPaths:
    """Where the session's outputs go (`--specperf-json`, `-markdown`, `-bmf`, `-plot`); None: not written."""

    json: str | None = None
    markdown: str | None = None
    bmf: str | None = None
    plots: str | None = None


#: Changes the JSON document before it is written (the `pytest_specperf_update_json` hook).
UpdateJson = Callable[[Report, dict[str, Any]], None]


def write_outputs(
    report: Report, paths: OutputPaths, *, store: ShownStore | None = None, update_json: UpdateJson | None = None
) -> list[str]:
    """Write every output `paths` asks for; returns one line per file written (or failed).

    A failure to write one output is reported and does not stop the others: the measurements
    behind them took a long time, and the terminal summary still shows them.
    """
    jobs: list[tuple[str | None, str, Callable[[Path], list[str]]]] = [
        (paths.json, "JSON report", lambda p: _json_job(p, report, store, update_json)),
        (paths.markdown, "Markdown summary", lambda p: write_markdown(p, markdown_text(report, store=store))),
        (
            os.environ.get("GITHUB_STEP_SUMMARY"),
            "$GITHUB_STEP_SUMMARY",
            lambda p: append_step_summary(p, markdown_text(report, store=store)),
        ),
        (paths.bmf, "Bencher Metric Format JSON", lambda p: _bmf_job(p, report)),
        (paths.plots, "plots", lambda p: _plot_job(p, report)),
    ]
    lines: list[str] = []
    for target, what, job in jobs:
        if not target:
            continue
        try:
            lines += job(Path(target))
        except (OSError, SpecperfError) as exc:
            lines.append(f"specperf: ERROR: could not write {what} to {target}: {exc}")
    return lines


def _json_job(path: Path, report: Report, store: ShownStore | None, update_json: UpdateJson | None) -> list[str]:
    document = report_document(report, store=store)
    if update_json is not None:
        update_json(report, document)
    write_json(path, document)
    return [f"specperf: wrote JSON report to {path}"]


def _bmf_job(path: Path, report: Report) -> list[str]:
    write_json(path, clean(bmf_document(report)))
    return [f"specperf: wrote Bencher Metric Format JSON to {path}"]


def _plot_job(directory: Path, report: Report) -> list[str]:
    from pytest_specperf.report.plots import write_plots

    paths = write_plots(report, directory)
    return [f"specperf: wrote {len(paths)} plots to {directory}: {', '.join(p.name for p in paths)}"]
