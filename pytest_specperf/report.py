"""Terminal and Markdown renderings of a `analysis.Report`."""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from .analysis import Fit, Report, Row
from .costmodel import FitStatus
from .stats import Estimate

HEADERS = ("server", "workload", "c", "tok/s", "Δ base", "speedup", "τ", "TPOT ms", "cycle ms", "τ*", "verdict")


def pm(estimate: Estimate | None, digits: int = 1) -> str:
    """'71.0±0.4' (half-width of the interval), or '-' when there is nothing to show."""
    if estimate is None:
        return "-"
    if not estimate.bounded:
        return f"{estimate.value:.{digits}f}±?"
    if estimate.half_width == 0:
        return f"{estimate.value:.{digits}f}"
    return f"{estimate.value:.{digits}f}±{estimate.half_width:.{digits}f}"


def percent(ratio: Estimate | None) -> str:
    """A ratio as a signed change with its interval: '-8.2% [-9.9, -6.4]'."""
    if ratio is None:
        return "-"
    change = (ratio.value - 1) * 100
    if not ratio.bounded:
        return f"{change:+.1f}%"
    return f"{change:+.1f}% [{(ratio.low - 1) * 100:+.1f},{(ratio.high - 1) * 100:+.1f}]"


def times(ratio: Estimate | None) -> str:
    if ratio is None:
        return "-"
    if not ratio.bounded:
        return f"{ratio.value:.2f}x"
    return f"{ratio.value:.2f}x [{ratio.low:.2f},{ratio.high:.2f}]"


def row_cells(row: Row) -> list[str]:
    key = row.key
    cost = row.cost
    name = key.server + (" (ref)" if row.measurement.is_reference else "")
    return [
        name,
        key.workload,
        str(key.concurrency),
        pm(row.throughput),
        percent(row.vs_baseline),
        times(row.speedup),
        pm(row.accept_length, 2) if row.accept_length else ("1" if row.measurement.is_reference else "-"),
        pm(row.tpot_ms, 2),
        pm(cost.cycle_ms, 1) if cost else "-",
        pm(cost.break_even_accept_length, 2) if cost else "-",
        row.verdict.value,
    ]


def fit_lines(fit: Fit) -> list[str]:
    where = f"{fit.workload} c{fit.concurrency}, {' / '.join(fit.servers)}"
    if fit.fit.status is FitStatus.NOT_ENOUGH_POINTS:
        return [f"verify-cost fit ({where}): {fit.fit.note}; add a config differing only in draft tokens"]
    a, b = fit.fit.fixed_ms, fit.fit.per_token_ms
    assert a is not None and b is not None
    shares = ", ".join(f"{s:.0%}" for s in fit.fit.point_fixed_shares)
    return [
        f"verify-cost fit ({where}): cycle = {a.value:.2f} ms + {b.value:.3f} ms x draft tokens ({fit.fit.note})",
        f"  fixed share of the cycle: {shares} — "
        + ("mostly fixed cost: fewer draft tokens barely shorten a cycle" if min(fit.fit.point_fixed_shares) > 0.5
           else "per-token cost matters: fewer draft tokens shorten a cycle"),
    ]  # fmt: skip


def header_lines(report: Report, store: Any) -> list[str]:
    lines = [f"store: {store}"]
    if report.fingerprint_summary:
        lines.append(f"measured on: {report.fingerprint_summary}")
    if report.simulated:
        lines.append("SIMULATED: these results come from pytest_specperf.sim, a model of a GPU server, not a GPU")
    for label, changes in report.drift.items():
        lines.append(f"environment drift vs baseline, {label}: " + "; ".join(str(c) for c in changes))
    return lines


def terminal_summary(terminalreporter: Any, session: Any) -> None:
    """The `pytest_terminal_summary` section: header, table, fits, warnings, baseline updates."""
    report = session.report()
    write = terminalreporter.write_line
    terminalreporter.section("specperf")
    for line in header_lines(report, session.config.store):
        write(line)
    write("")
    rows = [row_cells(r) for r in report.rows]
    write(tabulate(rows, headers=HEADERS, tablefmt="simple", disable_numparse=True))
    if session.options.verbose > 0 or session.options.report == "full":
        write("")
        write(tabulate(percentile_cells(report), headers=PERCENTILE_HEADERS, tablefmt="simple", disable_numparse=True))
    for fit in report.fits:
        write("")
        for line in fit_lines(fit):
            write(line)
    if report.warnings:
        write("")
        write("warnings:")
        for warning in report.warnings:
            write(f"  {warning}")
    if report.saved:
        write("")
        write("stored baselines (--specperf-update), old → new tok/s:")
        for key, saved in report.saved:
            old = f"{saved.old.output_throughput:.1f}" if saved.old and saved.old.output_throughput else "none"
            new = f"{saved.new.output_throughput:.1f}" if saved.new.output_throughput else "-"
            write(f"  {key.label}: {old} → {new}  ({saved.path})")
    elif any(r.verdict.value == "NEW" for r in report.rows):
        write("")
        write("NEW: no stored baseline yet for some measurements; store them with --specperf-update")


PERCENTILE_HEADERS = ("server", "workload", "c", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "chunk gap p50", "rounds")


def percentile_cells(report: Report) -> list[list[str]]:
    cells = []
    for row in report.rows:
        rounds = row.measurement.rounds

        def mean_of(attr: str, part: str) -> str:
            values = [getattr(getattr(r, attr), part) for r in rounds]
            values = [v for v in values if v is not None]
            return f"{sum(values) / len(values):.2f}" if values else "-"

        cells.append([
            row.key.server, row.key.workload, str(row.key.concurrency),
            mean_of("ttft_ms", "p50"), mean_of("ttft_ms", "p99"), mean_of("tpot_ms", "p50"),
            mean_of("tpot_ms", "p99"), mean_of("chunk_gap_ms", "p50"), str(len(rounds)),
        ])  # fmt: skip
    return cells
