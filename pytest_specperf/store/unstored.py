"""Tonight's runs that could not be stored, kept in a file: `specperf store FILE` appends them later.

A night of GPU time must not be lost because the store could not be written at its end (a full disk,
a read-only mount, a push the token may not make). The runs are kept exactly as they would have been
stored, each with its run id, segment start and status, so appending them later gives the history the
store would have had; a run the history already holds (an earlier, partial attempt) is not added twice.

Where the file is kept matters as much as what it holds: pytest's temporary folder keeps only its last
three sessions, so a file there is gone after three more runs. It is kept beside the store instead, in
`<store>/unstored/<date>-<session>/runs.json` for a folder store (one level deeper than a history, so no
listing of the store reads it as one), else, and for a git store (whose work tree is a temporary clone),
in the user's cache folder, `$XDG_CACHE_HOME/pytest-specperf/unstored/` (`~/.cache/...` by default),
which outlives every session and is writable when the store's own folder is not (`kept_paths`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pytest_specperf.common.jsonfile import atomic_write, read_json_object
from pytest_specperf.config.location import StoreLocation
from pytest_specperf.errors import StoreError
from pytest_specperf.store.records import StoredRun, dumps, read_run

KIND = "pytest-specperf-unstored-runs"
SCHEMA_VERSION = 1
#: The folder of kept runs, in a folder store and in the user's cache folder.
UNSTORED_DIR = "unstored"
#: The file of one session's kept runs, in a folder of its own (`<date>-<session>`).
RUNS_FILE = "runs.json"


def user_cache_dir() -> Path:
    """The plugin's folder in the user's cache (XDG): lasting, per user, writable where a home is."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-specperf"


def kept_paths(location: StoreLocation, session: str, day: date | None = None) -> list[Path]:
    """Where a session keeps the runs it could not store, in the order tried: beside a folder store
    (`<store>/unstored/<day>-<session>/runs.json`), then the user's cache folder; a git store has only
    the latter. The folder names the day (UTC, so a listing sorts by night) and the session (so sessions
    never overwrite each other)."""
    folder = f"{(day or datetime.now(UTC).date()).isoformat()}-{session}"
    beside = [location.path / UNSTORED_DIR / folder / RUNS_FILE] if location.path is not None else []
    return [*beside, user_cache_dir() / UNSTORED_DIR / folder / RUNS_FILE]


@dataclass(frozen=True)
class PendingRun:
    """A run as tonight's session meant to append it: into a new segment (`--specperf-update`) or not."""

    run: StoredRun
    new_segment: bool


@dataclass(frozen=True)
class Unstored:
    """What a session could not store: the store it meant (its setting, credentials never in it)."""

    store: str
    history: int
    runs: tuple[PendingRun, ...]


def write_unstored(path: Path, unstored: Unstored) -> None:
    """Write the runs atomically; a file that cannot be written either is the caller's to report."""
    document = {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "store": unstored.store,
        "history": unstored.history,
        "runs": [{"new_segment": p.new_segment, "run": p.run.to_dict()} for p in unstored.runs],
    }
    atomic_write(path, dumps(document))


def read_unstored(path: Path) -> Unstored:
    """The runs a session kept; StoreError names the file and what is wrong with it."""
    data = read_json_object(path, StoreError, "file of unstored runs")
    if data.get("kind") != KIND:
        raise StoreError(
            f"{path}: not a file of unstored runs (kind={data.get('kind')!r}); `specperf store` reads the file "
            "a session kept when its store could not be written"
        )
    if data.get("schema_version") != SCHEMA_VERSION:
        raise StoreError(f"{path}: schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}")
    try:
        runs = tuple(_pending(entry) for entry in data["runs"])
        return Unstored(str(data["store"]), int(data["history"]), runs)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StoreError(f"{path}: corrupt file of unstored runs: {exc!r}") from exc


def _pending(entry: dict[str, Any]) -> PendingRun:
    body = entry["run"]
    return PendingRun(read_run(body, segment=int(body["segment"])), bool(entry["new_segment"]))
