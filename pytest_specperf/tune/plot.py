"""`specperf tune --plot PATH`: predicted against measured, one row of panels per objective.

Left: every measured config's speedup (x, with its 90% interval) against what the model predicted for
it from the *other* configs (y, leave one out, 90%): points on the diagonal are configs the model would
have got right without starting them. Right: every config by its best estimate, the predicted interval
as a bar, measured speedups as dots: the shape of the whole space and where the winner sits.

matplotlib (the `plot` extra) is imported only here, with the object API on the Agg canvas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_specperf.errors import SpecperfError
from pytest_specperf.report.plots import DPI, INSTALL_HINT
from pytest_specperf.tune.output import informative
from pytest_specperf.tune.search import TuneResult


def missing_matplotlib() -> str | None:
    """The error to show before any start when --plot was given without matplotlib, else None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"needs matplotlib, which is not installed: {INSTALL_HINT}"
    return None


def write_plot(result: TuneResult, path: Path, *, simulated: bool) -> Path:
    problem = missing_matplotlib()
    if problem:
        raise SpecperfError(f"--plot {problem}")
    from matplotlib.figure import Figure

    objectives = result.space.objectives
    figure = Figure(figsize=(12.0, 4.2 * len(objectives)), dpi=DPI, layout="constrained")
    axes = figure.subplots(len(objectives), 2, squeeze=False)
    for row, objective in enumerate(objectives):
        _scatter(axes[row][0], result, objective)
        _ranking(axes[row][1], result, objective)
    if simulated:
        figure.suptitle("SIMULATED: measured on pytest_specperf.sim", color="#a00000")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path


def _scatter(ax: Any, result: TuneResult, objective: Any) -> None:
    fc = result.forecast
    xs: list[float] = []
    ys: list[float] = []
    xerr: list[list[float]] = [[], []]
    yerr: list[list[float]] = [[], []]
    names: list[str] = []
    for label in result.observed:
        o = fc.outlooks[(label, objective)]
        if o.speedup is None or o.predicted_speedup is None or not informative(o.predicted_speedup):
            continue  # the others alone cannot predict it (e.g. the only deep chain)
        m, p = o.speedup, o.predicted_speedup
        xs.append(m.value)
        ys.append(p.value)
        xerr[0].append(m.value - m.low if m.bounded else 0.0)
        xerr[1].append(m.high - m.value if m.bounded else 0.0)
        yerr[0].append(p.value - p.low)
        yerr[1].append(p.high - p.value)
        names.append(label)
    if xs:
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="o", color="#1f4e79", ecolor="#7f9fbf", capsize=3)
        for x, y, name in zip(xs, ys, names, strict=True):
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        low, high = min(xs + ys), max(xs + ys)
        pad = 0.05 * (high - low or 1.0)
        ax.plot([low - pad, high + pad], [low - pad, high + pad], color="grey", linestyle="--", linewidth=1)
    else:
        ax.text(
            0.5, 0.5, "no measured config the others could predict", ha="center", va="center", transform=ax.transAxes
        )
    ax.set_xlabel(f"measured speedup over {result.space.reference.label}")
    ax.set_ylabel("predicted from the other configs (leave one out)")
    ax.set_title(f"{objective.label}: predicted vs measured", fontsize=11)


def _ranking(ax: Any, result: TuneResult, objective: Any) -> None:
    fc = result.forecast
    labels = [c.label for c in result.space.candidates]
    labels.sort(key=lambda label: -fc.outlooks[(label, objective)].estimate)
    for i, label in enumerate(labels):
        o = fc.outlooks[(label, objective)]
        p = o.predicted_speedup
        if informative(p):
            assert p is not None
            ax.plot([i, i], [p.low, p.high], color="#bbbbbb", linewidth=2)
        if o.speedup is not None:
            ax.plot([i], [o.speedup.value], "o", color="#c05000", markersize=5)
        elif p is not None:
            ax.plot([i], [p.value], "_", color="#555555", markersize=6)
    leader = fc.leaders[objective]
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("configs by best estimate (orange: measured; bars: predicted 90%)")
    ax.set_ylabel("speedup")
    ax.set_title(f"{objective.label}: every config (leader: {leader})", fontsize=11)
