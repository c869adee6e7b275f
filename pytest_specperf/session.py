"""The state of one pytest session: the plan, the server pool and the shared measurements.

Data flows one way: config → plan → pool/launch → measure → checks → store/report. This object
owns the middle of that flow so the pytest hooks in `plugin.py` stay thin.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.errors import SpecperfError, StalledServer, StoreError
from pytest_specperf.measure.cache import MeasurementCache
from pytest_specperf.measure.machinelock import Holding, MachineLock
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.servers.pool import RunningServer, ServerPool
from pytest_specperf.servers.registry import SharedRegistry
from pytest_specperf.store import open_store
from pytest_specperf.store.records import SaveResult, StoredBaseline, Summary, is_simulated
from pytest_specperf.verdict.checks import Evaluation, Limits, evaluate
from pytest_specperf.verdict.markers import Case, SpecperfMarker
from pytest_specperf.verdict.verdicts import Verdict

if TYPE_CHECKING:
    from pytest_specperf.report.analysis import Report


@dataclass
class Options:
    """Command-line switches that change behaviour (not the config)."""

    update: bool = False
    record: bool = False
    update_force: bool = False
    strict: bool = False
    keep_servers: bool = False
    on_incomparable: str = "fail"
    report: str = "short"
    json_path: str | None = None
    markdown_path: str | None = None
    bmf_path: str | None = None
    plot_dir: str | None = None
    verbose: int = 0


@dataclass
class PlannedTest:
    """What one collected test item needs."""

    nodeid: str
    case: Case
    marker: SpecperfMarker | None = None


@dataclass
class SpecperfSession:
    """Plan, servers and measurements of a session; one instance per pytest process.

    `worker` is the pytest-xdist worker id (None without xdist); workers share servers and
    measurements through files in `shared_dir`, a folder of this session only (see registry.py).
    """

    config: SpecperfConfig
    options: Options
    run_dir: Path
    progress: Callable[[str], None] | None = None
    worker: str | None = None
    shared_dir: Path | None = None
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    planned: dict[str, PlannedTest] = field(default_factory=dict)
    measurements: dict[MeasurementKey, Measurement] = field(default_factory=dict)
    failures: dict[MeasurementKey, SpecperfError] = field(default_factory=dict)
    verdicts: dict[MeasurementKey, list[Verdict]] = field(default_factory=dict)
    saved: dict[MeasurementKey, SaveResult] = field(default_factory=dict)
    not_stored: dict[MeasurementKey, str] = field(default_factory=dict)
    store_failed: bool = False
    store_warnings: list[str] = field(default_factory=list)
    confirmations: dict[MeasurementKey, str] = field(default_factory=dict)  # why a night was decided on one start
    second_starts: dict[str, list[MeasurementKey]] = field(default_factory=dict)  # keys measured again, by server
    restarts: int = 0
    _starts: dict[MeasurementKey, int] = field(
        default_factory=dict
    )  # the server start each measurement was last measured on
    _done: Counter[str] = field(default_factory=Counter)
    _baselines: dict[MeasurementKey, StoredBaseline | None] = field(default_factory=dict)
    _absorbed_errors: dict[MeasurementKey, str] = field(default_factory=dict)
    _test_errors: dict[MeasurementKey, str] = field(default_factory=dict)
    _absorbed_pool_warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from pytest_specperf.measure.rounds import Measurer  # imports the HTTP client only when a suite is configured

        shared = self.worker is not None and self.shared_dir is not None
        self.registry = (
            SharedRegistry(self.shared_dir, self.worker, self.progress) if shared else None  # type: ignore[arg-type]
        )
        self.cache = MeasurementCache(self.shared_dir) if shared else None  # type: ignore[arg-type]
        self.pool = ServerPool(
            self.config,
            self.run_dir,
            keep_servers=self.options.keep_servers,
            progress=self.progress,
            max_concurrency=self.max_concurrency,
            registry=self.registry,
            still_needed=self.still_needed,
        )
        self.measurer = Measurer(self.config, self.progress)
        self.store = open_store(
            self.config.store, work_dir=self.run_dir / f"history-{self.session_id}", follower=self.worker is not None
        )
        self.machine_lock = MachineLock(self.session_id)

    # ---- planning -------------------------------------------------------------------------

    def plan(self, tests: list[PlannedTest]) -> None:
        """Record what every collected test needs, in run order."""
        self.planned = {t.nodeid: t for t in tests}

    def uses(self, server: str) -> int:
        return sum(1 for t in self.planned.values() if t.case.server == server)

    def max_concurrency(self, server: str) -> int:
        levels = [key.concurrency for key in self._planned_measurements() if key.server == server]
        if server == self.config.reference:
            levels += [k.concurrency for k in self.reference_keys()]
        return max(levels or [1])

    def reference_keys(self) -> list[MeasurementKey]:
        """Reference measurements the plan needs: every (workload, level) a speculative test uses."""
        keys: dict[MeasurementKey, None] = {}
        if self.config.reference_server:
            for key in self._planned_measurements():
                if key.server != self.config.reference:
                    keys[self._reference_key(key)] = None
        return list(keys)

    def _planned_measurements(self) -> list[MeasurementKey]:
        return [t.case for t in self.planned.values() if isinstance(t.case, MeasurementKey)]

    def _reference_key(self, key: MeasurementKey) -> MeasurementKey:
        return MeasurementKey(self.config.reference, key.workload, key.concurrency)

    def group_order(self, cases: list[Case | None]) -> list[int]:
        """Sort keys that run each server's tests together, the reference's first."""
        order: dict[str, int] = {self.config.reference: 0}
        keys = []
        for case in cases:
            if case is None:
                keys.append(-1)
                continue
            order.setdefault(case.server, len(order))
            keys.append(order[case.server])
        return keys

    # ---- servers and measurements ------------------------------------------------------------

    def server(self, name: str) -> RunningServer:
        """A running server; the reference measurements come first, so its server starts once."""
        self.measure_reference()
        return self.pool.acquire(name)

    def measurement(self, key: MeasurementKey) -> Measurement:
        """The shared measurement of a key, measured on first request."""
        return self._measure(key)

    def reference_measurement(self, key: MeasurementKey) -> Measurement | None:
        """The reference's measurement of `key`'s workload and level; None when there is none, or when
        it failed (its own row says ERROR; a check that needs it says so: `evaluate`)."""
        if self.config.reference_server is None or key.server == self.config.reference:
            return None
        self.measure_reference()
        try:
            return self._measure(self._reference_key(key))
        except SpecperfError:
            return None

    def measure_reference(self) -> None:
        """Measure every planned reference workload in one stretch, while its server is up."""
        missing = [k for k in self.reference_keys() if not self._known(k)]
        if not missing:
            return
        for key in missing:
            with contextlib.suppress(SpecperfError):  # remembered in self.failures for the tests needing it
                self._measure(key)
        self._release_if_unused(self.config.reference)

    def _known(self, key: MeasurementKey) -> bool:
        if key in self.measurements or key in self.failures:
            return True
        cached = self.cache.get(key) if self.cache else None
        if cached is not None:
            self.measurements[key] = cached
        return cached is not None

    def _measure(self, key: MeasurementKey) -> Measurement:
        if key in self.failures:
            raise self.failures[key]
        if self._known(key):
            return self.measurements[key]
        try:
            server = self.pool.acquire(key.server)
            with self._session_lock():
                if self._known(key):  # another xdist worker measured it meanwhile
                    return self.measurements[key]
                with self.machine_lock.hold(key.label) as holding:
                    self.measurements[key] = self.measurer.measure(
                        server,
                        self.config.workloads[key.workload],
                        key.concurrency,
                        is_reference=key.server == self.config.reference,
                    )
                self._starts[key] = server.start
                self._note(self.measurements[key], holding)
                self._publish(self.measurements[key])
        except StalledServer as exc:  # hung: every further request would wait out the stall again
            self.failures[key] = exc
            self.pool.discard(key.server, exc)
            raise
        except SpecperfError as exc:
            self.failures[key] = exc
            raise
        return self.measurements[key]

    def _session_lock(self) -> contextlib.AbstractContextManager[Any]:
        """Under xdist, the session's own lock: taken before the machine's (always this order, no deadlock).

        It guards "did another worker measure it meanwhile?" and publishing; the machine's lock
        (measure/machinelock.py) keeps every measurement on this machine, of any session, apart in time.
        """
        return self.cache.lock if self.cache is not None else contextlib.nullcontext()

    def _note(self, measurement: Measurement, holding: Holding) -> None:
        """A wait becomes a note of the measurement, an overlap a warning: its report and baseline say so."""
        wait = holding.wait_note()
        if wait is not None:
            measurement.notes.append(wait)
        measurement.warnings += holding.disturbances()
        if self.progress:
            for line in [*([wait] if wait else []), *holding.disturbances()]:
                self.progress(f"{measurement.key.label}: {line}")

    def _publish(self, measurement: Measurement) -> None:
        if self.cache is not None:
            self.cache.put(measurement)

    def prepare_store(self) -> None:
        """Make the histories readable before anything is measured: a shared store fetches them here, so
        an unreachable remote is an error now (StoreError), not after a night of measuring."""
        self.store_warnings += self.store.prepare()
        for line in self.store_warnings:
            if self.progress:
                self.progress(line)

    @property
    def storing(self) -> bool:
        return self.options.update or self.options.record or self.options.update_force

    def store_results(self) -> None:
        """Append the session's measurements to their histories, after all their checks ran.

        Only the process that sees every verdict stores: the controller under xdist (after every
        worker handed in its results), else the one pytest process.

        `--specperf-update` starts a new segment ("this run is the new normal"), `--specperf-record`
        appends to the current one. A run with a failed check (REGRESSION), a test error, an
        INCOMPARABLE baseline (record only), request errors or sanity warnings is not stored, and
        `not_stored` says why; `--specperf-update-force` stores it anyway. A store that cannot be
        written makes the row ERROR (one line) and the session fail: a nightly job must not go
        green while its history silently stops growing.
        """
        if not self.storing or self.worker is not None:
            return
        suite_dir = self.config.source.parent if self.config.source else None
        for key in self.measurements:  # the report compares with the history as it was before tonight
            self._readable_baseline(key)
        for key, measurement in sorted(self.measurements.items(), key=lambda kv: kv[0].label):
            reason = None if self.options.update_force else self._unfit_to_store(key, measurement)
            if reason is not None:
                self.not_stored[key] = reason
                continue
            try:
                for start in range(measurement.starts):  # a stored run is one server start
                    self.saved[key] = self.store.save(
                        measurement.of_start(start) if measurement.starts > 1 else measurement,
                        suite_dir=suite_dir,
                        new_segment=self.options.update and start == 0,
                        history=self.config.history,
                        session=self.session_id,
                        status=self._status(key),
                    )
            except SpecperfError as exc:  # the row says ERROR and why; the session fails (plugin.py)
                self.record_error(key, str(exc))
                self.store_failed = True
        self._publish_store()

    def _publish_store(self) -> None:
        """A shared store's saved runs go out (commit and push); if they cannot, their rows say ERROR."""
        try:
            lines = self.store.publish()
        except SpecperfError as exc:  # saved in the work tree only: not stored for anyone else
            for key in self.saved:
                self.record_error(key, str(exc))
            self.saved.clear()
            self.store_failed = True
            return
        for line in lines:
            if self.progress:
                self.progress(line)

    def storing_interrupted(self) -> None:
        """An interrupted session stores nothing: its tests' checks did not all run."""
        if self.storing and self.worker is None:
            for key in self.measurements:
                self.not_stored[key] = "the session was interrupted before every check ran"

    def _unfit_to_store(self, key: MeasurementKey, measurement: Measurement) -> str | None:
        """Why this run must not enter the history at all (None: it may). A REGRESSION or SUSPECT
        night is stored, marked (`_status`): it counts in neither the level nor the spread, but change
        points see it; what is left out here is a run whose numbers may be disturbed."""
        verdicts = self.verdicts.get(key, [])
        if Verdict.ERROR in verdicts:
            return "a test of it errored"
        if Verdict.REGRESSION in verdicts and self.options.update:
            return "a check MISSED (REGRESSION)"
        if Verdict.INCOMPARABLE in verdicts and not self.options.update:
            return "its baseline is INCOMPARABLE (another setup); --specperf-update starts a history for this one"
        if measurement.error_count:
            return f"{measurement.error_count} of {measurement.request_count} requests failed"
        if measurement.warnings:
            return f"sanity warning: {measurement.warnings[0]}"
        return None

    def _status(self, key: MeasurementKey) -> str:
        """How tonight's runs of `key` count in its history: refused after a REGRESSION, suspect after
        a SUSPECT check, else accepted (verdict/nightly.py stored_status); `--specperf-update` makes
        them the new normal whatever they are."""
        verdicts = self.verdicts.get(key, [])
        if self.options.update:
            return "accepted"
        if Verdict.REGRESSION in verdicts:
            return "refused"
        return "suspect" if Verdict.SUSPECT in verdicts else "accepted"

    def finished(self, nodeid: str) -> None:
        """A test is done: stop its server when no remaining test (on any worker) needs it."""
        test = self.planned.get(nodeid)
        if test is None:
            return
        if self.registry is not None:
            self.registry.finish(nodeid)
        else:
            self._done[test.case.server] += 1
        self._release_if_unused(test.case.server)

    def _release_if_unused(self, name: str) -> None:
        if not self.still_needed(name):
            self.pool.release(name)

    def still_needed(self, name: str) -> bool:
        """Whether a test not yet finished (on any xdist worker) uses this server."""
        if self.registry is not None:
            done = self.registry.finished()
            self._done = Counter(self.planned[n].case.server for n in done if n in self.planned)
        return self._done[name] < self.uses(name)

    def record_error(self, key: MeasurementKey, reason: str) -> None:
        """A test of `key` errored inside the plugin (e.g. an unreadable baseline): its row says ERROR, and why."""
        self.verdicts.setdefault(key, []).append(Verdict.ERROR)
        self._test_errors.setdefault(key, reason.strip().splitlines()[0] if reason.strip() else "error")

    # ---- baselines and checks -------------------------------------------------------------------

    def baseline(self, key: MeasurementKey) -> StoredBaseline | None:
        """The stored baseline of a measurement (read once; StoreError names a bad file)."""
        if key not in self._baselines:
            try:
                self._baselines[key] = self.store.load(key, simulated=self._simulated(key))
            except StoreError as exc:
                if "upgrade" in str(exc):  # a newer schema already says what to do
                    raise
                raise StoreError(
                    f"{exc}; restore it from version control (git checkout -- FILE) or delete it to store a new "
                    "baseline with --specperf-update"
                ) from None
        return self._baselines[key]

    def _simulated(self, key: MeasurementKey) -> bool:
        """Whether `key` is measured on the simulator: its fingerprint says so, else the launcher."""
        measurement = self.measurements.get(key)
        if measurement is not None and measurement.fingerprint is not None:
            return is_simulated(measurement.fingerprint)
        return self.config.launcher == "sim"

    def _readable_baseline(self, key: MeasurementKey) -> StoredBaseline | None:
        """The baseline for a report row; a bad file was already reported by the tests using it."""
        try:
            return self.baseline(key)
        except SpecperfError:
            return None

    def limits(self, marker: SpecperfMarker | None, workload: str) -> Limits:
        """Tolerances: marker > config (> defaults, already in the config)."""
        return Limits.of(self.config, workload, marker)

    def evaluate(self, nodeid: str, result: Measurement, reference: Measurement | None) -> Evaluation:
        """All checks of a test, at two looks fixed in advance (verdict/nightly.py): after `rounds`
        rounds; when not every check is MET, after the server start is extended to `max_rounds`
        rounds and, when a check a start's offset can explain is still beyond its threshold, after
        `rounds` more rounds on a second server start (the first start's extra rounds make the
        estimate on both starts sharper: first-night detection of a -10% change 86% against 84%)."""
        planned = self.planned.get(nodeid)
        marker = planned.marker if planned else None
        key = result.key
        baseline = None if self.options.update else self.baseline(key)
        reference_baseline = (
            self._readable_baseline(reference.key) if reference is not None and not self.options.update else None
        )
        limits = self.limits(marker, key.workload)
        self._check_reference(key, marker, reference)

        def look() -> Evaluation:
            return evaluate(
                result, reference, marker, limits, baseline, updating=self.options.update,
                reference_baseline=reference_baseline, strict=self.strict, searches=self.searches,
            )  # fmt: skip

        evaluation = look()
        if not evaluation.settled and self._extend(result):
            evaluation = look()
        if not evaluation.settled and evaluation.confirmable and self._second_start(result, evaluation):
            evaluation = look()
        self.verdicts.setdefault(key, []).append(evaluation.verdict)
        return evaluation

    @property
    def strict(self) -> bool:
        return self.options.strict or self.config.strict

    @property
    def searches(self) -> int:
        """Key series searched for changes tonight: every planned measurement's four."""
        return max(1, 4 * len(self.planned_keys()))

    def _extend(self, result: Measurement) -> bool:
        """The second look's extra rounds: up to `max_rounds` on the start the rounds so far were
        measured on, if that start is still the one running (False: nothing was added)."""
        key = result.key
        missing = self.config.effective_max_rounds - len(result.rounds)
        if missing <= 0 or result.starts > 1 or self._starts.get(key) != self.pool.current_start(key.server):
            return False
        self._measure_more(result, lambda server: self.measurer.extend(
            result, server, self.config.workloads[key.workload], missing))  # fmt: skip
        return True

    def _second_start(self, result: Measurement, evaluation: Evaluation) -> bool:
        """Re-measure on another server start than the first: restart the server, unless it was
        restarted since (for another measurement: one restart confirms every check of a server that
        fails together). False when no second start can be had; the confirmation log says why."""
        key = result.key
        if result.starts > 1 or not self.config.confirm:
            return False
        beyond = ", ".join(c.name for c in evaluation.checks if c.beyond and c.start_sensitive)
        if self._starts.get(key) == self.pool.current_start(key.server):
            why = self.pool.cannot_restart(key.server)
            if why is None and self.restarts >= self.config.max_restarts:
                cap = self.config.max_restarts
                why = f"the session already restarted {self.restarts} server(s) (max_restarts = {cap})"
            if why is not None:
                self.confirmations[key] = f"decided on one server start: {why}"
                return False
            self.restarts += 1
            self.pool.restart(key.server, f"to confirm {key.label} ({beyond}) on a second start")
        self._measure_more(result, lambda server: self.measurer.add_start(
            result, server, self.config.workloads[key.workload]))  # fmt: skip
        self.second_starts.setdefault(key.server, []).append(key)
        return True

    def _measure_more(self, result: Measurement, measure: Callable[[RunningServer], None]) -> None:
        server = self.pool.acquire(result.key.server)
        with self._session_lock():
            with self.machine_lock.hold(result.key.label) as holding:
                measure(server)
            self._note(result, holding)
            self._publish(result)
        self._starts[result.key] = server.start

    def _check_reference(
        self, key: MeasurementKey, marker: SpecperfMarker | None, reference: Measurement | None
    ) -> None:
        """A check against a reference whose measurement failed cannot be made: the test errors and
        says why, while this server's own measurement stays reported (not a 0 tok/s regression)."""
        failure = self.failures.get(self._reference_key(key)) if reference is None else None
        if failure is None or marker is None:
            return
        needs = [name for name, on in (("min_speedup", marker.min_speedup_at(key.concurrency) is not None),
                                       ("lossless", marker.lossless is not None)) if on]  # fmt: skip
        if needs:
            raise SpecperfError(
                f"{', '.join(needs)} of {key.label} cannot be checked: the reference server "
                f"{self.config.reference!r} was not measured ({str(failure).splitlines()[0]})"
            )

    # ---- results ------------------------------------------------------------------------------

    def report(self) -> Report:
        """The session's results as one report model (terminal, Markdown and JSON render it)."""
        from pytest_specperf.report.analysis import build_report, second_start_events

        baselines = {} if self.options.update else {k: self._readable_baseline(k) for k in self.measurements}
        report = build_report(
            self.config, self.measurements, self.verdicts, baselines, self.saved, updating=self.options.update,
            not_stored=self.not_stored, confirmations=self.confirmations, searches=self.searches,
        )  # fmt: skip
        report.errors = dict(sorted(self.errors().items()))
        report.warnings[:0] = [f"ERROR {key.label}: {message}" for key, message in report.errors.items()]
        report.warnings += second_start_events(report.rows, self.second_starts)
        report.second_starts = {server: list(keys) for server, keys in self.second_starts.items()}
        report.warnings += self.pool_warnings()
        report.warnings += self.store_warnings

        report.warnings += [f"change point: {change.sentence}" for row in report.rows for change in row.changes]
        report.warnings += [
            f"not stored {key.label}: {why} (--specperf-update-force stores it anyway)"
            for key, why in sorted(self.not_stored.items(), key=lambda kv: kv[0].label)
        ]
        return report

    def errors(self) -> dict[MeasurementKey, str]:
        """Measurements that could not be made, with the first line of why."""
        failed = dict(self.failures)
        for key in self.planned_keys():
            if key.server in self.pool.failed and key not in failed:
                failed[key] = self.pool.failed[key.server]  # the server never came up for it
        own = {key: str(exc).splitlines()[0] for key, exc in failed.items() if key not in self.measurements}
        return {**self._absorbed_errors, **self._test_errors, **own}

    def pool_warnings(self) -> list[str]:
        """Restarts, and stops that left a process or GPU memory behind (ours and absorbed workers')."""
        return [*self._absorbed_pool_warnings, *self.pool.report_lines]

    def planned_keys(self) -> list[MeasurementKey]:
        """Every measurement the plan needs: the tests' own and the reference's."""
        keys = dict.fromkeys(self._planned_measurements())
        return [*keys, *(k for k in self.reference_keys() if k not in keys)]

    def worker_payload(self) -> dict[str, Any]:
        """What an xdist worker hands the controller for the summary (JSON-able)."""
        return {
            "measurements": [m.to_dict() for m in self.measurements.values()],
            "verdicts": [
                [k.server, k.workload, k.concurrency, [v.value for v in vs]] for k, vs in self.verdicts.items()
            ],
            "errors": [[k.server, k.workload, k.concurrency, message] for k, message in self.errors().items()],
            "pool_warnings": self.pool.report_lines,
            "saved": [
                [
                    k.server,
                    k.workload,
                    k.concurrency,
                    str(s.path),
                    s.old.to_dict() if s.old else None,
                    s.new.to_dict(),
                    s.segment,
                    s.runs,
                    s.new_segment,
                ]
                for k, s in self.saved.items()
            ],
            "confirmations": [[k.server, k.workload, k.concurrency, why] for k, why in self.confirmations.items()],
            "second_starts": {s: [[k.workload, k.concurrency] for k in keys] for s, keys in self.second_starts.items()},
        }

    def absorb(self, payload: dict[str, Any]) -> None:
        """Merge a worker's results into this (controller) session, for the summary."""
        for data in payload["measurements"]:
            measurement = Measurement.from_dict(data)
            known = self.measurements.get(measurement.key)
            if known is None or len(measurement.rounds) > len(known.rounds):
                self.measurements[measurement.key] = measurement
        for server, workload, level, message in payload.get("errors", []):
            self._absorbed_errors[MeasurementKey(server, workload, level)] = message
        self._absorbed_pool_warnings += payload.get("pool_warnings", [])
        for server, workload, level, values in payload["verdicts"]:
            self.verdicts.setdefault(MeasurementKey(server, workload, level), []).extend(Verdict(v) for v in values)
        for server, workload, level, path, old, new, segment, runs, new_segment in payload["saved"]:
            self.saved[MeasurementKey(server, workload, level)] = SaveResult(
                Path(path), Summary(**old) if old else None, Summary(**new),
                segment=segment, runs=runs, new_segment=new_segment,
            )  # fmt: skip
        for server, workload, level, why in payload.get("confirmations", []):
            self.confirmations.setdefault(MeasurementKey(server, workload, level), why)
        for server, keys in payload.get("second_starts", {}).items():
            self.second_starts.setdefault(server, []).extend(MeasurementKey(server, w, c) for w, c in keys)

    def shutdown(self) -> list[RunningServer]:
        return self.pool.shutdown()
