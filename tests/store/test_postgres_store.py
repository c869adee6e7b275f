"""The PostgreSQL store against a real server (`.ci/postgres up` starts one; SPECPERF_POSTGRES_URL names it).

Shards appending at once lose nothing, a night interrupted mid-write leaves nothing half-written, an
unreachable server fails before any engine starts, and credentials are never in a URL nor in any output.
Skipped with the reason when no server is reachable, unless SPECPERF_REQUIRE_POSTGRES=1 (CI), where that
is a failure.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pytest_specperf.store.compact as compact_module
import pytest_specperf.store.postgres as postgres_module
from pytest_specperf.cli import main as specperf
from pytest_specperf.config.location import StoreLocation
from pytest_specperf.errors import ConfigError, StoreError
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.store import open_store
from pytest_specperf.store.file import verdict_window
from pytest_specperf.store.postgres import PostgresStore
from pytest_specperf.store.records import LEVEL_RUNS, VERDICT_NIGHTS, new_run

psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL store needs psycopg: pip install -e '.[postgresql]'")

NIGHT = Path(__file__).parents[1] / "data" / "real-nights" / "sglang-cpu-spec" / "night1-report.json"
REQUIRED = os.environ.get("SPECPERF_REQUIRE_POSTGRES") == "1"
SECRET = "pg-secret-Hunter2-7f3a"


def server_url() -> str:
    url = os.environ.get("SPECPERF_POSTGRES_URL", "")
    why = None
    if not url:
        why = 'SPECPERF_POSTGRES_URL is not set (start a server: eval "$(bash .ci/postgres up)")'
    else:
        try:
            psycopg.connect(url, connect_timeout=5).close()
        except psycopg.Error as exc:
            why = f"no PostgreSQL server reachable at {url} ({str(exc).splitlines()[0]})"
    if why is not None:
        if REQUIRED:
            pytest.fail(f"SPECPERF_REQUIRE_POSTGRES=1 but {why}")
        pytest.skip(why)
    return url


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh database on the server, dropped afterwards: its libpq URL."""
    url = server_url()
    name = f"specperf_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def opened(url: str) -> PostgresStore:
    store = open_store(StoreLocation.parse(url, base=Path.cwd(), where="store"))
    assert isinstance(store, PostgresStore)
    store.prepare()
    return store


def night(server: str = "ngram") -> Measurement:
    report = json.loads(NIGHT.read_text())
    row = next(m for m in report["measurements"] if m["server"] == server)
    return Measurement.from_dict(row, fingerprint=Fingerprint.from_dict(row["fingerprint"]))


def test_a_history_round_trips_and_appends(database: str) -> None:
    store = opened(database)
    first = store.save(night(), suite_dir=None, session="s1")
    second = store.save(night(), suite_dir=None, new_segment=False, session="s2")
    third = store.save(night(), suite_dir=None, new_segment=False, session="s3")
    assert (first.runs, second.runs, third.runs) == (1, 2, 3)
    assert second.old is not None and second.old.output_throughput == pytest.approx(
        first.new.output_throughput, rel=1e-5
    )
    loaded = store.load(night().key)
    assert loaded is not None and [r.segment for r in loaded.runs] == [0, 0, 0]
    assert loaded.runs[-1].measurement.records == night().records  # the newest run's records
    assert loaded.fingerprint == night().fingerprint
    assert [e.measurement.key for e in store.entries()] == [night().key]
    store.accept(loaded.path, loaded.runs[1].provenance, "accepted by a test")
    accepted = opened(database).load(night().key)
    assert accepted is not None and [r.segment for r in accepted.runs] == [0, 1, 1]
    assert accepted.runs[1].acceptance == "accepted by a test"
    again = store.append(loaded.runs[-1], new_segment=False)  # a run the history holds: kept once
    assert again.runs == 3
    store.close()


def _shard(url: str, shard: int, nights: int) -> None:
    store = opened(url)
    base = night()
    for n in range(nights):
        own = dataclasses.replace(base, key=MeasurementKey(f"shard-{shard}", "code", 1))
        store.save(own, suite_dir=None, new_segment=n == 0, session=f"shard-{shard}-{n}")
        shared = dataclasses.replace(base, key=MeasurementKey("shared", "code", 1))
        store.save(shared, suite_dir=None, new_segment=False, session=f"shard-{shard}-{n}")
    store.close()


def test_eight_shards_appending_at_once_lose_nothing(database: str) -> None:
    opened(database).close()  # the tables, made once (as a session's prepare makes them)
    shards, nights = 8, 5
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_shard, args=(database, s, nights)) for s in range(shards)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    assert [p.exitcode for p in processes] == [0] * shards
    store = opened(database)
    histories = {e.measurement.key.server: e for e in store.entries()}
    assert len(histories) == shards + 1
    assert all(len(histories[f"shard-{s}"].runs) == nights for s in range(shards))
    shared = histories["shared"].runs
    assert len(shared) == shards * nights and len({r.provenance.run_id for r in shared}) == shards * nights
    assert {r.segment for r in shared} == {0}
    store.close()


def test_a_night_interrupted_mid_write_leaves_nothing_half_written(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = opened(database)
    store.save(night(), suite_dir=None, session="s1")

    def dies(*args: object) -> None:
        raise KeyboardInterrupt  # the job is killed after the run's row, before the records and the commit

    monkeypatch.setattr(PostgresStore, "_write_records", staticmethod(dies))
    with pytest.raises(KeyboardInterrupt):
        store.save(night(), suite_dir=None, new_segment=False, session="s2")
    monkeypatch.undo()
    fresh = opened(database)
    loaded = fresh.load(night().key)
    assert loaded is not None and [r.provenance.session for r in loaded.runs] == ["s1"]
    assert loaded.runs[-1].measurement.records == night().records  # the records still the first night's
    fresh.close()


def test_an_unreachable_server_fails_before_anything_is_measured(tmp_path: Path) -> None:
    store = open_store(StoreLocation.parse("postgresql://127.0.0.1:1/x", base=tmp_path, where="store"))
    with pytest.raises(StoreError, match=r"postgresql://127\.0\.0\.1:1/x: cannot connect \(.*\); nothing was measured"):
        store.prepare()


def test_a_password_in_the_url_is_refused_and_never_repeated(tmp_path: Path) -> None:
    for url in (
        f"postgresql://perf:{SECRET}@db.example.com/perf",
        f"postgresql://db.example.com/perf?password={SECRET}",
    ):
        with pytest.raises(ConfigError) as refused:
            StoreLocation.parse(url, base=tmp_path, where="specperf.toml [specperf] store")
        assert "carries a password" in str(refused.value) and "PGPASSWORD" in str(refused.value)
        assert SECRET not in str(refused.value)


def test_credentials_from_the_environment_are_never_in_any_output(
    database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """libpq reads PGPASSWORD; neither an error nor a stored run nor `specperf history` repeats it."""
    monkeypatch.setenv("PGPASSWORD", SECRET)
    store = opened(database)
    store.save(night(), suite_dir=None, session="s1")
    from pytest_specperf.cli import main as specperf

    assert specperf(["history", "--store", database]) == 0
    wrong = database.replace("//specperf@", "//nobody@")
    with pytest.raises(StoreError) as failed:
        opened(wrong)
    out = capsys.readouterr()
    with psycopg.connect(database) as connection:
        rows = " ".join(str(r) for r in connection.execute("SELECT line FROM specperf_runs").fetchall())
    for text in (out.out, out.err, str(failed.value), rows, store.location):
        assert SECRET not in text
    store.close()


def test_a_session_whose_store_is_unreachable_is_a_usage_error_before_any_server_starts(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".toml", specperf='[specperf]\nstore = "postgresql://127.0.0.1:1/x"\nlauncher = "sim"\n')
    pytester.makepyfile(
        test_perf="""
        import pytest

        @pytest.mark.specperf(server="plain")
        def test_perf(specperf):
            pass
        """
    )
    result = pytester.runpytest("--specperf-record", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    assert "pytest-specperf: store: postgresql://127.0.0.1:1/x: cannot connect" in text, text
    assert "nothing was measured" in text and "Traceback" not in text
    assert "starting" not in text.lower()


def test_a_sessions_read_decodes_only_the_verdicts_window(database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key of 130 nights: `load` decodes the window (the newest 90 nights and the level's first runs),
    the same runs a read of the whole history would keep; `entries` still gives every night."""
    store = opened(database)
    base = night()
    run = new_run(base, suite_dir=None)
    for n in range(130):
        provenance = dataclasses.replace(run.provenance, session=f"night-{n}", run_id=f"run-{n}")
        store.append(dataclasses.replace(run, provenance=provenance), new_segment=n == 0)
    decoded: list[object] = []
    for module in (compact_module, postgres_module):
        original = module.read_line

        def counted(data: dict[str, object], documents: object, _original: object = original) -> object:
            decoded.append(data)
            return _original(data, documents)  # type: ignore[operator]

        monkeypatch.setattr(module, "read_line", counted)
    window = store.load(base.key)
    monkeypatch.undo()
    assert window is not None and len(decoded) == len(window.runs) == LEVEL_RUNS + VERDICT_NIGHTS
    [whole] = store.entries()
    assert [r.provenance for r in window.runs] == [r.provenance for r in verdict_window(whole).runs]
    store.close()


def test_history_of_one_workload_reads_its_keys_and_their_reference_only(
    database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`specperf history ngram/code` on a database of many keys reads ngram's and plain's histories of
    that workload, and says what it said when it read every history."""
    store = opened(database)
    for server in ("plain", "ngram"):
        for workload in ("code", "chat", "math"):
            measured = dataclasses.replace(night(server), key=MeasurementKey(server, workload, 1))
            store.save(measured, suite_dir=None, session=f"s-{workload}")
    store.close()
    read: list[tuple[str, str]] = []
    original = PostgresStore._history

    def counted(self: PostgresStore, key: Any, **kwargs: Any) -> Any:
        read.append((key.server, key.workload))
        return original(self, key, **kwargs)

    monkeypatch.setattr(PostgresStore, "_history", counted)
    assert specperf(["history", "ngram/code", "--store", database]) == 0
    selected = capsys.readouterr().out
    assert sorted(read) == [("ngram", "code"), ("plain", "code")]
    assert "speedup over plain" in selected
    monkeypatch.delattr(PostgresStore, "histories_of")
    assert specperf(["history", "ngram/code", "--store", database]) == 0
    assert capsys.readouterr().out == selected


def test_the_newest_run_of_a_key_is_found_by_its_index_in_a_database_made_before_it(database: str) -> None:
    """A night's append reads each key's newest row: by an index on the key and the row's order, not a
    walk back through every other key's rows (a year of 1,000 keys). A database whose tables an earlier
    release made gets the index when a session prepares it."""
    store = opened(database)
    store.save(night(), suite_dir=None, session="s1")
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("DROP INDEX specperf_runs_by_key")  # the tables as the release before made them
    store.close()
    store = opened(database)
    with psycopg.connect(database) as connection:
        found = connection.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'specperf_runs' AND indexname = 'specperf_runs_by_key'"
        ).fetchone()
    assert found is not None and "(layer, server, workload, concurrency, id)" in found[0]
    assert store.load(night().key) is not None
    store.close()
