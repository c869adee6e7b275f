"""Where run histories live: the records (records.py), the `Store` protocol (base.py) and its backends.

`open_store` picks the backend from the `store` setting (config/location.py), as pytest-benchmark's
`load_storage` picks one by URI: a path is the file store (file.py), ``git:<branch>`` or
``git:<url>#<branch>`` the git store (git.py). A new backend is one module implementing `Store`
and one branch here; the verdict code never sees which one it reads.
"""

from __future__ import annotations

from pathlib import Path

from pytest_specperf.config.location import StoreLocation
from pytest_specperf.store.base import Store
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.git import GitStore

__all__ = ["FileStore", "GitStore", "Store", "open_store"]


def open_store(location: StoreLocation, *, work_dir: Path | None = None, follower: bool = False) -> Store:
    """The store at `location`. Nothing is read or fetched until `prepare` (or the first read).

    `work_dir` is where a remote store keeps its local copy (a temporary directory when None);
    a `follower` (a pytest-xdist worker) reads the copy its controller prepared there, and never
    fetches or publishes.
    """
    if location.is_git:
        return GitStore(location, work_dir=work_dir, follower=follower)
    assert location.path is not None
    return FileStore(location.path)
