"""One metric of one key as an inline SVG chart, drawn on the server.

Why hand-written SVG and not a charting library: the charts are simple (points with intervals,
bands, lines), and a page that draws them itself needs no script, no vendored library and no
network to be read — it opens from a CI artifact, a GitHub Pages branch or a laptop's disk alike,
and a test can count its points in the DOM. The page's script only turns each point's `<title>`
into a styled tooltip (without it, the browser shows the title).

Every run is one step along x (run order, not time: two shards of one night are two runs), a
segment is a band, each point carries its status as a class (and a shape, so colour is not the
only cue): accepted ●, suspect ◇, refused ✕, rejected as an outlier ○ (grey), the newest night
ringed. A step is a vertical line between the last run before it and the first after it; a drift
a line over the runs it spans, through their mean on the log scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from html import escape

from pytest_specperf.report.dashboard.model import ChangeMark, Chart, RunMark

#: Colours by status (and of the other marks); shapes differ too.
COLOURS = {"accepted": "#1f77b4", "suspect": "#e08a00", "refused": "#d62728", "rejected": "#7f7f7f"}
CHANGE_COLOUR = "#9a3fb5"
LEVEL_COLOUR = "#2ca02c"


@dataclass(frozen=True)
class Frame:
    """Where a chart's runs and values land in its box."""

    width: float
    height: float
    runs: int
    low: float
    high: float
    left: float = 48.0
    right: float = 10.0
    top: float = 16.0
    bottom: float = 20.0

    @property
    def step(self) -> float:
        return (self.width - self.left - self.right) / max(1, self.runs)

    def x(self, run: float) -> float:
        return self.left + (run + 0.5) * self.step

    def y(self, value: float) -> float:
        span = self.high - self.low
        return self.top + (self.high - value) / span * (self.height - self.top - self.bottom)


#: Half the width of the "newest" label at the charts' font size, in SVG units.
NEWEST_LABEL_HALF_WIDTH = 22.0


def chart_svg(
    chart: Chart,
    *,
    runs: int,
    segments: Sequence[tuple[int, int, int]],
    newest: Set[int],
    tips: Mapping[int, str],
    dates: Sequence[str],
    width: float,
    height: float,
    caption: str,
    labels: bool = True,
) -> str:
    """The chart as an `<svg>` element; `tips` holds each run's hover text, `dates` each run's label.
    `labels`: name the segments, the changes and the newest run in the chart (a small chart leaves them
    to the hover text)."""
    low, high = value_range(chart)
    frame = Frame(width, height, runs, low, high)
    parts = [
        f'<svg class="chart" data-metric="{chart.metric}" viewBox="0 0 {width:g} {height:g}" role="img" '
        f'aria-label="{escape(caption)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(caption)}</title>",
        *_segments(frame, segments, labels),
        *_axes(frame, dates, segments),
    ]
    if chart.level is not None and segments:
        parts.append(_level(frame, chart.level, segments[-1]))
    parts += [_change(frame, chart, change, labels) for change in chart.changes]
    parts += [_point(frame, mark, mark.run in newest, tips.get(mark.run, "")) for mark in chart.points]
    if labels and chart.points and chart.points[-1].run in newest:
        last = chart.points[-1]
        top = last.value.high if last.value.bounded and math.isfinite(last.value.high) else last.value.value
        # centred over the newest point, moved in only as far as the chart's edge needs: a label that ends
        # at the point reads as naming the run before it
        x = min(frame.x(last.run), width - NEWEST_LABEL_HALF_WIDTH)
        parts.append(
            f'<text class="newest-label" x="{x:.1f}" y="{max(frame.top + 8, frame.y(top) - 9):.1f}" '
            'text-anchor="middle">newest</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def value_range(chart: Chart) -> tuple[float, float]:
    """The values' span (intervals and the level included), padded; never empty."""
    values = [m.value.value for m in chart.points]
    for mark in chart.points:
        if mark.value.bounded:
            values += [mark.value.low, mark.value.high]
    if chart.level is not None:
        values.append(chart.level)
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    middle = (low + high) / 2.0
    span = max(high - low, abs(middle) * 0.02, 1e-9)
    return middle - span * 0.6, middle + span * 0.6


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round values between low and high, about `count` of them (steps of 1, 2 or 5 x 10^k)."""
    raw = (high - low) / max(1, count)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    first = math.ceil(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def tick_text(value: float, ticks: Sequence[float]) -> str:
    step = ticks[1] - ticks[0] if len(ticks) > 1 else abs(value) or 1.0
    decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 2
    return f"{value:,.{decimals}f}"


def _segments(frame: Frame, segments: Sequence[tuple[int, int, int]], labels: bool) -> list[str]:
    parts = []
    plot = frame.height - frame.top - frame.bottom
    for position, (number, first, last) in enumerate(segments):
        x0 = frame.x(first) - frame.step / 2
        shade = "segment-band odd" if position % 2 else "segment-band"
        parts.append(
            f'<rect class="{shade}" data-segment="{number}" x="{x0:.1f}" y="{frame.top:.1f}" '
            f'width="{(last - first + 1) * frame.step:.1f}" height="{plot:.1f}"/>'
        )
        if labels and len(segments) > 1:
            parts.append(
                f'<text class="segment-label" x="{x0 + 3:.1f}" y="{frame.top - 4:.1f}">segment {number}</text>'
            )
        if position:
            parts.append(
                f'<line class="segment-start" x1="{x0:.1f}" x2="{x0:.1f}" y1="{frame.top:.1f}" '
                f'y2="{frame.top + plot:.1f}"><title>segment {number} starts: --specperf-update</title></line>'
            )
    return parts


def _axes(frame: Frame, dates: Sequence[str], segments: Sequence[tuple[int, int, int]]) -> list[str]:
    ticks = nice_ticks(frame.low, frame.high)
    parts = []
    for tick in ticks:
        y = frame.y(tick)
        parts.append(
            f'<line class="grid" x1="{frame.left:.1f}" x2="{frame.width - frame.right:.1f}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        parts.append(
            f'<text class="tick" x="{frame.left - 4:.1f}" y="{y + 3:.1f}" text-anchor="end">'
            f"{tick_text(tick, ticks)}</text>"
        )
    wanted = sorted({0, frame.runs - 1, *(first for _, first, _ in segments)})
    shown: list[float] = []
    for run in wanted:
        x = frame.x(run)
        if run >= len(dates) or any(abs(x - s) < 36 for s in shown):
            continue
        shown.append(x)
        parts.append(
            f'<text class="tick" x="{x:.1f}" y="{frame.height - 6:.1f}" text-anchor="middle">'
            f"{escape(dates[run])}</text>"
        )
    return parts


def _level(frame: Frame, level: float, segment: tuple[int, int, int]) -> str:
    _, first, last = segment
    x0, x1, y = frame.x(first) - frame.step / 2, frame.x(last) + frame.step / 2, frame.y(level)
    return (
        f'<line class="level" x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{LEVEL_COLOUR}">'
        f"<title>level the newest night was judged against (the segment's counted runs before it): "
        f"{level:.4g}</title></line>"
    )


def _change(frame: Frame, chart: Chart, change: ChangeMark, labels: bool) -> str:
    title = escape(change.sentence + (" (in force)" if change.in_force else ""))
    common = (
        f'class="change {change.kind}{" in-force" if change.in_force else ""}" data-run="{change.run}" '
        f'data-kind="{change.kind}" tabindex="0"'
    )
    label = f"{(change.change.value - 1) * 100:+.1f}%"
    if change.kind == "drift":
        spanned = [m for m in chart.points if change.run <= m.run <= change.end and m.value.value > 0.0]
        if len(spanned) < 2 or change.per_run is None or change.per_run <= 0.0:
            return ""
        logs = [math.log(m.value.value) for m in spanned]
        centre, slope = (len(spanned) - 1) / 2.0, math.log(change.per_run)
        ends = [
            (spanned[k].run, math.exp(math.fsum(logs) / len(logs) + slope * (k - centre)))
            for k in (0, len(spanned) - 1)
        ]
        (r0, v0), (r1, v1) = ends
        text = (
            f'<text class="change-label" x="{frame.x(r1):.1f}" y="{frame.top + 9:.1f}" text-anchor="end">'
            f"drift {label}</text>"
        )
        return (
            f'<g {common}><line x1="{frame.x(r0):.1f}" y1="{frame.y(v0):.1f}" x2="{frame.x(r1):.1f}" '
            f'y2="{frame.y(v1):.1f}" stroke="{CHANGE_COLOUR}"/>{text if labels else ""}<title>{title}</title></g>'
        )
    x = frame.x(change.run) - frame.step / 2
    anchor = "end" if x > frame.width - 50 else "start"
    text = (
        f'<text class="change-label" x="{x + (-3 if anchor == "end" else 3):.1f}" y="{frame.top + 9:.1f}" '
        f'text-anchor="{anchor}">{label}</text>'
    )
    return (
        f'<g {common}><line x1="{x:.1f}" x2="{x:.1f}" y1="{frame.top:.1f}" y2="{frame.height - frame.bottom:.1f}" '
        f'stroke="{CHANGE_COLOUR}"/>{text if labels else ""}<title>{title}</title></g>'
    )


def _point(frame: Frame, mark: RunMark, newest: bool, tip: str) -> str:
    """One run's point: its interval, ring, marker, hit area and hover text. Drawn for every run of
    every chart of a year (a key's page holds about 1,500), so each coordinate is formatted once."""
    status = mark.point.status or "accepted"
    rejected = bool(mark.rejected)
    x, y = frame.x(mark.run), frame.y(mark.value.value)
    at = f'cx="{x:.1f}" cy="{y:.1f}"'
    colour = COLOURS["rejected"] if rejected else COLOURS.get(status, COLOURS["accepted"])
    value = mark.value
    interval = ""
    if value.bounded and math.isfinite(value.low) and math.isfinite(value.high):
        y0, y1, left = f"{frame.y(value.high):.1f}", f"{frame.y(value.low):.1f}", f"{x - 2.5:.1f}"
        interval = f'<path class="interval" d="M{x:.1f} {y0}V{y1}M{left} {y0}h5M{left} {y1}h5" stroke="{colour}"/>'
    ring = f'<circle class="ring" {at} r="7"/>' if newest else ""
    return (
        f'<g class="point status-{status}{" rejected" if rejected else ""}{" newest" if newest else ""}" '
        f'data-run="{mark.run}" tabindex="0">{interval}{ring}{marker(x, y, status, colour, rejected)}'
        f'<circle class="hit" {at} r="8"/><title>{escape(tip)}</title></g>'
    )


def marker(x: float, y: float, status: str, colour: str, rejected: bool) -> str:
    if rejected:
        return (
            f'<circle class="marker" cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#fff" stroke="{colour}" stroke-width="1.8"/>'
        )
    if status == "refused":
        return (
            f'<path class="marker" d="M{x - 4:.1f} {y - 4:.1f}l8 8M{x - 4:.1f} {y + 4:.1f}l8 -8" stroke="{colour}" '
            'stroke-width="2.4"/>'
        )
    if status == "suspect":
        return (
            f'<path class="marker" d="M{x:.1f} {y - 4.5:.1f}l4.5 4.5l-4.5 4.5l-4.5 -4.5z" fill="#fff" '
            f'stroke="{colour}" stroke-width="1.8"/>'
        )
    return f'<circle class="marker" cx="{x:.1f}" cy="{y:.1f}" r="3.6" fill="{colour}"/>'


#: The nights a summary row's trend shows: enough to see a step, small enough for a thousand rows.
TREND_NIGHTS = 30


def sparkline(chart: Chart, *, width: int = 90, height: int = 20) -> str:
    """The newest `TREND_NIGHTS` runs of a chart as a line, the newest run a dot in its status's colour:
    a summary row's trend (the key's page draws every run)."""
    marks = chart.points[-TREND_NIGHTS:]
    values = [m.value.value for m in marks]
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or abs(high) or 1.0
    step = (width - 4) / (len(values) - 1)
    xy = [(2 + i * step, 2 + (high - v) / span * (height - 4)) for i, v in enumerate(values)]
    line = " ".join(f"{x:.0f},{y:.0f}" for x, y in xy)
    x, y = xy[-1]
    colour = COLOURS.get(marks[-1].point.status or "accepted", COLOURS["accepted"])
    return (
        f'<svg class="trend" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(chart.name)} over the newest {len(values)} runs">'
        f'<polyline points="{line}" fill="none" stroke="#8a93a6" stroke-width="1.2"/>'
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.6" fill="{colour}"/></svg>'
    )
