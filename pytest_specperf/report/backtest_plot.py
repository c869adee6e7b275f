"""`specperf backtest --plot FILE.png`: a replayed series as a picture (the `plot` extra, matplotlib).

Why: a table of 500 nights says how often the gate was red; a picture says why. One panel: each
night's value, the level each night was held against with the band it was allowed (the tolerance
around the level), the nights the gate called REGRESSION, SUSPECT or IMPROVED, the nights a new
segment started (an update), and the first run of each change nobody accepted. Drawn with the
object API on the Agg canvas, like report/plots.py: no pyplot, no display, no backend change.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_specperf.errors import SpecperfError
from pytest_specperf.report.plots import INSTALL_HINT

if TYPE_CHECKING:
    from pytest_specperf.verdict.backtest import Replay
    from pytest_specperf.verdict.stats import Tolerance

MARKS = {"REGRESSION": ("v", "#c0392b"), "SUSPECT": ("o", "#e67e22"), "IMPROVED": ("^", "#27ae60")}


def require_matplotlib(option: str) -> None:
    """Fail at once, naming the option, when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SpecperfError(f"{option} needs matplotlib, which is not installed: {INSTALL_HINT}") from None


def plot_replay(result: Replay, path: Path, *, title: str, tolerance: Tolerance) -> Path:
    """Draw `result` into `path` (PNG); returns the path."""
    require_matplotlib("--plot")
    from matplotlib.figure import Figure

    from pytest_specperf.verdict.stats import Direction

    figure = Figure(figsize=(11.0, 4.8), dpi=110, layout="constrained")
    ax = figure.add_subplot()
    runs = [n.row.index for n in result.nights]
    values = [statistics.fmean(n.row.samples) for n in result.nights]
    ax.plot(runs, values, color="#34495e", linewidth=0.8, marker=".", markersize=3, label="value")
    judged = [
        (n.row.index, n.verdict.comparison.level)
        for n in result.nights
        if n.verdict is not None and n.verdict.comparison is not None
    ]
    if judged:
        x, level = zip(*judged, strict=True)
        m = tolerance.max_regression
        ax.plot(x, level, color="#2980b9", linewidth=1.2, drawstyle="steps-mid", label="accepted level")
        ax.fill_between(
            x,
            [v * (1 - m) for v in level],
            [v * (1 + m) for v in level],
            step="mid",
            color="#2980b9",
            alpha=0.12,
            label=f"level ±{m:.0%}",
        )
    for outcome, (marker, colour) in MARKS.items():
        picked = [(n.row.index, v) for n, v in zip(result.nights, values, strict=True) if n.outcome.value == outcome]
        if picked:
            xs, ys = zip(*picked, strict=True)
            ax.scatter(xs, ys, marker=marker, color=colour, s=22, zorder=3, label=outcome)
    for night in result.nights:
        if night.row.update and night is not result.nights[0]:
            ax.axvline(night.row.index, color="#7f8c8d", linestyle=":", linewidth=1.0)
    starts = sorted({n.change_point for n in result.nights if n.change_point is not None and n.outcome.value != "PASS"})
    for start in starts:
        ax.axvline(start, color="#c0392b", linestyle="--", linewidth=0.8, alpha=0.6)
    better = "higher" if tolerance.direction is Direction.HIGHER_IS_BETTER else "lower"
    ax.set_title(f"{title} ({better} is better): dotted = update, dashed = a change's first run", fontsize=10)
    ax.set_xlabel("run")
    ax.legend(fontsize=8, loc="best")
    figure.savefig(path, dpi=110)
    return path
