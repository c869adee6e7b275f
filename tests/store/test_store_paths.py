"""What a night's append and a session's reads touch in a year-long history, and what they leave after a
power loss or a full disk: the store's paths at scale, checked by what they read and write, not by time.

Every history here is a real SGLang night (tests/data/real-nights/sglang-cpu-spec/night1-report.json,
its rounds, fingerprint and per-request records) stored night after night.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

import pytest_specperf.store.compact as compact_module
import pytest_specperf.store.file as file_module
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement
from pytest_specperf.store.compact import encode_run, records_document
from pytest_specperf.store.file import FileStore, verdict_window
from pytest_specperf.store.records import LEVEL_RUNS, VERDICT_NIGHTS, StoredRun, new_run

NIGHT = Path(__file__).parents[1] / "data" / "real-nights" / "sglang-cpu-spec" / "night1-report.json"
LAYOUT3_STORE = Path(__file__).parent / "data" / "layout3-store"


def real_measurement(server: str = "ngram") -> Measurement:
    report = json.loads(NIGHT.read_text())
    row = next(m for m in report["measurements"] if m["server"] == server)
    return Measurement.from_dict(row, fingerprint=Fingerprint.from_dict(row["fingerprint"]))


def nightly_runs(nights: int, server: str = "ngram") -> list[StoredRun]:
    run = new_run(real_measurement(server), suite_dir=None)
    return [
        dataclasses.replace(
            run, provenance=dataclasses.replace(run.provenance, session=f"night-{n}", run_id=f"{server}-{n}")
        )
        for n in range(nights)
    ]


def year(root: Path, nights: int = 365) -> Path:
    """A history of `nights` nights as that many appends leave it, written with the store's own encoder."""
    store = FileStore(root)
    runs = nightly_runs(nights)
    path = store.path_for(runs[0].measurement.key)
    lines = []
    for run in runs:
        encoded = encode_run(run)
        for relative, text in encoded.documents.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text)
        lines.append(encoded.line)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    path.with_name("code-c1.records.json").write_text(json.dumps(records_document(runs[-1])) + "\n")
    return path


def test_a_store_of_todays_layout_reads_as_it_is_and_its_lines_are_written_byte_for_byte(tmp_path: Path) -> None:
    root = tmp_path / ".specperf"
    shutil.copytree(LAYOUT3_STORE, root, ignore=shutil.ignore_patterns("README.md"))
    store = FileStore(root)
    entries = store.entries()
    assert [(e.measurement.key.server, len(e.runs)) for e in entries] == [("ngram", 3), ("plain", 3)]
    for entry in entries:
        assert [encode_run(run).line for run in entry.runs] == entry.path.read_text().splitlines(keepends=True)
        assert entry.runs[-1].measurement.records  # the newest run's records, read from beside the lines
    before = {p: p.read_bytes() for p in root.rglob("*.jsonl")}
    result = store.save(real_measurement(), suite_dir=None, new_segment=False, session="night-3")
    grown = result.path.read_bytes()
    assert grown.startswith(before[result.path]) and grown.count(b"\n") == 4  # appended, nothing rewritten
    assert sorted(p.name for p in (root / "fingerprints").iterdir()) == sorted(
        p.name for p in (LAYOUT3_STORE / "fingerprints").iterdir()
    )


def test_a_sessions_read_parses_only_the_lines_of_the_verdicts_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of a year of nights, `load` parses the window's lines (the newest 90 nights and the level's first
    runs); the other lines are looked at, not parsed: the same window as parsing every line."""
    path = year(tmp_path / ".specperf")
    store = FileStore(tmp_path / ".specperf")
    parsed: list[str] = []
    loads = json.loads

    def counted(text: str | bytes, *args: object, **kwargs: object) -> object:
        if (text if isinstance(text, str) else text.decode()).startswith('{"run":'):  # a history's line
            parsed.append(str(text))
        return loads(text, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compact_module.json, "loads", counted)
    window = store.load(real_measurement().key)
    monkeypatch.undo()
    assert window is not None
    assert len(parsed) == len(window.runs) == LEVEL_RUNS + VERDICT_NIGHTS
    assert [r.provenance for r in window.runs] == [r.provenance for r in verdict_window(store.read(path)).runs]


def test_a_full_disk_at_the_lines_fsync_leaves_the_history_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line is written, then its fsync fails (ENOSPC): its bytes are taken back and the error said."""
    store = FileStore(tmp_path / ".specperf")
    path = store.save(real_measurement(), suite_dir=None, session="night-1").path
    before = path.read_bytes()
    fsync = os.fsync

    def full_for_the_history(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
            raise OSError(28, "No space left on device")
        fsync(fd)

    monkeypatch.setattr(file_module.os, "fsync", full_for_the_history)
    with pytest.raises(file_module.StoreError, match="No space left on device"):
        store.save(real_measurement(), suite_dir=None, new_segment=False, session="night-2")
    monkeypatch.undo()
    assert path.read_bytes() == before
    result = store.save(real_measurement(), suite_dir=None, new_segment=False, session="night-2")
    assert result.runs == 2


def test_records_cut_short_by_a_power_loss_leave_the_history_readable(tmp_path: Path) -> None:
    """The newest run's records are replaced without an fsync (the line after them is the durable write):
    a records file a power loss cut short costs those records, never the history."""
    store = FileStore(tmp_path / ".specperf")
    store.save(real_measurement(), suite_dir=None, session="night-1")
    result = store.save(real_measurement(), suite_dir=None, new_segment=False, session="night-2")
    records = result.path.with_name("code-c1.records.json")
    text = records.read_text()
    records.write_text(text[: len(text) // 2])
    loaded = store.load(real_measurement().key)
    assert loaded is not None and len(loaded.runs) == 2
    assert not loaded.runs[-1].measurement.records
    assert loaded.runs[-1].measurement.rounds == store.entries()[0].runs[-1].measurement.rounds
