"""The PostgreSQL store: histories in a database a team shares (``store = "postgresql://host/db"``).

Why: a team with many suites and years of nights outgrows a branch; a database is written by every
shard at once without a merge, answers SQL, and keeps a year of 1,000 keys without a file per key.

What it keeps is the append-only layout's (store/compact.py), row for row: a run is its line (the same
JSON), the documents nights share (fingerprints, setups) are rows named by their digest, and the newest
run's per-request records are one row per key. The schema is versioned (`SCHEMA`, table
``specperf_meta``): a newer one is refused, never downgraded.

* `prepare` (before any server starts) connects and creates the tables if they are not there: an
  unreachable server is a `StoreError` then, nothing measured.
* `append` is one transaction: the key's advisory lock, the documents, the run, the records; a night
  interrupted mid-write leaves nothing half-written, and shards appending at once each land whole. A run
  whose id the history holds is not added again.
* `load`, `entries`: the runs of a key, oldest first (for `load` only the verdict's window is decoded);
  `histories_of` the selected keys and their reference's, for `specperf history`. A key's rows are found
  in their order by the index ``specperf_runs_by_key`` (made by `prepare`, also on a database an earlier
  release made): without it, an append's look for the key's newest row walks a year of 1,000 keys.

Credentials come only from libpq's own conventions (PGUSER, PGPASSWORD, ~/.pgpass, a service file):
config/location.py refuses a URL that carries a password, and nothing here prints the connection
string with one. psycopg 3 is an optional dependency (``pip install 'pytest-specperf[postgresql]'``):
it is imported when a PostgreSQL store is prepared, never by pytest-specperf's core.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_specperf.common.redact import redact_text
from pytest_specperf.config.location import StoreLocation
from pytest_specperf.errors import StoreError
from pytest_specperf.measure.records import Measurement, MeasurementKey, RequestRecord
from pytest_specperf.store.compact import (
    LAYOUT,
    LOG_SUFFIX,
    SETUPS_DIR,
    Documents,
    compact_json,
    encode_run,
    read_line,
    read_lines,
    records_document,
    run_ident,
)
from pytest_specperf.store.file import SIM_DIR, newest_nights, verdict_window
from pytest_specperf.store.records import (
    DEFAULT_HISTORY,
    VERDICT_NIGHTS,
    Provenance,
    SaveResult,
    StoredBaseline,
    StoredRun,
    accepted_from,
    is_simulated,
    new_run,
)

#: The schema this version writes; a database of a newer one is refused.
SCHEMA = 1
CONNECT_TIMEOUT_S = 10
INSTALL = "pip install 'pytest-specperf[postgresql]'"

TABLES = """
CREATE TABLE IF NOT EXISTS specperf_meta (name text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS specperf_documents (
    kind text NOT NULL, digest text NOT NULL, body text NOT NULL, PRIMARY KEY (kind, digest));
CREATE TABLE IF NOT EXISTS specperf_runs (
    id bigserial PRIMARY KEY,
    layer text NOT NULL, server text NOT NULL, workload text NOT NULL, concurrency integer NOT NULL,
    run text NOT NULL, segment integer NOT NULL, line text NOT NULL,
    UNIQUE (layer, server, workload, concurrency, run));
CREATE INDEX IF NOT EXISTS specperf_runs_by_key ON specperf_runs (layer, server, workload, concurrency, id);
CREATE TABLE IF NOT EXISTS specperf_records (
    layer text NOT NULL, server text NOT NULL, workload text NOT NULL, concurrency integer NOT NULL,
    run text NOT NULL, body text NOT NULL, PRIMARY KEY (layer, server, workload, concurrency));
"""
#: Every key of the runs table, one index probe a key (a "loose index scan" of specperf_runs_by_key).
KEYS = """
WITH RECURSIVE keys AS (
    (SELECT layer, server, workload, concurrency FROM specperf_runs
     ORDER BY layer, server, workload, concurrency LIMIT 1)
    UNION ALL
    SELECT next.* FROM keys CROSS JOIN LATERAL (
        SELECT r.layer, r.server, r.workload, r.concurrency FROM specperf_runs r
        WHERE (r.layer, r.server, r.workload, r.concurrency)
            > (keys.layer, keys.server, keys.workload, keys.concurrency)
        ORDER BY r.layer, r.server, r.workload, r.concurrency LIMIT 1) next
)
SELECT layer, server, workload, concurrency FROM keys
"""
#: The newest line of each given key, in the keys' order (the four arrays are the keys' columns).
NEWEST_LINES = """
SELECT (SELECT r.line FROM specperf_runs r
        WHERE (r.layer, r.server, r.workload, r.concurrency) = (k.layer, k.server, k.workload, k.concurrency)
        ORDER BY r.id DESC LIMIT 1)
FROM unnest(%s::text[], %s::text[], %s::text[], %s::integer[])
    WITH ORDINALITY AS k(layer, server, workload, concurrency, n)
ORDER BY k.n
"""


@dataclasses.dataclass(frozen=True)
class _Key:
    """A history's row key: its layer ("" or "sim") and its measurement key."""

    layer: str
    server: str
    workload: str
    concurrency: int

    @classmethod
    def of(cls, key: MeasurementKey, *, simulated: bool) -> _Key:
        return cls(SIM_DIR if simulated else "", key.server, key.workload, int(key.concurrency))

    @property
    def params(self) -> tuple[str, str, str, int]:
        return (self.layer, self.server, self.workload, self.concurrency)


class _DatabaseDocuments(Documents):
    """The shared documents, read from the database (each once)."""

    def __init__(self, fetch: Callable[[str, str], str | None]) -> None:
        super().__init__(Path("."))
        self._fetch = fetch

    def get(self, kind: str, digest: object) -> Any:
        if not isinstance(digest, str) or not digest.isalnum():
            raise ValueError(f"bad {kind} digest {digest!r}")
        if (kind, digest) not in self._read:
            body = self._fetch(kind, digest)
            if body is None:
                raise ValueError(f"its {kind} document {digest} is missing")
            self._read[kind, digest] = json.loads(body)
        return self._read[kind, digest]


class PostgresStore:
    """Histories in the database `location.database` names (a libpq URL without a password)."""

    def __init__(self, location: StoreLocation, *, work_dir: Path | None = None, follower: bool = False) -> None:
        if location.database is None:
            raise ValueError(f"not a PostgreSQL store: {location}")
        self.spec = location
        self.dsn = location.database
        self._connection: Any = None
        self._root = Path(work_dir) if work_dir is not None else Path(tempfile.gettempdir()) / "specperf-postgresql"
        self.documents = _DatabaseDocuments(self._document)

    @property
    def location(self) -> str:
        return str(self.spec)

    @property
    def title(self) -> str:
        return self.dsn.rstrip("/").rsplit("/", 1)[-1] or self.location

    @property
    def root(self) -> Path:
        """Where a history's name points (`StoredBaseline.path`): nothing is read from or written there."""
        return self._root

    # ---- connecting -----------------------------------------------------------------------------

    def prepare(self) -> list[str]:
        """Connect and make the tables (schema `SCHEMA`) if they are not there; StoreError when the server
        cannot be reached, refuses the credentials libpq found, or holds a newer schema."""
        if self._connection is not None:
            return []
        try:
            import psycopg
        except ImportError:
            raise StoreError(
                f"{self.location}: a PostgreSQL store needs psycopg 3, which is not installed: {INSTALL}"
            ) from None
        try:
            self._connection = psycopg.connect(self.dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=False)
        except psycopg.Error as exc:
            raise StoreError(
                f"{self.location}: cannot connect ({_reason(exc)}); nothing was measured. Check that the server "
                "runs and that libpq finds the credentials (PGUSER, PGPASSWORD, ~/.pgpass or a service file)"
            ) from None
        try:
            with self._transaction() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext('specperf schema'))")
                cursor.execute(TABLES)
                cursor.execute("SELECT value FROM specperf_meta WHERE name = 'schema_version'")
                row = cursor.fetchone()
                if row is None:
                    cursor.execute("INSERT INTO specperf_meta VALUES ('schema_version', %s)", (str(SCHEMA),))
                elif int(row[0]) > SCHEMA:
                    raise StoreError(
                        f"{self.location}: the database holds schema {row[0]}, newer than this pytest-specperf "
                        f"writes (schema {SCHEMA}); upgrade pytest-specperf"
                    )
        except StoreError:
            self.close()
            raise
        return []

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def check_writable(self) -> None:
        """The tables accept this user's rows (a read-only role is found before any server starts)."""
        self.prepare()
        with self._transaction() as cursor:
            cursor.execute(
                "SELECT bool_and(has_table_privilege(current_user, t, 'INSERT')) FROM unnest(%s::text[]) AS t",
                (["specperf_documents", "specperf_runs", "specperf_records"],),
            )
            row = cursor.fetchone()
        if not row or not row[0]:
            raise StoreError(
                f"{self.location}: this database user may not write the histories; nothing was measured. Grant "
                "INSERT and UPDATE on the specperf_* tables, or record with a user that may"
            )

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """One transaction: committed when the block ends, rolled back (nothing written) when it raises."""
        import psycopg

        if self._connection is None:
            self.prepare()
        try:
            with self._connection.transaction(), self._connection.cursor() as cursor:
                yield cursor
        except psycopg.Error as exc:
            raise StoreError(f"{self.location}: {_reason(exc)}; nothing was written") from None

    def _document(self, kind: str, digest: str) -> str | None:
        with self._connection.cursor() as cursor:
            cursor.execute("SELECT body FROM specperf_documents WHERE kind = %s AND digest = %s", (kind, digest))
            row = cursor.fetchone()
        return None if row is None else str(row[0])

    # ---- reading --------------------------------------------------------------------------------

    def path_for(self, key: MeasurementKey, *, simulated: bool = False) -> Path:
        folder = self.root / SIM_DIR if simulated else self.root
        return folder / key.server / f"{key.workload}-c{int(key.concurrency)}{LOG_SUFFIX}"

    def load(self, key: MeasurementKey, *, simulated: bool = False) -> StoredBaseline | None:
        """The verdict's window of the key's history (`verdict_window`): only its runs are decoded."""
        self.prepare()
        history = self._history(_Key.of(key, simulated=simulated), nights=VERDICT_NIGHTS)
        return None if history is None else verdict_window(history)

    def entries(self) -> list[StoredBaseline]:
        self.prepare()
        histories = [self._history(key) for key in self._keys()]
        return sorted((h for h in histories if h is not None), key=lambda h: str(h.path))

    def histories_of(self, server: str = "", workload: str = "") -> list[StoredBaseline]:
        """The whole histories of `server` on `workload` ("": any) and the reference histories of the same
        workloads and levels they pair with, as `FileStore.histories_of`: what `specperf history
        SERVER/WORKLOAD` shows, without reading every history of the database. Another key is told a
        reference by its newest run alone."""
        self.prepare()
        keys = self._keys()
        wanted = [k for k in keys if server in ("", k.server) and workload in ("", k.workload)]
        stems = {(k.layer, k.workload, k.concurrency) for k in wanted}
        paired = [k for k in keys if k not in wanted and (k.layer, k.workload, k.concurrency) in stems]
        others = [k for k, line in zip(paired, self._newest_lines(paired), strict=True) if self._is_reference(line)]
        histories = [self._history(key) for key in [*wanted, *others]]
        return sorted((h for h in histories if h is not None), key=lambda h: str(h.path))

    def _keys(self) -> list[_Key]:
        """Every key with a run: a walk down the key's index, one step a key (`SELECT DISTINCT` would read
        every run of every key, a year of nights of a thousand keys for a thousand names)."""
        with self._transaction() as cursor:
            cursor.execute(KEYS)
            return [_Key(*row) for row in cursor.fetchall()]

    def _newest_lines(self, keys: list[_Key]) -> list[str | None]:
        """The newest line of each key, in one query: which of them is a reference."""
        if not keys:
            return []
        columns = [list(column) for column in zip(*(key.params for key in keys), strict=True)]
        with self._transaction() as cursor:
            cursor.execute(NEWEST_LINES, columns)
            return [row[0] for row in cursor.fetchall()]

    def _is_reference(self, line: str | None) -> bool:
        """Whether a key's newest run is a reference's, told by its setup document alone (its rounds are
        not decoded)."""
        if line is None:
            return False
        try:
            return bool(self.documents.get(SETUPS_DIR, json.loads(line)["run"]["setup"])["is_reference"])
        except (KeyError, TypeError, ValueError):
            return True  # unreadable: read whole, so its error is said as `entries()` would say it

    def _history(self, key: _Key, *, nights: int | None = None) -> StoredBaseline | None:
        """The key's runs, oldest first (with `nights`, the window `compact.read_lines` keeps, the only
        runs decoded), and the newest run's per-request records; StoreError names the run's line."""
        with self._transaction() as cursor:
            cursor.execute(
                "SELECT line FROM specperf_runs WHERE layer = %s AND server = %s AND workload = %s "
                "AND concurrency = %s ORDER BY id",
                key.params,
            )
            lines = [f"{row[0]}\n" for row in cursor.fetchall()]
            cursor.execute(
                "SELECT run, body FROM specperf_records WHERE layer = %s AND server = %s AND workload = %s "
                "AND concurrency = %s",
                key.params,
            )
            records = cursor.fetchone()
        if not lines:
            return None
        path = self.path_for(MeasurementKey(key.server, key.workload, key.concurrency), simulated=bool(key.layer))
        named = Path(f"{self.location}, {path.relative_to(self.root).as_posix()}")
        runs = read_lines(named, lines, self.documents, nights=nights)
        if records is not None and records[0] == run_ident(runs[-1].provenance):
            runs[-1] = _with_records(runs[-1], json.loads(records[1]))
        newest = runs[-1]
        return StoredBaseline(newest.measurement, newest.summary, newest.provenance, path, tuple(runs), LAYOUT)

    # ---- recording ------------------------------------------------------------------------------

    def save(
        self,
        measurement: Measurement,
        *,
        suite_dir: Path | None,
        new_segment: bool = True,
        history: int = DEFAULT_HISTORY,
        session: str | None = None,
        status: str = "accepted",
    ) -> SaveResult:
        run = new_run(measurement, suite_dir=suite_dir, session=session, status=status)
        return self.append(run, new_segment=new_segment, history=history)

    def append(self, run: StoredRun, *, new_segment: bool = True, history: int = DEFAULT_HISTORY) -> SaveResult:
        """One transaction: lock the key, append the run (unless it is there), replace the records."""
        self.prepare()
        encoded = encode_run(run)  # fails before the database is touched; the segment is set in the transaction
        key = _Key.of(run.measurement.key, simulated=is_simulated(run.fingerprint))
        path = self.path_for(run.measurement.key, simulated=bool(key.layer))
        with self._transaction() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (json.dumps(key.params),))
            cursor.execute(
                "SELECT line, (SELECT count(*) FROM specperf_runs WHERE layer = %s AND server = %s AND workload = %s "
                "AND concurrency = %s) FROM specperf_runs WHERE layer = %s AND server = %s AND workload = %s "
                "AND concurrency = %s ORDER BY id DESC LIMIT 1",
                key.params + key.params,
            )
            last = cursor.fetchone()
            previous = read_line(json.loads(last[0]), self.documents) if last else None
            count = int(last[1]) if last else 0
            ident = run_ident(run.provenance)
            cursor.execute(
                "SELECT 1 FROM specperf_runs WHERE layer = %s AND server = %s AND workload = %s AND concurrency = %s "
                "AND run = %s",
                (*key.params, ident),
            )
            if cursor.fetchone() is not None and previous is not None:
                return SaveResult(
                    path, previous.summary, run.summary, segment=previous.segment, runs=count, new_segment=new_segment
                )
            segment = (previous.segment + (1 if new_segment else 0)) if previous else 0
            run = dataclasses.replace(run, segment=segment)
            encoded = encoded.with_segment(segment)
            self._insert_documents(cursor, encoded.documents)
            cursor.execute(
                "INSERT INTO specperf_runs (layer, server, workload, concurrency, run, segment, line) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (*key.params, ident, segment, encoded.line.rstrip("\n")),
            )
            self._write_records(cursor, key, run)
        count += 1
        if history > 0:
            count = self._retain(key, history)
        return SaveResult(
            path=path,
            old=previous.summary if previous else None,
            new=run.summary,
            segment=segment,
            runs=count,
            new_segment=new_segment or previous is None,
        )

    @staticmethod
    def _insert_documents(cursor: Any, documents: dict[str, str]) -> None:
        for relative, text in documents.items():
            kind, _, name = relative.partition("/")
            cursor.execute(
                "INSERT INTO specperf_documents (kind, digest, body) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (kind, name.removesuffix(".json"), text),
            )

    @staticmethod
    def _write_records(cursor: Any, key: _Key, run: StoredRun) -> None:
        cursor.execute(
            "INSERT INTO specperf_records (layer, server, workload, concurrency, run, body) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (layer, server, workload, concurrency) "
            "DO UPDATE SET run = EXCLUDED.run, body = EXCLUDED.body",
            (*key.params, run_ident(run.provenance), compact_json(records_document(run))),
        )

    def _replace(self, key: _Key, runs: list[StoredRun]) -> None:
        """The key's history replaced by `runs` in one transaction (acceptance, retention)."""
        with self._transaction() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (json.dumps(key.params),))
            cursor.execute(
                "DELETE FROM specperf_runs WHERE layer = %s AND server = %s AND workload = %s AND concurrency = %s",
                key.params,
            )
            for run in runs:
                encoded = encode_run(run, exact=True)
                self._insert_documents(cursor, encoded.documents)
                cursor.execute(
                    "INSERT INTO specperf_runs (layer, server, workload, concurrency, run, segment, line) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (*key.params, run_ident(run.provenance), run.segment, encoded.line.rstrip("\n")),
                )

    def _retain(self, key: _Key, nights: int) -> int:
        history = self._history(key)
        runs = list(history.runs) if history else []
        kept = newest_nights(runs, nights)
        if len(kept) < len(runs):
            self._replace(key, kept)
        return len(kept)

    def accept(self, path: Path, first: Provenance, acceptance: str) -> list[str]:
        self.prepare()
        relative = path.relative_to(self.root).parts
        layer = relative[0] if len(relative) == 3 else ""
        server, name = relative[-2], relative[-1].removesuffix(LOG_SUFFIX)
        workload, _, level = name.rpartition("-c")
        key = _Key(layer, server, workload, int(level))
        history = self._history(key)
        runs = list(history.runs) if history else []
        index = next((i for i, r in enumerate(runs) if r.provenance == first), None)
        if index is None:
            raise StoreError(
                f"{self.location}, {'/'.join(relative)}: the run of {first.created} is not there; nothing accepted"
            )
        try:
            runs = accepted_from(runs, index, acceptance)
        except ValueError as exc:
            raise StoreError(f"{self.location}, {'/'.join(relative)}: {exc}; nothing accepted") from None
        self._replace(key, runs)
        return []

    def publish(self) -> list[str]:
        return []  # every append committed at once

    def publish_files(self, write: Callable[[Path], str]) -> list[str]:
        raise StoreError(
            f"{self.location} is a PostgreSQL store: publishing writes onto a git store's branch; write the pages "
            "with -o and serve that folder"
        )


def _with_records(run: StoredRun, document: dict[str, Any]) -> StoredRun:
    rounds = [
        dataclasses.replace(r, records=tuple(RequestRecord.from_dict(rec) for rec in recs))
        for r, recs in zip(run.measurement.rounds, document["rounds"], strict=True)
    ]
    return dataclasses.replace(run, measurement=dataclasses.replace(run.measurement, rounds=rounds))


def _reason(exc: Exception) -> str:
    """libpq's first line of `exc`, redacted (it names hosts and users, never a password it was not given)."""
    text = str(exc).strip().splitlines()
    return redact_text(text[0] if text else type(exc).__name__)
