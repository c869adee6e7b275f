"""PNG plots of a report (`--specperf-plot DIR`): the `plot` extra, matplotlib.

matplotlib is imported only here and only when plots are asked for, and figures are drawn with
the object API on the Agg canvas (no pyplot): a test session must not change the plotting
backend of the process it runs in, nor need a display.

Plots, each saying "SIMULATED" in its title when the numbers come from the simulator:
* throughput.png: output tok/s per speculative config with CI error bars, the reference as a line;
* accept_length.png: τ per speculative config with CI, and the break-even τ* it must beat;
* cycle_time.png: one draft-and-verify cycle (split into the verify-cost fit's fixed and
  per-token parts when there is a fit) against the time plain decoding needs for the same τ tokens;
* speedup_vs_concurrency-<workload>.png (sweeps only): speedup per config with CI bands, 1.0 line;
* history-<server>-<workload>-c<N>.png (measurements with a stored history): one panel per key series
  (throughput, TPOT, accept length, speedup), each run's value with its interval over its rounds,
  segment boundaries (--specperf-update), the change point in force, tonight highlighted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.fingerprint import UNSET, Fingerprint
from pytest_specperf.report.analysis import Fit, Report, Row, SweepSummary
from pytest_specperf.report.sweep import CrossoverKind
from pytest_specperf.verdict.stats import Estimate
from pytest_specperf.verdict.trends import KEY_METRICS, Point

INSTALL_HINT = "pip install pytest-specperf[plot]"
DPI = 110


class PlotError(SpecperfError):
    """Plots were asked for but cannot be drawn (matplotlib missing)."""


def missing_matplotlib() -> str | None:
    """The error message to show when matplotlib is not installed, else None (checked up front)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"--specperf-plot needs matplotlib, which is not installed: {INSTALL_HINT}"
    return None


def write_plots(report: Report, directory: Path) -> list[Path]:
    """Draw every plot that has data into `directory`; returns the files written."""
    problem = missing_matplotlib()
    if problem:
        raise PlotError(problem)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    suffix = simulated_suffix(report)
    written = []
    for name, draw in (
        ("throughput", throughput_figure),
        ("accept_length", accept_figure),
        ("cycle_time", cycle_figure),
    ):
        figure = draw(report, suffix)
        if figure is not None:
            written.append(_save(figure, directory / f"{name}.png"))
    for sweep in report.sweeps:
        figure = sweep_figure(sweep, suffix)
        if figure is not None:
            written.append(_save(figure, directory / f"speedup_vs_concurrency-{_safe(sweep.workload)}.png"))
    for row in report.rows:
        figure = history_figure(row, suffix)
        if figure is not None:
            name = f"history-{_safe(row.key.server)}-{_safe(row.key.workload)}-c{row.key.concurrency}.png"
            written.append(_save(figure, directory / name))
    return written


def simulated_suffix(report: Report) -> str:
    """'SIMULATED (pytest_specperf.sim, time scale 0.1)' or '' for GPU numbers."""
    prints = [r.measurement.fingerprint for r in report.rows if isinstance(r.measurement.fingerprint, Fingerprint)]
    sims = [fp for fp in prints if fp.identity.get("launcher") == "sim"]
    if not sims and not report.simulated:
        return ""
    scales = sorted({fp.identity.get("sim_time_scale", UNSET) for fp in sims} - {UNSET})
    scale = f", time scale {', '.join(scales)}" if scales else ""
    return f"SIMULATED (pytest_specperf.sim{scale})"


# --- layout -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Groups:
    """Bars grouped by (workload, concurrency), one slot per server within a group."""

    keys: list[tuple[str, int]]
    servers: list[str]

    @classmethod
    def of(cls, rows: Sequence[Row]) -> Groups:
        keys = sorted({(r.key.workload, r.key.concurrency) for r in rows})
        servers = sorted({r.key.server for r in rows})
        return cls(keys, servers)

    @property
    def width(self) -> float:
        return 0.8 / max(len(self.servers), 1)

    def x(self, row: Row) -> float:
        group = self.keys.index((row.key.workload, row.key.concurrency))
        slot = self.servers.index(row.key.server)
        return group + (slot - (len(self.servers) - 1) / 2) * self.width

    def labels(self) -> list[str]:
        many = len({w for w, _ in self.keys}) > 1
        return [f"{w}\nc{c}" if many else f"c{c}" for w, c in self.keys]

    def xlabel(self) -> str:
        workloads = sorted({w for w, _ in self.keys})
        return "concurrency" + ("" if len(workloads) > 1 else f" (workload {workloads[0]})")


def _figure(width: float = 8.0, height: float = 4.8) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    return figure, figure.add_subplot()


def _title(ax: Any, text: str, suffix: str) -> None:
    ax.set_title(text + (f"\n{suffix}" if suffix else ""), fontsize=11, color="black")
    if suffix:
        ax.title.set_color("#a00000")


def _color(servers: Sequence[str], server: str) -> Any:
    from matplotlib import colormaps

    return colormaps["tab10"](sorted(servers).index(server) % 10)


def _err(estimate: Estimate) -> tuple[list[float], list[float]] | None:
    """Asymmetric error bar lengths, or None when the interval is unknown."""
    if not estimate.bounded:
        return None
    return [estimate.value - estimate.low], [estimate.high - estimate.value]


def _bars(ax: Any, groups: Groups, rows: Sequence[Row], value: Any, all_servers: Sequence[str]) -> None:
    seen = set()
    for row in rows:
        estimate = value(row)
        if estimate is None or not math.isfinite(estimate.value):
            continue
        name = row.key.server
        ax.bar(
            groups.x(row),
            estimate.value,
            groups.width * 0.9,
            yerr=_err(estimate),
            capsize=4,
            color=_color(all_servers, name),
            label=None if name in seen else name,
            edgecolor="black",
            linewidth=0.5,
        )
        seen.add(name)
    ax.set_xticks(range(len(groups.keys)), groups.labels())
    ax.set_xlabel(groups.xlabel())


def _confidence_label(rows: Sequence[Row]) -> str:
    levels = {e.confidence for r in rows for e in (r.throughput,) if e is not None and e.bounded}
    return f"{max(levels):.0%} CI" if levels else "CI"


# --- figures ------------------------------------------------------------------------------------------


def throughput_figure(report: Report, suffix: str) -> Any:
    rows = [r for r in report.rows if r.throughput is not None]
    if not rows:
        return None
    references = [r for r in rows if r.measurement.is_reference]
    bars = [r for r in rows if not r.measurement.is_reference] or references
    groups = Groups.of(bars)
    servers = sorted({r.key.server for r in rows})
    figure, ax = _figure()
    _bars(ax, groups, bars, lambda r: r.throughput, servers)
    if bars is not references:
        _reference_lines(ax, groups, references)
    ax.set_ylabel("output throughput (tok/s)")
    ax.set_ylim(bottom=0)
    _title(ax, f"Output throughput per config (mean over rounds, {_confidence_label(rows)})", suffix)
    _legend(figure, ax)
    return figure


def _reference_lines(ax: Any, groups: Groups, references: Sequence[Row]) -> None:
    labelled = False
    for row in references:
        key = (row.key.workload, row.key.concurrency)
        if key not in groups.keys or row.throughput is None:
            continue
        i, est = groups.keys.index(key), row.throughput
        left, right = i - 0.45, i + 0.45
        label = None if labelled else f"{row.key.server} (reference)"
        ax.hlines(est.value, left, right, colors="black", linestyles="--", linewidth=1.5, label=label, zorder=3)
        if est.bounded:
            ax.fill_between([left, right], est.low, est.high, color="black", alpha=0.12, linewidth=0, zorder=2)
        labelled = True


def accept_figure(report: Report, suffix: str) -> Any:
    rows = [r for r in report.rows if r.accept_length is not None and not r.measurement.is_reference]
    if not rows:
        return None
    groups = Groups.of(rows)
    figure, ax = _figure()
    _bars(ax, groups, rows, lambda r: r.accept_length, sorted({r.key.server for r in report.rows}))
    labelled = False
    for row in rows:
        if row.cost is None:
            continue
        star = row.cost.break_even_accept_length
        x = groups.x(row)
        ax.errorbar(
            x,
            star.value,
            yerr=_err(star),
            fmt="_",
            markersize=22,
            markeredgewidth=2.5,
            color="black",
            capsize=3,
            elinewidth=1,
            label=None if labelled else "break-even τ* (must stay below the bar)",
            zorder=4,
        )
        labelled = True
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1, label="τ = 1 (plain decoding)")
    ax.set_ylabel("accept length τ (tokens per verify step)")
    ax.set_ylim(bottom=0)
    _title(ax, f"Accept length per speculative config ({_confidence_label(rows)})", suffix)
    _legend(figure, ax)
    return figure


def cycle_figure(report: Report, suffix: str) -> Any:
    rows = [r for r in report.rows if r.cost is not None]
    if not rows:
        return None
    fits = {(server, f.workload, f.concurrency): f for f in report.fits for server in f.servers}
    figure, ax = _figure(max(6.0, 1.3 * len(rows) + 2), 4.8)
    labels, labelled = [], set()
    for i, row in enumerate(rows):
        cost = row.cost
        assert cost is not None
        fit = fits.get((row.key.server, row.key.workload, row.key.concurrency))
        parts = _cycle_parts(cost.cycle_ms.value, fit, row.measurement.num_draft_tokens)
        bottom = 0.0
        for name, value, color in parts:
            ax.bar(
                i,
                value,
                0.6,
                bottom=bottom,
                color=color,
                edgecolor="black",
                linewidth=0.5,
                label=None if name in labelled else name,
            )
            labelled.add(name)
            bottom += value
        ax.errorbar(i, cost.cycle_ms.value, yerr=_err(cost.cycle_ms), fmt="none", ecolor="black", capsize=4)
        budget = cost.reference_tpot_ms.value * cost.accept_length.value
        name = "plain decoding time for the same τ tokens (ref TPOT × τ)"  # noqa: RUF001
        ax.plot(
            [i - 0.38, i + 0.38],
            [budget, budget],
            color="#d62728",
            linewidth=2.5,
            label=None if name in labelled else name,
            zorder=4,
        )
        labelled.add(name)
        labels.append(f"{row.key.server}\n{row.key.workload} c{row.key.concurrency}")
    ax.set_xticks(range(len(rows)), labels, fontsize=9)
    ax.set_ylabel("time per draft-and-verify cycle (ms)")
    ax.set_ylim(bottom=0)
    # with few bars the figure is narrow: the title breaks after its colon, the legend stacks
    _title(ax, "Cycle time vs plain decoding:\nspeculation wins where the bar ends below the red line", suffix)
    _legend(figure, ax, columns=2 if len(rows) > 2 else 1)
    return figure


def _cycle_parts(cycle: float, fit: Fit | None, draft_tokens: int | None) -> list[tuple[str, float, str]]:
    """The cycle as one bar, or split into the fit's fixed part and per-token part when it has one."""
    f = fit.fit if fit is not None else None
    if f is None or f.fixed_ms is None or f.per_token_ms is None or draft_tokens is None:
        return [("measured cycle = τ × TPOT", cycle, "#9ecae1")]  # noqa: RUF001
    fixed = min(max(f.fixed_ms.value, 0.0), cycle)
    return [
        ("fixed part (verify-cost fit intercept)", fixed, "#6baed6"),
        ("per-draft-token part (rest of the cycle)", cycle - fixed, "#fdae6b"),
    ]


def sweep_figure(sweep: SweepSummary, suffix: str) -> Any:
    if not sweep.speedups:
        return None
    figure, ax = _figure()
    names = list(sweep.speedups)
    for name in names:
        curve = sorted(sweep.speedups[name].items())
        xs = [c for c, _ in curve]
        color = _color(names, name)
        ax.plot(xs, [e.value for _, e in curve], marker="o", color=color, label=name, linewidth=2)
        bounded = [(c, e) for c, e in curve if e.bounded]
        if len(bounded) > 1:
            ax.fill_between(
                [c for c, _ in bounded],
                [e.low for _, e in bounded],
                [e.high for _, e in bounded],
                color=color,
                alpha=0.18,
                linewidth=0,
            )
        _crossover_mark(ax, sweep.crossovers.get(name), color)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1.2, label="1.0 = as fast as the reference")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(sweep.levels), [str(c) for c in sweep.levels])
    ax.minorticks_off()
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("speedup over the reference (output tok/s ratio)")
    _title(ax, f"Speedup vs concurrency, workload {sweep.workload} (CI bands)", suffix)
    _legend(figure, ax)
    return figure


#: y-axis label of each history panel
HISTORY_UNITS = {
    "output_throughput": "tok/s",
    "mean_tpot_ms": "TPOT (ms)",
    "accept_length": "accept length τ",
    "speedup": "speedup (x ref)",
}


def history_figure(row: Row, suffix: str) -> Any:
    """A key's history: one panel per key series with at least two runs, oldest run left, tonight right."""
    panels = [(m, row.history[m]) for m in KEY_METRICS if len(row.history.get(m, ())) >= 2]
    if not panels:
        return None
    figure = _history_axes(len(panels))
    axes = figure.axes
    changes = {c.metric: c for c in row.changes}
    for ax, (metric, points) in zip(axes, panels, strict=True):
        _history_panel(ax, metric, points)
        change = changes.get(metric)
        if change is not None:
            at = len(points) - change.runs + change.index - 0.5  # the change's series is the current segment's
            ax.axvline(at, color="#ff7f0e", linewidth=2, label=f"change point: {change.percent}")
            ax.legend(loc="best", fontsize=8, frameon=False)
    last = axes[-1]
    points = panels[-1][1]
    last.set_xticks(range(len(points)), [_run_label(p) for p in points], rotation=45, ha="right", fontsize=8)
    k = row.key
    _title(axes[0], f"History of {k.server}, {k.workload} c{k.concurrency} (each run: mean with its interval)", suffix)
    return figure


def _history_axes(count: int) -> Any:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8.0, 1.2 + 2.0 * count), dpi=DPI, layout="constrained")
    figure.subplots(count, 1, sharex=True, squeeze=False)
    return figure


def _history_panel(ax: Any, metric: str, points: Sequence[Point]) -> None:
    xs = list(range(len(points)))
    stored = [(x, p) for x, p in zip(xs, points, strict=True) if not p.tonight]
    tonight = [(x, p) for x, p in zip(xs, points, strict=True) if p.tonight]
    for group, color, marker, label in ((stored, "#1f77b4", "o", "stored run"), (tonight, "#d62728", "D", "tonight")):
        if not group:
            continue
        values = [p.value for _, p in group]
        bounded = all(v.bounded for v in values)
        yerr = [[v.value - v.low for v in values], [v.high - v.value for v in values]] if bounded else None
        ax.errorbar(
            [x for x, _ in group],
            [v.value for v in values],
            yerr=yerr,
            fmt=marker,
            color=color,
            capsize=3,
            markersize=6 if marker == "D" else 4,
            label=label,
            zorder=3,
        )
    for x in range(1, len(points)):
        before, after = points[x - 1].segment, points[x].segment
        if after is not None and before is not None and after != before:
            ax.axvline(x - 0.5, color="grey", linestyle="--", linewidth=1)
            ax.annotate(
                "new segment", (x - 0.45, 1.0), xycoords=("data", "axes fraction"), va="top", fontsize=7, color="grey"
            )
    ax.set_ylabel(HISTORY_UNITS.get(metric, metric), fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def _run_label(point: Point) -> str:
    if point.tonight or point.created is None:
        return "tonight"
    commit = f" {point.commit[:7]}" if point.commit else ""
    return f"{point.created[5:10]}{commit}"


def _crossover_mark(ax: Any, crossover: Any, color: Any) -> None:
    """A diamond at the crossover, with its interval as a horizontal bar (ends clipped to the plot)."""
    if crossover is None or crossover.kind not in (CrossoverKind.CROSSES, CrossoverKind.CROSSES_UPWARD):
        return
    c = crossover.concurrency
    low = crossover.low if math.isfinite(crossover.low) else crossover.levels[0]
    high = crossover.high if math.isfinite(crossover.high) else crossover.levels[-1]
    ax.plot([low, high], [1.0, 1.0], color=color, linewidth=5, alpha=0.45, solid_capstyle="butt")
    ax.plot(
        [c],
        [1.0],
        marker="D",
        color=color,
        markeredgecolor="black",
        markersize=7,
        zorder=5,
        linestyle="none",
        label=f"crossover ~{c:.3g} (band: its interval)",
    )


def _legend(figure: Any, ax: Any, columns: int = 3) -> None:
    """Below the plot, never over the data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        figure.legend(
            handles, labels, loc="outside lower center", ncol=min(columns, len(handles)), fontsize=9, frameon=False
        )


def _save(figure: Any, path: Path) -> Path:
    figure.savefig(path, dpi=DPI)
    return path


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "workload"
