"""τ beside the mean of the requests' own τ, where a reader comparing numbers would see two figures.

τ is pooled (Σ tokens / Σ verify steps of a round's requests, docs/metrics.md); an engine's per-request
figures (SGLang's `spec_accept_length`) average to something else whenever requests needed different
numbers of verify steps for their tokens. The JSON report always carries both; the terminal and
Markdown summaries name the mean only where it differs from τ by more than rounding.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_specperf.report.analysis import Row

#: The mean of the requests' own τ is shown beside τ when the two differ by at least this much: τ is
#: printed with two decimals, so a gap of one unit in the last digit always prints as two different
#: figures, while a smaller gap is rounding that a reader comparing numbers could not tell apart.
PER_REQUEST_GAP = 0.01

TITLE = (
    "accept length τ = Σ tokens / Σ verify steps of a round's requests (docs/metrics.md), where the mean of the "
    "requests' own τ differs (there a short request weighs as much as a long one):"
)


def per_request_lines(rows: Iterable[Row]) -> list[str]:
    """One line per row whose τ and mean of the requests' own τ differ by `PER_REQUEST_GAP` or more."""
    lines = []
    for row in rows:
        per_request = row.measurement.accept_length_per_request
        if row.accept_length is None or per_request is None:
            continue
        if abs(per_request - row.accept_length.value) >= PER_REQUEST_GAP:
            lines.append(
                f"{row.key.label}: τ {row.accept_length.value:.2f}; the requests' own τ average {per_request:.2f}"
            )
    return lines
