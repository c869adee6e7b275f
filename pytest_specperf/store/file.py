"""The file store: one append-only history per (server, workload, concurrency), in a directory.

The layout and the lines are store/compact.py's (layout 3): ``<store>/<server>/<workload>-c<level>.jsonl``
for a real engine, ``<store>/sim/<server>/...`` for the simulator, fingerprints once each under
``<store>/fingerprints/``. A night appends one line per run to its key's file: no earlier night is
rewritten, so a store kept in git grows by about tonight's data. After its first 32 nights a history
goes on in parts of 32 lines whose names end with the key's tag (store/parts.py): a night writes a
small file, and git pairs it with its previous version.

Stores written before layout 3 (one ``.json`` file per key, store/records.py) are read as they are; the
first write converts the whole store losslessly (`migrate`; also ``specperf store migrate``), and
`publish` says so once. A read-only session never changes them.

Writes are serialised by one lock file per store, `<store>/.specperf.lock`. A store-wide lock is
enough: saves are rare (once per measurement under `--specperf-update` or `--specperf-record`) and
short, and one lock also covers creating directories. The lock file stays (filelock leaves it), so
the first save also writes `<store>/.gitignore` naming it and stray temp files, unless a `.gitignore`
is already there. A line is appended with one write and fsynced; readers take no lock and leave out a
last line without its newline (a write cut short), which the next append removes first.

The git store (store/git.py) keeps this same layout in a work tree of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import filelock

import pytest_specperf
from pytest_specperf.common.jsonfile import atomic_write, safe_name
from pytest_specperf.errors import StoreError
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.store.compact import (
    FINGERPRINTS_DIR,
    LAYOUT,
    LOG_SUFFIX,
    RECORDS_SUFFIX,
    SETUPS_DIR,
    Documents,
    Encoded,
    append_line,
    compact_json,
    encode_run,
    read_line,
    read_log,
    read_tail,
    records_document,
    replace_records,
)
from pytest_specperf.store.parts import (
    PARTS_SUFFIX,
    has_history,
    history_files,
    history_of_parts,
    legacy_records_path,
    next_file,
    parts_dir,
    parts_of,
    records_path,
)
from pytest_specperf.store.records import (
    DEFAULT_HISTORY,
    SCHEMA_VERSION,
    VERDICT_NIGHTS,
    NewerSchemaError,
    Provenance,
    SaveResult,
    StoredBaseline,
    StoredRun,
    accepted_from,
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
#: a history file of the layout before 3: ``<workload>-c<level>.json``
LEGACY_SUFFIX = ".json"


class FileStore:
    """Stored histories under `root`. Cheap to create: nothing is touched until used.

    `simulated` selects the layer: the simulator's baselines under ``<root>/sim/``, a real engine's
    directly under `root` (see the module docstring). Nothing to fetch: `prepare` and `close` do
    nothing; `publish` says what the first write converted, if anything.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.documents = Documents(self.root)
        self._migrated = False
        self._notes: list[str] = []

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
        return self.notes()

    def notes(self) -> list[str]:
        """What this store did besides appending (a conversion), each said once."""
        notes, self._notes = self._notes, []
        return notes

    def publish_files(self, write: Callable[[Path], str]) -> list[str]:
        raise StoreError(
            f"{self.location} is a folder store: publishing writes onto a git store's branch (git:<branch>); "
            "write the pages with -o and serve that folder"
        )

    def close(self) -> None:
        return None

    def check_writable(self) -> None:
        """The store's folder can be made, locked and written: a file written and removed there (and where
        the shared documents go) under the lock. A folder of one server that is not writable is still
        found by its save (its run is kept for `specperf store`); a store nobody can write is found here."""
        try:
            with self._locked():
                for folder in (self.root, self.root / FINGERPRINTS_DIR, self.root / SETUPS_DIR):
                    probe = folder / f".specperf-writable-{os.getpid()}.tmp"
                    folder.mkdir(parents=True, exist_ok=True)
                    probe.write_bytes(b"")
                    probe.unlink()
                if not (self.root / ".gitignore").exists():
                    atomic_write(self.root / ".gitignore", GITIGNORE)
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            raise StoreError(
                f"{self.root}: cannot write the store ({exc.strerror or exc}{where}); nothing was measured. "
                f"{_advice(exc, self.root)[0].upper()}{_advice(exc, self.root)[1:]}"
            ) from None

    def path_for(self, key: MeasurementKey, *, simulated: bool = False) -> Path:
        return self._stem(key, simulated).with_suffix(LOG_SUFFIX)

    def legacy_path_for(self, key: MeasurementKey, *, simulated: bool = False) -> Path:
        """Where a store written before layout 3 kept the history of `key`."""
        return self._stem(key, simulated).with_suffix(LEGACY_SUFFIX)

    def _stem(self, key: MeasurementKey, simulated: bool) -> Path:
        name = f"{safe_name(key.workload)}-c{int(key.concurrency)}"
        return (self.root / SIM_DIR if simulated else self.root) / safe_name(key.server) / name

    # ---- reading ----------------------------------------------------------------------------

    def load(self, key: MeasurementKey, *, simulated: bool = False) -> StoredBaseline | None:
        """The history of `key` as the verdict reads it (`verdict_window`: the newest `VERDICT_NIGHTS`
        nights and the level they are held against) in the simulator's or the real layer, None when
        there is none; StoreError when it is unreadable. A simulator's baseline at the pre-``sim/`` place
        counts for the simulator's layer only."""
        baseline = self._read(key, simulated=simulated)
        if baseline is None:
            return None
        if baseline.measurement.key != key:
            raise StoreError(
                f"{baseline.path}: holds the baseline of {baseline.measurement.key.label}, "
                f"not {key.label} (names that differ only in case on a case-insensitive file system?)"
            )
        return verdict_window(baseline)

    def _read(self, key: MeasurementKey, *, simulated: bool) -> StoredBaseline | None:
        path = self.path_for(key, simulated=simulated)
        if has_history(path):
            return read_log(path, self.documents, nights=VERDICT_NIGHTS)  # the window alone is decoded
        legacy = self.legacy_path_for(key, simulated=simulated)
        if legacy.exists():
            baseline = read_baseline(legacy)
            if not simulated and is_simulated(baseline.fingerprint):
                return None  # a simulator's baseline from before the sim/ level: never a real one's
            return baseline
        return self._legacy_simulated(key) if simulated else None

    def read(self, path: Path) -> StoredBaseline:
        """The whole history in `path` (either layout)."""
        return read_log(path, self.documents) if path.suffix == LOG_SUFFIX else read_baseline(path)

    def newest(self, path: Path) -> StoredRun:
        """The newest run of the history in `path`, from its last line alone where it can be (a year is not
        decoded for it), else from the whole history (an older layout, a last line cut short)."""
        if path.suffix == LOG_SUFFIX:
            with contextlib.suppress(OSError, IndexError, KeyError, TypeError, ValueError, AttributeError):
                return read_line(json.loads(_last_line(history_files(path)[-1])), self.documents)
        return self.read(path).runs[-1]

    def _legacy_simulated(self, key: MeasurementKey) -> StoredBaseline | None:
        """A simulator's baseline stored before the ``sim/`` level existed (at the real layer's path)."""
        path = self.legacy_path_for(key)
        if not path.exists():
            return None
        baseline = read_baseline(path)
        return baseline if is_simulated(baseline.fingerprint) else None

    def entries(self) -> list[StoredBaseline]:
        """Every stored history, whole (both layers, either layout), sorted by path; StoreError on the
        first unreadable file."""
        return [self.read(p) for p in self.history_paths()]

    def histories_of(self, server: str = "", workload: str = "") -> list[StoredBaseline]:
        """The whole histories of `server` on `workload` ("": any), and the reference histories of the same
        workloads and levels they pair with (`records.reference_history`), in `entries()`' order: what
        `specperf history SERVER/WORKLOAD` shows, read without reading every history of the store. Another
        file is told a reference by its newest line's setup alone."""
        paths = self.history_paths()
        wanted = [p for p in paths if self._names(p, server, workload)]
        stems = {_key_stem(p) for p in wanted}
        others = [p for p in paths if p not in wanted and _key_stem(p) in stems and self._is_reference(p)]
        chosen = set(wanted) | set(others)
        return [self.read(p) for p in paths if p in chosen]

    def _names(self, path: Path, server: str, workload: str) -> bool:
        """Whether the history file `path` may be one of `server` on `workload` (by its names; the caller
        checks the records)."""
        if server and path.parent.name != safe_name(server):
            return False
        return not workload or path.name.startswith(f"{safe_name(workload)}-c")

    def _is_reference(self, path: Path) -> bool:
        if path.suffix != LOG_SUFFIX:
            return self.read(path).measurement.is_reference
        try:
            run = read_line(json.loads(_last_line(history_files(path)[-1])), self.documents)
        except (KeyError, TypeError, ValueError, AttributeError):
            return True  # unreadable: read whole, so its error is said as `entries()` would say it
        return run.measurement.is_reference

    def history_paths(self) -> list[Path]:
        """The histories, sorted: layout 3's (by their names: a history in parts is named by its ``.jsonl``
        path whether or not that file is there), and the older layout's not converted yet."""
        if not self.root.is_dir():
            return []
        found = {p for p in self._found(LOG_SUFFIX) if p.is_file()}
        found |= {history_of_parts(p) for p in self._found(PARTS_SUFFIX) if parts_of(history_of_parts(p))}
        logs = sorted(found)
        stems = {p.with_suffix("") for p in logs}
        legacy = [p for p in self.legacy_paths() if p.with_suffix("") not in stems]
        return sorted(p for p in [*logs, *legacy] if not p.name.startswith("."))

    def _found(self, suffix: str) -> list[Path]:
        """The entries ``<server>/*<suffix>`` of both layers."""
        found = [*self.root.glob(f"*/*{suffix}"), *(self.root / SIM_DIR).glob(f"*/*{suffix}")]
        return [p for p in found if not p.parent.name.endswith(PARTS_SUFFIX)]  # `sim/` may be a server

    def legacy_paths(self) -> list[Path]:
        """History files of the layout before 3 (``<workload>-c<level>.json``)."""
        if not self.root.is_dir():
            return []
        return sorted(
            p
            for p in self._found(LEGACY_SUFFIX)
            if not p.name.startswith(".")
            and not p.name.endswith(RECORDS_SUFFIX)
            and p.parent.name not in (FINGERPRINTS_DIR, SETUPS_DIR)
        )

    # ---- recording --------------------------------------------------------------------------

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
        """Append a built run to the history of its key: one line, nothing before it rewritten; a run
        whose id the history holds is not added again.

        `history` is the retention: 0 (the default) keeps every night; N > 0 keeps the newest N nights
        (and the level: `newest_nights`), rewriting the file when a night falls out. The line is built
        before the lock is taken, so a failure there leaves the store untouched. A previous file that is
        corrupt is moved aside (`SaveResult.kept_as`; `replaced_error` says why), never silently
        overwritten; one of a newer layout is refused. A store that cannot be written is one StoreError
        line. The first append converts a store of the older layout (`migrate`).
        """
        if history < 0:
            raise ValueError(f"history must keep at least 1 night (or 0: all of them), got {history}")
        encoded = encode_run(run)  # fails before the store is touched; the segment is set under the lock
        key = run.measurement.key
        path = self.path_for(key, simulated=is_simulated(run.fingerprint))
        try:
            with self._locked():
                if not self._migrated:
                    self._migrated = True
                    self._notes.extend(self._migrate_locked())
                result = self._append_locked(path, run, encoded, new_segment, history)
                if not (self.root / ".gitignore").exists():
                    atomic_write(self.root / ".gitignore", GITIGNORE)
        except OSError as exc:
            raise StoreError(
                f"{path}: cannot write the baseline ({exc.strerror or exc}"
                + (f": {exc.filename}" if exc.filename and str(exc.filename) != str(path) else "")
                + f"); {_advice(exc, self.root)}"
            ) from None
        return result

    def _append_locked(
        self, path: Path, run: StoredRun, encoded: Encoded, new_segment: bool, history: int
    ) -> SaveResult:
        tail, count, error = read_tail(path, self.documents, run.provenance.run_id)
        if tail is not None and tail.holds:
            held = tail.segment
            return SaveResult(path, tail.summary, run.summary, segment=held, runs=count, new_segment=new_segment)
        kept = _set_aside(path, "unreadable") if error else None
        if kept is not None:
            count = 0
        segment = (tail.segment + (1 if new_segment else 0)) if tail is not None else 0
        run = dataclasses.replace(run, segment=segment)
        encoded = encoded.with_segment(segment)
        self._write_documents(encoded)
        files = history_files(path)
        target = next_file(path, files[-1].read_bytes().count(b"\n") if files else 0)
        _replace_records(path, target != path, compact_json(records_document(run)) + "\n")
        append_line(target, encoded.line)  # the run is stored once this is written
        count += 1
        if history > 0:
            count = self._retain(path, history, count)
        old = tail.summary if tail is not None else None
        return SaveResult(
            path=path,
            old=old,
            new=run.summary,
            replaced_error=error,
            kept_as=kept,
            segment=segment,
            runs=count,
            new_segment=new_segment or tail is None,
        )

    def _retain(self, path: Path, nights: int, count: int) -> int:
        """Retention: keep the newest `nights` nights (and the level) of the history in `path`; the file
        is rewritten only when a night falls out."""
        runs = list(self.read(path).runs)
        kept = newest_nights(runs, nights)
        if len(kept) < len(runs):
            self._rewrite(path, kept)
        return len(kept)

    def _write_documents(self, encoded: Encoded) -> None:
        """The shared documents a line names, each written once (before the line that names it). Looked
        for on every append, not remembered: a git store's work tree is reset to another job's push
        before this session's runs are re-applied, which takes away the documents written before."""
        for relative, text in encoded.documents.items():
            target = self.root / relative
            if not target.exists():
                atomic_write(target, text)

    def _rewrite(self, path: Path, runs: list[StoredRun], *, exact: bool = True) -> None:
        """The history in `path` replaced by `runs` at once (retention, acceptance, conversion): floats
        as they were read, the newest run's records beside them."""
        lines = []
        for run in runs:
            encoded = encode_run(run, exact=exact)
            self._write_documents(encoded)
            lines.append(encoded.line)
        atomic_write(path, "".join(lines))  # every line at once; the parts go after (store/parts.py)
        for part in parts_of(path):
            part.unlink()
        if runs and any(r.records for r in runs[-1].measurement.rounds):
            _replace_records(path, False, compact_json(records_document(runs[-1])) + "\n")
        with contextlib.suppress(OSError):
            parts_dir(path).rmdir()  # when nothing is left in it

    def accept(self, path: Path, first: Provenance, acceptance: str) -> list[str]:
        """Make the history at `path` accepted from its run `first` on (`records.accepted_from`), under
        the lock, re-read: a run appended meanwhile joins the new level too. StoreError when the run
        is no longer there (trimmed since it was read) or cannot be accepted. An acceptance is the one
        write that rewrites a history's earlier lines (their segment and status change)."""
        try:
            with self._locked():
                history = self.read(path)
                runs = list(history.runs)
                index = next((i for i, r in enumerate(runs) if r.provenance == first), None)
                if index is None:
                    gone = f"the run of {first.created} is no longer in the history"
                    raise StoreError(f"{path}: {gone}; nothing accepted")
                try:
                    runs = accepted_from(runs, index, acceptance)
                except ValueError as exc:
                    raise StoreError(f"{path}: {exc}; nothing accepted") from None
                if path.suffix == LOG_SUFFIX:
                    self._rewrite(path, runs)
                else:  # a history of the older layout: accepted and converted
                    target = path.with_suffix(LOG_SUFFIX)
                    self._rewrite(target, runs)
                    path.unlink()
        except OSError as exc:
            why = exc.strerror or exc
            raise StoreError(f"{path}: cannot write the baseline ({why}); {_advice(exc, self.root)}") from None
        return []

    # ---- converting a store of the older layout -------------------------------------------------

    def migrate(self) -> list[str]:
        """Convert every history of the older layout to layout 3, losslessly (every run, its floats as
        written, fingerprint, provenance, segment, status, acceptance, the newest run's records); lines
        that say what was done. Also done by the first append."""
        try:
            with self._locked():
                self._migrated = True
                return self._migrate_locked()
        except OSError as exc:
            why = exc.strerror or exc
            raise StoreError(f"{self.root}: cannot convert the store ({why}); {_advice(exc, self.root)}") from None

    def _migrate_locked(self) -> list[str]:
        legacy = self.legacy_paths()
        if not legacy:
            return []
        converted, aside = 0, []
        for path in legacy:
            try:
                baseline = read_baseline(path)
            except NewerSchemaError as exc:
                raise StoreError(
                    f"{path}: refusing to overwrite a baseline of schema_version {exc.version}, newer than this "
                    f"pytest-specperf ({pytest_specperf.__version__}) writes (schema_version {SCHEMA_VERSION}): a "
                    "newer pytest-specperf stored it and converting it would lose data; upgrade pytest-specperf "
                    "(or delete the file to start a new baseline with this version)"
                ) from None
            except StoreError as exc:
                aside.append(f"{_move_aside(path, 'unreadable').name} ({exc})")
                continue
            simulated = is_simulated(baseline.fingerprint)
            key = baseline.measurement.key
            target = self.path_for(key, simulated=simulated)
            shadowed = path == self.legacy_path_for(key) and self.legacy_path_for(key, simulated=True).exists()
            if has_history(target) or (simulated and shadowed):
                aside.append(_move_aside(path, "simulated" if simulated else "converted").name)
                continue
            self._rewrite(target, list(baseline.runs))
            path.unlink()
            converted += 1
        lines = [
            f"{self.location}: converted {converted} histor{'y' if converted == 1 else 'ies'} to the append-only "
            f"layout {LAYOUT} (every run kept as it was; an older pytest-specperf no longer reads this store)"
        ]
        if aside:
            lines.append(f"{self.location}: kept aside, not converted: {', '.join(aside)}")
        return lines

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


def verdict_window(baseline: StoredBaseline) -> StoredBaseline:
    """The part of a history the verdict reads: the newest `VERDICT_NIGHTS` nights and the level they
    are held against (`newest_nights`): verdict/level.py reads no further back. The whole history is
    `entries()`' (`specperf history`, the dashboard, backtests)."""
    runs = newest_nights(list(baseline.runs), VERDICT_NIGHTS)
    if len(runs) == len(baseline.runs):
        return baseline
    return dataclasses.replace(baseline, runs=tuple(runs))


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


def _key_stem(path: Path) -> tuple[str, str]:
    """A history file's workload and level, and its layer: what pairs it with a reference's."""
    layer = "sim" if path.parent.parent.name == SIM_DIR else ""
    return layer, path.name.split(".")[0]


def _last_line(path: Path, block: int = 65536) -> bytes:
    """The last complete line of `path`, read from its end (a year's history is not read for it)."""
    with path.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        data = b""
        while size > 0:
            step = min(block, size)
            size -= step
            handle.seek(size)
            data = handle.read(step) + data
            lines = data.rstrip(b"\n").rsplit(b"\n", 1)
            if len(lines) == 2 or size == 0:
                return lines[-1]
    return b""


def _move_aside(path: Path, why: str) -> Path:
    """Rename a file that is about to be replaced to `<name>.<why>-<UTC time>`: kept, out of the way.

    The new name does not end in `.json`, so the store no longer reads it, and it says why it is there.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.{why}-{stamp}")
    os.replace(path, target)
    return target


def _replace_records(path: Path, parted: bool, text: str) -> None:
    """The newest run's records of the history `path`: in its parts' folder once it has parts (named to
    end with its tag, store/parts.py), else beside it as before parts; the other place's file removed."""
    where, other = records_path(path), legacy_records_path(path)
    if not parted:
        where, other = other, where
    replace_records(where, text)
    other.unlink(missing_ok=True)


def _set_aside(path: Path, why: str) -> Path:
    """`_move_aside` of a history: its file and its parts' folder (the records in it with them); the
    path of the first one moved."""
    moved = [_move_aside(p, why) for p in (path, parts_dir(path)) if p.exists()]
    return moved[0]


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
