"""`specperf accept`: a person makes a change the accepted level from the run it began with, without a
GPU night, and the nights after it are judged against that level.

The history is the one "since when" names a change in: a noisy key (3% from start to start) that lost
8% three nights ago, REGRESSION on each night since, not acknowledged.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from histories import Night, measurement, record

from pytest_specperf.cli import main as specperf
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.records import StoredBaseline
from pytest_specperf.verdict.checks import Limits, evaluate
from pytest_specperf.verdict.stats import Decision

KEY = MeasurementKey("plain", "chat", 1)
LIMITS = Limits(0.05, 0.02, 0.0)
BEFORE = 20  # accepted nights at the old level; the change begins with run BEFORE (0-based)


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / ".specperf")
    record(store, KEY, [Night(100.0)] * BEFORE + [Night(92.0, "refused")] * 3, spread=0.03)
    return store


def tonight_at(level: float, entry: StoredBaseline) -> Decision:
    """Tonight's throughput check at `level` tok/s against the stored history."""
    tonight = measurement(KEY, [level * f for f in (0.99, 1.01, 1.0, 0.995, 1.005)], None, simulated=True, nccl="Ring")
    evaluation = evaluate(tonight, None, None, LIMITS, entry, updating=False)
    (check,) = [c for c in evaluation.checks if c.name == "regression:output_throughput"]
    return check.decision


def test_accept_makes_the_change_in_force_the_level_from_its_first_run(store: FileStore, capsys) -> None:
    (entry,) = store.entries()
    assert tonight_at(92.0, entry) is not Decision.MET  # unacknowledged: beyond the tolerance again

    assert specperf(["accept", "plain/chat", "--store", str(store.root), "--note", "new driver 575"]) == 0
    out = capsys.readouterr().out
    assert f"the accepted level is now the 3 runs from run {BEFORE + 1} on (2026-11-{BEFORE + 1:02d}," in out, out

    (entry,) = store.entries()
    assert [r.segment for r in entry.runs] == [0] * BEFORE + [1] * 3
    assert [r.status for r in entry.runs[BEFORE:]] == ["accepted"] * 3
    assert entry.runs[BEFORE].acceptance is not None and entry.runs[BEFORE].acceptance.endswith(": new driver 575")
    assert tonight_at(92.0, entry) is Decision.MET  # held against the accepted level now
    assert tonight_at(100.0, entry) is Decision.MET  # and the old one is no regression of it

    assert specperf(["history", "plain", "--store", str(store.root)]) == 0
    rows = re.split(r"\n(?=\S)", capsys.readouterr().out)
    (marked,) = [row for row in rows if "new segment" in row]
    assert marked.startswith(f"{BEFORE + 1} ") and "with specperf accept: new driver 575" in " ".join(marked.split())

    assert specperf(["accept", "plain", "--store", str(store.root)]) == 1  # nothing left to accept
    assert "no change in force" in capsys.readouterr().out


NAMES = [(str(BEFORE + 2), BEFORE + 1), (f"2026-11-{BEFORE + 2:02d}", BEFORE + 1), (f"{BEFORE}0ab", BEFORE)]


@pytest.mark.parametrize(("since", "run"), NAMES)
def test_since_names_the_run_by_number_date_or_commit(store: FileStore, since: str, run: int) -> None:
    assert specperf(["accept", "plain/chat/c1", "--since", since, "--store", str(store.root)]) == 0
    (entry,) = store.entries()
    assert [i for i, r in enumerate(entry.runs) if r.acceptance is not None] == [run]
    assert entry.runs[run - 1].segment == 0 and entry.runs[run].segment == 1


def test_a_run_that_cannot_be_named_or_accepted_is_an_error_that_changes_nothing(store: FileStore, capsys) -> None:
    before = (store.root / "sim" / "plain" / "chat-c1.jsonl").read_bytes()
    record(store, MeasurementKey("plain", "code", 1), [Night(50.0)] * 4)
    cases = {
        ("plain", "--since", "3"): "a run number names a run of one history",
        ("plain/chat", "--since", "1"): "run 1 already begins the accepted level",
        ("plain/chat", "--since", "99"): "the history holds runs 1 to 23",
        ("plain/chat", "--since", "last tuesday"): "name a run by its number, its date (YYYY-MM-DD) or its commit",
        ("plain/chat", "--since", "2025-01-01"): "no run of that date or commit",
        ("eagle3",): "no stored history matches (the store holds: plain/chat/c1, plain/code/c1)",
    }
    for args, message in cases.items():
        assert specperf(["accept", *args, "--store", str(store.root)]) == 2, args
        assert message in capsys.readouterr().err, args
    assert (store.root / "sim" / "plain" / "chat-c1.jsonl").read_bytes() == before

    assert specperf(["accept", "plain/chat", "--since", "21", "--store", str(store.root)]) == 0
    assert specperf(["accept", "plain/chat", "--since", "5", "--store", str(store.root)]) == 2
    assert "run 5 is before the current level, accepted at run 21" in capsys.readouterr().err


def test_an_acceptance_survives_a_trimmed_history(store: FileStore) -> None:
    """The accepted runs count, so trimming keeps them as the level however many nights follow."""
    assert specperf(["accept", "plain", "--store", str(store.root)]) == 0
    record(store, KEY, [Night(92.0)] * 12, spread=0.03, seed=2)
    (entry,) = store.entries()
    trimmed = FileStore(store.root.parent / "trimmed")
    for run in entry.runs:
        trimmed.append(dataclasses.replace(run, segment=0), new_segment=run.acceptance is not None, history=10)
    (kept,) = trimmed.entries()
    assert any(r.acceptance is not None for r in kept.runs)
    assert tonight_at(92.0, kept) is Decision.MET
