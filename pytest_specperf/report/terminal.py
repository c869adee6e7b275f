"""Terminal and Markdown renderings of an `analysis.Report`.

The summary is first built as a list of `Block`s (a title, paragraphs, bullets, a table), and two
small renderers turn blocks into terminal text (wrapped to `WIDTH` columns) or GitHub-flavoured
Markdown. Both therefore say the same thing, and `specperf merge` prints the same summary as
pytest does. Nothing here computes a statistic: `analysis.py` does, this module only formats.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from pytest_specperf.config.location import StoreLocation
from pytest_specperf.measure.fingerprint import UNSET, Fingerprint
from pytest_specperf.measure.machinelock import is_wait_note
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.report import details
from pytest_specperf.report.analysis import INTERRUPTED, Cut, Report, Row, ShownStore
from pytest_specperf.report.blocks import (
    NAME_WIDTH,
    WORKLOAD_WIDTH,
    Block,
    level,
    percent,
    pm,
    signed_pm,
    text_table,
    times,
)
from pytest_specperf.report.details import sweep_blocks
from pytest_specperf.verdict.results import capped_by
from pytest_specperf.verdict.verdicts import Verdict

__all__ = ["Block", "level", "pm", "render_markdown", "render_text", "signed_pm", "summary_blocks", "sweep_blocks"]

#: Terminal summary width: CI logs and 120-column terminals show it without wrapping.
WIDTH = 120

HEADERS = ("server", "workload", "c", "n", "tok/s", "vs baseline", "speedup", "τ", "verdict")
#: The trend column: tok/s of the last runs of a row's history, tonight last, as a sparkline.
TREND_HEADER = "last 5"
TREND_RUNS = 5
#: A sparkline spans at least ±5% around the stored runs' median, so round-to-round wobble stays flat.
TREND_SPAN = 0.05
SPARK = "▁▂▃▄▅▆▇"  # odd: no change sits on the middle level


# --- blocks ----------------------------------------------------------------------------------------


def summary_blocks(
    report: Report,
    *,
    store: ShownStore | None = None,
    sources: Sequence[str] = (),
    detail: bool = True,
    full: bool = False,
) -> list[Block]:
    """The whole summary, in reading order: the header, the verdict table, what explains it (`detail`:
    cost model, acceptance by draft position, lossless, τ, fits, sweeps; `details.py`), and what needs
    attention (drift, warnings, what was stored). `full` adds the latency percentiles. pytest's summary
    at the default verbosity has no `detail`, so it fits a screen; `-v` or `--specperf-report full`
    show everything, and so does the Markdown summary."""
    blocks = [header_block(report, store, sources), main_block(report)]
    blocks += details.detail_blocks(report, percentiles=full) if detail else []
    attention = (drift_block(report), warnings_block(report, detail), saved_block(report, detail))
    return blocks + [b for b in attention if b is not None]


def header_block(report: Report, store: ShownStore | None, sources: Sequence[str]) -> Block:
    lines = []
    if store is not None:
        lines.append(f"store: {store.shown() if isinstance(store, StoreLocation) else store}")
    lines += [f"merged from: {source}" for source in sources]
    if report.fingerprint_summary:
        lines.append(f"measured on: {report.fingerprint_summary}")
    note = simulation_note(report)
    if note:
        lines.append(note)
    reference = _reference_name(report)
    confidence = _confidence(report)
    lines.append(
        f"± and [low,high]: {confidence:.0%} confidence intervals over n rounds; vs baseline and speedup: the ones "
        "their checks decide on"
    )
    if reference:
        lines.append(
            f"speedup = tok/s over {reference} (ref), same workload, same session; start-to-start spread included"
        )
    if _has_trends(report):
        lines.append(
            f"{TREND_HEADER}: tok/s of the last {TREND_RUNS} runs in the stored history, tonight last; "
            f"{SPARK[0]}..{SPARK[-1]} spans ±{TREND_SPAN:.0%} or more around their median"
        )
    return Block(lines=tuple(lines))


def simulation_note(report: Report) -> str | None:
    """Say plainly which numbers come from the simulator, and how its time scale distorts them."""
    prints = [fp for r in report.rows if (fp := r.measurement.fingerprint) is not None]  # None: cut short
    simulated = [fp for fp in prints if isinstance(fp, Fingerprint) and fp.identity.get("launcher") == "sim"]
    if not simulated:
        return "SIMULATED: these results come from pytest_specperf.sim, not a GPU" if report.simulated else None
    which = "all measurements" if len(simulated) == len(prints) else f"{len(simulated)} of {len(prints)} measurements"
    profiles = sorted({fp.identity.get("sim_profile", UNSET) for fp in simulated} - {UNSET})
    profile = f" (profile {', '.join(profiles)})" if profiles else ""
    scales = sorted({fp.identity.get("sim_time_scale", UNSET) for fp in simulated})
    return (
        f"SIMULATED: {which} come from pytest_specperf.sim{profile}, a model of a GPU server, not a GPU; "
        + "; ".join(scale_note(s) for s in scales)
    )


def scale_note(scale: str) -> str:
    """What a simulator's time scale does to its numbers, in words: the terminal summary and the
    dashboard say it alike, so a scaled run is never read as a real one."""
    try:
        factor = float(scale)
    except ValueError:
        return "time scale unknown"
    if factor == 1.0 or factor <= 0:
        return f"time scale {scale} (delays as modelled)"
    return (
        f"time scale {factor:g}: every delay is x{factor:g}, so tok/s read {1 / factor:g}x "
        f"and ms {factor:g}x what the modelled server would show"
    )


def _reference_name(report: Report) -> str | None:
    return next((r.key.server for r in report.rows if r.measurement.is_reference), None)


def _confidence(report: Report) -> float:
    for row in report.rows:
        for estimate in (row.throughput, row.speedup):
            if estimate is not None and estimate.n > 1:
                return estimate.confidence
    return 0.9


def main_block(report: Report) -> Block:
    trends = _has_trends(report)
    headers = (*HEADERS[:-1], TREND_HEADER, *HEADERS[-1:]) if trends else HEADERS
    rows = [row_cells(r) for r in report.rows]
    errors = [error_cells(key) for key in report.unmeasured_errors()]
    errors += [error_cells(key, cut) for key, cut in report.unmeasured_cuts().items()]
    if trends:
        rows = [[*cells[:-1], trend(r), cells[-1]] for cells, r in zip(rows, report.rows, strict=True)]
        errors = [[*cells[:-1], "-", cells[-1]] for cells in errors]
    # the trend column costs 8 columns: long server names wrap earlier, so the table stays within WIDTH
    names = NAME_WIDTH - len(TREND_HEADER) - 2 if trends else NAME_WIDTH
    return Block(headers=headers, cells=tuple(tuple(c) for c in (*rows, *errors)), widths=(names, WORKLOAD_WIDTH))


def _has_trends(report: Report) -> bool:
    return any(len(r.history.get("output_throughput", ())) >= 2 for r in report.rows)


def trend(row: Row, runs: int = TREND_RUNS) -> str:
    """The row's tok/s over its last `runs` runs, tonight last, as a sparkline ('▄▄▅▁▁'); '-' without a history.

    The scale spans at least ±`TREND_SPAN` around the median of the stored runs shown, so noise of a
    percent stays on one level and a step of -8% reads as one."""
    points = row.history.get("output_throughput", ())[-runs:]
    values = [p.value.value for p in points if math.isfinite(p.value.value) and p.value.value > 0]
    if len(values) < 2:
        return "-"
    stored = [p.value.value for p in points if not p.tonight and math.isfinite(p.value.value)] or values
    middle = statistics.median(stored)
    changes = [v / middle - 1.0 for v in values]
    half = max(TREND_SPAN, *(abs(c) for c in changes))
    top = len(SPARK) - 1
    return "".join(SPARK[min(top, max(0, round((c + half) / (2 * half) * top)))] for c in changes)


def row_cells(row: Row) -> list[str]:
    key = row.key
    name = key.server + (" (ref)" if row.measurement.is_reference else "")
    tau = pm(row.accept_length, 2) if row.accept_length else ("1" if row.measurement.is_reference else "-")
    return [
        name,
        key.workload,
        str(key.concurrency),
        str(len(row.measurement.rounds)) if (cut := row.interrupted) is None else f"{cut.rounds} of {cut.planned}",
        pm(row.throughput),
        percent(row.vs_baseline),
        times(row.speedup) + ("*" if row.unlike_reference and row.speedup is not None else ""),
        tau,
        INTERRUPTED if row.interrupted is not None else verdict_cell(row),
    ]


def verdict_cell(row: Row) -> str:
    """The row's verdict, with why it is capped where it is ('SUSPECT (1 start, < 3 runs)')."""
    capped = capped_by(row.night) if row.verdict is Verdict.SUSPECT else None
    return f"{row.verdict.value} ({capped})" if capped else row.verdict.value


def error_cells(key: MeasurementKey, cut: Cut | None = None) -> list[str]:
    """A row for a measurement that could not be made, or was cut short before its first round; the warnings say why."""
    rounds, verdict = ("0", Verdict.ERROR.value) if cut is None else (f"0 of {cut.planned}", INTERRUPTED)
    return [key.server, key.workload, str(key.concurrency), rounds, "-", "-", "-", "-", verdict]


def drift_block(report: Report) -> Block | None:
    if not report.drift:
        return None
    bullets = tuple(f"{label}: " + "; ".join(str(c) for c in changes) for label, changes in report.drift.items())
    return Block(title="environment drift since the stored baseline:", bullets=bullets)


def warnings_block(report: Report, full: bool = True) -> Block | None:
    """The report's warnings. At the default verbosity each sentence is said once: without a row's `why:`
    (the failing or warning test's own message gave it), and the waits for another session's
    measurement (each said as a progress line when it happened) as one line for all of them."""
    if full:
        shown = list(report.warnings)
    else:
        waits = {f"{r.key.label}: {note}" for r in report.rows for note in r.measurement.notes if is_wait_note(note)}
        shown = [w for w in report.warnings if w not in _why_lines(report) and w not in waits]
        waited = sum(1 for r in report.rows if any(is_wait_note(note) for note in r.measurement.notes))
        if waited:
            shown.append(
                f"{waited} measurement{'s' if waited != 1 else ''} waited for another session's measurement on "
                "this machine (the progress lines above say how long; -v lists them)"
            )
    return Block(title="warnings:", bullets=tuple(shown)) if shown else None


def _why_lines(report: Report) -> set[str]:
    return {f"{r.key.label}: why: {r.explanation['sentence']}" for r in report.rows if r.explanation}


def saved_block(report: Report, full: bool = True) -> Block | None:
    """What tonight stored, per key under `full`; else one line, and a line per key only where there is
    something to act on (an unreadable file kept aside)."""
    if report.saved:
        updating = all(saved.new_segment for _, saved in report.saved)
        if not full:
            return _saved_line(report, updating)
        bullets = []
        for key, saved in report.saved:
            old = f"{saved.old.output_throughput:.1f}" if saved.old and saved.old.output_throughput else "none"
            new = f"{saved.new.output_throughput:.1f}" if saved.new.output_throughput else "-"
            line = f"{key.label}: {old} → {new} ({_short_path(saved.path)}; segment {saved.segment}, {saved.runs} runs)"
            if saved.kept_as is not None:
                line += f"; {_kept_aside(saved)}"
            bullets.append(line)
        if updating:
            return Block(title="stored baselines (--specperf-update), old → new tok/s:", bullets=tuple(bullets))
        return Block(title="recorded runs (--specperf-record), last → tonight tok/s:", bullets=tuple(bullets))
    if any(r.verdict.value == "NEW" for r in report.rows):
        return Block(lines=("NEW: no stored baseline yet for some measurements; store them with --specperf-update",))
    return None


def _saved_line(report: Report, updating: bool) -> Block:
    keys = len(report.saved)
    what = "stored as the new baselines (--specperf-update)" if updating else "recorded (--specperf-record)"
    aside = [f"{key.label}: {_kept_aside(saved)}" for key, saved in report.saved if saved.kept_as is not None]
    line = f"{keys} measurement{'s' if keys != 1 else ''} {what}; -v lists them, old → new tok/s"
    return Block(lines=(line,), bullets=tuple(aside))


def _kept_aside(saved: Any) -> str:
    assert saved.kept_as is not None
    return f"the previous file was unreadable, kept as {saved.kept_as.name}: {saved.replaced_error}"


def _short_path(path: Path) -> str:
    """The last two parts (`<server>/<file>`): the store directory is in the header already."""
    parts = Path(path).parts
    return str(Path(*parts[-2:])) if len(parts) >= 2 else str(path)


# --- renderers -------------------------------------------------------------------------------------


def render_text(blocks: Iterable[Block], width: int = WIDTH) -> list[str]:
    """Terminal lines, none wider than `width` (tables wrap long names inside their cells)."""
    out: list[str] = []
    for block in blocks:
        if out:
            out.append("")
        if block.title:
            out += _wrap(block.title, width)
        if block.headers:
            out += text_table(block.headers, block.cells or [["-"] * len(block.headers)], block.widths)
        for line in block.lines:
            out += _wrap(line, width)
        for bullet in block.bullets:
            out += _wrap(bullet, width, "  ", "    ")
    return out


def render_markdown(blocks: Iterable[Block], heading: str = "pytest-specperf") -> str:
    """GitHub-flavoured Markdown: tables in `github` format, secondary tables folded."""
    out = [f"## {heading}", ""]
    for block in blocks:
        body: list[str] = []
        if block.headers:
            body += [_table(block, "github", escape=True), ""]
        body += [f"{_md_line(line)}  " for line in block.lines]
        if block.lines:
            body.append("")
        body += [f"- {_md(bullet)}" for bullet in block.bullets]
        if block.bullets:
            body.append("")
        title = _md(block.title) if block.title else None
        if block.folded:
            out += [f"<details><summary>{title or 'details'}</summary>", "", *body, "</details>", ""]
            continue
        if title:
            out += [f"**{title}**", ""]
        out += body
    return "\n".join(out).rstrip() + "\n"


def _wrap(text: str, width: int, first: str = "", rest: str = "  ") -> list[str]:
    return textwrap.wrap(
        text, width, initial_indent=first, subsequent_indent=rest, break_long_words=False, break_on_hyphens=False
    ) or [first.rstrip()]


def _table(block: Block, fmt: str, escape: bool = False) -> str:
    """Markdown table through tabulate (`github` format), cells escaped."""
    cells = [[_cell(c) if escape else c for c in row] for row in block.cells] or [["-"] * len(block.headers)]
    headers = [_cell(h) if escape else h for h in block.headers]
    return tabulate(cells, headers=headers, tablefmt=fmt, disable_numparse=True)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_line(text: str) -> str:
    """A paragraph line; the simulator warning is bold, it must not be missed in a PR comment."""
    if text.startswith("SIMULATED:"):
        return "**SIMULATED:**" + _md(text.removeprefix("SIMULATED:"))
    return _md(text)


def _md(text: str) -> str:
    """Markdown-safe free text: no accidental emphasis or HTML from names and messages."""
    for char in ("\\", "*", "_", "<", ">", "|", "`"):
        text = text.replace(char, "\\" + char)
    return text


# --- pytest ----------------------------------------------------------------------------------------


def terminal_summary(
    terminalreporter: Any, report: Report, *, store: ShownStore | None = None, full: bool = False
) -> None:
    """The `pytest_terminal_summary` section: a screen by default, everything under `full` (-v)."""
    terminalreporter.section("specperf")
    for line in render_text(summary_blocks(report, store=store, detail=full, full=full)):
        terminalreporter.write_line(line)
