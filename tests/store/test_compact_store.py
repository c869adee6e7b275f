"""The append-only store (layout 3): a night adds only its own bytes, years are kept, and a store written
by the previous release (one JSON file per key, tests/store/data/release-store) reads as it is and
converts losslessly, by `specperf store migrate` or by the first write."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_specperf.cli import main as specperf
from pytest_specperf.cli.history import history_rows
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement, RoundSample
from pytest_specperf.store.compact import SIGNIFICANT, read_history
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.parts import history_files
from pytest_specperf.store.records import (
    LEVEL_RUNS,
    VERDICT_NIGHTS,
    StoredBaseline,
    StoredRun,
    new_run,
    reference_history,
)

DATA = Path(__file__).parent / "data"
RELEASE_STORE = DATA / "release-store"
NIGHT = Path(__file__).parents[1] / "data" / "real-nights" / "sglang-cpu-spec"


def release_store(tmp_path: Path) -> Path:
    """A copy of the store the previous release wrote (see its README)."""
    root = tmp_path / ".specperf"
    shutil.copytree(RELEASE_STORE, root, ignore=shutil.ignore_patterns("README.md"))
    return root


def real_measurement(server: str = "ngram") -> Measurement:
    """A real SGLang night's measurement (tests/data/real-nights/sglang-cpu-spec/night1-report.json)."""
    report = json.loads((NIGHT / "night1-report.json").read_text())
    row = next(m for m in report["measurements"] if m["server"] == server)
    return Measurement.from_dict(row, fingerprint=Fingerprint.from_dict(row["fingerprint"]))


def same_run(a: StoredRun, b: StoredRun, *, records: bool = True) -> None:
    """Equal in everything the store keeps: rounds (float for float), records, fingerprint, provenance, level."""
    assert a.measurement == b.measurement  # every field, every round's every figure, exactly
    if records:  # kept for a history's newest run only
        assert [r.to_dict() for r in a.measurement.records] == [r.to_dict() for r in b.measurement.records]
    assert a.fingerprint == b.fingerprint
    assert (a.provenance, a.segment, a.status, a.acceptance, a.summary) == (
        b.provenance,
        b.segment,
        b.status,
        b.acceptance,
        b.summary,
    )


def by_key(entries: list[StoredBaseline]) -> dict[str, StoredBaseline]:
    return {f"{e.measurement.key.label} {e.fingerprint.identity.get('launcher')}": e for e in entries}


# --- the previous release's store ------------------------------------------------------------


def test_a_store_of_the_previous_release_reads_as_it_is_and_migrate_converts_it_losslessly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = release_store(tmp_path)
    before = by_key(FileStore(root).entries())
    assert len(before) == 5 and {len(e.runs) for e in before.values()} == {5, 11}
    assert all(e.path.suffix == ".json" for e in before.values())  # read as it is, nothing written
    rows_before = {k: history_rows(e, reference_history(e, list(before.values()))) for k, e in before.items()}

    assert specperf(["store", "migrate", "--store", str(root)]) == 0
    said = capsys.readouterr().out
    assert f"{root}: converted 5 histories to the append-only layout 3" in said

    after = by_key(FileStore(root).entries())
    assert sorted(after) == sorted(before)
    for key, entry in after.items():
        assert entry.path.suffix == ".jsonl"
        assert len(entry.runs) == len(before[key].runs)
        for new, old in zip(entry.runs, before[key].runs, strict=True):
            same_run(new, old)
        # what `specperf history` shows (segments, statuses, change points, speedups) is unchanged
        assert history_rows(entry, reference_history(entry, list(after.values()))) == rows_before[key]
    ngram = after["ngram/code/c1 sglang"]
    assert [(r.segment, r.status) for r in ngram.runs] == [(0, "accepted")] * 3 + [(1, "accepted")] * 2
    assert ngram.runs[3].acceptance == "accepted by ci on 2026-12-05: the new draft is the normal"
    assert not [p for p in root.rglob("*-c1.json")]  # no history of the older layout is left

    assert specperf(["store", "migrate", "--store", str(root)]) == 0
    assert "nothing to convert" in capsys.readouterr().out


def test_the_first_write_converts_the_store_and_says_so_once(tmp_path: Path) -> None:
    root = release_store(tmp_path)
    store = FileStore(root)
    before = by_key(store.entries())
    result = store.save(real_measurement(), suite_dir=None, new_segment=False, session="night-6")
    [said] = store.publish()
    assert said.startswith(f"{root}: converted 5 histories to the append-only layout 3")
    assert store.publish() == []  # said once
    assert result.old == before["ngram/code/c1 sglang"].summary and result.runs == 6 and result.segment == 1
    after = by_key(FileStore(root).entries())
    for key, entry in before.items():
        for new, old in zip(after[key].runs, entry.runs, strict=False):
            same_run(new, old, records=new is after[key].runs[-1])
    assert [len(after[k].runs) - len(e.runs) for k, e in before.items()] == [1, 0, 0, 0, 0]


def test_a_session_that_only_reads_never_changes_a_store_of_the_previous_release(tmp_path: Path) -> None:
    root = release_store(tmp_path)
    files = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    store = FileStore(root)
    key = real_measurement().key
    assert store.load(key) is not None and len(store.entries()) == 5
    assert store.publish() == []
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == files


# --- append-only, compact ---------------------------------------------------------------------


def test_a_night_appends_only_its_own_bytes(tmp_path: Path) -> None:
    store = FileStore(tmp_path / ".specperf")
    store.save(real_measurement(), suite_dir=None, session="night-1")
    files = {p: p.read_bytes() for p in store.root.rglob("*") if p.is_file() and "records" not in p.name}
    store.save(real_measurement(), suite_dir=None, new_segment=False, session="night-2")
    for path, data in files.items():
        now = path.read_bytes()
        assert now.startswith(data), path  # nothing written before tonight changed
    history = store.path_for(real_measurement().key)
    assert history.read_bytes().count(b"\n") == 2


def realistic_night(rounds: int = 5) -> Measurement:
    """The real SGLang night with 5 rounds (its 3, two more like them), and a fingerprint as a GPU node's:
    the night's own, every /server_info field SGLang answered, and an image's environment."""
    night = real_measurement()
    extra = [
        dataclasses.replace(r, index=r.index + 3, output_throughput=r.output_throughput * 1.01) for r in night.rounds
    ]
    probe = json.loads((NIGHT / "collapse-standalone-probe.json").read_text())
    environment = dict(night.fingerprint.environment) if night.fingerprint else {}
    environment.update({f"server.{k}": json.dumps(v, sort_keys=True) for k, v in probe["server_info"].items()})
    environment.update(
        {
            "NVIDIA_REQUIRE_CUDA": "cuda>=12.8 "
            + " ".join(f"brand=tesla,driver>={d},driver<{d + 1}" for d in range(470, 570)),
            "CUDA_VERSION": "12.8.1",
            "NV_CUDNN_VERSION": "9.8.0.87-1",
            "NCCL_VERSION": "2.25.1-1",
            "PATH": "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
        }
    )
    fingerprint = Fingerprint(
        identity=dict(night.fingerprint.identity) if night.fingerprint else {}, environment=environment
    )
    rounds_: list[RoundSample] = [*night.rounds, *extra][:rounds]
    return dataclasses.replace(night, rounds=rounds_, fingerprint=fingerprint)


def test_a_realistic_night_costs_at_most_1_5_kb_per_key(tmp_path: Path) -> None:
    """The goal: ≤ 1.5 KB per stored night per key on disk over a year, with a real fingerprint of several
    kilobytes (stored once) and 5 rounds at 6 significant digits: a night's line, and its share of the
    fingerprint, the setup and the newest night's per-request records (kept once per key)."""
    night = realistic_night()
    assert len(json.dumps(night.fingerprint.to_dict() if night.fingerprint else {})) > 3500
    store = FileStore(tmp_path / ".specperf")
    nights = 365
    for n in range(nights):
        store.save(night, suite_dir=None, new_segment=n == 0, session=f"night-{n}")
    history = store.path_for(night.key)
    lines = [line for file in history_files(history) for line in file.read_text().splitlines()]
    assert len(lines) == nights and max(len(line.encode()) for line in lines) <= 1500
    stored = sum(p.stat().st_size for p in store.root.rglob("*") if p.is_file())
    assert stored / nights <= 1500, stored / nights
    newest = store.load(night.key)
    assert newest is not None and newest.runs[-1].measurement.samples("output_throughput") == pytest.approx(
        night.samples("output_throughput"), rel=0.5 * 10 ** (1 - SIGNIFICANT)
    )


# --- years, not 90 nights -----------------------------------------------------------------------


def test_a_year_is_kept_and_the_verdict_reads_the_window_it_needs(tmp_path: Path) -> None:
    store = FileStore(tmp_path / ".specperf")
    night = real_measurement()
    run = new_run(night, suite_dir=None)
    nights = 365
    for n in range(nights):
        provenance = dataclasses.replace(run.provenance, session=f"night-{n}", run_id=f"run-{n}")
        store.append(dataclasses.replace(run, provenance=provenance), new_segment=n == 0)
    [entry] = store.entries()
    assert len(entry.runs) == nights  # nothing dropped by default
    window = store.load(night.key)
    assert window is not None
    sessions = [r.provenance.session for r in window.runs]
    # the newest 90 nights and the level they are held against: what the verdict read from a capped file
    assert sessions == [f"night-{n}" for n in [*range(LEVEL_RUNS), *range(nights - VERDICT_NIGHTS, nights)]]


def test_a_retention_keeps_the_newest_nights_when_one_asks_for_it(tmp_path: Path) -> None:
    store = FileStore(tmp_path / ".specperf")
    for n in range(12):
        result = store.save(real_measurement(), suite_dir=None, new_segment=n == 0, session=f"s{n}", history=5)
    [entry] = store.entries()
    assert result.runs == len(entry.runs) == 5 + 7  # 5 nights, and the level's first runs before them
    assert entry.runs[-1].provenance.session == "s11"


# --- interrupted writes ---------------------------------------------------------------------------


def test_a_write_cut_short_is_never_read_and_its_bytes_are_kept(tmp_path: Path) -> None:
    store = FileStore(tmp_path / ".specperf")
    path = store.save(real_measurement(), suite_dir=None, session="night-1").path
    whole = path.read_bytes()
    with path.open("ab") as handle:
        handle.write(whole[: len(whole) // 2])  # the machine died in the middle of the next night's write
    loaded = store.load(real_measurement().key)
    assert loaded is not None and len(loaded.runs) == 1
    result = store.save(real_measurement(), suite_dir=None, new_segment=False, session="night-2")
    assert result.runs == 2 and len(store.load(real_measurement().key).runs) == 2  # type: ignore[union-attr]
    [cut] = path.parent.glob(f"{path.name}.cut-*")
    assert cut.read_bytes() == whole[: len(whole) // 2]


def test_a_history_file_reads_by_its_path_too(tmp_path: Path) -> None:
    """`specperf diff` reads a stored history by its file: a ``.jsonl`` finds its store's documents."""
    store = FileStore(tmp_path / ".specperf")
    path = store.save(real_measurement(), suite_dir=None).path
    assert read_history(path).measurement == store.load(real_measurement().key).measurement  # type: ignore[union-attr]


def test_history_of_one_key_reads_that_key_and_its_reference_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`specperf history SERVER/WORKLOAD` says what it said when it read every history of the store."""
    root = release_store(tmp_path)
    assert specperf(["store", "migrate", "--store", str(root)]) == 0
    capsys.readouterr()
    read: list[Path] = []
    original = FileStore.read

    def counted(self: FileStore, path: Path) -> StoredBaseline:
        read.append(path)
        return original(self, path)

    monkeypatch.setattr(FileStore, "read", counted)
    assert specperf(["history", "ngram/code", "--store", str(root)]) == 0
    selected = capsys.readouterr().out
    assert sorted(p.parent.name for p in read) == ["ngram", "plain"]  # the key and its reference
    assert "speedup over plain" in selected
    monkeypatch.delattr(FileStore, "histories_of")
    assert specperf(["history", "ngram/code", "--store", str(root)]) == 0
    assert capsys.readouterr().out == selected


def test_a_git_store_of_the_previous_release_converts_on_its_branch_and_is_pushed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def git(cwd: Path, *args: str) -> str:
        identity = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
        done = subprocess.run(["git", *identity, *args], cwd=cwd, check=True, capture_output=True, text=True)
        return done.stdout

    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    seed = release_store(tmp_path / "seed")
    git(seed, "init", "--quiet")
    git(seed, "add", "--all")
    git(seed, "commit", "--quiet", "-m", "the previous release's histories")
    git(seed, "push", "--quiet", str(remote), "HEAD:refs/heads/history")
    setting = f"git:{remote}#history"
    assert specperf(["store", "migrate", "--store", setting]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith(f"{setting}: converted 5 histories") and said[1].startswith(f"{setting}: pushed")
    files = git(remote, "ls-tree", "-r", "--name-only", "history").split()
    assert "ngram/code-c1.jsonl" in files and "ngram/code-c1.json" not in files
    assert specperf(["store", "migrate", "--store", setting]) == 0
    assert "nothing to convert" in capsys.readouterr().out
