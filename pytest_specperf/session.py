"""The state of one pytest session: the plan, the server pool and the shared measurements.

Data flows one way: config → plan → pool/launch → measure → checks → store/report. This object
owns the middle of that flow so the pytest hooks in `plugin.py` stay thin.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .config import SpecperfConfig
from .errors import ServerError, SpecperfError
from .markers import SpecperfMarker, Target
from .pool import RunningServer, ServerPool
from .records import Measurement, MeasurementKey
from .store import BaselineStore, SaveResult, StoredBaseline
from .verdict import Evaluation, Limits, evaluate

if TYPE_CHECKING:
    from .analysis import Report


@dataclass
class Options:
    """Command-line switches that change behaviour (not the config)."""

    update: bool = False
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
    target: Target
    marker: SpecperfMarker | None = None


@dataclass
class SpecperfSession:
    """Plan, servers and measurements of a session; one instance per pytest process."""

    config: SpecperfConfig
    options: Options
    run_dir: Path
    progress: Callable[[str], None] | None = None
    planned: dict[str, PlannedTest] = field(default_factory=dict)
    measurements: dict[MeasurementKey, Measurement] = field(default_factory=dict)
    failures: dict[MeasurementKey, SpecperfError] = field(default_factory=dict)
    remaining_uses: Counter[str] = field(default_factory=Counter)
    evaluations: dict[str, tuple[MeasurementKey, Evaluation]] = field(default_factory=dict)
    saved: dict[MeasurementKey, SaveResult] = field(default_factory=dict)
    _baselines: dict[MeasurementKey, StoredBaseline | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pool = ServerPool(
            self.config,
            self.run_dir,
            keep_servers=self.options.keep_servers,
            progress=self.progress,
            max_concurrency=self.max_concurrency,
        )
        from .measure import Measurer  # imports the HTTP client only when a suite is configured

        self.measurer = Measurer(self.config, self.progress)
        self.store = BaselineStore(self.config.store)

    # ---- planning -------------------------------------------------------------------------

    def plan(self, tests: list[PlannedTest]) -> None:
        """Record what every collected test needs, in run order."""
        self.planned = {t.nodeid: t for t in tests}
        self.remaining_uses = Counter(t.target.server for t in tests)

    def max_concurrency(self, server: str) -> int:
        levels = [t.target.concurrency for t in self.planned.values() if t.target.server == server]
        if server == self.config.reference:
            levels += [k.concurrency for k in self.reference_keys()]
        return max([level for level in levels if level] or [1])

    def reference_keys(self) -> list[MeasurementKey]:
        """Reference measurements the plan needs: every (workload, level) a speculative test uses."""
        keys = {}
        for test in self.planned.values():
            target = test.target
            if target.measured and target.server != self.config.reference and self.config.reference_server:
                key = MeasurementKey(self.config.reference, target.workload, target.concurrency)  # type: ignore[arg-type]
                keys[key] = None
        return list(keys)

    def group_order(self, targets: list[Target | None]) -> list[int]:
        """Sort keys that run each server's tests together, the reference's first."""
        order: dict[str, int] = {self.config.reference: 0}
        keys = []
        for target in targets:
            if target is None:
                keys.append(-1)
                continue
            order.setdefault(target.server, len(order))
            keys.append(order[target.server])
        return keys

    # ---- servers and measurements ------------------------------------------------------------

    def server(self, name: str) -> RunningServer:
        return self.pool.acquire(name)

    def measurement(self, target: Target) -> Measurement:
        """The shared measurement of a target, measured on first request."""
        assert target.workload is not None and target.concurrency is not None
        key = MeasurementKey(target.server, target.workload, target.concurrency)
        if key.server == self.config.reference:
            self.measure_reference()
        return self._measure(key)

    def reference_measurement(self, target: Target) -> Measurement | None:
        if self.config.reference_server is None or target.server == self.config.reference:
            return None
        key = MeasurementKey(self.config.reference, target.workload, target.concurrency)  # type: ignore[arg-type]
        if key not in self.measurements and key not in self.failures:
            self.measure_reference()
        return self._measure(key)

    def measure_reference(self) -> None:
        """Measure every planned reference workload in one stretch, while its server is up."""
        missing = [k for k in self.reference_keys() if k not in self.measurements and k not in self.failures]
        for key in missing:
            try:
                self._measure(key)
            except SpecperfError:
                continue  # remembered in self.failures, raised to the tests that need it
        if self.remaining_uses[self.config.reference] <= 0:
            self.pool.release(self.config.reference)

    def _measure(self, key: MeasurementKey) -> Measurement:
        if key in self.failures:
            raise self.failures[key]
        if key in self.measurements:
            return self.measurements[key]
        workload = self.config.workloads[key.workload]
        try:
            server = self.pool.acquire(key.server)
            measurement = self.measurer.measure(
                server, workload, key.concurrency, is_reference=key.server == self.config.reference
            )
        except SpecperfError as exc:
            self.failures[key] = exc
            raise
        self.measurements[key] = measurement
        self._save(measurement)
        return measurement

    # ---- baselines and checks -------------------------------------------------------------------

    def baseline(self, key: MeasurementKey) -> StoredBaseline | None:
        """The stored baseline of a measurement (read once; StoreError names a bad file)."""
        if key not in self._baselines:
            self._baselines[key] = self.store.load(key)
        return self._baselines[key]

    def _readable_baseline(self, key: MeasurementKey) -> StoredBaseline | None:
        """The baseline for a report row; a bad file was already reported by the tests using it."""
        try:
            return self.baseline(key)
        except SpecperfError:
            return None

    def _save(self, measurement: Measurement) -> None:
        if self.options.update:
            suite_dir = self.config.source.parent if self.config.source else None
            self.saved[measurement.key] = self.store.save(measurement, suite_dir=suite_dir)

    def limits(self, marker: SpecperfMarker | None, workload: str) -> Limits:
        """Tolerances: marker > config (> defaults, already in the config)."""
        m = marker
        return Limits(
            max_regression=m.max_regression if m and m.max_regression is not None else self.config.max_regression,
            max_regression_accept_length=(
                m.max_regression_accept_length
                if m and m.max_regression_accept_length is not None
                else self.config.max_regression_accept_length
            ),
            max_error_rate=(
                m.max_error_rate
                if m and m.max_error_rate is not None
                else self.config.workloads[workload].max_error_rate
            ),
        )

    def evaluate(self, nodeid: str, result: Measurement, reference: Measurement | None) -> Evaluation:
        """All checks of a test; while any is inconclusive, measure more rounds (up to max_rounds)."""
        planned = self.planned.get(nodeid)
        marker = planned.marker if planned else None
        key = result.key
        baseline = None if self.options.update else self.baseline(key)
        limits = self.limits(marker, key.workload)
        while True:
            evaluation = evaluate(result, reference, marker, limits, baseline, updating=self.options.update)
            if evaluation.missed or not evaluation.inconclusive:
                break
            if len(result.rounds) >= self.config.effective_max_rounds:
                break
            server = self.pool.acquire(key.server)
            self.measurer.extend(result, server, self.config.workloads[key.workload], 1)
            self._save(result)
        self.evaluations[nodeid] = (key, evaluation)
        return evaluation

    def finished(self, nodeid: str) -> None:
        """A test is done: stop its server when no remaining test needs it."""
        test = self.planned.get(nodeid)
        if test is None:
            return
        name = test.target.server
        self.remaining_uses[name] -= 1
        if self.remaining_uses[name] <= 0 and not self.options.keep_servers:
            self.pool.release(name)

    def report(self) -> Report:
        """The session's results as one report model (terminal, Markdown and JSON render it)."""
        from .analysis import build_report

        baselines = {} if self.options.update else {k: self._readable_baseline(k) for k in self.measurements}
        return build_report(
            self.config, self.measurements, self.evaluations, baselines, self.saved, updating=self.options.update
        )

    def shutdown(self) -> list[RunningServer]:
        return self.pool.shutdown()


def server_error_message(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ServerError) else f"{type(exc).__name__}: {exc}"
