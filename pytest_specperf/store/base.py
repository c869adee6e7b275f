"""What the plugin asks of a store, whatever keeps the histories: the `Store` protocol.

The verdict code reads a key's history (`load`), the report and the `specperf` command list every
history (`entries`), and a session that records appends its runs (`save`, or `append` for a run
built before). A store that lives elsewhere than the local disk (a git branch today, a server
tomorrow) also needs two moments of the session: `prepare` before the first read (fetch; an
unreachable remote must fail here, before any server starts, not after an hour of measuring) and
`publish` after the last append (commit and push, merging with what other jobs pushed meanwhile).
`close` releases what `prepare` set up.

The folder and git backends keep the same documents (store/compact.py) in the same layout
(store/file.py), in a local directory, `root`, once prepared: pytest-xdist workers read that directory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.store.records import DEFAULT_HISTORY, Provenance, SaveResult, StoredBaseline, StoredRun


@runtime_checkable
class Store(Protocol):
    """A place where run histories live. Errors are `StoreError`, one line naming the place and the fix."""

    @property
    def location(self) -> str:
        """Where the histories live, as a report names it (credentials never shown)."""
        ...

    @property
    def title(self) -> str:
        """The suite's name, as a page of its histories is headed."""
        ...

    @property
    def root(self) -> Path:
        """The local directory the histories are read from and appended to, once prepared."""
        ...

    def prepare(self) -> list[str]:
        """Make the histories readable (fetch them); lines for the user that say what was done.

        Called once per session before any history is read, before any server starts."""
        ...

    def check_writable(self) -> None:
        """StoreError (one line: where, why, the fix) when this session's runs could not be stored.

        Called once, after `prepare`, by a session that will record, before any server starts: a store
        that cannot be written must be found before the night is measured, not after."""
        ...

    def load(self, key: MeasurementKey, *, simulated: bool = False) -> StoredBaseline | None:
        """The history of `key` (the simulator's layer or a real engine's); None when there is none."""
        ...

    def entries(self) -> list[StoredBaseline]:
        """Every stored history, in a stable order."""
        ...

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
        """Append tonight's run of `measurement` to its history (a new segment, or the current one);
        `status` is how the run counts (store/records.py StoredRun.status)."""
        ...

    def append(self, run: StoredRun, *, new_segment: bool = True, history: int = DEFAULT_HISTORY) -> SaveResult:
        """Append a run built before (`new_run`): what `save` does after building it, and how runs a
        session could not store are stored later (store/unstored.py). A run the history holds is kept once."""
        ...

    def accept(self, path: Path, first: Provenance, acceptance: str) -> list[str]:
        """Make the history at `path` (an entry's) accepted from its run `first` on, at once (a shared store
        pushes it); lines that say so. The one way besides `--specperf-update` the level moves."""
        ...

    def publish(self) -> list[str]:
        """Make the saved runs visible to everyone who reads the store (commit and push); lines that say so.

        Called once, after the session's last save; nothing to do when nothing was saved."""
        ...

    def publish_files(self, write: Callable[[Path], str]) -> list[str]:
        """Publish files made from the histories beside them (`write(root)` writes them and returns what
        they are), where every reader of the store sees them; lines that say so. A store that has no such
        place raises `StoreError` saying where to write them instead."""
        ...

    def close(self) -> None:
        """Release what `prepare` set up (a work tree); safe to call more than once."""
        ...
