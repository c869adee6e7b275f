"""Since when, everywhere: the change a night's verdict names is the one `specperf history` marks in force
and the dashboard lists in its "change in force" column and draws on the key's panel.

The history is one the per-segment change-point search alone does not settle: a noisy key (3% from
start to start) that lost 8% three nights ago. The night names the change; both views must too.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from histories import Night, record

from pytest_specperf.cli import main as specperf
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.report.dashboard.model import build_dashboard
from pytest_specperf.report.dashboard.pages import suite_page, summary_page
from pytest_specperf.store.file import FileStore
from pytest_specperf.verdict.checks import Limits, evaluate

KEY = MeasurementKey("plain", "chat", 1)
LIMITS = Limits(0.05, 0.02, 0.0)
BEFORE = 20  # accepted nights at the old level; the change begins with run BEFORE (0-based)


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / ".specperf")
    nights = [Night(100.0)] * BEFORE + [Night(92.0, "refused")] * 2 + [Night(92.0)]
    record(store, KEY, nights, spread=0.03)
    return store


def test_the_history_and_the_dashboard_name_the_change_the_night_named(store: FileStore, capsys) -> None:
    (entry,) = store.entries()
    before = dataclasses.replace(entry, runs=entry.runs[:-1])
    night = evaluate(entry.runs[-1].measurement, None, None, LIMITS, before, updating=False)
    (named,) = [c for c in night.changes if c.metric == "output_throughput"]
    assert named.created == entry.runs[BEFORE].provenance.created  # the night's own words: since that run

    board = build_dashboard(store.entries(), title="t", location=str(store.root), limits=LIMITS)
    (view,) = board.keys
    assert view.change_in_force is not None and view.change_in_force.sentence == named.sentence
    assert view.change_in_force.run == BEFORE
    summary, panels = summary_page(board), suite_page(board)
    assert named.sentence in summary  # the summary's "change in force" column
    assert f'class="change step in-force" data-run="{BEFORE}"' in panels  # the line on the panel

    assert specperf(["history", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    rows = re.split(r"\n(?=\S)", out)  # one run per row, its change column wrapped onto lines below it
    (marked,) = [row for row in rows if "in force since here" in row]
    assert marked.startswith(f"{BEFORE + 1} ")
    assert f"tok/s {named.percent} in force since here" in " ".join(marked.split()), marked
