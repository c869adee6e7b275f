"""The file store: one reviewable JSON file per (server, workload, concurrency), in a directory.

The layout and the documents are store/records.py's: ``<store>/<server>/<workload>-c<level>.json``
for a real engine, ``<store>/sim/<server>/...`` for the simulator.

Writes are atomic (temp file in the same directory, fsync, `os.replace`) and serialised by one
lock file per store, `<store>/.specperf.lock`. A store-wide lock is enough: saves are rare (once
per measurement under `--specperf-update` or `--specperf-record`) and short, and one lock also
covers creating directories. The lock file stays (filelock leaves it), so the first save also
writes `<store>/.gitignore` naming it and stray temp files, unless a `.gitignore` is already there.
Readers take no lock: `os.replace` means they see the old or the new file, never half of one.

The git store (store/git.py) keeps this same layout in a work tree of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import filelock

import pytest_specperf
from pytest_specperf.errors import StoreError
from pytest_specperf.jsonfile import atomic_write, safe_name
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.store.records import (
    DEFAULT_HISTORY,
    SCHEMA_VERSION,
    NewerSchemaError,
    Provenance,
    SaveResult,
    StoredBaseline,
    StoredRun,
    accepted_from,
    document,
    dumps,
    is_simulated,
    kept_runs,
    new_run,
    read_baseline,
)

LOCK_NAME = ".specperf.lock"
#: The folder under the store that holds the simulator's baselines (see the module docstring).
SIM_DIR = "sim"
LOCK_TIMEOUT_S = 120.0
GITIGNORE = f"# written by pytest-specperf: its lock and interrupted writes\n{LOCK_NAME}\n.*.tmp\n"


class FileStore:
    """Stored histories under `root`. Cheap to create: nothing is touched until used.

    `simulated` selects the layer: the simulator's baselines under ``<root>/sim/``, a real engine's
    directly under `root` (see the module docstring). Nothing to fetch or publish: `prepare`,
    `publish` and `close` do nothing.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def location(self) -> str:
        return str(self.root)

    @property
    def title(self) -> str:
        """The suite's folder: the parent of a hidden store (`example_suite/.specperf`), else the store's own."""
        root = self.root.resolve()
        return (root.parent.name if root.name.startswith(".") else root.name) or str(root)

    def prepare(self) -> list[str]:
        return []

    def publish(self) -> list[str]:
        return []

    def publish_files(self, write: Callable[[Path], str]) -> list[str]:
        raise StoreError(
            f"{self.location} is a folder store: publishing writes onto a git store's branch (git:<branch>); "
            "write the pages with -o and serve that folder"
        )

    def close(self) -> None:
        return None

    def path_for(self, key: MeasurementKey, *, simulated: bool = False) -> Path:
        filename = f"{safe_name(key.workload)}-c{int(key.concurrency)}.json"
        return (self.root / SIM_DIR if simulated else self.root) / safe_name(key.server) / filename

    def load(self, key: MeasurementKey, *, simulated: bool = False) -> StoredBaseline | None:
        """The baseline for `key` in the simulator's or the real layer, None when there is none;
        StoreError when it is unreadable. A simulator's baseline at the pre-``sim/`` place counts
        for the simulator's layer only."""
        path = self.path_for(key, simulated=simulated)
        if not path.exists():
            if not simulated:
                return None
            legacy = self._legacy_simulated(key)
            if legacy is None:
                return None
            baseline = legacy
        else:
            baseline = read_baseline(path)
            if not simulated and is_simulated(baseline.fingerprint):
                return None  # a simulator's baseline from before the sim/ level: never a real one's
        if baseline.measurement.key != key:
            raise StoreError(
                f"{baseline.path}: holds the baseline of {baseline.measurement.key.label}, "
                f"not {key.label} (names that differ only in case on a case-insensitive file system?)"
            )
        return baseline

    def _legacy_simulated(self, key: MeasurementKey) -> StoredBaseline | None:
        """A simulator's baseline stored before the ``sim/`` level existed (at the real layer's path)."""
        path = self.path_for(key)
        if not path.exists():
            return None
        baseline = read_baseline(path)
        return baseline if is_simulated(baseline.fingerprint) else None

    def entries(self) -> list[StoredBaseline]:
        """Every stored baseline (both layers), sorted by path; StoreError on the first unreadable file."""
        if not self.root.is_dir():
            return []
        paths = [*self.root.glob("*/*.json"), *(self.root / SIM_DIR).glob("*/*.json")]
        return [read_baseline(p) for p in sorted(p for p in paths if not p.name.startswith("."))]

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
        """Append `measurement` to the history of its key, as a new segment or into the current one.

        `session` (the pytest session's id) pairs this run with the other servers' runs of the same
        session; `suite_dir` is where the suite's git commit is read from. See `append`.
        """
        run = new_run(measurement, suite_dir=suite_dir, session=session, status=status)
        return self.append(run, new_segment=new_segment, history=history)

    def append(self, run: StoredRun, *, new_segment: bool = True, history: int = DEFAULT_HISTORY) -> SaveResult:
        """Append a built run to the history of its key; a run whose id the history holds is not added again.

        The run is serialised before the lock is taken, so a failure there leaves the store
        untouched; reading the old history, appending and writing happen under the lock, so two jobs
        appending at once both land. A previous file that is corrupt is moved aside
        (`SaveResult.kept_as`; `replaced_error` says why), never silently overwritten; one of a newer
        schema_version is refused: a newer pytest-specperf wrote it, and rewriting it in this version's
        schema would lose data. A store that cannot be written is one StoreError line.
        """
        if history < 1:
            raise ValueError(f"history must keep at least 1 run, got {history}")
        dumps({"run": run.to_dict()})  # fail before touching the store
        key = run.measurement.key
        path = self.path_for(key, simulated=is_simulated(run.fingerprint))
        try:
            with self._locked():
                self._move_legacy_simulated(key)
                previous, error = _old_history(path)
                runs = list(previous.runs) if previous else []
                held = [r for r in runs if run.provenance.run_id and r.provenance.run_id == run.provenance.run_id]
                if held:  # appended before (a retried publish): kept once
                    return SaveResult(
                        path,
                        previous.summary if previous else None,
                        run.summary,
                        segment=held[0].segment,
                        runs=len(runs),
                        new_segment=new_segment,
                    )
                kept = _move_aside(path, "unreadable") if error else None
                segment = (runs[-1].segment + (1 if new_segment else 0)) if runs else 0
                runs.append(dataclasses.replace(run, segment=segment))
                runs = newest_nights(runs, history)
                atomic_write(path, dumps(document(runs)))
                if not (self.root / ".gitignore").exists():
                    atomic_write(self.root / ".gitignore", GITIGNORE)
        except OSError as exc:
            raise StoreError(
                f"{path}: cannot write the baseline ({exc.strerror or exc}"
                + (f": {exc.filename}" if exc.filename and str(exc.filename) != str(path) else "")
                + f"); {_advice(exc, self.root)}"
            ) from None
        old = previous.summary if previous else None
        return SaveResult(
            path=path,
            old=old,
            new=run.summary,
            replaced_error=error,
            kept_as=kept,
            segment=segment,
            runs=len(runs),
            new_segment=new_segment or previous is None,
        )

    def accept(self, path: Path, first: Provenance, acceptance: str) -> list[str]:
        """Make the history at `path` accepted from its run `first` on (`records.accepted_from`), under
        the lock, re-read: a run appended meanwhile joins the new level too. StoreError when the run
        is no longer there (trimmed since it was read) or cannot be accepted."""
        try:
            with self._locked():
                history = read_baseline(path)
                runs = list(history.runs)
                index = next((i for i, r in enumerate(runs) if r.provenance == first), None)
                if index is None:
                    gone = f"the run of {first.created} is no longer in the history"
                    raise StoreError(f"{path}: {gone}; nothing accepted")
                try:
                    runs = accepted_from(runs, index, acceptance)
                except ValueError as exc:
                    raise StoreError(f"{path}: {exc}; nothing accepted") from None
                atomic_write(path, dumps(document(runs)))
        except OSError as exc:
            why = exc.strerror or exc
            raise StoreError(f"{path}: cannot write the baseline ({why}); {_advice(exc, self.root)}") from None
        return []

    def _move_legacy_simulated(self, key: MeasurementKey) -> None:
        """Under the lock: a simulator's history at the real layer's path moves under ``sim/`` (or aside,
        when ``sim/`` already has one), so neither layer ever appends to the other's file."""
        legacy = self.path_for(key)
        try:
            baseline = read_baseline(legacy) if legacy.exists() else None
        except StoreError:
            return  # unreadable: `save` of a real run moves it aside and says so
        if baseline is None or not is_simulated(baseline.fingerprint):
            return
        target = self.path_for(key, simulated=True)
        if target.exists():
            _move_aside(legacy, "simulated")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(legacy, target)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        lock_path = self.root / LOCK_NAME
        try:
            with filelock.FileLock(lock_path, timeout=LOCK_TIMEOUT_S):
                yield
        except filelock.Timeout as exc:
            raise StoreError(
                f"{lock_path}: still locked after {LOCK_TIMEOUT_S:.0f} s; another pytest-specperf "
                "process is writing this store (or died holding the lock on a network file system)"
            ) from exc


def newest_nights(runs: list[StoredRun], nights: int) -> list[StoredRun]:
    """The runs of the newest `nights` nights, and the current segment's newest accepted runs before
    them (`records.kept_runs`): a night is a session (its runs share the session id: a second server
    start adds a run, not a night); a run without a session id is a night of its own."""
    segment = runs[-1].segment if runs else 0
    return kept_runs(
        runs,
        nights,
        night_of=lambda r: r.provenance.session or None,
        counted=lambda r: r.segment == segment and r.status == "accepted",
    )


def _move_aside(path: Path, why: str) -> Path:
    """Rename a file that is about to be replaced to `<name>.<why>-<UTC time>`: kept, out of the way.

    The new name does not end in `.json`, so the store no longer reads it, and it says why it is there.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.{why}-{stamp}")
    os.replace(path, target)
    return target


def _old_history(path: Path) -> tuple[StoredBaseline | None, str | None]:
    """The history about to be appended to; an unreadable one is reported (and moved aside), not fatal."""
    if not path.exists():
        return None, None
    try:
        return read_baseline(path), None
    except NewerSchemaError as exc:
        raise StoreError(
            f"{path}: refusing to overwrite a baseline of schema_version {exc.version}, newer than this "
            f"pytest-specperf ({pytest_specperf.__version__}) writes (schema_version {SCHEMA_VERSION}): a newer "
            "pytest-specperf stored it and downgrading it would lose data; upgrade pytest-specperf "
            "(or delete the file to start a new baseline with this version)"
        ) from None
    except StoreError as exc:
        return None, str(exc)


def _advice(exc: OSError, root: Path) -> str:
    """What fixes this error: a full disk is not a read-only one, and neither is a file in the way."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        full = "the user's disk quota is used up" if exc.errno == errno.EDQUOT else "the disk is full"
        return f"{full}: free space where {root} is, or point `store` (config) at a directory on another disk"
    if exc.errno == errno.EROFS:
        return f"{root} is on a read-only file system: point `store` (config) at a writable directory"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"give this user write permission on {root}, or point `store` (config) at a writable directory"
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        return f"a file stands where the store's folder {root} (or one below it) should be: move it away"
    return f"make the store {root} writable, or point `store` (config) at a writable directory"
