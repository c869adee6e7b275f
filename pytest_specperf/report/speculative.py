"""What the summary says of speculation beyond the table: acceptance by draft position, and the outputs
of a temperature-0 workload that equal the reference server's.

Both are lines the terminal and Markdown summaries print under their titles (`terminal.summary_blocks`);
the JSON report carries the same figures (`acceptance_per_position`, `lossless`).
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_specperf.measure.records import POSITIONS_LABEL, POSITIONS_MEANING
from pytest_specperf.report.analysis import Row

#: The one label of acceptance by draft position, with its definition (docs/metrics.md).
POSITIONS_TITLE = f"{POSITIONS_LABEL} 1, 2, ... ({POSITIONS_MEANING}):"
LOSSLESS_TITLE = "lossless: outputs equal to the reference server's for the same prompt (temperature 0):"


def acceptance_lines(rows: Iterable[Row]) -> list[str]:
    """Acceptance by draft position per measurement (the server's counters, else its responses'
    histograms, zeros at the drafted positions no step reached: a collapse reads 0.00, it is not left
    out), and which τ came from counters, not responses."""
    lines = []
    for row in rows:
        m = row.measurement
        per_position = m.acceptance_per_position
        source = m.accept_length_source or ""
        if not per_position and "prometheus" not in source:
            continue
        line = f"{m.key.label}: " + (" ".join(f"{rate:.2f}" for rate in per_position) if per_position else "-")
        if "prometheus" in source:
            line += "; τ from the /metrics counter deltas (the responses carry no per-request counts)"
        lines.append(line)
    return lines


def lossless_lines(rows: Iterable[Row]) -> list[str]:
    """k of n outputs equal the reference's, per speculative measurement on a temperature-0 workload,
    whether a lossless check passed, failed or was not asked for."""
    lines = []
    for row in rows:
        match = row.lossless
        if match is None:
            continue
        line = f"{row.key.label}: {match.equal} of {match.compared} ({match.share:.1%})"
        lines.append(line if match.first_mismatch is None else f"{line}; {match.first_mismatch}")
    return lines


def blocks(rows: Iterable[Row]) -> list[tuple[str, list[str]]]:
    """(title, lines) of each, in reading order; a title without lines is not printed."""
    rows = list(rows)
    return [(POSITIONS_TITLE, acceptance_lines(rows)), (LOSSLESS_TITLE, lossless_lines(rows))]
