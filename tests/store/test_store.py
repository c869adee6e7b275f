"""Stored baselines: round trip, atomic and locked writes, corrupt files, no secrets."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import subprocess
from pathlib import Path

import pytest

from pytest_specperf.common import jsonfile
from pytest_specperf.common.jsonfile import safe_name
from pytest_specperf.errors import StoreError
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Distribution, Measurement, MeasurementKey, RequestRecord, RoundSample
from pytest_specperf.store import compact as compact_module
from pytest_specperf.store import file as file_store
from pytest_specperf.store import read_history
from pytest_specperf.store.compact import rounded
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.records import SCHEMA_VERSION, Summary, document, dumps, new_run

KEY = MeasurementKey("eagle3-5step", "chat", 1)
FINGERPRINT = Fingerprint(
    identity={"launcher": "sglang", "model": "m", "gpu": "NVIDIA H200", "gpu_count": "8"},
    environment={"sglang.version": "0.5.23", "NCCL_ALGO": "Ring"},
)


def record(index: int, tokens: int = 64, verify: int | None = 30) -> RequestRecord:
    return RequestRecord(
        index=index,
        sent=0.01 * index,
        first_chunk=0.05 + 0.01 * index,
        last_chunk=0.9 + 0.01 * index,
        num_chunks=verify or tokens,
        prompt_tokens=20,
        completion_tokens=tokens,
        verify_ct=verify,
        finish_reason="length",
    )


def round_sample(index: int, throughput: float, accept: float | None = 2.1) -> RoundSample:
    dist = Distribution(mean=10.0 + index, p50=9.0, p90=12.0, p99=15.0)
    return RoundSample(
        index=index,
        duration_s=1.0,
        output_throughput=throughput,
        request_count=2,
        error_count=0,
        ttft_ms=Distribution(mean=50.0, p50=50.0, p90=55.0, p99=60.0),
        tpot_ms=dist,
        e2e_ms=dist,
        chunk_gap_ms=dist,
        accept_length=accept,
        accept_length_per_request=accept,
        acceptance_rate=None if accept is None else (accept - 1) / 5,
        cached_tokens=0,
        records=(record(0), record(1)),
    )


def measurement(
    key: MeasurementKey = KEY, throughputs: tuple[float, ...] = (70.0, 72.0, 74.0), **kw: object
) -> Measurement:
    values: dict = {
        "key": key,
        "workload_hash": "w-hash",
        "is_reference": False,
        "rounds": [round_sample(i, t) for i, t in enumerate(throughputs)],
        "num_steps": 5,
        "eagle_topk": 1,
        "num_draft_tokens": 6,
        "fingerprint": FINGERPRINT,
    }
    values.update(kw)
    return Measurement(**values)


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / ".specperf")


def leftovers(root: Path) -> list[Path]:
    """Anything in the store that is not a history, its records, a fingerprint, the lock or the .gitignore."""
    expected = {".gitignore", ".specperf.lock"}
    return [
        p for p in root.rglob("*") if p.is_file() and p.suffix not in (".json", ".jsonl") and p.name not in expected
    ]


# --- round trip -----------------------------------------------------------------------------


def test_absent_is_none(store: FileStore) -> None:
    assert store.load(KEY) is None
    assert store.entries() == []


def test_round_trip(store: FileStore, tmp_path: Path) -> None:
    original = measurement(warnings=["concurrency above cuda-graph bs"])
    result = store.save(original, suite_dir=tmp_path)
    loaded = store.load(KEY)
    assert loaded is not None
    assert loaded.path == result.path == store.root / "eagle3-5step" / "chat-c1.jsonl"
    # a new night's floats keep 6 significant digits (store/compact.py SIGNIFICANT): 0.22000000000000003 is 0.22
    assert loaded.measurement.rounds[0].acceptance_rate == 0.22 != original.rounds[0].acceptance_rate
    assert rounded(loaded.measurement.to_dict()) == rounded(original.to_dict())
    # records are compare=False in RoundSample, and times are stored to the microsecond
    assert [r.to_dict() for r in loaded.measurement.records] == [r.to_dict() for r in original.records]
    assert isinstance(loaded.fingerprint, Fingerprint)
    assert loaded.fingerprint == FINGERPRINT
    assert loaded.summary == result.new == Summary.of(original)
    assert loaded.provenance.specperf_version
    assert loaded.provenance.git_commit is None  # tmp_path is not a git repository
    assert store.entries() == [loaded]


def test_gitignore_covers_the_lock(store: FileStore) -> None:
    store.save(measurement(), suite_dir=None)
    ignored = (store.root / ".gitignore").read_text().splitlines()
    assert ".specperf.lock" in ignored and ".*.tmp" in ignored
    (store.root / ".gitignore").write_text("mine\n")
    store.save(measurement(), suite_dir=None)
    assert (store.root / ".gitignore").read_text() == "mine\n"  # never overwritten


def test_summary_values(store: FileStore) -> None:
    summary = store.save(measurement(), suite_dir=None).new
    assert summary == Summary(
        rounds=3,
        requests=6,
        errors=0,
        output_throughput=72.0,
        accept_length=2.1,
        mean_tpot_ms=11.0,
        mean_ttft_ms=50.0,
    )


def test_save_reports_old_and_new_summary(store: FileStore) -> None:
    first = store.save(measurement(throughputs=(60.0,)), suite_dir=None)
    second = store.save(measurement(throughputs=(75.0,)), suite_dir=None)
    assert first.old is None
    assert second.old == first.new
    assert second.new.output_throughput == 75.0


def test_a_night_is_one_compact_line_and_what_nights_share_is_stored_once(store: FileStore) -> None:
    path = store.save(measurement(), suite_dir=None).path
    store.save(measurement(), suite_dir=None, new_segment=False)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    data = json.loads(lines[0])
    assert lines[0] == json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    run = data["run"]
    assert set(run) == {"v", "setup", "fingerprint", "rounds", "provenance", "segment", "status"}
    assert run["v"] == 3 and run["status"] == "accepted" and run["segment"] == 0
    [fingerprint] = (store.root / "fingerprints").iterdir()
    assert run["fingerprint"] == fingerprint.stem  # referenced by digest, stored once for both nights
    assert json.loads(fingerprint.read_text()) == FINGERPRINT.to_dict()
    [setup_file] = (store.root / "setups").iterdir()
    setup = json.loads(setup_file.read_text())
    assert run["setup"] == setup_file.stem and setup["server"] == KEY.server and setup["workload_hash"] == "w-hash"
    columns = dict(zip(setup["columns"], run["rounds"], strict=True))
    assert columns["output_throughput"] == [70.0, 72.0, 74.0]
    assert columns["tpot_ms.mean"] == [10.0, 11.0, 12.0]  # a distribution: one column per figure
    assert "records" not in columns  # the newest run's records live beside the lines
    assert set(run["provenance"]) == {"created", "git_commit", "host", "specperf_version", "session", "run_id"}
    assert run["provenance"]["created"].endswith("+00:00")
    assert run["provenance"]["session"] is None  # saved outside a pytest session


def test_git_commit_in_provenance(store: FileStore, tmp_path: Path) -> None:
    repo = tmp_path / "suite"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    store.save(measurement(), suite_dir=repo / "")
    assert store.load(KEY).provenance.git_commit == head.strip()


def test_names_are_sanitised_without_collisions(store: FileStore) -> None:
    a = MeasurementKey("team/eagle 3", "../chat", 8)
    b = MeasurementKey("team_eagle_3", "__chat", 8)
    path_a, path_b = store.path_for(a), store.path_for(b)
    assert path_a != path_b
    for path in (path_a, path_b):
        assert path.parent.parent == store.root
        assert path.name.endswith("-c8.jsonl")
    store.save(measurement(key=a), suite_dir=None)
    assert store.load(a).measurement.key == a
    assert store.load(b) is None
    assert safe_name("plain") == "plain"
    assert safe_name("NUL") != "NUL"


def test_summary_is_recomputed_not_trusted(store: FileStore) -> None:
    path = write_raw(store, json.dumps(stored_dict(store)))
    data = json.loads(path.read_text())
    data["runs"][0]["summary"]["output_throughput"] = 999.0  # a hand edit
    path.write_text(json.dumps(data))
    assert store.load(KEY).summary.output_throughput == 72.0


def test_non_finite_numbers_are_stored_as_null(store: FileStore) -> None:
    m = measurement()
    m.rounds[0] = round_sample(0, float("nan"), accept=float("inf"))
    text = store.save(m, suite_dir=None).path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    loaded = store.load(KEY)
    assert loaded.measurement.rounds[0].output_throughput is None
    assert loaded.summary.output_throughput == 73.0


# --- secrets --------------------------------------------------------------------------------


def test_no_secret_is_written(store: FileStore) -> None:
    leaky = Fingerprint(
        identity={"launcher": "sglang", "args": "--api-key sk-live-123 --tp-size 8"},
        environment={"HF_TOKEN": "hf_whatever", "NCCL_ALGO": "Ring", "SGLANG_URL": "http://u:pw9@h/"},
    )
    m = measurement(fingerprint=leaky, warnings=["attached to https://bob:hunter2@10.0.0.7:30000"])
    text = store.save(m, suite_dir=None).path.read_text()
    for secret in ("sk-live-123", "hf_whatever", "pw9", "hunter2"):
        assert secret not in text
    assert store.load(KEY).fingerprint.environment["NCCL_ALGO"] == "Ring"


def test_refuses_a_measurement_without_fingerprint(store: FileStore) -> None:
    with pytest.raises(ValueError, match="without a fingerprint"):
        store.save(measurement(fingerprint=None), suite_dir=None)
    assert not store.root.exists()


# --- atomic writes --------------------------------------------------------------------------


def test_no_temp_files_left(store: FileStore) -> None:
    for throughput in (1.0, 2.0, 3.0):
        store.save(measurement(throughputs=(throughput,)), suite_dir=None)
    assert leftovers(store.root) == []


def test_failed_serialisation_leaves_old_file_intact(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    path = store.save(measurement(), suite_dir=None).path
    before = path.read_bytes()

    def broken(value: object) -> object:
        raise RuntimeError("serialiser died")

    monkeypatch.setattr(compact_module, "clean", broken)
    with pytest.raises(RuntimeError, match="serialiser died"):
        store.save(measurement(throughputs=(1.0,)), suite_dir=None)
    assert path.read_bytes() == before
    assert leftovers(store.root) == []


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_failed_write_leaves_old_file_intact(store: FileStore, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """The temp file is half-written (or complete but not renamed) when the failure hits."""
    path = store.save(measurement(), suite_dir=None).path
    before = path.read_bytes()

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jsonfile.os, step, fail)
    with pytest.raises(StoreError, match="No space left on device"):
        store.save(measurement(throughputs=(1.0,)), suite_dir=None)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert leftovers(store.root) == []


# --- concurrency ----------------------------------------------------------------------------

WORKERS = 8
SAVES = 5
SHARED = MeasurementKey("plain", "chat", 4)


def _worker(root: str, worker: int, results: multiprocessing.Queue) -> None:
    """One xdist worker / CI job: saves its own key and the shared key, several times."""
    store = FileStore(Path(root))
    own = MeasurementKey(f"server-{worker}", "chat", 1)
    for i in range(SAVES):
        store.save(measurement(key=own, throughputs=(float(i),)), suite_dir=None)
        result = store.save(
            measurement(key=SHARED, throughputs=(worker * 100.0 + i,)), suite_dir=None, new_segment=False, history=1000
        )
        old = None if result.old is None else result.old.output_throughput
        results.put((old, result.new.output_throughput))


def test_concurrent_saves_lose_nothing(store: FileStore) -> None:
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    results = context.Queue()
    processes = [context.Process(target=_worker, args=(str(store.root), w, results)) for w in range(WORKERS)]
    for process in processes:
        process.start()
    pairs = [results.get(timeout=60) for _ in range(WORKERS * SAVES)]
    for process in processes:
        process.join(timeout=60)
    assert [p.exitcode for p in processes] == [0] * WORKERS

    for path in store.root.rglob("*.jsonl"):
        for line in path.read_text().splitlines(keepends=True):
            assert line.endswith("\n") and json.loads(line)  # every line is complete, valid JSON
    assert len(store.entries()) == WORKERS + 1
    for worker in range(WORKERS):
        own = store.load(MeasurementKey(f"server-{worker}", "chat", 1))
        assert own.summary.output_throughput == SAVES - 1.0  # each worker's last save
    # The saves of the shared key were serialised: each one replaced exactly the one before it.
    final = store.load(SHARED).summary.output_throughput
    olds = sorted((old for old, _ in pairs), key=lambda v: -1 if v is None else v)
    news = sorted(new for _, new in pairs)
    assert olds[0] is None and olds[1:] == [v for v in news if v != final]
    # Every append of the shared key is in its history, each after the one it followed.
    history = [run.summary.output_throughput for run in store.load(SHARED).runs]
    assert sorted(history) == news and history[-1] == final
    assert {run.segment for run in store.load(SHARED).runs} == {0}
    assert leftovers(store.root) == []


# --- unreadable files -----------------------------------------------------------------------


def write_raw(store: FileStore, content: str) -> Path:
    """A history file of the layout before 3 (one JSON document per key), as the previous release wrote it."""
    path = store.legacy_path_for(KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


def stored_dict(store: FileStore) -> dict:
    """The document the previous release stored for one night of `KEY` (store/records.py `document`)."""
    return json.loads(dumps(document([new_run(measurement(), suite_dir=None)])))


def test_bad_json_names_the_file(store: FileStore) -> None:
    path = write_raw(store, '{"schema_version": 1, "kind": ')
    with pytest.raises(StoreError, match="not valid JSON") as info:
        store.load(KEY)
    assert str(path) in str(info.value)
    with pytest.raises(StoreError, match=r"chat-c1\.json"):
        store.entries()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("runs"), "missing field 'runs'"),
        (lambda d: d["runs"][0].pop("measurement"), "missing field 'measurement'"),
        (lambda d: d["runs"][0].pop("segment"), "missing field 'segment'"),
        (lambda d: d["runs"][0]["measurement"].pop("rounds"), "missing field 'rounds'"),
        (lambda d: d["runs"][0]["measurement"]["rounds"][0].pop("ttft_ms"), "missing field 'ttft_ms'"),
        (lambda d: d["runs"][0].pop("fingerprint"), "missing field 'fingerprint'"),
        (lambda d: d["runs"][0]["fingerprint"].pop("identity"), "fingerprint.identity must be an object"),
        (lambda d: d["runs"][0]["provenance"].pop("host"), "missing field 'host'"),
        (lambda d: d["runs"][0]["measurement"]["rounds"][0].update(output_throughput="fast"), "corrupt baseline"),
        (lambda d: d.update(schema_version="1"), "bad schema_version '1'"),
        (lambda d: d.update(kind="something else"), "not a pytest-specperf baseline"),
    ],
)
def test_missing_or_wrong_fields(store: FileStore, mutate, message: str) -> None:
    data = stored_dict(store)
    mutate(data)
    path = write_raw(store, json.dumps(data))
    with pytest.raises(StoreError, match=message) as info:
        store.load(KEY)
    assert str(path) in str(info.value)


def test_newer_schema_says_what_is_supported(store: FileStore) -> None:
    data = stored_dict(store)
    data["schema_version"] = SCHEMA_VERSION + 1
    path = write_raw(store, json.dumps(data))
    with pytest.raises(StoreError) as info:
        store.load(KEY)
    message = str(info.value)
    assert str(path) in message
    assert f"schema_version {SCHEMA_VERSION + 1} is newer" in message
    assert f"supports (schema_version {SCHEMA_VERSION})" in message


def test_update_refuses_to_overwrite_a_newer_schema(store: FileStore) -> None:
    data = stored_dict(store)
    data["schema_version"] = SCHEMA_VERSION + 1
    path = write_raw(store, json.dumps(data))
    before = path.read_bytes()
    with pytest.raises(StoreError) as info:
        store.save(measurement(), suite_dir=None)
    message = str(info.value)
    assert str(path) in message and "refusing to overwrite" in message
    assert f"schema_version {SCHEMA_VERSION + 1}" in message
    assert f"writes (schema_version {SCHEMA_VERSION})" in message
    assert "newer pytest-specperf" in message
    assert path.read_bytes() == before
    assert leftovers(store.root) == []


def test_file_under_the_wrong_key_is_refused(store: FileStore) -> None:
    text = store.save(measurement(), suite_dir=None).path.read_text()
    other = MeasurementKey(KEY.server, KEY.workload, 2)
    store.path_for(other).write_text(text)
    with pytest.raises(StoreError, match="not eagle3-5step/chat/c2"):
        store.load(other)


def test_save_keeps_a_corrupt_file_aside_and_says_so(store: FileStore) -> None:
    path = store.path_for(KEY)
    path.parent.mkdir(parents=True)
    path.write_text("garbage\n")
    result = store.save(measurement(), suite_dir=None)
    assert result.old is None
    assert "corrupt history line 1" in (result.replaced_error or "")
    assert store.load(KEY) is not None
    assert result.kept_as is not None and result.kept_as.parent == path.parent
    assert result.kept_as.name.startswith(f"{path.name}.unreadable-")
    assert result.kept_as.read_text() == "garbage\n"  # never lost
    assert [e.measurement.key for e in store.entries()] == [KEY]  # and no longer read as a baseline


def test_save_to_an_unwritable_store_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "store"
    blocker.write_text("a file where the store directory should be")  # unwritable even for root
    with pytest.raises(StoreError, match=r"cannot write the baseline \(.*\); a file stands where the store's folder"):
        FileStore(blocker).save(measurement(), suite_dir=None)


@pytest.mark.parametrize(
    ("error", "advice"),
    [
        (errno.ENOSPC, "the disk is full: free space where {root} is, or point `store` (config) at a directory on"),
        (errno.EDQUOT, "the user's disk quota is used up: free space where {root} is"),
        (errno.EROFS, "{root} is on a read-only file system: point `store` (config) at a writable directory"),
        (errno.EACCES, "give this user write permission on {root}, or point `store` (config) at a writable"),
        (errno.EIO, "make the store {root} writable, or point `store` (config) at a writable directory"),
    ],
    ids=["full", "quota", "read-only", "permission", "other"],
)
def test_a_failed_write_gives_the_advice_that_fits_it(
    store: FileStore, monkeypatch: pytest.MonkeyPatch, error: int, advice: str
) -> None:
    """A full disk is not fixed by making the store writable, nor a read-only mount by freeing space."""

    def failing(path: Path, text: str) -> None:
        raise OSError(error, os.strerror(error), str(path))

    monkeypatch.setattr(file_store, "atomic_write", failing)
    with pytest.raises(StoreError) as raised:
        store.save(measurement(), suite_dir=None)
    assert f"cannot write the baseline ({os.strerror(error)}: " in str(raised.value)
    assert f"); {advice.format(root=store.root)}" in str(raised.value)


def test_save_replaces_a_file_with_a_corrupt_schema_version(store: FileStore) -> None:
    data = stored_dict(store)
    data["schema_version"] = "2"  # not an integer: corrupt, not newer
    legacy = write_raw(store, json.dumps(data))
    result = store.save(measurement(), suite_dir=None)
    assert result.old is None and store.load(KEY) is not None
    [aside] = legacy.parent.glob(f"{legacy.name}.unreadable-*")  # the conversion kept it aside, and says so
    [converted, kept] = store.publish()
    assert "converted 0 histories" in converted and "bad schema_version '2'" in kept and aside.name in kept


def test_load_never_writes(store: FileStore) -> None:
    path = write_raw(store, "garbage")
    mtime = os.stat(path).st_mtime_ns
    with pytest.raises(StoreError):
        store.load(KEY)
    assert path.read_text() == "garbage" and os.stat(path).st_mtime_ns == mtime


# --- history ----------------------------------------------------------------------------------


def test_record_appends_update_starts_a_segment(store: FileStore) -> None:
    store.save(measurement(throughputs=(70.0,)), suite_dir=None)
    store.save(measurement(throughputs=(71.0,)), suite_dir=None, new_segment=False)
    result = store.save(measurement(throughputs=(60.0,)), suite_dir=None, new_segment=True)
    store.save(measurement(throughputs=(61.0,)), suite_dir=None, new_segment=False)
    loaded = store.load(KEY)
    series = [(r.segment, r.summary.output_throughput) for r in loaded.runs]
    assert series == [(0, 70.0), (0, 71.0), (1, 60.0), (1, 61.0)]
    assert [r.summary.output_throughput for r in loaded.current_segment] == [60.0, 61.0]
    assert result.segment == 1 and result.runs == 3 and result.old.output_throughput == 71.0
    assert loaded.summary.output_throughput == 61.0  # the newest run is the single baseline


def test_each_run_keeps_the_session_that_stored_it(store: FileStore) -> None:
    """The session id pairs a speculative run with the reference run measured with it (speedups)."""
    store.save(measurement(throughputs=(70.0,)), suite_dir=None, session="night1")
    store.save(measurement(throughputs=(71.0,)), suite_dir=None, new_segment=False, session="night2")
    assert [r.provenance.session for r in store.load(KEY).runs] == ["night1", "night2"]


def test_history_is_capped_oldest_dropped_but_the_accepted_level_kept(store: FileStore) -> None:
    """`history` nights are kept, the whole of an unacknowledged change they begin in (its first run is
    what every red night names), and the current segment's first accepted runs however old: the level
    a person accepted, which every later night is held against. An earlier segment goes."""
    for value in range(1, 6):
        store.save(measurement(throughputs=(float(value),)), suite_dir=None, new_segment=False, history=3)
    for value in range(10, 17):
        result = store.save(
            measurement(throughputs=(float(value),)),
            suite_dir=None,
            new_segment=value == 10,
            history=3,
            status="accepted" if value < 13 else "refused",
        )
    assert result.runs == 7  # nights 14-16, the change's first night 13, the accepted 10-12
    assert [r.summary.output_throughput for r in store.load(KEY).runs] == [float(v) for v in range(10, 17)]


def test_records_kept_for_newest_run_only(store: FileStore) -> None:
    for value in (1.0, 2.0, 3.0):
        path = store.save(measurement(throughputs=(value, value)), suite_dir=None, new_segment=False).path
    assert [len(r.measurement.records) for r in store.load(KEY).runs] == [0, 0, 4]
    records = json.loads(path.with_name("chat-c1.records.json").read_text())
    assert records["run"] == store.load(KEY).provenance.run_id and len(records["rounds"][0]) == 2
    # the older runs still carry every per-round sample
    samples = [r.measurement.samples("output_throughput") for r in store.load(KEY).runs]
    assert samples == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]


def test_schema_1_file_reads_as_one_run_and_migrates_on_next_write(store: FileStore) -> None:
    m = measurement(throughputs=(70.0, 72.0))
    body = m.to_dict()
    body.pop("fingerprint")
    legacy = {
        "schema_version": 1,
        "kind": "pytest-specperf baseline",
        "measurement": body,
        "summary": Summary.of(m).to_dict(),
        "fingerprint": FINGERPRINT.to_dict(),
        "provenance": {
            "created": "2026-11-12T01:00:00+00:00",
            "git_commit": "abc1234",
            "host": "h",
            "specperf_version": "0",
        },
    }
    path = write_raw(store, json.dumps(legacy))
    loaded = store.load(KEY)
    assert loaded.schema_version == 1 and len(loaded.runs) == 1 and loaded.segment == 0
    assert loaded.measurement == m and loaded.provenance.git_commit == "abc1234"
    assert path.read_text() == json.dumps(legacy)  # reading never rewrites
    result = store.save(measurement(throughputs=(71.0,)), suite_dir=None, new_segment=False)
    assert not path.exists() and result.path == store.path_for(KEY)  # converted by the first write
    assert result.old.output_throughput == 71.0 and result.runs == 2
    assert [run.provenance.git_commit for run in store.load(KEY).runs] == ["abc1234", None]
    assert store.load(KEY).runs[0].provenance.session is None  # stored before session ids: pairs with none
    assert [r.summary.output_throughput for r in store.load(KEY).current_segment] == [71.0, 71.0]


def test_empty_runs_is_corrupt(store: FileStore) -> None:
    path = write_raw(store, json.dumps({"schema_version": 2, "kind": "pytest-specperf baseline", "runs": []}))
    with pytest.raises(StoreError, match="corrupt baseline: runs must be a non-empty list") as info:
        store.load(KEY)
    assert str(path) in str(info.value)


# --- the simulator's layer -------------------------------------------------------------------


SIM_FINGERPRINT = Fingerprint(identity={**FINGERPRINT.identity, "launcher": "sim"}, environment=FINGERPRINT.environment)


def test_simulated_runs_are_stored_under_sim_and_never_read_as_a_real_engines(store: FileStore) -> None:
    saved = store.save(measurement(fingerprint=SIM_FINGERPRINT), suite_dir=None)
    assert saved.path == store.root / "sim" / "eagle3-5step" / "chat-c1.jsonl"
    assert store.load(KEY, simulated=True) is not None
    assert store.load(KEY) is None  # a real-engine session finds no baseline: NEW, not INCOMPARABLE
    real = store.save(measurement(), suite_dir=None)
    assert real.path == store.root / "eagle3-5step" / "chat-c1.jsonl" and real.runs == 1
    assert store.load(KEY, simulated=True).fingerprint.identity["launcher"] == "sim"  # type: ignore[union-attr]
    assert store.load(KEY).fingerprint.identity["launcher"] == "sglang"  # type: ignore[union-attr]
    assert [e.path for e in store.entries()] == [real.path, saved.path]


def test_a_server_called_sim_does_not_clash_with_the_simulators_layer(store: FileStore) -> None:
    key = MeasurementKey("sim", "chat", 1)
    real = store.save(measurement(key=key), suite_dir=None)
    simulated = store.save(measurement(key=key, fingerprint=SIM_FINGERPRINT), suite_dir=None)
    assert real.path == store.root / "sim" / "chat-c1.jsonl"
    assert simulated.path == store.root / "sim" / "sim" / "chat-c1.jsonl"
    assert store.load(key).fingerprint.identity["launcher"] == "sglang"  # type: ignore[union-attr]
    assert store.load(key, simulated=True).fingerprint.identity["launcher"] == "sim"  # type: ignore[union-attr]
    assert len(store.entries()) == 2


def legacy_simulated_store(store: FileStore) -> Path:
    """A store written before the sim/ level: a simulator's history at <store>/<server>/."""
    legacy = store.root / "eagle3-5step" / "chat-c1.json"
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_text(dumps(document([new_run(measurement(fingerprint=SIM_FINGERPRINT), suite_dir=None)])))
    return legacy


def test_a_store_from_before_the_sim_level_still_reads_and_moves_on_the_next_save(store: FileStore) -> None:
    legacy = legacy_simulated_store(store)
    found = store.load(KEY, simulated=True)
    assert found is not None and found.path == legacy
    assert store.load(KEY) is None
    saved = store.save(measurement(fingerprint=SIM_FINGERPRINT), suite_dir=None, new_segment=False)
    assert saved.path == store.root / "sim" / "eagle3-5step" / "chat-c1.jsonl"
    assert saved.runs == 2 and not legacy.exists()  # the history went on, in its new place


def test_a_real_run_moves_an_old_simulated_history_out_of_its_way(store: FileStore) -> None:
    legacy = legacy_simulated_store(store)
    saved = store.save(measurement(), suite_dir=None)
    assert saved.path == legacy.with_suffix(".jsonl") and saved.runs == 1 and saved.old is None
    assert store.load(KEY).fingerprint.identity["launcher"] == "sglang"  # type: ignore[union-attr]
    assert store.load(KEY, simulated=True) is not None  # kept, under sim/


def test_a_runs_status_is_stored_and_read_back(store: FileStore) -> None:
    """A SUSPECT or REGRESSION night is kept, marked: the verdict leaves it out of the level, change points see it."""
    store.save(measurement(), suite_dir=None)
    store.save(measurement(), suite_dir=None, new_segment=False, status="suspect")
    result = store.save(measurement(), suite_dir=None, new_segment=False, status="refused")
    history = read_history(result.path)
    assert [r.status for r in history.runs] == ["accepted", "suspect", "refused"]


def test_a_run_status_nobody_wrote_is_refused_by_name(store: FileStore) -> None:
    data = stored_dict(store)
    data["runs"][0]["status"] = "rejected"
    path = write_raw(store, json.dumps(data))
    with pytest.raises(StoreError, match="status must be one of accepted, suspect, refused, got 'rejected'"):
        read_history(path)
