"""Machine-readable outputs of a session: JSON, Markdown, Bencher Metric Format, plots."""

from __future__ import annotations

from typing import Any

from .analysis import Report


def write_outputs(report: Report, session: Any) -> list[str]:
    """Write every output the options ask for; returns one line per file written."""
    return []
