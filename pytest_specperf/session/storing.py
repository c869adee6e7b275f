"""Tonight's runs into their histories: which may enter, how each counts, and the store's answer.

Only the process that sees every verdict stores: the controller under xdist (after every worker
handed in its results), else the one pytest process. `--specperf-update` starts a new segment ("this
run is the new normal"), `--specperf-record` appends to the current one. A run is left out when a
test of it errored, its baseline is INCOMPARABLE (record only), a request failed or a sanity check
warned (`unfit_to_store`: `not_stored` says why; `--specperf-update-force` stores it anyway). A
session cut short (Ctrl-C, SIGTERM, a time limit) stores the keys whose measurement completed and
whose every check ran, by the same rules, and holds back the others, named with why (`held`). A
REGRESSION or SUSPECT night is stored, marked (`status_of`): it counts in neither the level nor the
spread, but change points see it. A stored run is one server start. A store that cannot be written
makes the row ERROR (one line) and the session fail: a nightly job must not go green while its
history silently stops growing. The night is not lost: its runs are kept in a file beside the store, or
in the user's cache folder when that cannot be written (store/unstored.py `kept_paths`), which lasts
beyond later sessions, and `specperf store FILE` appends it once the store is fixed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.session.baselines import Baselines
from pytest_specperf.session.outcomes import Outcomes
from pytest_specperf.store.base import Store
from pytest_specperf.store.records import SaveResult, Summary, new_run, runs_word
from pytest_specperf.store.unstored import PendingRun, Unstored, write_unstored
from pytest_specperf.verdict.verdicts import Verdict


def unfit_to_store(measurement: Measurement, verdicts: Sequence[Verdict], *, updating: bool) -> str | None:
    """Why this run must not enter the history at all (None: it may). What is left out is a run whose
    numbers may be disturbed; a failed night is stored, marked (`status_of`)."""
    if Verdict.ERROR in verdicts:
        return "a test of it errored"
    if Verdict.REGRESSION in verdicts and updating:
        return "a check MISSED (REGRESSION)"
    if Verdict.INCOMPARABLE in verdicts and not updating:
        return "its baseline is INCOMPARABLE (another setup); --specperf-update starts a history for this one"
    if measurement.error_count:
        return f"{measurement.error_count} of {measurement.request_count} requests failed"
    if measurement.warnings:
        return f"sanity warning: {measurement.warnings[0]}"
    return None


def status_of(verdicts: Sequence[Verdict], *, updating: bool) -> str:
    """How tonight's runs of a key count in its history: refused after a REGRESSION, suspect after a
    SUSPECT check, else accepted (verdict/nightly.py stored_status); `--specperf-update` makes them
    the new normal whatever they are."""
    if updating:
        return "accepted"
    if Verdict.REGRESSION in verdicts:
        return "refused"
    return "suspect" if Verdict.SUSPECT in verdicts else "accepted"


class Recorder:
    """Stores a session's runs and remembers what happened: saved, not stored (and why), failed."""

    def __init__(
        self,
        store: Store,
        *,
        session_id: str,
        history: int,
        suite_dir: Path | None,
        updating: bool,
        forced: bool,
        progress: Callable[[str], None] | None = None,
        unstored_paths: Sequence[Path] = (),
    ) -> None:
        self.store = store
        #: where to keep the runs the store fails, in the order tried (store/unstored.py `kept_paths`)
        self.unstored_paths = tuple(unstored_paths)
        self.session_id = session_id
        self.history = history
        self.suite_dir = suite_dir
        self.updating = updating
        self.forced = forced
        self.progress = progress
        self.saved: dict[MeasurementKey, SaveResult] = {}
        self.not_stored: dict[MeasurementKey, str] = {}
        #: the keys a session cut short left out whatever `--specperf-update-force` says, and why
        self.held: dict[MeasurementKey, str] = {}
        self.failed = False
        self.warnings: list[str] = []
        #: every run tonight meant to store, as built: kept in a file when the store fails them
        self.pending: list[PendingRun] = []
        #: why the store failed and where the night's runs were kept (None: kept nowhere), once it did
        self.failure: str | None = None
        self.kept_in: Path | None = None

    def prepare(self) -> None:
        """Make the histories readable before anything is measured: a shared store fetches them here, so
        an unreachable remote is an error now (StoreError), not after a night of measuring."""
        self.warnings += self.store.prepare()
        for line in self.warnings:
            self._say(line)

    def store_all(
        self,
        measurements: Mapping[MeasurementKey, Measurement],
        outcomes: Outcomes,
        baselines: Baselines,
        held: Mapping[MeasurementKey, str] | None = None,
        rows: Mapping[MeasurementKey, Verdict] | None = None,
    ) -> None:
        """Append the session's measurements to their histories, after all their checks ran; `held`
        names the ones a session cut short must leave out, and why (`--specperf-update-force` does not
        store those: their checks never ran, or their rounds are not all there). `rows` is the verdict
        each key's row of the report shows: a run is marked by it as well as by its tests', so the
        history (and the dashboard that reads it) says what the summary said of the night; a reference
        no test checks is SUSPECT in the table and must not be stored as accepted."""
        held = held or {}
        self.held.update(held)
        self.not_stored.update(held)
        for key in measurements:  # the report compares with the history as it was before tonight
            baselines.readable(key)
        for key, measurement in sorted(measurements.items(), key=lambda kv: kv[0].label):
            if key in held:
                continue
            verdicts = outcomes.of(key)
            reason = None if self.forced else unfit_to_store(measurement, verdicts, updating=self.updating)
            if reason is not None:
                self.not_stored[key] = reason
                continue
            row = (rows or {}).get(key)
            status = status_of([*verdicts, *([row] if row is not None else [])], updating=self.updating)
            runs = [
                PendingRun(
                    new_run(
                        measurement.of_start(start) if measurement.starts > 1 else measurement,
                        suite_dir=self.suite_dir,
                        session=self.session_id,
                        status=status,
                    ),
                    new_segment=self.updating and start == 0,
                )
                for start in range(measurement.starts)  # a stored run is one server start
            ]
            self.pending += runs
            try:
                results = [
                    self.store.append(pending.run, new_segment=pending.new_segment, history=self.history)
                    for pending in runs
                ]
                # "last → tonight": the newest night stored before, then tonight's starts together
                self.saved[key] = dataclasses.replace(
                    results[-1], old=results[0].old, new=Summary.of(measurement), new_segment=results[0].new_segment
                )
            except SpecperfError as exc:  # the row says ERROR and why; the session fails (plugin.py)
                outcomes.record_error(key, str(exc))
                self._fail(str(exc))
        self._publish(outcomes)
        if self.failed:
            self._keep_pending()

    def _publish(self, outcomes: Outcomes) -> None:
        """A shared store's saved runs go out (commit and push); if they cannot, their rows say ERROR."""
        try:
            lines = self.store.publish()
        except SpecperfError as exc:  # saved in the work tree only: not stored for anyone else
            for key in self.saved:
                outcomes.record_error(key, str(exc))
            self.saved.clear()
            self._fail(str(exc))
            return
        for line in lines:
            self._say(line)

    def _fail(self, reason: str) -> None:
        self.failed = True
        self.failure = self.failure or reason

    def _keep_pending(self) -> None:
        """Keep every run tonight meant to store in a file, so that `specperf store` can append them later:
        in the first of `unstored_paths` that can be written (a store's folder that refused the runs may
        refuse this file too)."""
        if not self.unstored_paths or not self.pending:
            return
        unstored = Unstored(self.store.location, self.history, tuple(self.pending))
        refused = []
        for path in self.unstored_paths:
            try:
                write_unstored(path, unstored)
            except OSError as exc:  # the same full disk, say: the next place, else the night is lost, and why
                refused.append(f"{path} ({exc.strerror or exc})")
                continue
            self.kept_in = path
            return
        self.failure = f"{self.failure}; keeping its runs failed too: {'; '.join(refused)}"

    def failure_line(self) -> str | None:
        """The session's last line when the store failed: what, why, and how the night is stored later."""
        if not self.failed:
            return None
        line = f"pytest-specperf: tonight's runs were NOT stored: {self.failure}"
        if self.kept_in is not None:
            verb = "is" if len(self.pending) == 1 else "are"
            line += (
                f"; the {runs_word(self.pending)} {verb} kept in {self.kept_in} (it outlasts later sessions): "
                f"once the store is fixed, `specperf store {self.kept_in}` stores {'it' if verb == 'is' else 'them'}"
            )
        return line

    def _say(self, line: str) -> None:
        if self.progress:
            self.progress(line)
