"""The state of one pytest session: the plan, the servers, the measurements, their verdicts and storing.

Data flows one way: config → plan → servers → measure → checks → store/report. `SpecperfSession`
owns the middle of that flow so the pytest hooks (plugin.py) and fixtures (fixtures.py) stay thin;
each concern is an object of its own:

- `Plan` (plan.py): what every collected test needs, in run order;
- `ServerUse` (usage.py): which tests are done, so a server stops when no test needs it any more;
- `Measurements` (measurements.py): each measurement made once and shared, the reference's first;
- `Baselines` (baselines.py): the stored histories, read once;
- `Looks` (looks.py): a test's checks at two fixed looks, with a second server start to confirm;
- `Outcomes` (outcomes.py): the verdicts and errors of each measurement's tests;
- `Recorder` (storing.py): tonight's runs into their histories;
- `WorkerPayload` (payload.py): what an xdist worker hands the controller.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_specperf.common import interrupts
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.cache import MeasurementCache
from pytest_specperf.measure.machinelock import MachineLock
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.options import Options
from pytest_specperf.servers.pool import RunningServer, ServerPool
from pytest_specperf.servers.registry import SharedRegistry
from pytest_specperf.session.baselines import Baselines
from pytest_specperf.session.looks import Looks
from pytest_specperf.session.measurements import Measurements
from pytest_specperf.session.outcomes import Outcomes
from pytest_specperf.session.payload import WorkerPayload
from pytest_specperf.session.plan import Plan, PlannedTest
from pytest_specperf.session.storing import Recorder
from pytest_specperf.session.usage import ServerUse
from pytest_specperf.store import open_store
from pytest_specperf.store.records import StoredBaseline
from pytest_specperf.store.unstored import kept_paths
from pytest_specperf.verdict.checks import Evaluation
from pytest_specperf.verdict.stats import Decision
from pytest_specperf.verdict.verdicts import Verdict

if TYPE_CHECKING:
    from pytest_specperf.measure.rounds import UpdateFingerprint
    from pytest_specperf.report.analysis import Report, Row, RowInputs


class SpecperfSession:
    """Plan, servers and measurements of a session; one instance per pytest process.

    `worker` is the pytest-xdist worker id (None without xdist); workers share servers and
    measurements through files in `shared_dir`, a folder of this session only (servers/registry.py,
    measure/cache.py). `update_fingerprint` adds a site's facts to each fingerprint (hookspec.py).
    """

    def __init__(
        self,
        config: SpecperfConfig,
        options: Options,
        run_dir: Path,
        *,
        progress: Callable[[str], None] | None = None,
        detail: Callable[[str], None] | None = None,
        worker: str | None = None,
        shared_dir: Path | None = None,
        session_id: str | None = None,
        update_fingerprint: UpdateFingerprint | None = None,
    ) -> None:
        from pytest_specperf.measure.rounds import Measurer  # the HTTP client, only once a suite is configured

        self.config, self.options, self.run_dir, self.worker = config, options, run_dir, worker
        self.session_id = session_id or uuid.uuid4().hex[:12]
        shared = shared_dir if worker else None  # under xdist: the folder of this session's workers
        self.registry = SharedRegistry(shared, worker, progress) if shared and worker else None
        self.plan = Plan(config)
        self.usage = ServerUse(self.plan, self.registry)
        self.pool = self._server_pool(progress)
        self.store = open_store(config.store, work_dir=run_dir / f"history-{self.session_id}", follower=bool(worker))
        self.measurements = Measurements(
            config,
            self.plan,
            self.pool,
            Measurer(config, progress, update_fingerprint, detail=detail),
            machine_lock=MachineLock(self.session_id),
            cache=MeasurementCache(shared) if shared else None,
            release=self.release_if_unused,
            progress=progress,
        )
        self.outcomes = Outcomes()
        self.baselines = Baselines(config, self.store, self.measurements.done)
        self.looks = Looks(
            config,
            self.plan,
            self.measurements,
            self.baselines,
            self.outcomes,
            updating=options.update,
            strict=self.strict,
        )
        self.recorder = self._recorder(progress)
        self._worker_pool_warnings: list[str] = []
        self._worker_tests: Counter[MeasurementKey] = Counter()  # under xdist: the workers' plans' tests per key
        self._rows: dict[MeasurementKey, Row] = {}  # each key's row, judged once (before storing)
        self._report: Report | None = None  # the session's report, built once (after storing)

    def _server_pool(self, progress: Callable[[str], None] | None) -> ServerPool:
        return ServerPool(
            self.config,
            self.run_dir,
            keep_servers=self.options.keep_servers,
            progress=progress,
            max_concurrency=self.plan.max_concurrency,
            registry=self.registry,
            still_needed=self.usage.still_needed,
            after_fork=interrupts.check,
        )

    def _recorder(self, progress: Callable[[str], None] | None) -> Recorder:
        config, options = self.config, self.options
        return Recorder(
            self.store,
            session_id=self.session_id,
            history=config.history,
            suite_dir=config.source.parent if config.source else None,
            updating=options.update,
            forced=options.update_force,
            progress=progress,
            unstored_paths=kept_paths(config.store, self.session_id),
        )

    @property
    def strict(self) -> bool:
        """The strict reading (`--specperf-strict` or `strict = true`)."""
        return self.options.strict or self.config.strict

    # ---- planning and servers ------------------------------------------------------------------

    def plan_tests(self, tests: Iterable[PlannedTest]) -> None:
        """Record what every collected test needs, in run order."""
        self.plan.set(tests)

    def server(self, name: str) -> RunningServer:
        """A running server; the reference measurements come first, so its server starts once."""
        self.measurements.measure_reference()
        return self.pool.acquire(name)

    def finished(self, nodeid: str) -> None:
        """A test is done: stop its server when no remaining test (on any worker) needs it."""
        server = self.usage.finished(nodeid)
        if server is not None:
            self.release_if_unused(server)

    def release_if_unused(self, server: str) -> None:
        if not self.usage.still_needed(server):
            self.pool.release(server)

    def shutdown(self) -> list[RunningServer]:
        """Stop every server; the ones `--specperf-keep-servers` keeps come back."""
        return self.pool.shutdown()

    # ---- measurements and checks ------------------------------------------------------------------

    def measurement(self, key: MeasurementKey) -> Measurement:
        """The shared measurement of a key, measured on first request."""
        return self.measurements.get(key)

    def reference_measurement(self, key: MeasurementKey) -> Measurement | None:
        return self.measurements.reference_of(key)

    def baseline(self, key: MeasurementKey) -> StoredBaseline | None:
        return self.baselines.of(key)

    def evaluate(self, nodeid: str, result: Measurement, reference: Measurement | None) -> Evaluation:
        return self.looks.evaluate(nodeid, result, reference)

    def record_error(self, key: MeasurementKey, reason: str) -> None:
        """A test of `key` errored inside the plugin (e.g. an unreadable baseline): its row says ERROR, and why."""
        self.outcomes.record_error(key, reason)

    # ---- storing ---------------------------------------------------------------------------------

    def prepare_store(self) -> None:
        self.recorder.prepare()
        if self.options.storing and self.worker is None:  # a store that cannot be written: found before any server
            self.store.check_writable()

    def store_results(self) -> None:
        """Append the session's measurements to their histories, after all their checks ran (storing.py);
        only the process that sees every verdict stores: the controller under xdist."""
        if self.options.storing and self.worker is None:
            rows = self.row_verdicts()  # the words the summary will use
            self.recorder.store_all(self.measurements.done, self.outcomes, self.baselines, rows=rows)

    def storing_interrupted(self) -> None:
        """A session cut short (Ctrl-C, SIGTERM, a time limit) stores what it would have stored of every
        key whose measurement completed and whose every check ran; the others are named, with why."""
        if self.options.storing and self.worker is None:
            held = self.unfinished()
            self.recorder.store_all(self.measurements.done, self.outcomes, self.baselines, held=held)

    def tests_per_key(self) -> Counter[MeasurementKey]:
        """The planned tests of each key (the controller under xdist plans nothing: its workers say)."""
        return Counter(self.plan.measurement_keys()) | self._worker_tests

    def unfinished(self) -> dict[MeasurementKey, str]:
        """The keys a session cut short must not store, and why: a measurement cut mid-way (its rounds
        are not all there), or one whose tests did not all run their checks (one verdict per test)."""
        tests = self.tests_per_key()
        cut = self.measurements.cut
        held = {key: f"{c.text}: the session was cut short" for key, c in cut.items()}
        for key in self.measurements.done:
            if key not in cut and len(self.outcomes.of(key)) < tests[key]:
                held[key] = "the session was cut short before its checks ran"
        return held

    @property
    def store_failed(self) -> bool:
        return self.recorder.failed

    def store_failure_line(self) -> str | None:
        """The session's last line when the store failed (why, and where tonight's runs were kept)."""
        return self.recorder.failure_line()

    def close_store(self) -> None:
        """Release the store's work tree when the session ends, not when the process exits: pytest run
        in-process (an IDE, `pytest.main`) leaves nothing behind. Safe to call more than once."""
        self.store.close()

    # ---- results -----------------------------------------------------------------------------------

    def has_results(self) -> bool:
        return bool(self.measurements.done or self.measurements.cut or self.errors())

    def report(self) -> Report:
        """The session's results as one report model (terminal, Markdown and JSON render it), built once:
        the first call after the session's runs were stored builds it, every later one is given the same."""
        if self._report is None:
            self._report = self._build_report()
        return self._report

    def _build_report(self) -> Report:
        from pytest_specperf.report.analysis import SessionFacts, build_report

        updating, recorder = self.options.update, self.recorder
        facts = SessionFacts(
            errors=self.errors(),
            second_starts={server: tuple(keys) for server, keys in self.looks.second_starts.items()},
            pool_warnings=(*self._worker_pool_warnings, *self.pool.report_lines),
            store_warnings=tuple(recorder.warnings),
            held=frozenset(recorder.held),
            update_accepts=self._update_accepts() if updating else {},
            judged=self._rows,
        )
        inputs = self._row_inputs()
        return build_report(
            self.config,
            dict(inputs.measurements),
            self.outcomes.verdicts,
            dict(inputs.baselines),
            recorder.saved,
            updating=updating,
            not_stored=recorder.not_stored,
            confirmations=self.looks.confirmations,
            searches=self.plan.searches,
            interrupted=self.measurements.cut,
            facts=facts,
        )

    def _row_inputs(self) -> RowInputs:
        from pytest_specperf.report.analysis import RowInputs

        updating, done = self.options.update, self.measurements.done
        return RowInputs(
            self.config,
            {**self.measurements.partial, **done},  # a measurement cut short keeps the rounds it completed
            self.outcomes.verdicts,
            {} if updating else {k: self.baselines.readable(k) for k in done},
            updating,
            self.plan.searches,
            self.measurements.cut,
        )

    def row_verdicts(self) -> dict[MeasurementKey, Verdict]:
        """The verdict each key's row will show, before its run is stored (the words a stored run keeps).
        The rows are kept: the report is built from them, so each key is judged once."""
        inputs = self._row_inputs()
        self._rows = {key: inputs.row(measurement) for key, measurement in self.measurements.done.items()}
        return {key: row.verdict for key, row in self._rows.items()}

    def _update_accepts(self) -> dict[MeasurementKey, str]:
        """What `--specperf-update` is about to accept: each key's night judged against the history it
        replaces, as a night without the flag would be (a REGRESSION or SUSPECT is said, never silent)."""
        from pytest_specperf.verdict.checks import Limits, evaluate

        found: dict[MeasurementKey, str] = {}
        for key, measurement in self.measurements.done.items():
            baseline = self.baselines.readable(key)
            if baseline is None:
                continue
            evaluation = evaluate(
                measurement,
                None,
                None,
                Limits.of(self.config, key.workload),
                baseline,
                updating=False,
                searches=self.plan.searches,
            )
            judged = [c for c in evaluation.checks if c.name.startswith("regression:") and c.beyond]
            if judged:
                worst_check = min(judged, key=lambda c: c.decision is not Decision.MISSED)
                verdict = "a REGRESSION" if worst_check.decision is Decision.MISSED else "SUSPECT"
                found[key] = f"{verdict}: {worst_check.message.splitlines()[0]}"
        return found

    def errors(self) -> dict[MeasurementKey, str]:
        """Measurements that could not be made, or whose tests errored, with the first line of why."""
        failed: dict[MeasurementKey, SpecperfError] = dict(self.measurements.failures)
        for key in self.plan.needed_keys():
            if key.server in self.pool.failed and key not in failed:
                failed[key] = self.pool.failed[key.server]  # the server never came up for it
        own = {key: str(exc).splitlines()[0] for key, exc in failed.items() if key not in self.measurements.done}
        return {**self.outcomes.worker_errors, **self.outcomes.test_errors, **own}

    def worker_payload(self) -> WorkerPayload:
        """What this xdist worker hands the controller for the summary and the store."""
        return WorkerPayload(
            measurements=tuple(self.measurements.done.values()),
            verdicts={k: tuple(vs) for k, vs in self.outcomes.verdicts.items()},
            errors=self.errors(),
            pool_warnings=tuple(self.pool.report_lines),
            confirmations=dict(self.looks.confirmations),
            second_starts=tuple(k for keys in self.looks.second_starts.values() for k in keys),
            tests=dict(self.tests_per_key()),
            cut={k: (c.rounds, c.planned) for k, c in self.measurements.cut.items()},
            partial=tuple(self.measurements.partial.values()),
        )

    def absorb(self, payload: WorkerPayload) -> None:
        """Merge a worker's results into this (controller) session, for the summary and the store."""
        done = self.measurements.done
        for measurement in payload.measurements:
            known = done.get(measurement.key)
            if known is None or len(measurement.rounds) > len(known.rounds):
                done[measurement.key] = measurement
        self.outcomes.worker_errors.update(payload.errors)
        self._worker_pool_warnings += payload.pool_warnings
        for key, verdicts in payload.verdicts.items():
            self.outcomes.verdicts.setdefault(key, []).extend(verdicts)
        for key, why in payload.confirmations.items():
            self.looks.confirmations.setdefault(key, why)
        for key in payload.second_starts:
            self.looks.second_starts.setdefault(key.server, []).append(key)
        self._absorb_cut(payload)

    def _absorb_cut(self, payload: WorkerPayload) -> None:
        """A worker's share of a session cut short: its plan's tests per key, and how far its cut measurements got."""
        from pytest_specperf.measure.rounds import Cut

        self._worker_tests |= Counter(payload.tests)  # the most any plan holds: every worker plans every test
        self.measurements.cut.update({key: Cut(*counts) for key, counts in payload.cut.items()})
        self.measurements.partial.update({m.key: m for m in payload.partial if m.key not in self.measurements.done})
