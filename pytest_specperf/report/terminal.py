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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from pytest_specperf.config.location import StoreLocation
from pytest_specperf.measure.fingerprint import UNSET, Fingerprint
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.report.analysis import Fit, Report, Row, SweepSummary
from pytest_specperf.report.costmodel import FitStatus
from pytest_specperf.report.sweep import Certainty, Crossover, CrossoverKind, LevelWinner
from pytest_specperf.verdict.stats import Estimate
from pytest_specperf.verdict.verdicts import Verdict

#: Terminal summary width: CI logs and 120-column terminals show it without wrapping.
WIDTH = 120
#: Longest server/workload name shown on one line in a table; longer names wrap inside the cell.
NAME_WIDTH = 20
WORKLOAD_WIDTH = 12
#: Speculative configs per sweep table; more are split into several tables so each fits WIDTH.
SWEEP_CONFIGS_PER_TABLE = 5

HEADERS = ("server", "workload", "c", "n", "tok/s", "vs baseline", "speedup", "τ", "verdict")
#: The trend column: tok/s of the last runs of a row's history, tonight last, as a sparkline.
TREND_HEADER = "last 5"
TREND_RUNS = 5
#: A sparkline spans at least ±5% around the stored runs' median, so round-to-round wobble stays flat.
TREND_SPAN = 0.05
SPARK = "▁▂▃▄▅▆▇"  # odd: no change sits on the middle level
COST_HEADERS = ("server", "workload", "c", "τ", "TPOT ms", "ref TPOT ms", "cycle ms", "τ*", "τ-τ*", "α")  # noqa: RUF001
PERCENTILE_HEADERS = (
    "server",
    "workload",
    "c",
    "TTFT p50",
    "TTFT p99",
    "TPOT p50",
    "TPOT p99",
    "chunk gap p50",
    "rounds",
)


# --- cell formats ----------------------------------------------------------------------------------


def pm(estimate: Estimate | None, digits: int = 1) -> str:
    """'71.0±0.4' (half-width of the interval), or '-' when there is nothing to show."""
    if estimate is None or not math.isfinite(estimate.value):
        return "-"
    if not estimate.bounded:
        return f"{estimate.value:.{digits}f}±?"
    if estimate.half_width == 0:
        return f"{estimate.value:.{digits}f}"
    return f"{estimate.value:.{digits}f}±{estimate.half_width:.{digits}f}"


def signed_pm(estimate: Estimate | None, digits: int = 2) -> str:
    """Like `pm` with an explicit sign: headroom is read by its sign."""
    text = pm(estimate, digits)
    return text if text == "-" or text.startswith("-") else f"+{text}"


def percent(ratio: Estimate | None) -> str:
    """A ratio as a signed change with its interval: '-8.2% [-9.9,-6.4]'."""
    if ratio is None or not math.isfinite(ratio.value):
        return "-"
    change = (ratio.value - 1) * 100
    if not ratio.bounded:
        return f"{change:+.1f}%"
    return f"{change:+.1f}% [{(ratio.low - 1) * 100:+.1f},{(ratio.high - 1) * 100:+.1f}]"


def times(ratio: Estimate | None) -> str:
    """A ratio with its interval: '1.15x [1.10,1.19]'."""
    if ratio is None or not math.isfinite(ratio.value):
        return "-"
    if not ratio.bounded:
        return f"{ratio.value:.2f}x"
    return f"{ratio.value:.2f}x [{ratio.low:.2f},{ratio.high:.2f}]"


def level(concurrency: float) -> str:
    return f"c{concurrency:g}"


# --- blocks ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One part of the summary; renderers decide how a title, paragraph, bullet or table looks."""

    title: str | None = None
    lines: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    cells: tuple[tuple[str, ...], ...] = ()
    widths: tuple[int | None, ...] = ()
    bullets: tuple[str, ...] = ()
    folded: bool = False  # Markdown: inside <details>, as it is secondary


def summary_blocks(
    report: Report, *, store: Any = None, sources: Sequence[str] = (), full: bool = False
) -> list[Block]:
    """The whole summary, in reading order. `full` adds the latency percentiles."""
    blocks = [header_block(report, store, sources), main_block(report)]
    blocks += [b for b in (cost_block(report), acceptance_block(report)) if b is not None]
    blocks += [fit_block(fit) for fit in report.fits]
    for sweep in report.sweeps:
        blocks += sweep_blocks(sweep, _reference_name(report))
    if full:
        blocks.append(percentile_block(report))
    blocks += [b for b in (drift_block(report), warnings_block(report), saved_block(report)) if b is not None]
    return blocks


def header_block(report: Report, store: Any, sources: Sequence[str]) -> Block:
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
    prints = [r.measurement.fingerprint for r in report.rows]
    simulated = [fp for fp in prints if isinstance(fp, Fingerprint) and fp.identity.get("launcher") == "sim"]
    if not simulated:
        return "SIMULATED: these results come from pytest_specperf.sim, not a GPU" if report.simulated else None
    which = "all measurements" if len(simulated) == len(prints) else f"{len(simulated)} of {len(prints)} measurements"
    profiles = sorted({fp.identity.get("sim_profile", UNSET) for fp in simulated} - {UNSET})
    profile = f" (profile {', '.join(profiles)})" if profiles else ""
    scales = sorted({fp.identity.get("sim_time_scale", UNSET) for fp in simulated})
    return (
        f"SIMULATED: {which} come from pytest_specperf.sim{profile}, a model of a GPU server, not a GPU; "
        + "; ".join(_scale_note(s) for s in scales)
    )


def _scale_note(scale: str) -> str:
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
        str(len(row.measurement.rounds)),
        pm(row.throughput),
        percent(row.vs_baseline),
        times(row.speedup) + ("*" if row.unlike_reference and row.speedup is not None else ""),
        tau,
        row.verdict.value,
    ]


def error_cells(key: MeasurementKey) -> list[str]:
    """A row for a measurement that could not be made; the warnings say why."""
    return [key.server, key.workload, str(key.concurrency), "0", "-", "-", "-", "-", Verdict.ERROR.value]


def cost_block(report: Report) -> Block | None:
    """The cost model of each speculative row: why it is (or is not) faster than the reference."""
    rows = [r for r in report.rows if r.cost is not None]
    if not rows:
        return None
    return Block(
        title="cost model (per draft-and-verify cycle, against the reference's TPOT):",
        headers=COST_HEADERS,
        cells=tuple(tuple(cost_cells(r)) for r in rows),
        widths=(NAME_WIDTH, WORKLOAD_WIDTH),
        lines=(
            "cycle = τ x TPOT; τ* = cycle / ref TPOT: the break-even accept length, speculation pays while τ > τ*",
            "α: per-draft acceptance implied by τ for a chain of drafts; derived intervals are interval arithmetic "  # noqa: RUF001
            "(conservative)",
        ),
    )


def cost_cells(row: Row) -> list[str]:
    cost = row.cost
    assert cost is not None
    implied = cost.implied_acceptance
    alpha = pm(implied.alpha, 2) if implied is not None and implied.alpha is not None else "-"
    return [
        row.key.server,
        row.key.workload,
        str(row.key.concurrency),
        pm(cost.accept_length, 2),
        pm(cost.tpot_ms, 2),
        pm(cost.reference_tpot_ms, 2),
        pm(cost.cycle_ms, 2),
        pm(cost.break_even_accept_length, 2),
        signed_pm(cost.headroom, 2),
        alpha,
    ]


def acceptance_block(report: Report) -> Block | None:
    """Acceptance per draft position (the server's counters, else its responses' histograms), and which τ
    came from counters, not responses."""
    bullets = []
    for row in report.rows:
        m = row.measurement
        per_position = m.acceptance_per_position
        source = m.accept_length_source or ""
        if not per_position and "prometheus" not in source:
            continue
        line = f"{m.key.label}: " + (" ".join(f"{rate:.2f}" for rate in per_position) if per_position else "-")
        if "prometheus" in source:
            line += "; τ from the /metrics counter deltas (the responses carry no per-request counts)"
        bullets.append(line)
    if not bullets:
        return None
    return Block(
        title="acceptance by draft position 1, 2, ... (verify steps that accepted a draft there / all verify steps):",
        bullets=tuple(bullets),
    )


def fit_block(fit: Fit) -> Block:
    """The verify-cost fit: how much of a cycle is fixed cost that fewer draft tokens cannot remove."""
    title = f"verify-cost fit, {fit.workload} {level(fit.concurrency)}, over {' / '.join(fit.servers)}:"
    if fit.fit.status is FitStatus.NOT_ENOUGH_POINTS:
        return Block(title=title, bullets=(f"{fit.fit.note}; add a config differing only in draft tokens",))
    a, b = fit.fit.fixed_ms, fit.fit.per_token_ms
    assert a is not None and b is not None
    shares = ", ".join(f"{s:.0%}" for s in fit.fit.point_fixed_shares)
    mostly_fixed = min(fit.fit.point_fixed_shares) > 0.5
    meaning = (
        "mostly fixed cost: fewer draft tokens barely shorten a cycle"
        if mostly_fixed
        else "per-token cost matters: fewer draft tokens shorten a cycle"
    )
    return Block(
        title=title,
        bullets=(
            f"cycle = {_fitted(a, 2)} ms + {_fitted(b, 3)} ms x draft tokens ({fit.fit.note})",
            f"fixed share of the cycle: {shares} — {meaning}",
        ),
    )


def _fitted(estimate: Estimate, digits: int) -> str:
    """A fit coefficient: with its interval when it has one (an exact fit has none, and says so)."""
    return pm(estimate, digits) if estimate.bounded else f"{estimate.value:.{digits}f}"


def sweep_blocks(sweep: SweepSummary, reference: str | None) -> list[Block]:
    """Speedup by concurrency per config, where each crosses 1.0, and the fastest config per level."""
    configs = list(sweep.speedups)
    over = f" over {reference}" if reference else ""
    title = f"concurrency sweep, workload {sweep.workload}: speedup{over} by concurrency level"
    blocks = []
    for start in range(0, max(len(configs), 1), SWEEP_CONFIGS_PER_TABLE):
        chunk = configs[start : start + SWEEP_CONFIGS_PER_TABLE]
        cells = tuple((level(c), *(times(sweep.speedups[name].get(c)) for name in chunk)) for c in sweep.levels)
        blocks.append(
            Block(
                title=title if start == 0 else None,
                headers=("c", *chunk),
                cells=cells if chunk else (),
                widths=(None, *([NAME_WIDTH] * len(chunk))),
            )
        )
    bullets = [crossover_line(name, crossover) for name, crossover in sweep.crossovers.items()]
    if bullets:
        blocks.append(Block(title="where the speedup crosses 1.0:", bullets=tuple(bullets)))
    if sweep.winners:
        blocks.append(
            Block(title="fastest config per level (tok/s):", bullets=tuple(winner_line(w) for w in sweep.winners))
        )
    return blocks


def crossover_line(name: str, crossover: Crossover) -> str:
    text = crossover.describe()
    if crossover.kind is CrossoverKind.ABOVE_ALL:
        return f"{name}: speedup >= 1 at every level measured; crossover {text}"
    if crossover.kind is CrossoverKind.BELOW_ALL:
        return f"{name}: speedup < 1 at every level measured; crossover {text}"
    return f"{name}: speedup {text}"


def winner_line(winner: LevelWinner) -> str:
    head = f"{level(winner.concurrency)}: {winner.best} {pm(winner.throughput)}"
    runner = f"{winner.runner_up} {pm(winner.runner_up_throughput)}"
    if winner.certainty is Certainty.SOLE:
        return f"{head} (the only config measured)"
    if winner.certainty is Certainty.TIED:
        return f"{head}, tied with {', '.join(winner.tied_with)}"
    if winner.certainty is Certainty.CLEAR:
        return f"{head}, clearly ahead of {runner} (intervals do not overlap)"
    return f"{head}, ahead of {runner} but the intervals overlap: this data cannot order them"


def percentile_block(report: Report) -> Block:
    return Block(
        title="latency percentiles, ms (each a mean over rounds of the per-round value):",
        headers=PERCENTILE_HEADERS,
        cells=tuple(tuple(c) for c in percentile_cells(report)),
        widths=(NAME_WIDTH, WORKLOAD_WIDTH),
        folded=True,
    )


def percentile_cells(report: Report) -> list[list[str]]:
    cells = []
    for row in report.rows:
        rounds = row.measurement.rounds

        def mean_of(attr: str, part: str, rounds: Sequence[Any] = rounds) -> str:
            values = [getattr(getattr(r, attr), part) for r in rounds]
            values = [v for v in values if v is not None]
            return f"{sum(values) / len(values):.2f}" if values else "-"

        cells.append(
            [
                row.key.server,
                row.key.workload,
                str(row.key.concurrency),
                mean_of("ttft_ms", "p50"),
                mean_of("ttft_ms", "p99"),
                mean_of("tpot_ms", "p50"),
                mean_of("tpot_ms", "p99"),
                mean_of("chunk_gap_ms", "p50"),
                str(len(rounds)),
            ]
        )
    return cells


def drift_block(report: Report) -> Block | None:
    if not report.drift:
        return None
    bullets = tuple(f"{label}: " + "; ".join(str(c) for c in changes) for label, changes in report.drift.items())
    return Block(title="environment drift since the stored baseline:", bullets=bullets)


def warnings_block(report: Report) -> Block | None:
    return Block(title="warnings:", bullets=tuple(report.warnings)) if report.warnings else None


def saved_block(report: Report) -> Block | None:
    if report.saved:
        bullets = []
        for key, saved in report.saved:
            old = f"{saved.old.output_throughput:.1f}" if saved.old and saved.old.output_throughput else "none"
            new = f"{saved.new.output_throughput:.1f}" if saved.new.output_throughput else "-"
            line = f"{key.label}: {old} → {new} ({_short_path(saved.path)}; segment {saved.segment}, {saved.runs} runs)"
            if saved.kept_as is not None:
                line += f"; the previous file was unreadable, kept as {saved.kept_as.name}: {saved.replaced_error}"
            bullets.append(line)
        if all(saved.new_segment for _, saved in report.saved):
            return Block(title="stored baselines (--specperf-update), old → new tok/s:", bullets=tuple(bullets))
        return Block(title="recorded runs (--specperf-record), last → tonight tok/s:", bullets=tuple(bullets))
    if any(r.verdict.value == "NEW" for r in report.rows):
        return Block(lines=("NEW: no stored baseline yet for some measurements; store them with --specperf-update",))
    return None


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


def text_table(headers: Sequence[str], cells: Sequence[Sequence[str]], widths: Sequence[int | None] = ()) -> list[str]:
    """A plain table like tabulate's `simple` format, without its 2-column minimum padding.

    Columns are left-aligned and two spaces apart; a cell longer than its column's entry in
    `widths` wraps onto extra lines, so a long server name cannot push the table past `WIDTH`.
    """
    limits = [*widths, *([None] * (len(headers) - len(widths)))]
    rows = [[_wrap_cell(cell, limit) for cell, limit in zip(row, limits, strict=False)] for row in cells]
    sizes = [len(h) for h in headers]
    for row in rows:
        for i, lines in enumerate(row):
            sizes[i] = max(sizes[i], *(len(line) for line in lines))
    out = [_join(headers, sizes), _join(["-" * n for n in sizes], sizes)]
    for row in rows:
        for k in range(max(len(lines) for lines in row)):
            out.append(_join([lines[k] if k < len(lines) else "" for lines in row], sizes))
    return out


def _wrap_cell(text: str, limit: int | None) -> list[str]:
    if limit is None or len(text) <= limit:
        return [text]
    return textwrap.wrap(text, limit, break_on_hyphens=True) or [text]


def _join(parts: Sequence[str], sizes: Sequence[int]) -> str:
    return "  ".join(part.ljust(size) for part, size in zip(parts, sizes, strict=True)).rstrip()


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


def terminal_summary(terminalreporter: Any, report: Report, *, store: Any = None, full: bool = False) -> None:
    """The `pytest_terminal_summary` section: header, tables, cost model, sweep, warnings, updates."""
    terminalreporter.section("specperf")
    for line in render_text(summary_blocks(report, store=store, full=full)):
        terminalreporter.write_line(line)
