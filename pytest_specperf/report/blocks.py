"""The summary's building blocks and cell formats, shared by the terminal and Markdown renderers
(`terminal.py`) and the blocks that explain the verdict table (`details.py`).

A `Block` is one part of the summary: a title, paragraphs, bullets, a table; the renderers decide how
each looks. The cell formats put an estimate and its interval the same way everywhere.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_specperf.verdict.stats import Estimate

#: Longest server/workload name shown on one line in a table; longer names wrap inside the cell.
NAME_WIDTH = 20
WORKLOAD_WIDTH = 12


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
