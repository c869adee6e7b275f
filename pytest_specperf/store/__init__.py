"""Where run histories live: the records (records.py), the `Store` protocol (base.py) and its backends.

`open_store` picks the backend from the `store` setting (config/location.py), as pytest-benchmark's
`load_storage` picks one by URI: a path is the file store (file.py), ``git:<branch>`` or
``git:<url>#<branch>`` the git store (git.py), ``postgresql://host/db`` the PostgreSQL store
(postgres.py, which needs the optional psycopg). `BACKENDS` is the one table of them, by the
location's scheme: a new backend is one module implementing `Store`, one row here and its form of the
setting in config/location.py `LOCATIONS` (the config stage parses the setting before any store is
imported; a test keeps the two tables in step); the verdict code never sees which one it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pytest_specperf.config.location import StoreLocation
from pytest_specperf.store.base import Store
from pytest_specperf.store.compact import read_history
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.git import GitStore

__all__ = ["BACKENDS", "FileStore", "GitStore", "Store", "open_store", "read_history"]


def _file(location: StoreLocation, work_dir: Path | None, follower: bool) -> Store:
    assert location.path is not None
    return FileStore(location.path)


def _git(location: StoreLocation, work_dir: Path | None, follower: bool) -> Store:
    return GitStore(location, work_dir=work_dir, follower=follower)


def _postgresql(location: StoreLocation, work_dir: Path | None, follower: bool) -> Store:
    from pytest_specperf.store.postgres import PostgresStore  # psycopg is optional: imported when used

    return PostgresStore(location, work_dir=work_dir, follower=follower)


#: The backends by the scheme of their location (`StoreLocation.scheme`, one of config/location.py `LOCATIONS`).
BACKENDS: dict[str, Callable[[StoreLocation, Path | None, bool], Store]] = {
    "file": _file,
    "git": _git,
    "postgresql": _postgresql,
    "postgres": _postgresql,
}


def open_store(location: StoreLocation, *, work_dir: Path | None = None, follower: bool = False) -> Store:
    """The store at `location`. Nothing is read or fetched until `prepare` (or the first read).

    `work_dir` is where a remote store keeps its local copy (a temporary directory when None);
    a `follower` (a pytest-xdist worker) reads the copy its controller prepared there, and never
    fetches or publishes.
    """
    return BACKENDS[location.scheme](location, work_dir, follower)
