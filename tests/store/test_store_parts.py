"""A history past its first month: a night appends to a small part whose name ends with its key's tag,
the files before it are never changed again, and a git branch grows by about tonight's lines.

Every history is a real SGLang night (tests/data/real-nights/sglang-cpu-spec/night1-report.json: its
rounds, fingerprint and per-request records) stored night after night, its throughput moved by a
seeded night-to-night noise as real nights move.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from gitrepos import git
from test_store_paths import nightly_runs

from pytest_specperf.config.location import StoreLocation
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.store import GitStore, open_store
from pytest_specperf.store.compact import encode_run
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.parts import PART_LINES, history_files, parts_of, records_path, tag_of
from pytest_specperf.store.records import StoredRun

BRANCH = "specperf-history"


def nights_of(key: MeasurementKey, nights: int, seed: int = 0) -> list[StoredRun]:
    """`nights` runs of the real night as `key`'s, each with its own seeded throughput (1.5% apart)."""
    rng = random.Random(seed)
    out = []
    for number, run in enumerate(nightly_runs(nights)):
        level = rng.gauss(1.0, 0.015)
        rounds = [
            dataclasses.replace(r, output_throughput=r.output_throughput * level * rng.gauss(1.0, 0.004))
            for r in run.measurement.rounds
        ]
        measurement = dataclasses.replace(run.measurement, key=key, rounds=rounds)
        ident = f"{key.label}-{number}"
        provenance = dataclasses.replace(run.provenance, run_id=ident)
        out.append(dataclasses.replace(run, measurement=measurement, provenance=provenance))
    return out


def lines_of(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def test_after_a_month_a_night_appends_to_a_small_part_and_earlier_files_stay_as_they_were(tmp_path: Path) -> None:
    store = FileStore(tmp_path / ".specperf")
    key = MeasurementKey("ngram", "code", 1)
    runs = nights_of(key, PART_LINES + 8)
    for run in runs[: PART_LINES + 1]:
        store.append(run, new_segment=False)
    path = store.path_for(key)
    first_month = path.read_bytes()
    for run in runs[PART_LINES + 1 :]:
        result = store.append(run, new_segment=False)
    assert path.read_bytes() == first_month and lines_of(path) == PART_LINES  # never changed again
    (part,) = parts_of(path)
    assert lines_of(part) == 8 and part.name.endswith(f".{tag_of(path)}.jsonl")
    assert records_path(path).is_file() and not path.with_name("code-c1.records.json").exists()
    assert result.runs == len(runs) and result.path == path
    history = store.read(path)
    assert [r.provenance.run_id for r in history.runs] == [r.provenance.run_id for r in runs]
    assert len(history.runs[-1].measurement.records) == len(runs[-1].measurement.records) > 0
    assert [h.path for h in store.entries()] == [path]
    assert store.load(key) is not None and store.load(key).runs[-1].provenance.run_id == runs[-1].provenance.run_id


def test_a_long_history_an_earlier_release_wrote_is_read_first_and_never_rewritten(tmp_path: Path) -> None:
    """A layout-3 history of 40 nights, written as the release before parts wrote it (one file): the next
    night starts the first part and leaves that file's bytes alone; an acceptance rewrites it whole into
    the one file again and takes the parts away, every run kept."""
    store = FileStore(tmp_path / ".specperf")
    key = MeasurementKey("ngram", "code", 1)
    runs = nights_of(key, 41)
    path = store.path_for(key)
    path.parent.mkdir(parents=True)
    for run in runs[:40]:
        encoded = encode_run(run)
        for relative, text in encoded.documents.items():
            (store.root / relative).parent.mkdir(parents=True, exist_ok=True)
            (store.root / relative).write_text(text)
        with path.open("a") as handle:
            handle.write(encoded.line)
    written = path.read_bytes()
    store.append(runs[40], new_segment=False)
    assert path.read_bytes() == written
    assert [lines_of(p) for p in history_files(path)] == [40, 1]
    assert [r.provenance.run_id for r in store.read(path).runs] == [r.provenance.run_id for r in runs]
    store.accept(path, store.read(path).runs[38].provenance, "a faster draft, reviewed")
    assert history_files(path) == [path] and lines_of(path) == 41
    accepted = store.read(path).runs
    assert [r.segment for r in accepted][37:] == [0, 1, 1, 1] and accepted[38].acceptance == "a faster draft, reviewed"
    assert [r.provenance.run_id for r in accepted] == [r.provenance.run_id for r in runs]


def test_a_nights_push_changes_small_files_whose_names_end_apart(tmp_path: Path) -> None:
    """Eight servers measuring the same workload at two levels (every server folder holds the same file
    names, as a team's store does), 34 nights on the branch; a session's night changes one small file
    per key, whose path's last 16 characters (what git pairs delta bases by) differ from every other
    key's, and the branch grows by about that night's lines once packed."""
    keys = [MeasurementKey(f"spec-{s}", "workload-00", c) for s in range(8) for c in (1, 2)]
    remote, seed = tmp_path / "remote.git", tmp_path / "seed"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    git(tmp_path, "init", "--quiet", str(seed))
    runs = {key: nights_of(key, PART_LINES + 3, seed=n) for n, key in enumerate(keys)}
    store = FileStore(seed)
    for key in keys:
        for run in runs[key][: PART_LINES + 2]:
            store.append(run, new_segment=False)
    git(seed, "add", "--all")
    git(seed, "commit", "--quiet", "-m", "the histories")
    git(seed, "push", "--quiet", str(remote), f"HEAD:refs/heads/{BRANCH}")
    git(remote, "repack", "-a", "-d", "--quiet")
    before = packed_bytes(remote)
    session = open_store(
        StoreLocation.parse(f"git:{remote}#{BRANCH}", base=tmp_path, where="t"), work_dir=tmp_path / "w"
    )
    assert isinstance(session, GitStore)
    for key in keys:
        session.append(runs[key][-1], new_segment=False)
    session.publish()
    session.close()
    changed = git(remote, "diff", "--name-only", f"{BRANCH}~1", BRANCH).splitlines()
    histories = [name for name in changed if name.endswith(".jsonl")]
    assert len(histories) == len(keys) and len({name[-16:] for name in changed}) == len(changed)
    tree = tmp_path / "after"
    git(tmp_path, "clone", "--quiet", "--branch", BRANCH, str(remote), str(tree))
    assert all(lines_of(tree / name) <= PART_LINES for name in histories)
    git(remote, "repack", "-a", "-d", "--quiet")
    added = packed_bytes(remote) - before
    assert added <= 700 * len(keys), added  # a night's line is 1.3 KB, its delta a few hundred bytes


def packed_bytes(repository: Path) -> int:
    return sum(p.stat().st_size for p in (repository / "objects").rglob("*") if p.is_file())


def test_a_line_cut_short_in_a_part_is_kept_aside_and_the_history_goes_on(tmp_path: Path) -> None:
    """A night's write cut short in a part (a power loss mid-append): the reader leaves that line out, the
    next append keeps its bytes aside and goes on in the same part; nothing before it is lost."""
    store = FileStore(tmp_path / ".specperf")
    key = MeasurementKey("ngram", "code", 1)
    runs = nights_of(key, PART_LINES + 3)
    for run in runs[: PART_LINES + 1]:
        store.append(run, new_segment=False)
    path = store.path_for(key)
    (part,) = parts_of(path)
    line = encode_run(runs[PART_LINES + 1]).line
    with part.open("a") as handle:
        handle.write(line[: len(line) // 2])
    assert len(store.read(path).runs) == PART_LINES + 1
    result = store.append(runs[PART_LINES + 2], new_segment=False)
    assert result.runs == PART_LINES + 2 and parts_of(path) == [part] and lines_of(part) == 2
    assert [p.name.split(".cut-")[0] for p in part.parent.glob("*.cut-*")] == [part.name]
    expected = [r.provenance.run_id for r in runs[: PART_LINES + 1]] + [runs[-1].provenance.run_id]
    assert [r.provenance.run_id for r in store.read(path).runs] == expected
